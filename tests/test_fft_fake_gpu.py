"""The GPU orchestration of the FFT API, exercised on a CPU-only machine.

A stand-in for CuPy (host memory behind CuPy's interface: ``.data.ptr``, ``.device.id``, ``get``/``set``, streams as
context managers) and a stand-in cuFFT engine that executes a Transform on raw pointers (viewing host memory at those
addresses with the Transform's strides) run the real code of ``mathpy.host.fft``: ExecutionCUDA resolution, staging
copies, uploads and downloads, output allocation on the execution stream, pointer arithmetic, the C2R scratch copy,
in-place plans, scaling, ``out=``, and callbacks bound for the GPU (compiled to real LTO-IR for sm_90, user data moved
to the "device"). What it cannot check (cuFFT itself, real streams) is covered by tests/test_fft_api_gpu.py on a GPU.
"""

import ctypes
import sys
import types

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from mathpy import _cuda
from mathpy.host.fft import _cpu, _plan

from _fft_reference import rand


class FakeArray:
    """A CuPy-like array in host memory."""

    __module__ = "cupy"

    def __init__(self, array):
        self._a = array

    shape = property(lambda self: self._a.shape)
    strides = property(lambda self: self._a.strides)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    flags = property(lambda self: self._a.flags)
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0]))
    device = property(lambda self: types.SimpleNamespace(id=0))

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)

    def transpose(self, *axes):
        return FakeArray(self._a.transpose(*axes))

    def astype(self, dtype):
        return FakeArray(self._a.astype(dtype))

    def conj(self):
        return FakeArray(self._a.conj())

    def __getitem__(self, index):
        return FakeArray(self._a[index])

    def __setitem__(self, index, value):
        self._a[index] = value._a if isinstance(value, FakeArray) else value

    def __imul__(self, other):
        self._a *= other
        return self

    def get(self, stream=None, order="C"):
        FakeCupy.events.append(("download", getattr(stream, "ptr", None)))
        return np.array(self._a, order=order)

    def set(self, array, stream=None):
        assert isinstance(array, np.ndarray) and array.flags.c_contiguous and self._a.flags.c_contiguous
        assert array.shape == self._a.shape and array.dtype == self._a.dtype
        FakeCupy.events.append(("upload", getattr(stream, "ptr", None)))
        self._a[...] = array


class FakeStream:
    current = 0

    def __init__(self, ptr=0):
        self.ptr = ptr

    def __enter__(self):
        self._previous, FakeStream.current = FakeStream.current, self.ptr
        return self

    def __exit__(self, *exc):
        FakeStream.current = self._previous

    def synchronize(self):
        FakeCupy.events.append(("sync", self.ptr))


class FakeDevice:
    def __init__(self, device_id=0):
        assert device_id == 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def synchronize(self):
        pass


class FakeCupy(types.ModuleType):
    events = []

    def __init__(self):
        super().__init__("cupy")
        self.ndarray = FakeArray
        self.cuda = types.SimpleNamespace(Device=FakeDevice, ExternalStream=FakeStream,
                                          Stream=types.SimpleNamespace(null=FakeStream(0)),
                                          get_current_stream=lambda: FakeStream(FakeStream.current))
        self.fft = types.SimpleNamespace(fftshift=lambda x, axes=None: FakeArray(np.fft.fftshift(x._a, axes)),
                                         ifftshift=lambda x, axes=None: FakeArray(np.fft.ifftshift(x._a, axes)))

    def _alloc(self, fn, shape, dtype):
        FakeCupy.events.append(("alloc", FakeStream.current))
        return FakeArray(fn(shape, dtype))

    def empty(self, shape, dtype=np.float64):
        return self._alloc(np.empty, shape, dtype)

    def zeros(self, shape, dtype=np.float64):
        return self._alloc(np.zeros, shape, dtype)

    def asarray(self, array):
        return array if isinstance(array, FakeArray) else FakeArray(np.array(array))

    def copyto(self, destination, source):
        FakeCupy.events.append(("copy", FakeStream.current))
        np.copyto(destination._a, np.asarray(source))

    asnumpy = staticmethod(lambda array: np.array(array._a))


def host_view(pointer, shape, strides, dtype):
    """The host memory at ``pointer`` seen with element ``strides`` (what cuFFT would address)."""
    dtype = np.dtype(dtype)
    span = 1 + sum((e - 1) * s for e, s in zip(shape, strides))
    buffer = (ctypes.c_char * (span * dtype.itemsize)).from_address(pointer)
    flat = np.frombuffer(buffer, dtype=dtype, count=span)
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * dtype.itemsize for s in strides))


