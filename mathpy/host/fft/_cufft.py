"""The cuFFT engine: one :class:`~mathpy.host.fft._layout.Transform` planned once with cufftXtMakePlanMany and executed
on raw device pointers, on any stream.

What it does, in order (:class:`CUFFTEngine`):

1. ``cufftCreate``; for each callback ``cufftXtSetJITCallback`` with its LTO-IR and a host array of one device pointer
   (the user data); both buffers stay referenced until ``cufftXtMakePlanMany`` returns, because cuFFT reads them when
   it plans (a freed buffer gives CUFFT_INTERNAL_ERROR).
2. ``cufftSetAutoAllocation(0)``, then ``cufftXtMakePlanMany`` with the Transform's own layouts (n, embed, stride,
   dist, batch from :func:`~mathpy.host.fft._layout.cufft_params`, 64-bit arguments).
3. The workspace comes from ``allocator`` (a :class:`~mathpy._packages.PackageStream`: CuPy's or torch's
   stream-ordered pool, on the stream the plan was made for: its *home* stream), or from ``memory`` (a caller's
   memory manager, ``FFTOptions.allocator``; :mod:`mathpy._workspace`), and is given to ``cufftSetWorkArea``.
   :meth:`CUFFTEngine.release_workspace` gives it back until the next execute.

**One plan, every stream** (as torch runs its cached cuFFT plans): ``execute(input_ptr, output_ptr, direction,
stream)`` calls ``cufftSetStream`` when the stream changed, and on a stream other than the home one it takes a
workspace of its own from the same package's pool in that stream's order (and ``cufftSetWorkArea``s it), so that
executes on two streams never share scratch memory; on the home stream it uses the plan's workspace. cuFFT reads the
stream and work area when it launches, so setting them and executing must not interleave between threads: callers
hold :attr:`CUFFTEngine.lock` (the API does). ``free()`` takes the lock too, so a plan is never destroyed under an
execute (one that a finalizer requests inside an execute on the same thread waits for its end), and an execute on a
freed plan raises InvalidPlanStateError: the stateless calls' prepared calls rely on this instead of borrowing the
plan from the cache at every call. A plan without workspace (most small transforms) costs one ctypes call per execute
on any stream. In a CUDA graph capture the kernels read the plan's own memory and the work area they were launched
with: a foreign stream's work area is then kept with the plan (``mathpy._streams.keep_for_graph``) where the pool would
hand it on, and a capture on the home stream records the plan's workspace, so the plan must outlive the graph.
Batch axes that one plan cannot fold into a single distance (only without callbacks) are
covered by a short loop of executes at precomputed pointer offsets; an R2C/C2R execute whose real-side offset is not a
whole number of complex elements (cuFFT refuses those pointers) runs on aligned copies.

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

from ... import _cuda, _operands, _packages, _runtime
from ..._errors import CUDALibraryError, InvalidPlanStateError, UnsupportedLayoutError
from ..._log import logger
from ..._streams import keep_for_graph
from ..._workspace import WorkspaceSource
from ...bindings import compiled_entries_enabled, cufft
from ...bindings._types import cuda_data_type
from ...jit._spec import CALLBACK_TYPES
from ._callback import span
from ._layout import Transform, cufft_params

__all__ = ["CUFFTEngine", "live_handles"]

_EXEC_FAILED = 6  # CUFFT_EXEC_FAILED: also what a launch on a thread without a current context gives
_NOT_SUPPORTED = 16  # CUFFT_NOT_SUPPORTED
_live_handles = [0]  # cuFFT handles this process created and has not destroyed yet (leak tests read it)


def live_handles():
    """How many cuFFT handles made by mathpy in this process are alive (created, not yet destroyed)."""
    return _live_handles[0]


_hot = {}  # compiled entries used or not -> the hot path's unchecked functions, made on first use


def _hot_functions():
    compiled = compiled_entries_enabled()  # (read per engine: MATHPY_COMPILED_BINDINGS may change)
    found = _hot.get(compiled)
    if found is None:
        found = _hot[compiled] = tuple(cufft.unchecked(name) for name in
                                       ("cufftXtExec", "cufftSetStream", "cufftSetWorkArea"))
    return found


class _Resources:
    """What an engine owns on the device: the cuFFT handle and the home workspace. The finalizer holds this small
    object, not the engine. The workspace is used on its home stream only, so giving it back to the stream-ordered
    pool is safe whatever other streams the plan ran on."""

    __slots__ = ("handle", "workspace", "device_id", "__weakref__")

    def __init__(self, device_id):
        self.handle, self.workspace, self.device_id = None, None, device_id


def _release(resources, warn):
    """Destroy the handle and drop the workspace. Called by free() (errors raise) or the finalizer (errors warn)."""
    handle, workspace = resources.handle, resources.workspace
    resources.handle = resources.workspace = None
    try:
        if workspace is not None:
            workspace.release()
        if handle is not None:
            _live_handles[0] -= 1
            with _runtime.device_scope(resources.device_id):
                cufft.lib.cufftDestroy(handle)
    except Exception as e:
        if not warn:
            raise
        warnings.warn(f"mathpy: releasing a cuFFT plan failed: {e}", RuntimeWarning, stacklevel=2)


class CUFFTEngine:
    """One :class:`Transform` planned on cuFFT for one device (see the module docstring).

    Parameters: ``transform``; ``execution`` an ExecutionCUDA (its ``device_id``; None means device 0); ``prolog`` /
    ``epilog`` None or a BoundCallback (``.ltoir``, ``.symbol``, ``.cufft_type``, ``.data_ptr``); ``allocator`` the
    :class:`~mathpy._packages.PackageStream` whose pool provides workspaces (its stream, or the package's current
    one when it has none, is the plan's home stream; None: the device package's current stream); ``memory`` a
    caller's memory manager for the workspace instead of that pool.
    """

    def __init__(self, transform, *, execution, prolog=None, epilog=None, allocator=None, memory=None):
        if not isinstance(transform, Transform):
            raise TypeError(f"transform must be a Transform, not {type(transform).__name__}")
        device_id = getattr(execution, "device_id", None)
        device_id = 0 if device_id is None else device_id
        _cuda.require_device(device_id)
        callbacks = [(kind, cb) for kind, cb in (("prolog", prolog), ("epilog", epilog)) if cb is not None]
        _check_precision(transform, bool(callbacks))
        for kind, cb in callbacks:
            _check_callback(transform, kind, cb)
        if allocator is None:
            allocator = _packages.get(_operands.device_package()).on(device_id)
        if allocator.stream is None:
            allocator = allocator.package.on(device_id, allocator.package.current_stream(device_id))
        self._allocator, self._home = allocator, allocator.stream
        self._source = WorkspaceSource(allocator, memory, device_id)
        self.lock = threading.RLock()  # the API serialises executes on it; free() takes it too (re-entrant: a
        # garbage-collected FFT may return its borrowed engine, and the cache free it, inside an execute on this thread)
        self._busy, self._free_pending = 0, False  # an execute under way on the lock's thread; a free() it deferred
        parts = _split(transform)
        if parts is not None:
            self._init_parts(transform, parts, execution, device_id, prolog, epilog, allocator, memory)
            return
        params = cufft_params(transform, allow_loops=not callbacks)  # UnsupportedLayoutError if it cannot
        _check_half_strides(transform, params)

        offsets = _loop_offsets(params, transform)
        execute, set_stream, set_work_area = _hot_functions()  # resolves the library (LibraryNotFoundError) first
        self.transform, self.device_id, self.params = transform, device_id, params
        self.overwrites_input = transform.fft_type == "C2R"
        self._callbacks = (prolog, epilog)  # keeps user data alive as long as the plan may run
        self._parts = None
        resources = _Resources(device_id)
        start = time.perf_counter()
        home_area = 0
        with _runtime.device_scope(device_id):
            handle = ctypes.c_int()
            cufft.lib.cufftCreate(ctypes.byref(handle))
            resources.handle = handle.value
            _live_handles[0] += 1
            try:
                workspace_bytes = _plan(resources.handle, transform, params, callbacks)
                if workspace_bytes:
                    resources.workspace = self._source.take(workspace_bytes, self._home)
                    home_area = resources.workspace.pointer
                    cufft.lib.cufftSetWorkArea(resources.handle, home_area)
            except BaseException:
                _release(resources, warn=True)
                raise
        self.workspace_bytes = workspace_bytes
        self._resources = resources
        self._handle = resources.handle  # an int: ctypes and the compiled entries (bindings._compiled) take it
        self._stream = None  # the stream cuFFT was last given
        self._area, self._home_area = home_area, home_area  # the work area cuFFT was last given; the plan's own
        self._ready = None  # the stream on which a bare cufftXtExec is right (stream and work area already set)
        self._scoped = _cuda.device_count() > 1
        self._offsets, self._exec, self._set_stream, self._set_work_area = offsets, execute, set_stream, set_work_area
        # cuFFT needs the real side of R2C/C2R aligned to the complex element (else CUFFT_INVALID_VALUE at exec):
        # misaligned pointers take a staged path; the check costs one AND on the hot path
        self._align = 2 * transform.precision.itemsize - 1 if transform.fft_type != "C2C" else 0
        self._finalizer = weakref.finalize(self, _release, resources, True)
        executes = len(self._offsets) if self._offsets else 1
        logger.debug("cuFFT plan %s %s n=%s batch=%d%s on cuda:%d: %.1f ms, workspace %d bytes%s%s",
                     transform.fft_type, transform.precision, params.n, params.batch,
                     f" x {executes} executes" if executes > 1 else "", device_id, (time.perf_counter() - start) * 1e3,
                     workspace_bytes, ", prolog" if prolog is not None else "",
                     ", epilog" if epilog is not None else "")

    def execute(self, input_ptr, output_ptr, direction, stream):
        """Run the transform from device address ``input_ptr`` to ``output_ptr`` on raw ``stream`` (None: 0, the
        legacy default stream). ``direction`` -1 forward, +1 inverse (C2C only; R2C is forward, C2R inverse).
        Unnormalised. The caller holds :attr:`lock`."""
        if self._scoped:
            with _runtime.device_scope(self.device_id):
                return self._execute(input_ptr, output_ptr, direction, stream or 0)
        return self._execute(input_ptr, output_ptr, direction, stream or 0)  # one GPU: no device switch

    def executor(self):
        """A function with :meth:`execute`'s arguments for a caller that repeats one call shape (the API's prepared
        calls): one ctypes call when the stream and work area are already set for the stream and the pointers are
        aligned, else :meth:`execute` (stream change, a foreign stream with a workspace, misalignment, freed plan,
        looped or two-part plans, several GPUs)."""
        if self._parts is not None or self._scoped or self._offsets is not None or self._handle is None:
            return self.execute
        exec_function, align, handle, execute = self._exec, self._align, self._handle, self.execute

        def run(input_ptr, output_ptr, direction, stream):
            if stream != self._ready or (input_ptr | output_ptr) & align:
                return execute(input_ptr, output_ptr, direction, stream)
            self._busy += 1  # ctypes allocates the call's argument tuple: a finalizer may run there (see free)
            try:
                status = exec_function(handle, input_ptr, output_ptr, direction)
            finally:
                self._busy -= 1
                if self._free_pending and not self._busy:
                    self._free()
            if status:
                self._exec_failed(status, handle, input_ptr, output_ptr, direction)
        return run

    def _execute(self, input_ptr, output_ptr, direction, stream):
        handle = self._handle
        if handle is None:
            raise InvalidPlanStateError("this cuFFT plan was freed; create a new one")
        self._busy += 1  # allocations below may run a finalizer that frees this plan: free() waits until we are done
        try:
            self._execute_live(handle, input_ptr, output_ptr, direction, stream)
        finally:
            self._busy -= 1
            if self._free_pending and not self._busy:
                self._free()

    def _execute_live(self, handle, input_ptr, output_ptr, direction, stream):
        if (input_ptr | output_ptr) & self._align:
            return self._execute_misaligned(input_ptr, output_ptr, direction, stream)
        if stream != self._stream:
            status = self._set_stream(handle, stream)
            if status:
                cufft.check("cufftSetStream", status)
            self._stream = stream
        workspace = None
        if self.workspace_bytes:
            if stream == self._home:
                if not self._home_area:  # release_workspace() gave it back: take it again
                    self._resources.workspace = self._source.take(self.workspace_bytes, self._home)
                    self._home_area = self._resources.workspace.pointer
                area = self._home_area
            else:  # scratch of its own, from the pool in this stream's order: freed after the launch, in order
                workspace = self._source.take(self.workspace_bytes, stream)
                area = workspace.pointer
            if area != self._area:
                status = self._set_work_area(handle, area)
                if status:
                    cufft.check("cufftSetWorkArea", status)
                self._area = area
        self._ready = stream if workspace is None else None
        if self._offsets is None:
            status = self._exec(handle, input_ptr, output_ptr, direction)
            if status:
                self._exec_failed(status, handle, input_ptr, output_ptr, direction)
        else:
            self._execute_loop(handle, input_ptr, output_ptr, direction, stream)
        pooled = self._source.manager is None
        if workspace is not None and not keep_for_graph(self, self._allocator.package, self.device_id, stream,
                                                        workspace, pooled=pooled):
            workspace.release()  # the launch is queued: the pool may reuse it for later work on this stream

    def _exec_failed(self, status, handle, input_ptr, output_ptr, direction):
        """Raise for a failed cufftXtExec, unless it failed only because this thread had no current context (see
        :func:`mathpy._runtime.bind_primary_context`): then bind the device's and run it again."""
        if status == _EXEC_FAILED and _runtime.bind_primary_context(self.device_id):
            status = self._exec(handle, input_ptr, output_ptr, direction)
        if status:
            cufft.check("cufftXtExec", status)

    def release_workspace(self):
        """Give the home workspace back now (a caller's memory manager's after the work queued on the home stream);
        the next execute on the home stream takes it again."""
        with self.lock:
            if self._parts is not None:
                for part in self._parts:
                    part.release_workspace()
                return
            workspace, self._resources.workspace = self._resources.workspace, None
            self._home_area, self._ready = 0, None
            if workspace is not None:
                workspace.release()

    def _execute_misaligned(self, input_ptr, output_ptr, direction, stream):
        """R2C/C2R with a real pointer not aligned to the complex element size: run on aligned copies of the spans
        the layouts touch (device-to-device, ordered on ``stream``), then copy the output span back. The output span
        is copied in first so the bytes between strided elements come back unchanged."""
        t = self.transform
        in_span = _span_bytes(t.input_shape, t.input_strides, _element_size(t, "input"))
        out_span = _span_bytes(t.output_shape, t.output_strides, _element_size(t, "output"))
        stage = self._stager(stream)
        if input_ptr == output_ptr:
            nbytes = max(in_span, out_span)
            staged = stage(input_ptr, nbytes)
            self._execute(staged, staged, direction, stream)
            _runtime.copy_device_to_device(output_ptr, staged, nbytes, stream)
            return
        staged_in = stage(input_ptr, in_span) if input_ptr & self._align else input_ptr
        staged_out = stage(output_ptr, out_span) if output_ptr & self._align else output_ptr
        self._execute(staged_in, staged_out, direction, stream)
        if staged_out != output_ptr:
            _runtime.copy_device_to_device(output_ptr, staged_out, out_span, stream)

    def _init_parts(self, transform, parts, execution, device_id, prolog, epilog, allocator, memory):
        """A multi-axis R2C/C2R whose halved axis has length 1, as two plans (see :func:`_split`)."""
        first_t, second_t = parts
        first = CUFFTEngine(first_t, execution=execution, prolog=prolog, allocator=allocator, memory=memory)
        try:
            second = CUFFTEngine(second_t, execution=execution, epilog=epilog, allocator=allocator, memory=memory)
        except BaseException:
            first.free()
            raise
        self.transform, self.device_id, self.params = transform, device_id, second.params
        self.overwrites_input = transform.fft_type == "C2R"
        self._callbacks = (prolog, epilog)
        self._parts = (first, second)
        self.workspace_bytes = first.workspace_bytes + second.workspace_bytes
        self._handle = "parts"  # not None while live
        self.execute = self._execute_parts
        logger.debug("cuFFT %s with a halved axis of length 1 over axes %s: planned as %s then %s",
                     transform.fft_type, transform.axes, first_t.fft_type, second_t.fft_type)

    def _execute_parts(self, input_ptr, output_ptr, direction, stream):
        if self._handle is None:
            raise InvalidPlanStateError("this cuFFT plan was freed; create a new one")
        first, second = self._parts
        if self.transform.fft_type == "C2R":  # inverse C2C over the other axes in place (C2R may overwrite its input)
            first.execute(input_ptr, input_ptr, 1, stream)
            second.execute(input_ptr, output_ptr, 1, stream)
        else:                             # R2C of length 1, then forward C2C over the other axes in place
            first.execute(input_ptr, output_ptr, -1, stream)
            second.execute(output_ptr, output_ptr, -1, stream)

    def _execute_loop(self, handle, input_ptr, output_ptr, direction, stream):
        for input_offset, output_offset in self._offsets:
            ip, op = input_ptr + input_offset, output_ptr + output_offset
            if (ip | op) & self._align:
                # R2C/C2R batch steps that are not a whole number of complex elements (no plan group avoids
                # them): this execute's real side is misaligned for cuFFT, so it runs on aligned copies
                self._execute_one_staged(handle, ip, op, direction, stream)
                continue
            status = self._exec(handle, ip, op, direction)
            if status:
                self._exec_failed(status, handle, ip, op, direction)

    def _stager(self, stream):
        """``stage(ptr, nbytes)``: an aligned device copy of the ``nbytes`` at ``ptr``, queued on ``stream``. The
        staging buffers live as long as ``stage`` does (until the caller's copies are queued); the pool then frees
        them in stream order (or, in a graph capture, as long as the plan: :func:`~mathpy._streams.keep_for_graph`)."""
        queue = self._allocator.package.on(self.device_id, stream)
        keep = []

        def stage(ptr, nbytes):
            buffer = queue.empty((nbytes,), np.uint8)
            if not keep_for_graph(self, queue.package, self.device_id, stream, buffer):
                keep.append(buffer)
            staged = queue.package.pointer(buffer)
            _runtime.copy_device_to_device(staged, ptr, nbytes, stream)
            return staged
        return stage

    def _execute_one_staged(self, handle, input_ptr, output_ptr, direction, stream):
        """One execute of the plan on aligned copies of the spans it touches (device-to-device, ordered on
        ``stream``); the output span is copied in first so the bytes between strided elements come back unchanged."""
        t, params = self.transform, self.params
        in_span = _plan_span(params, "input", t.fft_type) * _element_size(t, "input")
        out_span = _plan_span(params, "output", t.fft_type) * _element_size(t, "output")
        stage = self._stager(stream)
        nbytes = max(in_span, out_span) if input_ptr == output_ptr else out_span
        if input_ptr == output_ptr:
            staged_in = staged_out = stage(input_ptr, nbytes)
        else:
            staged_in, staged_out = stage(input_ptr, in_span), stage(output_ptr, out_span)
        status = self._exec(handle, staged_in, staged_out, direction)
        if status:
            self._exec_failed(status, handle, staged_in, staged_out, direction)
        _runtime.copy_device_to_device(output_ptr, staged_out, nbytes, stream)

    def free(self):
        """Destroy the cuFFT handle and drop the workspace now. Idempotent. Waits for an execute running on another
        thread under :attr:`lock`; called from inside an execute on this thread (a finalizer that ran there), it
        frees when that execute ends. An execute on a freed plan raises InvalidPlanStateError."""
        with self.lock:
            if self._busy:
                self._free_pending = True
                return
            self._free()

    def _free(self):
        if self._handle is None:
            return
        self._handle = None
        self._ready = None  # the executor's one-call path runs only on a live plan
        self._callbacks = None  # the user data: an evicted plan may stay referenced, it must not hold the data
        if self._parts is not None:
            for part in self._parts:
                part.free()
            return
        self._finalizer.detach()
        _release(self._resources, warn=False)

    @property
    def freed(self):
        return self._handle is None

    @property
    def callbacks(self):
        """The (prolog, epilog) the plan was made with: cuFFT reads their user data (or check_bounds headers)."""
        return self._callbacks or ()

    def __repr__(self):
        t = self.transform
        state = "freed" if self._handle is None else f"workspace {self.workspace_bytes} B"
        return (f"CUFFTEngine({t.fft_type} {t.precision} n={self.params.n} batch={self.params.batch}, "
                f"cuda:{self.device_id}, {state})")


