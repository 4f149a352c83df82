"""mathpy.matmul / mathpy.Matmul on the CPU: numpy.matmul semantics, dtypes, alpha/beta/c, errors, the state machine and
the plan cache. The same assertions run on the GPU in test_matmul_api_gpu.py."""

import threading

import hypothesis.extra.numpy as hnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _matmul_reference import strides_in_bytes
from _hypothesis import property_settings
from _tolerance import assert_within, matmul_bound
from mathpy import InvalidPlanStateError
from mathpy.host.matmul import Matmul, MatmulEpilog, MatmulOptions, matmul, matmul_plan_cache
from mathpy.host.matmul._layouts import stage_matrix

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float64):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def ref(a, b):
    return np.matmul(np.asarray(a, np.float64 if a.dtype.kind != "c" else np.complex128), b)


# ---------------------------------------------------------------------------------------------------------------------
# numpy.matmul semantics


@st.composite
def matmul_case(draw):
    m, n, k = (draw(st.integers(1, 6)) for _ in range(3))
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3))
    a_batch = draw(st.sampled_from([batch, batch[1:], tuple(1 if draw(st.booleans()) else s for s in batch)]))
    b_batch = draw(st.sampled_from([batch, batch[1:], tuple(1 if draw(st.booleans()) else s for s in batch), ()]))
    a_1d, b_1d = draw(st.booleans()) and not a_batch, draw(st.booleans()) and not b_batch
    a_shape = (k,) if a_1d else (*a_batch, m, k)
    b_shape = (k,) if b_1d else (*b_batch, k, n)
    how_a, how_b = draw(st.sampled_from(["c", "t", "step", "neg"])), draw(st.sampled_from(["c", "t", "step", "neg"]))
    return a_shape, b_shape, how_a, how_b


def make_layout(shape, how):
    """An array of ``shape`` laid out as asked: C order, transposed storage, stepped, or with negative strides."""
    if how == "c" or len(shape) < 2 and how == "t":
        return rand(*shape)
    if how == "t":
        return np.swapaxes(rand(*shape[:-2], shape[-1], shape[-2]), -1, -2)
    if how == "step":
        big = rand(*shape[:-1], 2 * shape[-1])
        return big[..., ::2]
    return rand(*shape)[..., ::-1]


@property_settings(120)
@given(case=matmul_case())
def test_numpy_matmul_semantics(xp, case):
    a_shape, b_shape, how_a, how_b = case
    a, b = make_layout(a_shape, how_a), make_layout(b_shape, how_b)
    expected = np.matmul(a, b)
    if xp.name == "torch":  # torch has no negative strides: those operands enter as copies there
        a, b = (x.copy() if min(x.strides, default=0) < 0 else x for x in (a, b))
    result = matmul(xp.asarray(a), xp.asarray(b))
    assert xp.is_native(result)
    got = xp.to_numpy(result)
    assert got.shape == expected.shape
    assert_within(got, expected, matmul_bound(a, b, np.float64, exact=expected), "matmul")


def test_transposed_and_strided_operands_are_not_copied():
    a = rand(2, 8, 6)
    at = np.swapaxes(rand(2, 6, 8), -1, -2)  # column-major matrices
    stepped = rand(2, 8, 12)[:, :, ::2]  # neither stride 1 in the last axis -> only this one is copied
    assert stage_matrix("a", _op(a), 8, 6, "row", (2,), False).mode is None
    staged = stage_matrix("a", _op(at), 8, 6, "row", (2,), False)
    assert staged.mode is None and staged.layout.row_stride == 1 and staged.layout.col_stride == 8
    assert stage_matrix("a", _op(stepped), 8, 6, "row", (2,), False).mode == "contiguous"
    broadcast = stage_matrix("b", _op(rand(6, 5)), 6, 5, "col", (4, 3), False)
    assert broadcast.mode is None and broadcast.layout.batch_stride == 0 and broadcast.layout.batch == 12
    partial = stage_matrix("b", _op(rand(4, 1, 6, 5)), 6, 5, "col", (4, 3), False)  # not one batch stride
    assert partial.mode == "broadcast"


def _op(x):
    from mathpy._operands import wrap_operand
    return wrap_operand(x)


