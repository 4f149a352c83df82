"""The difference-imaging algorithm shared by the NumPy, CuPy and mathpy pipelines: the stamp layout, the SFFT normal
equations assembled from Fourier-space correlations, the batched solve, the score normalisation, stitching and
detection. Every function takes the array module ``xp`` (NumPy or CuPy) so that each pipeline runs it where its data
lives; the pipelines differ only in how they compute the FFTs and the pointwise work around them.

The model (Hu et al. 2022, "Image Subtraction in Fourier Space", SFFT): on each stamp the science image I is
matched by the reference J convolved with a kernel K expanded on delta functions (one free value per kernel pixel,
``(2w+1)^2`` of them) plus a differential background (a plane), ``I ~ K (x) J + b0 + bu u + bv v``. The least-squares
normal equations are built in Fourier space: the kernel-kernel block is J's autocorrelation at lags s - t, the
kernel-right-hand side J's cross-correlation with I, both one inverse FFT of a spectral product; the kernel-background
blocks reduce to J's row and column sums, which are the zero row and column of J's spectrum. SFFT expands the kernel
in polynomials of position over a whole image; here the image is cut into overlapping stamps, each with its own
kernel and background (the stamps are batched into single FFTs), which follows a PSF that varies over the field.

Both images are divided by their sky noise first, so the difference's noise spectrum is ``1 + |K^|^2`` and the
decorrelation filter (Reiss & Lupton 2016, as in SFFT's decorrelation) is ``phi^ = sqrt((1 + k0^2) / (1 + |K^|^2))``,
``k0 = sum(K)``. The detection statistic is the matched filter of the decorrelated difference with its own PSF,
``phi (x) P``, in units of its noise (ZOGY's score image): ``S^ = conj(P^) phi^ D'^ / (sigma_D ||phi (x) P||)``.

Conventions: stamps are ``P = core + 2 pad`` pixels wide, ``B = (n / core)^2`` of them; a correlation
``c(tau) = sum_y J(y) X(y + tau)`` is ``irfft2(conj(J^) X^)``; kernel offsets s = (dy, dx) run over ``[-w, w]^2``,
dy major, and the kernel image holds K(s) at (dy mod P, dx mod P).

The normal equations of a stamp are gathered, by one index table (``Tables.system_index``), from a short *source*
of float32 values (``Tables.SOURCE``): J's autocorrelation and its cross-correlation with I at the lags
``[-2w, 2w]^2`` (the ridge already on the autocorrelation's lag 0), the ramp projections of I and J along rows and
columns, the sums of I and J, and three constants. How a pipeline computes that source is its own business (array
expressions, or FFT callbacks that write it where the gather finds it); the (L + 3) x (L + 4) augmented system
``[M | r]`` and its float64 solve are shared.
"""

import copy
import dataclasses

import numpy as np

__all__ = ["Config", "Tables", "check_inputs", "solve", "score_norm", "stitch", "detect", "veto", "match"]


