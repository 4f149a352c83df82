"""numpy.matmul's ``out=`` in :func:`mathpy.matmul`: the result written into ``out`` (cast with NumPy's "same_kind"
rule, repeated over extra leading axes as NumPy broadcasts) and ``out`` returned, on every array package ``xp``;
NumPy's errors (types and words) for a bad ``out``; ``out`` overlapping the operands; the GPU path without a GPU
(torch CPU tensors posing as device arrays and a pointer engine, as in test_matmul_orchestration) and on a GPU."""

import numpy as np
import pytest

import mathpy
from _tolerance import assert_within, gamma, matmul_bound, unit_roundoff

RNG = np.random.default_rng(23)


def operand(shape, dtype=np.float64):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return RNG.integers(-100, 100, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def expected_into(a, b, out_shape, out_dtype):
    """numpy.matmul's own out= result: the reference for dtype, shape, casting and repetition."""
    out = np.empty(out_shape, out_dtype)
    return np.matmul(a, b, out=out)


# (a shape, b shape, out shape)
SHAPES = [((4, 3), (3, 5), (4, 5)), ((2, 4, 3), (3, 5), (2, 4, 5)), ((3,), (3, 5), (5,)), ((4, 3), (3,), (4,)),
          ((3,), (3,), ()), ((4, 3), (3, 5), (6, 4, 5)), ((2, 1, 4, 3), (3, 3, 5), (2, 3, 4, 5)), ((3,), (3,), (2,)),
          ((3,), (3, 5), (1, 5))]


def bound(a, b, dtype):
    """matmul_bound for operands of any rank numpy.matmul takes (1-D ones included): gamma_{k+1} |a| @ |b| plus one
    rounding of the result to ``dtype``."""
    magnitude = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    return gamma(a.shape[-1] + 1, dtype) * magnitude + unit_roundoff(dtype) * magnitude + 1e-300


@pytest.mark.parametrize("a_shape, b_shape, out_shape", SHAPES, ids=[f"{a}@{b}->{o}" for a, b, o in SHAPES])
def test_out_is_filled_and_returned(xp, a_shape, b_shape, out_shape):
    a, b = operand(a_shape), operand(b_shape)
    out = xp.asarray(np.full(out_shape, np.nan))
    got = mathpy.matmul(xp.asarray(a), xp.asarray(b), out=out)
    assert got is out
    assert expected_into(a, b, out_shape, np.float64).shape == out_shape  # NumPy takes this out too
    assert_within(xp.to_numpy(out), np.broadcast_to(np.matmul(a, b), out_shape), bound(a, b, np.float64),
                  f"{a_shape} @ {b_shape} into {out_shape}")


@pytest.mark.parametrize("operands, out_dtype", [
    ("float64", "float32"),        # float64 -> float32: same kind
    ("float32", "float64"),
    ("int64", "int8"),             # wraps around, as NumPy's cast
    ("int8", "int64"),             # NumPy: the int8 product (wrapped), then widened
    ("int64", "float32"),
    ("float64", "complex128"),
])
def test_out_dtype_is_cast_as_numpy_casts(xp, operands, out_dtype):
    if xp.on_gpu and np.dtype(operands).kind in "iu":
        pytest.skip("integer products other than int8 x int8 (in multiples of 4) have no GPU kernel: CPU only")
    a, b = operand((4, 6), operands), operand((6, 3), operands)
    out = xp.asarray(np.zeros((4, 3), out_dtype))
    assert mathpy.matmul(xp.asarray(a), xp.asarray(b), out=out) is out
    expected = expected_into(a, b, (4, 3), out_dtype)
    got = xp.to_numpy(out)
    assert got.dtype == expected.dtype
    if np.dtype(operands).kind in "iu":
        np.testing.assert_array_equal(got, expected)  # exact integer products, NumPy's wrap-around
    else:
        exact = a.astype(np.float64) @ b.astype(np.float64)  # computed in the operands' dtype, then cast to out's
        cast = unit_roundoff(out_dtype) * np.abs(exact)
        assert_within(got, exact, bound(a, b, operands) + cast, f"{operands} into {out_dtype}")


def test_out_in_a_strided_view_is_written_through(xp):
    a, b = operand((4, 3)), operand((3, 5))
    base = np.zeros((5, 8))
    holder = xp.asarray(base)
    view = holder.t()[::2] if xp.name == "torch" else holder.T[::2]  # (4, 5), non-contiguous
    assert mathpy.matmul(xp.asarray(a), xp.asarray(b), out=view) is view
    exact = a @ b
    assert_within(xp.to_numpy(holder).T[::2], exact, matmul_bound(a, b, np.float64), "strided out")
    assert (xp.to_numpy(holder).T[1::2] == 0).all()  # nothing written outside the view


@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_out_may_be_an_operand(xp, which):
    """NumPy computes as if into a new array; so does mathpy (the product first, then the copy)."""
    a, b = operand((2, 4, 4)), operand((2, 4, 4))
    exact = a @ b
    xa, xb = xp.asarray(a.copy()), xp.asarray(b.copy())
    if which == "both":
        xb = xa
        exact = a @ a
    out = xb if which == "b" else xa
    assert mathpy.matmul(xa, xb, out=out) is out
    assert_within(xp.to_numpy(out), exact, matmul_bound(a, b if which != "both" else a, np.float64), which)


def test_out_with_an_epilog_and_its_outputs():
    a, b, bias = operand((6, 4)), operand((4, 5)), operand((6,))
    out = np.empty((6, 5))
    got, outputs = mathpy.matmul(a, b, epilog="relu_aux_bias", epilog_inputs={"bias": bias}, out=out)
    assert got is out and "relu_aux" in outputs
    x = a @ b + bias[:, None]
    bias_rounding = unit_roundoff(np.float64) * np.abs(x)
    assert_within(out, np.maximum(x, 0), matmul_bound(a, b, np.float64) + bias_rounding, "relu_aux_bias into out")


def test_out_one_element_tuple_and_none():
    a, b = operand((3, 3)), operand((3, 3))
    out = np.empty((3, 3))
    assert mathpy.matmul(a, b, out=(out,)) is out
    assert isinstance(mathpy.matmul(a, b, out=(None,)), np.ndarray)


@pytest.mark.parametrize("call", [
    lambda m, a, b: m(a, b, out=np.empty((4, 6))),                  # core dimension 1 mismatch
    lambda m, a, b: m(a, b, out=np.empty((3, 5))),                  # core dimension 0 mismatch
    lambda m, a, b: m(a[0], b, out=np.empty((6,))),                 # 1-D a: core dimension 0 is N
    lambda m, a, b: m(a, b[:, 0], out=np.empty((6,))),              # 1-D b: core dimension 0 is M
    lambda m, a, b: m(np.ones((3, 4, 3)), b, out=np.empty((1, 4, 5))),  # the batch does not fit
    lambda m, a, b: m(a, b, out=np.empty((4, 5), np.int64)),        # float64 -> int64 is not same-kind
    lambda m, a, b: m(a, b, out=np.empty((4, 5), bool)),
    lambda m, a, b: m(a, b, out=[[0.0] * 5] * 4),                   # not an array
    lambda m, a, b: m(a, b, out=(np.empty((4, 5)), np.empty((4, 5)))),
    lambda m, a, b: m(a, b, out=np.broadcast_to(np.zeros(5), (4, 5))),  # read-only
], ids=["core-1", "core-0", "vector-a", "vector-b", "batch", "cast-int", "cast-bool", "list", "tuple-of-2",
        "read-only"])
def test_bad_out_gets_numpys_error(call):
    a, b = operand((4, 3)), operand((3, 5))
    with pytest.raises(Exception) as numpy_error:
        call(np.matmul, a, b)
    with pytest.raises(Exception) as mathpy_error:
        call(mathpy.matmul, a, b)
    expected, got = numpy_error.value, mathpy_error.value
    base = TypeError if isinstance(expected, TypeError) else ValueError
    assert isinstance(expected, base) and isinstance(got, base), (expected, got)
    assert str(got).startswith(str(expected).split(" [remapped")[0].split(" (")[0]), (str(expected), str(got))


def test_bad_out_leaves_it_untouched():
    a, b = operand((4, 3)), operand((3, 5))
    out = np.full((4, 5), 7, np.int64)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'matmul' output from dtype\\('float64'\\)"):
        mathpy.matmul(a, b, out=out)
    assert (out == 7).all()


def test_out_of_another_package_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="one package and device: a is a numpy array on the host but out is a torch"):
        mathpy.matmul(operand((2, 3)), operand((3, 2)), out=torch.empty(2, 2, dtype=torch.float64))


