"""The stateful FFT: plan once, execute many times, free.

>>> import numpy as np
>>> x = np.arange(8, dtype=np.complex64).reshape(2, 4)
>>> with FFT(x, axes=[1]) as f:
...     f.plan()
...     y = f.execute()
>>> np.allclose(y, np.fft.fft(x, axis=1))
True
>>> f.execute()
Traceback (most recent call last):
...
mathpy._errors.InvalidPlanStateError: this FFT was freed; create a new one

``FFT`` is unnormalised in both directions (as cuFFT and nvmath-python): ``execute(direction="inverse")`` after a
forward transform returns the input times the transform's size. The stateless functions apply ``norm=``.
"""

import contextlib
import functools
import operator
import threading
import weakref

import numpy as np

from ... import _cuda, _operands
from ..._errors import InvalidPlanStateError, UnsupportedLayoutError
from ..._execution import ExecutionCPU, ExecutionCUDA, resolve_execution
from ..._log import logger
from ..._options import check_or_create_options
from ..._plan_cache import PlanCache
from ..._streams import stream_pointer
from . import _layout
from ._callback import as_callback, bind_callback
from ._options import FFTOptions

__all__ = ["FFT", "plan_cache", "plan_cache_info", "plan_cache_clear", "set_plan_cache_size"]

#: Engines behind the stateless functions, keyed by (Transform, execution, device, stream, prolog key, epilog key).
#: The stream is part of the key because a cuFFT plan has one workspace: two streams sharing it could overlap.
plan_cache = PlanCache("fft", max_plans=64, max_bytes=1 << 30)


def plan_cache_info():
    """Plans, workspace bytes, hits, misses and evictions of the cache behind the stateless FFT functions."""
    return plan_cache.info()


def plan_cache_clear():
    """Free every cached FFT plan (plans in use are freed when their call returns) and forget the stateless fast
    path's recipes, which hold engines."""
    _fast_recipes.clear()
    plan_cache.clear()


def set_plan_cache_size(max_plans=None, max_bytes=None):
    """Bound the FFT plan cache by count and by workspace bytes (``max_plans=0`` turns caching off)."""
    plan_cache.resize(max_plans, max_bytes)


_DIRECTIONS = {"forward": -1, "inverse": 1, -1: -1, 1: 1}
_REAL = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)}
_COMPLEX = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}

# One lock per GPU engine shared through the plan cache: cufftSetStream + cufftExec must not interleave between threads.
_engine_locks = weakref.WeakKeyDictionary()
_engine_locks_guard = threading.Lock()


def _resolve_type(dtype, fft_type):
    """(fft type, real precision) for an operand dtype, or TypeError/ValueError quoting what is allowed."""
    if dtype in _REAL:
        kind = fft_type or "R2C"
        if kind != "R2C":
            raise ValueError(f"fft_type {kind!r} needs a complex operand; a real {dtype} operand allows only 'R2C'")
        return kind, dtype
    if dtype in _COMPLEX:
        kind = fft_type or "C2C"
        if kind == "R2C":
            raise ValueError(f"fft_type 'R2C' needs a real operand (float32/float64), not {dtype}")
        return kind, _COMPLEX[dtype]
    raise TypeError(f"the FFT operand has dtype {dtype}; supported are float32, float64, complex64, complex128 (and "
                    f"float16 on the GPU). The stateless functions (mathpy.fft.fft, ...) promote integers.")


