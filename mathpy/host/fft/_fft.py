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

from ... import _engines, _memo, _operands, _torch_route
from ..._docstrings import fill
from ..._errors import InvalidPlanStateError
from ..._execution import ExecutionCPU, resolve_execution
from ..._log import logger
from ..._options import check_or_create_options
from ..._plan_cache import PlanCache, PlanKey
from ..._streams import refuse_in_capture, refuse_planning_in_capture, stream_handle, stream_pointer
from ...jit._bounds import resolve as check_bounds
from ._call import FFTCall, new_staging
from ._callback import as_callback, bind_callback, callback_identity
from ._docs import FFT_DOCS
from ._options import FFTOptions
from ._problem import fft_problem, normalize_axes

__all__ = ["FFT", "borrow_call", "plan_cache", "plan_cache_info", "plan_cache_clear", "set_plan_cache_size",
           "make_engine"]

#: Engines behind the stateless functions, keyed by (Transform, execution, device, prolog key, epilog key). Not by
#: stream: an engine takes the stream (and a workspace for it) at each execution.
plan_cache = PlanCache("fft", max_plans=64, max_bytes=1 << 30)


def plan_cache_info():
    """Report the state of the plan cache behind the stateless FFT functions.

    Returns
    -------
    CacheInfo
        A named tuple: ``plans`` and ``bytes`` (workspace) held, ``hits``, ``misses``, ``evictions``, and the
        bounds ``max_plans`` and ``max_bytes``.

    Notes
    -----
    CPU plans (SciPy) hold no workspace; cuFFT plans hold their work area on the GPU. Plans are keyed by the
    transform, the execution space, the device and the callbacks, not by stream.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.plan_cache_clear()
    >>> before = mathpy.fft.plan_cache_info()
    >>> _ = mathpy.fft.fft(np.ones(8))
    >>> _ = mathpy.fft.fft(np.ones(8))                # the same plan again
    >>> info = mathpy.fft.plan_cache_info()
    >>> info.plans, info.misses - before.misses
    (1, 1)
    """
    return plan_cache.info()


def plan_cache_clear():
    """Free every cached FFT plan and forget the stateless functions' prepared calls.

    Plans in use by a running call are freed when the call returns. Use it to give GPU memory back or after
    changing what a callback reads.

    Examples
    --------
    >>> import mathpy.fft
    >>> mathpy.fft.plan_cache_clear()
    >>> mathpy.fft.plan_cache_info().plans
    0
    """
    _memo.clear("fft")  # the plans, and the stateless calls' memo of prepared calls (which name plans)


def set_plan_cache_size(max_plans=None, max_bytes=None):
    """Bound the FFT plan cache by number of plans and by workspace bytes; the least recently used plans go first.

    Parameters
    ----------
    max_plans : int, optional
        At most this many plans (``0`` turns caching off: every call plans). None keeps the current bound (64).
    max_bytes : int, optional
        At most this many bytes of plan workspace. None keeps the current bound (1 GiB).

    Raises
    ------
    ValueError
        A negative bound.

    Examples
    --------
    >>> import mathpy.fft
    >>> mathpy.fft.set_plan_cache_size(max_plans=16)
    >>> mathpy.fft.plan_cache_info().max_plans
    16
    >>> mathpy.fft.set_plan_cache_size(max_plans=64)
    """
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


def _callbacks_key(prolog, epilog, options):
    """The callbacks' part of a key: their identities, and whether they are compiled with bounds checks."""
    key = (callback_identity(prolog, "prolog"), callback_identity(epilog, "epilog"))
    if (prolog is not None or epilog is not None) and check_bounds(options.check_bounds):
        key += ("check_bounds",)
    return key


def _check_writable(op, problem):
    if problem.options.inplace and op.package == "numpy" and not op.tensor.flags.writeable:
        raise ValueError("an in-place FFT needs a writable operand")


