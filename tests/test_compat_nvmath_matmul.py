"""nvmath-python matmul programs run unchanged through ``import mathpy.compat.nvmath as nvmath``.

Written as nvmath-python's users write them (its documentation's examples are the model), compared with NumPy in
float64. ``xp`` runs each on NumPy and torch on the CPU here and on CuPy and CUDA torch on a GPU machine (gpu-marked);
NumPy operands run on the GPU when there is one, as in nvmath-python.
"""

import logging
import math

import ml_dtypes
import numpy as np
import pytest

from _matmul_reference import bits_ref
from _tolerance import assert_within, epilog_bounds
import mathpy.compat.nvmath as nvmath

advanced = nvmath.linalg.advanced


def nvmath_gpu():
    """Whether host operands run on a GPU here (nvmath's rule, which the compatibility namespace keeps)."""
    import mathpy
    return mathpy.cuda_is_available()
Epilog = advanced.MatmulEpilog
RNG = np.random.default_rng(11)


def _rand(shape, dtype=np.float32):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def _close(actual, expected, k, dtype):
    """Within a matrix product's rounding bound: K * eps(dtype) relative to the sum of |a| |b| (approximated by the
    result's scale and sqrt(K) growth), a few-ulps margin on top."""
    eps = float(np.finfo(np.dtype(dtype)).eps) if np.dtype(dtype).kind in "fc" else 2.0 ** -7
    expected = np.asarray(expected, dtype=np.complex128 if np.iscomplexobj(expected) else np.float64)
    scale = max(float(np.max(np.abs(expected))), 1.0)
    tolerance = 4 * k * eps * scale
    error = float(np.max(np.abs(np.asarray(actual).astype(expected.dtype) - expected)))
    assert error <= tolerance, f"max error {error:.3g} > {tolerance:.3g}"


def _np(xp, x):
    return np.asarray(xp.to_numpy(x))


# --- stateless ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_matmul_with_c_alpha_beta(xp, dtype):
    a, b, c = _rand((6, 5), dtype), _rand((5, 4), dtype), _rand((6, 4), dtype)
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), alpha=1.5, beta=0.5)
    assert xp.is_native(r)
    _close(_np(xp, r), 1.5 * a.astype(np.complex128) @ b + 0.5 * c, 5, dtype)


def test_batched_and_vector_operands(xp):
    a, b = _rand((3, 6, 5)), _rand((5, 4))
    r = advanced.matmul(xp.asarray(a), xp.asarray(b))  # b is broadcast over the batch
    assert tuple(r.shape) == (3, 6, 4)
    _close(_np(xp, r), a.astype(np.float64) @ b, 5, np.float32)
    v = _rand((5,))
    r = advanced.matmul(xp.asarray(a[0]), xp.asarray(v))
    assert tuple(r.shape) == (6,)
    _close(_np(xp, r), a[0].astype(np.float64) @ v, 5, np.float32)


def test_c_broadcast_over_columns(xp):
    a, b, c = _rand((6, 5)), _rand((5, 4)), _rand((6, 1))
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), beta=1.0)
    _close(_np(xp, r), a.astype(np.float64) @ b + c, 5, np.float32)


def test_result_takes_cs_dtype(xp):
    a, b, c = _rand((8, 8), np.float16), _rand((8, 8), np.float16), _rand((8, 8), np.float32)
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), beta=1.0)
    assert _np(xp, r).dtype == np.float32
    _close(_np(xp, r), a.astype(np.float64) @ b + c, 8, np.float16)


def test_beta_rules(xp, caplog):
    a, b, c = _rand((4, 3)), _rand((3, 2)), _rand((4, 2))
    with pytest.raises(ValueError, match="beta"):
        advanced.matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c))
    with pytest.raises(ValueError, match="2-D"):
        advanced.matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c[:, 0]), beta=1.0)
    with caplog.at_level(logging.WARNING):
        r = advanced.matmul(xp.asarray(a), xp.asarray(b), beta=3.0)  # ignored without c, with a warning
    assert "ignored" in caplog.text
    _close(_np(xp, r), a.astype(np.float64) @ b, 3, np.float32)


