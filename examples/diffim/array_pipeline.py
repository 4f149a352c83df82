"""The pipeline written with array expressions: NumPy + scipy.fft on the CPU, or CuPy + cupyx.scipy.fft on the GPU
(the same code: CuPy is a drop-in for NumPy and SciPy here). This is what a careful array programmer writes: the
stamps are batched into one FFT per stage, pointwise results go into preallocated arrays with ``out=``, inverse FFTs
may overwrite their (temporary) input instead of copying it, FFT plans are cached (scipy.fft's and CuPy's own plan
caches), and nothing leaves the device until the detections. Each pointwise step is still its own pass over memory:
an array library cannot reach inside its FFTs.
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
        self.tables = t = sfft.Tables(config)
        self._kernel_pixels = tuple(xp.asarray(a) for a in t.kernel_pixels)
        self._psf_pixels = tuple(xp.asarray(a) for a in t.psf_pixels)
        self._lags = xp.asarray(t.lag_index)
        self._projection, self._half_projection = xp.asarray(t.projection), xp.asarray(t.half_projection)

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
        """sfft.solve's arguments: the correlation windows and the background blocks."""
        xp, c, t, p = self.xp, self.config, self.tables, self.config.stamp
        lags = self._lags
        products = xp.empty((2, c.batch, p, c.half), np.complex64)
        j_conj = j_hat.conj()
        xp.multiply(j_conj, j_hat, out=products[0])
        xp.multiply(j_conj, i_hat, out=products[1])
        correlations = self.fft.irfft2(products, s=(p, p), overwrite_x=True)
        windows = correlations[:, :, lags[:, None], lags[None, :]]
        rows = (xp.stack((i_hat[:, 0, :], j_hat[:, 0, :]), axis=1) @ self._half_projection).real
        columns = (xp.stack((i_hat[:, :, 0], j_hat[:, :, 0]), axis=1) @ self._projection).real
        kb, rhs_b = sfft.background_blocks(xp, t, rows, columns, i_hat[:, 0, 0].real, j_hat[:, 0, 0].real)
        return windows[0], windows[1], kb, rhs_b

    def fit(self, science, reference, sigma_science, sigma_reference):
        """Only the fit: kernels (B, L) and background planes (B, 3) of the noise-normalised stamps."""
        c = self.config
        sfft.check_inputs(c, science, reference, np.zeros((c.batch, 2 * c.psf_radius + 1, 2 * c.psf_radius + 1)),
                          sigma_science, sigma_reference)
        i_hat, j_hat = self._spectra(science, reference, sigma_science, sigma_reference)
        return sfft.solve(self.xp, self.config, self.tables, *self._normal_equations(i_hat, j_hat))

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
        equations = self._normal_equations(i_hat, j_hat)
        timer.mark("normal equations (correlations)")
        kernels, backgrounds = sfft.solve(xp, c, t, *equations)
        timer.mark("solve")

        images = xp.zeros((2, c.batch, p, p), np.float32)
        images[0][:, self._kernel_pixels[0], self._kernel_pixels[1]] = kernels
        images[1][:, self._psf_pixels[0], self._psf_pixels[1]] = psfs.reshape(c.batch, -1)
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