class FakeCUFFTEngine:
    """Executes a Transform on raw pointers the way CUFFTEngine is called (the CPU engine does the arithmetic)."""

    instances = []

    def __init__(self, transform, *, execution, prolog=None, epilog=None, package=None, stream=None):
        assert isinstance(execution, mathpy.ExecutionCUDA) and package == "cupy"
        for kind, cb in (("prolog", prolog), ("epilog", epilog)):
            if cb is not None:  # what cuFFT would be given
                assert cb.ltoir[:4] and isinstance(cb.ltoir, bytes) and cb.symbol is None
                element = transform.input_dtype if kind == "prolog" else transform.output_dtype
                assert cb.cufft_type == mathpy.jit.CALLBACK_TYPES[(kind, np.dtype(element).name)]
                if cb.data is not None:
                    assert cb.data.package == "cupy" and cb.data_ptr == cb.data.data_ptr
        self.transform, self.stream, self.freed, self.calls = transform, stream, False, []
        self.workspace_bytes = 1024
        self.overwrites_input = transform.kind == "C2R"
        self._cpu = _cpu.CPUEngine(transform, execution=mathpy.ExecutionCPU(), prolog=_host(prolog),
                                   epilog=_host(epilog))
        FakeCUFFTEngine.instances.append(self)

    def execute(self, input_ptr, output_ptr, direction, stream):
        assert isinstance(input_ptr, int) and isinstance(output_ptr, int) and isinstance(stream, int)
        t = self.transform
        self.calls.append((input_ptr, output_ptr, direction, stream))
        x = host_view(input_ptr, t.input_shape, t.input_strides, t.input_dtype)
        y = host_view(output_ptr, t.output_shape, t.output_strides, t.output_dtype)
        if input_ptr == output_ptr:
            x = x.copy()
        self._cpu.execute(x, y, direction, None)
        if self.overwrites_input:
            x[...] = 0  # as cuFFT's C2R may: the API must have handed over a scratch copy

    def free(self):
        self.freed = True


def _host(bound):
    if bound is None:
        return None
    data = None if bound.data is None else np.asarray(bound.data.tensor).reshape(-1)
    return types.SimpleNamespace(function=bound.function, user_info=data, kind=bound.kind,
                                 element_dtype=bound.element_dtype)


@pytest.fixture
def fake_gpu(monkeypatch):
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(_cuda, "require_device", lambda device_id=0: None)
    monkeypatch.setattr(_cuda, "is_available", lambda: True)
    monkeypatch.setattr(_cuda, "compute_capability", lambda device_id=0: (9, 0))
    real_make = _plan._make_engine

    def make(transform, execution, prolog, epilog, package, stream):
        if isinstance(execution, mathpy.ExecutionCUDA):
            return FakeCUFFTEngine(transform, execution=execution, prolog=prolog, epilog=epilog, package=package,
                                   stream=stream)
        return real_make(transform, execution, prolog, epilog, package, stream)

    monkeypatch.setattr(_plan, "_make_engine", make)
    _reset()
    FakeCupy.events.clear()
    FakeCUFFTEngine.instances.clear()
    FakeStream.current = 0
    yield cupy
    _reset()


def _reset():
    mfft.plan_cache_clear()
    _plan._prepared.clear()
    _plan._device_allocator.cache_clear()


CASES = [("fft", {}, np.complex64), ("ifft", {"n": 12, "norm": "ortho"}, np.complex128),
         ("rfft", {}, np.float32), ("irfft", {"n": 15}, np.complex64), ("hfft", {}, np.complex128),
         ("ihfft", {}, np.float64), ("fftn", {"axes": (0, 2)}, np.complex64),
         ("irfftn", {"axes": (0, 1, 2), "norm": "forward"}, np.complex128), ("rfft2", {}, np.float64),
         ("fftn", {}, np.complex64)]


@pytest.mark.parametrize("name, kwargs, dtype", CASES)
def test_device_operands(fake_gpu, name, kwargs, dtype):
    x = rand((3, 5, 8), dtype)
    device_x = fake_gpu.asarray(x)
    before = x.copy()
    result = getattr(mfft, name)(device_x, **kwargs)
    assert isinstance(result, FakeArray)
    expected = getattr(np.fft, name)(x, **kwargs)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    np.testing.assert_allclose(np.asarray(result), expected, atol=1e-3 * max(1, np.abs(expected).max()))
    np.testing.assert_array_equal(np.asarray(device_x), before)  # C2R ran on a scratch copy
    assert FakeCUFFTEngine.instances, "the CUDA engine was not used"


