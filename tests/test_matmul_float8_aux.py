"""The GELU aux of float8 products (issue 11): its dtype (``MatmulPlanPreferences.aux_type``), its scale (the epilog
input ``aux_scale``) and amax (``aux_amax``, returned as ``"gelu_aux_amax"``), on the CPU engine against a NumPy /
ml_dtypes reference, and every refusal by its message. The GPU comparison: test_parity_gpu.py (``-k aux``).

Operands are small multiples of 1/4 (exact in float8 e4m3), so ``X = A @ B`` is exact in float32 and the only
rounding is the final one to the aux's or the result's dtype: at most half a unit in the last place, i.e. relative
``2**-4`` for e4m3 (3 mantissa bits) and ``2**-11`` for float16, absolute half the smallest subnormal below the
normal range."""

import math
import re

import ml_dtypes
import numpy as np
import pytest

from mathpy import Matmul, MatmulPlanPreferences, matmul
from mathpy.host.matmul._epilog import epilog_spec
from mathpy.host.matmul._epilog_operands import c_stand_in, output_layouts

RNG = np.random.default_rng(23)
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
#: half an ulp, relative (normal range) and absolute (subnormal range), of each storage dtype
HALF_ULP = {E4M3: (2.0 ** -4, 2.0 ** -10), F16: (2.0 ** -11, 2.0 ** -25), BF16: (2.0 ** -8, 2.0 ** -134)}
AUX_E4M3 = {"aux_type": "float8_e4m3fn"}


def operands(m=12, k=32, n=8, b_dtype=E4M3):
    a = (RNG.integers(-4, 5, (m, k)) / 4).astype(E4M3)
    b = np.asfortranarray((RNG.integers(-4, 5, (k, n)) / 4).astype(b_dtype))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)  # exact


#: the float32 evaluation of GELU (the engines compute it in float32) before its rounding: a few float32 units
GELU_FLOAT32 = 8 * 2.0 ** -24


