"""The pipeline written with array expressions: NumPy + scipy.fft on the CPU, or CuPy + cupyx.scipy.fft on the GPU
(the same code: CuPy is a drop-in for NumPy and SciPy here). This is what a careful array programmer writes: the
stamps are batched into one FFT per stage, pointwise results go into preallocated arrays with ``out=``, inverse FFTs
may overwrite their (temporary) input instead of copying it, FFT plans are cached (scipy.fft's and CuPy's own plan
caches), index tables and constants are moved to the device once, and nothing leaves the device until the
detections. Each pointwise step is still its own pass over memory: an array library cannot reach inside its FFTs.
"""

import numpy as np

from . import sfft

__all__ = ["ArrayPipeline", "NullTimer"]


class NullTimer:
    """The ``timer`` protocol: ``mark(stage)`` closes a stage of the pipeline."""

    def mark(self, stage):
        pass


class _SciPyFFT:
    """scipy.fft with all cores (``workers=-1``): NumPy's FFT, multithreaded."""

    def __init__(self):
        import scipy.fft
        self._fft = scipy.fft

    def __getattr__(self, name):
        function = getattr(self._fft, name)
        return lambda *args, **kwargs: function(*args, workers=-1, **kwargs)


class ArrayPipeline:
    """``ArrayPipeline(config, xp=numpy)`` (or ``xp=cupy``); ``run(...)`` subtracts one image pair."""

    def __init__(self, config, xp=np):
        self.config, self.xp = config, xp
        if xp is np:
            self.fft = _SciPyFFT()
        else:
            import cupyx.scipy.fft
            self.fft = cupyx.scipy.fft
        self.tables = sfft.Tables(config).to(xp)

    def _stamps(self, image, scale, out):
        """Cut the image into overlapping stamps (reflected at the image border), scaled, into ``out`` (B, P, P)."""
        xp, c = self.xp, self.config
        padded = xp.pad(image, c.pad, mode="reflect")
        row, item = padded.shape[1] * padded.itemsize, padded.itemsize
        windows = xp.lib.stride_tricks.as_strided(padded, (c.grid, c.grid, c.stamp, c.stamp),
                                                  (c.core * row, c.core * item, row, item))
        xp.multiply(windows, np.float32(scale), out=out.reshape(windows.shape))

    def _spectra(self, science, reference, sigma_science, sigma_reference):
        """I^, J^ (B, P, H) of the noise-normalised stamps; J^(0) = 0."""
        xp, c = self.xp, self.config
        stack = xp.empty((2, c.batch, c.stamp, c.stamp), np.float32)
        self._stamps(science, 1 / sigma_science, stack[0])
        self._stamps(reference, 1 / sigma_reference, stack[1])
        spectra = self.fft.rfft2(stack)
        i_hat, j_hat = spectra[0], spectra[1]
        j_hat[:, 0, 0] = 0  # fit the reference's fluctuations: its mean is the background's business
        return i_hat, j_hat

    def _normal_equations(self, i_hat, j_hat):
        """The augmented normal equations (B, L + 3, L + 4) of every stamp, gathered from their source
        (``sfft.Tables.SOURCE``)."""
        xp, c, t, p = self.xp, self.config, self.tables, self.config.stamp
        b, w2 = c.batch, 2 * c.kernel_radius
        lags = t.lag_index
        products = xp.empty((2, b, p, c.half), np.complex64)
        j_conj = j_hat.conj()
        xp.multiply(j_conj, j_hat, out=products[0])
        xp.multiply(j_conj, i_hat, out=products[1])
        correlations = self.fft.irfft2(products, s=(p, p), overwrite_x=True)
        windows = correlations[:, :, lags[:, None], lags[None, :]]
        windows[0, :, w2, w2] *= np.float32(1 + c.ridge)  # the diagonal of M is the autocorrelation at lag 0
        rows = (xp.stack((i_hat[:, 0, :], j_hat[:, 0, :]), axis=1) @ t.half_projection).real
        columns = (xp.stack((i_hat[:, :, 0], j_hat[:, :, 0]), axis=1) @ t.projection).real
        totals = xp.stack((i_hat[:, 0, 0].real, j_hat[:, 0, 0].real), axis=1)
        source = xp.concatenate([windows[0].reshape(b, -1), windows[1].reshape(b, -1), rows.reshape(b, -1),
                                 columns.reshape(b, -1), totals, xp.broadcast_to(t.constants, (b, 3))], axis=1)
        return source[:, t.system_index]

    def equations(self, science, reference, sigma_science, sigma_reference):
        """Only the normal equations: the augmented systems [M | r] (B, L + 3, L + 4), float32, of the
        noise-normalised stamps."""
        c = self.config
        sfft.check_inputs(c, science, reference, np.zeros((c.batch, 2 * c.psf_radius + 1, 2 * c.psf_radius + 1)),
                          sigma_science, sigma_reference)
        return self._normal_equations(*self._spectra(science, reference, sigma_science, sigma_reference))

    def fit(self, science, reference, sigma_science, sigma_reference):
        """Only the fit: kernels (B, L) and background planes (B, 3) of the noise-normalised stamps."""
        x = sfft.solve(self.xp, self.equations(science, reference, sigma_science, sigma_reference))
        return x[:, :self.config.taps].astype(np.float32), x[:, self.config.taps:].astype(np.float32)

    def run(self, science, reference, psfs, sigma_science, sigma_reference, timer=None):
        """Difference (counts) and score (sigma) images, (n, n) float32 each, of one image pair.

        science, reference  (n, n) float32 images on one pixel grid
        psfs                (B, 2r+1, 2r+1) science PSF model at each stamp's centre (unit sum)
        sigma_*             each image's sky noise (1 sigma)
        """
        xp, fft, c, t = self.xp, self.fft, self.config, self.tables
        timer = timer or NullTimer()
        sfft.check_inputs(c, science, reference, psfs, sigma_science, sigma_reference)
        p = c.stamp

        i_hat, j_hat = self._spectra(science, reference, sigma_science, sigma_reference)
        timer.mark("stamps + forward FFTs")
        system = self._normal_equations(i_hat, j_hat)
        timer.mark("normal equations (correlations)")
        x = sfft.solve(xp, system)
        kernels, backgrounds = x[:, :c.taps].astype(np.float32), x[:, c.taps:].astype(np.float32)
        timer.mark("solve")

        images = xp.zeros((2, c.batch, p, p), np.float32)
        images[0][:, t.kernel_pixels[0], t.kernel_pixels[1]] = kernels
        images[1][:, t.psf_pixels[0], t.psf_pixels[1]] = psfs.reshape(c.batch, -1)
        kernel_spectra = fft.rfft2(images)
        k_hat, p_hat = kernel_spectra[0], kernel_spectra[1]
        norms = sfft.score_norm(xp, fft, c, t, kernels, psfs)
        timer.mark("kernel + PSF spectra")

        k0 = k_hat[:, 0, 0].real
        phi = xp.sqrt((1 + k0 * k0)[:, None, None] / (1 + (k_hat * k_hat.conj()).real))
        out = xp.empty((2, c.batch, p, c.half), np.complex64)
        d_hat, s_hat = out[0], out[1]
        xp.multiply(k_hat, j_hat, out=d_hat)
        xp.subtract(i_hat, d_hat, out=d_hat)
        d_hat *= phi
        xp.multiply(p_hat.conj(), phi, out=s_hat)
        s_hat *= d_hat
        difference = fft.irfft2(out, s=(p, p), overwrite_x=True)
        timer.mark("difference, decorrelation, score")

        images = sfft.stitch(xp, c, t, difference[0], difference[1], backgrounds, norms, sigma_science)
        timer.mark("stitch")
        return images