@pytest.mark.parametrize("epilog", [Epilog.RELU, Epilog.GELU, Epilog.BIAS, Epilog.RELU_BIAS])
def test_epilogs_with_inputs(xp, epilog):
    a, b, bias = _rand((7, 5)), _rand((5, 3)), _rand((7,))
    inputs = {"bias": xp.asarray(bias)} if "BIAS" in epilog.name else None
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), epilog=epilog, epilog_inputs=inputs)
    x = a.astype(np.float64) @ b + (bias[:, None] if inputs else 0)
    d = x
    if "RELU" in epilog.name:
        d = np.maximum(x, 0)
    elif "GELU" in epilog.name:
        d = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    # _tolerance's bound: the product's accumulation, cuBLASLt's measured GELU error (1.5e-5 relative in float32)
    _, bound = epilog_bounds(epilog.name, a, b, np.float32, 1.0, bias[:, None] if inputs else None, x, d)
    assert_within(_np(xp, r), d, bound, f"{epilog.name} on {xp}")


def test_relu_aux_then_drelu(xp):
    a, b, g = _rand((13, 6)), _rand((6, 5)), _rand((5, 5))
    d, aux = advanced.matmul(xp.asarray(a), xp.asarray(b), epilog=Epilog.RELU_AUX)
    x = a.astype(np.float64) @ b
    _close(_np(xp, d), np.maximum(x, 0), 6, np.float32)
    mask = bits_ref(_np(xp, aux["relu_aux"]), 13)
    np.testing.assert_array_equal(mask, x > 0)
    # backward: DRELU with the forward pass's bitmask, as nvmath's examples chain them
    a2 = _rand((13, 5))
    r = advanced.matmul(xp.asarray(a2), xp.asarray(g), epilog=Epilog.DRELU,
                        epilog_inputs={"relu_aux": aux["relu_aux"]})
    _close(_np(xp, r), (a2.astype(np.float64) @ g) * mask, 5, np.float32)


def test_epilog_inputs_without_epilog_are_ignored_with_a_warning(xp, caplog):
    a, b = _rand((4, 3)), _rand((3, 2))
    with caplog.at_level(logging.WARNING):
        r = advanced.matmul(xp.asarray(a), xp.asarray(b), epilog_inputs={"bias": xp.asarray(_rand((4,)))})
    assert "ignored" in caplog.text
    _close(_np(xp, r), a.astype(np.float64) @ b, 3, np.float32)


def test_reset_operands_positionally_and_with_nothing_releases(xp):
    """nvmath-python's example 05 calls ``mm.reset_operands(c, d)``; with no argument the operands are released and
    must all be given again."""
    a, b, c, d = _rand((4, 3)), _rand((3, 2)), _rand((4, 3)), _rand((3, 2))
    with advanced.Matmul(xp.asarray(a), xp.asarray(b)) as mm:
        mm.plan()
        mm.execute()
        mm.reset_operands(xp.asarray(c), xp.asarray(d))
        _close(_np(xp, mm.execute()), c.astype(np.float64) @ d, 3, np.float32)
        mm.reset_operands()
        with pytest.raises(RuntimeError, match="released"):
            mm.execute()
        with pytest.raises(ValueError, match=r"give them all again \(missing \['b'\]\)"):
            mm.reset_operands(xp.asarray(a))
        mm.reset_operands(xp.asarray(a), xp.asarray(b))
        _close(_np(xp, mm.execute()), a.astype(np.float64) @ b, 3, np.float32)


def test_mxfp8_block_scaling_names_blackwell_before_the_scales_are_read(monkeypatch):
    """nvmath-python's examples 25-29 (uint8 block scales, ``block_scaling=True``) stop with the reason on a GPU older
    than Blackwell (here a pretended Hopper), and on the CPU; the block scales are not judged as per-tensor ones."""
    from _fake_gpu import pretend_a_gpu
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = np.zeros((128, 128), e4m3)
    scales = {"a": np.full(512, 126, np.uint8), "b": np.full(512, 130, np.uint8)}
    options = {"block_scaling": True, "result_type": nvmath.CudaDataType.CUDA_R_16F}
    with pytest.raises(NotImplementedError, match="runs only on Blackwell GPUs"):
        advanced.matmul(a, a.T, quantization_scales=scales, options=options)
    pretend_a_gpu(monkeypatch, compute_capability=(9, 0))
    with pytest.raises(ValueError, match=r"needs a Blackwell GPU \(compute capability >= 10.0\); device 0 has "
                                         r"compute capability 9.0"):
        advanced.matmul(a, a.T, quantization_scales=scales, options=options)
    with pytest.raises(ValueError, match="Blackwell"):
        advanced.Matmul(a, a.T, quantization_scales=scales, options=options)


