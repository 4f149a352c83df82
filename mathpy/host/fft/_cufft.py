"""The cuFFT engine: one :class:`~mathpy.host.fft._layout.Transform` planned once with cufftXtMakePlanMany and executed
on raw device pointers.

What it does, in order (:class:`CUFFTEngine`):

1. ``cufftCreate``; for each callback ``cufftXtSetJITCallback`` with its LTO-IR and a host array of one device pointer
   (the user data); both buffers stay referenced until ``cufftXtMakePlanMany`` returns, because cuFFT reads them when
   it plans (a freed buffer gives CUFFT_INTERNAL_ERROR).
2. ``cufftSetAutoAllocation(0)``, then ``cufftXtMakePlanMany`` with the Transform's own layouts (n, embed, stride,
   dist, batch from :func:`~mathpy.host.fft._layout.cufft_params`, 64-bit arguments).
3. The workspace comes from the operand package's stream-ordered allocator (CuPy's or torch's pool) as a uint8 array
   and is given to ``cufftSetWorkArea``.

``execute(input_ptr, output_ptr, direction, stream)`` calls ``cufftSetStream`` only when the stream changed and then
``cufftXtExec``: a few prebuilt ctypes calls. When the stream changes, the new stream first waits (a CUDA event, no
host sync) for the executes queued on the previous one, because they share the workspace; so a plan shared between
threads or streams stays correct. Python-side, one engine must not be executed by two threads at the same time
(the API holds a lock per engine). Batch axes that one plan cannot fold into a single distance (only
without callbacks) are covered by a short loop of executes at precomputed pointer offsets.

Rules the engine enforces (errors are raised before anything is allocated):

- Half precision (float16) needs every transform length to be a power of two (cuFFT supports no other fp16 sizes),
  a unit-stride real side for R2C (input) and C2R (output), and cannot take callbacks (cuFFT has no fp16 callback
  types). Complex half is two float16 per element; strides are in elements of the array's own type.
- Callbacks must match the transform's element types: the prolog loads the input's type (real for R2C), the epilog
  stores the output's type (real for C2R).
- cuFFT overwrites the input of a C2R transform (``overwrites_input``): the API hands it a scratch copy when the
  caller's array must survive.
"""

import ctypes
import math
import threading
import time
import warnings
import weakref

import numpy as np

from ... import _cuda, _operands
from ..._errors import CUDALibraryError, InvalidPlanStateError, UnsupportedLayoutError
from ..._log import logger
from ...bindings import cufft
from ...jit._spec import CALLBACK_TYPES
from ._callback import span
from ._layout import Transform, cufft_params

__all__ = ["CUFFTEngine", "live_handles"]

_live_handles = [0]  # cuFFT handles this process created and has not destroyed yet (leak tests read it)


def live_handles():
    """How many cuFFT handles made by mathpy in this process are alive (created, not yet destroyed)."""
    return _live_handles[0]


_exec = _set_stream = None  # unchecked ctypes functions, made on first use


def _hot_functions():
    global _exec, _set_stream
    if _exec is None:
        _set_stream = cufft.unchecked("cufftSetStream")
        _exec = cufft.unchecked("cufftXtExec")
    return _exec, _set_stream


class _Resources:
    """What an engine owns on the device: the cuFFT handle and the workspace array. The finalizer holds this small
    object, not the engine."""

    __slots__ = ("handle", "workspace", "device_id", "stream", "alloc_stream", "event", "__weakref__")

    def __init__(self, device_id):
        self.handle, self.workspace, self.device_id, self.stream, self.alloc_stream = None, None, device_id, None, None
        self.event = None  # orders executes on different streams (they share the workspace)