def normalize_axes(axes, ndim):
    """Non-negative axes, checked for range and duplicates (ValueError quoting the bad axis)."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    result = []
    for axis in axes:
        try:
            axis = operator.index(axis)
        except TypeError:
            raise TypeError(f"axes must be integers, got {axis!r}") from None
        if not -ndim <= axis < ndim:
            raise ValueError(f"axis {axis} is out of range for an operand of {ndim} dimension(s) "
                             f"(allowed: {-ndim}..{ndim - 1})")
        result.append(axis % ndim)
    if len(set(result)) != len(result):
        raise ValueError(f"axes {tuple(axes)} repeat an axis")
    if not result:
        raise ValueError("axes must name at least one axis")
    return tuple(result)


@functools.lru_cache(maxsize=1024)
def _dense(shape, strides):
    """(permutation, shape in that order, inverse permutation) to allocate a dense array with ``strides``."""
    perm = _layout.dense_permutation(strides)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return perm, tuple(shape[p] for p in perm), inverse


def _choose_layouts(kind, precision, shape, in_strides_candidate, out_shape, axes):
    """The Transform one plan addresses without looping (callbacks see its layouts): the input in
    ``engine_layout(candidate)``, the output dense in the input's axis order; when one plan cannot address that pair
    without loops, the same from C-contiguous input strides instead."""
    def transform_from(in_strides):
        out_strides = _layout.dense_strides(out_shape, _layout.dense_permutation(in_strides))
        out_strides = _layout.engine_layout(out_shape, out_strides, axes)
        return _layout.Transform(kind, precision, shape, in_strides, out_shape, out_strides, axes)

    transform = transform_from(_layout.engine_layout(shape, in_strides_candidate, axes))
    try:
        _layout.cufft_params(transform, allow_loops=False)
    except UnsupportedLayoutError:
        transform = transform_from(_layout.engine_layout(shape, _layout.c_strides(shape), axes))
    return transform


class _Prepared:
    """Everything about one FFT that depends only on the operand's signature (package, device, shape, strides,
    dtype), the axes, the options and the execution space: the engine's Transform, the layouts, where data moves.
    Immutable once made, so the stateless functions share them between calls and threads (see :func:`prepare`)."""

    __slots__ = ("fft_type", "axes", "transform", "execution", "options", "on_gpu", "local", "copy_input",
                 "default_direction", "device_package", "device_id", "in_perm", "key", "scale_type")

    def __init__(self, op, axes, options, execution):
        fft_type, precision = _resolve_type(op.dtype, options.fft_type)
        axes = normalize_axes(axes, op.ndim)
        if len(axes) > 3:
            raise ValueError(f"FFT transforms at most 3 axes per plan, got axes {axes}; the stateless functions "
                             f"(mathpy.fft.fftn, ...) decompose more")
        shape = op.shape
        if any(extent == 0 for extent in shape):
            raise ValueError(f"the FFT operand has a zero-size axis (shape {shape})")
        engine_axes = tuple(sorted(axes)) if fft_type == "C2C" else tuple(sorted(axes[:-1])) + (axes[-1],)
        last = engine_axes[-1]
        out_shape = list(shape)
        if fft_type == "R2C":
            out_shape[last] = shape[last] // 2 + 1
        elif fft_type == "C2R":
            out_shape[last] = 2 * (shape[last] - 1) + (options.last_axis_parity == "odd")
            if out_shape[last] < 1:
                raise ValueError(f"a C2R transform of length {shape[last]} along axis {last} with even parity has no "
                                 f"output; use last_axis_parity='odd' or a longer axis")
        out_shape = tuple(out_shape)

        on_gpu = isinstance(execution, ExecutionCUDA)
        if on_gpu:
            _cuda.require_device(execution.device_id)
            if not op.on_host and op.device_id != execution.device_id:
                raise ValueError(f"the operand lives on cuda:{op.device_id} but execution asks for "
                                 f"cuda:{execution.device_id}; move the operand or change execution")
        if precision == np.float16:
            if not on_gpu:
                raise TypeError("half precision FFTs (float16) run only on the GPU (execution='cuda'); use float32 "
                                "on the CPU")
            raise TypeError("half precision FFTs need a complex32 array type, which mathpy's operand layer does not "
                            "provide yet; use float32")
        local = op.on_host != on_gpu
        # cuFFT's C2R overwrites its input: the GPU always transforms a copy.
        use_operand = local and not (on_gpu and fft_type == "C2R")
        candidate = op.strides if use_operand else _layout.c_strides(shape)
        if options.inplace:
            if fft_type != "C2C":
                raise ValueError(f"in-place FFTs are C2C only; this is {fft_type}")
            if not local:
                raise ValueError("an in-place FFT needs the operand where it executes (execution "
                                 f"{execution.name!r}, operand on {'the host' if op.on_host else 'a GPU'})")
            if _layout.engine_layout(shape, op.strides, engine_axes) != op.strides:
                raise UnsupportedLayoutError(f"an in-place FFT needs a layout the library addresses directly; shape "
                                             f"{shape} with strides {op.strides} over axes {axes} is not one")
            transform = _layout.Transform(fft_type, precision, shape, op.strides, out_shape, op.strides, engine_axes)
        else:
            transform = _choose_layouts(fft_type, precision, shape, candidate, out_shape, engine_axes)

        self.fft_type, self.axes, self.transform, self.execution, self.options = (fft_type, axes, transform,
                                                                                   execution, options)
        self.on_gpu, self.local = on_gpu, local
        self.copy_input = not (use_operand and transform.input_strides == op.strides)
        self.default_direction = 1 if fft_type == "C2R" else -1
        self.device_id = execution.device_id if on_gpu else None
        self.device_package = None
        if on_gpu:
            self.device_package = op.package if not op.on_host else _operands.gpu_array_package()
        self.in_perm = _dense(shape, transform.input_strides)
        self.key = (transform, execution, self.device_id)
        self.scale_type = np.dtype(precision).type

    def stream_pointer(self, stream):
        return stream_pointer(stream, self.device_package, self.device_id) if self.on_gpu else None

    def creator(self, prolog, epilog, stream):
        transform, execution, package = self.transform, self.execution, self.device_package

        def create():
            engine = _make_engine(transform, execution, prolog, epilog, package, stream)
            return engine, engine.workspace_bytes
        return create

    def direction(self, direction):
        if direction is None:
            return self.default_direction
        try:
            value = _DIRECTIONS[direction]
        except (KeyError, TypeError):
            raise ValueError(f"direction {direction!r} is not supported; allowed are 'forward', 'inverse', -1, 1") \
                from None
        if self.fft_type != "C2C" and value != self.default_direction:
            raise ValueError(f"a {self.fft_type} FFT runs only {'forward' if self.default_direction == -1 else 'inverse'}")
        return value

    def new_staging(self):
        t = self.transform
        return _dense_host(t.input_shape, t.input_strides, t.input_dtype)

    # --- execution: the one code path of FFT.execute and the stateless functions -----------------------------------
    def run_cpu(self, engine, op, host_view, direction, scale, out, staging):
        t = self.transform
        x = host_view if self.local else _operands.to_host(op, None).tensor
        if self.copy_input:
            if staging is None:
                staging = self.new_staging()
            np.copyto(staging, x, casting="no")
            x = staging
        inplace = self.options.inplace
        if inplace:
            result = x
        elif out is not None and out.package == "numpy" and out.strides == t.output_strides and \
                out.dtype == t.output_dtype and not np.may_share_memory(out.tensor, x):
            result = out.tensor
        else:
            result = _dense_host(t.output_shape, t.output_strides, t.output_dtype)
        engine.execute(x, result, direction, None)
        if scale is not None:
            result *= self.scale_type(scale)
        if inplace:
            return op.tensor
        if out is not None:
            if result is not out.tensor:
                _copy_to_out(out, result, None)
            return out.tensor
        if op.package == "numpy" and op.on_host:
            return result
        return _operands.as_package(result, op, None)

    def run_gpu(self, engine, lock, op, direction, stream, scale, out):
        t = self.transform
        package, device_id = self.device_package, self.device_id
        if not self.copy_input:
            x, x_ptr = op.tensor, op.data_ptr
        else:
            x = self.dense_device(t.input_shape, t.input_strides, t.input_dtype, stream)
            if op.on_host:
                _upload(x, op.numpy(), self.in_perm, package, stream)
            else:
                _device_copy(x, op.tensor, package, device_id, stream)
            x_ptr = _pointer(x)
        inplace = self.options.inplace
        if inplace:
            result, result_ptr = x, x_ptr
        else:
            result = self.dense_device(t.output_shape, t.output_strides, t.output_dtype, stream)
            result_ptr = _pointer(result)
        with lock:
            engine.execute(x_ptr, result_ptr, direction, stream)
        if scale is not None:
            _scale_device(result, scale, self.scale_type, package, device_id, stream)
        if self.options.blocking is True:
            _synchronize(package, device_id, stream)
        if inplace:
            return op.tensor
        if out is not None:
            _copy_to_out(out, result, stream)
            return out.tensor
        if op.on_host:
            return _operands.as_package(result, op, stream)
        return result

    def dense_device(self, shape, strides, dtype, stream):
        perm, dense_shape, inverse = _dense(shape, strides)
        array = _device_allocator(self.device_package, self.device_id, stream)(dense_shape, dtype)
        if perm == tuple(range(len(perm))):
            return array
        return array.permute(inverse) if self.device_package == "torch" else array.transpose(inverse)


@functools.lru_cache(maxsize=64)
def _device_allocator(package, device_id, stream):
    """A function ``(shape, numpy dtype) -> new device array`` allocating in ``package``'s pool in the order of raw
    ``stream``; the stream and device objects are made once (the per-call cost is one context switch or none)."""
    single = _cuda.device_count() == 1
    if package == "cupy":
        import cupy
        device, stream_object, empty = cupy.cuda.Device(device_id), _cupy_stream(stream), cupy.empty
        current = cupy.cuda.get_current_stream

        def allocate(shape, dtype):
            if single and current().ptr == stream:  # the common case: no device or stream switch needed
                return empty(shape, dtype)
            with device, stream_object:
                return empty(shape, dtype)
        return allocate
    import torch
    torch_dtypes = _operands._torch_dtypes()[1]
    target = torch.device("cuda", device_id)
    stream_object = _torch_stream(stream, device_id)
    current = _torch_current_stream()
    torch_empty = torch.empty

    def allocate(shape, dtype):
        if current(device_id) == stream:  # the common case: no stream switch needed
            return torch_empty(shape, dtype=torch_dtypes[dtype], device=target)
        with torch.cuda.stream(stream_object):
            return torch_empty(shape, dtype=torch_dtypes[dtype], device=target)
    return allocate


def _torch_current_stream():
    """A function ``device_id -> raw current stream`` of torch (its C accessor when present: no Stream object)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    current = torch.cuda.current_stream
    return lambda device_id: current(device_id).cuda_stream


