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

How the pieces fit: the constructor resolves an :class:`~._problem.FFTProblem` (memoised per operand signature);
``plan()`` binds the callbacks, makes (or, for the stateless functions, borrows from :data:`plan_cache`) an engine and
builds the :class:`~._call.FFTCall` that every ``execute()`` runs.
"""

import time
import weakref

from ... import _engines, _operands, _torch_route
from ..._errors import InvalidPlanStateError
from ..._execution import ExecutionCPU, resolve_execution
from ..._log import logger
from ..._options import check_or_create_options
from ..._plan_cache import PlanCache, PlanKey
from ..._streams import stream_pointer
from ._call import FFTCall, new_staging
from ._callback import as_callback, bind_callback, callback_identity
from ._options import FFTOptions
from ._problem import fft_problem, normalize_axes

__all__ = ["FFT", "plan_cache", "plan_cache_info", "plan_cache_clear", "set_plan_cache_size", "make_engine"]

#: Engines behind the stateless functions, keyed by (Transform, execution, device, prolog key, epilog key). Not by
#: stream: an engine takes the stream (and a workspace for it) at each execution.
plan_cache = PlanCache("fft", max_plans=64, max_bytes=1 << 30)


def plan_cache_info():
    """Plans, workspace bytes, hits, misses and evictions of the cache behind the stateless FFT functions."""
    return plan_cache.info()


def plan_cache_clear():
    """Free every cached FFT plan (plans in use are freed when their call returns) and forget the stateless
    functions' prepared calls."""
    from . import _stateless
    _stateless.forget()
    plan_cache.clear()


def set_plan_cache_size(max_plans=None, max_bytes=None):
    """Bound the FFT plan cache by count and by workspace bytes (``max_plans=0`` turns caching off)."""
    plan_cache.resize(max_plans, max_bytes)


def make_engine(transform, execution, prolog, epilog, allocator, memory=None):
    """The engine for ``transform`` on ``execution`` (:mod:`mathpy._engines`: scipy.fft on the CPU, cuFFT on a GPU,
    its workspace from ``allocator``, a :class:`~mathpy._packages.PackageStream`, or from ``memory``, a caller's
    memory manager)."""
    if isinstance(execution, ExecutionCPU):
        return _engines.get("fft", "cpu")(transform, execution=execution, prolog=prolog, epilog=epilog)
    extra = {} if memory is None else {"memory": memory}
    return _engines.get("fft", "cuda")(transform, execution=execution, prolog=prolog, epilog=epilog,
                                       allocator=allocator, **extra)