def _release(resources, warn):
    """Destroy the handle and drop the workspace. Called by free() (errors raise) or the finalizer (errors warn)."""
    handle, workspace, event = resources.handle, resources.workspace, resources.event
    resources.handle = resources.workspace = resources.event = None
    try:
        if handle is not None or workspace is not None:
            with _cuda.device_scope(resources.device_id):
                if handle is not None:
                    _live_handles[0] -= 1
                    cufft.lib.cufftDestroy(handle)
                if event is not None:
                    _runtime_call("cudaEventDestroy", event)
                if workspace is not None and resources.stream not in (None, resources.alloc_stream):
                    # the pool may hand the workspace to other work on the stream it was allocated on: wait for the
                    # last execute on another stream first
                    _synchronize(resources.stream)
    except Exception as e:
        if not warn:
            raise
        warnings.warn(f"mathpy: releasing a cuFFT plan failed: {e}", RuntimeWarning, stacklevel=2)
    finally:
        del workspace


def _runtime_call(name, *args):
    from cuda.bindings import runtime
    status, *values = getattr(runtime, name)(*args)
    if int(status):
        raise CUDALibraryError("cudart", name, int(status), getattr(status, "name", str(status)))
    return values[0] if values else None


def _synchronize(stream):
    """Wait for ``stream`` (before the pool may reuse a workspace on the stream it was allocated on)."""
    _runtime_call("cudaStreamSynchronize", stream)


def _order_after(resources, previous, stream):
    """Make ``stream`` wait for the work queued so far on ``previous`` (an event, no host sync)."""
    from cuda.bindings import runtime
    if resources.event is None:
        resources.event = _runtime_call("cudaEventCreateWithFlags", runtime.cudaEventDisableTiming)
    _runtime_call("cudaEventRecord", resources.event, previous)
    _runtime_call("cudaStreamWaitEvent", stream, resources.event, 0)


