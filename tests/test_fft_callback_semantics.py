"""Callbacks through the public FFT API on every array package (``xp``: NumPy and torch on the CPU engine here; CuPy
and torch-CUDA on cuFFT on a GPU machine, ``pytest -m gpu``): the same assertions on both execution spaces.

- User data of every kind (int32, uint8, float16, bool, ...) is read at the element's offset, by a prolog and an
  epilog that really run.
- C2R prologs and epilogs (1-D even and odd, 2-D, 3-D, batched) with user data indexed by offset. Measured on an
  H200 with cuFFT 12.0 (benchmarks/probe_c2r_callbacks.py): a C2R load callback is called for every input element
  and no other offset (twice per element for odd 1-D lengths, except the DC bin), each output is stored once, and
  cuFFT's C2R is, as a real-linear map, NumPy's irfftn: the imaginary parts of the self-conjugate bins (DC, and
  Nyquist for even lengths) are dropped and a non-Hermitian input is treated as NumPy treats it. So a prolog that
  makes those bins non-real (the benchmark's filter) gives irfftn(prolog(x)) on both engines.
"""

import math

import numpy as np
import pytest

import mathpy.fft as mfft

from _fft_reference import rand
from _tolerance import assert_fft_close


def scale_by_offset_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset]


def scale_by_offset_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def cast_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * np.float32(user_info[offset])


def cast_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * np.float32(user_info[offset])


def _user_data(dtype, shape, seed=5):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("user_dtype", ["int32", "uint8", "float16", "bool", "int64", "float64"])
def test_user_data_of_each_dtype_runs(xp, user_dtype):
    x = rand((4, 16))
    info = _user_data(user_dtype, x.shape)
    y = mfft.fft(xp.asarray(x), prolog=mfft.Callback(cast_prolog, data=xp.asarray(info)))
    expected = np.fft.fft(x.astype(np.complex128) * info.astype(np.float32))
    assert_fft_close(xp.to_numpy(y), expected, np.float32, 16, f"prolog with {user_dtype} user data")
    y = mfft.fft(xp.asarray(x), epilog=mfft.Callback(cast_epilog, data=xp.asarray(info)))
    expected = np.fft.fft(x.astype(np.complex128)) * info.astype(np.float32)
    assert_fft_close(xp.to_numpy(y), expected, np.float32, 16, f"epilog with {user_dtype} user data")


def _non_hermitian_filter(shape, dtype, seed):
    """A complex filter whose every bin, DC and Nyquist included, is non-real (as the benchmark's fr + 1j)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j).astype(dtype)


C2R_SHAPES = [((6, 9), (1,)), ((6, 8), (1,)), ((3, 1), (1,)), ((4, 6, 8), (1, 2)), ((5, 7), (0, 1)),
              ((2, 4, 6, 5), (1, 2, 3)), ((8,), (0,))]


@pytest.mark.parametrize("precision", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", C2R_SHAPES, ids=str)
def test_c2r_prolog_indexing_user_data_by_offset(xp, shape, axes, precision):
    complex_ = np.result_type(precision, np.complex64)
    s = [shape[a] for a in axes]
    half = list(shape)
    half[axes[-1]] = shape[axes[-1]] // 2 + 1
    x = rand(tuple(half), complex_, seed=1)
    filt = _non_hermitian_filter(x.shape, complex_, seed=2)
    y = mfft.irfftn(xp.asarray(x), s=s, axes=axes, prolog=mfft.Callback(scale_by_offset_prolog,
                                                                         data=xp.asarray(filt)))
    expected = np.fft.irfftn(x.astype(np.complex128) * filt, s=s, axes=axes)
    assert_fft_close(xp.to_numpy(y), expected, precision, math.prod(s), f"C2R prolog {shape} {axes}")


@pytest.mark.parametrize("precision", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", C2R_SHAPES, ids=str)
def test_c2r_epilog_indexing_user_data_by_offset(xp, shape, axes, precision):
    complex_ = np.result_type(precision, np.complex64)
    s = [shape[a] for a in axes]
    half = list(shape)
    half[axes[-1]] = shape[axes[-1]] // 2 + 1
    x = rand(tuple(half), complex_, seed=3)
    weights = (np.random.default_rng(4).standard_normal(shape) * 2).astype(precision)
    y = mfft.irfftn(xp.asarray(x), s=s, axes=axes, epilog=mfft.Callback(scale_by_offset_epilog,
                                                                         data=xp.asarray(weights)))
    expected = np.fft.irfftn(x.astype(np.complex128), s=s, axes=axes) * weights
    assert_fft_close(xp.to_numpy(y), expected, precision, math.prod(s), f"C2R epilog {shape} {axes}")


def test_c2r_prolog_and_epilog_together(xp):
    x = rand((5, 17), np.complex64, seed=6)
    filt = _non_hermitian_filter(x.shape, np.complex64, seed=7)
    weights = np.linspace(-2, 2, 5 * 32, dtype=np.float32).reshape(5, 32)
    y = mfft.irfft(xp.asarray(x), n=32, prolog=mfft.Callback(scale_by_offset_prolog, data=xp.asarray(filt)),
                   epilog=mfft.Callback(scale_by_offset_epilog, data=xp.asarray(weights)))
    expected = np.fft.irfft(x.astype(np.complex128) * filt, n=32) * weights
    assert_fft_close(xp.to_numpy(y), expected, np.float32, 32, "C2R prolog and epilog")


@pytest.mark.gpu
@pytest.mark.parametrize("n,batch", [(1024, 32768), (1000, 4096), (4095, 512)])
def test_c2r_prolog_at_the_benchmark_size(n, batch):
    """The benchmark's case (filter fr + 1j, so DC/Nyquist non-real; 1024 x 32768) where a 2.7e-2 difference from
    CuPy's irfft was reported: mathpy on cuFFT against NumPy's irfft of the filtered input, per row."""
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(8)
    x = np.fft.rfft(rng.standard_normal((batch, n)), axis=-1).astype(np.complex64)
    filt = _non_hermitian_filter(x.shape, np.complex64, seed=9)
    y = cp.asnumpy(mfft.irfft(cp.asarray(x), n=n, prolog=mfft.Callback(scale_by_offset_prolog,
                                                                        data=cp.asarray(filt))))
    expected = np.fft.irfft(x.astype(np.complex128) * filt, n=n)
    assert_fft_close(y, expected, np.float32, n, f"C2R prolog n={n} batch={batch}")
