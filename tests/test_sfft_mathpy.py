"""mathpy's backend for SFFT's subtraction (examples/sfft_mathpy) against an independent float64 least-squares
reference (tests/_sfft_reference.py, CI), against SFFT 1.7.3's NumPy backend (when sfft is installed) and against
its pure-CuPy backend (GPU).

The tolerances are derived, componentwise, from float64 rounding and the linear system's sensitivity. Each correlation
value ``c_ab(tau)`` comes from two forward FFTs, a product and an inverse FFT: its error is at most
``(3 g + u) |f_a| |f_b|`` (g = ``fft_bound(float64, N0 N1)``, the 2-norms of the fields). An entry of the normal
matrix M (or of the right-hand side r) combines four of them, so ``|dM| <= 4 (3 g + u) s s^T`` and ``|dr| <= 4 (3 g +
u) s |J|`` with s the norm of each unknown's field. To first order the solution then moves by at most
``|M^-1| (|dM| |x| + |dr|)``, plus the solve's own ``n u |M^-1| |M| |x|`` (Cholesky and QR are backward stable),
counted once for each computation compared (``sources``). The difference ``J - A x`` moves by ``|A| |dx|`` (A the
design matrix of I, applied as convolutions of |f_e| with |dx|), plus its own transforms' ``3 g sum_e |K_e|_1 |f_e|
+ 2 g |J|``. Each test also checks that its bound is not vacuous: below 1e-6 of the largest coefficient and 1e-5
of the image's peak (a kernel tap off by one part in 10^5 of the fit, or any indexing error, is far above them; the
errors found are about 1e-12 of those scales).
"""

import pathlib
import sys

import numpy as np
import pytest

from _sfft_reference import design, reference_subtract
from _tolerance import assert_within, fft_bound, unit_roundoff

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT / "examples") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples"))

import diffim  # noqa: E402
import sfft_mathpy  # noqa: E402
from sfft_mathpy import Params  # noqa: E402


def image_pair(n0, n1, seed=0):
    """(I, J, mI, mJ, contamination) float64 from the project's sky generator: I the reference (convolved), J the
    science exposure with transients, both sky-subtracted; the masked pair keeps the brightest 40% of I's pixels in
    both and zeroes the rest (a pipeline keeps its sources); the contamination mask marks I's brightest 1%."""
    # cropped from a scene of at least 256^2 (on smaller images the generator may not find room for its transients)
    # and large enough for the window: the GPU cases take 512^2 from 16 * seed, 32 * seed on
    scene = _scene(max(256, 1 << (max(n0 + 16 * seed, n1 + 32 * seed) - 1).bit_length()))
    window = np.s_[16 * seed:16 * seed + n0, 32 * seed:32 * seed + n1]
    I = scene.reference.image[window].astype(np.float64)
    J = scene.science.image[window].astype(np.float64)
    I, J = I - np.median(I), J - np.median(J)
    fitted = I > np.percentile(I, 60)
    return I, J, np.where(fitted, I, 0.0), np.where(fitted, J, 0.0), I > np.percentile(I, 99)


_SCENES = {}


def _scene(size):
    if size not in _SCENES:
        _SCENES[size] = diffim.make_scene(size, seed=0)
    return _SCENES[size]


def fields(params, image):
    """The kernel fields I cx^i cy^j (Fij, N0, N1) and the background polynomials (Fpq, N0, N1), float64."""
    cx, cy = params.coordinates()
    kernel = np.stack([image * cx ** i * cy ** j for i, j in params.ij])
    background = np.stack([np.broadcast_to(cx ** p * cy ** q, image.shape) for p, q in params.pq])
    return kernel, background


