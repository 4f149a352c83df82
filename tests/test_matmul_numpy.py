"""mathpy.matmul against numpy.matmul: every dtype (integers and bool exact, NumPy's promotion of mixed dtypes, long
double and object arrays on the CPU), 1-D operands and broadcasting per dtype, and the result's memory order (C order
for C-ordered operands, nvmath-python's rule, ``MatmulOptions(result_order=...)``), on every array package ``xp``.
The GPU half (cuBLASLt's int8 kernels, refusals, C-order results on CuPy and torch) carries the gpu marker."""

import ml_dtypes
import numpy as np
import pytest

from mathpy import Matmul, MatmulOptions, matmul

from _matmul_reference import as_result, exact_matmul, strides_in_bytes
from _tolerance import assert_within, matmul_bound

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(7)
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
LONG_DOUBLE = np.finfo(np.longdouble).nmant > 52


def operand(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
    x = RNG.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def imma(xp, dtype):
    """Whether the product runs on cuBLASLt's integer kernels (int8, and bool as int8, on a GPU), whose rules want M, N
    and K multiples of 4: the generic tests then use such shapes (test_int8_on_the_gpu_is_exact covers the others)."""
    return xp.on_gpu and np.dtype(dtype) in (np.int8, np.bool_)


def native_dtypes(xp):
    """The dtypes ``xp`` holds (torch: no unsigned types beyond uint8, no long double, no object arrays)."""
    if xp.name == "numpy":
        return (*INTEGERS, "bool", "float16", "float32", "float64", "complex64", "complex128",
                *(("longdouble", "clongdouble") if LONG_DOUBLE else ()))
    return ("int8", "int16", "int32", "int64", "uint8", "bool", "float16", "float32", "float64", "complex64",
            "complex128")


def check(xp, a, b, **kwargs):
    """mathpy's product has numpy.matmul's dtype and shape, and the values of the product written out in exact
    arithmetic (:func:`_matmul_reference.exact_matmul`, no NumPy loop): equal for integers (wrapped as NumPy wraps)
    and bool, within the derived bound of _tolerance for floating point."""
    expected = np.matmul(a, b)
    got = matmul(xp.asarray(a), xp.asarray(b), **kwargs)
    if np.ndim(expected) == 0 and xp.name == "numpy":
        assert np.isscalar(got) or np.ndim(got) == 0
    got = np.asarray(xp.to_numpy(got)) if not np.isscalar(got) else np.asarray(got)
    assert got.dtype == expected.dtype, (a.dtype, b.dtype, got.dtype, expected.dtype)
    assert got.shape == np.shape(expected)
    exact = as_result(exact_matmul(a, b), expected.dtype)
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exact)
    else:
        assert_within(got, exact, matmul_bound(a, b, expected.dtype, exact=exact),
                      f"{a.dtype} @ {b.dtype} -> {expected.dtype}")
    return got


# --- dtypes --------------------------------------------------------------------------------------------------------

def test_every_dtype_as_numpy(xp):
    for dtype in native_dtypes(xp):
        if xp.on_gpu and np.dtype(dtype) in (np.int16, np.int32, np.int64, np.uint8):
            continue  # refused on the GPU (below)
        m, k = (8, 12) if imma(xp, dtype) else (5, 7)
        check(xp, operand((3, m, k), dtype), operand((k, 4), dtype))


def test_integers_wrap_around_as_numpy():
    """NumPy's integer matmul is exact modulo 2**bits: so is mathpy's (int8 through int32 sums, then wrapped)."""
    a = np.full((2, 64), 127, np.int8)
    b = np.full((64, 3), -128, np.int8)
    exact = 64 * 127 * -128                                   # -1040384 = -16 * 2**16: wraps to 0 in int8
    np.testing.assert_array_equal(matmul(a, b), np.full((2, 3), (exact + 128) % 256 - 128, np.int8))
    np.testing.assert_array_equal(matmul(a, b, options={"result_type": np.int32}), np.full((2, 3), exact, np.int32))
    big = np.full((1, 3), 2**62, np.int64)                    # 3 * 2**62 wraps to -2**62 in int64
    np.testing.assert_array_equal(matmul(big, np.ones((3, 1), np.int64)), np.array([[-2**62]], np.int64))
    exact = np.array([[2**53 + 1]], np.int64)  # a float64 detour would lose the 1
    assert matmul(exact, np.ones((1, 1), np.int64))[0, 0] == 2**53 + 1


def test_bool_is_logical_as_numpy():
    a, b = operand((4, 6), bool), operand((6, 3), bool)
    some_term = (a[:, :, None] & b[None, :, :]).any(axis=1)   # written out: OR over k of a[i, k] AND b[k, j]
    np.testing.assert_array_equal(matmul(a, b), some_term)
    c = operand((4, 3), bool)
    np.testing.assert_array_equal(matmul(a, b, c), some_term | c)


@pytest.mark.parametrize("pair", [("float32", "float64"), ("int64", "float32"), ("int8", "bool"), ("int8", "uint8"),
                                  ("float16", "float32"), ("int32", "complex64"), ("uint16", "int16"),
                                  ("bool", "float16"), ("float32", "complex128")])
