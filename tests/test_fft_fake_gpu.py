"""The GPU orchestration of the FFT API, exercised on a CPU-only machine.

A stand-in device package (host memory behind CuPy's array interface: ``.data.ptr``, ``.device.id``) plugged in
through the array package interface (:mod:`mathpy._packages`), and a stand-in cuFFT engine that executes a Transform on
raw pointers (viewing host memory at those addresses with the Transform's strides) plugged in through the engine table
(:mod:`mathpy._engines`), run the real code of ``mathpy.host.fft``: ExecutionCUDA resolution, staging copies, uploads
and downloads, output allocation on the execution stream, pointer arithmetic, the C2R scratch copy, in-place plans,
scaling, ``out=``, the stateless prepared calls, and callbacks bound for the GPU (compiled to real LTO-IR for sm_90,
user data moved to the "device"). What it cannot check (cuFFT itself, real streams) is covered by
tests/test_fft_api_gpu.py on a GPU.
"""

import contextlib
import threading
import types

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from _fake_gpu import host_view, pretend_a_gpu
from mathpy import _engines, _packages
from mathpy._errors import InvalidPlanStateError
from mathpy.host.fft import _cpu, _stateless

from _fft_reference import rand
from _tolerance import assert_fft_close


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

    def swapaxes(self, a, b):
        return FakeArray(self._a.swapaxes(a, b))

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