def bounds(params, I, J, mI, mJ, solution, normal_matrix, sources=1):
    """(bound on |solution - exact| (NEQ,), bound on |difference - exact| (N0, N1)), SFFT's units (the module)."""
    p = params
    g, u = fft_bound(np.float64, p.pixels), unit_roundoff(np.float64)
    c = 4 * (3 * g + u)
    kernel, background = fields(p, mI)
    scale = np.concatenate([np.repeat(np.linalg.norm(kernel.reshape(p.Fij, -1), axis=1), p.Fab),
                            np.linalg.norm(background.reshape(p.Fpq, -1), axis=1)])
    free = p.free
    x = solution.copy()
    x[:p.Fijab] /= p.pixels                                   # the basis of the fields
    s, xf, m = scale[free], np.abs(x[free]), normal_matrix[np.ix_(free, free)]
    inverse = np.abs(np.linalg.inv(m))
    dx = np.zeros(p.NEQ)
    dx[free] = sources * (inverse @ (c * s * (s @ xf) + c * s * np.linalg.norm(mJ)
                                     + len(free) * u * (np.abs(m) @ xf)))
    # the difference: |A_I| |dx| as convolutions, plus the transforms of the model
    kernel, background = fields(p, I)
    kernels = dx[:p.Fijab].reshape(p.Fij, p.Fab)
    s = p.offsets
    spread = np.zeros((p.Fij,) + I.shape)
    spread[:, s[:, 0] % p.N0, s[:, 1] % p.N1] = kernels        # |dx| as kernel images, offset s at s mod N
    centre = p.w0 * p.L1 + p.w1
    moved = np.zeros(I.shape)
    for e in range(p.Fij):
        magnitude = np.abs(kernel[e])
        moved += np.fft.irfft2(np.fft.rfft2(magnitude) * np.fft.rfft2(spread[e]), s=I.shape)
        moved += magnitude * (kernels[e].sum() - kernels[e, centre])
    moved += np.tensordot(dx[p.Fijab:], np.abs(background), axes=1)
    model = sources * (3 * g * sum(np.abs(solution[e * p.Fab:(e + 1) * p.Fab]).sum() / p.pixels
                                   * np.linalg.norm(kernel[e]) for e in range(p.Fij)) + 2 * g * np.linalg.norm(J))
    dx[:p.Fijab] *= p.pixels
    return dx, np.abs(moved) + model


def reference_matrix(params, mI):
    fit = design(mI, params.w0, params.DK, params.DB)
    return fit.T @ fit


CPU_CASES = {
    # non-square, masked fit, contamination: SFFT's kernel and background orders up to 2 and 1, ConstPhotRatio
    "dk2-db1": (Params(64, 48, 2, 2, 2, 1, True), 0),
    # the smallest configuration: one kernel field, a flat background, all unknowns free, a padded correlation buffer
    "dk0-db0-free": (Params(40, 40, 1, 1, 0, 0, False), 1),
}


@pytest.mark.parametrize("case", CPU_CASES)
def test_cpu_backend_matches_the_least_squares_reference(case):
    params, seed = CPU_CASES[case]
    I, J, mI, mJ, mask = image_pair(params.N0, params.N1, seed)
    solution, difference, contamination = sfft_mathpy.GSS(I, J, mI, mJ, params, ContamMask_I=mask)
    expected, expected_difference, _ = reference_subtract(I, J, mI, mJ, params.w0, params.DK, params.DB,
                                                          params.ConstPhotRatio)
    bound_x, bound_d = bounds(params, I, J, mI, mJ, expected, reference_matrix(params, mI), sources=2)
    assert_within(solution, expected, bound_x, f"{case}: solution")
    assert_within(difference, expected_difference, bound_d, f"{case}: difference")
    assert bound_x.max() < 1e-6 * np.abs(expected).max() and bound_d.max() < 1e-5 * np.abs(J).max(), "vacuous bound"
    if not params.ConstPhotRatio:
        assert np.count_nonzero(solution) == params.NEQ
    # the contamination mask: where I's masked pixels spread through the kernels (SFFT's threshold)
    solution_only_kernels = expected.copy()
    solution_only_kernels[params.Fijab:] = 0
    spread = design(mask.astype(np.float64), params.w0, params.DK, params.DB) @ (
        solution_only_kernels * np.r_[np.full(params.Fijab, 1 / params.pixels), np.ones(params.Fpq)])
    sure = np.abs(spread.reshape(I.shape) - 0.001) > 1e-9
    np.testing.assert_array_equal(contamination[sure], (spread.reshape(I.shape) > 0.001)[sure])


