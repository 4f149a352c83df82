"""The FFT callbacks of mathpy's SFFT backend, as closures over one :class:`~.params.Params` (numba compiles them with
the sizes as constants). All transforms are complex128 (SFFT works in float64); offsets are converted to int64 first
(numba would mix uint64 and int64 into float64).

==========================  ===========================================================================================
callback                    what it does, fused into which transform
==========================  ===========================================================================================
``field_prolog``            forward 2-D transforms of the E fields: reads the image pair (user data ``I + iJ``) and
                            loads ``I cx^i cy^j``, J or ``cx^p cy^q`` (the fields are never written out)
``product_prolog``          the correlations' transform along the columns, one row of frequencies k0 of one slot
                            (a, b) per batch entry: loads ``conj(F_a) F_b`` times ``exp(-2 pi i k1 R1 / N1)``, which
                            moves the lags [-R1, R1] to the columns 0..2 R1 (spectra, phases and the slot table in
                            its user data)
``window_epilog``           stores only those columns
``kernel_prolog``           forward 2-D transforms of the solved kernels: draws each kernel image from the kernel
                            table (user data), zero outside [-w0, w0] x [-w1, w1]
``multiplier_epilog``       the second forward transform of the fields: stores ``M_e F_e`` with the multipliers
                            ``-K_e^`` (kernel fields), 1 (J) and ``-b_pq`` (background), so that the difference's
                            spectrum is their sum over e
==========================  ===========================================================================================
"""

import numpy as np

__all__ = ["callbacks"]


def callbacks(params, layout):
    """The callbacks for ``params``; ``layout`` gives where the correlation buffer's user data keeps its tables
    (``phase_at``, ``pair_at``), its slots per frequency row (``slots_per_row``) and the window width."""
    p = params
    n0, n1, nn = p.N0, p.N1, p.pixels
    fij, fab, l1, w0, w1, dk, db = p.Fij, p.Fab, p.L1, p.w0, p.w1, p.DK, p.DB
    j_field = p.J
    inv_n0, inv_n1 = 1.0 / n0, 1.0 / n1
    half0, half1 = n0 // 2, n1 // 2
    slots, slots_per_row, width = len(p.slots), layout.slots_per_row, layout.width
    phase_at, pair_at = layout.phase_at, layout.pair_at

    def field_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        e = o // nn
        pix = o - e * nn
        if e == j_field:
            return complex(user_info[pix].imag, 0.0)
        row = pix // n1
        col = pix - row * n1
        value = 1.0
        order = db
        index = e - fij - 1
        if e < fij:
            value = user_info[pix].real
            order = dk
            index = e
        i = 0                                  # exponents (i, j) of polynomial `index`, SFFT's order (i major)
        while index > order - i:
            index -= order + 1 - i
            i += 1
        cx = (row + 1) * inv_n0
        cy = (col + 1) * inv_n1
        for _ in range(i):
            value *= cx
        for _ in range(index):
            value *= cy
        return complex(value, 0.0)

    def product_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        row = o // n1
        k1 = o - row * n1
        k0 = row // slots_per_row
        slot = row - k0 * slots_per_row
        if slot >= slots:                      # padding rows of the buffer
            return complex(0.0, 0.0)
        pair = user_info[pair_at + slot]
        k = k0 * n1 + k1
        fa = user_info[np.int64(pair.real) * nn + k]
        fb = user_info[np.int64(pair.imag) * nn + k]
        return fa.conjugate() * fb * user_info[phase_at + k1]

    def window_epilog(data_out, offset, value, user_info, unused):
        o = np.int64(offset)
        if o - (o // n1) * n1 < width:
            data_out[offset] = value

    def kernel_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        e = o // nn
        pix = o - e * nn
        a = pix // n1
        b = pix - a * n1
        if a > half0:
            a -= n0
        if b > half1:
            b -= n1
        if -w0 <= a <= w0 and -w1 <= b <= w1:
            return complex(user_info[e * fab + (a + w0) * l1 + b + w1], 0.0)
        return complex(0.0, 0.0)

    def multiplier_epilog(data_out, offset, value, user_info, unused):
        o = np.int64(offset)
        e = o // nn
        if e < fij:
            data_out[offset] = -(value * user_info[o])
        elif e == j_field:
            data_out[offset] = value
        else:
            data_out[offset] = -(value * user_info[j_field * nn + e - fij - 1])

    return dict(field_prolog=field_prolog, product_prolog=product_prolog, window_epilog=window_epilog,
                kernel_prolog=kernel_prolog, multiplier_epilog=multiplier_epilog)