def test_out_has_no_backward():
    torch = pytest.importorskip("torch")
    a = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match=r"matmul\(out=...\) has no backward"):
        mathpy.matmul(a, torch.ones(3, 2, dtype=torch.float64), out=torch.empty(2, 2, dtype=torch.float64))
    with torch.no_grad():
        out = torch.empty(2, 2, dtype=torch.float64)
        assert mathpy.matmul(a, torch.ones(3, 2, dtype=torch.float64), out=out) is out
        assert (out == 3).all()


# --- the GPU path without a GPU ---------------------------------------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    pytest.importorskip("torch")
    from test_matmul_orchestration import PointerEngine, PosingTorch
    from _fake_gpu import pretend_a_gpu
    from mathpy import _engines, _packages
    from mathpy.host.matmul import _stateless

    pretend_a_gpu(monkeypatch)
    mathpy.matmul_plan_cache.clear()
    _stateless.forget()
    package = PosingTorch()
    with _packages.use(package, device_package_name="torch"), _engines.use("matmul", "cuda", PointerEngine):
        yield package
    mathpy.matmul_plan_cache.clear()
    _stateless.forget()


def test_gpu_path_device_out_on_the_products_stream(fake_gpu):
    import torch
    from test_matmul_orchestration import PointerEngine
    a, b = operand((3, 4, 6)), operand((6, 5))
    out = torch.full((3, 4, 5), float("nan"), dtype=torch.float32)
    fake_gpu.current = 11
    got = mathpy.matmul(torch.from_numpy(a), torch.from_numpy(b), out=out, stream=42)
    assert got is out
    assert_within(out.numpy(), a @ b, matmul_bound(a, b, np.float32), "device out, cast to float32")
    assert PointerEngine.instances[-1].streams == [42]  # the product on the given stream (the copy follows it there)
    assert mathpy.matmul_plan_cache.info().plans == 1 and mathpy.host.matmul._stateless.remembered() == 0


