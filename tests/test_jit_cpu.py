"""CPU execution of callbacks (numba.njit loops) against NumPy, and the user-data checks of mathpy.jit."""

import numpy as np
import pytest

import mathpy
from mathpy import jit

rng = np.random.default_rng(7)


def prolog_filter(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 8]


def epilog_filter(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset % 8]


def prolog_x3(data_in, offset, user_info, unused):
    return data_in[offset] * np.float32(3)


def _complex(shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _offsets(array, base):
    """Element offsets of ``array`` inside its base buffer (what the FFT layer computes from strides)."""
    itemsize = array.itemsize
    start = (array.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // itemsize
    index = np.indices(array.shape).reshape(array.ndim, -1)
    strides = np.array(array.strides) // itemsize
    return (start + (index * strides[:, None]).sum(axis=0)).reshape(array.shape).astype(np.int64)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float32, np.float64])
def test_prolog_matches_numpy(dtype):
    base = _complex(64 * 8, np.complex128).real.astype(dtype) if dtype in (np.float32, np.float64) \
        else _complex(64 * 8, dtype)
    user = _complex(8, np.complex64) if np.dtype(dtype).kind == "c" else rng.standard_normal(8).astype(dtype)
    x = base.reshape(64, 8)
    values = jit.apply_prolog_cpu(prolog_filter, base, _offsets(x, base), user)
    assert values.shape == x.shape and values.dtype == dtype
    np.testing.assert_allclose(values, (x * user[None, :]).astype(dtype), rtol=1e-6)


def test_prolog_on_strided_view():
    base = _complex(16 * 10)
    view = base.reshape(16, 10)[::2, 1:9]  # 8 columns: user_info[offset % 8] is the element's own column + 1 ...
    offsets = _offsets(view, base)
    values = jit.apply_prolog_cpu(prolog_x3, base, offsets)
    np.testing.assert_allclose(values, view * np.float32(3), rtol=1e-6)
    filt = _complex(8)
    np.testing.assert_allclose(jit.apply_prolog_cpu(prolog_filter, base, offsets, filt),
                               view * filt[offsets % 8], rtol=1e-6)


def test_epilog_writes_in_place():
    out = np.zeros(32 * 8, np.complex64)
    values = _complex((32, 8))
    filt = _complex(8)
    result = jit.apply_epilog_cpu(epilog_filter, out, np.arange(out.size).reshape(32, 8), values, filt)
    assert result is out
    np.testing.assert_allclose(out.reshape(32, 8), values * filt, rtol=1e-6)


def test_epilog_strided_output_leaves_gaps():
    out = np.zeros(40, np.float64)
    offsets = np.arange(0, 40, 2)

    def store_negated(data_out, offset, value, user_info, unused):
        data_out[offset] = -value
    jit.apply_epilog_cpu(store_negated, out, offsets, np.arange(20.0))
    np.testing.assert_array_equal(out[::2], -np.arange(20.0))
    np.testing.assert_array_equal(out[1::2], 0)