class CUFFTEngine:
    """One :class:`Transform` planned on cuFFT for one device (see the module docstring).

    Parameters: ``transform``; ``execution`` an ExecutionCUDA (its ``device_id``; None means device 0); ``prolog`` /
    ``epilog`` None or a BoundCallback (``.ltoir``, ``.symbol``, ``.cufft_type``, ``.data_ptr``); ``package`` the
    array package whose allocator provides the workspace ("cupy" / "torch"; None: whichever is installed);
    ``stream`` the raw stream the workspace is allocated on (None: the package's current stream).
    """

    def __init__(self, transform, *, execution, prolog=None, epilog=None, package=None, stream=None):
        if not isinstance(transform, Transform):
            raise TypeError(f"transform must be a Transform, not {type(transform).__name__}")
        device_id = getattr(execution, "device_id", None)
        device_id = 0 if device_id is None else device_id
        _cuda.require_device(device_id)
        callbacks = [(kind, cb) for kind, cb in (("prolog", prolog), ("epilog", epilog)) if cb is not None]
        _check_precision(transform, bool(callbacks))
        for kind, cb in callbacks:
            _check_callback(transform, kind, cb)
        package = package if package in ("cupy", "torch") else _operands.gpu_array_package()
        self._package = package
        self.lock = threading.RLock()  # the API serialises executes on it; free() takes it too (re-entrant: a
        # garbage-collected FFT may return its borrowed engine, and the cache free it, inside an execute on this thread)
        parts = _split(transform)
        if parts is not None:
            self._init_parts(transform, parts, execution, device_id, prolog, epilog, package, stream)
            return
        params = cufft_params(transform, allow_loops=not callbacks)  # UnsupportedLayoutError if it cannot
        _check_half_strides(transform, params)
        _check_loop_alignment(transform, params)

        offsets = _loop_offsets(params, transform)
        execute, set_stream = _hot_functions()  # resolves the library (LibraryNotFoundError) before planning
        self.transform, self.device_id, self.params = transform, device_id, params
        self.overwrites_input = transform.kind == "C2R"
        self._callbacks = (prolog, epilog)  # keeps user data alive as long as the plan may run
        self._parts = None
        resources = _Resources(device_id)
        start = time.perf_counter()
        with _cuda.device_scope(device_id):
            handle = ctypes.c_int()
            cufft.lib.cufftCreate(ctypes.byref(handle))
            resources.handle = handle.value
            _live_handles[0] += 1
            try:
                workspace_bytes = _plan(resources.handle, transform, params, callbacks)
                if workspace_bytes:
                    workspace = _operands.empty(package, (workspace_bytes,), np.uint8, device_id, stream)
                    resources.workspace = workspace
                    resources.alloc_stream = stream
                    cufft.lib.cufftSetWorkArea(resources.handle, _operands.wrap_operand(workspace).data_ptr)
            except BaseException:
                _release(resources, warn=True)
                raise
        self.workspace_bytes = workspace_bytes
        self._resources = resources
        self._handle = ctypes.c_int(resources.handle)
        self._stream = None
        self._scoped = _cuda.device_count() > 1
        self._offsets, self._exec, self._set_stream = offsets, execute, set_stream
        # cuFFT needs the real side of R2C/C2R aligned to the complex element (else CUFFT_INVALID_VALUE at exec):
        # misaligned pointers take a staged path; the check costs one AND on the hot path
        self._align = 2 * transform.precision.itemsize - 1 if transform.kind != "C2C" else 0
        self._finalizer = weakref.finalize(self, _release, resources, True)
        executes = len(self._offsets) if self._offsets else 1
        logger.debug("cuFFT plan %s %s n=%s batch=%d%s on cuda:%d: %.1f ms, workspace %d bytes%s%s", transform.kind,
                     transform.precision, params.n, params.batch, f" x {executes} executes" if executes > 1 else "",
                     device_id, (time.perf_counter() - start) * 1e3, workspace_bytes,
                     ", prolog" if prolog is not None else "", ", epilog" if epilog is not None else "")

    def execute(self, input_ptr, output_ptr, direction, stream):
        """Run the transform from device address ``input_ptr`` to ``output_ptr`` on raw ``stream`` (None: 0, the
        default stream). ``direction`` -1 forward, +1 inverse (C2C only; R2C is forward, C2R inverse).
        Unnormalised."""
        if self._scoped:
            with _cuda.device_scope(self.device_id):
                return self._execute(input_ptr, output_ptr, direction, stream)
        return self._execute(input_ptr, output_ptr, direction, stream)  # one GPU: no device switch

    def executor(self):
        """A function with :meth:`execute`'s arguments for a caller that repeats one call shape (the API's prepared
        recipes): one ctypes call when the stream is the current one and the pointers are aligned, else
        :meth:`execute` (stream change, misalignment, freed plan, looped or two-part plans, several GPUs)."""
        if self._parts is not None or self._scoped or self._offsets is not None or self._handle is None:
            return self.execute
        exec_function, align, handle, execute = self._exec, self._align, self._handle, self.execute

        def run(input_ptr, output_ptr, direction, stream):
            if stream != self._stream or self._handle is None or (input_ptr | output_ptr) & align:
                return execute(input_ptr, output_ptr, direction, stream)
            status = exec_function(handle, input_ptr, output_ptr, direction)
            if status:
                cufft.check("cufftXtExec", status)
        return run

    def _execute(self, input_ptr, output_ptr, direction, stream):
        handle = self._handle
        if handle is None:
            raise InvalidPlanStateError("this cuFFT plan was freed; create a new one")
        if (input_ptr | output_ptr) & self._align:
            return self._execute_misaligned(input_ptr, output_ptr, direction, stream)
        if stream != self._stream:
            self._change_stream(handle, stream)
        if self._offsets is None:
            status = self._exec(handle, input_ptr, output_ptr, direction)
            if status:
                cufft.check("cufftXtExec", status)
        else:
            self._execute_loop(handle, input_ptr, output_ptr, direction)

    def _execute_misaligned(self, input_ptr, output_ptr, direction, stream):
        """R2C/C2R with a real pointer not aligned to the complex element size: run on aligned copies of the spans
        the layouts touch (device-to-device, ordered on ``stream``), then copy the output span back. The output span
        is copied in first so the bytes between strided elements come back unchanged."""
        t = self.transform
        in_span = _span_bytes(t.input_shape, t.input_strides, _element_size(t, "input"))
        out_span = _span_bytes(t.output_shape, t.output_strides, _element_size(t, "output"))
        raw_stream = stream or 0
        keep = []  # the staging buffers live until the copies are queued; the pool frees them in stream order

        def stage(ptr, nbytes):
            buffer = _operands.empty(self._package, (nbytes,), np.uint8, self.device_id, stream)
            keep.append(buffer)
            staged = _operands.wrap_operand(buffer).data_ptr
            _memcpy(staged, ptr, nbytes, raw_stream)
            return staged

        if input_ptr == output_ptr:
            nbytes = max(in_span, out_span)
            staged = stage(input_ptr, nbytes)
            self._execute(staged, staged, direction, stream)
            _memcpy(output_ptr, staged, nbytes, raw_stream)
            return
        staged_in = stage(input_ptr, in_span) if input_ptr & self._align else input_ptr
        staged_out = stage(output_ptr, out_span) if output_ptr & self._align else output_ptr
        self._execute(staged_in, staged_out, direction, stream)
        if staged_out != output_ptr:
            _memcpy(output_ptr, staged_out, out_span, raw_stream)

    def _init_parts(self, transform, parts, execution, device_id, prolog, epilog, package, stream):
        """A multi-axis R2C/C2R whose halved axis has length 1, as two plans (see :func:`_split`)."""
        first_t, second_t = parts
        first = CUFFTEngine(first_t, execution=execution, prolog=prolog, package=package, stream=stream)
        try:
            second = CUFFTEngine(second_t, execution=execution, epilog=epilog, package=package, stream=stream)
        except BaseException:
            first.free()
            raise
        self.transform, self.device_id, self.params = transform, device_id, second.params
        self.overwrites_input = transform.kind == "C2R"
        self._callbacks = (prolog, epilog)
        self._parts = (first, second)
        self.workspace_bytes = first.workspace_bytes + second.workspace_bytes
        self._stream = None
        self._handle = "parts"  # not None while live
        self.execute = self._execute_parts
        logger.debug("cuFFT %s with a halved axis of length 1 over axes %s: planned as %s then %s", transform.kind,
                     transform.axes, first_t.kind, second_t.kind)

    def _execute_parts(self, input_ptr, output_ptr, direction, stream):
        if self._handle is None:
            raise InvalidPlanStateError("this cuFFT plan was freed; create a new one")
        first, second = self._parts
        if self.transform.kind == "C2R":  # inverse C2C over the other axes in place (C2R may overwrite its input)
            first.execute(input_ptr, input_ptr, 1, stream)
            second.execute(input_ptr, output_ptr, 1, stream)
        else:                             # R2C of length 1, then forward C2C over the other axes in place
            first.execute(input_ptr, output_ptr, -1, stream)
            second.execute(output_ptr, output_ptr, -1, stream)

    def _change_stream(self, handle, stream):
        previous = self._stream
        if previous is not None and self._resources.workspace is not None:
            _order_after(self._resources, previous, stream)  # executes share the workspace: one after the other
        status = self._set_stream(handle, stream)
        if status:
            cufft.check("cufftSetStream", status)
        self._stream = self._resources.stream = stream

    def _execute_loop(self, handle, input_ptr, output_ptr, direction):
        for input_offset, output_offset in self._offsets:
            status = self._exec(handle, input_ptr + input_offset, output_ptr + output_offset, direction)
            if status:
                cufft.check("cufftXtExec", status)

    def free(self):
        """Destroy the cuFFT handle and drop the workspace now. Idempotent. Waits for an execute running on another
        thread under :attr:`lock` (the plan cache may evict an engine the stateless fast path is executing)."""
        with self.lock:
            self._free()

    def _free(self):
        if self._handle is None:
            return
        self._handle = None
        if self._parts is not None:
            for part in self._parts:
                part.free()
            return
        self._finalizer.detach()
        _release(self._resources, warn=False)

    @property
    def freed(self):
        return self._handle is None

    def __repr__(self):
        t = self.transform
        state = "freed" if self._handle is None else f"workspace {self.workspace_bytes} B"
        return f"CUFFTEngine({t.kind} {t.precision} n={self.params.n} batch={self.params.batch}, cuda:{self.device_id}, {state})"