class FakeCuPy(_packages.ArrayPackage):
    """The device package: arrays are FakeArrays on device 0; every allocation, copy, upload, download and
    synchronisation is recorded with the stream it was ordered on."""

    name = module = "cupy"
    device_arrays = True

    def __init__(self):
        super().__init__()
        self.events, self._local = [], threading.local()  # the current stream is per thread, as in CUDA
        self.capturing = set()  # streams that pose as capturing a CUDA graph

    current = property(lambda self: getattr(self._local, "stream", 0),
                       lambda self, stream: setattr(self._local, "stream", stream))

    def is_capturing(self, device_id, stream):
        return (self.current if stream is None else stream) in self.capturing

    def owns(self, obj):
        return isinstance(obj, FakeArray)

    def describe(self, array):
        a = array._a
        return a.shape, tuple(s // a.itemsize for s in a.strides), a.dtype, 0, array.data.ptr

    def pointer(self, array):
        return array.data.ptr

    def current_stream(self, device_id):
        return self.current

    def stream_scope(self, device_id, stream):
        if stream is None or stream == self.current:
            return contextlib.nullcontext()  # as CuPy's: nothing to switch
        return self._switch(stream)

    @contextlib.contextmanager
    def _switch(self, stream):
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous

    def array(self, host):
        """A "device" copy of NumPy ``host`` (what cupy.asarray would make)."""
        return FakeArray(np.array(host))

    def transpose(self, array, axes):
        return array.transpose(axes)

    def broadcast_to(self, array, shape):
        return FakeArray(np.broadcast_to(array._a, shape))

    def contiguous(self, array):
        return FakeArray(np.ascontiguousarray(array._a))

    def astype(self, array, dtype):
        return array.astype(dtype)

    def from_dlpack(self, obj):
        return obj if isinstance(obj, FakeArray) else FakeArray(np.asarray(obj))

    def _empty(self, shape, dtype, device_id, zero):
        self.events.append(("alloc", self.current))
        return FakeArray((np.zeros if zero else np.empty)(shape, dtype))

    def _copy_into(self, destination, source):
        self.events.append(("copy", self.current))
        np.copyto(destination._a, np.asarray(source), casting="same_kind")

    def _copy_scaled(self, destination, source, factor):
        self.events.append(("copy-scaled", self.current))
        np.multiply(np.asarray(source), factor, out=destination._a, casting="same_kind")

    def _scale(self, array, factor):
        self.events.append(("scale", self.current))
        array._a *= factor

    def _to_numpy(self, array, stream):
        self.events.append(("download", stream))
        return np.array(array._a, order="A")

    def _from_numpy(self, host, device_id):
        return FakeArray(np.array(host))

    def _upload(self, destination, host):
        assert host.flags.c_contiguous and destination._a.flags.c_contiguous and host.shape == destination.shape
        self.events.append(("upload", self.current))
        destination._a[...] = host

    def _synchronize(self, stream):
        self.events.append(("sync", stream))


class FakeCUFFTEngine:
    """Executes a Transform on raw pointers the way CUFFTEngine is called (the CPU engine does the arithmetic)."""

    instances = []

    def __init__(self, transform, *, execution, prolog=None, epilog=None, allocator=None):
        assert isinstance(execution, mathpy.ExecutionCUDA) and allocator.package.name == "cupy"
        for kind, cb in (("prolog", prolog), ("epilog", epilog)):
            if cb is not None:  # what cuFFT would be given
                assert cb.ltoir[:4] and isinstance(cb.ltoir, bytes) and cb.symbol is None
                element = transform.input_dtype if kind == "prolog" else transform.output_dtype
                assert cb.cufft_type == mathpy.jit.CALLBACK_TYPES[(kind, np.dtype(element).name)]
                if cb.data is not None:  # (with check_bounds cuFFT is given the checked header's address)
                    assert cb.data.package == "cupy" and (cb.check_bounds or cb.data_ptr == cb.data.data_ptr)
        self.transform, self.stream, self.freed, self.calls = transform, allocator.stream, False, []
        self.callbacks = (prolog, epilog)  # as CUFFTEngine's: what the plan was made with
        self.lock = threading.RLock()  # as CUFFTEngine's: the API executes under it, free() takes it
        self.workspace_bytes = 1024
        self.overwrites_input = transform.fft_type == "C2R"
        self._cpu = _cpu.CPUEngine(transform, execution=mathpy.ExecutionCPU(), prolog=_host(prolog),
                                   epilog=_host(epilog))
        FakeCUFFTEngine.instances.append(self)

    def execute(self, input_ptr, output_ptr, direction, stream):
        assert isinstance(input_ptr, int) and isinstance(output_ptr, int) and isinstance(stream, int)
        if self.freed:  # as CUFFTEngine: an eviction on another thread freed it after the caller found it
            raise InvalidPlanStateError("this fake cuFFT plan was freed")
        t = self.transform
        self.calls.append((input_ptr, output_ptr, direction, stream))
        x = host_view(input_ptr, t.input_dtype, t.input_shape, t.input_strides)
        y = host_view(output_ptr, t.output_dtype, t.output_shape, t.output_strides)
        if input_ptr == output_ptr:
            x = x.copy()
        self._cpu.execute(x, y, direction, None)
        if self.overwrites_input:
            x[...] = 0  # as cuFFT's C2R may: the API must have handed over a scratch copy

    def free(self):
        with self.lock:
            self.freed = True


def _host(bound):
    if bound is None:
        return None
    data = None if bound.data is None else np.asarray(bound.data.tensor).reshape(-1)
    return types.SimpleNamespace(function=bound.function, user_info=data, kind=bound.kind,
                                 element_dtype=bound.element_dtype, check_bounds=bound.check_bounds)


@pytest.fixture
def fake_gpu(monkeypatch):
    pretend_a_gpu(monkeypatch)
    cupy = FakeCuPy()
    FakeCUFFTEngine.instances.clear()
    mfft.plan_cache_clear()
    with _packages.use(cupy, device_package_name="cupy"), _engines.use("fft", "cuda", FakeCUFFTEngine):
        yield cupy
    mfft.plan_cache_clear()  # its engines computed on host memory posing as device memory


CASES = [("fft", {}, np.complex64), ("ifft", {"n": 12, "norm": "ortho"}, np.complex128),
         ("rfft", {}, np.float32), ("irfft", {"n": 15}, np.complex64), ("hfft", {}, np.complex128),
         ("ihfft", {}, np.float64), ("fftn", {"axes": (0, 2)}, np.complex64),
         ("irfftn", {"axes": (0, 1, 2), "norm": "forward"}, np.complex128), ("rfft2", {}, np.float64),
         ("fftn", {}, np.complex64),
         # NumPy's rules on the GPU path: float16 in single precision (a float16 one-axis C2R result), integers in
         # double, repeated axes as several plans with their own lengths, s with -1
         ("fft", {}, np.float16), ("irfft", {}, np.float16), ("hfft", {"n": 9}, np.float16),
         ("rfftn", {"axes": (2, 0)}, np.int16), ("fftn", {"axes": (1, 1), "s": (3, 7)}, np.complex128),
         ("irfftn", {"axes": (0, 2, 2), "s": (-1, 4, 6)}, np.complex64),
         ("fftn", {"axes": (0, 1, 2, 0)}, np.complex64)]


@pytest.mark.parametrize("name, kwargs, dtype", CASES)
def test_device_operands(fake_gpu, name, kwargs, dtype):
    x = rand((3, 5, 8), np.float64 if np.dtype(dtype).kind in "iu" else dtype)
    x = (x * 4).astype(dtype) if np.dtype(dtype).kind in "iu" else x
    device_x = fake_gpu.array(x)
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
    view = fake_gpu.array(base)[index]
    for axis in (0, 1):
        np.testing.assert_allclose(np.asarray(mfft.fft(view, axis=axis)), np.fft.fft(base[index], axis=axis),
                                   atol=1e-3)


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="long double is double on this platform")
def test_long_double_is_refused_before_any_device_work(fake_gpu):
    x = rand((4, 8), np.float64).astype(np.clongdouble)
    events = len(fake_gpu.events)
    for call in (lambda: mfft.fft(x, execution="cuda"), lambda: mfft.FFT(x, execution="cuda")):
        with pytest.raises(TypeError, match="only on the CPU"):
            call()
    assert len(fake_gpu.events) == events and not FakeCUFFTEngine.instances  # nothing allocated, moved or planned


