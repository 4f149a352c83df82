"""Running the three implementations on one scene and judging their results: inputs, where each implementation runs,
detection against the injected transients, and agreement with the NumPy reference."""

import dataclasses
import math

import numpy as np

from . import sfft
from .sky import BRIGHT_STAR_RADIUS
from .array_pipeline import ArrayPipeline
from .mathpy_pipeline import MathpyPipeline

__all__ = ["IMPLEMENTATIONS", "Inputs", "Result", "inputs", "gpu_available", "make_pipeline", "subtract",
           "relative_error", "to_numpy", "tolerance"]

#: name -> how it computes
IMPLEMENTATIONS = {
    "numpy": "array expressions, scipy.fft",
    "cupy": "array expressions, cupy.fft",
    "mathpy": "fused FFT callbacks, stateful plans",
}


@dataclasses.dataclass
class Inputs:
    """What a pipeline's ``run`` takes, as arrays of one package."""

    science: object
    reference: object
    psfs: object
    sigma_science: float
    sigma_reference: float
    masked: np.ndarray   # (m, 2) positions (y, x) of catalogue bright stars: detections there are vetoed (host)

    def to(self, xp):
        return Inputs(xp.asarray(self.science), xp.asarray(self.reference), xp.asarray(self.psfs),
                      self.sigma_science, self.sigma_reference, self.masked)

    def args(self):
        return self.science, self.reference, self.psfs, self.sigma_science, self.sigma_reference


@dataclasses.dataclass
class Result:
    difference: object       # (n, n) counts, NumPy or CuPy
    score: object            # (n, n) sigma
    detections: np.ndarray   # (m, 2) pixel (row, col), brightest first
    peaks: np.ndarray        # (m,) score at the detections


def inputs(scene, config):
    """The pipeline inputs for a scene: both images, their sky noise, the science PSF model at each stamp's
    centre and the bright-star mask (NumPy)."""
    c = config
    centres = np.arange(c.grid) * c.core + c.core / 2
    cy, cx = np.meshgrid(centres, centres, indexing="ij")
    psfs = scene.science.psf.stamps(cy.reshape(-1), cx.reshape(-1), c.n, c.psf_radius)
    return Inputs(scene.science.image, scene.reference.image, psfs, scene.science.sky_sigma,
                  scene.reference.sky_sigma, scene.bright_stars)


def gpu_available():
    """Whether CuPy and a CUDA GPU are usable here."""
    import mathpy
    if not mathpy.cuda_is_available():
        return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def make_pipeline(name, config, gpu=None, **options):
    """(pipeline, array module) for an implementation: "numpy" runs on the CPU, "cupy" on the GPU, "mathpy" on the
    GPU when ``gpu`` (default: when one is available), else on mathpy's CPU execution space. ``options`` go to
    :class:`.MathpyPipeline` (e.g. ``solver="lu"``)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; allowed are {', '.join(IMPLEMENTATIONS)}")
    if options and name != "mathpy":
        raise ValueError(f"options {sorted(options)} are for the mathpy pipeline, not {name!r}")
    gpu = gpu_available() if gpu is None else gpu
    if name == "numpy":
        return ArrayPipeline(config, np), np
    if name == "cupy":
        import cupy
        return ArrayPipeline(config, cupy), cupy
    if gpu:
        import cupy
        return MathpyPipeline(config, cupy, **options), cupy
    return MathpyPipeline(config, np, **options), np


def subtract(pipeline, xp, data, timer=None):
    """Run one image pair (``data``: :class:`Inputs` in ``xp``) and detect. The :class:`Result`'s images stay where
    the pipeline ran (see :func:`to_numpy`); the detections are NumPy (finding them waits for the GPU)."""
    difference, score = pipeline.run(*data.args(), timer=timer)
    detections, peaks = sfft.detect(xp, score, pipeline.config.threshold)
    detections, peaks = sfft.veto(detections, peaks, data.masked, BRIGHT_STAR_RADIUS)
    if timer is not None:
        timer.mark("detection")
    return Result(difference, score, detections, peaks)


def to_numpy(result):
    """The result with its images copied to NumPy arrays."""
    host = (lambda a: a.get()) if hasattr(result.score, "get") else np.asarray
    return Result(host(result.difference), host(result.score), result.detections, result.peaks)


def relative_error(result, reference, data):
    """The largest deviation of a result's difference (in sky-noise units) and score images from the reference's,
    relative to the science image's dynamic range (its largest value in sky-noise units): the scale float32
    arithmetic works at, since the difference is what remains after the scene cancels. NumPy results and inputs."""
    sigma = data.sigma_science
    dynamic_range = float(np.max(np.abs(np.asarray(data.science)))) / sigma
    d = float(np.max(np.abs(result.difference - reference.difference))) / sigma
    s = float(np.max(np.abs(result.score - reference.score)))
    return max(d, s) / dynamic_range


def tolerance(config):
    """Single-precision agreement: each of the four FFT stages between the images and the results (forward,
    correlations, kernel spectra, inverse) contributes at most about eps * log2(N) relative to the data's scale,
    N = P^2 the FFT size."""
    return 4 * float(np.finfo(np.float32).eps) * math.log2(config.stamp ** 2)
