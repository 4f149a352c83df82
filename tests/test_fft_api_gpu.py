"""The FFT host API on a GPU: CuPy and torch-CUDA results against NumPy, execution spaces and data movement, streams,
callbacks end to end on cuFFT, the plan cache's workspace bound, and 10,000 plan/execute/free cycles without leaks.

Every test carries the ``gpu`` marker (skipped cleanly without a device); run with ``pytest -m gpu tests/test_fft_api_gpu.py``.
"""

import gc
import os

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft

from _fft_reference import rand

pytestmark = pytest.mark.gpu


def tol(dtype):
    return 1e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


class GPU:
    """One GPU array package: make arrays, read them back, streams, synchronize."""

    def __init__(self, name):
        self.name = name
        if name == "cupy":
            self.mod = pytest.importorskip("cupy")
        else:
            self.mod = pytest.importorskip("torch")
            if not self.mod.cuda.is_available():
                pytest.skip("torch has no CUDA here")

    def asarray(self, array):
        if self.name == "cupy":
            return self.mod.asarray(array)
        return self.mod.from_numpy(np.ascontiguousarray(array)).cuda()

    def to_numpy(self, array):
        if self.name == "cupy":
            assert isinstance(array, self.mod.ndarray), type(array)
            return self.mod.asnumpy(array)
        assert isinstance(array, self.mod.Tensor) and array.is_cuda, type(array)
        return array.cpu().numpy()

    def stream(self):
        return self.mod.cuda.Stream() if self.name == "cupy" else self.mod.cuda.Stream()

    def synchronize(self):
        if self.name == "cupy":
            self.mod.cuda.Device().synchronize()
        else:
            self.mod.cuda.synchronize()

    def used_bytes(self):
        """Device bytes held by live arrays of the package (not its cache)."""
        if self.name == "cupy":
            return self.mod.get_default_memory_pool().used_bytes()
        return self.mod.cuda.memory_allocated()


@pytest.fixture(params=["cupy", "torch"])
def gpu(request):
    if not mathpy.cuda_is_available():
        pytest.skip("needs a GPU")
    return GPU(request.param)


CASES = [
    ("fft", {}, np.complex64), ("ifft", {"n": 48}, np.complex128), ("rfft", {"norm": "ortho"}, np.float32),
    ("irfft", {"n": 62}, np.complex64), ("hfft", {}, np.complex128), ("ihfft", {}, np.float64),
    ("fftn", {"axes": (0, 2)}, np.complex64), ("ifftn", {"s": (4, 8, 16), "axes": (0, 1, 2)}, np.complex128),
    ("rfftn", {"axes": (1, 2)}, np.float32), ("irfftn", {"axes": (1, 2), "norm": "forward"}, np.complex64),
    ("fft2", {}, np.float64), ("rfft2", {}, np.float64), ("irfft2", {"s": (6, 9)}, np.complex128),
]


@pytest.mark.parametrize("name, kwargs, dtype", CASES)
def test_functions_match_numpy(gpu, name, kwargs, dtype):
    x = rand((5, 6, 32), dtype)
    result = getattr(mfft, name)(gpu.asarray(x), **kwargs)
    expected = getattr(np.fft, name)(x, **kwargs)
    got = gpu.to_numpy(result)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol(dtype) * max(1, np.abs(expected).max()))


def test_strided_and_batched_layouts(gpu):
    x = rand((8, 6, 40))
    views = [(slice(None), slice(None), slice(None, None, 2)), (slice(None, None, 2), slice(None), slice(None))]
    for index in views:
        view = gpu.asarray(x)[index]
        for axes in [(2,), (0,), (0, 2), (1, 2), (0, 1, 2)]:
            got = gpu.to_numpy(mfft.fftn(view, axes=axes))
            np.testing.assert_allclose(got, np.fft.fftn(x[index], axes=axes), atol=1e-3 * 40)
    if gpu.name == "cupy":  # negative strides
        view = gpu.asarray(x)[:, ::-1, ::-3]
        np.testing.assert_allclose(gpu.to_numpy(mfft.fft(view, axis=1)), np.fft.fft(x[:, ::-1, ::-3], axis=1),
                                   atol=1e-3 * 10)


def test_c2r_does_not_modify_input(gpu):
    x = gpu.asarray(rand((4, 17)))
    before = gpu.to_numpy(x).copy()
    mfft.irfft(x)
    mfft.irfftn(x)
    np.testing.assert_array_equal(gpu.to_numpy(x), before)