@dataclasses.dataclass(frozen=True)
class Config:
    """The stamp decomposition and the model's sizes.

    n              image size (square images, n x n), a multiple of ``core``
    core           stamp core: each stamp's result is kept on core x core pixels
    pad            stamp border on each side; it must hold the kernel and the PSF so that circular convolutions
                   do not wrap into the core
    kernel_radius  w: the kernel has (2w + 1)^2 delta-function coefficients
    psf_radius     the science PSF model is given on (2 psf_radius + 1)^2 pixels
    norm_grid      FFT size on which the score's normalisation ||phi (x) P|| is evaluated (P and K are compact)
    ridge          Tikhonov regularisation of the kernel, relative to the normal matrix's diagonal (J's
                   autocorrelation at lag 0)
    threshold      detection threshold of the score (sigma)
    """

    n: int
    core: int = 256
    pad: int = 16
    kernel_radius: int = 4
    psf_radius: int = 8
    norm_grid: int = 64
    ridge: float = 1e-6
    threshold: float = 5.0

    def __post_init__(self):
        for name in ("n", "core", "pad", "kernel_radius", "psf_radius", "norm_grid"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"Config.{name} must be a positive integer, got {value!r}")
        if self.n % self.core:
            raise ValueError(f"Config.n ({self.n}) must be a multiple of core ({self.core})")
        if self.pad < self.kernel_radius + self.psf_radius:
            raise ValueError(f"Config.pad ({self.pad}) must be at least kernel_radius + psf_radius "
                             f"({self.kernel_radius + self.psf_radius}) so that convolutions do not wrap into the core")
        if self.norm_grid < 2 * (2 * self.kernel_radius + self.psf_radius) + 1:
            raise ValueError(f"Config.norm_grid ({self.norm_grid}) is too small for the kernel and the PSF")
        if self.stamp % 2:
            raise ValueError(f"the stamp size core + 2 pad ({self.stamp}) must be even")

    @property
    def stamp(self):
        """P: stamp width, the FFT size."""
        return self.core + 2 * self.pad

    @property
    def grid(self):
        return self.n // self.core

    @property
    def batch(self):
        """B: the number of stamps."""
        return self.grid ** 2

    @property
    def half(self):
        """H = P/2 + 1: the halved axis of a real FFT."""
        return self.stamp // 2 + 1

    @property
    def taps(self):
        """L: kernel coefficients per stamp."""
        return (2 * self.kernel_radius + 1) ** 2

    @property
    def lags(self):
        """Correlation lags needed, per axis: the kernel-kernel block needs s - t in [-2w, 2w]."""
        return 4 * self.kernel_radius + 1


def check_inputs(config, science, reference, psfs, sigma_science, sigma_reference):
    """Refuse, before any work, inputs a pipeline for ``config`` cannot subtract (TypeError / ValueError naming the
    bad value and what is allowed)."""
    c = config
    for name, image in (("science", science), ("reference", reference)):
        if tuple(image.shape) != (c.n, c.n):
            raise ValueError(f"the {name} image has shape {tuple(image.shape)}; this pipeline subtracts "
                             f"({c.n}, {c.n}) images")
        if np.dtype(image.dtype) != np.float32:
            raise TypeError(f"the {name} image has dtype {image.dtype}; the pipelines work in float32")
    expected = (c.batch, 2 * c.psf_radius + 1, 2 * c.psf_radius + 1)
    if tuple(psfs.shape) != expected:
        raise ValueError(f"psfs has shape {tuple(psfs.shape)}; expected {expected}: the science PSF at each of the "
                         f"{c.batch} stamps' centres on (2 psf_radius + 1)^2 pixels")
    for name, sigma in (("sigma_science", sigma_science), ("sigma_reference", sigma_reference)):
        if not (isinstance(sigma, (int, float, np.floating)) and np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"{name} must be a positive number (the image's sky noise), got {sigma!r}")


