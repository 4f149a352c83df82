"""examples/diffim, image subtraction in Fourier space (SFFT) three ways: NumPy/SciPy, CuPy and mathpy.

On the CPU, mathpy's pipeline (stateful FFT plans with prolog/epilog callbacks, run by mathpy's CPU execution space)
must agree with the NumPy one to single precision (``diffim.tolerance``: four FFT stages of float32 rounding at the
FFT size, relative to the data's dynamic range) and both must recover every injected transient; the same plans must
serve a second, different image pair; the callbacks must compile to LTO-IR for a GPU. On a GPU, CuPy and mathpy on
cuFFT are held to the same tolerance against NumPy, at the small size and at a size with a few hundred stamps.
The notebook is run by tests/test_notebooks.py.
"""

import contextlib
import dataclasses
import importlib.util
import io
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import diffim  # noqa: E402
from diffim import sfft  # noqa: E402

SMALL = diffim.Config(n=512, core=128)


def _run(name, config, scene, gpu=False):
    pipeline, xp = diffim.make_pipeline(name, config, gpu)
    data = diffim.inputs(scene, config)
    return diffim.to_numpy(diffim.subtract(pipeline, xp, data.to(xp))), pipeline


@pytest.fixture(scope="module")
def scene():
    return diffim.make_scene(SMALL.n, seed=3)


@pytest.fixture(scope="module")
def reference(scene):
    return _run("numpy", SMALL, scene)[0]


def _robust_std(a):
    return 1.4826 * float(np.median(np.abs(a - np.median(a))))


def test_numpy_pipeline_finds_the_transients(scene, reference):
    recovered, spurious = sfft.match(reference.detections, scene.transients)
    assert len(recovered) == len(scene.transients)
    assert spurious <= 1
    # The score is in units of its noise (its normalisation is right), the difference in counts: its noise is the
    # science sky noise made larger by the convolved reference's noise.
    assert 0.95 < _robust_std(reference.score) < 1.08
    assert scene.science.sky_sigma < _robust_std(reference.difference) < 1.3 * scene.science.sky_sigma


def test_mathpy_cpu_matches_numpy(scene, reference):
    result, pipeline = _run("mathpy", SMALL, scene)
    data = diffim.inputs(scene, SMALL)
    error = diffim.relative_error(result, reference, data)
    assert error <= diffim.tolerance(SMALL), error
    recovered, _ = sfft.match(result.detections, scene.transients)
    assert len(recovered) == len(scene.transients)
    np.testing.assert_array_equal(result.detections, reference.detections)

    # The same plans and buffers serve another pair: nothing of the first one may leak into it.
    other = diffim.make_scene(SMALL.n, seed=11)
    other_data = diffim.inputs(other, SMALL)
    again = diffim.to_numpy(diffim.subtract(pipeline, np, other_data))
    expected = _run("numpy", SMALL, other)[0]
    assert diffim.relative_error(again, expected, other_data) <= diffim.tolerance(SMALL)
    assert len(sfft.match(again.detections, other.transients)[0]) == len(other.transients)