def test_packet_flips_the_difference_and_keeps_nan():
    """PCCP: ForceConv="SCI" convolves the science image and negates, NaN of either image is NaN in the difference
    and the subtraction fills those pixels from the masked images."""
    params = CPU_CASES["dk2-db1"][0]
    I, J, mI, mJ, _ = image_pair(params.N0, params.N1, 0)
    ref, sci = I.copy(), J.copy()
    ref[3, 5] = np.nan
    solution, difference = sfft_mathpy.PCCP(sci, ref, mJ, mI, ForceConv="SCI", GKerHW=2, KerPolyOrder=2,
                                            BGPolyOrder=1)
    filled = ref.copy()
    filled[3, 5] = mI[3, 5]
    expected_solution, expected, _ = sfft_mathpy.GSS(filled, J, mI, mJ, params)
    np.testing.assert_array_equal(solution, expected_solution)
    assert np.isnan(difference[3, 5]) and np.isnan(difference).sum() == 1
    keep = ~np.isnan(difference)
    np.testing.assert_array_equal(difference[keep], -expected[keep])


def test_bad_inputs_are_refused_before_any_work():
    params = CPU_CASES["dk2-db1"][0]
    I, J, mI, mJ, _ = image_pair(params.N0, params.N1, 0)
    with pytest.raises(ValueError, match=r"shape \(63, 48\).*\(64, 48\)"):
        sfft_mathpy.GSS(I[:-1], J, mI, mJ, params)
    with pytest.raises(TypeError, match="PixA_I|dtype complex128"):
        sfft_mathpy.GSS(I.astype(np.complex128), J, mI, mJ, params)
    with pytest.raises(TypeError, match="sfft_mathpy.Params|SFFT's configuration"):
        sfft_mathpy.GSS(I, J, mI, mJ, {"N0": 64})
    with pytest.raises(ValueError, match="ForceConv must be 'REF' or 'SCI'"):
        sfft_mathpy.PCCP(I, J, mI, mJ, ForceConv="AUTO", GKerHW=2)
    bad = mI.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="PixA_mREF_GPU contains NaN"):
        sfft_mathpy.PCCP(I, J, bad, mJ, ForceConv="REF", GKerHW=2)
    with pytest.raises(ValueError, match="DK must be 0, 1, 2 or 3"):
        Params(64, 64, 2, 2, 4, 0)
    with pytest.raises(ValueError, match="half-width"):
        Params(16, 16, 4, 4, 1, 0)
    assert Params.from_sfft(({"N0": 64, "N1": 48, "w0": 2, "w1": 2, "DK": 2, "DB": 1, "ConstPhotRatio": True},
                             {})) == params


def test_callbacks_compile_for_the_gpu():
    """Without a GPU: the five callbacks compile to LTO-IR for sm_90 (complex128 transforms) at the Roman
    configuration."""
    pytest.importorskip("numba.cuda")
    import mathpy
    import mathpy.fft
    from sfft_mathpy.backend import Layout
    from sfft_mathpy.callbacks import callbacks

    params = Params(4096, 4096, 9, 9, 2, 0, True)
    user_data = {"field_prolog": "complex128", "product_prolog": "complex128", "window_epilog": None,
                 "kernel_prolog": "float64", "multiplier_epilog": "complex128"}
    functions = callbacks(params, Layout.for_params(params))
    assert set(functions) == set(user_data)
    for name, info in user_data.items():
        compile_ = mathpy.fft.compile_prolog if name.endswith("prolog") else mathpy.fft.compile_epilog
        try:
            ltoir = compile_(functions[name], "complex128", info, compute_capability=(9, 0))
        except mathpy.LibraryNotFoundError as e:  # no NVVM here
            pytest.skip(str(e))
        assert len(ltoir) > 1000