def test_mixed_dtypes_are_promoted_as_numpy(xp, pair):
    if xp.name == "torch" and "uint16" in pair:
        pytest.skip("torch has no uint16")
    promoted = np.result_type(*pair)
    if xp.on_gpu and promoted.kind in "iu" and promoted != np.int8:
        pytest.skip("no exact GPU kernel for this integer product (refused, below)")
    m, n = (4, 8) if imma(xp, promoted) else (3, 5)
    got = check(xp, operand((2, m, 4), pair[0]), operand((4, n), pair[1]))
    assert got.dtype == promoted


def test_vectors_and_broadcasting_per_dtype(xp):
    for dtype in ("int8", "int64", "bool", "float16", "complex64"):
        if xp.on_gpu and dtype in ("int64", "int8", "bool"):
            continue  # int64: no GPU kernel; int8 / bool vectors: M or N of 1 (test_int8_on_the_gpu_is_exact)
        check(xp, operand((5,), dtype), operand((5,), dtype))            # 1-D @ 1-D: a scalar
        check(xp, operand((5,), dtype), operand((2, 5, 3), dtype))       # 1-D @ N-D
        check(xp, operand((2, 1, 4, 5), dtype), operand((3, 5, 2), dtype))
        check(xp, operand((3, 4, 5), dtype), operand((5,), dtype))


@pytest.mark.skipif(not LONG_DOUBLE, reason="long double is double on this platform")
def test_long_double_and_object_on_the_cpu():
    a, b = operand((3, 4), np.longdouble) / 3, operand((4, 2), np.longdouble)
    got = matmul(a, b)
    assert got.dtype == np.longdouble
    exact = as_result(exact_matmul(a, b), np.longdouble)
    assert_within(got, exact, matmul_bound(a, b, np.longdouble, exact=exact), "long double")
    from fractions import Fraction
    fractions = np.array([[Fraction(1, 3), Fraction(1, 7)], [Fraction(2, 5), 1]], dtype=object)
    got = matmul(fractions, fractions, alpha=3)
    written = [[3 * (Fraction(1, 9) + Fraction(2, 35)), 3 * (Fraction(1, 21) + Fraction(1, 7))],
               [3 * (Fraction(2, 15) + Fraction(2, 5)), 3 * (Fraction(2, 35) + 1)]]
    assert got.dtype == object and (got == np.array(written, dtype=object)).all()


def test_epilogs_need_floating_point():
    with pytest.raises(ValueError, match="epilog RELU_BIAS does not apply to int32 operands"):
        matmul(np.ones((2, 3), np.int32), np.ones((3, 2), np.int32), epilog="relu_bias",
               epilog_inputs={"bias": np.ones(2, np.int32)})


# --- the result's memory order -------------------------------------------------------------------------------------

def is_c_contiguous(result):
    if hasattr(result, "is_contiguous"):
        return result.is_contiguous()
    return bool(result.flags.c_contiguous)


def is_f_ordered(result):
    """Column-major matrices with contiguous batches (strides (..., 1, M) in elements)."""
    from mathpy._operands import wrap_operand
    op = wrap_operand(result)
    m = op.shape[-2]
    return op.strides[-2] == 1 and op.strides[-1] == m


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64", "int8", "bool"])
def test_c_ordered_operands_give_a_c_ordered_result(xp, dtype):
    """As numpy.matmul and torch give it: 16-bit results included (they used to come back column-major)."""
    if dtype == "bfloat16" and xp.name == "cupy":
        pytest.skip("CuPy has no bfloat16")
    dtype = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    a, b = operand((2, 8, 12), np.float32).astype(dtype), operand((12, 4), np.float32).astype(dtype)
    result = matmul(xp.asarray(a), xp.asarray(b))
    assert xp.is_native(result) and is_c_contiguous(result), strides_in_bytes(result)


def test_result_order_follows_nvmath_rule_and_the_option(xp):
    a, b = operand((6, 5), np.float16), operand((5, 4), np.float16)
    af = xp.asarray(np.asfortranarray(a))
    a_is_f = strides_in_bytes(af)[0] == 2  # a package may have copied it to C order
    # a's order
    assert is_f_ordered(matmul(af, xp.asarray(b))) == a_is_f
    # the option, either way
    assert is_f_ordered(matmul(xp.asarray(a), xp.asarray(b), options=MatmulOptions(result_order="F")))
    assert is_c_contiguous(matmul(af, xp.asarray(b), options={"result_order": "C"}))
    # c's order when c is given
    c = np.asfortranarray(operand((6, 4), np.float16))
    cx = xp.asarray(c)
    c_is_f = strides_in_bytes(cx)[0] == 2
    got = matmul(xp.asarray(a), xp.asarray(b), cx, beta=1)
    assert is_f_ordered(got) == c_is_f
    np.testing.assert_allclose(xp.to_numpy(got).astype(np.float32), (a.astype(np.float32) @ b + c), atol=2e-2)
    # an epilog with a per-row operand needs column-major (cuBLASLt's bias convention)
    bias = xp.asarray(np.ones(6, np.float16))
    got = matmul(xp.asarray(a), xp.asarray(b), epilog="bias", epilog_inputs={"bias": bias})
    assert is_f_ordered(got)
    np.testing.assert_allclose(xp.to_numpy(got).astype(np.float32), a.astype(np.float32) @ b + 1, atol=2e-2)


