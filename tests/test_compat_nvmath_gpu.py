"""nvmath-python programs that need a GPU, through ``mathpy.compat.nvmath``: LTO-IR callbacks compiled with
``compile_prolog`` / ``compile_epilog`` and passed as ``{"ltoir": ..., "data": pointer}`` or ``DeviceCallable``,
explicit streams, host operands executed on the GPU, float8 on cuBLASLt. Compared with NumPy.

Run on a GPU machine: ``PYTHONPATH=. python -m pytest -m gpu tests/test_compat_nvmath_gpu.py -q``.
"""

import math

import numpy as np
import pytest

import mathpy
import mathpy.compat.nvmath as nvmath
from _tolerance import assert_within, matmul_bound

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy") if mathpy.cuda_is_available() else None


def _rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _close(actual, expected, n, dtype=np.complex64):
    expected = np.asarray(expected)
    eps = np.finfo(np.dtype(dtype)).eps
    tolerance = 8 * eps * max(math.log2(max(n, 2)), 1) * max(float(np.max(np.abs(expected))), 1.0)
    error = float(np.max(np.abs(np.asarray(actual) - expected)))
    assert error <= tolerance, f"max error {error:.3g} > {tolerance:.3g}"


def _prolog_scale(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset]


def _epilog_double(data_out, offset, value, user_info, unused):
    data_out[offset] = value * np.float32(2)


def test_lto_ir_callbacks_as_dict_and_device_callable():
    x = _rand((8, 64), np.complex64)
    window = np.hanning(64).astype(np.float32)
    a = cupy.asarray(x)
    user = cupy.asarray(np.tile(window, (8, 1)))
    prolog = nvmath.fft.compile_prolog(_prolog_scale, "complex64", "float32")
    epilog = nvmath.fft.compile_epilog(_epilog_double, "complex64", "float32")
    r = nvmath.fft.fft(a, axes=[1], prolog={"ltoir": prolog, "data": user.data.ptr},
                       epilog=nvmath.fft.DeviceCallable(ltoir=epilog))
    _close(cupy.asnumpy(r), 2 * np.fft.fft(x * window, axis=1), 64)
    with nvmath.fft.FFT(a, axes=[1]) as f:
        f.plan(prolog=nvmath.fft.DeviceCallable(ltoir=prolog, data=user.data.ptr))
        _close(cupy.asnumpy(f.execute()), np.fft.fft(x * window, axis=1), 64)


def test_streams_on_functions_and_the_stateful_fft():
    s = cupy.cuda.Stream()
    with s:
        a = cupy.asarray(_rand((16, 32), np.complex64))
    r = nvmath.fft.fft(a, stream=s)
    s.synchronize()
    _close(cupy.asnumpy(r), np.fft.fftn(cupy.asnumpy(a)), 512)
    with nvmath.fft.FFT(a, stream=s) as f:
        f.plan(stream=s)
        r = f.execute(stream=s)
        s.synchronize()
    _close(cupy.asnumpy(r), np.fft.fftn(cupy.asnumpy(a)), 512)


def test_numpy_operand_executed_on_the_gpu():
    x = _rand((8, 8, 8), np.complex128)
    r = nvmath.fft.fft(x, execution="cuda")
    assert isinstance(r, np.ndarray)
    _close(r, np.fft.fftn(x), 512, np.complex128)
    with nvmath.fft.FFT(x, execution=nvmath.fft.ExecutionCUDA(device_id=0)) as f:
        f.plan()
        _close(f.execute(direction="inverse"), np.fft.ifftn(x) * 512, 512, np.complex128)


def test_repeated_stateless_calls_reuse_mathpys_plan_cache():
    a = cupy.asarray(_rand((8, 1024), np.complex64))
    nvmath.fft.fft(a, axes=[1])
    before = mathpy.fft.plan_cache_info()
    for _ in range(5):
        nvmath.fft.fft(a, axes=[1])
    after = mathpy.fft.plan_cache_info()
    assert after.misses == before.misses


def test_matmul_numpy_operands_run_on_the_gpu_and_come_back():
    a, b = _rand((64, 32), np.float32), _rand((32, 16), np.float32)
    r = nvmath.linalg.advanced.matmul(a, b, options={"device_id": 0})
    assert isinstance(r, np.ndarray)
    np.testing.assert_allclose(r, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_float8_on_cublaslt_with_scales():
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 needs compute capability 8.9")
    rng = np.random.default_rng(3)
    a = torch.tensor(rng.integers(-4, 5, (64, 32)) / 4, dtype=torch.float32).to(torch.float8_e4m3fn).cuda()
    b = torch.tensor(rng.integers(-4, 5, (16, 32)) / 4, dtype=torch.float32).to(torch.float8_e4m3fn).cuda().T
    r = nvmath.linalg.advanced.matmul(a, b, quantization_scales={"a": 2.0, "b": 0.5},
                                      options={"result_type": nvmath.CudaDataType.CUDA_R_32F})
    ref = a.float().cpu().numpy().astype(np.float64) @ b.float().cpu().numpy()
    np.testing.assert_allclose(r.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["C", "F"])
def test_inplace_numpy_fft_with_cuda_execution(layout):
    """nvmath-python's example 08: a NumPy array transformed in place with execution="cuda" (copied to the GPU,
    transformed by cuFFT, copied back into the same array), forward then inverse."""
    a = _rand((16, 32, 8), np.complex64)
    a = np.asfortranarray(a) if layout == "F" else a
    original = a.astype(np.complex128)
    b = nvmath.fft.fft(a, axes=(0, 1), options={"inplace": True}, execution="cuda")
    assert b is a
    _close(a, np.fft.fftn(original, axes=(0, 1)), 512)
    c = nvmath.fft.ifft(b, axes=(0, 1), options={"inplace": True}, execution="cuda")
    assert c is a
    _close(a, original * 512, 512)


def test_direction_none_and_reset_operand_without_an_operand_on_the_gpu():
    """nvmath-python's examples 14-18: ``direction=None`` and ``reset_operand(stream=...)`` with CuPy operands."""
    x = cupy.asarray(_rand((8, 64), np.complex64))
    _close(cupy.asnumpy(nvmath.fft.fft(x, axes=(1,), direction=None)), np.fft.fft(cupy.asnumpy(x), axis=1), 64)
    stream = cupy.cuda.Stream()
    with nvmath.fft.FFT(x, axes=(1,), stream=stream) as f:
        f.plan(stream=stream)
        f.execute(stream=stream)
        f.reset_operand(stream=stream)
        with pytest.raises(RuntimeError, match="released"):
            f.execute(stream=stream)
        f.reset_operand(x, stream=stream)
        y = f.execute(direction=None, stream=stream)
        stream.synchronize()
    _close(cupy.asnumpy(y), np.fft.fft(cupy.asnumpy(x), axis=1), 64)


def test_matmul_reset_operands_positionally_on_the_gpu():
    """nvmath-python's example 05: ``mm.reset_operands(c, d)`` with CuPy operands."""
    a, b, c, d = (cupy.asarray(_rand((32, 32), np.float32, seed)) for seed in range(4))
    with nvmath.linalg.advanced.Matmul(a, b) as mm:
        mm.plan()
        mm.execute()
        mm.reset_operands(c, d)
        r = mm.execute()
    c_host, d_host = cupy.asnumpy(c), cupy.asnumpy(d)
    assert_within(cupy.asnumpy(r), c_host.astype(np.float64) @ d_host, matmul_bound(c_host, d_host, np.float32),
                  "after reset_operands(c, d)")