@pytest.mark.slow
def test_cpu_backend_matches_sfft_numpy_backend():
    """SFFT 1.7.3's own NumPy backend (its numba kernels take about 90 s to compile per configuration)."""
    pytest.importorskip("sfft")
    from sfft.sfftcore.SFFTConfigure import SingleSFFTConfigure
    from sfft.sfftcore.SFFTSubtract import GeneralSFFTSubtract

    n, w, dk, db = 64, 3, 2, 2
    I, J, mI, mJ, mask = image_pair(n, n, 2)
    config = SingleSFFTConfigure.SSC(NX=n, NY=n, KerHW=w, KerPolyOrder=dk, BGPolyOrder=db, ConstPhotRatio=True,
                                     BACKEND_4SUBTRACT="Numpy", NUM_CPU_THREADS_4SUBTRACT=2, VERBOSE_LEVEL=0)
    expected, expected_difference, expected_mask = GeneralSFFTSubtract.GSS(
        I, J, mI, mJ, config, ContamMask_I=mask, BACKEND_4SUBTRACT="Numpy", NUM_CPU_THREADS_4SUBTRACT=2,
        VERBOSE_LEVEL=0)
    solution, difference, contamination = sfft_mathpy.GSS(I, J, mI, mJ, config, ContamMask_I=mask)
    params = Params.from_sfft(config)
    bound_x, bound_d = bounds(params, I, J, mI, mJ, expected, reference_matrix(params, mI), sources=2)
    assert_within(solution, expected, bound_x, "solution vs SFFT")
    assert_within(difference, expected_difference, bound_d, "difference vs SFFT")
    assert bound_x.max() < 1e-4 * np.abs(expected).max() and bound_d.max() < 1e-5 * np.abs(J).max()
    assert (contamination != expected_mask).mean() < 1e-3   # pixels at the threshold may go either way


@pytest.mark.gpu
@pytest.mark.parametrize("n, w, dk, db", [(256, 4, 2, 2), (512, 9, 2, 0)])
def test_gpu_backend_matches_sfft_cupy_backend(n, w, dk, db):
    """SFFT's pure-CuPy packet against mathpy's backend on the GPU, the second case the Roman pipeline's orders; the
    sensitivity |M^-1| comes from the system mathpy assembled (float64, on the host)."""
    cupy = pytest.importorskip("cupy")
    pytest.importorskip("sfft")
    from sfft.sfftcore.SFFTConfigure import SingleSFFTConfigure
    from sfft.sfftcore.SFFTSubtract import GeneralSFFTSubtract_PureCupy

    I, J, mI, mJ, mask = image_pair(n, n, 4)
    config = SingleSFFTConfigure.SSC(NX=n, NY=n, KerHW=w, KerPolyOrder=dk, BGPolyOrder=db, ConstPhotRatio=True,
                                     BACKEND_4SUBTRACT="Cupy", VERBOSE_LEVEL=0)
    device = [cupy.asarray(a) for a in (I, J, mI, mJ)]
    expected, expected_difference, _ = (cupy.asnumpy(a) if a is not None else None for a in
                                        GeneralSFFTSubtract_PureCupy.GSS(*device, config, VERBOSE_LEVEL=0))
    solution, difference, _ = (cupy.asnumpy(a) if a is not None else None for a in sfft_mathpy.GSS(*device, config))
    params = Params.from_sfft(config)
    backend = sfft_mathpy.backend_for(params, device[0])
    matrix = cupy.asnumpy(backend.equations.assemble(backend.windows(device[2], device[3]))[0])
    bound_x, bound_d = bounds(params, I, J, mI, mJ, expected, matrix, sources=2)
    assert_within(solution, expected, bound_x, "solution vs SFFT's CuPy backend")
    assert_within(difference, expected_difference, bound_d, "difference vs SFFT's CuPy backend")
    # single precision's claim, on what was measured: the derived bound follows |M^-1| (the normal matrix's
    # condition reaches 1e7 at 512^2), which the two backends beat by far (7.5e-13 of max |J| at 1024^2 on the H200)
    assert np.abs(difference - expected_difference).max() < 1e-6 * np.abs(J).max()
    cpu_solution, cpu_difference, _ = sfft_mathpy.GSS(I, J, mI, mJ, params)   # mathpy's CPU execution space
    assert_within(solution, cpu_solution, bound_x, "GPU vs CPU solution")