def test_offset_is_uint64_as_on_the_gpu():
    def prolog(data_in, offset, user_info, unused):
        return data_in[offset] * (offset // np.uint64(1) == offset)
    base = np.ones(4, np.float64)
    np.testing.assert_array_equal(jit.apply_prolog_cpu(prolog, base, np.arange(4)), 1)


def test_user_info_is_read_only_on_cpu_too():
    def epilog(data_out, offset, value, user_info, unused):
        user_info[0] = value
        data_out[offset] = value
    with pytest.raises(mathpy._errors.CallbackCompileError, match="epilog"):
        jit.apply_epilog_cpu(epilog, np.zeros(4), np.arange(4), np.ones(4), np.zeros(1))


def test_cpu_typing_error_names_function():
    def uses_missing(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset]
    with pytest.raises(mathpy._errors.CallbackCompileError, match=r"uses_missing .*test_jit_cpu.py:\d+"):
        jit.apply_prolog_cpu(uses_missing, np.ones(4), np.arange(4), None)


def test_cpu_errors():
    with pytest.raises(ValueError, match="1-D"):
        jit.apply_prolog_cpu(prolog_x3, np.ones((2, 2), np.complex64), np.arange(4))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        jit.apply_prolog_cpu(prolog_x3, np.ones(4, np.complex64), np.arange(5))
    with pytest.raises(TypeError, match="integer"):
        jit.apply_prolog_cpu(prolog_x3, np.ones(4, np.complex64), np.arange(4.0))
    with pytest.raises(ValueError, match="shape"):
        jit.apply_epilog_cpu(epilog_filter, np.ones(8, np.complex64), np.arange(8), np.ones(4), np.ones(8))
    with pytest.raises(TypeError, match="positional"):
        jit.apply_prolog_cpu(epilog_filter, np.ones(8), np.arange(8))


def test_cpu_closure_change_recompiles():
    def scaled(factor):
        def prolog(data_in, offset, user_info, unused):
            return data_in[offset] * factor
        return prolog
    base = np.arange(4.0)
    np.testing.assert_array_equal(jit.apply_prolog_cpu(scaled(2.0), base, np.arange(4)), base * 2)
    np.testing.assert_array_equal(jit.apply_prolog_cpu(scaled(5.0), base, np.arange(4)), base * 5)


def test_cpu_is_a_compiled_loop():
    import time
    base = _complex(1 << 20)
    offsets = np.arange(base.size)
    jit.apply_prolog_cpu(prolog_x3, base[:8], offsets[:8])  # compile
    start = time.perf_counter()
    values = jit.apply_prolog_cpu(prolog_x3, base, offsets)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(values, base * np.float32(3), rtol=1e-6)
    assert elapsed < 0.25  # a Python loop takes about a second per million elements


# --- user data checks ----------------------------------------------------------------------------------------------

def test_check_user_info_accepts():
    layout = (16, 4, 8)
    assert jit.check_user_info(None, None, layout) == 0
    assert jit.check_user_info(np.ones((), np.float32), "float32", layout) == 1
    assert jit.check_user_info(np.ones(1, np.float32), "float32", layout) == 1
    assert jit.check_user_info(np.ones(8, np.complex64), "complex64", layout) == 8
    assert jit.check_user_info(np.ones((4, 8), np.complex64), "complex64", layout) == 32
    assert jit.check_user_info(np.ones((1, 4, 8), np.complex64), "complex64", layout) == 32
    assert jit.check_user_info(np.ones(layout, np.complex64), "complex64", layout) == 16 * 32


def test_check_user_info_rejects():
    layout = (16, 4, 8)
    with pytest.raises(TypeError, match="complex128.*complex64"):
        jit.check_user_info(np.ones(8, np.complex128), "complex64", layout)
    with pytest.raises(ValueError, match="suffix"):
        jit.check_user_info(np.ones(4, np.complex64), "complex64", layout)
    with pytest.raises(ValueError, match="suffix"):
        jit.check_user_info(np.ones((8, 4), np.complex64), "complex64", layout)
    with pytest.raises(ValueError, match="no user data was given"):
        jit.check_user_info(None, "float32", layout)
    with pytest.raises(ValueError, match="without user data"):
        jit.check_user_info(np.ones(8, np.float32), None, layout)
    with pytest.raises(ValueError, match="contiguous"):
        jit.check_user_info(np.ones((8, 16), np.complex64)[:, ::2], "complex64", layout)
    with pytest.raises(ValueError, match="aligned"):
        jit.check_user_info(np.ones(20, np.float32)[1:17].view(np.complex64), "complex64", layout)


def test_check_user_info_torch_dtype():
    torch = pytest.importorskip("torch")
    assert jit.check_user_info(torch.ones(8, dtype=torch.complex64), "complex64", (4, 8)) == 8


def test_a_division_by_zero_gives_inf_and_nan_as_on_the_gpu():
    """numba-cuda compiles callbacks with NumPy's error model: x / 0 is inf or nan, never an exception. The CPU
    compiles them the same way, so a callback means the same on both (and runs without a check per division)."""
    a, b = np.zeros((2, 3), np.float32), np.ones((3, 4), np.float32)

    def inverse(value, row, col):
        return (1.0 + row) / value

    def ratio(value, row, col):
        return value / value

    assert np.all(np.isposinf(mathpy.matmul(a, b, epilog=inverse, execution="cpu")))
    assert np.all(np.isnan(mathpy.matmul(a, b, epilog=ratio, execution="cpu")))

    def over_zero(data_out, offset, value, user_info, unused):
        data_out[offset] = value.real / user_info[0]

    x = np.ones(8, np.complex64)
    y = mathpy.fft.fft(x, epilog=mathpy.fft.Callback(over_zero, data=np.zeros(1, np.float32)), execution="cpu")
    assert np.isposinf(y[0].real) and np.all(np.isnan(y[1:].real))  # 8 / 0 and 0 / 0