@pytest.mark.parametrize("index", [(slice(None), slice(None, None, 2)), (slice(None, None, -1), slice(None)),
                                   (slice(None), slice(None, None, -2))])
def test_strided_device_operands(fake_gpu, index):
    base = rand((6, 16))
    view = fake_gpu.asarray(base)[index]
    for axis in (0, 1):
        np.testing.assert_allclose(np.asarray(mfft.fft(view, axis=axis)), np.fft.fft(base[index], axis=axis),
                                   atol=1e-3)


def test_numpy_operand_on_cuda(fake_gpu):
    x = rand((4, 32))
    y = mfft.fft(x, execution="cuda")
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, np.fft.fft(x), atol=1e-3)
    assert ("upload", 0) in FakeCupy.events and any(e[0] == "download" for e in FakeCupy.events)
    x5 = rand((2, 3, 2, 3, 4))  # decomposed into two plans, moved to the device once
    np.testing.assert_allclose(mfft.fftn(x5, execution="cuda"), np.fft.fftn(x5), atol=1e-3)
    r = rand((4, 6, 10), np.float64)
    fortran = np.asfortranarray(r)
    np.testing.assert_allclose(mfft.rfftn(fortran, axes=(0, 2), execution="cuda"), np.fft.rfftn(r, axes=(0, 2)))


def test_device_operand_on_cpu(fake_gpu):
    x = rand((4, 32))
    y = mfft.fft(fake_gpu.asarray(x), execution="cpu")
    assert isinstance(y, FakeArray)
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x), atol=1e-3)
    assert not FakeCUFFTEngine.instances


def test_stateful_stream_and_pointers(fake_gpu):
    x = rand((4, 32))
    operand = fake_gpu.asarray(x)
    with mfft.FFT(operand, axes=[1], stream=77) as f:
        f.plan()
        engine = FakeCUFFTEngine.instances[-1]
        assert engine.stream == 77  # the workspace is allocated on the plan's stream
        FakeCupy.events.clear()
        y = f.execute()
        assert engine.calls[-1][0] == operand.data.ptr and engine.calls[-1][3] == 77
        assert ("alloc", 77) in FakeCupy.events  # the output is allocated in the execution stream's order
        z = f.execute(direction="inverse", stream=FakeStream(5))
        assert engine.calls[-1][2:] == (1, 5)
        x2 = rand((4, 32), seed=3)
        f.reset_operand(fake_gpu.asarray(x2))
        w = f.execute()
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x), atol=1e-3)
    np.testing.assert_allclose(np.asarray(z), np.fft.ifft(x) * 32, atol=1e-3)
    np.testing.assert_allclose(np.asarray(w), np.fft.fft(x2), atol=1e-3)
    assert engine.freed


def test_inplace_and_out_and_blocking(fake_gpu):
    x = rand((4, 32))
    operand = fake_gpu.asarray(x.copy())
    with mfft.FFT(operand, axes=[1], options={"inplace": True, "blocking": True}) as f:
        f.plan()
        FakeCupy.events.clear()
        assert f.execute() is operand
        engine = FakeCUFFTEngine.instances[-1]
        assert engine.calls[-1][0] == engine.calls[-1][1] == operand.data.ptr
        assert ("sync", 0) in FakeCupy.events
    np.testing.assert_allclose(np.asarray(operand), np.fft.fft(x), atol=1e-3)
    out = fake_gpu.zeros((4, 32), np.complex64)
    assert mfft.ifft(fake_gpu.asarray(x), out=out) is out
    np.testing.assert_allclose(np.asarray(out), np.fft.ifft(x), atol=1e-5)


def test_plan_cache_reuses_engines(fake_gpu):
    x = fake_gpu.asarray(rand((8, 64)))
    for _ in range(5):
        mfft.fft(x)
    assert len(FakeCUFFTEngine.instances) == 1
    assert mfft.plan_cache_info().plans == 1 and mfft.plan_cache_info().bytes == 1024
    mfft.set_plan_cache_size(max_bytes=512)  # the workspace no longer fits: evicted and freed
    try:
        assert FakeCUFFTEngine.instances[0].freed and mfft.plan_cache_info().plans == 0
    finally:
        mfft.set_plan_cache_size(max_bytes=1 << 30)