def test_options_compute_and_scale_types(xp):
    a, b = _rand((16, 32)), _rand((32, 8))
    o = advanced.MatmulOptions(compute_type=advanced.MatmulComputeType.COMPUTE_32F_FAST_TF32)
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), options=o)
    ref = a.astype(np.float64) @ b
    err = np.max(np.abs(_np(xp, r) - ref))
    assert err <= 4 * 32 * 2.0 ** -10 * np.max(np.abs(ref))  # TF32: 10 mantissa bits
    h = _rand((8, 8), np.float16)
    r = advanced.matmul(xp.asarray(h), xp.asarray(h), options={"scale_type": nvmath.CudaDataType.CUDA_R_16F})
    _close(_np(xp, r), h.astype(np.float64) @ h, 8, np.float16)  # scale type 16F -> compute type 16F
    with pytest.raises(ValueError, match="compute_type"):
        advanced.matmul(xp.asarray(a), xp.asarray(b),
                        options={"compute_type": advanced.MatmulComputeType.COMPUTE_32F_PEDANTIC})


def test_float8_with_quantization_scales():
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-4, 5, (16, 32)) / 4).astype(e4m3)
    b = (RNG.integers(-4, 5, (32, 16)) / 4).astype(e4m3)
    b = np.asfortranarray(b)
    options = {"result_type": nvmath.CudaDataType.CUDA_R_32F}
    r = advanced.matmul(a, b, quantization_scales={"a": 2.0, "b": 0.5}, options=options)
    _close(r, 2.0 * 0.5 * (a.astype(np.float64) @ b.astype(np.float64)), 32, np.float32)
    with pytest.raises(ValueError, match="Scales are required"):
        advanced.matmul(a, b, options=options)
    with pytest.raises(ValueError, match="Scale for D"):
        advanced.matmul(a, b, quantization_scales=advanced.MatmulQuantizationScales(a=1.0, b=1.0))  # float8 result
    d = advanced.matmul(a, b, quantization_scales=advanced.MatmulQuantizationScales(a=1.0, b=1.0, d=0.25))
    assert d.dtype == e4m3


def test_conjugate_qualifiers(xp):
    a, b = _rand((4, 3), np.complex64), _rand((3, 2), np.complex64)
    q = np.zeros((3,), dtype=advanced.matrix_qualifiers_dtype)
    q[0]["is_conjugate"] = True
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), qualifiers=q)
    _close(_np(xp, r), a.conj().astype(np.complex128) @ b, 3, np.complex64)


# --- stateful -----------------------------------------------------------------------------------------------------

def test_stateful_plan_autotune_execute_reset(xp):
    a, b, c = _rand((3, 8, 6)), _rand((3, 6, 5)), _rand((3, 8, 5))
    bias = _rand((8,))
    with advanced.Matmul(xp.asarray(a), xp.asarray(b), c=xp.asarray(c), alpha=2.0, beta=1.0) as mm:
        p = advanced.MatmulPlanPreferences(limit=4)
        algorithms = mm.plan(preferences=p, epilog=Epilog.BIAS, epilog_inputs={"bias": xp.asarray(bias)})
        assert isinstance(algorithms, tuple) and all(isinstance(x, advanced.Algorithm) for x in algorithms)
        assert mm.algorithms == algorithms
        assert mm.autotune(iterations=2) is None
        r1 = mm.execute()
        ref = 2.0 * a.astype(np.float64) @ b + c + bias[:, None]
        _close(_np(xp, r1), ref, 6, np.float32)
        a2 = _rand((3, 8, 6))
        mm.reset_operands(a=xp.asarray(a2))
        r2 = mm.execute()
        _close(_np(xp, r2), 2.0 * a2.astype(np.float64) @ b + c + bias[:, None], 6, np.float32)


def test_plan_with_algorithms_from_an_earlier_plan(xp):
    a, b = _rand((16, 16)), _rand((16, 16))
    with advanced.Matmul(xp.asarray(a), xp.asarray(b)) as mm:
        first = mm.plan(preferences={"limit": 2})
        mm.plan(algorithms=first[:1])
        _close(_np(xp, mm.execute()), a.astype(np.float64) @ b, 16, np.float32)


