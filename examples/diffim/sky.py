"""Synthetic sky exposures for difference imaging: a field of stars and galaxies seen through a spatially varying PSF,
as a science exposure and a deeper, sharper reference exposure with other backgrounds and another photometric scale,
plus point-source transients injected into the science exposure only.

Everything is analytic Gaussian mixtures: a galaxy is a mixture of three elliptical Gaussians, the PSF a core and a
wing whose widths, ellipticity and orientation change smoothly over the field, so a source convolved with the local
PSF is again a Gaussian mixture (covariances add) and is drawn directly, sampled at pixel centres. Noise is Gaussian
with the variance of Poisson photon noise from the sky and the sources, so bright stars are noisier than the sky.
"""

import dataclasses
import math

import numpy as np

__all__ = ["PSFField", "Exposure", "Scene", "make_scene", "SCIENCE_PSF", "REFERENCE_PSF", "BRIGHT_STAR_FLUX",
           "BRIGHT_STAR_RADIUS"]

#: Stars brighter than this (science counts) are masked within BRIGHT_STAR_RADIUS pixels, as survey pipelines mask
#: bright catalogue stars: no transient is injected there and detections there are vetoed.
BRIGHT_STAR_FLUX, BRIGHT_STAR_RADIUS = 2e4, 12.0


@dataclasses.dataclass(frozen=True)
class PSFField:
    """A two-Gaussian PSF varying over an ``n x n`` field: core width (pixels, 1 sigma)
    ``width + width_x * x/n + width_y2 * (y/n)**2``, a wing ``wing_ratio`` times wider carrying ``wing_weight`` of
    the flux, ellipticity ``ellipticity + ellipticity_x * x/n`` along the angle ``angle + angle_y * y/n``."""

    width: float
    width_x: float = 0.0
    width_y2: float = 0.0
    ellipticity: float = 0.0
    ellipticity_x: float = 0.0
    angle: float = 0.0
    angle_y: float = 0.0
    wing_ratio: float = 1.8
    wing_weight: float = 0.15

    def components(self, y, x, n):
        """[(weight, covariance)] at positions (y, x): covariances of shape (..., 2, 2) in (y, x) order."""
        y, x = np.asarray(y, np.float64), np.asarray(x, np.float64)
        core = self.width + self.width_x * x / n + self.width_y2 * (y / n) ** 2
        e = self.ellipticity + self.ellipticity_x * x / n
        theta = self.angle + self.angle_y * y / n
        result = []
        for weight, scale in ((1 - self.wing_weight, 1.0), (self.wing_weight, self.wing_ratio)):
            s = core * scale
            result.append((weight, _covariance(s * np.sqrt(1 + e), s * np.sqrt(1 - e), theta)))
        return result

    def stamps(self, y, x, n, radius):
        """The PSF at each position (y, x), sampled on a ``(2 radius + 1)^2`` pixel grid centred on the position and
        normalised to unit sum: an array of shape (len(y), 2 radius + 1, 2 radius + 1), float32."""
        y, x = np.atleast_1d(y), np.atleast_1d(x)
        offsets = np.arange(-radius, radius + 1, dtype=np.float64)
        dy, dx = np.meshgrid(offsets, offsets, indexing="ij")
        out = np.zeros((y.size, 2 * radius + 1, 2 * radius + 1))
        for weight, cov in self.components(y, x, n):
            out += weight * _gaussian(dy, dx, cov[:, None, None])
        out /= out.sum(axis=(1, 2), keepdims=True)
        return out.astype(np.float32)


#: The science exposure's PSF (broader, elongated, varying) and the reference's (a sharper, rounder coadd).
SCIENCE_PSF = PSFField(width=1.55, width_x=0.35, width_y2=0.25, ellipticity=0.05, ellipticity_x=0.06, angle=0.3,
                       angle_y=0.8)
REFERENCE_PSF = PSFField(width=1.05, width_y2=0.12, ellipticity=0.02, angle=1.0)


