"""The stateful :class:`Matmul`: numpy.matmul semantics on cuBLASLt (GPU) or NumPy (CPU), planned once, executed many
times. The stateless :func:`~._stateless.run` takes the same planning steps (:mod:`._resolve`) without the object.

The constructor resolves numpy.matmul's rules (batch broadcasting, 1-D operands), the dtypes and where the product
runs (:func:`~._resolve.resolve`); ``plan()`` validates the epilog and its inputs, chooses every layout and builds
the :class:`~._problem.MatmulProblem` (:func:`~._resolve.plan_problem`), makes the engine it owns and the
:class:`~._call.MatmulCall` that every ``execute()`` runs. Results come back in the caller's package and on its
device.

>>> import numpy as np
>>> from mathpy.host.matmul import Matmul, matmul   # public as mathpy.matmul / mathpy.Matmul
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> matmul(a, a.T)                       # a transposed operand: no copy, the engine gets its strides
array([[ 5., 14.],
       [14., 50.]], dtype=float32)
>>> d, aux = matmul(a, a.T, epilog="relu_aux")
>>> aux["relu_aux"].shape                        # bitmask: ceil(2 / 8) rounded up to 16 bytes, per column
(16, 2)
>>> with Matmul(a, a.T) as mm:
...     algorithms = mm.plan(epilog="bias", epilog_inputs={"bias": np.array([1, -1], np.float32)})
...     mm.execute()                            # one bias value per row of the result
array([[ 6., 15.],
       [13., 49.]], dtype=float32)
"""

import dataclasses
import weakref

from ... import _operands, _torch_route
from ..._docstrings import fill
from ..._errors import InvalidPlanStateError
from ..._plan_cache import PlanCache
from ..._streams import refuse_in_capture, stream_handle, stream_pointer
from . import _algorithms
from ._docs import MATMUL_DOCS
from ._epilog_operands import is_number, scale_items, split_scales
from ._layouts import c_in_d_order, expand_c, stage_a, stage_b, stage_matrix
from ._options import MatmulOptions, check_scalar
from ._resolve import engine_request, make_call, plan_problem, resolve, stage_input

__all__ = ["Matmul", "matmul_plan_cache"]

#: The plan cache behind :func:`mathpy.matmul` (resize or clear it with its methods). Keyed by the problem, the
#: execution space, options and preferences; not by stream: the engine takes the stream (and a workspace for it) at
#: each execution.
matmul_plan_cache = PlanCache("matmul", max_plans=64, max_bytes=1 << 30)

_FREED, _CREATED, _PLANNED = "freed", "created", "planned"