class _Resources:
    """What a live FFT holds: its engine (owned, or a plan cache entry borrowed). The weakref.finalize safety net
    calls :meth:`release`, so it must not refer to the FFT itself."""

    __slots__ = ("engine", "cache", "entry")

    def __init__(self, engine=None, cache=None, entry=None):
        self.engine, self.cache, self.entry = engine, cache, entry

    def release(self):
        engine, cache, entry = self.engine, self.cache, self.entry
        self.engine = self.cache = self.entry = None
        if entry is not None:
            cache.release(entry)
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

    Lifecycle: ``plan(prolog=, epilog=, stream=)`` -> ``execute(direction=, stream=, release_workspace=)`` (any
    number of times; ``reset_operand(new)`` between them, ``reset_operand()`` to drop the operand) -> ``free()`` (or
    use ``with``). :meth:`create_key` / :meth:`get_key` give a hashable key of the problem, for caches of one's own.
    """

    def __init__(self, operand, axes=None, options=None, execution=None, stream=None):
        op = _operands.wrap_operand(operand)
        options = check_or_create_options(FFTOptions, options, "options")
        execution = resolve_execution(execution, op.device_id)
        problem = fft_problem(op, None if axes is None else normalize_axes(axes, op.ndim), options, execution)
        self._setup(op, problem, stream, None)

    @classmethod
    def for_problem(cls, op, problem, stream=None, cache=None):
        """An FFT of Operand ``op`` for an already resolved :class:`~._problem.FFTProblem` (the stateless functions
        resolve it themselves); with ``cache`` (a PlanCache), ``plan()`` borrows its engine from there."""
        self = cls.__new__(cls)
        self._setup(op, problem, stream, cache)
        return self

    def _setup(self, op, problem, stream, cache):
        if problem.options.inplace and op.package == "numpy" and not op.tensor.flags.writeable:
            raise ValueError("an in-place FFT needs a writable operand")
        self._problem, self._op, self._cache = problem, op, cache
        self._facts = (op.package, op.device_id, op.shape, op.strides, op.dtype)  # what reset_operand checks
        self._logger = problem.options.logger or logger
        self._stream = stream_pointer(stream, problem.holder, problem.device_id) if problem.on_gpu else None
        self._staging = new_staging(problem) if (not problem.on_gpu and problem.copy_input) else None  # CPU: reused
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._freed = False
        self._call = None
        self._grad = _torch_route.grad_names(operand=op.tensor)  # no backward here: execute refuses in grad mode
        self._logger.debug("FFT %s over axes %s of %r on %s (copy input: %s; result layout %s)", problem.fft_type,
                           problem.axes, op, problem.execution, problem.copy_input,
                           problem.transform.output_strides)

    # --- properties ------------------------------------------------------------------------------------------------
    @property
    def fft_type(self):
        """"C2C", "R2C" or "C2R"."""
        return self._problem.fft_type

    @property
    def axes(self):
        return self._problem.axes

    @property
    def execution(self):
        return self._problem.execution

    @property
    def options(self):
        return self._problem.options

    @property
    def transform(self):
        """The engine's :class:`~mathpy.host.fft._layout.Transform`."""
        return self._problem.transform

    @property
    def input_layout(self):
        """(shape, strides) in elements of the input as the prolog sees it: ``offset`` indexes this layout."""
        return self._problem.transform.input_shape, self._problem.transform.input_strides

    @property
    def output_layout(self):
        """(shape, strides) in elements of the output as the epilog sees it."""
        return self._problem.transform.output_shape, self._problem.transform.output_strides

    @property
    def output_dtype(self):
        return self._problem.transform.output_dtype

    @property
    def workspace_bytes(self):
        """The plan's workspace size in bytes (0 on the CPU, or before ``plan()``)."""
        engine = self._resources.engine
        return 0 if engine is None else engine.workspace_bytes

    def get_key(self, prolog=None, epilog=None):
        """The hashable key of this FFT's problem with the given callbacks (none by default): what
        :meth:`create_key` gives for this operand, axes, options and execution."""
        return ("FFT",) + self._problem.engine_key + (callback_identity(prolog, "prolog"),
                                                      callback_identity(epilog, "epilog"))

    @staticmethod
    def create_key(operand, axes=None, options=None, execution=None, prolog=None, epilog=None):
        """A hashable key of the FFT that ``FFT(operand, axes, options, execution)`` planned with ``prolog`` /
        ``epilog`` would be, made from the operand's metadata only (nothing is planned or compiled): FFTs with
        equal keys can share a plan, so a cache of one's own can be keyed on it. Callbacks count by identity (the
        function object or LTO-IR, and the user data's address or value). For use within one process."""
        op = _operands.wrap_operand(operand)
        options = check_or_create_options(FFTOptions, options, "options")
        execution = resolve_execution(execution, op.device_id)
        problem = fft_problem(op, None if axes is None else normalize_axes(axes, op.ndim), options, execution)
        return ("FFT",) + problem.engine_key + (callback_identity(prolog, "prolog"),
                                                callback_identity(epilog, "epilog"))

    @property
    def prepared_call(self):
        """The :class:`~._call.FFTCall` that ``execute()`` runs (None before ``plan()``)."""
        return self._call

    # --- lifecycle ---------------------------------------------------------------------------------------------------
    def _check_live(self):
        if self._freed:
            raise InvalidPlanStateError("this FFT was freed; create a new one")

    def plan(self, prolog=None, epilog=None, *, stream=None):
        """Plan the transform, with optional prolog/epilog callbacks (a Python function, a
        :class:`~mathpy.fft.Callback` with user data, or LTO-IR; see :mod:`mathpy.host.fft._callback`). ``stream``:
        the FFT's stream from now on (the workspace is allocated in its order; default: the constructor's).

        Planning again replaces the previous plan. Errors (bad callbacks, bad user data, library failures) leave the
        FFT as it was."""
        self._check_live()
        p = self._problem
        start = time.perf_counter()
        if stream is not None and p.on_gpu:
            self._stream = stream_pointer(stream, p.holder, p.device_id)
        t, execution = p.transform, p.execution
        bound_prolog = bind_callback(as_callback(prolog, "prolog"), "prolog", t.fft_type, t.precision, t.input_shape,
                                     t.input_strides, execution)
        bound_epilog = bind_callback(as_callback(epilog, "epilog"), "epilog", t.fft_type, t.precision,
                                     t.output_shape, t.output_strides, execution)
        allocator = _operands.holder_of(p.holder).on(p.device_id, self._stream) if p.on_gpu else None

        def create():
            engine = make_engine(t, execution, bound_prolog, bound_epilog, allocator, p.options.allocator)
            return engine, engine.workspace_bytes

        key = PlanKey(p.engine_key + (None if bound_prolog is None else bound_prolog.key,
                                      None if bound_epilog is None else bound_epilog.key))
        if self._cache is not None:
            entry = self._cache.acquire(key, create)
            resources = _Resources(entry.plan, self._cache, entry)
        else:
            resources = _Resources(create()[0])
        self._resources.release()
        self._finalizer.detach()
        self._resources = resources
        self._finalizer = weakref.finalize(self, resources.release)
        self._call = FFTCall(p, resources.engine, (bound_prolog, bound_epilog), key)
        self._grad = _torch_route.grad_names(operand=self._op.tensor, prolog=prolog, epilog=epilog)
        self._logger.debug("FFT planned in %.2f ms (workspace %d bytes%s%s)", (time.perf_counter() - start) * 1e3,
                           resources.engine.workspace_bytes, ", prolog" if bound_prolog is not None else "",
                           ", epilog" if bound_epilog is not None else "")

    def free(self):
        """Release the plan and its workspace now; idempotent. The FFT cannot be used afterwards."""
        if self._freed:
            return
        self._freed = True
        self._call = None
        self._finalizer.detach()
        self._resources.release()
        self._op = self._staging = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def reset_operand(self, operand=None, *, stream=None):
        """Use ``operand`` from the next :meth:`execute` on. It must match the planned one in package, device, shape,
        strides and dtype (else ValueError and nothing changes). Without an operand, drop the reference to the
        current one (``execute`` then raises until an operand is given). ``stream``: the stream the operand was made
        on, the FFT's stream from now on."""
        self._check_live()
        if operand is None:
            self._op = None
            self._grad = tuple(n for n in self._grad if n != "operand")
        else:
            new = _operands.wrap_operand(operand)
            for what, planned in zip(("package", "device_id", "shape", "strides", "dtype"), self._facts):
                if getattr(new, what) != planned:
                    raise ValueError(f"reset_operand: the new operand's {what} {getattr(new, what)!r} differs from "
                                     f"the planned {planned!r}; create a new FFT for it")
            if self._problem.options.inplace and new.package == "numpy" and not new.tensor.flags.writeable:
                raise ValueError("reset_operand: an in-place FFT needs a writable operand")
            self._op = new
            self._grad = tuple(n for n in self._grad if n != "operand") + _torch_route.grad_names(operand=operand)
        p = self._problem
        if stream is not None and p.on_gpu:
            self._stream = stream_pointer(stream, p.holder, p.device_id)

    # --- execution ---------------------------------------------------------------------------------------------------
    def execute(self, direction=None, stream=None, *, release_workspace=False):
        """Run the planned transform and return the result in the operand's package and on its device (the operand
        itself for in-place plans). ``direction``: :class:`FFTDirection`, "forward" / -1 or "inverse" / +1 (C2C
        only; R2C is forward and C2R inverse). Unnormalised. ``release_workspace``: give the workspace back after
        this transform (the next execute takes it again)."""
        if self._grad:
            _torch_route.refuse("FFT.execute", self._grad)
        call, op = self._call, self._op
        if call is None or op is None:
            self._check_live()
            if call is None:
                raise InvalidPlanStateError("execute() before plan(): call plan() first")
            raise InvalidPlanStateError("execute(): the operand was released (reset_operand() without one); give one "
                                        "with reset_operand(operand)")
        p = self._problem
        if direction is None and stream is None and p.direct and not release_workspace:
            return call.execute_direct(op.data_ptr, p.default_direction, self._stream)
        direction = p.direction(direction)
        if p.on_gpu:
            stream = self._stream if stream is None else stream_pointer(stream, p.holder, p.device_id)
        result = call.execute(op, direction, stream, None, None, self._staging)
        if release_workspace and self._cache is None:
            release = getattr(call.engine, "release_workspace", None)
            if release is not None:
                release()
        return result

    def __repr__(self):
        state = "freed" if self._freed else ("planned" if self._call is not None else "not planned")
        return f"FFT({self.fft_type}, axes={self.axes}, {self.execution}, {state})"