def _current_stream_getter(package):
    """A function ``device_id -> raw current stream of package`` for the single-GPU fast paths."""
    if package == "cupy":
        import cupy
        current = cupy.cuda.get_current_stream
        return lambda device_id: current().ptr
    return _torch_current_stream()


_fast_recipes = {}  # stateless fast path: call signature -> GPU recipe (see mathpy.host.fft._functions)
_FAST_RECIPES_MAX = 256


def gpu_recipe(prep, engine, lock, direction, stream, scale):
    """The common GPU execution of ``prep`` on ``engine`` as a closure ``run(x_ptr)`` -> result array, or None when
    the case needs the general :meth:`_Prepared.run_gpu` (a staging copy, in-place, blocking). Everything that does
    not depend on the data pointer is resolved here once: the output's dense shape, dtype and view, the allocator
    bound to the stream, the pointer accessor. ``run`` returns None when the engine was freed meanwhile (evicted
    from the plan cache): the caller then takes the general path."""
    if not prep.on_gpu or prep.copy_input or prep.options.inplace or prep.options.blocking is True:
        return None
    t = prep.transform
    perm, dense_shape, inverse = _dense(t.output_shape, t.output_strides)
    package, device_id, dtype = prep.device_package, prep.device_id, t.output_dtype
    allocate = _device_allocator(package, device_id, stream)
    executor = getattr(engine, "executor", None)
    execute = executor() if executor is not None else engine.execute
    cupy_like = package == "cupy"
    identity = perm == tuple(range(len(perm)))
    scale_type = prep.scale_type
    if cupy_like:
        new_output = functools.partial(allocate, dense_shape, dtype)  # it takes the no-switch path itself
    else:
        import torch
        raw_stream = _torch_current_stream()
        new_empty = torch.empty(0, dtype=_operands._torch_dtypes()[1][dtype], device=f"cuda:{device_id}").new_empty

        def new_output():
            if raw_stream(device_id) == stream:
                return new_empty(dense_shape)
            return allocate(dense_shape, dtype)

    def run(x_ptr):
        result = new_output()
        result_ptr = result.data.ptr if cupy_like else result.data_ptr()
        with lock:
            if engine.freed:
                return None
            execute(x_ptr, result_ptr, direction, stream)
        if not identity:
            result = result.transpose(inverse) if cupy_like else result.permute(inverse)
        if scale is not None:
            _scale_device(result, scale, scale_type, package, device_id, stream)
        return result
    return run