class Tables:
    """Index tables and constants that depend only on the configuration, computed in NumPy; ``to(xp)`` gives a copy
    whose arrays live on the pipeline's device (kept there: nothing is uploaded per image pair)."""

    #: The parts of one stamp's normal-equation source, in order (``source_offsets`` says where each starts):
    #: jj         J's autocorrelation at the lags [-2w, 2w]^2, dy major (lags^2 values), the ridge on lag 0
    #: ji         J's cross-correlation with I at the same lags
    #: rows       sum_x X(x - (0, d)) u(x) for d in [-w, w] (u: the ramp along columns), X = I, then X = J
    #: columns    sum_x X(x - (d, 0)) v(x), the same with the ramp v along rows
    #: totals     sum_x I(x), sum_x J(x)
    #: constants  0, P^2, P sum(ramp^2)
    SOURCE = ("jj", "ji", "rows", "columns", "totals", "constants")

    def __init__(self, config):
        c = config
        w, p = c.kernel_radius, c.stamp
        d = np.arange(-w, w + 1)
        self.dy, self.dx = (a.reshape(-1) for a in np.meshgrid(d, d, indexing="ij"))
        lag = np.arange(-2 * w, 2 * w + 1)
        self.lag_index = lag % p          # where lag tau sits in a P-periodic correlation
        lengths = {"jj": c.lags ** 2, "ji": c.lags ** 2, "rows": 2 * d.size, "columns": 2 * d.size, "totals": 2,
                   "constants": 3}
        starts = np.cumsum([0] + [lengths[name] for name in self.SOURCE])
        self.source_offsets = {name: int(start) for name, start in zip(self.SOURCE, starts)}
        self.source_size = int(starts[-1])
        # background basis along one stamp axis, in [-1, 1)
        self.ramp = ((np.arange(p) - (p - 1) / 2) / (p / 2)).astype(np.float32)
        ramp2 = float(np.sum(self.ramp.astype(np.float64) ** 2))
        self.constants = np.array([0, p * p, p * ramp2], np.float32)  # the background-background block (ramps sum to 0)
        self.system_index = self._system_index(c)
        # Kernel-background block: sum_x X(x - d e) ramp(x) for a shift d in [-w, w] along one axis e is
        # (1/P) sum_k X^_e(k) exp(-2 pi i k d / P) conj(ramp^(k)), X^_e the zero line of X's spectrum along e.
        k = np.arange(p)
        line = np.exp(-2j * np.pi * np.outer(k, d) / p) * np.conj(np.fft.fft(self.ramp.astype(np.float64)))[:, None] / p
        self.projection = line.astype(np.complex64)                      # (P, 2w+1): a full zero line
        weights = np.full(c.half, 2.0)
        weights[0] = weights[-1] = 1.0
        self.half_projection = (line[:c.half] * weights[:, None]).astype(np.complex64)  # (H, 2w+1): a half line
        self.kernel_pixels = (self.dy % p, self.dx % p)
        r = c.psf_radius
        e = np.arange(-r, r + 1)
        py, px = np.meshgrid(e, e, indexing="ij")
        self.psf_pixels = (py.reshape(-1) % p, px.reshape(-1) % p)
        g = c.norm_grid
        self.norm_kernel_pixels = (self.dy % g, self.dx % g)
        self.norm_psf_pixels = (py.reshape(-1) % g, px.reshape(-1) % g)
        # real-FFT weights of the halved axis on the norm grid: the columns 1..G/2-1 stand for two
        self.norm_weights = np.full(g // 2 + 1, 2.0, np.float32)
        self.norm_weights[0] = self.norm_weights[-1] = 1.0
        self.core_ramp = self.ramp[c.pad:c.pad + c.core]

    def _system_index(self, config):
        """(L + 3, L + 4) positions in the source of the augmented normal equations [M | r] of one stamp: M[i, j] =
        A(s_i - s_j) for kernel taps i, j (A: J's autocorrelation), the kernel-background block sum_x J(x - s_i) b(x)
        for the background basis b = 1, u, v, the background-background block, and r = (C(s_i), sum I b), C the
        cross-correlation of J with I."""
        w, lags, k = config.kernel_radius, config.lags, 2 * config.kernel_radius + 1
        o = self.source_offsets
        dy, dx = self.dy, self.dx
        taps = dy.size
        kk = o["jj"] + (dy[:, None] - dy[None, :] + 2 * w) * lags + (dx[:, None] - dx[None, :] + 2 * w)
        kb = np.stack([np.full(taps, o["totals"] + 1),           # sum_x J(x - s) = sum J
                       o["rows"] + k + dx + w,                   # J's projection on the column ramp u
                       o["columns"] + k + dy + w], axis=1)       # and on the row ramp v
        zero, pp, pr = (o["constants"] + i for i in range(3))
        bb = np.array([[pp, zero, zero], [zero, pr, zero], [zero, zero, pr]])
        rhs = np.concatenate([o["ji"] + (dy + 2 * w) * lags + dx + 2 * w,
                              [o["totals"], o["rows"] + w, o["columns"] + w]])
        return np.concatenate([np.block([[kk, kb], [kb.T, bb]]), rhs[:, None]], axis=1)

    def to(self, xp):
        """A copy whose array tables live in ``xp`` (NumPy: this object)."""
        if xp is np:
            return self
        other = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray):
                setattr(other, name, xp.asarray(value))
            elif isinstance(value, tuple) and value and all(isinstance(a, np.ndarray) for a in value):
                setattr(other, name, tuple(xp.asarray(a) for a in value))
        return other