def _covariance(sigma_major, sigma_minor, theta):
    """2x2 covariances (y, x) of Gaussians with these axes, the major one at angle theta from the x axis."""
    c, s = np.cos(theta), np.sin(theta)
    a, b = np.square(sigma_major), np.square(sigma_minor)
    cov = np.empty(np.broadcast(a, b, theta).shape + (2, 2))
    cov[..., 1, 1] = a * c * c + b * s * s   # xx
    cov[..., 0, 0] = a * s * s + b * c * c   # yy
    cov[..., 0, 1] = cov[..., 1, 0] = (a - b) * s * c
    return cov


def _gaussian(dy, dx, cov):
    """Unit-flux 2-D Gaussian with covariance ``cov`` (broadcast against dy, dx) at offsets (dy, dx)."""
    a, b, c = cov[..., 0, 0], cov[..., 0, 1], cov[..., 1, 1]
    det = a * c - b * b
    quad = (c * dy * dy - 2 * b * dy * dx + a * dx * dx) / det
    return np.exp(-0.5 * quad) / (2 * np.pi * np.sqrt(det))


@dataclasses.dataclass
class Exposure:
    """One exposure: the image (float32, counts), its sky noise (1 sigma, counts: the background-limited noise a
    pipeline reads from the header) and the PSF field it was observed with."""

    image: np.ndarray
    sky_sigma: float
    psf: PSFField


@dataclasses.dataclass
class Scene:
    science: Exposure
    reference: Exposure
    transients: np.ndarray   # (n, 2) float positions (y, x) of the injected transients
    transient_flux: np.ndarray
    stars: np.ndarray        # (n, 3): y, x, flux (science photometric scale)
    galaxies: np.ndarray     # (n, 6): y, x, flux, size, axis ratio, angle

    @property
    def bright_stars(self):
        """(m, 2) positions (y, x) of the stars a pipeline masks (a bright-star catalogue)."""
        return self.stars[self.stars[:, 2] > BRIGHT_STAR_FLUX, :2]


def _render(image, y, x, flux, intrinsic, psf, radius, chunk=2048):
    """Add sources (intrinsic: [(weight, covariance (n, 2, 2))] or None for points) convolved with the local PSF."""
    n = image.shape[0]
    offsets = np.arange(-radius, radius + 1)
    indices, weights = [], []
    for start in range(0, y.size, chunk):
        sl = slice(start, start + chunk)
        yc, xc, f = y[sl], x[sl], flux[sl]
        iy, ix = np.floor(yc).astype(np.int64), np.floor(xc).astype(np.int64)
        py = iy[:, None, None] + offsets[None, :, None]  # pixel rows/cols of each source's box
        px = ix[:, None, None] + offsets[None, None, :]
        dy = py + 0.5 - yc[:, None, None]               # pixel centres relative to the source
        dx = px + 0.5 - xc[:, None, None]
        dy, dx = np.broadcast_arrays(dy, dx)
        values = np.zeros(dy.shape)
        for pw, pcov in psf.components(yc, xc, n):
            parts = intrinsic(sl) if intrinsic is not None else [(1.0, 0.0)]
            for iw, icov in parts:
                cov = pcov + icov
                values += (pw * iw) * _gaussian(dy, dx, cov[:, None, None])
        values *= f[:, None, None]
        inside = (py >= 0) & (py < n) & (px >= 0) & (px < n)
        indices.append(np.broadcast_to(py * n + px, inside.shape)[inside])
        weights.append(values[inside])
    if indices:
        image.reshape(-1)[:] += np.bincount(np.concatenate(indices), np.concatenate(weights), minlength=n * n)


def _galaxy_parts(galaxies):
    """Three elliptical Gaussians per galaxy (a rough exponential profile)."""
    size, q, angle = galaxies[:, 3], galaxies[:, 4], galaxies[:, 5]

    def parts(sl):
        return [(w, _covariance(size[sl] * k, size[sl] * k * q[sl], angle[sl]))
                for w, k in ((0.3, 0.35), (0.45, 0.8), (0.25, 1.6))]
    return parts


