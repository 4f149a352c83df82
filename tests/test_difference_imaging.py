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
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import diffim  # noqa: E402
from diffim import gathered_solve, sfft  # noqa: E402

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
    for image in (result.difference, result.score):  # what detection reads: contiguous float32 images
        assert image.dtype == np.float32 and image.flags.c_contiguous and image.shape == (SMALL.n, SMALL.n)
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


@pytest.mark.parametrize("name, options", [("numpy", {}), ("mathpy", {}), ("mathpy", {"solver": "lu"})],
                         ids=["numpy", "mathpy", "mathpy-lu"])
def test_fit_is_the_least_squares_solution(name, options):
    """The kernels and backgrounds from the Fourier-space normal equations are the least-squares fit of each stamp
    with an explicit design matrix: the reference shifted circularly by every kernel offset, and a plane. Compared
    through the fitted models (well conditioned), to the pipeline's single-precision tolerance; mathpy with its
    fused solve (symmetric elimination) and with the array pipeline's LU."""
    from scipy.ndimage import gaussian_filter

    config = diffim.Config(n=48, core=16, pad=4, kernel_radius=2, psf_radius=2, norm_grid=16)
    rng = np.random.default_rng(1)
    p, n = config.stamp, config.n
    reference = gaussian_filter(rng.standard_normal((n, n)) * 3 + 50, 1.0) + rng.standard_normal((n, n)) * 0.3
    ramp = 0.1 * np.arange(n)[None, :]
    science = gaussian_filter(reference, 0.8) * 1.3 + 5 + ramp + rng.standard_normal((n, n)) * 0.3
    sigmas = 0.7, 0.4
    pipeline, _ = diffim.make_pipeline(name, config, gpu=False, **options)
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


def _symmetric(systems):
    """The augmented systems with M replaced by its lower triangle mirrored (what the fused solve reads)."""
    m = np.tril(systems[..., :-1]) + np.swapaxes(np.tril(systems[..., :-1], -1), 1, 2)
    return np.concatenate([m, systems[..., -1:]], axis=2)


def _solve_error(x, systems):
    """Largest error of solutions x (B, N) relative to each one's largest entry, against LAPACK's LU of
    :func:`_symmetric` systems, and the float64 bound N eps cond(M) of a backward-stable solve."""
    m = _symmetric(systems.astype(np.float64))
    exact = np.linalg.solve(m[..., :-1], m[..., -1:])[..., 0]
    error = np.abs(x - exact).max(axis=1) / np.abs(exact).max(axis=1)
    bound = m.shape[1] * np.finfo(np.float64).eps * np.linalg.cond(m[..., :-1])
    return error, bound


def test_ldlt_solve_solves_the_pipelines_normal_equations(scene):
    """The fused solve's arithmetic (NumPy) on the pipeline's real systems: LAPACK's answer for the symmetric system
    of their lower triangle to float64 rounding times the condition number."""
    data = diffim.inputs(scene, SMALL)
    systems = diffim.make_pipeline("numpy", SMALL, gpu=False)[0].equations(
        data.science, data.reference, data.sigma_science, data.sigma_reference)
    error, bound = _solve_error(gathered_solve.ldlt_solve(systems), systems)
    assert (error <= bound).all(), (error.max(), bound.min())


_SIMULATED_SOLVE = """
import json, sys
import numpy as np
sys.path.insert(0, "examples")
from numba import cuda
from diffim.gathered_solve import ldlt_solve, packed_index
from diffim.solve_kernel import kernel_function
rng = np.random.default_rng(0)
for n, threads, b in [(40, 32, 2), (29, 64, 3)]:   # more rows than warps, more unknowns than threads
    g = rng.standard_normal((b, n, 3 * n))
    m = g @ g.transpose(0, 2, 1) + 0.1 * np.eye(n)
    m[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] += 1e-3   # the upper triangle must not be read
    systems = np.concatenate([m, rng.standard_normal((b, n, 1))], axis=2).astype(np.float32)
    source = np.concatenate([rng.standard_normal(7).astype(np.float32), systems.reshape(-1)])
    index = 7 + np.arange(systems.size).reshape(systems.shape)   # the systems sit after other values
    solution = np.full((b, n), np.nan, np.float32)
    cuda.jit(kernel_function(n, threads))[b, threads](source, packed_index(index).astype(np.int32), solution)
    print(json.dumps({"n": n, "systems": systems.tolist(), "solution": solution.tolist(),
                      "reference": ldlt_solve(systems).tolist()}))
"""