def test_numpy_operand_on_cuda(fake_gpu):
    x = rand((4, 32))
    y = mfft.fft(x, execution="cuda")
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, np.fft.fft(x), atol=1e-3)
    assert ("upload", 0) in fake_gpu.events and any(e[0] == "download" for e in fake_gpu.events)
    x5 = rand((2, 3, 2, 3, 4))  # decomposed into two plans, moved to the device once
    np.testing.assert_allclose(mfft.fftn(x5, execution="cuda"), np.fft.fftn(x5), atol=1e-3)
    r = rand((4, 6, 10), np.float64)
    fortran = np.asfortranarray(r)
    np.testing.assert_allclose(mfft.rfftn(fortran, axes=(0, 2), execution="cuda"), np.fft.rfftn(r, axes=(0, 2)))


def test_device_operand_on_cpu(fake_gpu):
    x = rand((4, 32))
    y = mfft.fft(fake_gpu.array(x), execution="cpu")
    assert isinstance(y, FakeArray)
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x), atol=1e-3)
    assert not FakeCUFFTEngine.instances


def test_stateful_calls_take_the_current_stream_when_they_are_made(fake_gpu):
    """issue 20: FFT resolves stream=None at every call, as torch, CuPy and nvmath-python do. The constructor's stream
    is not remembered; plan() allocates the workspace on the stream current then (its home); each execute runs, and
    allocates its result, on the stream current at that call (the one-call fast path and the general path alike);
    reset_operand does not change where later executes run."""
    x, x2 = rand((4, 32)), rand((4, 32), seed=3)
    operand = fake_gpu.array(x)
    with mfft.FFT(operand, axes=[1], stream=77) as f:
        with fake_gpu.stream_scope(0, 11):
            f.plan()
        engine = FakeCUFFTEngine.instances[-1]
        assert engine.stream == 11
        for stream, direction in ((22, None), (23, "forward"), (22, "inverse")):
            fake_gpu.events.clear()
            with fake_gpu.stream_scope(0, stream):
                y = f.execute(direction=direction)
            assert engine.calls[-1][0] == operand.data.ptr and engine.calls[-1][3] == stream
            assert fake_gpu.events == [("alloc", stream)]  # the result, in that stream's order
            expected = np.fft.ifft(x) * 32 if direction == "inverse" else np.fft.fft(x)
            np.testing.assert_allclose(np.asarray(y), expected, atol=1e-3)
        with fake_gpu.stream_scope(0, 22):
            z = f.execute(direction="inverse", stream=5)  # an explicit stream wins over the current one
        assert engine.calls[-1][2:] == (1, 5)
        np.testing.assert_allclose(np.asarray(z), np.fft.ifft(x) * 32, atol=1e-3)
        f.reset_operand(fake_gpu.array(x2), stream=55)
        w = f.execute()
        assert engine.calls[-1][3] == 0  # the current stream (55 was only the operand's)
        np.testing.assert_allclose(np.asarray(w), np.fft.fft(x2), atol=1e-3)
        f.plan(stream=33)  # planning again: a new home
        assert FakeCUFFTEngine.instances[-1].stream == 33 and engine.freed
    with pytest.raises(TypeError, match="stream must be"):
        mfft.FFT(operand, axes=[1], stream="s")  # still checked when it is given
    mfft.plan_cache_clear()
    mfft.fft(operand, stream=13)  # a stateless first call: planned and run on its stream=
    assert FakeCUFFTEngine.instances[-1].stream == 13 and FakeCUFFTEngine.instances[-1].calls[-1][3] == 13


