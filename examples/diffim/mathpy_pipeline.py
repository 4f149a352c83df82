"""The pipeline on mathpy: the same algorithm as :mod:`.array_pipeline`, with the pointwise work fused into the FFTs.

Four stateful ``mathpy.fft.FFT`` plans are made once per configuration and executed for every image pair; all stamps
of an image go through each plan as one batch. Their prologs and epilogs (Python functions, compiled by numba: to
LTO-IR that cuFFT links into its kernels on the GPU, to CPU loops on the CPU) do what the array pipeline does in
separate passes over memory:

========================  ===========================================================================================
plan (transform)          fused into it
========================  ===========================================================================================
stamps (C2C, in place)    prolog: cuts the stamps out of the image pair (reflecting at the border), divides by the
                          sky noise, and packs science + i * reference, so one complex FFT transforms both images
correlations (C2C, 1-D    prolog: unpacks the two spectra and forms J^* J^ and J^* I^; epilog: stores only the lags
along the rows)           the normal equations use (the 1-D inverse FFT over the other axis runs on those rows only)
kernel + PSF (C2C, in     prolog: draws each stamp's solved kernel and its PSF model (from their compact
place)                    coefficients) as kernel + i * PSF, zero elsewhere
difference (C2C)          prolog: unpacks all four spectra, forms phi^ (I^ - K^ J^) and conj(P^) phi^ D'^ and packs
                          them as D'^ + i S^; epilog: normalises, removes the background plane and scales the score,
                          storing the stamp cores only
========================  ===========================================================================================

A callback reads one array of user data (fixed when the plan is made) and the FFT's own input; the buffers below are
laid out so that every plan finds what it reads there: arrays the callbacks read are persistent and refilled for each
pair, and a callback's user data has the shape of the layout it sees (``mathpy.fft.Callback``'s rule), with compact
contents at its start where they are smaller. The two in-place plans' prologs read only their user data (never the
array being transformed in place); the difference plan's prolog reads its input at k and -k, which an out-of-place
C2C transform leaves intact. The plans run on the array package's stream that is current when the pipeline is made.
"""

import math

import numpy as np

import mathpy.fft

from . import sfft
from .array_pipeline import NullTimer

__all__ = ["MathpyPipeline", "callbacks"]


def callbacks(config):
    """The six callbacks for ``config``, as closures over its sizes (numba compiles them with the sizes as
    constants). Offsets are converted to int64 first: numba would mix uint64 and int64 into float64."""
    c = config
    p, pp, core, pad, grid, n = c.stamp, c.stamp ** 2, c.core, c.pad, c.grid, c.n
    nn, half, batch = n * n, c.half, c.batch
    bh = batch * half
    two_bh = 2 * bh
    w, r = c.kernel_radius, c.psf_radius
    kw, ps = 2 * w + 1, 2 * r + 1
    taps = kw * kw
    psf_base = batch * taps
    lag = 2 * w
    half_p = p // 2
    f0, f05, f1 = np.float32(0), np.float32(0.5), np.float32(1)
    inv_p, inv_pp = np.float32(1 / p), np.float32(1 / pp)
    centre, inv_half_width = np.float32((p - 1) / 2), np.float32(2 / p)

    def stamps_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        b = o // pp
        rem = o - b * pp
        row = rem // p
        col = rem - row * p
        gy = b // grid
        y = gy * core - pad + row
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

    def correlation_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        k1 = o // two_bh
        j = o - k1 * two_bh
        slot = j // bh
        j = j - slot * bh
        b = j // half
        k2 = j - b * half
        base = b * pp
        z = user_info[base + k1 * p + k2]
        zm = user_info[base + ((p - k1) % p) * p + (p - k2) % p]
        jr = (z.imag + zm.imag) * f05  # J^ = (Z - conj Z(-k)) / 2i
        ji = (zm.real - z.real) * f05
        if slot == 0:
            return complex(jr * jr + ji * ji, f0)
        ir = (z.real + zm.real) * f05  # I^ = (Z + conj Z(-k)) / 2
        ii = (z.imag - zm.imag) * f05
        return complex(jr * ir + ji * ii, jr * ii - ji * ir)  # conj(J^) I^

    def correlation_epilog(data_out, offset, value, user_info, unused):
        lag_row = np.int64(offset) // two_bh
        if lag_row <= lag or lag_row >= p - lag:
            data_out[offset] = value * inv_p  # with the 1/P of the irfft over the other axis: irfft2's 1/P^2

    def kernel_psf_prolog(data_in, offset, user_info, unused):
        o = np.int64(offset)
        b = o // pp
        rem = o - b * pp
        dy = rem // p
        dx = rem - dy * p
        if dy > half_p:
            dy -= p
        if dx > half_p:
            dx -= p
        kernel = f0
        psf = f0
        if -w <= dy <= w and -w <= dx <= w:
            kernel = user_info[b * taps + (dy + w) * kw + dx + w]
        if -r <= dy <= r and -r <= dx <= r:
            psf = user_info[psf_base + b * ps * ps + (dy + r) * ps + dx + r]
        return complex(kernel, psf)

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
        row = rem // p
        col = rem - row * p
        if pad <= row < pad + core and pad <= col < pad + core:
            q = 1 + 4 * b
            u = (np.float32(col) - centre) * inv_half_width
            v = (np.float32(row) - centre) * inv_half_width
            plane = user_info[q] + user_info[q + 1] * u + user_info[q + 2] * v
            d = (value.real * inv_pp - plane) * user_info[0]
            s = (value.imag * inv_pp - plane) * user_info[q + 3]
            data_out[offset] = complex(d, s)

    return dict(stamps_prolog=stamps_prolog, correlation_prolog=correlation_prolog,
                correlation_epilog=correlation_epilog, kernel_psf_prolog=kernel_psf_prolog,
                difference_prolog=difference_prolog, difference_epilog=difference_epilog)