def _engine_request(p, prolog, epilog, handle):
    """What planning ``p`` (an FFTProblem) with these callbacks asks for: ``(bound callbacks, the engine's plan cache
    key, create)``, ``create()`` making a new engine and returning it with its workspace bytes. ``handle``: the raw
    stream the plan is made on (None on the CPU)."""
    t, execution = p.transform, p.execution
    check = check_bounds(p.options.check_bounds)
    if check and p.on_gpu and (prolog is not None or epilog is not None):  # binding uploads a header
        refuse_planning_in_capture(_operands.holder_of(p.holder), p.device_id, handle, "FFT.plan with check_bounds")
    bound_prolog = bind_callback(as_callback(prolog, "prolog"), "prolog", t.fft_type, t.precision, t.input_shape,
                                 t.input_strides, execution, check)
    bound_epilog = bind_callback(as_callback(epilog, "epilog"), "epilog", t.fft_type, t.precision, t.output_shape,
                                 t.output_strides, execution, check)
    allocator = _operands.holder_of(p.holder).on(p.device_id, handle) if p.on_gpu else None

    def create():
        if allocator is not None:
            refuse_planning_in_capture(allocator.package, p.device_id, handle, "FFT.plan")
        engine = make_engine(t, execution, bound_prolog, bound_epilog, allocator, p.options.allocator)
        return engine, engine.workspace_bytes

    # the holder package too: an engine takes other streams' workspaces from its pool, which a capture on a stream of
    # another package could not use
    key = PlanKey(p.engine_key + (p.holder, None if bound_prolog is None else bound_prolog.key,
                                  None if bound_epilog is None else bound_epilog.key))
    return (bound_prolog, bound_epilog), key, create


def borrow_call(op, problem, prolog, epilog, handle):
    """The stateless functions' planning, with no :class:`FFT` object: ``(call, entry)``, the
    :class:`~._call.FFTCall` of ``problem`` (the :class:`~._problem.FFTProblem` of Operand ``op``) with these
    callbacks, on an engine borrowed from :data:`plan_cache` (a hit, or made now); give it back with
    ``plan_cache.release(entry)`` once the call has run. ``handle``: the raw stream (None on the CPU)."""
    _check_writable(op, problem)
    callbacks, key, create = _engine_request(problem, prolog, epilog, handle)
    entry = plan_cache.acquire(key, create)
    try:
        return FFTCall(problem, entry.plan, callbacks, key), entry
    except BaseException:
        plan_cache.release(entry)
        raise


class _Resources:
    """What a live FFT holds: the engine it owns. The weakref.finalize safety net calls :meth:`release`, so it must
    not refer to the FFT itself."""

    __slots__ = ("engine",)

    def __init__(self, engine=None):
        self.engine = engine

    def release(self):
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.free()