def solve(xp, system):
    """Kernel and background coefficients (B, L + 3), float64, of the augmented normal equations ``system``
    (B, L + 3, L + 4) = [M | r] (any float dtype): one batched solve in float64."""
    system = system.astype(np.float64)
    return xp.linalg.solve(system[..., :-1], system[..., -1:])[..., 0]


def score_norm(xp, fft, config, tables, kernels, psfs):
    """1 / (sigma_D ||phi (x) P||) per stamp, with sigma_D^2 = 1 + k0^2, evaluated on the small ``norm_grid``
    (kernel and PSF are compact there). ``fft`` is the FFT namespace of the pipeline (numpy.fft-compatible)."""
    t, g = tables, config.norm_grid
    b = kernels.shape[0]
    grids = xp.zeros((2, b, g, g), np.float32)
    grids[0][:, t.norm_kernel_pixels[0], t.norm_kernel_pixels[1]] = kernels
    grids[1][:, t.norm_psf_pixels[0], t.norm_psf_pixels[1]] = psfs.reshape(b, -1)
    spectra = fft.rfft2(grids)
    power = (spectra * spectra.conj()).real                 # |K^|^2, |P^|^2
    k0 = spectra[0, :, 0, 0].real
    # ||phi (x) P||^2 = (1 + k0^2) / G^2 sum_k |P^|^2 / (1 + |K^|^2), the halved axis weighted
    total = ((power[1] / (1 + power[0])) @ t.norm_weights).sum(axis=1)
    return (g / ((1 + k0 * k0) * xp.sqrt(total))).astype(np.float32)


def _core_to_image(xp, config, stamps):
    """(B, core, core) stamp cores -> the (n, n) image."""
    c = config
    return stamps.reshape(c.grid, c.grid, c.core, c.core).transpose(0, 2, 1, 3).reshape(c.n, c.n)


def stitch(xp, config, tables, difference, score, backgrounds, norms, sigma_science):
    """Difference (counts) and score images (n, n) from the stamps' decorrelated difference and unnormalised score
    (B, P, P), both in science-noise units with the background still in: the background plane is removed here
    (decorrelation and a centred PSF leave a plane unchanged away from the stamp edges)."""
    c = config
    s = slice(c.pad, c.pad + c.core)
    ramp = tables.core_ramp
    plane = (backgrounds[:, 0, None, None] + backgrounds[:, 1, None, None] * ramp[None, None, :] +
             backgrounds[:, 2, None, None] * ramp[None, :, None])
    d = (difference[:, s, s] - plane) * np.float32(sigma_science)
    z = (score[:, s, s] - plane) * norms[:, None, None]
    return (xp.ascontiguousarray(_core_to_image(xp, c, d)), xp.ascontiguousarray(_core_to_image(xp, c, z)))