def test_capture_refuses_what_a_graph_cannot_record_before_any_work(fake_gpu):
    """issue 20: on a capturing stream, planning (stateful, or a stateless call's first plan), a host operand with
    GPU execution, blocking=True and release_workspace=True raise StreamCaptureError naming the call and the fix,
    with nothing planned, allocated or run; a call planned before the capture is recorded on the capture stream."""
    x = rand((4, 32))
    operand = fake_gpu.array(x)
    fake_gpu.capturing.add(40)
    with fake_gpu.stream_scope(0, 40):
        with mfft.FFT(operand, axes=[1]) as f:
            with pytest.raises(mathpy.StreamCaptureError, match="FFT.plan cannot be captured.*plan before"):
                f.plan()
        with pytest.raises(mathpy.StreamCaptureError, match="call it once with the same arguments"):
            mfft.fft(operand)
        assert not FakeCUFFTEngine.instances and mfft.plan_cache_info().plans == 0
    mfft.fft(operand)  # the warm-up, outside the capture, plans and caches it
    with mfft.FFT(operand, axes=[1]) as f, mfft.FFT(x, axes=[1], execution="cuda") as host:
        f.plan()
        host.plan()
        calls = sum(len(e.calls) for e in FakeCUFFTEngine.instances)
        with fake_gpu.stream_scope(0, 40):
            fake_gpu.events.clear()
            with pytest.raises(mathpy.StreamCaptureError, match="host.*blocking='auto'"):
                host.execute()
            with pytest.raises(mathpy.StreamCaptureError, match="release_workspace"):
                f.execute(release_workspace=True)
            assert fake_gpu.events == [] and sum(len(e.calls) for e in FakeCUFFTEngine.instances) == calls
            recorded = [f.execute(), mfft.fft(operand)]
        stateless, stateful = FakeCUFFTEngine.instances[:2]
        assert stateless.calls[-1][3] == stateful.calls[-1][3] == 40
    for y in recorded:
        np.testing.assert_allclose(np.asarray(y), np.fft.fft(x), atol=1e-3)
    with mfft.FFT(operand, axes=[1], options={"blocking": True}) as f:
        f.plan()
        with fake_gpu.stream_scope(0, 40), pytest.raises(mathpy.StreamCaptureError, match="blocking"):
            f.execute()


def test_staging_copies_of_a_captured_call_live_with_the_plan(fake_gpu):
    """issue 20: a captured call that stages its input through a copy records the copy's address; where the package's
    pool would hand that memory on after the call (CuPy's), the copy is kept as long as the plan."""
    from mathpy import _streams
    x = rand((4, 8, 6)).transpose(1, 0, 2)
    view = fake_gpu.array(x)  # batch axes that fold into no one stride: staged through a copy at every execute
    with mfft.FFT(view, axes=[2]) as f:
        f.plan()
        assert not f.prepared_call.problem.direct
        engine = FakeCUFFTEngine.instances[-1]
        f.execute()
        assert engine not in _streams._graph_memory  # outside a capture the copy goes back to the pool
        fake_gpu.capturing.add(40)
        with fake_gpu.stream_scope(0, 40):
            y = f.execute()
        kept = _streams._graph_memory[engine]
        assert len(kept) == 1 and np.asarray(kept[0]).shape == x.shape
        np.testing.assert_array_equal(np.asarray(kept[0]), x)
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x), atol=1e-3)


