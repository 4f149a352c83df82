"""Python prolog/epilog callbacks on the CPU execution space: the same functions, offsets and user-data rules as on
the GPU, checked against NumPy (a window prolog, a filter epilog, a scale), plus the errors bad callbacks get."""

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft

from _fft_reference import rand
from _tolerance import assert_fft_close


def window_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 32]


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def scale_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[0]


def double_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * 2


def test_window_prolog(xp):
    x = rand((5, 32))
    window = np.hanning(32).astype(np.float32)
    y = mfft.fft(xp.asarray(x), prolog=mfft.Callback(window_prolog, data=window))
    np.testing.assert_allclose(xp.to_numpy(y), np.fft.fft(x * window), atol=1e-4)


def test_filter_epilog_and_scale(xp):
    x = rand((4, 32), np.complex128)
    filt = rand((4, 32), np.complex128, seed=3)
    y = mfft.fft(xp.asarray(x), epilog=mfft.Callback(filter_epilog, data=filt))
    np.testing.assert_allclose(xp.to_numpy(y), np.fft.fft(x) * filt, atol=1e-10)
    y = mfft.ifft(xp.asarray(x), epilog=mfft.Callback(scale_epilog, data=0.5))
    np.testing.assert_allclose(xp.to_numpy(y), np.fft.ifft(x) * 0.5, atol=1e-12)


def test_r2c_prolog_c2r_epilog():
    x = rand((3, 32), np.float32)
    window = np.hanning(32).astype(np.float32)
    spectrum = mfft.rfft(x, prolog=mfft.Callback(window_prolog, data=window))
    np.testing.assert_allclose(spectrum, np.fft.rfft(x * window), atol=1e-4)
    back = mfft.irfft(spectrum, n=32, epilog=mfft.Callback(scale_epilog, data=np.float32(3)))
    np.testing.assert_allclose(back, np.fft.irfft(spectrum, n=32) * 3, atol=1e-4)


def test_epilog_sees_unnormalised_result_then_norm_applies():
    x = rand((2, 16))

    def record(data_out, offset, value, user_info, unused):
        data_out[offset] = value

    y = mfft.fft(x, norm="forward", epilog=record)
    np.testing.assert_allclose(y, np.fft.fft(x, norm="forward"), atol=1e-5)


def test_filter_in_a_strided_layout():
    """The filter has the operand's shape; mathpy lays it out in the callback's layout (Fortran order here)."""
    x = np.asfortranarray(rand((6, 32)))
    filt = rand((6, 32), seed=5)
    with mfft.FFT(x, axes=[1]) as f:
        shape, strides = f.output_layout
        assert shape == (6, 32) and strides == (1, 6)
        f.plan(epilog=mfft.Callback(filter_epilog, data=filt))
        np.testing.assert_allclose(f.execute(), np.fft.fft(x, axis=1) * filt, atol=1e-4)


def test_offsets_follow_the_layout():
    """A prolog returning its offset shows the offsets the engine uses: the layout's element strides."""
    x = np.zeros((4, 8), np.complex128)[:, ::2]  # strides (8, 2): addressed in place

    def offsets(data_in, offset, user_info, unused):
        return complex(offset)

    with mfft.FFT(x, axes=[1]) as f:
        shape, strides = f.input_layout
        f.plan(prolog=offsets)
        y = f.execute(direction="forward")
    expected = (np.arange(4)[:, None] * strides[0] + np.arange(4)[None, :] * strides[1]).astype(np.complex128)
    np.testing.assert_allclose(y, np.fft.fft(expected, axis=1))


def test_stateful_with_callbacks_and_reset():
    x, x2 = rand((3, 32)), rand((3, 32), seed=9)
    window = np.hanning(32).astype(np.float32)
    with mfft.FFT(x, axes=[1]) as f:
        f.plan(prolog=mfft.Callback(window_prolog, data=window), epilog=mfft.Callback(scale_epilog, data=np.float32(2)))
        np.testing.assert_allclose(f.execute(), np.fft.fft(x * window) * 2, atol=1e-3)
        f.reset_operand(x2)
        np.testing.assert_allclose(f.execute(), np.fft.fft(x2 * window) * 2, atol=1e-3)


def test_user_data_is_read_at_execute_time():
    x = rand((2, 32))
    window = np.ones(32, np.float32)
    callback = mfft.Callback(window_prolog, data=window)
    np.testing.assert_allclose(mfft.fft(x, prolog=callback), np.fft.fft(x), atol=1e-4)
    window[:] = 2  # host data on the CPU is used in place, not copied
    np.testing.assert_allclose(mfft.fft(x, prolog=callback), np.fft.fft(x) * 2, atol=1e-4)