def detect(xp, score, threshold, radius=2, method=None):
    """Local maxima of the score above ``threshold`` (equal to the maximum of their (2 radius + 1)^2 neighbourhood,
    clipped at the border): an (m, 2) NumPy array of (row, column) and the (m,) peak values, brightest first (ties
    by position).

    Three ways to the same pixels. On a GPU (CuPy) one kernel (:mod:`.peak_kernel`) tests every pixel against its
    neighbourhood and appends the peaks to a short list, which comes to the host in one wait for the device
    ("kernel", the default there). The "filter" way runs a maximum filter of the whole image (mode "nearest" repeats
    the border pixel, so the clipped neighbourhood's maximum is the same) and the test, then the count of peaks (it
    sizes what follows, and waits for the device), one gather of their values and one transfer: on the H200 its
    detection stage took 0.91 ms of GPU time at 4096^2 (bench_difference_imaging, 2026-12-01). On the CPU (NumPy)
    nothing waits, and scipy's maximum filter of a 4096^2 image costs over a hundred times more than looking at the
    neighbourhoods of the few pixels above the threshold (2.2 s against 0.014 s with 2025 peaks, measured on a busy
    2-core machine), which "candidates" (the default there) does instead. ``method`` chooses one; None takes the
    one for ``xp``."""
    method = method or ("candidates" if xp is np else "kernel")
    if method == "candidates" and xp is np:
        flat, values = _peaks_among_candidates(score, threshold, radius)
    elif method == "filter":
        flat, values = _peaks_filtered(xp, score, threshold, radius)
    elif method == "kernel" and xp is not np:
        from .peak_kernel import find_peaks
        flat, values = find_peaks(score, threshold, radius)
    else:
        raise ValueError(f"method must be 'filter', 'candidates' (NumPy arrays), 'kernel' (CuPy arrays) or None, "
                         f"got {method!r}")
    order = np.lexsort((flat, -values))
    return np.stack(np.divmod(flat[order], score.shape[1]), axis=1), values[order]


def _peaks_filtered(xp, score, threshold, radius):
    """(flat indices, values) of the peaks, NumPy, from a maximum filter of the whole image (xp: NumPy or CuPy)."""
    if xp is np:
        import scipy.ndimage as ndimage
    else:
        import cupyx.scipy.ndimage as ndimage
    around = ndimage.maximum_filter(score, size=2 * radius + 1, mode="nearest")
    flat = xp.flatnonzero((score > threshold) & (score >= around))
    if flat.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    flat, values = _to_numpy(xp.stack([flat, score.reshape(-1)[flat]], dtype=np.float64))
    return flat.astype(np.int64), values.astype(np.float32)


def _peaks_among_candidates(score, threshold, radius):
    """(flat indices, values) of the peaks from the clipped neighbourhoods of the pixels above the threshold (NumPy)."""
    n0, n1 = score.shape
    flat = np.flatnonzero(score > threshold)
    rows, cols = np.divmod(flat, n1)
    d = np.arange(-radius, radius + 1)
    nr = np.clip(rows[:, None] + d, 0, n0 - 1)
    nc = np.clip(cols[:, None] + d, 0, n1 - 1)
    around = score[nr[:, :, None], nc[:, None, :]].reshape(flat.size, -1).max(axis=1, initial=-np.inf)
    values = score[rows, cols]
    peak = values >= around
    return flat[peak].astype(np.int64), values[peak].astype(np.float32)


def veto(detections, peaks, masked, radius):
    """Drop detections within ``radius`` pixels of a masked position ((m, 2) continuous (y, x), e.g. catalogue
    bright stars, whose residuals and photon noise the score does not model). Host-side, on the few candidates."""
    if len(detections) == 0 or len(masked) == 0:
        return detections, peaks
    centre = np.asarray(masked) - 0.5
    distance = np.hypot(*(detections[:, None, :] - centre[None, :, :]).transpose(2, 0, 1))
    keep = distance.min(axis=1) > radius
    return detections[keep], peaks[keep]


def _to_numpy(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def match(detections, truth, radius=2.0):
    """(indices of recovered truth positions, number of detections matching no truth): a detection at pixel
    (row, col) matches a truth position (y, x) (continuous coordinates, pixel centres at +0.5) within ``radius``."""
    if len(detections) == 0 or len(truth) == 0:
        return np.array([], np.int64), len(detections)
    centre = np.asarray(truth) - 0.5
    distance = np.hypot(*(detections[:, None, :] - centre[None, :, :]).transpose(2, 0, 1))
    recovered = np.flatnonzero(distance.min(axis=0) <= radius)
    spurious = int(np.sum(distance.min(axis=1) > radius))
    return recovered, spurious