def _pointer(array):
    """Device address of a CuPy array or torch tensor's first element."""
    data = getattr(array, "data", None)
    ptr = getattr(data, "ptr", None)  # CuPy: MemoryPointer.ptr (offset included)
    return ptr if ptr is not None else array.data_ptr()


_prepared = {}  # signature -> _Prepared, bounded: cleared when it grows past _PREPARED_MAX
_PREPARED_MAX = 512


def prepare(op, axes, options, execution):
    """The :class:`_Prepared` for an operand signature, memoised (the stateless functions' fast path)."""
    signature = (op.package, op.device_id, op.shape, op.strides, op.dtype, axes, options, execution)
    found = _prepared.get(signature)
    if found is None:
        found = _Prepared(op, axes, options, execution)
        if len(_prepared) >= _PREPARED_MAX:
            _prepared.clear()
        _prepared[signature] = found
    return found


def engine_lock(engine):
    """The lock that serialises cufftSetStream + cufftExec on one GPU engine shared through the plan cache."""
    lock = getattr(engine, "lock", None)  # CUFFTEngine's own lock (its free() takes it too)
    if lock is not None:
        return lock
    lock = _engine_locks.get(engine)
    if lock is None:
        with _engine_locks_guard:
            lock = _engine_locks.setdefault(engine, threading.Lock())
    return lock