@fill(FFT_DOCS)
class FFT:
    """A planned FFT of one operand over up to three axes: plan once, execute many times, free (nvmath-python's
    stateful API). Unnormalised in both directions, like cuFFT.

    The operand's dtype picks the transform: complex -> C2C, real -> R2C (the last of ``axes`` is halved), or
    ``options.fft_type="C2R"`` for a complex Hermitian half spectrum. :attr:`input_layout` and
    :attr:`output_layout` say how prolog and epilog ``offset`` values index the data. The stateless functions
    (:func:`~mathpy.fft.fft`, ...) are a thin layer over this class that adds NumPy's promotion, padding and norm.

    Parameters
    ----------
    operand : array
        {a}
        float32, float64, complex64 or complex128 (long double on the CPU); on the GPU also torch float16 and
        complex32 tensors, transformed in half precision (power-of-two lengths, no callbacks). The stateless
        functions promote other dtypes. The FFT keeps the resolved copy of a lazy torch view: later writes through
        that view do not reach it (:meth:`reset_operand` takes a new one).
    axes : sequence of ints, optional
        One to three distinct axes to transform (default: all); for R2C and C2R the last one is the halved axis.
    options : FFTOptions or dict, optional
        :class:`FFTOptions` or a dict of its fields: ``fft_type``, ``inplace``, ``last_axis_parity``,
        ``blocking``, ``result_layout``, ``logger``, ``allocator``.
    execution : str, ExecutionCPU, ExecutionCUDA or dict, optional
        {execution}
    stream : int or stream object, optional
        The stream of work done while the FFT is built (none today: operands are read in place or staged at
        execution). Every later call takes its own ``stream`` (default: the current one when it is made).

    Raises
    ------
    TypeError
        An operand that is not an array or has another dtype; long double with GPU execution; half precision on
        the CPU or from a package without complex32 (NumPy, CuPy).
    ValueError
        Repeated or out-of-range axes, more than three axes, an ``fft_type`` the dtype does not allow, a zero-size
        axis, an in-place FFT that is not C2C or whose operand lives elsewhere or is a lazy torch view (conjugate or
        negative bit); a half-precision transform length that is not a power of two.
    :class:`~mathpy.UnsupportedLayoutError`
        An in-place FFT of a layout the library cannot address.
    {no_device}

    Notes
    -----
    Life cycle: :meth:`plan` (with optional callbacks) -> :meth:`execute` any number of times
    (:meth:`reset_operand` between them, ``reset_operand()`` to drop the operand) -> :meth:`free` (or use
    ``with``). A call in the wrong state raises :class:`~mathpy.InvalidPlanStateError`. :meth:`create_key` /
    :meth:`get_key` give a hashable key of the problem, for caches of one's own. Every :meth:`execute` reads the
    operand's current contents and returns a new array in the operand's package and on its device (the operand itself
    when in place).

    On the CPU the engine is SciPy's pocketfft and callbacks run as numba-compiled loops; on a GPU it is cuFFT with
    the callbacks fused as LTO-IR. One plan serves every stream: an execution on another stream takes its own work
    area.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> x = np.arange(8, dtype=np.complex64).reshape(2, 4)
    >>> with mathpy.fft.FFT(x, axes=[1]) as f:
    ...     f.plan()
    ...     y = f.execute()
    ...     z = f.execute(direction="inverse")        # unnormalised: 4 times NumPy's ifft
    >>> bool(np.allclose(y, np.fft.fft(x, axis=1))), bool(np.allclose(z, 4 * np.fft.ifft(x, axis=1)))
    (True, True)
    """

    def __init__(self, operand, axes=None, options=None, execution=None, stream=None):
        options = check_or_create_options(FFTOptions, options, "options")
        op = _operands.wrap_operand(operand, "operand", written=options.inplace)
        execution = resolve_execution(execution, op.device_id)
        problem = fft_problem(op, None if axes is None else normalize_axes(axes, op.ndim), options, execution)
        _check_writable(op, problem)
        self._problem, self._op = problem, op
        self._facts = (op.package, op.device_id, op.shape, op.strides, op.dtype)  # what reset_operand checks
        self._logger = problem.options.logger or logger
        stream_handle(stream)  # checked now; each call resolves its own stream (see mathpy._streams)
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
        """The transformed axes, non-negative, in the order given."""
        return self._problem.axes

    @property
    def execution(self):
        """The :class:`~mathpy.ExecutionCPU` or :class:`~mathpy.ExecutionCUDA` the FFT runs on."""
        return self._problem.execution

    @property
    def options(self):
        """The :class:`FFTOptions` it was planned with."""
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
        """The result's dtype."""
        return self._problem.transform.output_dtype

    @property
    def workspace_bytes(self):
        """The plan's workspace size in bytes (0 on the CPU, or before ``plan()``)."""
        engine = self._resources.engine
        return 0 if engine is None else engine.workspace_bytes

    def get_key(self, prolog=None, epilog=None):
        """The hashable key of this FFT's problem with the given callbacks (none by default): what
        :meth:`create_key` gives for this operand, axes, options and execution."""
        return ("FFT",) + self._problem.engine_key + _callbacks_key(prolog, epilog, self._problem.options)

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
        return ("FFT",) + problem.engine_key + _callbacks_key(prolog, epilog, options)

    @property
    def prepared_call(self):
        """The :class:`~._call.FFTCall` that ``execute()`` runs (None before ``plan()``)."""
        return self._call

    # --- lifecycle ---------------------------------------------------------------------------------------------------
    def _check_live(self):
        if self._freed:
            raise InvalidPlanStateError("this FFT was freed; create a new one")

    def plan(self, prolog=None, epilog=None, *, stream=None):
        """Plan the transform, with optional callbacks fused into its loads and stores.

        Parameters
        ----------
        prolog : callable, Callback, bytes or dict, optional
            ``prolog(data_in, offset, user_info, unused) -> value``; ``offset`` indexes :attr:`input_layout`.
            A :class:`~mathpy.fft.Callback` carries user data; LTO-IR (bytes, or nvmath-python's
            ``{"ltoir": ..., "data": ...}``) runs on the GPU only.
        epilog : callable, Callback, bytes or dict, optional
            ``epilog(data_out, offset, value, user_info, unused)``; ``offset`` indexes :attr:`output_layout`.
        stream : int or stream object, optional
            The plan's home stream: its workspace is allocated in this stream's order and serves executions there
            (default: the current stream now); executions on other streams take a work area of their own.

        Raises
        ------
        TypeError
            A callback that is not a function, Callback or LTO-IR; user data of a dtype callbacks cannot read
            (the message lists the allowed ones); :class:`~mathpy.CallbackCompileError` when the function does
            not compile (it names its file and line).
        ValueError
            User data of a shape the callback cannot index, or on another device; an index the callback's source
            shows outside ``data_in`` / ``data_out`` or its user data (named, with the size it needs).
        :class:`~mathpy.CUDALibraryError`
            cuFFT refused the plan.
        :class:`~mathpy.StreamCaptureError`
            The stream is capturing a CUDA graph: plan before the capture.

        Notes
        -----
        Planning again replaces the previous plan. Errors leave the FFT as it was. On the GPU the callbacks are
        compiled to LTO-IR (cached on disk) and linked into cuFFT's kernels; on the CPU they run as numba loops
        around SciPy's transform, with the same offsets.
        """
        self._check_live()
        p = self._problem
        start = time.perf_counter()
        handle = stream_pointer(stream, p.holder, p.device_id) if p.on_gpu else None
        callbacks, key, create = _engine_request(p, prolog, epilog, handle)
        resources = _Resources(create()[0])
        self._resources.release()
        self._finalizer.detach()
        self._resources = resources
        self._finalizer = weakref.finalize(self, resources.release)
        self._call = FFTCall(p, resources.engine, callbacks, key)
        self._grad = _torch_route.grad_names(operand=self._op.tensor, prolog=prolog, epilog=epilog)
        self._logger.debug("FFT planned in %.2f ms (workspace %d bytes%s%s)", (time.perf_counter() - start) * 1e3,
                           resources.engine.workspace_bytes, ", prolog" if callbacks[0] is not None else "",
                           ", epilog" if callbacks[1] is not None else "")

    def free(self):
        """Release the plan and its workspace now; idempotent. The FFT cannot be used afterwards (a
        ``with`` block calls it on exit, and a finalizer when the object is collected)."""
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
        """Use another operand from the next :meth:`execute` on, without planning again.

        Parameters
        ----------
        operand : array, optional
            An array of the planned operand's package, device, shape, strides and dtype (a lazy torch view: its
            resolved copy, taken now). None drops the reference to the current one (:meth:`execute` then raises
            until an operand is given).
        stream : int or stream object, optional
            Accepted for nvmath-python's signature and checked; nothing is copied here (each :meth:`execute` reads
            the operand on its own stream).

        Raises
        ------
        ValueError
            Any of those differs (nothing changes); an in-place FFT's operand is not writable (read-only, or a
            lazy torch view).
        :class:`~mathpy.InvalidPlanStateError`
            The FFT was freed.
        """
        self._check_live()
        if operand is None:
            self._op = None
            self._grad = tuple(n for n in self._grad if n != "operand")
        else:
            new = _operands.wrap_operand(operand, "reset_operand: operand", written=self._problem.options.inplace)
            for what, planned in zip(("package", "device_id", "shape", "strides", "dtype"), self._facts):
                if getattr(new, what) != planned:
                    raise ValueError(f"reset_operand: the new operand's {what} {getattr(new, what)!r} differs from "
                                     f"the planned {planned!r}; create a new FFT for it")
            if self._problem.options.inplace and new.package == "numpy" and not new.tensor.flags.writeable:
                raise ValueError("reset_operand: an in-place FFT needs a writable operand")
            self._op = new
            self._grad = tuple(n for n in self._grad if n != "operand") + _torch_route.grad_names(operand=operand)
        stream_handle(stream)

    # --- execution ---------------------------------------------------------------------------------------------------
    def execute(self, direction=None, stream=None, *, release_workspace=False):
        """Run the planned transform on the operand's current contents.

        Parameters
        ----------
        direction : FFTDirection, {"forward", "inverse", -1, 1}, optional
            C2C only (R2C runs forward, C2R inverse); default: forward. Unnormalised either way.
        stream : int or stream object, optional
            The CUDA stream for this execution (default: the operand package's current stream, resolved at this
            call). Ignored on the CPU. The execution is recorded when the stream is capturing a CUDA graph.
        release_workspace : bool, optional
            Give the workspace back after this transform (the next execute takes it again); not in a graph capture.

        Returns
        -------
        array
            A new array in the operand's package and on its device (the operand itself for an in-place FFT).

        Raises
        ------
        :class:`~mathpy.InvalidPlanStateError`
            Before :meth:`plan`, after :meth:`free`, or without an operand.
        ValueError
            A direction the FFT type does not take.
        :class:`~mathpy.StreamCaptureError`
            A capture of work a graph cannot record (host operand, ``blocking=True``, ``release_workspace=True``).
        :class:`~mathpy.OutOfBoundsError`
            With ``FFTOptions(check_bounds=True)``: a callback indexed one of its arrays out of bounds (named).
        """
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
            return call.execute_direct(op.data_ptr, p.default_direction)  # on the current stream
        direction = p.direction(direction)
        if p.on_gpu:
            stream = stream_pointer(stream, p.holder, p.device_id)
            if release_workspace:
                refuse_in_capture(call.holder, p.device_id, stream, "FFT.execute(release_workspace=True)",
                                  "replays would use the workspace given back", "leave it False while capturing")
        result = call.execute(op, direction, stream, None, None, self._staging)
        if release_workspace:
            release = getattr(call.engine, "release_workspace", None)
            if release is not None:
                release()
        return result

    def __repr__(self):
        state = "freed" if self._freed else ("planned" if self._call is not None else "not planned")
        return f"FFT({self.fft_type}, axes={self.axes}, {self.execution}, {state})"