def test_gpu_path_numpy_out_with_numpy_operands_on_the_gpu(fake_gpu):
    a, b = operand((4, 6)), operand((6, 5))
    out = np.empty((2, 4, 5))
    assert mathpy.matmul(a, b, out=out, execution="cuda") is out
    assert_within(out, np.broadcast_to(a @ b, (2, 4, 5)), matmul_bound(a, b, np.float64), "host out, GPU product")


# --- on a GPU -----------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_gpu_out_of_every_device_package(xp, dtype):
    if not xp.on_gpu:
        pytest.skip("device arrays only")
    a, b = operand((64, 48), dtype), operand((48, 32), dtype)
    out = xp.asarray(np.full((2, 64, 32), np.nan, np.float32))
    assert mathpy.matmul(xp.asarray(a), xp.asarray(b), out=out) is out
    got = xp.to_numpy(out)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert_within(got, np.broadcast_to(exact, got.shape), matmul_bound(a, b, dtype) + matmul_bound(a, b, np.float32),
                  f"{dtype} into float32 on {xp}")
    square = xp.asarray(operand((32, 32), np.float32))
    before = xp.to_numpy(square).astype(np.float64)
    assert mathpy.matmul(square, square, out=square) is square   # out overlaps both operands
    assert_within(xp.to_numpy(square), before @ before, matmul_bound(before, before, np.float32), "aliased out")