def test_result_order_and_callers_package(xp):
    """Without a per-row epilog operand the result takes the operands' row-major order (cuBLASLt then runs NN on
    row-major inputs); with a bias (or aux/bgrad outputs) it is column-major, cuBLASLt's per-row bias convention;
    with two column-major operands it is column-major."""
    a, b = rand(3, 4, 5).astype(np.float32), rand(5, 6).astype(np.float32)
    bias = rand(4).astype(np.float32)
    row, col = (4 * 6 * 4, 6 * 4, 4), (4 * 6 * 4, 4, 4 * 4)
    for epilog, inputs, strides in ((None, None, row), ("relu", None, row), ("gelu", None, row),
                                    ("bias", {"bias": bias}, col)):
        result = matmul(xp.asarray(a), xp.asarray(b), epilog=epilog,
                        epilog_inputs=None if inputs is None else {k: xp.asarray(v) for k, v in inputs.items()})
        assert xp.is_native(result)
        assert strides_in_bytes(result) == strides, epilog
    np.testing.assert_allclose(xp.to_numpy(matmul(xp.asarray(a), xp.asarray(b))), a @ b, rtol=1e-5)
    at, bt = np.swapaxes(rand(3, 5, 4), -1, -2).astype(np.float32), rand(6, 5).T.astype(np.float32)
    assert at.strides[-2] == 4 and bt.strides[-2] == 4  # both column-major
    at_x, bt_x = xp.asarray(at), xp.asarray(bt)
    both_col = strides_in_bytes(at_x)[-2] == 4 and strides_in_bytes(bt_x)[-2] == 4  # a package may copy to C order
    result = matmul(at_x, bt_x)
    assert strides_in_bytes(result) == (col if both_col else row)
    np.testing.assert_allclose(xp.to_numpy(result), at @ bt, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# dtypes, alpha, beta, c


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64, np.complex64, np.complex128])
def test_dtypes(xp, dtype):
    dtype = np.dtype(dtype)
    a, b = rand(2, 17, 9, dtype=dtype), rand(9, 11, dtype=dtype)
    result = matmul(xp.asarray(a), xp.asarray(b))
    assert xp.is_native(result)
    got = xp.to_numpy(result)
    assert got.dtype == dtype
    # accumulated in the compute precision (float32 for 16-bit types) and rounded once to the result dtype: within
    # gamma_k |A||B| + u_out |exact| of the exact product of the inputs (a per-product 16-bit rounding is not)
    exact = ref(a, b)
    assert_within(got, exact, matmul_bound(a, b, dtype, exact=exact), f"{dtype.name} matmul")


def test_result_type_and_compute_types():
    a, b = rand(8, 8, dtype=np.float16), rand(8, 8, dtype=np.float16)
    assert matmul(a, b, options={"result_type": "float32"}).dtype == np.float32
    x, y = rand(16, 16, dtype=np.float32), rand(16, 16, dtype=np.float32)
    exact = matmul(x, y)
    tf32 = matmul(x, y, options=MatmulOptions(allow_tf32=True))
    assert not np.array_equal(exact, tf32)  # inputs rounded to 10 mantissa bits
    np.testing.assert_allclose(tf32, exact, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(matmul(x, y, options={"compute_type": "32F_FAST_16BF"}), exact, rtol=5e-2, atol=5e-2)
    with pytest.raises(ValueError, match="'16F' is not supported for float32.*allowed are"):
        matmul(x, y, options={"compute_type": "16F"})
    with pytest.raises(ValueError, match="scale_type float64 does not go with"):
        matmul(x, y, options={"scale_type": "float64"})


@pytest.mark.parametrize("a_dtype,b_dtype", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)])
def test_float8_with_scales(a_dtype, b_dtype):
    a = (RNG.integers(-4, 5, (16, 32)) / 2).astype(a_dtype)  # exactly representable
    b = (RNG.integers(-4, 5, (32, 8)) / 2).astype(b_dtype)
    options = {"result_type": np.float32, "a_scale": 0.5, "b_scale": 2.0, "d_scale": 0.25}
    got = matmul(a, b, options=options)
    np.testing.assert_allclose(got, 0.25 * (a.astype(np.float32) @ b.astype(np.float32)), rtol=1e-6)
    fp8 = matmul(a, b, options={"d_scale": 1e6})  # the float8 result saturates instead of overflowing to NaN
    assert fp8.dtype == a_dtype and np.isfinite(fp8.astype(np.float32)).all()
    with pytest.raises(TypeError, match="cannot both be float8_e5m2"):
        matmul(a.astype(E5M2), b.astype(E5M2))