def test_plain_function_and_dict_forms():
    x = rand((16,))
    np.testing.assert_allclose(mfft.fft(x, prolog=double_prolog), np.fft.fft(2 * x), atol=1e-4)
    np.testing.assert_allclose(mfft.fft(x, prolog={"function": double_prolog}), np.fft.fft(2 * x), atol=1e-4)


def test_callbacks_join_the_plan_cache_key():
    mfft.plan_cache_clear()
    x = rand((8, 32))
    mfft.fft(x, prolog=double_prolog)
    mfft.fft(x)
    assert mfft.plan_cache_info().plans == 2
    hits = mfft.plan_cache_info().hits
    mfft.fft(x, prolog=double_prolog)
    assert mfft.plan_cache_info().hits == hits + 1


@pytest.mark.parametrize("callback, error, match", [
    (lambda data_in, offset: data_in[offset], TypeError, "positional parameters"),
    (mfft.Callback(filter_epilog, data=np.ones(7, np.complex64)), ValueError, "shape"),
    (mfft.Callback(window_prolog, data=np.ones((32, 1), np.float32)), ValueError, "shape"),
    (mfft.Callback(window_prolog, data=np.array(["x"] * 32)), TypeError, "dtype"),
    (b"\x00\x01 not for the cpu", ValueError, "only on the GPU"),
    ({"ltoir": b"x", "function": double_prolog}, ValueError, "exactly one"),
    (42, TypeError, "prolog must be"),
])
def test_bad_prologs(callback, error, match):
    x = rand((4, 32))
    before = x.copy()
    with pytest.raises(error, match=match):
        mfft.fft(x, prolog=callback) if not (isinstance(callback, mfft.Callback) and
                                             callback.function is filter_epilog) else mfft.fft(x, epilog=callback)
    np.testing.assert_array_equal(x, before)


def test_prolog_returning_nothing_and_typing_errors_at_plan_time():
    def nothing(data_in, offset, user_info, unused):
        data_in[offset]

    def needs_data(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[0]

    f = mfft.FFT(rand((32,)))
    with pytest.raises(TypeError, match="returns nothing"):
        f.plan(prolog=nothing)
    with pytest.raises(mathpy.CallbackCompileError, match="needs_data"):
        f.plan(prolog=needs_data)  # no user data given: user_info is None
    f.plan()  # the failed plans changed nothing
    np.testing.assert_allclose(f.execute(), np.fft.fft(rand((32,))), atol=1e-4)
    f.free()


def test_window_needs_contiguous_trailing_layout():
    x = np.asfortranarray(rand((6, 32)))
    with pytest.raises(ValueError, match="C-contiguous over them"):
        with mfft.FFT(x, axes=[1]) as f:
            f.plan(prolog=mfft.Callback(window_prolog, data=np.ones(32, np.float32)))


# --- user data and transforms callbacks cannot take: refused at plan time, with mathpy's message ----------------------

@pytest.mark.parametrize("data, allowed", [
    (np.ones(1, "datetime64[s]"), r"datetime64\[s\]"),
    (np.ones(1, np.longdouble), "float128|float96|longdouble"),
    (np.ones(1, mathpy._dtypes.BFLOAT16), "bfloat16"),
])
def test_unsupported_user_data_is_refused_when_planning(data, allowed):
    if np.dtype(data.dtype) == np.float64:
        pytest.skip("long double is double on this platform")
    with mfft.FFT(rand((2, 8))) as f:
        with pytest.raises(TypeError, match=f"user data of epilog scale_epilog .* has dtype ({allowed}); allowed are "
                                            f"bool, int8"):
            f.plan(epilog=mfft.Callback(scale_epilog, data=data))
        assert f.prepared_call is None  # nothing planned


@pytest.mark.parametrize("data", [np.float16(0.5), np.array([0.5, 7, 7, 7, 7, 7, 7, 7], np.float16)],
                         ids=["scalar", "array"])
def test_float16_user_data_on_the_cpu_is_read_as_float32(data):
    """numba's CPU target has no float16: user data of that dtype is read as float32 (the same values), so the plan
    succeeds and the result is the scaled transform (mathpy.jit._cpu); never numba's bare NotImplementedError."""
    x = rand((2, 8))
    with mfft.FFT(x) as f:
        f.plan(epilog=mfft.Callback(scale_epilog, data=data))
        got = f.execute()
    assert got.dtype == np.complex64
    assert_fft_close(got, np.fft.fftn(x.astype(np.complex128)) * 0.5, np.float32, x.size, "float16 user data")


def test_long_double_transforms_take_no_callbacks():
    x = np.ones((2, 8), np.clongdouble)
    if x.dtype == np.complex128:
        pytest.skip("long double is double on this platform")
    with pytest.raises(TypeError, match="complex256.*long double.*float64/complex128 to use callbacks"):
        mfft.fft(x, epilog=scale_epilog)