def _split(transform):
    """None, or the two Transforms that compute an R2C/C2R over several axes whose halved (last) axis has length 1.

    cuFFT 12 drops a trailing length-1 dimension of a multi-dimensional R2C/C2R plan and then halves the dimension
    before it (measured: C2R n=(3, 1) returned a length-3 Hermitian C2R along the first axis). A real transform of
    length 1 is exact as: C2R = inverse C2C over the other axes (in place on the input) then a length-1 C2R;
    R2C = a length-1 R2C, then a forward C2C over the other axes in place on the output."""
    if transform.kind == "C2C" or transform.n[-1] != 1:
        return None
    from ._layout import _effective_axes
    effective, _ = _effective_axes(transform.input_shape, transform.axes, transform.kind)
    if len(effective) < 2:
        return None
    t, last, others = transform, transform.axes[-1], tuple(transform.axes[:-1])
    if t.kind == "C2R":
        return (Transform("C2C", t.precision, t.input_shape, t.input_strides, t.input_shape, t.input_strides, others),
                Transform("C2R", t.precision, t.input_shape, t.input_strides, t.output_shape, t.output_strides,
                          (last,)))
    return (Transform("R2C", t.precision, t.input_shape, t.input_strides, t.output_shape, t.output_strides, (last,)),
            Transform("C2C", t.precision, t.output_shape, t.output_strides, t.output_shape, t.output_strides, others))