@pytest.mark.parametrize("c_shape", [(3, 4, 6), (4, 6), (6,), (4, 1), (1, 4, 6)])
def test_alpha_beta_c(xp, c_shape):
    a, b, c = rand(3, 4, 5), rand(5, 6), rand(*c_shape)
    result = matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), alpha=0.5, beta=-2.0)
    np.testing.assert_allclose(xp.to_numpy(result), 0.5 * (a @ b) - 2.0 * c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xp.to_numpy(matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c))), a @ b + c,
                               rtol=1e-12)  # beta defaults to 1 with c


def test_c_layout_is_kept_and_never_written():
    a, b = rand(4, 5), rand(5, 6)
    c = np.asfortranarray(rand(4, 6))
    keep = c.copy()
    result = matmul(a, b, c, beta=1)
    assert np.array_equal(c, keep)
    np.testing.assert_allclose(result, a @ b + c, rtol=1e-12)
    row_c = rand(4, 6)
    assert matmul(a, b, row_c, beta=1).flags.c_contiguous  # D takes a row-major c's order


def test_complex_alpha():
    a, b = rand(3, 3, dtype=np.complex64), rand(3, 3, dtype=np.complex64)
    np.testing.assert_allclose(matmul(a, b, alpha=1j), 1j * (a @ b), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="alpha = 1j is complex but the operands are real"):
        matmul(a.real.copy(), b.real.copy(), alpha=1j)


def test_empty_problems():
    assert matmul(rand(0, 3), rand(3, 4)).shape == (0, 4)
    np.testing.assert_array_equal(matmul(rand(2, 0), rand(0, 4)), np.zeros((2, 4)))


# ---------------------------------------------------------------------------------------------------------------------
# Errors: clear, before any work, changing nothing