def test_stateful_errors(xp):
    a, b = _rand((4, 3)), _rand((3, 2))
    mm = advanced.Matmul(xp.asarray(a), xp.asarray(b))
    with pytest.raises(RuntimeError):
        mm.execute()  # before plan()
    mm.plan()
    with pytest.raises(ValueError):
        mm.reset_operands(a=xp.asarray(_rand((5, 3))))
    other = a if xp.name != "numpy" else pytest.importorskip("torch").from_numpy(a)
    with pytest.raises(TypeError, match="package"):
        mm.reset_operands(a=other)
    with pytest.raises(ValueError, match="bias"):
        mm.plan(epilog=Epilog.BIAS)
    mm.free()
    with pytest.raises(nvmath.linalg.InvalidMatmulState):
        mm.execute()


def test_dtype_errors_are_value_errors(xp):
    with pytest.raises(ValueError, match="combination"):
        advanced.matmul(xp.asarray(_rand((2, 2))), xp.asarray(_rand((2, 2), np.float64)))
    with pytest.raises(ValueError, match="not supported"):
        advanced.matmul(xp.asarray(np.ones((2, 2), np.int32)), xp.asarray(np.ones((2, 2), np.int32)))
    with pytest.raises(ValueError, match="K"):
        advanced.matmul(xp.asarray(_rand((2, 3))), xp.asarray(_rand((2, 3))))


def test_options_are_checked():
    with pytest.raises(ValueError):
        advanced.MatmulOptions(blocking=False)
    with pytest.raises(ValueError):
        advanced.MatmulOptions(compute_type=12345)
    with pytest.raises(ValueError, match="memory limit"):
        advanced.MatmulOptions(memory_limit="lots")
    with pytest.raises(TypeError):
        advanced.MatmulOptions(allocator=object())
    with pytest.raises(TypeError):
        advanced.matmul(_rand((2, 2)), _rand((2, 2)), options={"computetype": 1})
    assert advanced.MatmulOptions(memory_limit="1 GiB").memory_limit == "1 GiB"


def test_block_scaling_is_refused_with_a_clear_error():
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = np.zeros((128, 128), e4m3)
    with pytest.raises((NotImplementedError, ValueError), match="Blackwell"):  # the CPU / a Hopper GPU
        advanced.matmul(a, np.asfortranarray(a), options={"block_scaling": True},
                        quantization_scales={"a": 1.0, "b": 1.0, "d": 1.0})


# --- the features issue 11 added to mathpy's matmul, through nvmath's names -------------------------------------------

def test_inplace_writes_the_result_into_c(xp):
    a, b, c = _rand((6, 5)), _rand((5, 4)), _rand((6, 4))
    cc = xp.asarray(c.copy())
    r = advanced.matmul(xp.asarray(a), xp.asarray(b), cc, beta=1.0, options={"inplace": True})
    assert r is cc
    _close(_np(xp, cc), a.astype(np.float64) @ b + c, 5, np.float32)


def test_reset_alpha_beta_and_release_operands(xp):
    a, b, c = _rand((6, 5)), _rand((5, 4)), _rand((6, 4))
    with advanced.Matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), beta=1.0) as mm:
        mm.plan()
        mm.reset_operands(alpha=2.0, beta=0.0)
        _close(_np(xp, mm.execute()), 2.0 * a.astype(np.float64) @ b, 5, np.float32)
        mm.release_operands()
        with pytest.raises(RuntimeError, match="released"):
            mm.execute()
        mm.reset_operands(a=xp.asarray(a), b=xp.asarray(b), c=xp.asarray(c))
        _close(_np(xp, mm.execute()), 2.0 * a.astype(np.float64) @ b, 5, np.float32)


def test_execute_with_a_chosen_algorithm_and_prune(xp):
    a, b = _rand((16, 16)), _rand((16, 16))
    with advanced.Matmul(xp.asarray(a), xp.asarray(b)) as mm:
        algorithms = mm.plan()
        mm.autotune(iterations=1, prune=1)
        assert len(mm.algorithms) == 1
        _close(_np(xp, mm.execute(algorithm=mm.algorithms[0])), a.astype(np.float64) @ b, 16, np.float32)
        assert (algorithms[0].algorithm_id is None) == (xp.device == "cpu" and not nvmath_gpu())