@pytest.mark.parametrize("name", ["numpy", "mathpy"])
def test_fit_is_the_least_squares_solution(name):
    """The kernels and backgrounds from the Fourier-space normal equations are the least-squares fit of each stamp
    with an explicit design matrix: the reference shifted circularly by every kernel offset, and a plane. Compared
    through the fitted models (well conditioned), to the pipeline's single-precision tolerance."""
    from scipy.ndimage import gaussian_filter

    config = diffim.Config(n=48, core=16, pad=4, kernel_radius=2, psf_radius=2, norm_grid=16)
    rng = np.random.default_rng(1)
    p, n = config.stamp, config.n
    reference = gaussian_filter(rng.standard_normal((n, n)) * 3 + 50, 1.0) + rng.standard_normal((n, n)) * 0.3
    ramp = 0.1 * np.arange(n)[None, :]
    science = gaussian_filter(reference, 0.8) * 1.3 + 5 + ramp + rng.standard_normal((n, n)) * 0.3
    sigmas = 0.7, 0.4
    pipeline, _ = diffim.make_pipeline(name, config, gpu=False)
    kernels, backgrounds = pipeline.fit(science.astype(np.float32), reference.astype(np.float32), *sigmas)

    tables = sfft.Tables(config)
    u = np.broadcast_to(tables.ramp.astype(np.float64)[None, :], (p, p)).reshape(-1)
    v = np.broadcast_to(tables.ramp.astype(np.float64)[:, None], (p, p)).reshape(-1)
    padded = [np.pad(image, config.pad, mode="reflect") / sigma for image, sigma in zip((science, reference), sigmas)]
    worst = 0.0
    for b in range(config.batch):
        gy, gx = divmod(b, config.grid)
        window = np.s_[gy * config.core:gy * config.core + p, gx * config.core:gx * config.core + p]
        i_stamp, j_stamp = padded[0][window], padded[1][window]
        j_stamp = j_stamp - j_stamp.mean()
        design = np.stack([np.roll(j_stamp, (dy, dx), axis=(0, 1)).reshape(-1) for dy, dx in zip(tables.dy, tables.dx)]
                          + [np.ones(p * p), u, v], axis=1)
        theta = np.linalg.lstsq(design, i_stamp.reshape(-1), rcond=None)[0]
        fitted = design @ np.concatenate([kernels[b], backgrounds[b]])
        worst = max(worst, np.abs(fitted - design @ theta).max() / np.abs(i_stamp).max())
    assert worst <= diffim.tolerance(config), worst


def test_mathpy_normal_equations_are_the_array_pipelines(scene):
    """mathpy gathers the normal equations from where its correlation plans stored their source (the lags on
    modulated rows and columns, the ramp projections and sums in three extra columns per stamp): the same augmented
    systems as the array pipeline's array expressions, entry by entry, to single precision (two FFT stages of
    float32 rounding) relative to each stamp's largest entry. A ridge far above that rounding shows it is applied."""
    config = dataclasses.replace(SMALL, ridge=1e-3)
    data = diffim.inputs(scene, config)
    args = data.science, data.reference, data.sigma_science, data.sigma_reference
    expected = diffim.make_pipeline("numpy", config, gpu=False)[0].equations(*args)
    found = diffim.make_pipeline("mathpy", config, gpu=False)[0].equations(*args)
    assert found.shape == expected.shape == (config.batch, config.taps + 3, config.taps + 4)
    scale = np.abs(expected).max(axis=(1, 2))
    error = (np.abs(found - expected).max(axis=(1, 2)) / scale).max()
    assert error <= 2 * float(np.finfo(np.float32).eps) * np.log2(config.stamp ** 2), error


def test_every_mathpy_plan_is_one_cufft_plan():
    """cuFFT runs a plan with callbacks only when its layouts fold into one (n, embed, stride, dist, batch): checked
    here for every plan of the pipeline (the CPU engine would run the others too)."""
    from mathpy.host.fft._layout import cufft_params

    pipeline = diffim.make_pipeline("mathpy", SMALL, gpu=False)[0]
    assert len(pipeline.plans) == 7
    for plan in pipeline.plans:
        params = cufft_params(plan.transform, allow_loops=False)
        assert params.executes == 1, plan


def test_relative_error_sees_a_wrong_kernel(scene, reference):
    """The tolerance is tight enough to catch a small modelling error: one kernel tap fewer per side."""
    config = diffim.Config(n=SMALL.n, core=SMALL.core, kernel_radius=SMALL.kernel_radius - 1)
    result = _run("numpy", config, scene)[0]
    assert diffim.relative_error(result, reference, diffim.inputs(scene, SMALL)) > 10 * diffim.tolerance(SMALL)


