"""The GPU code of compiled callbacks, executed on the host (tests/_host_callback.py): the cuFFT-typed wrapper passes
the element's real and imaginary parts, the offset and the user data to the user's function in the right places, for
every element type and for user data of several dtypes; and it agrees with the CPU engine's numba-compiled callbacks.
float16 user data compiles to PTX conversions, which only a GPU runs (tests/test_fft_callback_semantics.py)."""

import numpy as np
import pytest

from mathpy import jit

from _host_callback import HostCallback

ELEMENTS = ["complex64", "complex128", "float32", "float64"]


def scale_store(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def scale_load(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset]


def store_parts(data_out, offset, value, user_info, unused):
    """Distinguishes the two fields: (re, im) is stored as (re + 1, 2 im)."""
    data_out[offset] = value.real + 1 + 2j * value.imag


def _values(dtype, count, seed):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(count)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(count)
    return values.astype(dtype)


def _user_data(dtype, count):
    rng = np.random.default_rng(7)
    if dtype == "bool":
        return rng.random(count) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 100, count).astype(dtype)
    return _values(dtype, count, 8)


@pytest.mark.parametrize("element", ["complex64", "complex128"])
def test_epilog_receives_real_and_imaginary_parts_in_place(element):
    cb = HostCallback(store_parts, "epilog", element)
    out = np.zeros(5, element)
    cb(out, 3, 1.5 - 7j, None)
    np.testing.assert_array_equal(out, np.array([0, 0, 0, 2.5 - 14j, 0], element))


@pytest.mark.parametrize("element", ELEMENTS)
def test_epilog_matches_the_cpu_engine(element):
    info = _user_data("float32", 8)
    values = _values(element, 8, 1)
    cb = HostCallback(scale_store, "epilog", element, "float32")
    gpu_code = np.zeros(8, element)
    for offset in (5, 0, 7, 2):
        cb(gpu_code, offset, values[offset], info)
    expected = np.zeros(8, element)
    offsets = np.array([5, 0, 7, 2])
    jit.apply_epilog_cpu(scale_store, expected, offsets, values[offsets], info)
    np.testing.assert_array_equal(gpu_code, expected)
    assert gpu_code[5] == (values[5] * np.float32(info[5])).astype(element)


@pytest.mark.parametrize("element", ELEMENTS)
def test_prolog_matches_the_cpu_engine(element):
    data, info = _values(element, 8, 2), _user_data("float32", 8)
    cb = HostCallback(scale_load, "prolog", element, "float32")
    loaded = np.array([cb(data, k, info) for k in range(8)], element)
    np.testing.assert_array_equal(loaded, jit.apply_prolog_cpu(scale_load, data, np.arange(8), info))
    np.testing.assert_array_equal(loaded, (data * info).astype(element))


@pytest.mark.parametrize("user_dtype", ["bool", "int8", "uint8", "int32", "uint32", "int64", "float64",
                                        "complex64", "complex128"])
def test_user_data_of_every_kind_is_read_at_its_offset(user_dtype):
    element = "complex128" if user_dtype == "complex128" else "complex64"
    data, info = _values(element, 16, 3), _user_data(user_dtype, 16)
    load = HostCallback(scale_load, "prolog", element, user_dtype)
    store = HostCallback(scale_store, "epilog", element, user_dtype)
    out = np.zeros(16, element)
    for k in (0, 1, 9, 15):
        expected = (data[k] * info[k]).astype(element)
        np.testing.assert_allclose(load(data, k, info), expected, rtol=4 * np.finfo(element).eps)
        store(out, k, data[k], info)
        np.testing.assert_allclose(out[k], expected, rtol=4 * np.finfo(element).eps)
    untouched = np.ones(16, bool)
    untouched[[0, 1, 9, 15]] = False
    assert not out[untouched].any()