def test_inplace_and_out_and_blocking(fake_gpu):
    x = rand((4, 32))
    operand = fake_gpu.array(x.copy())
    with mfft.FFT(operand, axes=[1], options={"inplace": True, "blocking": True}) as f:
        f.plan()
        fake_gpu.events.clear()
        assert f.execute() is operand
        engine = FakeCUFFTEngine.instances[-1]
        assert engine.calls[-1][0] == engine.calls[-1][1] == operand.data.ptr
        assert ("sync", 0) in fake_gpu.events
    np.testing.assert_allclose(np.asarray(operand), np.fft.fft(x), atol=1e-3)
    out = fake_gpu.array(np.zeros((4, 32), np.complex64))
    assert mfft.ifft(fake_gpu.array(x), out=out) is out
    np.testing.assert_allclose(np.asarray(out), np.fft.ifft(x), atol=1e-5)


def test_inplace_host_operand_on_the_gpu_is_written_back(fake_gpu):
    """A NumPy operand of an in-place FFT run on the GPU: uploaded, transformed in its device copy, downloaded into
    the caller's array (any layout), which execute() returns; a device operand on the CPU is still refused."""
    x = rand((6, 16))
    for operand in (x.copy(), np.asfortranarray(x), np.zeros((12, 16), np.complex64)[::2]):
        operand[...] = x
        with mfft.FFT(operand, axes=[1], options={"inplace": True}, execution="cuda") as f:
            f.plan()
            fake_gpu.events.clear()
            assert f.execute() is operand
            assert ("upload", 0) in fake_gpu.events and any(e[0] == "download" for e in fake_gpu.events)
        assert_fft_close(operand, np.fft.fft(x.astype(np.complex128), axis=1), np.float32, 16, "written back")
    with pytest.raises(ValueError, match="in-place FFT of an operand on a GPU runs on that GPU"):
        mfft.FFT(fake_gpu.array(x), options={"inplace": True}, execution="cpu")


def test_plan_cache_reuses_engines(fake_gpu):
    x = fake_gpu.array(rand((8, 64)))
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


def square_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * value


def test_callbacks_bound_for_the_gpu(fake_gpu):
    """Real LTO-IR compiled for sm_90; user data from the host is moved to the device, device data used in place."""
    pytest.importorskip("numba.cuda")
    x = rand((4, 32))
    window = np.hanning(32).astype(np.float32)
    filt = rand((4, 32), seed=8)
    device_filter = fake_gpu.array(filt)
    y = mfft.fft(fake_gpu.array(x), prolog=mfft.Callback(window_prolog, data=window),
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
    result = getattr(mfft, name)(fake_gpu.array(base)[index], s=s, axes=axes, norm=norm)
    assert isinstance(result, FakeArray) and result.dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(result), expected, atol=1e-3 * max(1, np.abs(expected).max()))


def test_stateless_prepared_calls(fake_gpu):
    """Repeated plain calls on a device array run the first call's prepared call: one engine for both directions,
    every stream, scaling as on the full path; an evicted engine is planned again."""
    x = rand((8, 64))
    device_x = fake_gpu.array(x)
    before = mfft.plan_cache_info()
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        np.testing.assert_allclose(np.asarray(mfft.ifft(device_x, norm="ortho")), np.fft.ifft(x, norm="ortho"),
                                   atol=1e-4)
    assert _stateless.remembered() == 2 and len(FakeCUFFTEngine.instances) == 1  # one engine, both directions
    info = mfft.plan_cache_info()
    assert (info.misses - before.misses, info.hits - before.hits) == (1, 5)  # all calls after the first: hits
    engine = FakeCUFFTEngine.instances[0]
    calls = len(engine.calls)
    mfft.fft(device_x)
    assert len(engine.calls) == calls + 1 and engine.calls[-1][0] == device_x.data.ptr
    with fake_gpu.stream_scope(0, 9):  # another current stream: the same engine, output allocated on that stream
        fake_gpu.events.clear()
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert fake_gpu.events == [("alloc", 9)] and engine.calls[-1][3] == 9
    np.testing.assert_allclose(np.asarray(mfft.fft(device_x, stream=11)), np.fft.fft(x), atol=1e-3)
    assert engine.calls[-1][3] == 11 and len(FakeCUFFTEngine.instances) == 1
    view = fake_gpu.array(rand((8, 130)))[:, ::2]  # staged through a copy: a prepared call that copies
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(mfft.fft(view)), np.fft.fft(np.asarray(view)), atol=1e-3)
    calls = len(engine.calls)
    mfft.set_plan_cache_size(max_bytes=512)  # every engine evicted and freed: the prepared calls must not use them
    try:
        assert engine.freed
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert len(engine.calls) == calls and len(FakeCUFFTEngine.instances) == 3
    finally:
        mfft.set_plan_cache_size(max_bytes=1 << 30)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_stateless_c2r_scales_its_input_copy(fake_gpu, norm):
    """cuFFT's C2R overwrites its input, so a device operand is copied first: a repeated stateless call copies it,
    scaled by the norm's factor in the same pass, and never scales the result; the operand is left as it was."""
    x = rand((6, 9), np.complex64)
    device_x = fake_gpu.array(x)
    for _ in range(3):
        fake_gpu.events.clear()
        y = mfft.irfft(device_x, n=16, norm=norm)
        np.testing.assert_allclose(np.asarray(y), np.fft.irfft(x, n=16, norm=norm), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(device_x), x)
    scaled = norm != "forward"  # (forward: the inverse's factor is 1, nothing to scale)
    assert fake_gpu.events == [("alloc", 0), ("copy-scaled" if scaled else "copy", 0), ("alloc", 0)]
    assert _stateless.remembered() == 1