def test_float8_result_amax_and_tensor_scales():
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-4, 5, (16, 32)) / 4).astype(e4m3)
    b = np.asfortranarray((RNG.integers(-4, 5, (32, 16)) / 4).astype(e4m3))
    scales = {"a": np.array([2.0], np.float32), "b": np.array(0.5, np.float32), "d": 1.0}
    d, aux = advanced.matmul(a, b, quantization_scales=scales, options={"result_amax": True})
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert d.dtype == e4m3
    np.testing.assert_allclose(aux["result_amax"], [np.max(np.abs(ref))], rtol=1e-6)


def test_preferences_release_workspace_and_algorithm_objects(xp):
    a, b = _rand((16, 16)), _rand((16, 16))
    p = advanced.MatmulPlanPreferences(limit=3, numerical_impl_mask=advanced.MatmulNumericalImplFlags.ALL,
                                       reduction_scheme_mask=advanced.MatmulReductionScheme.MASK, max_waves_count=0)
    with advanced.Matmul(xp.asarray(a), xp.asarray(b), options={"memory_limit": "64 MiB"}) as mm:
        algorithms = mm.plan(preferences=p)
        caps = algorithms[0].capabilities
        assert isinstance(caps, advanced.AlgorithmCapabilities)
        _close(_np(xp, mm.execute(release_workspace=True)), a.astype(np.float64) @ b, 16, np.float32)
        _close(_np(xp, mm.execute()), a.astype(np.float64) @ b, 16, np.float32)  # the workspace comes back
        mm.autotune(iterations=1, release_workspace=True)
    with pytest.raises(ValueError, match="aux_amax apply to the GELU aux output .*; the epilog is DEFAULT"):
        with advanced.Matmul(xp.asarray(a), xp.asarray(b)) as mm:
            mm.plan(preferences={"epilog": {"aux_amax": True}})


def _e4m3_operands():
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-4, 5, (12, 32)) / 4).astype(e4m3)
    b = np.asfortranarray((RNG.integers(-4, 5, (32, 16)) / 4).astype(e4m3))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)  # exact


FP8_AUX = {"epilog": {"aux_type": nvmath.CudaDataType.CUDA_R_8F_E4M3, "aux_amax": True}}


def test_float8_gelu_aux_with_its_scale_and_amax():
    # nvmath-python's FP8 GELU_AUX example: an e4m3 aux scaled by "aux_quantization_scale", its amax before the scale
    a, b, x = _e4m3_operands()
    result, aux = advanced.matmul(a, b, epilog=Epilog.GELU_AUX, epilog_inputs={"aux_quantization_scale": 0.1},
                                  preferences=advanced.MatmulPlanPreferences(epilog=advanced.MatmulEpilogPreferences(
                                      aux_type=nvmath.CudaDataType.CUDA_R_8F_E4M3, aux_amax=True)),
                                  quantization_scales={"a": 1, "b": 1, "d": 1})
    assert set(aux) == {"gelu_aux", "gelu_aux_amax"} and aux["gelu_aux"].dtype == ml_dtypes.float8_e4m3fn
    assert result.dtype == ml_dtypes.float8_e4m3fn
    assert aux["gelu_aux_amax"].dtype == np.float32 and aux["gelu_aux_amax"][0] == np.max(np.abs(x))
    # one rounding to e4m3 (3 mantissa bits): half a unit in the last place, 2**-4 relative (2**-10 subnormal)
    np.testing.assert_allclose(aux["gelu_aux"][:12].astype(np.float64), 0.1 * x, rtol=2.0 ** -4, atol=2.0 ** -10)
    # the result: GELU's tanh approximation written out in float64, evaluated in float32 (a few units) and rounded
    # once to e4m3
    gelu = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(result.astype(np.float64), gelu, rtol=2.0 ** -4 + 8 * 2.0 ** -24, atol=2.0 ** -10)
    native = nvmath.linalg.advanced._matmul._native_matmul(
        a, b, epilog="gelu_aux", epilog_inputs={"aux_scale": 0.1}, preferences={"aux_type": "float8_e4m3fn",
                                                                                 "aux_amax": True})
    # a thin adapter: what mathpy's own spelling gives (on the CPU engine; with a GPU, nvmath's rule runs these host
    # operands on it, and cuBLASLt's float32 product may sit one e4m3 unit in the last place away)
    assert aux["gelu_aux_amax"][0] == native[1]["gelu_aux_amax"][0]
    np.testing.assert_allclose(aux["gelu_aux"].astype(np.float32), native[1]["gelu_aux"].astype(np.float32),
                               rtol=2.0 ** -3, atol=2.0 ** -9)