@fill(MATMUL_DOCS)
class Matmul:
    """A planned matrix product ``D = epilog(alpha * a @ b + beta * c)`` with numpy.matmul semantics, executed many
    times (nvmath-python's stateful API). :func:`~mathpy.matmul` is a thin layer over it.

    Parameters
    ----------
    {operands}
    {options}
    execution : str, ExecutionCPU, ExecutionCUDA or dict, optional
        {execution}
    stream : int or stream object, optional
        The stream of work done while the Matmul is built (none today: operands are read in place or staged at
        execution). Every later call takes its own ``stream`` (default: the current one when it is made).
    {quantization_scales}

    Raises
    ------
    {raises}

    Notes
    -----
    Life cycle: :meth:`plan` (choose the epilog; returns the candidate algorithms), optionally :meth:`autotune`,
    :meth:`execute` any number of times (:meth:`reset_operands` between them), :meth:`free` (or use ``with``). A
    call in the wrong state raises :class:`~mathpy.InvalidPlanStateError`. Every :meth:`execute` reads the
    operands' current contents; :meth:`release_operands` drops them until :meth:`reset_operands` gives new ones.
    With ``MatmulOptions(inplace=True)`` the result is written into ``c`` and :meth:`execute` returns ``c``.

    {notes}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    >>> with mathpy.Matmul(a, b) as mm:
    ...     algorithms = mm.plan(epilog="bias", epilog_inputs={"bias": np.array([1.0, -1.0])})
    ...     first = mm.execute()
    ...     mm.reset_operands(a=2 * a)
    ...     second = mm.execute()
    >>> first
    array([[ 4.,  4.],
           [11., 11.]])
    >>> second
    array([[ 7.,  7.],
           [23., 23.]])
    """

    def __init__(self, a, b, c=None, *, alpha=1, beta=None, options=None, execution=None, stream=None,
                 quantization_scales=None):
        self._state = _FREED  # until construction succeeds
        self._engine = self._release = self._call = self._problem = self._spec = None
        self._released, self._inputs = False, {}
        self._r = r = resolve(a, b, c, alpha, beta, options, execution, quantization_scales)
        self._grad = _torch_route.grad_names(a=a, b=b, c=c)  # no backward here: execute refuses in grad mode
        stream_handle(stream)  # checked now; each call resolves its own stream (see mathpy._streams)
        self._state = _CREATED
        p, types = r.product, r.types
        r.logger.debug("Matmul %s x %s -> %s (batch %s), %s, %s on %s%s", (p.m, p.k), (p.k, p.n), r.result_shape,
                       p.batch_shape, types.result, types.compute, r.execution,
                       ", in place" if r.options.inplace else "")

    # -- planning -----------------------------------------------------------------------------------------------------

    @fill(MATMUL_DOCS)
    def plan(self, epilog=None, epilog_inputs=None, preferences=None, algorithms=None, *, stream=None):
        """Choose the epilog and build the plan: validation, layouts, the engine (cuBLASLt's heuristic on a GPU).

        {plan}
        """
        self._check_not_freed("plan")
        r = self._r
        handle = stream_pointer(stream, r.holder.name, r.device_id) if r.on_gpu else None
        arguments = dict(epilog=epilog, epilog_inputs=epilog_inputs, preferences=preferences, algorithms=algorithms)
        problem, spec, inputs, preferences = plan_problem(r, epilog, epilog_inputs, preferences)
        self._bind_engine(problem, preferences, algorithms, handle)
        self._problem, self._spec, self._inputs = problem, spec, inputs
        self._plan_arguments = arguments  # (a reset of scales given as numbers plans again with them)
        self._grad = tuple(n for n in self._grad if n != "epilog_inputs") + \
            _torch_route.grad_names(epilog_inputs=epilog_inputs)
        self._state = _PLANNED
        self._make_call()
        r.logger.debug("Matmul planned: epilog %s, %d candidate algorithms, workspace %d bytes", spec.name,
                       len(self._engine.algorithms), self._engine.workspace_bytes)
        return list(self._engine.algorithms)

    def _bind_engine(self, problem, preferences, algorithms, handle):
        """Make the engine of ``problem`` and adopt ``algorithms``."""
        # The old plan goes first (its workspace is freed before the new one is taken); from here a failure must not
        # leave this object looking planned with a freed engine, so it falls back to the unplanned state.
        self._release_engine()
        self._state = _CREATED
        try:
            _, create = engine_request(self._r, problem, preferences, handle, "Matmul.plan")
            self._engine = create()[0]
            self._release = weakref.finalize(self, self._engine.free)
            if algorithms is not None:
                chosen = _algorithms.adopt(self._engine, algorithms)
                if not chosen:
                    raise ValueError(f"plan(algorithms=...): none of the given algorithms {list(algorithms)!r} is "
                                     f"a candidate for this problem; the candidates are "
                                     f"{list(self._engine.algorithms)!r}")
                self._engine.algorithms[:] = chosen
        except BaseException:
            self._release_engine()
            raise

    @property
    def algorithms(self):
        """The candidate algorithms of the current plan, the one in use first."""
        self._check_planned("algorithms")
        return list(self._engine.algorithms)

    @property
    def prepared_call(self):
        """The :class:`~._call.MatmulCall` that ``execute()`` runs (None before ``plan()``)."""
        return self._call

    @fill(MATMUL_DOCS)
    def autotune(self, iterations=3, prune=None, *, release_workspace=False, stream=None):
        """Time every candidate algorithm on the current operands and keep the fastest.

        {autotune}
        """
        self._check_planned("autotune")
        self._check_operands("autotune")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"iterations must be a positive int, not {iterations!r}")
        if prune is not None and (isinstance(prune, bool) or not isinstance(prune, int) or prune < 1):
            raise ValueError(f"prune must be None or a positive int, not {prune!r}")
        stream = stream_pointer(stream, self._r.holder.name, self._r.device_id) if self._r.on_gpu else None
        if self._r.on_gpu:
            refuse_in_capture(self._r.holder, self._r.device_id, stream, "Matmul.autotune",
                              "it times the candidates with events and waits for them on the host",
                              "autotune before the capture begins")
        args, scratch = self._call.arguments(stream)  # scratch lives until the runs are enqueued
        lock = getattr(self._engine, "lock", None)
        if lock is None:
            timings = self._engine.autotune(args, stream, iterations)
        else:
            with lock:
                timings = self._engine.autotune(args, stream, iterations)
        del scratch
        if prune is not None and len(self._engine.algorithms) > prune:
            self._engine.algorithms[:] = [alg for alg, _ in timings][:prune]
        if release_workspace:
            _algorithms.release_workspace(self._engine)
        self._r.logger.debug("Matmul autotune: %s", timings)
        return timings

    # -- execution ----------------------------------------------------------------------------------------------------

    @fill(MATMUL_DOCS)
    def execute(self, stream=None, *, algorithm=None, release_workspace=False):
        """Compute the product on the operands' current contents.

        {execute}
        """
        if self._grad:
            _torch_route.refuse("Matmul.execute", self._grad)
        call = self._call
        if call is None:
            self._check_planned("execute")
            self._check_operands("execute")
        if stream is not None and self._r.on_gpu:
            stream = stream_pointer(stream, self._r.holder.name, self._r.device_id)
        if algorithm is None and not release_workspace:
            return call.execute(stream)  # None: the current stream, resolved there
        if release_workspace and self._r.on_gpu:
            refuse_in_capture(self._r.holder, self._r.device_id, stream, "Matmul.execute(release_workspace=True)",
                              "replays would use the workspace given back", "leave it False while capturing")
        with _algorithms.using(self._engine, algorithm):
            result = call.execute(stream)
        if release_workspace:
            _algorithms.release_workspace(self._engine)
        return result

    @fill(MATMUL_DOCS)
    def reset_operands(self, a=None, b=None, c=None, epilog_inputs=None, *, alpha=None, beta=None,
                       quantization_scales=None, stream=None):
        """Use other operands from the next :meth:`execute` on, without planning again.

        {reset_operands}
        """
        self._check_not_freed("reset_operands")
        stream_handle(stream)
        if quantization_scales is not None:
            self._check_planned("reset_operands(quantization_scales=...)")
            given, tensors = split_scales(quantization_scales, MatmulOptions())
            numbers = {n: getattr(given, n) for n in scale_items(quantization_scales) if n not in tensors}
            planned = set(self._r.scale_tensors)
            mixed = sorted(set(tensors) - planned) + sorted(set(numbers) & planned)
            if mixed:
                raise ValueError(f"reset_operands: scales {mixed} were planned as the other kind; a scale given as a "
                                 f"tensor is reset to a tensor, one given as a number to a number")
            inputs_given, epilog_inputs = epilog_inputs, {**(epilog_inputs or {}), **tensors}
        if self._released:
            needed = [n for n in ("a", "b", "c") if n in self._r.staged] + list(self._inputs)
            given = {"a": a, "b": b, "c": c, **(epilog_inputs or {})}
            missing = [n for n in needed if given.get(n) is None]
            if missing:
                raise ValueError(f"reset_operands: the operands were released; give them all again (missing "
                                 f"{missing})")
        scalars = self._new_scalars(alpha, beta)
        new, new_c_given = {}, None
        for name, value in (("a", a), ("b", b), ("c", c)):
            if value is None:
                continue
            if name not in self._r.staged:
                raise ValueError("reset_operands(c=...): the Matmul was built without c")
            op = _operands.wrap_operand(value, name, written=name == "c" and self._r.options.inplace)
            if name == "c":
                if tuple(op.shape) != self._r.c_shape:
                    raise ValueError(f"reset_operands: c has shape {op.shape}, the plan was built for "
                                     f"{self._r.c_shape}")
                op = expand_c(op, self._r.result_shape, self._r.vector_a, self._r.vector_b)
                p = self._r.product
                new_c_given = stage_matrix(name, op, p.m, p.n, None, p.batch_shape, p.moves, self._r.types.engine_c)
                self._r.c_given.check_replacement(new_c_given)
                fresh = c_in_d_order(new_c_given, self._problem.d, p) if self._state == _PLANNED else new_c_given
            else:
                fresh = (stage_a if name == "a" else stage_b)(op, self._r.product)
            self._r.staged[name].check_replacement(fresh)
            new[name] = fresh
        if epilog_inputs is not None:
            self._check_planned("reset_operands(epilog_inputs=...)")
            if not isinstance(epilog_inputs, dict):
                raise TypeError(f"epilog_inputs must be a dict, not {type(epilog_inputs).__name__}")
            if is_number(epilog_inputs.get("aux_scale")):
                raise ValueError("reset_operands: aux_scale can be reset only when plan() was given it as an array")
            unknown = sorted(set(epilog_inputs) - set(self._inputs))  # (the scale tensors are inputs too)
            if unknown:
                raise ValueError(f"reset_operands: epilog inputs {unknown} are not used by the plan's epilog "
                                 f"{self._spec.name}; it takes {list(self._inputs)}")
            for name, value in epilog_inputs.items():
                fresh = stage_input(self._r, name, value, self._spec)
                self._inputs[name].check_replacement(fresh)
                new[name] = fresh
        replaced = {"a": a, "b": b, "c": c, "epilog_inputs": epilog_inputs}
        self._grad = tuple(n for n in self._grad if replaced.get(n) is None) + _torch_route.grad_names(
            **{name: value for name, value in replaced.items() if value is not None})
        for name, fresh in new.items():
            if name in self._r.staged:
                self._r.staged[name] = fresh
            else:
                self._inputs[name] = fresh
        if new_c_given is not None:
            self._r.c_given = new_c_given
        if c is not None:
            self._r.c_object = c
        if a is not None:
            self._r.like = self._r.staged["a"].op
        self._r.alpha, self._r.beta = scalars
        self._released = False
        if quantization_scales is not None and numbers:  # they are the plan's (cuBLASLt's scale buffer, or alpha)
            self._r.options = dataclasses.replace(self._r.options, **numbers)
            self._r.scale_tensors = {**self._r.scale_tensors, **tensors}
            arguments = dict(self._plan_arguments)
            arguments["epilog_inputs"] = {**(arguments["epilog_inputs"] or {}), **(inputs_given or {})} or None
            self.plan(**arguments)
        elif self._state == _PLANNED:
            self._make_call()

    def release_operands(self):
        """Drop the references to the operands (and epilog inputs) until :meth:`reset_operands` gives them all
        again; ``execute()`` meanwhile raises InvalidPlanStateError."""
        self._check_not_freed("release_operands")
        self._r.staged = {name: s.released() for name, s in self._r.staged.items()}
        self._inputs = {name: s.released() for name, s in self._inputs.items()}
        if self._r.c_given is not None:
            self._r.c_given = self._r.c_given.released()
        self._r.like = self._r.staged["a"].op
        self._r.c_object, self._call, self._released = None, None, True

    def free(self):
        """Release the plan (library handles, descriptors, workspace) now; idempotent. The Matmul cannot be used
        afterwards (a ``with`` block calls it on exit)."""
        self._release_engine()
        self._state = _FREED
        self._inputs = self._call = None
        self._r.staged = self._r.c_given = self._r.like = self._r.c_object = None  # the operands are let go

    def __enter__(self):
        self._check_not_freed("__enter__")
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        r = getattr(self, "_r", None)
        p = None if r is None else r.product
        m, n, k = (p.m, p.n, p.k) if p is not None else ("?", "?", "?")
        return f"<Matmul {self._state} m={m} n={n} k={k} on {'?' if r is None else r.execution}>"

    # -- internals ----------------------------------------------------------------------------------------------------

    def _check_not_freed(self, what):
        if self._state == _FREED:
            raise InvalidPlanStateError(f"Matmul.{what}: the Matmul was freed; create a new one")

    def _check_planned(self, what):
        self._check_not_freed(what)
        if self._state != _PLANNED:
            raise InvalidPlanStateError(f"Matmul.{what}: call plan() first")

    def _check_operands(self, what):
        if self._released:
            raise InvalidPlanStateError(f"Matmul.{what}: the operands were released; give them with "
                                        f"reset_operands(...) first")

    def _new_scalars(self, alpha, beta):
        """``(alpha, beta)`` after a reset of either (checked against the scale type; beta needs c)."""
        new_alpha = self._r.alpha if alpha is None else check_scalar(alpha, "alpha", self._r.types)
        if beta is not None and "c" not in self._r.staged and beta != 0:
            raise ValueError(f"beta = {beta!r} needs an operand c; the Matmul was built without c")
        new_beta = self._r.beta if beta is None else check_scalar(beta, "beta", self._r.types)
        return new_alpha, new_beta

    def _release_engine(self):
        release, self._release, self._engine, self._call = self._release, None, None, None
        if release is not None:
            release()

    def _make_call(self):
        self._call = make_call(self._r, self._problem, self._engine, self._inputs, None)