def test_solve_kernel_in_the_simulator():
    """The numba-cuda kernel of the fused solve, run by numba's CUDA simulator (in a subprocess: the simulator must
    be on before numba is imported): the NumPy reference of its arithmetic to float32 rounding of the stored
    solution, and LAPACK's solution of the symmetric system of its lower triangle."""
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-c", _SIMULATED_SOLVE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    cases = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [case["n"] for case in cases] == [40, 29]
    eps32 = float(np.finfo(np.float32).eps)
    for case in cases:
        systems, solution, reference = (np.array(case[k]) for k in ("systems", "solution", "reference"))
        scale = np.abs(reference).max(axis=1, keepdims=True)
        assert (np.abs(solution - reference) <= eps32 * scale).all(), case["n"]
        error, bound = _solve_error(solution, systems)
        assert (error <= bound + eps32).all(), (case["n"], error.max())


def test_solve_kernel_compiles_for_the_gpu():
    """Without a GPU: the kernel for the pipeline's 84 unknowns compiles to sm_90 PTX with the packed system in 29 KB
    of shared memory and nothing in local memory."""
    pytest.importorskip("numba.cuda")
    from numba import cuda
    from numba.cuda.cudadrv.error import NvvmSupportError
    from diffim.solve_kernel import kernel_function

    unknowns = diffim.Config(n=4096).taps + 3
    try:
        ptx, _ = cuda.compile_ptx(kernel_function(unknowns), "void(float32[::1], int32[:, ::1], float32[:, ::1])",
                                  cc=(9, 0), opt=True)
    except NvvmSupportError as e:  # no NVVM here
        pytest.skip(str(e))
    shared = [int(size) for size in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", ptx)]
    assert shared == [8 * gathered_solve.packed_size(unknowns)], shared
    assert "ld.local" not in ptx and "st.local" not in ptx


def test_fused_solve_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="solver must be 'fused' or 'lu'"):
        diffim.MathpyPipeline(SMALL, solver="cholesky")
    large = diffim.Config(n=512, core=128, kernel_radius=5)  # 124 unknowns
    with pytest.raises(ValueError, match=f"1 to {gathered_solve.MAX_UNKNOWNS} unknowns.*got 124.*solver='lu'"):
        diffim.MathpyPipeline(large)
    with pytest.raises(ValueError, match="options.*mathpy"):
        diffim.make_pipeline("cupy", SMALL, gpu=False, solver="lu")


def test_detection_methods_find_the_local_maxima():
    """Both ways of detecting (a maximum filter of the whole image, neighbourhoods of the pixels above the
    threshold) give the local maxima an explicit loop finds: border pixels with their clipped neighbourhood, equal
    neighbours both kept, a pixel next to a larger one just outside the 5 x 5 window kept."""
    rng = np.random.default_rng(2)
    score = rng.standard_normal((40, 50)).astype(np.float32) * 2
    score[0, 0] = score[0, 1] = 9          # a tie on the border
    score[39, 49] = 8                       # a corner
    score[20, 20], score[20, 23] = 7, 7.5   # 3 apart: the smaller is no peak
    score[30, 10], score[30, 13] = 7, 7.5   # 3 apart along the other axis too
    score[10, 30], score[10, 33] = 7.5, 7
    threshold, radius = 4.0, 2
    expected = []
    for r, c in zip(*np.nonzero(score > threshold)):
        window = score[max(r - radius, 0):r + radius + 1, max(c - radius, 0):c + radius + 1]
        if score[r, c] >= window.max():
            expected.append((-score[r, c], r * score.shape[1] + c, r, c))
    expected.sort()
    assert len(expected) > 10
    for method in ("filter", "candidates"):
        found, peaks = sfft.detect(np, score, threshold, radius, method=method)
        np.testing.assert_array_equal(found, [(r, c) for _, _, r, c in expected])
        np.testing.assert_array_equal(peaks, [-v for v, _, _, _ in expected])
    with pytest.raises(ValueError, match="method"):
        sfft.detect(np, score, threshold, method="watershed")


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
    for name, options in (("cupy", {}), ("mathpy", {"solver": "lu"}), ("mathpy", {})):
        pipeline, xp = diffim.make_pipeline(name, config, True, **options)
        result = diffim.to_numpy(diffim.subtract(pipeline, xp, data.to(xp)))
        error = diffim.relative_error(result, reference, data)
        assert error <= diffim.tolerance(config), (name, options, error)
        recovered, _ = sfft.match(result.detections, scene.transients)
        assert len(recovered) == len(scene.transients), (name, options)
    # the solve kernel on the GPU: the float64 solutions of the symmetric systems it reads, stored in float32
    import cupy
    args = cupy.asarray(data.science), cupy.asarray(data.reference), data.sigma_science, data.sigma_reference
    systems = cupy.asnumpy(pipeline.equations(*args))
    solution = np.concatenate([cupy.asnumpy(part) for part in pipeline.fit(*args)], axis=1)
    error, bound = _solve_error(solution, systems)
    assert (error <= bound + float(np.finfo(np.float32).eps)).all(), error.max()
    # mathpy's plans serve a second pair on the GPU too
    other = diffim.make_scene(n, seed=6)
    other_data = diffim.inputs(other, config)
    again = diffim.to_numpy(diffim.subtract(pipeline, cupy, other_data.to(cupy)))
    assert diffim.relative_error(again, _run("numpy", config, other)[0], other_data) <= diffim.tolerance(config)


