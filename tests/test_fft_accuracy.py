"""Property-based accuracy of the stateless mathpy.fft functions against numpy.fft, on every array package present
(the ``xp`` fixture: NumPy and torch on the CPU here; CuPy and torch-CUDA on a GPU machine), over shapes, strides
(negative, non-contiguous), axes, n/s (pad and crop), norm, dtypes and out=."""

import math

import numpy as np
import mathpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mathpy.fft as mfft

from _hypothesis import property_settings
from _tolerance import assert_fft_close

DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int32]
NORMS = [None, "backward", "ortho", "forward"]
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"]
REAL_INPUT = {"rfft", "ihfft", "rfftn", "rfft2"}


def precision(dtype):
    return np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64


def assert_matches(result, expected, xp, dtype, axes=None):
    """Same dtype and shape as NumPy's result, and within the derived FFT error bound (tests/_tolerance.py) of it;
    ``axes``: the transformed axes of ``expected`` (all when None), whose lengths make the bound."""
    got = xp.to_numpy(result)
    assert xp.is_native(result)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape
    axes = range(expected.ndim) if axes is None else axes
    n = math.prod(expected.shape[a] for a in axes) if expected.ndim else 1
    # both mathpy's and NumPy's results carry an FFT's error
    assert_fft_close(got, expected, precision(dtype), n, "mathpy vs numpy.fft", sources=2)


@st.composite
def operands(draw, min_ndim=1, max_ndim=4, allow_negative=True):
    """(base array, view slices): a random array and a strided (possibly reversed) view of it."""
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(DTYPES))
    steps = tuple(draw(st.sampled_from([1, 1, 2, -1] if allow_negative else [1, 1, 2])) for _ in shape)
    seed = draw(st.integers(0, 2**16))
    return shape, np.dtype(dtype), steps, seed


def make(shape, dtype, steps, seed, real=False):
    rng = np.random.default_rng(seed)
    base_shape = tuple(n * abs(s) for n, s in zip(shape, steps))
    data = rng.standard_normal(base_shape) * 4
    if dtype.kind == "c" and not real:
        data = data + 1j * rng.standard_normal(base_shape)
    if dtype.kind == "c" and real:
        dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    data = data.astype(dtype)
    index = tuple(slice(None, None, s) for s in steps)
    return data, index


def on_package(xp, data, index):
    """The strided view in package xp (torch has no negative strides: those views are copies there)."""
    if xp.name == "torch":
        index = tuple(slice(None, None, abs(s.step)) for s in index)
        expected_input = data[index]
        return xp.asarray(data)[index], expected_input
    return xp.asarray(data)[index], data[index]


@pytest.mark.parametrize("name", ONE_D)
@property_settings(8)
@given(operand=operands(), norm=st.sampled_from(NORMS), data=st.data())
def test_one_dimensional(xp, name, operand, norm, data):
    shape, dtype, steps, seed = operand
    base, index = make(shape, dtype, steps, seed, real=name in REAL_INPUT)
    x, x_np = on_package(xp, base, index)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    n = data.draw(st.one_of(st.none(), st.integers(1, 10)), label="n")
    if name in ("irfft", "hfft") and n is None and shape[axis] == 1:
        n = 1  # NumPy's default length 2*(1-1) = 0 is invalid for both
    expected = getattr(np.fft, name)(x_np, n=n, axis=axis, norm=norm)
    result = getattr(mfft, name)(x, n=n, axis=axis, norm=norm)
    assert_matches(result, expected, xp, x_np.dtype, axes=(axis % len(shape),))


@pytest.mark.parametrize("name", N_D)
@property_settings(6)
@given(norm=st.sampled_from(NORMS), data=st.data())
def test_multi_dimensional(xp, name, norm, data):
    # the 2-D functions need two axes: their operands are drawn with at least two dimensions (no example is wasted)
    operand = data.draw(operands(min_ndim=2 if name.endswith("2") else 1, max_ndim=5), label="operand")
    shape, dtype, steps, seed = operand
    ndim = len(shape)
    base, index = make(shape, dtype, steps, seed, real=name in REAL_INPUT)
    x, x_np = on_package(xp, base, index)
    if name.endswith("2"):
        axes = tuple(data.draw(st.permutations(range(-ndim, 0)), label="axes")[:2])
    else:
        axes = tuple(data.draw(st.permutations(range(ndim)), label="axes")[:data.draw(st.integers(1, ndim))])
    s = data.draw(st.one_of(st.none(), st.lists(st.integers(1, 9), min_size=len(axes), max_size=len(axes))),
                  label="s")
    if name.startswith("irfft") and s is None and x_np.shape[axes[-1]] == 1:
        s = [x_np.shape[a] for a in axes]
        s[-1] = 1
    expected = getattr(np.fft, name)(x_np, s=s, axes=axes, norm=norm)
    result = getattr(mfft, name)(x, s=s, axes=axes, norm=norm)
    assert_matches(result, expected, xp, x_np.dtype, axes=tuple(a % ndim for a in axes))


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "ifftn"])
@property_settings(10)
@given(operand=operands(max_ndim=3, allow_negative=False))
def test_out(xp, name, operand):
    shape, dtype, steps, seed = operand
    base, index = make(shape, dtype, steps, seed, real=name == "rfft")
    x, x_np = on_package(xp, base, index)
    kwargs = {"n": 2 * max(1, shape[-1] - 1)} if name == "irfft" else {}
    expected = getattr(np.fft, name)(x_np, **kwargs)
    out = xp.asarray(np.zeros(expected.shape, expected.dtype))
    result = getattr(mfft, name)(x, out=out, **kwargs)
    assert result is out
    assert_matches(out, expected, xp, x_np.dtype, axes=None if name == "ifftn" else (expected.ndim - 1,))


def test_more_than_three_axes_decompose(xp):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 2, 4, 2, 5)) + 1j * rng.standard_normal((3, 2, 4, 2, 5))).astype(np.complex64)
    for name in ("fftn", "ifftn"):
        assert_matches(getattr(mfft, name)(xp.asarray(x)), getattr(np.fft, name)(x), xp, np.complex64)
    r = x.real.copy()
    assert_matches(mfft.rfftn(xp.asarray(r), norm="ortho"), np.fft.rfftn(r, norm="ortho"), xp, np.float32)
    s = (3, 2, 4, 2, 7)
    assert_matches(mfft.irfftn(xp.asarray(x), s=s, axes=range(5)), np.fft.irfftn(x, s=s, axes=range(5)), xp,
                   np.complex64)


def test_empty_batch(xp):
    x = np.zeros((0, 8), np.complex64)
    result = mfft.fft(xp.asarray(x))
    assert xp.to_numpy(result).shape == (0, 8) and xp.to_numpy(result).dtype == np.complex64


def test_s_minus_one_keeps_length():
    x = np.random.default_rng(0).standard_normal((4, 6))
    np.testing.assert_allclose(mfft.fftn(x, s=(-1, 8), axes=(0, 1)), np.fft.fftn(x, s=(4, 8), axes=(0, 1)))


def test_list_input():
    np.testing.assert_allclose(mfft.fft([1.0, 2.0, 3.0]), np.fft.fft([1.0, 2.0, 3.0]))


def test_num_threads():
    x = np.random.default_rng(0).standard_normal((16, 64))
    np.testing.assert_allclose(mfft.fft(x, execution=mathpy.ExecutionCPU(num_threads=2)),
                               np.fft.fft(x))