class MathpyPipeline:
    """``MathpyPipeline(config, xp=numpy)`` runs on mathpy's CPU execution space, ``xp=cupy`` on the GPU (the buffers
    live where the plans execute); ``run(...)`` subtracts one image pair (same arguments and results as
    :meth:`.ArrayPipeline.run`)."""

    def __init__(self, config, xp=np):
        c = self.config = config
        self.xp, self.tables = xp, sfft.Tables(config)
        p, b = c.stamp, c.batch
        if b * p * p < c.n * c.n + 1:
            raise ValueError(f"the stamps ({b} x {p}^2) must hold the image ({c.n}^2) plus one value")
        if 1 + 4 * b > p * p:
            raise ValueError(f"{b} stamps need more per-stamp parameters than a {p} x {p} buffer holds")
        # Buffers the callbacks read (user data must have the shape of the layout the callback sees).
        self.pair = xp.zeros((b, p, p), np.complex64)           # science + i reference (n*n) and the 1/sigmas
        self.spectra = xp.zeros((p, 2 * b * c.half), np.complex64)  # its start: the stamps' packed spectra
        self.stamp_spectra = self.spectra.reshape(-1)[:b * p * p].reshape(b, p, p)
        self.kernel_spectra = xp.zeros((b, p, p), np.complex64)  # K^ + i P^
        self.coefficients = xp.zeros((b, p, p), np.float32)     # kernels (B, L), then PSF models (B, ps^2)
        self.parameters = xp.zeros((p, p), np.float32)          # sigma_science, then (b0, bu, bv, norm) per stamp
        lags_input = xp.zeros((p, 2 * b * c.half), np.complex64)  # never read: the prolog reads the spectra
        self._pixels = self.pair.reshape(-1)[:c.n * c.n].view(np.float32).reshape(c.n, c.n, 2)
        self._projection = xp.asarray(self.tables.projection)
        self._lags = xp.asarray(self.tables.lag_index)

        cb = callbacks(config)
        Callback, FFT = mathpy.fft.Callback, mathpy.fft.FFT
        inplace = {"inplace": True}
        self.stamps_fft = FFT(self.stamp_spectra, axes=(1, 2), options=inplace)
        self.stamps_fft.plan(prolog=Callback(cb["stamps_prolog"], data=self.pair))
        self.correlation_fft = FFT(lags_input, axes=(0,))
        self.correlation_fft.plan(prolog=Callback(cb["correlation_prolog"], data=self.spectra),
                                  epilog=cb["correlation_epilog"])
        self.kernel_fft = FFT(self.kernel_spectra, axes=(1, 2), options=inplace)
        self.kernel_fft.plan(prolog=Callback(cb["kernel_psf_prolog"], data=self.coefficients))
        self.difference_fft = FFT(self.kernel_spectra, axes=(1, 2))
        self.difference_fft.plan(prolog=Callback(cb["difference_prolog"], data=self.stamp_spectra),
                                 epilog=Callback(cb["difference_epilog"], data=self.parameters))
        self._lags_input = lags_input

    def free(self):
        for plan in (self.stamps_fft, self.correlation_fft, self.kernel_fft, self.difference_fft):
            plan.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _projections(self):
        """The background blocks' projections of I and J from the zero row and column of the packed spectra
        Z = I^ + i J^: for a real projection c (conj c(-k) = c(k)), sum_k I^(k) c(k) = Re(sum_k Z(k) c(k)) and
        sum_k J^(k) c(k) = Im(...), so one complex matmul per line projects both images."""
        xp, z = self.xp, self.stamp_spectra
        rows = mathpy.matmul(z[:, 0, :], self._projection)      # (B, 2w+1)
        columns = mathpy.matmul(z[:, :, 0], self._projection)
        split = lambda a: xp.stack((a.real, a.imag), axis=1)  # noqa: E731
        return split(rows), split(columns), z[:, 0, 0].real, z[:, 0, 0].imag

    def _spectra(self, science, reference, sigma_science, sigma_reference):
        """Fill the stamps' packed spectra I^ + i J^ (``stamp_spectra``) from the image pair; J^(0) = 0."""
        xp, c = self.xp, self.config
        xp.stack((science, reference), axis=-1, out=self._pixels)
        self.pair.reshape(-1)[c.n * c.n] = complex(1 / sigma_science, 1 / sigma_reference)
        self.stamps_fft.execute()
        self.stamp_spectra[:, 0, 0] = self.stamp_spectra[:, 0, 0].real  # fit J's fluctuations: its mean is the
        #                                                                 background's business

    def _normal_equations(self):
        """sfft.solve's arguments from the packed spectra: the correlation windows and the background blocks."""
        xp, c = self.xp, self.config
        rows = self.correlation_fft.execute(direction="inverse")[self._lags]   # (lags, 2 B H): the needed rows
        windows = mathpy.fft.irfft(rows.reshape(c.lags, 2, c.batch, c.half), n=c.stamp)[..., self._lags]
        windows = windows.transpose(1, 2, 0, 3)                             # (2, B, lags, lags)
        kb, rhs_b = sfft.background_blocks(xp, self.tables, *self._projections())
        return windows[0], windows[1], kb, rhs_b

    def fit(self, science, reference, sigma_science, sigma_reference):
        """Only the fit: kernels (B, L) and background planes (B, 3) of the noise-normalised stamps."""
        c = self.config
        sfft.check_inputs(c, science, reference, np.zeros((c.batch, 2 * c.psf_radius + 1, 2 * c.psf_radius + 1)),
                          sigma_science, sigma_reference)
        self._spectra(science, reference, sigma_science, sigma_reference)
        return sfft.solve(self.xp, self.config, self.tables, *self._normal_equations())

    def run(self, science, reference, psfs, sigma_science, sigma_reference, timer=None):
        """Difference (counts) and score (sigma) images (n, n) of one image pair, as views of one complex image."""
        xp, c, t = self.xp, self.config, self.tables
        timer = timer or NullTimer()
        sfft.check_inputs(c, science, reference, psfs, sigma_science, sigma_reference)
        b = c.batch

        self._spectra(science, reference, sigma_science, sigma_reference)
        timer.mark("stamps + forward FFTs")
        equations = self._normal_equations()
        timer.mark("normal equations (correlations)")
        kernels, backgrounds = sfft.solve(xp, c, t, *equations)
        timer.mark("solve")

        coefficients = self.coefficients.reshape(-1)
        coefficients[:b * c.taps] = kernels.reshape(-1)
        coefficients[b * c.taps:b * c.taps + psfs.size] = psfs.reshape(-1)
        self.kernel_fft.execute()
        norms = sfft.score_norm(xp, mathpy.fft, c, t, kernels, psfs)
        parameters = self.parameters.reshape(-1)
        parameters[0] = sigma_science
        parameters[1:1 + 4 * b] = xp.concatenate([backgrounds, norms[:, None]], axis=1).reshape(-1)
        timer.mark("kernel + PSF spectra")

        stamps = self.difference_fft.execute(direction="inverse")
        timer.mark("difference, decorrelation, score")

        image = sfft.crop(xp, c, stamps)
        timer.mark("stitch")
        return image.real, image.imag
