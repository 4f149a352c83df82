"""Every CUDA runtime call mathpy makes, in one module: the current device, stream synchronisation, device-to-device
copies, events that order one stream after another, and event timing.

cuFFT and cuBLASLt work on the runtime's current device and on raw ``cudaStream_t`` handles (ints; 0 is the legacy
default stream). A failed call raises :class:`~mathpy.CUDALibraryError` naming the status (``"cudaErrorInvalidValue
(1): cudart cudaMemcpyAsync failed"``). cuda-bindings is imported on first use, so importing this module needs no GPU.
"""

import contextlib
import functools

from ._errors import CUDALibraryError

__all__ = ["call", "device_scope", "bind_primary_context", "synchronize", "is_capturing", "relaxed_capture",
           "copy_host_to_device", "copy_device_to_device", "Event", "EventTimer"]


@functools.cache
def _runtime():
    from cuda.bindings import runtime
    return runtime


def call(name, *args):
    """``cudart.<name>(*args)``; its values (one value unwrapped, None without any), or CUDALibraryError."""
    status, *values = getattr(_runtime(), name)(*args)
    if int(status):
        raise CUDALibraryError("cudart", name, int(status), getattr(status, "name", str(status)))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def _driver():
    from cuda.bindings import driver
    return driver


def bind_primary_context(device_id):
    """Make ``device_id``'s primary context current on this thread when the thread has no current context; True if
    it did (the caller may then retry a launch that failed).

    A thread that has made no CUDA runtime call has none: torch's autograd device threads, or a new Python thread
    whose tensors come from torch's caching allocator. cuBLASLt and cuFFT launch some kernels through the driver, and
    there the launch fails (cuFFT says CUFFT_EXEC_FAILED) before any work is queued. Checking only after a failure
    keeps the hot path free of the check; ``cudaGetDevice`` cannot tell, since it answers 0 on such a thread."""
    try:
        driver = _driver()
        status, context = driver.cuCtxGetCurrent()
    except Exception:  # noqa: BLE001 (no driver to ask: a library mocked without a GPU; its own error is the news)
        return False
    if int(status) or int(context):
        return False
    context = _primary_context(device_id)
    (status,) = driver.cuCtxSetCurrent(context)
    if int(status):
        raise CUDALibraryError("cuda", "cuCtxSetCurrent", int(status), getattr(status, "name", str(status)))
    return True


@functools.cache
def _primary_context(device_id):
    """The device's primary context, retained once per process (the runtime, torch and CuPy share it)."""
    driver = _driver()
    status, device = driver.cuDeviceGet(device_id)
    if not int(status):
        status, context = driver.cuDevicePrimaryCtxRetain(device)
    if int(status):
        raise CUDALibraryError("cuda", "cuDevicePrimaryCtxRetain", int(status), getattr(status, "name", str(status)))
    return context


@contextlib.contextmanager
def device_scope(device_id):
    """Make ``device_id`` the runtime's current device for a block (what cuFFT and cuBLASLt run on). A call is made
    only when the device differs, so the common single-GPU path costs one cudaGetDevice."""
    current = call("cudaGetDevice")
    if current == device_id:
        yield
        return
    call("cudaSetDevice", device_id)
    try:
        yield
    finally:
        call("cudaSetDevice", current)


def synchronize(stream):
    """Wait on the host until the work queued on raw ``stream`` so far has finished."""
    call("cudaStreamSynchronize", stream)


def is_capturing(stream):
    """Whether raw ``stream`` is capturing a CUDA graph (or its capture was invalidated: work queued there would fail
    too). A legacy-stream query during another stream's global-mode capture is itself illegal: that counts as
    capturing."""
    runtime = _runtime()
    status, state = runtime.cudaStreamIsCapturing(stream)
    if status == runtime.cudaError_t.cudaErrorStreamCaptureImplicit:
        return True
    if int(status):
        raise CUDALibraryError("cudart", "cudaStreamIsCapturing", int(status), getattr(status, "name", str(status)))
    return state != runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone


@contextlib.contextmanager
def relaxed_capture():
    """This thread's stream capture mode made relaxed for a block: an allocation there (cudaMallocHost, ...) is
    legal even while a stream captures in global mode (as torch's allocator does for its own cudaMalloc)."""
    mode = call("cudaThreadExchangeStreamCaptureMode", _runtime().cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed)
    try:
        yield
    finally:
        call("cudaThreadExchangeStreamCaptureMode", mode)


def copy_host_to_device(destination, source, nbytes, stream):
    """``nbytes`` from host address ``source`` to device address ``destination`` in ``stream``'s order. From pageable
    memory the runtime stages the bytes before it returns, so ``source`` may be reused at once."""
    call("cudaMemcpyAsync", destination, source, nbytes, _runtime().cudaMemcpyKind.cudaMemcpyHostToDevice, stream)


def copy_device_to_device(destination, source, nbytes, stream):
    """Queue a copy of ``nbytes`` between device addresses on raw ``stream``."""
    kind = _runtime().cudaMemcpyKind.cudaMemcpyDeviceToDevice
    call("cudaMemcpyAsync", destination, source, nbytes, kind, stream)


class Event:
    """A CUDA event without timing, made on first use: ``order(after=previous, stream=stream)`` makes ``stream`` wait
    (on the GPU, not the host) for the work queued on ``previous`` so far. ``destroy()`` is idempotent."""

    __slots__ = ("handle",)

    def __init__(self):
        self.handle = None

    def order(self, after, stream):
        if self.handle is None:
            self.handle = call("cudaEventCreateWithFlags", _runtime().cudaEventDisableTiming)
        call("cudaEventRecord", self.handle, after)
        call("cudaStreamWaitEvent", stream, self.handle, 0)

    def destroy(self):
        handle, self.handle = self.handle, None
        if handle is not None:
            call("cudaEventDestroy", handle)


class EventTimer:
    """Two timing events measuring GPU time on a stream: ``with EventTimer() as t: t.start(s); ...;
    seconds = t.elapsed(s)`` (``elapsed`` waits for the stream to get there)."""

    def __enter__(self):
        self._start = call("cudaEventCreate")
        try:
            self._end = call("cudaEventCreate")
        except BaseException:
            call("cudaEventDestroy", self._start)
            raise
        return self

    def start(self, stream):
        call("cudaEventRecord", self._start, stream)

    def elapsed(self, stream):
        call("cudaEventRecord", self._end, stream)
        call("cudaEventSynchronize", self._end)
        return call("cudaEventElapsedTime", self._start, self._end) / 1e3

    def __exit__(self, *exc):
        for event in (self._start, self._end):
            call("cudaEventDestroy", event)