def test_float8_aux_scale_tensor_is_reset_like_nvmaths():
    a, b, x = _e4m3_operands()
    with advanced.Matmul(a, b, quantization_scales={"a": 1, "b": 1, "d": 1}) as mm:
        mm.plan(epilog=Epilog.GELU_AUX, preferences=FP8_AUX,
                epilog_inputs={"aux_quantization_scale": np.array([0.5], np.float32)})
        _, aux = mm.execute()
        np.testing.assert_allclose(aux["gelu_aux"][:12].astype(np.float64), 0.5 * x, rtol=2.0 ** -4, atol=2.0 ** -10)
        mm.reset_operands(epilog_inputs={"aux_quantization_scale": np.array([2.0], np.float32)})
        _, aux = mm.execute()
        np.testing.assert_allclose(aux["gelu_aux"][:12].astype(np.float64), 2.0 * x, rtol=2.0 ** -4, atol=2.0 ** -10)
        assert aux["gelu_aux_amax"][0] == np.max(np.abs(x))
    with advanced.Matmul(a, b, quantization_scales={"a": 1, "b": 1, "d": 1}) as mm:
        mm.plan(epilog=Epilog.GELU_AUX)
        with pytest.raises(ValueError, match="Scales for epilog auxiliary output are supported only when"):
            mm.reset_operands(epilog_inputs={"aux_quantization_scale": np.array([2.0], np.float32)})


def test_float8_aux_refusals_follow_nvmath():
    a, b, _ = _e4m3_operands()
    scales = {"a": 1, "b": 1, "d": 1}
    with pytest.raises(ValueError, match='"aux_quantization_scale" epilog input is required'):
        advanced.matmul(a, b, epilog=Epilog.GELU_AUX, preferences=FP8_AUX, quantization_scales=scales)
    with pytest.raises(ValueError, match="Scales for epilog auxiliary output are supported only when"):
        advanced.matmul(a, b, epilog=Epilog.GELU_AUX, epilog_inputs={"aux_quantization_scale": 0.5},
                        quantization_scales=scales)
    with pytest.raises(ValueError, match="aux_amax apply to a float8 GELU aux only"):
        advanced.matmul(a, b, epilog=Epilog.GELU_AUX, preferences={"epilog": {"aux_amax": True}},
                        quantization_scales=scales)
    with pytest.raises(ValueError, match="aux_type float8_e4m3fn is not supported for epilog GELU_AUX_BIAS"):
        advanced.matmul(a, b, epilog=Epilog.GELU_AUX_BIAS, preferences=FP8_AUX, quantization_scales=scales,
                        epilog_inputs={"bias": np.zeros(12, np.float16), "aux_quantization_scale": 0.5})


def test_float8_result_gelu_aux_defaults_to_float16_without_c():
    a, b, x = _e4m3_operands()
    _, aux = advanced.matmul(a, b, epilog=Epilog.GELU_AUX, quantization_scales={"a": 1, "b": 1, "d": 1})
    assert aux["gelu_aux"].dtype == np.float16  # nvmath's C type of a float8 result without C
    np.testing.assert_allclose(aux["gelu_aux"][:12], x, rtol=2.0 ** -11, atol=0)


def test_scale_tensors_reset_between_executions():
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-4, 5, (16, 32)) / 4).astype(e4m3)
    b = np.asfortranarray((RNG.integers(-4, 5, (32, 16)) / 4).astype(e4m3))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scales = advanced.MatmulQuantizationScales(a=np.array([1.0], np.float32), b=np.array([1.0], np.float32))
    with advanced.Matmul(a, b, quantization_scales=scales,
                         options={"result_type": nvmath.CudaDataType.CUDA_R_32F}) as mm:
        mm.plan()
        _close(mm.execute(), exact, 32, np.float32)
        mm.reset_operands(quantization_scales={"a": np.array([3.0], np.float32)})
        _close(mm.execute(), 3.0 * exact, 32, np.float32)
