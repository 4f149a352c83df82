"""The pipeline on mathpy: the same algorithm as :mod:`.array_pipeline`, with the pointwise work fused into the FFTs.

Seven stateful ``mathpy.fft.FFT`` plans are made once per configuration and executed for every image pair; all stamps
of an image go through each plan as one batch. Their prologs and epilogs (Python functions, compiled by numba: to
LTO-IR that cuFFT links into its kernels on the GPU, to CPU loops on the CPU) do what the array pipeline does in
separate passes over memory, so that an image pair costs thirteen device operations besides the detection (one
copy and a fill before the stamps plan, the seven plans, the solve kernel, a copy and a fill before the kernel
plan, one copy after the difference plan):

==========================  =========================================================================================
plan (transform)            fused into it
==========================  =========================================================================================
stamps (2-D C2C, in place)  prolog: cuts the stamps out of the image pair (reflecting at the border), divides by the
                            sky noise and packs science + i * reference (one complex FFT transforms both); epilog:
                            J^(0) = 0 (the reference's mean is the background's business)
correlations (1-D C2C       prolog: unpacks I^ and J^ and forms Q = J^* J^ + i J^* I^, whose inverse transform is
along the rows, in place)   the autocorrelation of J plus i times its cross-correlation with I, modulated so that the
                            lags [-2w, 2w] land on rows and columns 0..4w; three more columns per stamp carry the
                            ramp projections of the spectra's zero column and zero row and the image sums (the
                            background blocks of the normal equations); epilog: stores only rows 0..4w
lags (1-D C2C along the     epilog: scales by 1/P^2, puts the ridge on lag 0 and stores only the columns 0..4w
columns of those rows)
kernel + PSF (2-D C2C, in   prolog: draws each stamp's solved kernel and its PSF model (from their compact
place)                      coefficients) as kernel + i * PSF, zero elsewhere
norm grid (2-D C2C, in      prolog: the same on the small ``norm_grid``
place)
norm sums (2-D C2C, in      prolog: |P^|^2 / (1 + |K^|^2) from the norm grid's spectra; the transform's zero
place)                      frequency is their sum; epilog: there, 1 / (sigma_D ||phi (x) P||)
difference (2-D C2C)        prolog: unpacks all four spectra, forms phi^ (I^ - K^ J^) and conj(P^) phi^ D'^ and packs
                            them as D'^ + i S^; epilog: normalises, removes the background plane and scales the
                            score, storing the stamp cores only
==========================  =========================================================================================

Between them: one kernel (:mod:`.gathered_solve`) gathers every stamp's normal equations from where the correlation
plans stored their source (one index table, ``sfft.Tables.system_index`` mapped onto the correlation buffer), solves
them in float64 and stores the solution where the kernel + PSF plan's prolog reads it; then the PSF models are copied
next to it, and one copy splits the stamp cores into the contiguous float32 difference and score images that
detection reads. ``solver="lu"`` gathers the systems and solves them with the array pipeline's batched LU
(``sfft.solve``) instead.

A callback reads one array of user data (fixed when the plan is made) and the FFT's own input; the buffers below are
laid out so that every plan finds what it reads there (:class:`Layout`): arrays the callbacks read are persistent and
refilled for each pair, and a callback's user data has the shape of the layout it sees (``mathpy.fft.Callback``'s
rule), with compact contents at its start where they are smaller. Prologs of in-place plans read only their user data
(never the array being transformed in place); the difference plan's prolog reads its input at k and -k, which an
out-of-place C2C transform leaves intact; epilogs store only at their own offset. The plans run on the array
package's stream that is current when the pipeline is made.
"""

import dataclasses
import math

import numpy as np

import mathpy.fft

from . import gathered_solve, sfft
from .array_pipeline import NullTimer