def _dense_host(shape, strides, dtype):
    perm, dense_shape, inverse = _dense(shape, strides)
    return np.empty(dense_shape, dtype).transpose(inverse)


class _Resources:
    """What a live FFT holds: its engine (owned, or borrowed from the plan cache). The weakref.finalize safety net
    calls :meth:`release`, so it must not refer to the FFT itself."""

    __slots__ = ("engine", "borrow")

    def __init__(self):
        self.engine = self.borrow = None

    def release(self):
        engine, borrow = self.engine, self.borrow
        self.engine = self.borrow = None
        if borrow is not None:
            borrow.__exit__(None, None, None)
        elif engine is not None:
            engine.free()


class FFT:
    """A planned FFT of one operand over up to three ``axes`` (all axes by default; the stateless functions decompose
    more). The operand's dtype picks the transform: complex -> C2C, real -> R2C, or ``options.fft_type="C2R"`` for a
    complex Hermitian operand.

    operand    NumPy / CuPy / torch array (or anything with ``__dlpack__`` / ``__cuda_array_interface__``).
    axes       the transform axes; for R2C/C2R the last one is the halved axis.
    options    :class:`FFTOptions` (or a dict of its fields).
    execution  None (where the operand lives), "cpu", "cuda", ``ExecutionCPU(num_threads=...)``,
               ``ExecutionCUDA(device_id=...)``; data moves as needed and results come back where the operand lives.
    stream     CUDA stream (int handle, CuPy/torch stream, ``__cuda_stream__``); default: the package's current one.

    Lifecycle: ``plan(prolog=, epilog=)`` -> ``execute(direction=)`` (any number of times; ``reset_operand(new)``
    between them) -> ``free()`` (or use ``with``).
    """

    def __init__(self, operand, axes=None, options=None, execution=None, stream=None, *, _cached=False):
        op = _operands.wrap_operand(operand)
        options = check_or_create_options(FFTOptions, options, "options")
        execution = resolve_execution(execution, op.device_id)
        prep = prepare(op, None if axes is None else normalize_axes(axes, op.ndim), options, execution)
        if options.inplace and op.package == "numpy" and not op.tensor.flags.writeable:
            raise ValueError("an in-place FFT needs a writable operand")
        self._prep, self._op, self._cached = prep, op, _cached
        self._stream = prep.stream_pointer(stream)
        self._staging = prep.new_staging() if (not prep.on_gpu and prep.copy_input) else None  # CPU: reused
        self._host_view = op.numpy() if (op.on_host and not prep.on_gpu) else None
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._freed = False
        self._lock = None
        self._fast = None  # GPU: the prepared execute() without arguments (see gpu_recipe)
        self._prolog = self._epilog = None
        logger.debug("FFT %s over axes %s of %r on %s (copy input: %s)", prep.fft_type, prep.axes, op,
                     prep.execution, prep.copy_input)

    # --- properties ------------------------------------------------------------------------------------------------
    @property
    def fft_type(self):
        """"C2C", "R2C" or "C2R"."""
        return self._prep.fft_type

    @property
    def axes(self):
        return self._prep.axes

    @property
    def execution(self):
        return self._prep.execution

    @property
    def options(self):
        return self._prep.options

    @property
    def transform(self):
        """The engine's :class:`~mathpy.host.fft._layout.Transform`."""
        return self._prep.transform

    @property
    def input_layout(self):
        """(shape, strides) in elements of the input as the prolog sees it: ``offset`` indexes this layout."""
        return self._prep.transform.input_shape, self._prep.transform.input_strides

    @property
    def output_layout(self):
        """(shape, strides) in elements of the output as the epilog sees it."""
        return self._prep.transform.output_shape, self._prep.transform.output_strides

    @property
    def output_dtype(self):
        return self._prep.transform.output_dtype

    # --- lifecycle ---------------------------------------------------------------------------------------------------
    def _check_live(self):
        if self._freed:
            raise InvalidPlanStateError("this FFT was freed; create a new one")

    def plan(self, prolog=None, epilog=None):
        """Plan the transform, with optional prolog/epilog callbacks (a Python function, a
        :class:`~mathpy.fft.Callback` with user data, or LTO-IR; see :mod:`mathpy.host.fft._callback`).

        Planning again replaces the previous plan. Errors (bad callbacks, bad user data, library failures) leave the
        FFT as it was."""
        self._check_live()
        prep = self._prep
        t, execution = prep.transform, prep.execution
        bound_prolog = bind_callback(as_callback(prolog, "prolog"), "prolog", t.kind, t.precision, t.input_shape,
                                     t.input_strides, execution)
        bound_epilog = bind_callback(as_callback(epilog, "epilog"), "epilog", t.kind, t.precision, t.output_shape,
                                     t.output_strides, execution)
        create = prep.creator(bound_prolog, bound_epilog, self._stream)
        resources = _Resources()
        if self._cached:
            key = prep.key + (self._stream, None if bound_prolog is None else bound_prolog.key,
                              None if bound_epilog is None else bound_epilog.key)
            borrow = plan_cache.borrow(key, create)
            resources.engine, resources.borrow = borrow.__enter__(), borrow
        else:
            resources.engine = create()[0]
        self._resources.release()
        self._finalizer.detach()
        self._resources = resources
        self._finalizer = weakref.finalize(self, resources.release)
        self._prolog, self._epilog = bound_prolog, bound_epilog
        if prep.on_gpu:
            self._lock = engine_lock(resources.engine)
        self._prepare_fast()

    def _prepare_fast(self):
        prep, engine = self._prep, self._resources.engine
        self._fast = None
        if engine is None or not prep.on_gpu:
            return
        run = gpu_recipe(prep, engine, self._lock, prep.default_direction, self._stream, None)
        if run is not None:
            x_ptr = self._op.data_ptr
            self._fast = lambda: run(x_ptr)

    def free(self):
        """Release the plan and its workspace now; idempotent. The FFT cannot be used afterwards."""
        if self._freed:
            return
        self._freed = True
        self._fast = None
        self._finalizer.detach()
        self._resources.release()
        self._op = self._host_view = self._staging = None
        self._prolog = self._epilog = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def reset_operand(self, operand):
        """Use ``operand`` from the next :meth:`execute` on. It must match the planned one in package, device, shape,
        strides and dtype (else ValueError and nothing changes)."""
        self._check_live()
        new = _operands.wrap_operand(operand)
        old = self._op
        for what in ("package", "device_id", "shape", "strides", "dtype"):
            if getattr(new, what) != getattr(old, what):
                raise ValueError(f"reset_operand: the new operand's {what} {getattr(new, what)!r} differs from the "
                                 f"planned {getattr(old, what)!r}; create a new FFT for it")
        if self._prep.options.inplace and new.package == "numpy" and not new.tensor.flags.writeable:
            raise ValueError("reset_operand: an in-place FFT needs a writable operand")
        self._op = new
        self._host_view = new.numpy() if (new.on_host and not self._prep.on_gpu) else None
        self._prepare_fast()

    # --- execution ---------------------------------------------------------------------------------------------------
    def execute(self, direction=None, stream=None):
        """Run the planned transform and return the result in the operand's package and on its device (the operand
        itself for in-place plans). ``direction``: "forward" / -1 or "inverse" / +1 (C2C only; R2C is forward and
        C2R inverse). Unnormalised."""
        fast = self._fast
        if fast is not None and direction is None and stream is None:
            result = fast()
            if result is not None:
                return result
        return self._execute(direction, stream, None, None)

    def _execute(self, direction, stream, scale, out):
        if self._freed:
            raise InvalidPlanStateError("this FFT was freed; create a new one")
        engine = self._resources.engine
        if engine is None:
            raise InvalidPlanStateError("execute() before plan(): call plan() first")
        prep = self._prep
        value = prep.direction(direction)
        if prep.on_gpu:
            stream = self._stream if stream is None else prep.stream_pointer(stream)
            return prep.run_gpu(engine, self._lock, self._op, value, stream, scale, out)
        return prep.run_cpu(engine, self._op, self._host_view, value, scale, out, self._staging)

    def __repr__(self):
        state = "freed" if self._freed else ("planned" if self._resources.engine is not None else "not planned")
        return f"FFT({self.fft_type}, axes={self.axes}, {self.execution}, {state})"