def test_stateful_matmul_keeps_the_order_and_reads_new_values(xp):
    a, b = operand((4, 8), np.int8), operand((8, 12), np.int8)
    ax, bx = xp.asarray(a), xp.asarray(b)
    with Matmul(ax, bx) as mm:
        mm.plan()
        first = mm.execute()
        assert is_c_contiguous(first)
        np.testing.assert_array_equal(xp.to_numpy(first), np.matmul(a, b))
        a2 = operand((4, 8), np.int8)
        mm.reset_operands(a=xp.asarray(a2))
        np.testing.assert_array_equal(xp.to_numpy(mm.execute()), np.matmul(a2, b))


# --- the GPU: cuBLASLt's int8 kernels, exact or refused ------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 32, 128), (3, 5, 7), (1, 8, 4), (256, 1, 64), (2, 48, 16, 40)],
                         ids=str)
def test_int8_on_the_gpu_is_exact(xp, shape):
    """int8 x int8 through cuBLASLt (CUBLAS_COMPUTE_32I): the exact int32 sums, wrapped to int8 by default as
    NumPy does, or kept as int32 with result_type. Shapes cuBLASLt's integer kernels do not take (its IMMA rules:
    M, K and leading dimensions multiples of 4) are refused when planning with a ValueError naming the rule."""
    if not xp.on_gpu:
        pytest.skip("GPU packages only")
    *batch, m, n, k = shape
    a, b = operand((*batch, m, k), np.int8), operand((k, n), np.int8)
    try:
        got = matmul(xp.asarray(a), xp.asarray(b))
    except ValueError as error:
        assert "int8" in str(error) and "multiple" in str(error), error
        return
    np.testing.assert_array_equal(xp.to_numpy(got), np.matmul(a, b))
    assert is_c_contiguous(got)
    wide = matmul(xp.asarray(a), xp.asarray(b), options={"result_type": np.int32})
    np.testing.assert_array_equal(xp.to_numpy(wide), a.astype(np.int32) @ b.astype(np.int32))
    again = matmul(xp.asarray(a), xp.asarray(b))  # the remembered prepared call: the same wrapping
    np.testing.assert_array_equal(xp.to_numpy(again), np.matmul(a, b))


@pytest.mark.gpu
def test_int8_and_bool_with_c_on_the_gpu(xp):
    if not xp.on_gpu:
        pytest.skip("GPU packages only")
    a, b, c = operand((32, 64), np.int8), operand((64, 16), np.int8), operand((32, 16), np.int8)
    got = matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), alpha=3, beta=-2)
    expected = (3 * (a.astype(np.int32) @ b) - 2 * c.astype(np.int32)).astype(np.int8)
    np.testing.assert_array_equal(xp.to_numpy(got), expected)
    p, q = operand((32, 64), bool), operand((64, 16), bool)
    np.testing.assert_array_equal(xp.to_numpy(matmul(xp.asarray(p), xp.asarray(q))), np.matmul(p, q))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["int16", "int32", "int64", "uint8"])
def test_other_integers_are_refused_on_the_gpu(xp, dtype):
    if not xp.on_gpu:
        pytest.skip("GPU packages only")
    a = xp.asarray(operand((4, 4), dtype))
    with pytest.raises(TypeError, match=f"{dtype} products have no exact GPU kernel.*execution='cpu'"):
        matmul(a, a)
    np.testing.assert_array_equal(matmul(operand((4, 4), dtype), operand((4, 4), dtype), execution="cpu").shape,
                                  (4, 4))


@pytest.mark.gpu
@pytest.mark.skipif(not LONG_DOUBLE, reason="long double is double on this platform")
def test_long_double_and_object_are_refused_on_the_gpu():
    for dtype in (np.longdouble, object):
        a = np.ones((4, 4), dtype)
        with pytest.raises(TypeError, match="run only on the CPU"):
            matmul(a, a, execution="cuda")


@pytest.mark.gpu
def test_numpy_operands_on_the_gpu_keep_numpys_order_and_dtype():
    a, b = operand((3, 16, 8), np.float32), operand((8, 24), np.float64)
    got = matmul(a, b, execution="cuda")
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.flags.c_contiguous
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-12, atol=1e-12)


def test_a_ragged_list_is_numpys_value_error():
    with pytest.raises(ValueError) as numpy_error:
        np.matmul([[1, 2], [3]], [[1], [2]])
    with pytest.raises(ValueError, match="^a: setting an array element with a sequence") as error:
        matmul([[1, 2], [3]], [[1], [2]])
    assert str(error.value) == f"a: {numpy_error.value}"
