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

import weakref

from ... import _engines, _operands, _torch_route
from ..._errors import InvalidPlanStateError
from ..._execution import ExecutionCPU, resolve_execution
from ..._log import logger
from ..._options import check_or_create_options
from ..._plan_cache import PlanCache, PlanKey
from ..._streams import stream_pointer
from ._call import FFTCall, new_staging
from ._callback import as_callback, bind_callback
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


def make_engine(transform, execution, prolog, epilog, allocator):
    """The engine for ``transform`` on ``execution`` (:mod:`mathpy._engines`: scipy.fft on the CPU, cuFFT on a GPU,
    its workspace from ``allocator``, a :class:`~mathpy._packages.PackageStream`)."""
    if isinstance(execution, ExecutionCPU):
        return _engines.get("fft", "cpu")(transform, execution=execution, prolog=prolog, epilog=epilog)
    return _engines.get("fft", "cuda")(transform, execution=execution, prolog=prolog, epilog=epilog,
                                       allocator=allocator)


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

    Lifecycle: ``plan(prolog=, epilog=)`` -> ``execute(direction=)`` (any number of times; ``reset_operand(new)``
    between them) -> ``free()`` (or use ``with``).
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
        self._stream = stream_pointer(stream, problem.holder, problem.device_id) if problem.on_gpu else None
        self._staging = new_staging(problem) if (not problem.on_gpu and problem.copy_input) else None  # CPU: reused
        self._resources = _Resources()
        self._finalizer = weakref.finalize(self, self._resources.release)
        self._freed = False
        self._call = None
        self._grad = _torch_route.grad_names(operand=op.tensor)  # no backward here: execute refuses in grad mode
        logger.debug("FFT %s over axes %s of %r on %s (copy input: %s)", problem.fft_type, problem.axes, op,
                     problem.execution, problem.copy_input)

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
    def prepared_call(self):
        """The :class:`~._call.FFTCall` that ``execute()`` runs (None before ``plan()``)."""
        return self._call

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
        p = self._problem
        t, execution = p.transform, p.execution
        bound_prolog = bind_callback(as_callback(prolog, "prolog"), "prolog", t.fft_type, t.precision, t.input_shape,
                                     t.input_strides, execution)
        bound_epilog = bind_callback(as_callback(epilog, "epilog"), "epilog", t.fft_type, t.precision,
                                     t.output_shape, t.output_strides, execution)
        allocator = _operands.holder_of(p.holder).on(p.device_id, self._stream) if p.on_gpu else None

        def create():
            engine = make_engine(t, execution, bound_prolog, bound_epilog, allocator)
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
        if self._problem.options.inplace and new.package == "numpy" and not new.tensor.flags.writeable:
            raise ValueError("reset_operand: an in-place FFT needs a writable operand")
        self._op = new
        self._grad = tuple(n for n in self._grad if n != "operand") + _torch_route.grad_names(operand=operand)

    # --- execution ---------------------------------------------------------------------------------------------------
    def execute(self, direction=None, stream=None):
        """Run the planned transform and return the result in the operand's package and on its device (the operand
        itself for in-place plans). ``direction``: "forward" / -1 or "inverse" / +1 (C2C only; R2C is forward and
        C2R inverse). Unnormalised."""
        if self._grad:
            _torch_route.refuse("FFT.execute", self._grad)
        call = self._call
        if call is None:
            self._check_live()
            raise InvalidPlanStateError("execute() before plan(): call plan() first")
        p = self._problem
        if direction is None and stream is None and p.direct:
            return call.execute_direct(self._op.data_ptr, p.default_direction, self._stream)
        direction = p.direction(direction)
        if p.on_gpu:
            stream = self._stream if stream is None else stream_pointer(stream, p.holder, p.device_id)
        return call.execute(self._op, direction, stream, None, None, self._staging)

    def __repr__(self):
        state = "freed" if self._freed else ("planned" if self._call is not None else "not planned")
        return f"FFT({self.fft_type}, axes={self.axes}, {self.execution}, {state})"