def _split(transform):
    """None, or the two Transforms that compute an R2C/C2R over several axes whose halved (last) axis has length 1.

    cuFFT 12 drops a trailing length-1 dimension of a multi-dimensional R2C/C2R plan and then halves the dimension
    before it (measured: C2R n=(3, 1) returned a length-3 Hermitian C2R along the first axis). A real transform of
    length 1 is exact as: C2R = inverse C2C over the other axes (in place on the input) then a length-1 C2R;
    R2C = a length-1 R2C, then a forward C2C over the other axes in place on the output."""
    if transform.fft_type == "C2C" or transform.n[-1] != 1:
        return None
    from ._layout import effective_axes
    effective, _ = effective_axes(transform.input_shape, transform.axes, transform.fft_type)
    if len(effective) < 2:
        return None
    t, last = transform, transform.axes[-1]
    # a C2C over several axes may take them in any order: outermost first, as cuFFT's embed addresses them (the
    # given order can put a wider-strided axis innermost, which no plan addresses)
    strides = t.input_strides if t.fft_type == "C2R" else t.output_strides
    others = tuple(sorted(transform.axes[:-1], key=lambda a: -strides[a]))
    if t.fft_type == "C2R":
        return (Transform("C2C", t.precision, t.input_shape, t.input_strides, t.input_shape, t.input_strides, others),
                Transform("C2R", t.precision, t.input_shape, t.input_strides, t.output_shape, t.output_strides,
                          (last,)))
    return (Transform("R2C", t.precision, t.input_shape, t.input_strides, t.output_shape, t.output_strides, (last,)),
            Transform("C2C", t.precision, t.output_shape, t.output_strides, t.output_shape, t.output_strides, others))