def test_execution_cuda_on_numpy_and_torch_cpu():
    if not mathpy.cuda_is_available():
        pytest.skip("needs a GPU")
    x = rand((16, 64))
    y = mfft.fft(x, execution="cuda")
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, np.fft.fft(x), atol=1e-3)
    with mathpy.execution_space("cuda"):
        np.testing.assert_allclose(mfft.irfft(x, n=126), np.fft.irfft(x, n=126), atol=1e-4)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x)
    y = mfft.fftn(t, execution=mathpy.ExecutionCUDA(0))
    assert isinstance(y, torch.Tensor) and y.device.type == "cpu"
    np.testing.assert_allclose(y.numpy(), np.fft.fftn(x), atol=1e-2)
    with mfft.FFT(x, execution="cuda") as f:  # stateful: host operand, GPU execution, host result
        f.plan()
        np.testing.assert_allclose(f.execute(), np.fft.fftn(x), atol=1e-2)
        x2 = rand((16, 64), seed=2)
        f.reset_operand(x2)
        np.testing.assert_allclose(f.execute(), np.fft.fftn(x2), atol=1e-2)


def test_execution_cpu_on_gpu_operand(gpu):
    x = rand((8, 32))
    y = mfft.fft(gpu.asarray(x), execution="cpu")
    np.testing.assert_allclose(gpu.to_numpy(y), np.fft.fft(x), atol=1e-3)


def test_streams(gpu):
    x = rand((64, 1024))
    stream = gpu.stream()
    operand = gpu.asarray(x)
    gpu.synchronize()  # the copy to the device ran on the current stream, the FFT runs on `stream`
    y = mfft.fft(operand, stream=stream)
    stream.synchronize()
    np.testing.assert_allclose(gpu.to_numpy(y), np.fft.fft(x), atol=1e-2)
    with mfft.FFT(operand, axes=[1]) as f:
        f.plan(stream=stream)
        y1 = f.execute(stream=stream)
        other = gpu.stream()
        y2 = f.execute(stream=other)  # one plan on two streams at once: each stream has its own workspace
        stream.synchronize()
        other.synchronize()
    np.testing.assert_allclose(gpu.to_numpy(y1), np.fft.fft(x), atol=1e-2)
    np.testing.assert_allclose(gpu.to_numpy(y2), np.fft.fft(x), atol=1e-2)


def test_inplace(gpu):
    x = rand((8, 64))
    operand = gpu.asarray(x)
    with mfft.FFT(operand, axes=[1], options={"inplace": True}) as f:
        f.plan()
        assert f.execute() is operand
    np.testing.assert_allclose(gpu.to_numpy(operand), np.fft.fft(x), atol=1e-3)


def test_out(gpu):
    x = rand((8, 64))
    out = gpu.asarray(np.zeros((8, 64), np.complex64))
    assert mfft.fft(gpu.asarray(x), out=out) is out
    np.testing.assert_allclose(gpu.to_numpy(out), np.fft.fft(x), atol=1e-3)


# --- callbacks on cuFFT --------------------------------------------------------------------------------------------

def window_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 256]


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def scale_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[0]


def test_callbacks_end_to_end(gpu):
    x = rand((32, 256))
    window = np.hanning(256).astype(np.float32)
    filt = rand((32, 256), seed=4)
    # host user data (copied to the device) and device user data (used in place)
    for data in (filt, gpu.asarray(filt)):
        y = mfft.fft(gpu.asarray(x), prolog=mfft.Callback(window_prolog, data=window),
                     epilog=mfft.Callback(filter_epilog, data=data))
        np.testing.assert_allclose(gpu.to_numpy(y), np.fft.fft(x * window) * filt, atol=1e-2)
    r = rand((32, 256), np.float64)
    spectrum = mfft.rfft(gpu.asarray(r), prolog=mfft.Callback(window_prolog, data=window.astype(np.float64)))
    np.testing.assert_allclose(gpu.to_numpy(spectrum), np.fft.rfft(r * window), atol=1e-8)
    back = mfft.irfft(spectrum, n=256, epilog=mfft.Callback(scale_epilog, data=np.float64(0.5)))
    np.testing.assert_allclose(gpu.to_numpy(back), np.fft.irfft(np.fft.rfft(r * window)) * 0.5, atol=1e-8)


def test_threads_on_their_own_streams_share_cached_plans():
    """8 threads, each on its own torch stream, call the stateless fft with and without a fused callback on 3 sizes:
    one cached plan per (size, callback), hits on every later call, every result right."""
    import threading
    torch = pytest.importorskip("torch")
    sizes = [(32, 256), (8, 2003), (4, 4096)]
    data = {s: torch.from_numpy(rand(s, seed=s[1])).cuda() for s in sizes}
    filters = {s: torch.from_numpy(rand(s, seed=s[0])).cuda() for s in sizes}
    expected = {s: np.fft.fft(data[s].cpu().numpy()) for s in sizes}
    torch.cuda.synchronize()
    mfft.plan_cache_clear()
    before, errors = mfft.plan_cache_info(), []

    def work():
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(4):
                    for s in sizes:
                        plain = mfft.fft(data[s])
                        fused = mfft.fft(data[s], epilog=mfft.Callback(filter_epilog, data=filters[s]))
                        stream.synchronize()
                        np.testing.assert_allclose(plain.cpu().numpy(), expected[s], atol=1e-2)
                        np.testing.assert_allclose(fused.cpu().numpy(), expected[s] * filters[s].cpu().numpy(),
                                                   atol=5e-2)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    info = mfft.plan_cache_info()
    calls = 8 * 4 * len(sizes) * 2
    assert info.misses - before.misses == 2 * len(sizes) and info.evictions == before.evictions
    assert info.hits - before.hits == calls - 2 * len(sizes)