@pytest.mark.parametrize("call,error,match", [
    (lambda: matmul(rand(3, 4), rand(5, 6)), ValueError, r"a has 4 columns \(K\) but b has 5 rows"),
    (lambda: matmul(rand(2, 3, 4), rand(3, 4, 5)), ValueError, "batch dimensions .* do not broadcast"),
    (lambda: matmul(rand(3), np.float64(2.0)), ValueError, "at least one dimension"),
    (lambda: matmul(rand(3, 4).astype(BF16), rand(4, 5)), TypeError, "a bfloat16 operand combines only with"),
    (lambda: matmul(rand(3, 4).astype(E4M3), rand(4, 5)), TypeError, "float8 operands combine only with float8"),
    (lambda: matmul(np.ones((2, 2), "M8[s]"), np.ones((2, 2), "M8[s]")), TypeError, "does not support; allowed are"),
    (lambda: matmul(np.ones((2, 2), np.int32), np.ones((2, 2), np.int32), alpha=0.5), TypeError,
     "alpha = 0.5 must be an integer for int32 operands"),
    (lambda: matmul(np.ones((2, 2), np.uint8), np.ones((2, 2), np.uint8), alpha=-1), ValueError,
     r"alpha = -1 must lie in \[0, 255\]"),
    (lambda: matmul(np.ones((2, 2), bool), np.ones((2, 2), bool), alpha=2), ValueError,
     r"alpha = 2 must lie in \[0, 1\] for bool operands"),
    (lambda: matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), epilog="relu"), ValueError,
     "epilog RELU does not apply to int8 operands"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="bias", epilog_inputs={"bias": rand(3)},
                    options={"result_order": "C"}), ValueError, "result_order='C' is not possible with epilog BIAS"),
    (lambda: matmul(rand(3, 4), rand(4, 5), beta=2), ValueError, "beta = 2 needs an operand c"),
    (lambda: matmul(rand(3, 4), rand(4, 5), rand(2, 5)), ValueError, "does not broadcast to the result's shape"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="bias", epilog_inputs={"bias": rand(5)}), ValueError,
     r"one value per row of the result \(M = 3\)"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="bias", epilog_inputs={"bias": rand(3).astype(np.float32)}),
     TypeError, "bias' has dtype float32; for a float64 result it must be float64"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="bias"), ValueError, r"needs epilog_inputs \['bias'\]"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="drelu"), ValueError, r"needs epilog_inputs \['relu_aux'\]"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="relu", epilog_inputs={"bias": rand(3)}), ValueError,
     r"epilog_inputs \['bias'\] are not inputs of epilog RELU: it takes none"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="bias", epilog_inputs={"biass": rand(3)}), ValueError,
     r"epilog_inputs \['biass'\] are not inputs of epilog BIAS: it takes \['bias'\] \(missing \['bias'\]\)"),
    (lambda: matmul(None, rand(4, 5)), TypeError, "a: expected an array, got NoneType"),
    (lambda: matmul(rand(3, 4), "b"), TypeError, "b: expected an array, got str"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="bias", epilog_inputs={"bias": None}), TypeError,
     "bias: expected an array, got NoneType"),
    (lambda: matmul(rand(3, 4, dtype=np.complex64), rand(4, 5, dtype=np.complex64), epilog="relu"), ValueError,
     "does not apply to complex operands"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="swish"), ValueError, "epilog 'swish' is not supported; allowed"),
    (lambda: matmul(rand(3, 4), rand(4, 5), preferences={"limt": 3}), ValueError,
     "unknown field 'limt'; allowed fields are"),
    (lambda: matmul(rand(3, 4), rand(4, 5), options={"compute_typ": "32F"}), ValueError, "unknown field"),
    (lambda: matmul(rand(3, 4), rand(4, 5), epilog="drelu",
                    epilog_inputs={"relu_aux": np.zeros((3, 5), np.uint8)}), ValueError,
     r"must be one of \[\(16, 5\)\]"),
    (lambda: matmul(rand(3, 4, dtype=np.float32), rand(4, 5, dtype=np.float32), epilog="dgelu",
                    epilog_inputs={"gelu_aux": np.zeros((8, 5), np.float64)}), TypeError, "needs float32"),
    (lambda: matmul(rand(3, 1, dtype=np.float32), rand(1, 5, dtype=np.float32), epilog="dgelu",
                    epilog_inputs={"gelu_aux": rand(8, 5, dtype=np.float32)}), ValueError, "needs K > 1"),
    (lambda: matmul(rand(16, 32).astype(E4M3), rand(32, 8).astype(E4M3), epilog="relu",
                    options={"result_type": np.float32, "d_scale": 0.25}), ValueError,
     "d_scale=0.25 applies to float8 results; with a float32 result and epilog RELU"),
])
def test_bad_input_is_refused_before_any_work(call, error, match):
    before = matmul_plan_cache.info()
    with pytest.raises(error, match=match):
        call()
    assert matmul_plan_cache.info().misses == before.misses  # nothing planned