def _make_engine(transform, execution, prolog, epilog, package, stream):
    if isinstance(execution, ExecutionCPU):
        from ._cpu import CPUEngine
        return CPUEngine(transform, execution=execution, prolog=prolog, epilog=epilog)
    from ._cufft import CUFFTEngine  # workspace from the operand package's allocator, on the plan's stream
    return CUFFTEngine(transform, execution=execution, prolog=prolog, epilog=epilog, package=package, stream=stream)


# --- data movement on the GPU, in the operand package's own terms (stream-ordered) ------------------------------------

def _cupy_stream(stream):
    import cupy
    return cupy.cuda.ExternalStream(stream) if stream else cupy.cuda.Stream.null


def _torch_stream(stream, device_id):
    import torch
    if not stream:
        return torch.cuda.default_stream(device_id)
    return torch.cuda.ExternalStream(stream, device=f"cuda:{device_id}")


@contextlib.contextmanager
def _on_stream(package, device_id, stream):
    """Make ``stream`` (a raw handle; 0 = the legacy default stream) current for ``package`` on ``device_id``."""
    if package == "cupy":
        import cupy
        with cupy.cuda.Device(device_id), _cupy_stream(stream):
            yield
    else:
        import torch
        with torch.cuda.device(device_id), torch.cuda.stream(_torch_stream(stream, device_id)):
            yield