def test_c2r_with_an_epilog_scales_the_result(fake_gpu):
    """With a callback the norm's factor is applied after the epilog, as documented: the copy is plain."""
    pytest.importorskip("numba.cuda")
    x = rand((4, 9), np.complex64)
    for _ in range(2):
        fake_gpu.events.clear()
        y = mfft.irfft(fake_gpu.array(x), n=16, epilog=square_epilog)
        reference = np.fft.irfft(x, n=16, norm="forward") ** 2 / 16  # unnormalised, squared, then the 1/n
        np.testing.assert_allclose(np.asarray(y), reference, rtol=1e-4, atol=1e-4)
        assert ("scale", 0) in fake_gpu.events and ("copy-scaled", 0) not in fake_gpu.events


class _LockThatLetsAnEvictionIn:
    """An engine lock that, once armed, first lets another thread clear the plan cache (evicting and freeing every
    engine): what may happen between a prepared call's cache lookup and its execution."""

    armed = False

    def __init__(self):
        self._lock = threading.RLock()

    def __enter__(self):
        if _LockThatLetsAnEvictionIn.armed:
            _LockThatLetsAnEvictionIn.armed = False
            evict = threading.Thread(target=mfft.plan_cache_clear)
            evict.start()
            evict.join()
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


class RacedEngine(FakeCUFFTEngine):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lock = _LockThatLetsAnEvictionIn()


def test_stateless_hit_on_an_engine_freed_meanwhile_plans_again(fake_gpu):
    """A prepared call on device memory finds its engine with one cache lookup and runs it under the engine's lock;
    when another thread evicted and freed the engine in between, the call plans again and its result is right."""
    x = rand((8, 64))
    device_x = fake_gpu.array(x)
    with _engines.use("fft", "cuda", RacedEngine):
        mfft.fft(device_x)
        before = mfft.plan_cache_info()
        for _ in range(2):
            np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert mfft.plan_cache_info().hits - before.hits == 2 and len(FakeCUFFTEngine.instances) == 1
        first = FakeCUFFTEngine.instances[0]
        _LockThatLetsAnEvictionIn.armed = True
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert first.freed and len(FakeCUFFTEngine.instances) == 2 and not _LockThatLetsAnEvictionIn.armed
        assert len(first.calls) == 3  # it never ran freed
        np.testing.assert_allclose(np.asarray(mfft.fft(device_x)), np.fft.fft(x), atol=1e-3)
        assert len(FakeCUFFTEngine.instances) == 2 and len(FakeCUFFTEngine.instances[1].calls) == 2


SCALE = np.complex64(2)


def scaled_filter(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset] * SCALE