_SIMULATED_PEAKS = """
import json, sys
import numpy as np
sys.path.insert(0, "examples")
from diffim.peak_kernel import THREADS, peaks_kernel
from numba import cuda
score = np.array(json.loads(sys.argv[1]), np.float32)
count = np.zeros(1, np.int32)
flat, values = np.full(64, -1, np.int64), np.zeros(64, np.float32)
blocks = (-(-score.shape[1] // THREADS[0]), -(-score.shape[0] // THREADS[1]))
cuda.jit(peaks_kernel)[blocks, THREADS](score, np.float32(4.0), np.int32(2), count, flat, values)
print(json.dumps({"count": int(count[0]), "flat": flat[:count[0]].tolist(), "values": values[:count[0]].tolist()}))
"""


def test_peak_kernel_in_the_simulator():
    """The GPU source extractor's kernel, run by numba's CUDA simulator (in a subprocess: the simulator must be on
    before numba is imported), finds the peaks of the "candidates" and "filter" methods: ties on the border, corners,
    a smaller pixel 3 apart from a larger one, on an image that is not a multiple of the block in either axis."""
    rng = np.random.default_rng(2)
    score = rng.standard_normal((21, 37)).astype(np.float32) * 2
    score[0, 0] = score[0, 1] = 9
    score[20, 36] = 8
    score[10, 10], score[10, 13] = 7, 7.5
    score[15, 5], score[18, 5] = 7.5, 7
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-c", _SIMULATED_PEAKS, json.dumps(score.tolist())], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    expected_flat, expected_values = sfft._peaks_among_candidates(score, 4.0, 2)
    assert found["count"] == len(expected_flat) > 5
    order = np.argsort(found["flat"])
    np.testing.assert_array_equal(np.array(found["flat"])[order], np.sort(expected_flat))
    np.testing.assert_array_equal(np.array(found["values"], np.float32)[order],
                                  expected_values[np.argsort(expected_flat)])


@pytest.mark.gpu
def test_gpu_peak_kernel_matches_the_maximum_filter():
    """On the GPU the kernel and the maximum filter give the same detections, in the same order, also when there are
    more peaks than the kernel's first buffer holds."""
    cupy = pytest.importorskip("cupy")
    score = cupy.asarray(np.random.default_rng(3).standard_normal((1000, 777)).astype(np.float32) * 3)
    for threshold in (4.0, 0.5):
        by_filter = sfft.detect(cupy, score, threshold, method="filter")
        by_kernel = sfft.detect(cupy, score, threshold, method="kernel")
        assert len(by_filter[0]) > (5000 if threshold < 1 else 10)
        np.testing.assert_array_equal(by_kernel[0], by_filter[0])
        np.testing.assert_array_equal(by_kernel[1], by_filter[1])