def test_callbacks_compile_for_the_gpu():
    """Without a GPU: every callback compiles to LTO-IR for sm_90 with the user data it is given."""
    pytest.importorskip("numba.cuda")
    import mathpy.fft
    from diffim.mathpy_pipeline import callbacks

    user_data = {"stamps_prolog": "complex64", "stamps_epilog": None, "correlation_prolog": "complex64",
                 "correlation_epilog": None, "lag_epilog": None, "kernel_psf_prolog": "float32",
                 "norm_grid_prolog": "float32", "norm_prolog": "complex64", "norm_epilog": "complex64",
                 "difference_prolog": "complex64", "difference_epilog": "float32"}
    functions = callbacks(diffim.Config(n=4096))
    assert set(functions) == set(user_data)
    for name, info in user_data.items():
        compile_ = mathpy.fft.compile_prolog if name.endswith("prolog") else mathpy.fft.compile_epilog
        try:
            ltoir = compile_(functions[name], "complex64", info, compute_capability=(9, 0))
        except mathpy.LibraryNotFoundError as e:  # no NVVM here
            pytest.skip(str(e))
        assert len(ltoir) > 1000


def test_config_rejects_bad_layouts():
    with pytest.raises(ValueError, match="500.*128"):
        diffim.Config(n=500, core=128)
    with pytest.raises(ValueError, match="pad"):
        diffim.Config(n=512, core=128, pad=8)
    with pytest.raises(ValueError, match="kernel_radius"):
        diffim.Config(n=512, core=128, kernel_radius=0)
    from diffim.mathpy_pipeline import Layout
    with pytest.raises(ValueError, match="norm_grid 24 is too large"):  # the model buffer cannot hold B norm grids
        Layout(diffim.Config(n=48, core=16, pad=4, kernel_radius=2, psf_radius=2, norm_grid=24)).check()


@pytest.mark.parametrize("name", ["numpy", "mathpy"])
def test_pipelines_reject_bad_inputs(name, scene):
    pipeline, _ = diffim.make_pipeline(name, SMALL, gpu=False)
    data = diffim.inputs(scene, SMALL)
    good = data.args()
    bad = {0: (data.science[:-1], "shape \\(511, 512\\)"), 1: (data.reference.astype(np.float64), "float64"),
           2: (data.psfs[:, 1:, 1:], "psfs has shape"), 3: (0.0, "sigma_science"), 4: (float("nan"), "sigma_reference")}
    for position, (value, message) in bad.items():
        args = list(good)
        args[position] = value
        with pytest.raises((TypeError, ValueError), match=message):
            pipeline.run(*args)


def test_example_small_runs():
    spec = importlib.util.spec_from_file_location("difference_imaging", ROOT / "examples" / "difference_imaging.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = example.main(["--small"])
    lines = out.getvalue().strip().splitlines()
    assert status == 0, out.getvalue()
    assert lines[-1].startswith("max relative error vs NumPy reference: ")
    assert float(lines[-1].rsplit(" ", 1)[1]) <= diffim.tolerance(SMALL)
    assert any(line.startswith("mathpy") and "recovered 5/5" in line for line in lines), out.getvalue()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [512, 2048])
def test_gpu_pipelines_match_numpy(n):
    pytest.importorskip("cupy")
    config = diffim.Config(n=n, core=128 if n <= 1024 else 256)
    scene = diffim.make_scene(n, seed=5)
    data = diffim.inputs(scene, config)
    reference = _run("numpy", config, scene)[0]
    for name in ("cupy", "mathpy"):
        result, pipeline = _run(name, config, scene, gpu=True)
        error = diffim.relative_error(result, reference, data)
        assert error <= diffim.tolerance(config), (name, error)
        recovered, _ = sfft.match(result.detections, scene.transients)
        assert len(recovered) == len(scene.transients), name
    # mathpy's plans serve a second pair on the GPU too
    import cupy
    other = diffim.make_scene(n, seed=6)
    other_data = diffim.inputs(other, config)
    again = diffim.to_numpy(diffim.subtract(pipeline, cupy, other_data.to(cupy)))
    assert diffim.relative_error(again, _run("numpy", config, other)[0], other_data) <= diffim.tolerance(config)