def _plan_span(params, side, fft_type):
    """Elements from the first to the last one that one execute of the plan addresses on ``side``."""
    n = params.n
    halved = n[:-1] + (n[-1] // 2 + 1,)
    complex_side = (side == "input" and fft_type == "C2R") or (side == "output" and fft_type == "R2C")
    dims = halved if complex_side else n
    embed, stride, dist = ((params.inembed, params.istride, params.idist) if side == "input" else
                           (params.onembed, params.ostride, params.odist))
    inner = sum((d - 1) * math.prod(embed[k + 1:]) for k, d in enumerate(dims))
    return 1 + (params.batch - 1) * dist + stride * inner


def _element_size(transform, side):
    real = (transform.fft_type == "R2C") if side == "input" else (transform.fft_type == "C2R")
    return transform.precision.itemsize * (1 if real else 2)


def _span_bytes(shape, strides, itemsize):
    """Bytes from the first element of a (positive-stride) layout to the end of its last one."""
    return span(shape, strides) * itemsize


def _check_precision(transform, has_callbacks):
    if transform.precision != np.float16:
        return
    bad = [n for n in transform.n if n & (n - 1)]
    if bad:
        raise ValueError(f"cuFFT supports half precision (float16) only for power-of-two lengths; got n={transform.n}. "
                         f"Use float32 (or pad to a power of two)")
    if has_callbacks:
        raise ValueError("cuFFT has no half-precision (float16) callbacks; use float32 with prolog/epilog")
    if transform.fft_type != "C2C" and transform.n[-1] == 1:
        raise ValueError("half-precision R2C/C2R transforms of length 1 are wrong in cuFFT 12.0 (a known CUDA 13.0 "
                         "issue); use float32")


def _check_half_strides(transform, params):
    """cuFFT's half-precision R2C reads only unit-stride real input, and its C2R writes only unit-stride real output."""
    if transform.precision != np.float16:
        return
    if transform.fft_type == "R2C" and params.istride != 1:
        raise UnsupportedLayoutError(f"cuFFT's half-precision R2C needs a unit-stride real input along axis "
                                     f"{transform.axes[-1]}; got stride {params.istride}: copy it to C order first")
    if transform.fft_type == "C2R" and params.ostride != 1:
        raise UnsupportedLayoutError(f"cuFFT's half-precision C2R needs a unit-stride real output along axis "
                                     f"{transform.axes[-1]}; got stride {params.ostride}")


def _check_callback(transform, kind, cb):
    element = transform.input_dtype if kind == "prolog" else transform.output_dtype
    expected = CALLBACK_TYPES[(kind, np.dtype(element).name)]
    got = _callback_type(cb)
    if got != expected:
        raise ValueError(f"the {kind} was compiled for cuFFT callback type {got}, but a {transform.fft_type} "
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
    precision = transform.precision
    in_type = cuda_data_type(precision, complex_=transform.fft_type != "R2C")
    out_type = cuda_data_type(precision, complex_=transform.fft_type != "C2R")
    exec_type = cuda_data_type(precision, complex_=True)
    work = ctypes.c_size_t()
    if _basic_layout(transform.fft_type, params):
        # NULL embeds: cuFFT's basic layout, as torch and CuPy plan contiguous data; cuFFT then picks the kernels of
        # its plain batched transforms (explicit embeds may select slower strided ones)
        inembed = onembed = None
    else:
        inembed, onembed = LongLongs(*params.inembed), LongLongs(*params.onembed)
    try:
        cufft.lib.cufftXtMakePlanMany(handle, params.rank, LongLongs(*params.n), inembed, params.istride,
                                      params.idist, in_type, onembed, params.ostride, params.odist, out_type,
                                      params.batch, ctypes.byref(work), exec_type)
    except CUDALibraryError as e:
        if callbacks and e.status == _NOT_SUPPORTED:  # (seen on the H200 for a prime length, 4099)
            raise CUDALibraryError(e.library, e.function, e.status, e.status_name,
                                   f"cuFFT has no kernels with callbacks for this transform (lengths {params.n}); "
                                   f"callbacks are refused where cuFFT falls back to Bluestein's algorithm (large "
                                   f"prime factors): pad to lengths with small prime factors, or transform without "
                                   f"callbacks and apply them as a separate pass") from None
        raise
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