def _observe(rng, n, stars, galaxies, transients, transient_flux, psf, scale, sky, gain):
    image = np.zeros((n, n))
    _render(image, stars[:, 0], stars[:, 1], stars[:, 2] * scale, None, psf, 12)
    _render(image, galaxies[:, 0], galaxies[:, 1], galaxies[:, 2] * scale, _galaxy_parts(galaxies), psf, 20)
    if transients is not None and len(transients):
        _render(image, transients[:, 0], transients[:, 1], transient_flux * scale, None, psf, 12)
    ramp = np.arange(n, dtype=np.float32) / np.float32(n)
    expected = image.astype(np.float32)
    expected += np.float32(sky[0]) + np.float32(sky[1]) * ramp[None, :] + np.float32(sky[2]) * ramp[:, None]
    noise = rng.standard_normal((n, n), dtype=np.float32)
    noise *= np.sqrt(np.maximum(expected, 0) * np.float32(1 / gain))
    expected += noise
    return expected, float(math.sqrt(sky[0] / gain))


def make_scene(n=512, n_transients=None, seed=0):
    """A science/reference pair of ``n x n`` exposures of one field, with ``n_transients`` (default: one per
    512 x 512 pixels, at least 5) point sources added to the science exposure. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    area = n * n
    n_stars, n_galaxies = area // 900, area // 4000
    n_transients = max(5, area // (512 * 512)) if n_transients is None else n_transients

    stars = np.empty((n_stars, 3))
    stars[:, :2] = rng.uniform(0, n, (n_stars, 2))
    stars[:, 2] = np.minimum(150 * (1 - rng.uniform(size=n_stars)) ** (-1 / 1.3), 2e5)
    galaxies = np.empty((n_galaxies, 6))
    galaxies[:, :2] = rng.uniform(0, n, (n_galaxies, 2))
    galaxies[:, 2] = np.minimum(800 * (1 - rng.uniform(size=n_galaxies)) ** (-1 / 1.5), 4e4)
    galaxies[:, 3] = rng.uniform(1.0, 3.5, n_galaxies)
    galaxies[:, 4] = rng.uniform(0.35, 1.0, n_galaxies)
    galaxies[:, 5] = rng.uniform(0, np.pi, n_galaxies)

    # Transients: half next to galaxies (supernovae in their hosts), half anywhere; none in a bright star's mask or
    # within 12 px of the border, none closer than 20 px to each other.
    bright = stars[stars[:, 2] > BRIGHT_STAR_FLUX, :2]
    chosen = []
    while len(chosen) < n_transients:
        if len(chosen) % 2 == 0:
            host = galaxies[rng.integers(n_galaxies)]
            r, phi = rng.uniform(0.5, 2.0) * host[3], rng.uniform(0, 2 * np.pi)
            position = host[:2] + r * np.array([np.sin(phi), np.cos(phi)])
        else:
            position = rng.uniform(0, n, 2)
        if np.any(position < 12) or np.any(position > n - 12):
            continue
        if len(bright) and np.min(np.hypot(*(bright - position).T)) < BRIGHT_STAR_RADIUS:
            continue
        if chosen and np.min(np.hypot(*(np.array(chosen) - position).T)) < 20:
            continue
        chosen.append(position)
    transients = np.array(chosen).reshape(-1, 2)

    sci_sky, sci_gain = (100.0, 9.0, -6.0), 1.0
    ref_sky, ref_gain, ref_scale = (60.0, -3.0, 5.0), 4.0, 0.7
    sigma_sci = math.sqrt(sci_sky[0] / sci_gain)
    sigma_ref = math.sqrt(ref_sky[0] / ref_gain) / ref_scale  # in science flux units
    width = SCIENCE_PSF.width + 0.5 * SCIENCE_PSF.width_x
    snr = rng.uniform(12, 40, n_transients)  # the detection S/N each transient is given in the difference image
    transient_flux = snr * math.hypot(sigma_sci, sigma_ref) * math.sqrt(4 * np.pi) * 1.15 * width

    science, s_sigma = _observe(rng, n, stars, galaxies, transients, transient_flux, SCIENCE_PSF, 1.0, sci_sky,
                                sci_gain)
    reference, r_sigma = _observe(rng, n, stars, galaxies, None, None, REFERENCE_PSF, ref_scale, ref_sky, ref_gain)
    return Scene(Exposure(science, s_sigma, SCIENCE_PSF), Exposure(reference, r_sigma, REFERENCE_PSF), transients,
                 transient_flux, stars, galaxies)