def written_gelu(x):
    """cuBLASLt's GELU, the tanh approximation, written out in float64: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    (not mathpy's own gelu, which the CPU engine calls)."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def assert_rounded(got, exact, dtype, evaluation=0.0):
    """``got`` is ``exact`` rounded once to ``dtype`` (saturating at its largest finite value), after an evaluation
    whose relative error is at most ``evaluation``."""
    rel, tiny = HALF_ULP[dtype]
    top = float(ml_dtypes.finfo(dtype).max)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), np.clip(exact, -top, top), rtol=rel + evaluation, atol=tiny)


# --- values --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale_as", ["number", "array"])
def test_float8_aux_holds_the_scaled_pre_activation_and_its_amax_is_taken_before_the_scale(scale_as):
    a, b, x = operands()
    scale = 0.375 if scale_as == "number" else np.array([0.375], np.float32)
    d, aux = matmul(a, b, epilog="gelu_aux", epilog_inputs={"aux_scale": scale},
                    preferences={**AUX_E4M3, "aux_amax": True}, options={"d_scale": 0.5, "result_amax": True})
    assert list(aux) == ["gelu_aux", "gelu_aux_amax", "result_amax"]
    assert aux["gelu_aux"].shape == (16, 8)  # rows padded to a multiple of 8, column-major
    assert_rounded(aux["gelu_aux"][:12], 0.375 * x, E4M3)
    assert not aux["gelu_aux"][12:].astype(np.float32).any()
    assert aux["gelu_aux_amax"].dtype == np.float32 and aux["gelu_aux_amax"].shape == (1,)
    assert aux["gelu_aux_amax"][0] == np.max(np.abs(x))  # exact: X is exact in float32, and unscaled
    assert_rounded(d, 0.5 * written_gelu(x), E4M3, GELU_FLOAT32)
    np.testing.assert_allclose(aux["result_amax"], [np.max(np.abs(written_gelu(x)))], rtol=GELU_FLOAT32)


def test_float8_aux_saturates_at_the_largest_e4m3():
    a, b, x = operands()
    _, aux = matmul(a, b, epilog="gelu_aux", epilog_inputs={"aux_scale": 1000.0}, preferences=AUX_E4M3)
    assert_rounded(aux["gelu_aux"][:12], 1000.0 * x, E4M3)
    assert np.max(np.abs(aux["gelu_aux"].astype(np.float32))) == 448


def test_aux_scale_array_is_read_at_every_execution_and_can_be_reset():
    a, b, x = operands()
    scale = np.array([2.0], np.float32)
    with Matmul(a, b) as mm:
        mm.plan(epilog="gelu_aux", epilog_inputs={"aux_scale": scale}, preferences={**AUX_E4M3, "aux_amax": True})
        _, aux = mm.execute()
        assert_rounded(aux["gelu_aux"][:12], 2.0 * x, E4M3)
        scale[0] = 0.25
        _, aux = mm.execute()
        assert_rounded(aux["gelu_aux"][:12], 0.25 * x, E4M3)
        mm.reset_operands(epilog_inputs={"aux_scale": np.array([4.0], np.float32)})
        _, aux = mm.execute()
        assert_rounded(aux["gelu_aux"][:12], 4.0 * x, E4M3)
        assert aux["gelu_aux_amax"][0] == np.max(np.abs(x))
        with pytest.raises(ValueError, match="aux_scale can be reset only when plan"):
            mm.reset_operands(epilog_inputs={"aux_scale": 1.0})


def test_float8_aux_without_a_scale_stores_x():
    a, b, x = operands()
    _, aux = matmul(a, b, epilog="gelu_aux", preferences=AUX_E4M3)
    assert_rounded(aux["gelu_aux"][:12], x, E4M3)


@pytest.mark.parametrize("c_dtype", [None, F16, BF16])
@pytest.mark.parametrize("epilog", ["gelu_aux", "gelu_aux_bias"])
def test_float8_result_gelu_aux_defaults_to_cs_16_bit_dtype(c_dtype, epilog):
    a, b, x = operands(b_dtype=E5M2)
    args, inputs = (), {}
    if c_dtype is not None:
        c = np.asfortranarray(RNG.integers(-4, 5, x.shape) / 8).astype(c_dtype)
        args, x = (c,), x + c.astype(np.float64)
    if epilog == "gelu_aux_bias":
        bias = (RNG.integers(-4, 5, 12) / 8).astype(BF16)
        inputs, x = {"bias": bias}, x + bias.astype(np.float64)[:, None]
    d, aux = matmul(a, b, *args, epilog=epilog, epilog_inputs=inputs)
    assert d.dtype == E4M3
    assert_rounded(aux["gelu_aux"][:12], x, c_dtype or F16)  # nvmath-python's float16 when there is no C
    assert_rounded(d, written_gelu(x), E4M3, GELU_FLOAT32)


def test_bfloat16_aux_without_c_and_non_float8_results_keep_theirs():
    a, b, x = operands()
    _, aux = matmul(a, b, epilog="gelu_aux", preferences={"aux_type": "bfloat16"})
    assert_rounded(aux["gelu_aux"][:12], x, BF16)
    _, aux = matmul(a, b, epilog="gelu_aux", options={"result_type": "float16"})
    assert_rounded(aux["gelu_aux"][:12], x, F16)


def test_the_float8_c_stand_in_pairs_with_the_aux():
    # cuBLASLt pairs a float16 or e4m3 GELU aux with a float16 C only, a bfloat16 one with a bfloat16 C
    spec = epilog_spec("gelu_aux")
    for aux, c in ((F16, F16), (E4M3, F16), (BF16, BF16)):
        assert c_stand_in(output_layouts(spec, 4, 4, 1, E4M3, aux_dtype=aux)) == c
    assert c_stand_in(output_layouts(epilog_spec(None), 4, 4, 1, E4M3, amax=True)) == BF16


# --- refusals ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("epilog", [None, "gelu", "relu_aux", "bias", "dgelu"])
@pytest.mark.parametrize("what", ["aux_type", "aux_amax", "aux_scale"])
def test_aux_options_apply_to_gelu_aux_epilogs_only(epilog, what):
    a, b, x = operands()
    d_type = {"result_type": "float32"}
    inputs = {"bias": np.zeros(12, np.float32)} if epilog == "bias" else {}
    if epilog == "dgelu":
        inputs["gelu_aux"] = np.asfortranarray(np.zeros((16, 8), np.float32))
    preferences = {"aux_type": AUX_E4M3, "aux_amax": {"aux_amax": True}}.get(what)
    if what == "aux_scale":
        inputs["aux_scale"] = 0.5
    with pytest.raises(ValueError, match=rf"{what} apply to the GELU aux output \(epilogs GELU_AUX, GELU_AUX_BIAS\); "
                                         rf"the epilog is {(epilog or 'default').upper()}"):
        matmul(a, b, epilog=epilog, epilog_inputs=inputs, preferences=preferences, options=d_type)


@pytest.mark.parametrize("case, allowed", [
    ("gelu_aux_bias", "['float16', 'bfloat16']"),  # e4m3 aux: GELU_AUX only
    ("bfloat16 c", "['bfloat16']"),                 # e4m3 aux: float16 C (or none) only
    ("e5m2 result", "['float16', 'bfloat16']"),     # e4m3 aux: e4m3 result only
    ("e5m2 b", "['float16', 'bfloat16']"),          # e4m3 aux: e4m3 operands only
    ("bfloat16 result", "['bfloat16']"),            # a non-float8 result: its own dtype
    ("float32 product", "['float32']"),
])
def test_aux_types_cublaslt_does_not_have_are_refused_by_name(case, allowed):
    # (an e5m2 result needs an e5m2 operand: e4m3 x e4m3 has none in cuBLASLt, refused before the aux)
    a, b, x = operands(b_dtype=E5M2 if case in ("e5m2 b", "e5m2 result") else E4M3)
    args, options, epilog, inputs = (), {}, "gelu_aux", {}
    if case == "gelu_aux_bias":
        epilog, inputs = "gelu_aux_bias", {"bias": np.zeros(12, F16)}
    elif case == "bfloat16 c":
        args = (np.asfortranarray(np.zeros((12, 8), BF16)),)
    elif case == "e5m2 result":
        options = {"result_type": "float8_e5m2"}
    elif case == "bfloat16 result":
        options = {"result_type": "bfloat16"}
    elif case == "float32 product":
        a, b = a.astype(np.float32), b.astype(np.float32)
    with pytest.raises(ValueError, match=rf"aux_type float8_e4m3fn is not supported for epilog {epilog.upper()} .*"
                                         rf"allowed are {re.escape(allowed)}"):
        matmul(a, b, *args, epilog=epilog, epilog_inputs=inputs, options=options, preferences=AUX_E4M3)


@pytest.mark.parametrize("preferences, inputs, named", [
    ({"aux_amax": True}, {}, "aux_amax"),
    ({}, {"aux_scale": 0.5}, "aux_scale"),
    ({"aux_type": "float16", "aux_amax": True}, {"aux_scale": np.array([1.0], np.float32)}, "aux_amax and aux_scale"),
])
def test_amax_and_scale_need_a_float8_aux(preferences, inputs, named):
    a, b, _ = operands()
    with pytest.raises(ValueError, match=f"{named} apply to a float8 GELU aux only .*; the aux is float16"):
        matmul(a, b, epilog="gelu_aux", epilog_inputs=inputs, preferences=preferences)


def test_other_aux_refusals():
    a, b, _ = operands()
    with pytest.raises(ValueError, match="quantization scale 'aux' given as an array must be one float32 value"):
        matmul(a, b, epilog="gelu_aux", epilog_inputs={"aux_scale": np.ones(2, np.float32)}, preferences=AUX_E4M3)
    with pytest.raises(ValueError, match="DGELU is not supported for float8 results"):
        matmul(a, b, epilog="dgelu", epilog_inputs={"gelu_aux": np.zeros((16, 8), E4M3)})
    with pytest.raises(ValueError, match="MatmulPlanPreferences.aux_type 'float9' is not a dtype"):
        MatmulPlanPreferences(aux_type="float9")
    with pytest.raises(TypeError, match="MatmulPlanPreferences.aux_amax must be a bool, not 1"):
        MatmulPlanPreferences(aux_amax=1)


def test_cublaslt_attributes_of_the_aux_scale_and_amax():
    from mathpy.bindings import cublaslt as lt
    from mathpy.host.matmul._epilog_operands import HANDLERS

    # the pointers cuBLASLt takes at each execution (the engine sets them through these attributes)
    assert HANDLERS["aux_scale"].set_attributes(None, None, None, 1) == lt.MatmulDesc.EPILOGUE_AUX_SCALE_POINTER
    assert HANDLERS["gelu_aux_amax"].set_attributes(None, None, None, 1) == lt.MatmulDesc.EPILOGUE_AUX_AMAX_POINTER
    assert (lt.MatmulDesc.EPILOGUE_AUX_SCALE_POINTER, lt.MatmulDesc.EPILOGUE_AUX_AMAX_POINTER) == (23, 24)


def test_torch_compile_route_refuses_a_float8_gelu_aux():
    # mathpy's torch custom op returns (d, one extra output) whose fake has D's dtype: it cannot describe a float8
    # product's aux (C's dtype or e4m3) nor its amax, so the torch.compile route says so instead of mis-describing it
    torch = pytest.importorskip("torch")
    from mathpy.torch._matmul import route

    a, b = torch.ones(4, 8).to(torch.float8_e4m3fn), torch.ones(8, 4).to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="epilog=GELU_AUX with torch.float8_e4m3fn operands has a GELU aux in its own "
                                        "dtype .* outside torch.compile"):
        route(a, b, None, 1, None, "gelu_aux", None, None, None, None, None)