def window_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 32]


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def test_callbacks_bound_for_the_gpu(fake_gpu):
    """Real LTO-IR compiled for sm_90; user data from the host is moved to the device, device data used in place."""
    pytest.importorskip("numba.cuda")
    x = rand((4, 32))
    window = np.hanning(32).astype(np.float32)
    filt = rand((4, 32), seed=8)
    device_filter = fake_gpu.asarray(filt)
    y = mfft.fft(fake_gpu.asarray(x), prolog=mfft.Callback(window_prolog, data=window),
                 epilog=mfft.Callback(filter_epilog, data=device_filter))
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x * window) * filt, atol=1e-3)
    engine = FakeCUFFTEngine.instances[-1]
    assert engine._cpu.epilog.user_info.ctypes.data == device_filter.data.ptr  # no copy of device user data
    y = mfft.fft(x, execution="cuda", epilog=mfft.Callback(filter_epilog, data=filt))  # host data: copied
    np.testing.assert_allclose(y, np.fft.fft(x) * filt, atol=1e-3)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), steps=st.data(),
       name=st.sampled_from(["fftn", "ifftn", "rfftn", "irfftn"]), dtype=st.sampled_from([np.complex64, np.float64]),
       norm=st.sampled_from([None, "ortho", "forward"]), data=st.data())
def test_layouts_property(fake_gpu, shape, steps, name, dtype, norm, data):
    """Random shapes, strides (negative too), axes and s through the device path, against NumPy."""
    ndim = len(shape)
    step = [steps.draw(st.sampled_from([1, 2, -1])) for _ in shape]
    real = name == "rfftn"
    base_dtype = (np.float32 if dtype == np.complex64 else np.float64) if real else dtype
    base = rand(tuple(n * abs(s) for n, s in zip(shape, step)), base_dtype)
    index = tuple(slice(None, None, s) for s in step)
    axes = tuple(data.draw(st.permutations(range(ndim)))[:data.draw(st.integers(1, ndim))])
    s = data.draw(st.one_of(st.none(), st.lists(st.integers(1, 8), min_size=len(axes), max_size=len(axes))))
    if name == "irfftn" and s is None and base[index].shape[axes[-1]] == 1:
        s = [base[index].shape[a] for a in axes]
        s[-1] = 1
    expected = getattr(np.fft, name)(base[index], s=s, axes=axes, norm=norm)
    result = getattr(mfft, name)(fake_gpu.asarray(base)[index], s=s, axes=axes, norm=norm)
    assert isinstance(result, FakeArray) and result.dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(result), expected, atol=1e-3 * max(1, np.abs(expected).max()))


def test_stateless_fast_path(fake_gpu, monkeypatch):
    """Repeated plain calls on a device array run a prepared recipe; results, streams, scaling and eviction behave as
    on the general path."""
    from mathpy.host.fft import _functions
    monkeypatch.setattr(_functions, "_single_gpu", True)
    x = rand((8, 64))
    device_x = fake_gpu.asarray(x)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        np.testing.assert_allclose(np.asarray(mfft.ifft(device_x, norm="ortho")), np.fft.ifft(x, norm="ortho"),
                                   atol=1e-4)
    assert len(_plan._fast_recipes) == 2 and len(FakeCUFFTEngine.instances) == 1  # one engine, both directions
    engine = FakeCUFFTEngine.instances[0]
    calls = len(engine.calls)
    mfft.fft(device_x)
    assert len(engine.calls) == calls + 1 and engine.calls[-1][0] == device_x.data.ptr
    with FakeStream(9):  # another current stream: another recipe, output allocated on that stream
        FakeCupy.events.clear()
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert ("alloc", 9) in FakeCupy.events and FakeCUFFTEngine.instances[-1].calls[-1][3] == 9
    view = fake_gpu.asarray(rand((8, 130)))[:, ::2]  # staged through a copy: the general path each time
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(mfft.fft(view)), np.fft.fft(np.asarray(view)), atol=1e-3)
    mfft.set_plan_cache_size(max_bytes=512)  # every engine evicted and freed: the recipes must not use them
    try:
        assert engine.freed
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert len(engine.calls) == calls + 1 and len(FakeCUFFTEngine.instances) == 4
    finally:
        mfft.set_plan_cache_size(max_bytes=1 << 30)


def test_stateful_fast_path_follows_reset_and_free(fake_gpu):
    x, x2 = rand((4, 32)), rand((4, 32), seed=5)
    f = mfft.FFT(fake_gpu.asarray(x), axes=[1])
    with pytest.raises(mathpy.InvalidPlanStateError, match="before plan"):
        f.execute()
    f.plan()
    np.testing.assert_allclose(np.asarray(f.execute()), np.fft.fft(x), atol=1e-3)
    f.reset_operand(fake_gpu.asarray(x2))
    np.testing.assert_allclose(np.asarray(f.execute()), np.fft.fft(x2), atol=1e-3)
    f.free()
    with pytest.raises(mathpy.InvalidPlanStateError, match="freed"):
        f.execute()