def test_callbacks_with_numpy_operand_on_cuda():
    if not mathpy.cuda_is_available():
        pytest.skip("needs a GPU")
    x = rand((16, 256))
    y = mfft.fft(x, execution="cuda", epilog=mfft.Callback(scale_epilog, data=np.float32(2)))
    np.testing.assert_allclose(y, np.fft.fft(x) * 2, atol=1e-2)


def test_ltoir_callback_nvmath_style(gpu):
    from mathpy import _cuda
    x = rand((16, 256))
    filt = gpu.asarray(rand((16, 256), seed=7))
    ltoir = mfft.compile_epilog(filter_epilog, "complex64", "complex64",
                                compute_capability=_cuda.compute_capability(0))
    pointer = filt.data.ptr if gpu.name == "cupy" else filt.data_ptr()
    y = mfft.fft(gpu.asarray(x), epilog={"ltoir": ltoir, "data": pointer})
    np.testing.assert_allclose(gpu.to_numpy(y), np.fft.fft(x) * gpu.to_numpy(filt), atol=1e-2)


def test_callback_user_data_on_another_device():
    from mathpy import _cuda
    if _cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(1):
        data = cupy.ones(1, cupy.float32)
    with pytest.raises(ValueError, match="cuda:1"):
        mfft.fft(cupy.ones(8, cupy.complex64), epilog=mfft.Callback(scale_epilog, data=data))


# --- resources -----------------------------------------------------------------------------------------------------

def test_plan_cache_workspace_bound(gpu):
    mfft.plan_cache_clear()
    try:
        mfft.set_plan_cache_size(max_plans=64, max_bytes=1 << 20)
        for n in (1 << 18, 3 * 5 * 7 * 11 * 13, 1 << 20):
            mfft.fft(gpu.asarray(rand((4, n))))
            assert mfft.plan_cache_info().bytes <= 1 << 20
    finally:
        mfft.set_plan_cache_size(max_plans=64, max_bytes=1 << 30)
        mfft.plan_cache_clear()


def _rss_bytes():
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _live_handles():
    """cuFFT handles this process holds (created by mathpy, not destroyed). Global free device memory is no measure
    here: other processes (pytest-xdist workers) allocate concurrently."""
    from mathpy.host.fft._cufft import live_handles
    return live_handles()


def test_ten_thousand_plans_do_not_leak(gpu):
    x = gpu.asarray(rand((8, 1024)))
    for _ in range(50):  # warm up pools and lazy state
        with mfft.FFT(x, axes=[1]) as f:
            f.plan()
            f.execute()
    gpu.synchronize()
    gc.collect()
    used, rss, handles = gpu.used_bytes(), _rss_bytes(), _live_handles()
    for i in range(10_000):
        f = mfft.FFT(x, axes=[1])
        f.plan()
        y = f.execute()
        f.free()
        if i % 1000 == 999:
            gpu.synchronize()
    del y
    gpu.synchronize()
    gc.collect()
    assert gpu.used_bytes() <= used + (1 << 20), f"device arrays grew by {gpu.used_bytes() - used} bytes"
    assert _rss_bytes() <= rss + (64 << 20), f"host memory grew by {(_rss_bytes() - rss) >> 20} MiB"
    assert _live_handles() == handles, f"{_live_handles() - handles} cuFFT handles leaked"


@pytest.mark.parametrize("name,shape,s,axes", [
    ("irfft2", (2, 1), [3, 1], (-2, -1)),            # cuFFT dropped the length-1 halved axis: a wrong answer
    ("rfft2", (2, 1), [3, 1], (-2, -1)),
    ("rfft2", (1, 1, 1, 2), [2, 1], (-3, -4)),        # the length-1 part loops over batches: offsets stay aligned
    ("irfftn", (3, 4, 2), [3, 4, 1], (0, 1, 2)),
])
def test_halved_axis_of_length_one(gpu, name, shape, s, axes):
    x = rand(shape, np.float32 if name.startswith("rfft") else np.complex64, seed=7)
    expected = getattr(np.fft, name)(x, s=s, axes=axes)
    result = gpu.to_numpy(getattr(mfft, name)(gpu.asarray(x), s=s, axes=axes))
    assert result.shape == expected.shape
    np.testing.assert_allclose(result, expected, atol=1e-4 * max(1.0, float(np.abs(expected).max())))