def _check_loop_alignment(transform, params):
    """Looped executes of an R2C/C2R must start every real-side pointer on a complex element (cuFFT's rule)."""
    if transform.kind == "C2C" or not params.loops:
        return
    real = 1 if transform.kind == "R2C" else 2
    if any(loop[real] % 2 for loop in params.loops):
        raise UnsupportedLayoutError(
            f"{transform.kind} over axes {transform.axes} with real strides "
            f"{transform.input_strides if transform.kind == 'R2C' else transform.output_strides} needs executes at "
            f"real offsets that are not a whole number of complex elements, which cuFFT refuses: copy to "
            f"engine_layout(...) first")


def _element_size(transform, side):
    real = (transform.kind == "R2C") if side == "input" else (transform.kind == "C2R")
    return transform.precision.itemsize * (1 if real else 2)


def _span_bytes(shape, strides, itemsize):
    """Bytes from the first element of a (positive-stride) layout to the end of its last one."""
    return span(shape, strides) * itemsize


def _memcpy(destination, source, nbytes, stream):
    from cuda.bindings import runtime
    _runtime_call("cudaMemcpyAsync", destination, source, nbytes, runtime.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                  stream)


def _check_precision(transform, has_callbacks):
    if transform.precision != np.float16:
        return
    bad = [n for n in transform.n if n & (n - 1)]
    if bad:
        raise ValueError(f"cuFFT supports half precision (float16) only for power-of-two lengths; got n={transform.n}. "
                         f"Use float32 (or pad to a power of two)")
    if has_callbacks:
        raise ValueError("cuFFT has no half-precision (float16) callbacks; use float32 with prolog/epilog")
    if transform.kind != "C2C" and transform.n[-1] == 1:
        raise ValueError("half-precision R2C/C2R transforms of length 1 are wrong in cuFFT 12.0 (a known CUDA 13.0 "
                         "issue); use float32")


def _check_half_strides(transform, params):
    """cuFFT's half-precision R2C reads only unit-stride real input, and its C2R writes only unit-stride real output."""
    if transform.precision != np.float16:
        return
    if transform.kind == "R2C" and params.istride != 1:
        raise UnsupportedLayoutError(f"cuFFT's half-precision R2C needs a unit-stride real input along axis "
                                     f"{transform.axes[-1]}; got stride {params.istride}: copy it to C order first")
    if transform.kind == "C2R" and params.ostride != 1:
        raise UnsupportedLayoutError(f"cuFFT's half-precision C2R needs a unit-stride real output along axis "
                                     f"{transform.axes[-1]}; got stride {params.ostride}")