def _synchronize(package, device_id, stream):
    if package == "cupy":
        _cupy_stream(stream).synchronize()
    else:
        _torch_stream(stream, device_id).synchronize()


def _upload(device_view, host, perm, package, stream):
    """Copy host array ``host`` into the dense device array ``device_view`` (``perm`` = (permutation, ...) from
    :func:`_dense`: the view transposed by it is a contiguous buffer)."""
    order = perm[0]
    dense = np.ascontiguousarray(host.transpose(order))
    if package == "cupy":
        base = device_view.transpose(order)
        base.set(dense, stream=_cupy_stream(stream))
    else:
        base = device_view.permute(order)
        with _on_stream(package, base.device.index, stream):
            base.copy_(_operands._Torch._from_numpy_host(dense), non_blocking=False)


def _device_copy(destination, source, package, device_id, stream):
    with _on_stream(package, device_id, stream):
        if package == "cupy":
            import cupy
            cupy.copyto(destination, source)
        else:
            destination.copy_(source)


def _scale_device(array, scale, scalar_type, package, device_id, stream):
    """``array *= scale`` in the array's package, ordered on ``stream``; ``scalar_type`` keeps single precision."""
    with _on_stream(package, device_id, stream):
        if package == "cupy":
            array *= scalar_type(scale)
        else:
            array.mul_(float(scale))


def _copy_to_out(out, result, stream):
    """Copy ``result`` (NumPy on the host or a device array) into the caller's ``out`` (any package/device)."""
    if out.on_host:
        source = result if isinstance(result, np.ndarray) else _operands.to_host(_operands.wrap_operand(result),
                                                                                 stream).tensor
        np.copyto(out.numpy(), source, casting="same_kind")
        return
    source = _operands.wrap_operand(result)
    if source.on_host:
        source = _operands.to_device(source, out.device_id, stream)
    with _on_stream(out.package, out.device_id, stream or 0):
        if out.package == "cupy":
            import cupy
            cupy.copyto(out.tensor, cupy.from_dlpack(source.tensor) if source.package != "cupy" else source.tensor)
        else:
            import torch
            out.tensor.copy_(source.tensor if source.package == "torch" else torch.from_dlpack(source.tensor))