def test_epilog_names_and_values():
    assert MatmulEpilog.BGRADB == 512 and MatmulEpilog["DGELU_BGRAD"] == 208
    a, b = rand(4, 5), rand(5, 3)
    for spelled in ("relu", "RELU", MatmulEpilog.RELU, 2):
        np.testing.assert_allclose(matmul(a, b, epilog=spelled), np.maximum(a @ b, 0), rtol=1e-12)
    np.testing.assert_allclose(matmul(a, b, epilog="default"), a @ b, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# The stateful object


def test_matmul_state_machine(xp):
    a, b = rand(4, 5), rand(5, 3)
    mm = Matmul(xp.asarray(a), xp.asarray(b))
    with pytest.raises(InvalidPlanStateError, match="plan"):
        mm.execute()
    with pytest.raises(InvalidPlanStateError, match="plan"):
        mm.autotune()
    algorithms = mm.plan()
    assert len(algorithms) >= 1 and mm.algorithms == algorithms
    timings = mm.autotune(iterations=2)
    assert timings and timings[0][1] >= 0
    np.testing.assert_allclose(xp.to_numpy(mm.execute()), a @ b, rtol=1e-12)
    a2 = rand(4, 5)
    mm.reset_operands(a=xp.asarray(a2))
    np.testing.assert_allclose(xp.to_numpy(mm.execute()), a2 @ b, rtol=1e-12)
    mm.plan(epilog="relu")  # re-planning replaces the plan
    np.testing.assert_allclose(xp.to_numpy(mm.execute()), np.maximum(a2 @ b, 0), rtol=1e-12)
    mm.free()
    mm.free()  # idempotent
    for call in (mm.execute, mm.plan, mm.autotune, lambda: mm.reset_operands(a=xp.asarray(a))):
        with pytest.raises(InvalidPlanStateError, match="freed"):
            call()


def test_matmul_context_manager_and_in_place_updates():
    a, b = rand(4, 5), rand(5, 3)
    with Matmul(a, b, alpha=2.0) as mm:
        mm.plan()
        first = mm.execute()
        a[...] = 1.0  # execute reads the operands' current contents
        np.testing.assert_allclose(mm.execute(), 2.0 * (a @ b), rtol=1e-12)
        assert not np.allclose(first, 2.0 * (a @ b))
    with pytest.raises(InvalidPlanStateError):
        mm.execute()


def test_reset_operands_refuses_different_operands_and_changes_nothing():
    a, b, bias = rand(4, 5), rand(5, 3), rand(4)
    with Matmul(a, b) as mm:
        mm.plan(epilog="bias", epilog_inputs={"bias": bias})
        expected = mm.execute()
        planned = r"must match the operand the plan was built for \(package numpy, device None, "
        bad = [(dict(a=rand(4, 6)), r"reset_operands: a " + planned + r"shape \(4, 5\).*got .*shape \(4, 6\)"),
               (dict(a=rand(4, 5).astype(np.float32)), r"reset_operands: a " + planned + r".*got .*dtype float32"),
               (dict(b=np.asfortranarray(rand(5, 3))), r"reset_operands: b " + planned + r".*got .*strides \(1, 5\)"),
               (dict(epilog_inputs={"bias": rand(5)}), r"'bias' has shape \(5,\); it must hold one value per row of "
                                                       r"the result \(M = 4\)"),
               (dict(epilog_inputs={"relu_aux": rand(4)}), r"epilog inputs \['relu_aux'\] are not used by the plan's "
                                                           r"epilog BIAS; it takes \['bias'\]"),
               (dict(a=rand(4, 5), b=rand(5, 4)), r"reset_operands: b " + planned + r".*got .*shape \(5, 4\)")]
        for kwargs, match in bad:
            with pytest.raises(ValueError, match=match):
                mm.reset_operands(**kwargs)
            np.testing.assert_array_equal(mm.execute(), expected)
        with pytest.raises(ValueError, match="built without c"):
            mm.reset_operands(c=rand(4, 3))
        new_bias = rand(4)
        mm.reset_operands(epilog_inputs={"bias": new_bias})
        np.testing.assert_allclose(mm.execute(), a @ b + new_bias[:, None], rtol=1e-12)


def test_plan_with_chosen_algorithms():
    with Matmul(rand(3, 3), rand(3, 3)) as mm:
        algorithms = mm.plan()
        assert mm.plan(algorithms=algorithms[:1]) == algorithms[:1]
        with pytest.raises(ValueError, match="none of the given algorithms"):
            mm.plan(algorithms=["not-an-algorithm"])


def test_a_failed_replan_leaves_nothing_half_built():
    """A plan() that fails after releasing the previous plan must not leave the object looking planned (it would run
    the old epilog, or on the GPU call a freed engine): it is unplanned until a plan() succeeds."""
    a, b = rand(3, 4), rand(4, 5)
    with Matmul(a, b) as mm:
        mm.plan()
        with pytest.raises(ValueError, match="none of the given algorithms"):
            mm.plan(epilog="relu", algorithms=["not-an-algorithm"])
        with pytest.raises(InvalidPlanStateError, match="plan"):
            mm.execute()
        mm.plan()
        np.testing.assert_allclose(mm.execute(), a @ b, rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# Plan cache


def test_plan_cache_is_bounded_and_hits():
    matmul_plan_cache.clear()
    old = matmul_plan_cache.info()
    try:
        matmul_plan_cache.resize(max_plans=3)
        for n in range(1, 8):
            matmul(rand(2, 3), rand(3, n))
            assert matmul_plan_cache.info().plans <= 3
        before = matmul_plan_cache.info()
        matmul(rand(2, 3), rand(3, 7))
        assert matmul_plan_cache.info().hits == before.hits + 1
        matmul(rand(2, 3), rand(3, 7), epilog="relu")  # the epilog is part of the key
        assert matmul_plan_cache.info().misses == before.misses + 1
    finally:
        matmul_plan_cache.resize(max_plans=old.max_plans, max_bytes=old.max_bytes)


def test_plan_cache_threads():
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for i in range(30):
                n = 1 + (seed + i) % 4
                a, b, bias = rng.standard_normal((5, 4)), rng.standard_normal((4, n)), rng.standard_normal(5)
                got = matmul(a, b, epilog="relu_bias", epilog_inputs={"bias": bias})
                np.testing.assert_allclose(got, np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_row_major_c_with_an_epilog_is_given_in_the_results_order():
    a, b, c, bias = rand(2, 4, 5), rand(5, 6), rand(2, 4, 6), rand(4)
    with Matmul(a, b, c, beta=0.5) as mm:
        mm.plan(epilog="relu_bias", epilog_inputs={"bias": bias})
        assert mm._r.staged["c"].layout.is_col_major and mm._r.staged["c"].mode == "colmajor"
        np.testing.assert_allclose(mm.execute(), np.maximum(a @ b + 0.5 * c + bias[:, None], 0), rtol=1e-12)
        c2 = rand(2, 4, 6)
        mm.reset_operands(c=c2)
        np.testing.assert_allclose(mm.execute(), np.maximum(a @ b + 0.5 * c2 + bias[:, None], 0), rtol=1e-12)
        mm.plan()  # no epilog: D takes c's row-major order, c is used as it is
        assert mm._r.staged["c"].mode is None
        np.testing.assert_allclose(mm.execute(), a @ b + 0.5 * c2, rtol=1e-12)


def test_cuda_execution_without_a_gpu_is_a_clear_error():
    from mathpy import NoDeviceError, _cuda
    if _cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoDeviceError, match="needs an NVIDIA GPU"):
        matmul(rand(2, 2), rand(2, 2), execution="cuda")
    np.testing.assert_allclose(matmul(rand(2, 2) * 0 + 1, np.eye(2), execution={"name": "cpu", "num_threads": 1}),
                               np.ones((2, 2)))


@pytest.mark.parametrize("options,error,match", [
    ({"allow_tf32": 1}, TypeError, "allow_tf32 must be a bool"),
    ({"blocking": False}, ValueError, "blocking must be True or 'auto'"),
    ({"fast_accumulation": "yes"}, TypeError, "fast_accumulation must be a bool"),
    ({"result_type": "int8"}, TypeError, "result_type int8 is not supported for float64 operands; allowed are"),
    ({"result_order": "A"}, ValueError, r"result_order must be one of \[None, 'C', 'F'\]"),
    ({"compute_type": "8I"}, ValueError, "compute_type '8I' is not supported; allowed are"),
    ({"a_scale": 2.0}, ValueError, "apply to float8 operands only"),
])
def test_option_errors(options, error, match):
    with pytest.raises(error, match=match):
        matmul(rand(2, 2), rand(2, 2), options=options)


def test_the_stateless_call_asks_the_route_once_and_makes_no_matmul(monkeypatch):
    """mathpy.matmul asks mathpy._torch_route once (``wanted``) and plans with _resolve's steps, with no Matmul object
    (issue 21: a flat path, each fact resolved once); a Matmul built by the user asks for gradient names itself."""
    import mathpy
    from mathpy import _torch_route
    from mathpy.host.matmul import Matmul

    asked = []
    real = _torch_route.grad_names
    monkeypatch.setattr(_torch_route, "grad_names", lambda **kw: asked.append(kw) or real(**kw))
    real_init = Matmul.__init__

    def refuse(self, *args, **kwargs):
        raise AssertionError("the stateless call built a Matmul")

    monkeypatch.setattr(Matmul, "__init__", refuse)
    mathpy.matmul_plan_cache.clear()
    a = np.arange(20, dtype=np.float64).reshape(4, 5)
    np.testing.assert_array_equal(mathpy.matmul(a, a.T, epilog="relu"), np.maximum(a @ a.T, 0))
    out = np.empty((4, 4))
    assert mathpy.matmul(a, a.T, out=out) is out  # out=: the same flat path
    np.testing.assert_array_equal(out, a @ a.T)
    assert asked == []
    monkeypatch.setattr(Matmul, "__init__", real_init)
    with Matmul(a, a.T) as mm:
        mm.plan()
        assert len(asked) == 2  # the constructor's operands, plan()'s epilog inputs