def _check_callback(transform, kind, cb):
    element = transform.input_dtype if kind == "prolog" else transform.output_dtype
    expected = CALLBACK_TYPES[(kind, np.dtype(element).name)]
    got = _callback_type(cb)
    if got != expected:
        raise ValueError(f"the {kind} was compiled for cuFFT callback type {got}, but a {transform.kind} "
                         f"{transform.precision} transform {'loads' if kind == 'prolog' else 'stores'} {element} "
                         f"elements (type {expected}): compile it for {element}")
    if not getattr(cb, "ltoir", None):
        raise ValueError(f"the {kind} has no LTO-IR to give cuFFT")


def _callback_type(cb):
    for name in ("cufft_type", "cufft_callback_type"):
        value = getattr(cb, name, None)
        if value is not None:
            return int(value)
    return None


def _data_ptr(cb):
    value = getattr(cb, "data_ptr", None)
    if value is None and getattr(cb, "data", None) is not None:
        value = cb.data.data_ptr
    return int(value or 0)


def _plan(handle, transform, params, callbacks):
    """Set the callbacks and make the plan on ``handle``; returns the workspace size in bytes."""
    alive = []  # LTO-IR buffers and caller_info arrays: cuFFT reads them in cufftXtMakePlanMany
    for kind, cb in callbacks:
        ltoir = bytes(cb.ltoir)
        buffer = ctypes.create_string_buffer(ltoir, len(ltoir))
        caller_info = (ctypes.c_void_p * 1)(_data_ptr(cb) or None)
        symbol = getattr(cb, "symbol", None)
        symbol = symbol.encode() if isinstance(symbol, str) else symbol
        alive += [buffer, caller_info, symbol]
        cufft.set_jit_callback(handle, symbol, buffer, len(ltoir), _callback_type(cb), caller_info)
    cufft.lib.cufftSetAutoAllocation(handle, 0)
    LongLongs = ctypes.c_longlong * params.rank
    precision = transform.precision.name
    in_type = cufft.data_type(precision, transform.kind != "R2C")
    out_type = cufft.data_type(precision, transform.kind != "C2R")
    exec_type = cufft.data_type(precision, True)
    work = ctypes.c_size_t()
    if _basic_layout(transform.kind, params):
        # NULL embeds: cuFFT's basic layout, as torch and CuPy plan contiguous data; cuFFT then picks the kernels of
        # its plain batched transforms (explicit embeds may select slower strided ones)
        inembed = onembed = None
    else:
        inembed, onembed = LongLongs(*params.inembed), LongLongs(*params.onembed)
    cufft.lib.cufftXtMakePlanMany(handle, params.rank, LongLongs(*params.n), inembed, params.istride, params.idist,
                                  in_type, onembed, params.ostride, params.odist, out_type, params.batch,
                                  ctypes.byref(work), exec_type)
    del alive
    return work.value


def _basic_layout(kind, params):
    """Whether ``params`` describe cuFFT's basic (NULL-embed) layout: unit inner stride, dense rows, and batches
    ``prod(dims)`` apart, on both sides (for R2C/C2R the complex side's last dimension is n//2+1)."""
    n = params.n
    halved = n[:-1] + (n[-1] // 2 + 1,)
    in_dims = halved if kind == "C2R" else n
    out_dims = halved if kind == "R2C" else n
    return (params.istride == 1 and params.ostride == 1 and tuple(params.inembed[1:]) == tuple(in_dims[1:])
            and tuple(params.onembed[1:]) == tuple(out_dims[1:])
            and (params.batch == 1 or (params.idist == math.prod(in_dims) and params.odist == math.prod(out_dims))))


def _loop_offsets(params, transform):
    """None for one execute per call, else [(input byte offset, output byte offset)] of every execute."""
    if not params.loops:
        return None
    in_size, out_size = _element_size(transform, "input"), _element_size(transform, "output")
    offsets = [(0, 0)]
    for count, in_step, out_step in params.loops:
        offsets = [(i + k * in_step * in_size, o + k * out_step * out_size) for i, o in offsets for k in range(count)]
    assert len(offsets) == math.prod(c for c, _, _ in params.loops)
    return offsets
