"""mathpy.jit callbacks fused into real cuFFT plans on a GPU (cuFFT through ctypes, as benchmarks/bench_fft_callbacks.py
calls it), checked against NumPy. Skipped without a GPU, CuPy or cuFFT."""

import importlib.util
import os

import numpy as np
import pytest

from mathpy import jit

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def env():
    cp = pytest.importorskip("cupy")
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                        "bench_fft_callbacks.py")
    spec = importlib.util.spec_from_file_location("bench_fft_callbacks", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    try:
        cufft = bench.CuFFT()
    except Exception as e:  # pragma: no cover
        pytest.skip(f"cuFFT is not loadable: {e}")
    return cp, bench, cufft


def prolog_filter(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 256]


def epilog_x2(data_out, offset, value, user_info, unused):
    data_out[offset] = value * np.float32(2)


def epilog_real_filter(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_c2c_prolog_and_epilog_in_one_plan(env, dtype):
    cp, bench, cufft = env
    n, batch = 256, 64
    rng = np.random.default_rng(0)
    x_h = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(dtype)
    f_h = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    pro = jit.compile_callback(prolog_filter, "prolog", dtype, dtype)  # compute capability of the current GPU
    epi = jit.compile_callback(epilog_x2, "epilog", dtype, None)
    x, f, y = cp.asarray(x_h), cp.asarray(f_h), cp.empty((batch, n), dtype)
    handle, _ = cufft.plan("C2C", dtype, n, batch, [(pro.ltoir, pro.cufft_callback_type, f.data.ptr),
                                                    (epi.ltoir, epi.cufft_callback_type, 0)])
    try:
        cufft.execute(handle, x, y, cp.cuda.get_current_stream().ptr)
        got = cp.asnumpy(y)
    finally:
        cufft.destroy(handle)
    expected = np.fft.fft(x_h * f_h, axis=-1) * 2
    tol = 1e-5 if dtype == "complex64" else 1e-12
    assert np.max(np.abs(got - expected)) / np.max(np.abs(expected)) < tol


def test_r2c_real_prolog_and_complex_epilog(env):
    cp, bench, cufft = env
    n, batch = 128, 32

    def prolog_x3(data_in, offset, user_info, unused):
        return data_in[offset] * np.float32(3)
    rng = np.random.default_rng(1)
    x_h = rng.standard_normal((batch, n)).astype(np.float32)
    f_h = (rng.standard_normal((batch, n // 2 + 1)) + 1j).astype(np.complex64)
    pro = jit.compile_callback(prolog_x3, "prolog", "float32", None)
    epi = jit.compile_callback(epilog_real_filter, "epilog", "complex64", "complex64")
    assert (pro.cufft_callback_type, epi.cufft_callback_type) == (2, 4)
    x, f, y = cp.asarray(x_h), cp.asarray(f_h), cp.empty((batch, n // 2 + 1), np.complex64)
    handle, _ = cufft.plan("R2C", "float32", n, batch, [(pro.ltoir, pro.cufft_callback_type, 0),
                                                        (epi.ltoir, epi.cufft_callback_type, f.data.ptr)])
    try:
        cufft.execute(handle, x, y, cp.cuda.get_current_stream().ptr)
        got = cp.asnumpy(y)
    finally:
        cufft.destroy(handle)
    expected = np.fft.rfft(x_h * 3, axis=-1) * f_h
    assert np.max(np.abs(got - expected)) / np.max(np.abs(expected)) < 1e-5


def test_default_compute_capability_is_the_gpus(env):
    cp = env[0]
    cc = tuple(int(c) for c in cp.cuda.Device().compute_capability)
    assert jit.current_compute_capability() == cc
    assert jit.compile_callback(epilog_x2, "epilog", "complex64").compute_capability == cc