def test_stateless_callback_calls_see_new_data_and_new_globals(fake_gpu):
    """fft(x, epilog=Callback(f, data=filt)) with device user data reuses its prepared call (no new compile, plan or
    hash of the function); new contents of the data are seen (read in place), and a rebound global the callback
    reads makes a new compile and plan, whose result uses the new value."""
    pytest.importorskip("numba.cuda")
    global SCALE
    x, filt = rand((4, 32)), rand((4, 32), seed=4)
    device_x, device_filt = fake_gpu.array(x), fake_gpu.array(filt)
    for _ in range(3):
        y = mfft.fft(device_x, epilog=mfft.Callback(scaled_filter, data=device_filt))
        np.testing.assert_allclose(np.asarray(y), np.fft.fft(x) * filt * 2, atol=1e-3)
    assert len(FakeCUFFTEngine.instances) == 1 and _stateless.remembered() == 1
    device_filt._a[...] = filt * 3  # new contents, same memory
    y = mfft.fft(device_x, epilog=mfft.Callback(scaled_filter, data=device_filt))
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x) * filt * 6, atol=1e-3)
    assert len(FakeCUFFTEngine.instances) == 1
    SCALE = np.complex64(5)
    try:
        y = mfft.fft(device_x, epilog=mfft.Callback(scaled_filter, data=device_filt))
        np.testing.assert_allclose(np.asarray(y), np.fft.fft(x) * filt * 15, atol=1e-3)
        assert len(FakeCUFFTEngine.instances) == 2  # a new compile, a new plan
    finally:
        SCALE = np.complex64(2)
    host_filt = rand((4, 32), seed=6)  # host user data on a GPU call: copied at every call, never reused
    y = mfft.fft(device_x, epilog=mfft.Callback(scaled_filter, data=host_filt))
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x) * host_filt * 2, atol=1e-3)
    host_filt *= 2
    y = mfft.fft(device_x, epilog=mfft.Callback(scaled_filter, data=host_filt))
    np.testing.assert_allclose(np.asarray(y), np.fft.fft(x) * host_filt * 2, atol=1e-3)


def test_one_plan_serves_many_threads_and_streams(fake_gpu):
    """16 threads, each on its own stream, call the stateless fft on 4 sizes: one engine per size, the plan cache
    hits on all but the first calls, nothing is evicted, every result is right."""
    sizes = [16, 32, 64, 128]
    inputs = {n: rand((4, n), seed=n) for n in sizes}
    device = {n: fake_gpu.array(inputs[n]) for n in sizes}
    errors = []
    before = mfft.plan_cache_info()

    def work(stream):
        try:
            for _ in range(5):
                for n in sizes:
                    with fake_gpu.stream_scope(0, stream):
                        y = mfft.fft(device[n])
                    np.testing.assert_allclose(np.asarray(y), np.fft.fft(inputs[n]), atol=1e-3)
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(100 + i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    info = mfft.plan_cache_info()
    misses, hits = info.misses - before.misses, info.hits - before.hits
    assert misses == len(sizes) and info.evictions == before.evictions and hits == 16 * 5 * len(sizes) - len(sizes)
    assert len(FakeCUFFTEngine.instances) == len(sizes)
    streams = {call[3] for engine in FakeCUFFTEngine.instances for call in engine.calls}
    assert streams == set(range(100, 116))


def test_stateful_fast_path_follows_reset_and_free(fake_gpu):
    x, x2 = rand((4, 32)), rand((4, 32), seed=5)
    f = mfft.FFT(fake_gpu.array(x), axes=[1])
    with pytest.raises(mathpy.InvalidPlanStateError, match="before plan"):
        f.execute()
    f.plan()
    np.testing.assert_allclose(np.asarray(f.execute()), np.fft.fft(x), atol=1e-3)
    f.reset_operand(fake_gpu.array(x2))
    np.testing.assert_allclose(np.asarray(f.execute()), np.fft.fft(x2), atol=1e-3)
    f.free()
    with pytest.raises(mathpy.InvalidPlanStateError, match="freed"):
        f.execute()


def test_repeated_checked_calls_still_read_their_records(fake_gpu, monkeypatch):
    """A stateless call with check_bounds reads its callbacks' error records after every execution, the first one's
    and the remembered calls' alike (a remembered call is bound without callbacks: the engine's say it is checked)."""
    pytest.importorskip("numba.cuda")
    from mathpy.host.fft import _call
    reads = []
    monkeypatch.setattr(_call, "raise_recorded", lambda callbacks, device_id, stream: reads.append(len(callbacks)))
    x = fake_gpu.array(rand((4, 32)))
    window = fake_gpu.array(np.hanning(32).astype(np.float32))
    options = mfft.FFTOptions(check_bounds=True)
    for _ in range(3):
        mfft.fft(x, prolog=mfft.Callback(window_prolog, data=window), options=options)
    assert _stateless.remembered() == 1 and len(reads) == 3