__all__ = ["MathpyPipeline", "Layout", "callbacks"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the callbacks find their data: sizes and offsets (in elements) derived from a :class:`~.sfft.Config`.

    Correlation buffer (complex64, ``lags`` rows used): ``(P, B, E)`` with ``E = P + 3`` columns per stamp: the P
    frequencies k2 of Q, then the column projection, the row projection and the sums. Its float32 view followed by
    the three constants is the source the normal equations are gathered from.
    Spectra buffer (complex64, the correlation plan's user data, shape ``(P, B E)``): the stamps' packed spectra
    ``I^ + i J^`` (B, P, P) at its start, then two tables of P values: the modulation ``exp(-2 pi i 2w m / P)`` and
    the projection ``conj(ramp^(m)) / P`` times that modulation.
    Model buffer (float32, ``(B, P, P)``): per stamp the solution (L kernel taps, then b0, bu, bv), then the PSF
    models, then sigma_science, then (complex64, at an even offset) the norm sums plan's ``(B, G, G)`` operand, whose
    zero frequencies hold the score normalisations.
    """

    config: sfft.Config

    @property
    def row(self):
        """E: correlation columns per stamp."""
        return self.config.stamp + 3

    @property
    def columns(self):
        """C = B E: the correlation buffer's row length."""
        return self.config.batch * self.row

    @property
    def unknowns(self):
        """N = L + 3 coefficients per stamp."""
        return self.config.taps + 3

    @property
    def phase_offset(self):
        return self.config.batch * self.config.stamp ** 2

    @property
    def projection_offset(self):
        return self.phase_offset + self.config.stamp

    @property
    def psf_offset(self):
        return self.config.batch * self.unknowns

    @property
    def sigma_offset(self):
        return self.psf_offset + self.config.batch * (2 * self.config.psf_radius + 1) ** 2

    @property
    def norm_offset(self):
        """Start (float32 elements) of the norm sums' complex64 operand in the model buffer: even, so aligned."""
        return 2 * ((self.sigma_offset + 2) // 2)

    def check(self):
        """ValueError when a buffer cannot hold what the layout puts in it."""
        c = self.config
        b, p, g = c.batch, c.stamp, c.norm_grid
        if b * p * p < c.n * c.n + 1:
            raise ValueError(f"the stamps ({b} x {p}^2) must hold the image ({c.n}^2) plus one value")
        if self.norm_offset + 2 * b * g * g > b * p * p:
            raise ValueError(f"norm_grid {g} is too large for stamps of {p}^2: the model buffer (B P^2 floats) must "
                             f"hold the coefficients and B norm grids")
        if self.sigma_offset > b * g * g:
            raise ValueError(f"norm_grid {g} is too small: the norm grid plan reads the coefficients from its first "
                             f"B G^2 floats")


def callbacks(config):
    """The callbacks for ``config``, as closures over its sizes (numba compiles them with the sizes as constants).
    Offsets are converted to int64 first: numba would mix uint64 and int64 into float64."""
    c, lay = config, Layout(config)
    p, pp, core, pad, grid, n = c.stamp, c.stamp ** 2, c.core, c.pad, c.grid, c.n
    nn, lags, row, columns, unknowns = n * n, c.lags, lay.row, lay.columns, lay.unknowns
    w, r, g = c.kernel_radius, c.psf_radius, c.norm_grid
    gg = g * g
    kw, ps = 2 * w + 1, 2 * r + 1
    taps, shift = kw * kw, 2 * w
    phase_base, projection_base = lay.phase_offset, lay.projection_offset
    psf_base, sigma_at, norm_base = lay.psf_offset, lay.sigma_offset, lay.norm_offset
    f0, f05, f1 = np.float32(0), np.float32(0.5), np.float32(1)
    inv_pp, ridge, norm_scale = np.float32(1 / pp), np.float32(1 + c.ridge), np.float32(g)
    centre, inv_half_width = np.float32((p - 1) / 2), np.float32(2 / p)

    def stamps_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        b = o // pp
        rem = o - b * pp
        row_ = rem // p
        col = rem - row_ * p
        gy = b // grid
        y = gy * core - pad + row_
        x = (b - gy * grid) * core - pad + col
        if y < 0:
            y = -y
        elif y >= n:
            y = 2 * n - 2 - y
        if x < 0:
            x = -x
        elif x >= n:
            x = 2 * n - 2 - x
        v = user_info[y * n + x]      # science + i reference
        s = user_info[nn]             # 1/sigma_science + i / sigma_reference
        return complex(v.real * s.real, v.imag * s.imag)

    def stamps_epilog(data_out, offset, value, user_info, unused):
        if np.int64(offset) % pp == 0:  # k = 0 of a stamp: Z(0) = I^(0) + i J^(0), both real; J^(0) = 0
            data_out[offset] = complex(value.real, f0)
        else:
            data_out[offset] = value

    def correlation_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        k1 = o // columns
        j = o - k1 * columns
        b = j // row
        k2 = j - b * row
        base = b * pp
        if k2 < p:
            z = user_info[base + k1 * p + k2]
            zm = user_info[base + ((p - k1) % p) * p + (p - k2) % p]
            jr = (z.imag + zm.imag) * f05  # J^ = (Z - conj Z(-k)) / 2i
            ji = (zm.real - z.real) * f05
            ir = (z.real + zm.real) * f05  # I^ = (Z + conj Z(-k)) / 2
            ii = (z.imag - zm.imag) * f05
            # Q = |J^|^2 + i conj(J^) I^, times the modulation that shifts lag (-2w, -2w) to (0, 0)
            qr = jr * jr + ji * ji - (jr * ii - ji * ir)
            qi = jr * ir + ji * ii
            t = user_info[phase_base + (k1 + k2) % p]
            return complex(qr * t.real - qi * t.imag, qr * t.imag + qi * t.real)
        if k2 == p:                        # the zero column Z(k1, 0): projections on the row ramp v
            return user_info[base + k1 * p] * user_info[projection_base + k1]
        if k2 == p + 1:                    # the zero row Z(0, k1): projections on the column ramp u
            return user_info[base + k1] * user_info[projection_base + k1]
        if k1 == 0:                        # the sums: Z(0) = sum I + i sum J on every row
            return user_info[base]
        return complex(f0, f0)

    def correlation_epilog(data_out, offset, value, user_info, unused):
        if np.int64(offset) < lags * columns:  # rows 0..4w hold the lags -2w..2w
            data_out[offset] = value

    def lag_epilog(data_out, offset, value, user_info, unused):
        o = np.int64(offset)
        lag_row = o // columns
        j = o - lag_row * columns
        lag_col = j - (j // row) * row
        if lag_col < lags:
            v = value * inv_pp             # irfft2's 1/P^2
            if lag_row == shift and lag_col == shift:
                v = complex(v.real * ridge, v.imag)  # the diagonal of M: the autocorrelation at lag 0
            data_out[offset] = v

    def drawing(size):
        """A prolog drawing kernel + i PSF on a ``size`` grid per stamp from the model buffer's coefficients."""
        area, half_size = size * size, size // 2

        def draw_prolog(data_in, offset, user_info, unused):
            o = np.int64(offset)
            b = o // area
            rem = o - b * area
            dy = rem // size
            dx = rem - dy * size
            if dy > half_size:
                dy -= size
            if dx > half_size:
                dx -= size
            kernel = f0
            psf = f0
            if -w <= dy <= w and -w <= dx <= w:
                kernel = user_info[b * unknowns + (dy + w) * kw + dx + w]
            if -r <= dy <= r and -r <= dx <= r:
                psf = user_info[psf_base + b * ps * ps + (dy + r) * ps + dx + r]
            return complex(kernel, psf)
        return draw_prolog

    def norm_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        base = (o // gg) * gg
        rem = o - base
        k1 = rem // g
        k2 = rem - k1 * g
        z, zm = user_info[o], user_info[base + ((g - k1) % g) * g + (g - k2) % g]   # K^ + i P^ on the norm grid
        kr, ki = (z.real + zm.real) * f05, (z.imag - zm.imag) * f05
        pr, pi = (z.imag + zm.imag) * f05, (zm.real - z.real) * f05
        return complex((pr * pr + pi * pi) / (f1 + kr * kr + ki * ki), f0)

    def norm_epilog(data_out, offset, value, user_info, unused):
        o = np.int64(offset)
        if o % gg == 0:  # the zero frequency: sum_k |P^|^2 / (1 + |K^|^2); K^(0) = k0 = sum(K)
            k0 = user_info[o].real
            norm = (f1 + k0 * k0) * math.sqrt(value.real)
            if norm > f0:  # zero only for an all-zero PSF model (and in the CPU engine's dry run)
                data_out[offset] = complex(norm_scale / norm, f0)

    def difference_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        base = (o // pp) * pp
        rem = o - base
        k1 = rem // p
        k2 = rem - k1 * p
        m = base + ((p - k1) % p) * p + (p - k2) % p
        kz, kzm = data_in[o], data_in[m]       # K^ + i P^
        sz, szm = user_info[o], user_info[m]   # I^ + i J^
        k0 = data_in[base].real
        kr, ki = (kz.real + kzm.real) * f05, (kz.imag - kzm.imag) * f05
        pr, pi = (kz.imag + kzm.imag) * f05, (kzm.real - kz.real) * f05
        ir, ii = (sz.real + szm.real) * f05, (sz.imag - szm.imag) * f05
        jr, ji = (sz.imag + szm.imag) * f05, (szm.real - sz.real) * f05
        phi = math.sqrt((f1 + k0 * k0) / (f1 + kr * kr + ki * ki))
        dr = phi * (ir - (kr * jr - ki * ji))  # D'^ = phi (I^ - K^ J^)
        di = phi * (ii - (kr * ji + ki * jr))
        sr = phi * (pr * dr + pi * di)         # S^ = conj(P^) phi D'^
        si = phi * (pr * di - pi * dr)
        return complex(dr - si, di + sr)       # D'^ + i S^

    def difference_epilog(data_out, offset, value, user_info, unused):
        o = np.int64(offset)
        b = o // pp
        rem = o - b * pp
        row_ = rem // p
        col = rem - row_ * p
        if pad <= row_ < pad + core and pad <= col < pad + core:
            q = b * unknowns + taps                # b0, bu, bv after the kernel taps
            u = (np.float32(col) - centre) * inv_half_width
            v = (np.float32(row_) - centre) * inv_half_width
            plane = user_info[q] + user_info[q + 1] * u + user_info[q + 2] * v
            d = (value.real * inv_pp - plane) * user_info[sigma_at]
            s = (value.imag * inv_pp - plane) * user_info[norm_base + 2 * b * gg]
            data_out[offset] = complex(d, s)

    return dict(stamps_prolog=stamps_prolog, stamps_epilog=stamps_epilog, correlation_prolog=correlation_prolog,
                correlation_epilog=correlation_epilog, lag_epilog=lag_epilog, kernel_psf_prolog=drawing(p),
                norm_grid_prolog=drawing(g), norm_prolog=norm_prolog, norm_epilog=norm_epilog,
                difference_prolog=difference_prolog, difference_epilog=difference_epilog)


class MathpyPipeline:
    """``MathpyPipeline(config, xp=numpy, solver="fused")`` runs on mathpy's CPU execution space, ``xp=cupy`` on the GPU
    (the buffers live where the plans execute); ``run(...)`` subtracts one image pair (same arguments and results as
    :meth:`.ArrayPipeline.run`). ``solver``: "fused" (:mod:`.gathered_solve`: systems of at most
    ``gathered_solve.MAX_UNKNOWNS`` unknowns) or "lu" (the array pipeline's ``sfft.solve``)."""

    def __init__(self, config, xp=np, solver="fused"):
        c = self.config = config
        if solver not in ("fused", "lu"):
            raise ValueError(f"solver must be 'fused' or 'lu', got {solver!r}")
        lay = self.layout = Layout(config)
        lay.check()
        if solver == "fused":
            gathered_solve.check_unknowns(lay.unknowns)
        self.xp, self.tables = xp, sfft.Tables(config)
        p, b, g, e = c.stamp, c.batch, c.norm_grid, lay.row
        # Buffers the callbacks read (user data must have the shape of the layout the callback sees).
        self.pair = xp.zeros((b, p, p), np.complex64)             # science + i reference (n*n) and the 1/sigmas
        self.spectra = xp.asarray(self._spectra_buffer())          # packed stamp spectra, then two tables
        self.stamp_spectra = self.spectra.reshape(-1)[:b * p * p].reshape(b, p, p)
        correlations = xp.zeros(p * lay.columns + 2, np.complex64)  # then 3 constants in its float32 view
        self.correlations = correlations[:p * lay.columns].reshape(p, lay.columns)
        self._source = correlations.view(np.float32)
        self._source[2 * p * lay.columns:2 * p * lay.columns + 3] = xp.asarray(self.tables.constants)
        system_index = self._gather_index()
        self._system_index = xp.asarray(system_index)
        self.kernel_spectra = xp.zeros((b, p, p), np.complex64)   # K^ + i P^
        self.model = xp.zeros((b, p, p), np.float32)              # solution, PSF models, sigma, norm sums
        model = self.model.reshape(-1)
        self._solution = model[:b * lay.unknowns].reshape(b, lay.unknowns)
        self._fused_solve = (gathered_solve.GatheredSolve(xp, self._source, system_index, self._solution)
                             if solver == "fused" else None)
        self._psfs = model[lay.psf_offset:lay.sigma_offset].reshape(b, -1)
        self._sigma = model[lay.sigma_offset:lay.sigma_offset + 1]
        norm_sums = model[lay.norm_offset:lay.norm_offset + 2 * b * g * g].view(np.complex64).reshape(b, g, g)
        self.norm_spectra = xp.zeros((b, g, g), np.complex64)
        self._pixels = self.pair.reshape(-1)[:c.n * c.n].view(np.float32).reshape(c.n, c.n, 2)
        self._scales = self.pair.reshape(-1)[c.n * c.n:c.n * c.n + 1]

        cb = callbacks(config)
        Callback, FFT = mathpy.fft.Callback, mathpy.fft.FFT
        inplace = {"inplace": True}
        self.stamps_fft = FFT(self.stamp_spectra, axes=(1, 2), options=inplace)
        self.stamps_fft.plan(prolog=Callback(cb["stamps_prolog"], data=self.pair), epilog=cb["stamps_epilog"])
        self.correlation_fft = FFT(self.correlations, axes=(0,), options=inplace)
        self.correlation_fft.plan(prolog=Callback(cb["correlation_prolog"], data=self.spectra),
                                  epilog=cb["correlation_epilog"])
        lag_rows = self.correlations[:c.lags].reshape(c.lags, b, e)[:, :, :p]
        self.lag_fft = FFT(lag_rows, axes=(2,), options=inplace)
        self.lag_fft.plan(epilog=cb["lag_epilog"])
        self.kernel_fft = FFT(self.kernel_spectra, axes=(1, 2), options=inplace)
        self.kernel_fft.plan(prolog=Callback(cb["kernel_psf_prolog"], data=self.model))
        self.norm_fft = FFT(self.norm_spectra, axes=(1, 2), options=inplace)
        self.norm_fft.plan(prolog=Callback(cb["norm_grid_prolog"], data=model[:b * g * g].reshape(b, g, g)))
        self.norm_sum_fft = FFT(norm_sums, axes=(1, 2), options=inplace)
        self.norm_sum_fft.plan(prolog=Callback(cb["norm_prolog"], data=self.norm_spectra),
                               epilog=Callback(cb["norm_epilog"], data=self.norm_spectra))
        self.difference_fft = FFT(self.kernel_spectra, axes=(1, 2))
        self.difference_fft.plan(prolog=Callback(cb["difference_prolog"], data=self.stamp_spectra),
                                 epilog=Callback(cb["difference_epilog"], data=self.model))

    def _spectra_buffer(self):
        """The spectra buffer with its two tables filled (NumPy; the stamps plan fills the spectra)."""
        c, lay = self.config, self.layout
        p = c.stamp
        buffer = np.zeros((p, lay.columns), np.complex64)
        m = np.arange(p)
        phase = np.exp(-2j * np.pi * 2 * c.kernel_radius * m / p)
        ramp_hat = np.fft.fft(self.tables.ramp.astype(np.float64))
        flat = buffer.reshape(-1)
        flat[lay.phase_offset:lay.phase_offset + p] = phase
        flat[lay.projection_offset:lay.projection_offset + p] = np.conj(ramp_hat) / p * phase
        return buffer

    def _gather_index(self):
        """(B, N, N + 1) positions in the correlation buffer's float32 view (:attr:`_source`) of every stamp's
        augmented normal equations: ``sfft.Tables.system_index`` mapped through where the correlation plans store
        each part of the source."""
        c, lay, t = self.config, self.layout, self.tables
        w, lags, e, cols = c.kernel_radius, c.lags, lay.row, lay.columns
        b = np.arange(c.batch)[:, None]
        d = np.arange(-w, w + 1)[None, :]

        def at(lag_row, column, part):  # float32 index of (row, stamp, column), real (0) or imaginary (1) part
            return 2 * (lag_row * cols + b * e + column) + part

        lag = np.arange(lags)
        grid_rows, grid_cols = (a.reshape(1, -1) for a in np.meshgrid(lag, lag, indexing="ij"))
        parts = {"jj": at(grid_rows, grid_cols, 0), "ji": at(grid_rows, grid_cols, 1),
                 "rows": np.concatenate([at(2 * w - d, c.stamp + 1, 0), at(2 * w - d, c.stamp + 1, 1)], axis=1),
                 "columns": np.concatenate([at(2 * w - d, c.stamp, 0), at(2 * w - d, c.stamp, 1)], axis=1),
                 "totals": np.concatenate([at(2 * w, c.stamp + 2, 0), at(2 * w, c.stamp + 2, 1)], axis=1),
                 "constants": np.broadcast_to(2 * c.stamp * cols + np.arange(3), (c.batch, 3))}
        source = np.concatenate([parts[name] for name in sfft.Tables.SOURCE], axis=1)
        assert source.shape == (c.batch, t.source_size)
        index = source[:, t.system_index]
        return index.astype(np.int32 if index.max() < 2 ** 31 else np.int64)

    @property
    def plans(self):
        """The seven FFT plans, in the order they run."""
        return (self.stamps_fft, self.correlation_fft, self.lag_fft, self.kernel_fft, self.norm_fft,
                self.norm_sum_fft, self.difference_fft)

    def free(self):
        for plan in self.plans:
            plan.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _load(self, science, reference, sigma_science, sigma_reference):
        """Copy the image pair and its noise scales where the stamps plan's prolog reads them."""
        self.xp.stack((science, reference), axis=-1, out=self._pixels)
        self._scales[...] = complex(1 / sigma_science, 1 / sigma_reference)

    def _correlations(self):
        """The stamps' spectra through the two correlation plans: the normal equations' source."""
        self.correlation_fft.execute(direction="inverse")
        self.lag_fft.execute(direction="inverse")

    def _solve(self):
        """Every stamp's normal equations, gathered from their source, solved into the model buffer."""
        if self._fused_solve is not None:
            self._fused_solve()
        else:
            self.xp.copyto(self._solution, sfft.solve(self.xp, self._source[self._system_index]), casting="same_kind")

    def _images(self, stamps):
        """The difference and score images (2, n, n) float32 from the stamps' cores, which hold d + i s."""
        xp, c = self.xp, self.config
        images = xp.empty((2, c.n, c.n), np.float32)
        parts = stamps.view(np.float32).reshape(c.grid, c.grid, c.stamp, c.stamp, 2)
        cores = parts[:, :, c.pad:c.pad + c.core, c.pad:c.pad + c.core, :]       # (gy, gx, row, col, part)
        # one pass, in the stamps' order: each warp reads 128 contiguous bytes and writes 64 to each image
        xp.copyto(images.reshape(2, c.grid, c.core, c.grid, c.core).transpose(1, 3, 2, 4, 0), cores)
        return images

    def _correlate(self, science, reference, sigma_science, sigma_reference):
        """The stamps' spectra and the normal equations' source, for ``equations`` and ``fit``."""
        c = self.config
        sfft.check_inputs(c, science, reference, np.zeros((c.batch, 2 * c.psf_radius + 1, 2 * c.psf_radius + 1)),
                          sigma_science, sigma_reference)
        self._load(science, reference, sigma_science, sigma_reference)
        self.stamps_fft.execute()
        self._correlations()

    def equations(self, science, reference, sigma_science, sigma_reference):
        """Only the normal equations: the augmented systems [M | r] (B, L + 3, L + 4), float32, of the
        noise-normalised stamps."""
        self._correlate(science, reference, sigma_science, sigma_reference)
        return self._source[self._system_index]

    def fit(self, science, reference, sigma_science, sigma_reference):
        """Only the fit: kernels (B, L) and background planes (B, 3) of the noise-normalised stamps, float32."""
        self._correlate(science, reference, sigma_science, sigma_reference)
        self._solve()
        x = self._solution
        return x[:, :self.config.taps].copy(), x[:, self.config.taps:].copy()

    def run(self, science, reference, psfs, sigma_science, sigma_reference, timer=None):
        """Difference (counts) and score (sigma) images (n, n) float32 of one image pair (C-contiguous, two halves of
        one new array)."""
        xp, c = self.xp, self.config
        timer = timer or NullTimer()
        sfft.check_inputs(c, science, reference, psfs, sigma_science, sigma_reference)

        self._load(science, reference, sigma_science, sigma_reference)
        self.stamps_fft.execute()
        timer.mark("stamps + forward FFTs")
        self._correlations()
        timer.mark("normal equations (correlations)")
        self._solve()
        timer.mark("solve")

        xp.copyto(self._psfs, psfs.reshape(c.batch, -1), casting="same_kind")
        self._sigma[...] = sigma_science
        self.kernel_fft.execute()
        self.norm_fft.execute()
        self.norm_sum_fft.execute()
        timer.mark("kernel + PSF spectra")

        stamps = self.difference_fft.execute(direction="inverse")
        timer.mark("difference, decorrelation, score")

        difference, score = self._images(stamps)
        timer.mark("stitch")
        return difference, score
