"""The stateful :class:`Matmul`: numpy.matmul semantics on cuBLASLt (GPU) or NumPy (CPU), planned once, executed many
times. The stateless :func:`~._stateless.matmul` is a thin layer over it.

The constructor resolves numpy.matmul's rules (batch broadcasting, 1-D operands), the dtypes and where the product
runs; ``plan()`` validates the epilog and its inputs (:mod:`._epilog_operands`), chooses every layout
(:mod:`._layouts`), builds the :class:`~._problem.MatmulProblem`, makes an engine (or borrows one from the plan cache)
and the :class:`~._call.MatmulCall` that every ``execute()`` runs. Results come back in the caller's package and on
its device.

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
import math
import weakref

import numpy as np

from ... import _cuda, _engines, _operands, _torch_route
from ..._docstrings import fill
from ..._errors import InvalidPlanStateError
from ..._execution import ExecutionCPU, ExecutionCUDA, resolve_execution
from ..._log import logger
from ..._options import check_or_create_options
from ..._plan_cache import PlanCache, PlanKey
from ..._streams import refuse_in_capture, refuse_planning_in_capture, stream_handle, stream_pointer
from ._call import Finish, MatmulCall, holder_for
from ._docs import MATMUL_DOCS
from ._epilog import as_epilog, epilog_spec
from . import _algorithms
from ._epilog_operands import (HANDLERS, Data, gelu_aux_dtype, given_inputs, is_number, output_layouts, scale_items,
                               split_scales)
from ._fused import check_fused_problem, fused_epilog, plan_fused
from ._layouts import (Product, c_in_d_order, check_inplace, expand_c, inplace_layout, result_layout, stage_a, stage_b,
                       stage_matrix)
from ._numpy_rules import check_c_shape, product_shape
from ._options import (FLOAT8_DTYPES, I8, MatmulOptions, MatmulPlanPreferences, check_scalar, is_floating,
                       refuse_block_scaling,
                       resolve_types)
from ._problem import MatmulProblem

__all__ = ["Matmul", "matmul_plan_cache", "make_engine"]

#: The plan cache behind :func:`mathpy.matmul` (resize or clear it with its methods). Keyed by the problem, the
#: execution space, options and preferences; not by stream: the engine takes the stream (and a workspace for it) at
#: each execution.
matmul_plan_cache = PlanCache("matmul", max_plans=64, max_bytes=1 << 30)

_FREED, _CREATED, _PLANNED = "freed", "created", "planned"


def make_engine(problem, execution, options, preferences, allocator):
    """The engine for ``problem`` (:mod:`mathpy._engines`: NumPy on the CPU, cuBLASLt on a GPU with workspaces from
    ``allocator``, a :class:`~mathpy._packages.PackageStream`; mathpy's own GEMM for a Python epilog)."""
    api = "matmul" if problem.fused is None else "matmul-fused"
    if isinstance(execution, ExecutionCPU):
        return _engines.get(api, "cpu")(problem, execution=execution, options=options, preferences=preferences)
    return _engines.get(api, "cuda")(problem, execution=execution, options=options, preferences=preferences,
                                     allocator=allocator)


def _result_holder(a_op, on_gpu, moves):
    """The package results are allocated in: ``a``'s where it can hold them on the execution device, else the device
    package (GPU) or NumPy (CPU); ``moves``: the operands change device."""
    if on_gpu:
        holder = a_op.package if (_operands.holder_of(a_op.package).name == a_op.package and not moves) else \
            _operands.device_package()
        return holder_for(holder, True)
    return holder_for(a_op.package if (not moves and a_op.package in ("numpy", "torch")) else "numpy", False)


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
        self._setup(a, b, c, alpha, beta, options, execution, stream, quantization_scales, None)

    @classmethod
    def for_cache(cls, cache, a, b, c=None, *, alpha=1, beta=None, options=None, execution=None, stream=None,
                  quantization_scales=None):
        """A Matmul for the stateless call, whose ``plan()`` borrows its engine from ``cache`` (a PlanCache). The
        stateless call has already asked the torch route (nothing here needs a gradient) and resolves the stream
        when it plans, so neither is asked again."""
        self = cls.__new__(cls)
        self._setup(a, b, c, alpha, beta, options, execution, stream, quantization_scales, cache)
        return self

    def _setup(self, a, b, c, alpha, beta, options, execution, stream, quantization_scales, cache):
        self._state = _FREED  # until construction succeeds
        self._engine = self._release = self._call = None
        self._cache, self._released = cache, False
        options = check_or_create_options(MatmulOptions, options, "options")
        options, self._scale_tensors = split_scales(quantization_scales, options)
        self._logger = options.logger or logger
        for name, value in (("a", a), ("b", b)):
            if value is None:  # wrap_operands takes None for "no operand" (c)
                _operands.wrap_operand(value, name)  # TypeError: "a: expected an array, got NoneType"
        ops = _operands.wrap_operands({"a": a, "b": b, "c": c}, written=("c",) if options.inplace else ())
        # no backward here: execute refuses in grad mode (the stateless call asked the route already)
        self._grad = () if cache is not None else _torch_route.grad_names(a=a, b=b, c=c)
        a_op, b_op, c_op = ops["a"], ops["b"], ops["c"]
        m, n, k, batch_shape, result_shape = product_shape(a_op, b_op)
        execution = resolve_execution(execution, a_op.device_id)
        on_gpu = isinstance(execution, ExecutionCUDA)
        if on_gpu:
            _cuda.require_device(execution.device_id)  # first: before a GPU array package is looked for
        if options.block_scaling:
            refuse_block_scaling(a_op.dtype, execution if on_gpu else None)
        if on_gpu and m * n * k * math.prod(batch_shape) == 0:
            execution, on_gpu = ExecutionCPU(), False  # empty problems: nothing for cuBLASLt to do
        types = resolve_types(a_op.dtype, b_op.dtype, c_op and c_op.dtype, options, on_gpu)
        if beta is None:
            beta = 0 if c_op is None else 1
        alpha = check_scalar(alpha, "alpha", types)
        if c_op is None and beta != 0:
            raise ValueError(f"beta = {beta!r} needs an operand c; pass c or leave beta at 0")
        beta = check_scalar(beta, "beta", types)
        if options.inplace:
            check_inplace(c_op, result_shape, types.result)
        check_c_shape(c_op, result_shape)
        moves = (a_op.device_id is None) == on_gpu or (on_gpu and a_op.device_id != execution.device_id)

        # cuBLASLt has float8 and int8 kernels only in its "TN" form: the API stages A row-major, B column-major
        tn_gpu = on_gpu and (types.operand in FLOAT8_DTYPES or types.operand == I8)
        self._product = Product(m, n, k, batch_shape, moves, tn_gpu, operand=types.operand)
        self._staged = {"a": stage_a(a_op, self._product), "b": stage_b(b_op, self._product)}
        self._c_given = None  # C as given, before plan() puts it in D's order
        if c_op is not None:
            c_view = expand_c(c_op, result_shape, a_op.ndim == 1, b_op.ndim == 1)
            self._c_given = stage_matrix("c", c_view, m, n, None, batch_shape, moves, types.engine_c)
            self._staged["c"] = self._c_given
        self._vector_a, self._vector_b = a_op.ndim == 1, b_op.ndim == 1
        self._result_shape, self._d_dtype, self._types = result_shape, types.result, types
        self._compute_type, self._scale_type = types.compute, types.scale
        self._alpha, self._beta, self._options = alpha, beta, options
        self._execution, self._on_gpu = execution, on_gpu
        self._like = a_op  # results go to a's package and device
        self._c_object = c  # in place: the caller's c is the result
        self._inputs = {}
        self._c_shape = None if c_op is None else tuple(c_op.shape)
        self._device_id = execution.device_id if on_gpu else None
        self._holder = _result_holder(a_op, on_gpu, moves)
        if cache is None or not on_gpu:  # (the stateless call's plan() resolves it on a GPU)
            stream_handle(stream)  # checked now; each call resolves its own stream (see mathpy._streams)
        self._state = _CREATED
        self._logger.debug("Matmul %s x %s -> %s (batch %s), %s, %s on %s%s", (m, k), (k, n), result_shape,
                           batch_shape, types.result, types.compute, execution, ", in place" if options.inplace else "")

    # -- planning -----------------------------------------------------------------------------------------------------

    @fill(MATMUL_DOCS)
    def plan(self, epilog=None, epilog_inputs=None, preferences=None, algorithms=None, *, stream=None):
        """Choose the epilog and build the plan: validation, layouts, the engine (cuBLASLt's heuristic on a GPU).

        {plan}
        """
        self._check_not_freed("plan")
        handle = stream_pointer(stream, self._holder.name, self._device_id) if self._on_gpu else None
        arguments = dict(epilog=epilog, epilog_inputs=epilog_inputs, preferences=preferences, algorithms=algorithms)
        fused = fused_epilog(epilog, epilog_inputs)  # a Python function: checked here, before any work
        if fused is not None:
            check_fused_problem(fused, self._staged["a"].layout.dtype, self._staged["b"].layout.dtype, self._d_dtype,
                                self._compute_type)
            epilog = None
        epilog = as_epilog(epilog)
        spec = epilog_spec(epilog)
        preferences = check_or_create_options(MatmulPlanPreferences, preferences, "preferences")
        d_dtype = self._d_dtype
        self._check_epilog(epilog, spec)
        given, aux_scale, wanted = given_inputs(epilog_inputs, epilog, spec, fused)
        self._fused = fused  # (a Python epilog's operands may have any name: _stage_input)
        aux_dtype = gelu_aux_dtype(spec, preferences.aux_type, preferences.aux_amax, aux_scale is not None,
                                   self._staged["a"].op.dtype, self._staged["b"].op.dtype, d_dtype,
                                   None if self._c_given is None else self._c_given.op.dtype)
        # a required input given as None is named ("bias: expected an array"); a Python epilog's data is optional
        inputs = {name: self._stage_input(name, given[name], spec) for name in wanted
                  if name in given and not (fused is not None and given[name] is None)}
        inputs.update({name: self._stage_input(name, value, spec) for name, value in self._scale_tensors.items()})
        if aux_scale is not None and not is_number(aux_scale):
            inputs["aux_scale"] = self._stage_input("aux_scale", aux_scale, spec)
        aux_scale = None if aux_dtype not in FLOAT8_DTYPES or "aux_scale" in inputs else float(aux_scale or 1.0)
        bgrad = spec.bgrad if self._on_gpu and spec.bgrad in ("a", "b") else None
        if bgrad != self._product.bgrad:  # BGRADA/BGRADB need their own A/B layouts
            self._product = self._product._replace(bgrad=bgrad)
            self._staged["a"] = stage_a(self._staged["a"].op, self._product)
            self._staged["b"] = stage_b(self._staged["b"].op, self._product)

        p = self._product
        if self._options.inplace:
            d_layout = inplace_layout(self._c_given, epilog)
        else:
            d_layout = result_layout(epilog, self._types.engine_result, self._staged["a"], self._staged["b"],
                                     self._c_given, p, self._options.result_order)
        if fused is not None:  # bounds, its own result layout and, on a GPU, its route (_fused_route)
            fused, d_layout = plan_fused(fused, inputs, p, d_layout.batch, d_dtype, self._options, self._staged,
                                         self._c_given, self._compute_type, self._device_id, preferences.epilog_route,
                                         self._logger)
        if self._c_given is not None:
            self._staged["c"] = c_in_d_order(self._c_given, d_layout, p)
        problem = MatmulProblem(
            m=p.m, n=p.n, k=p.k, batch=d_layout.batch, batch_shape=p.batch_shape, a=self._staged["a"].layout,
            b=self._staged["b"].layout, c=self._staged["c"].layout if "c" in self._staged else None, d=d_layout,
            compute_type=self._compute_type, scale_type=self._scale_type, epilog=epilog,
            epilog_inputs=tuple((name, s.layout) for name, s in inputs.items()),
            epilog_outputs=output_layouts(spec, p.m, p.n, d_layout.batch, d_dtype, self._options.result_amax,
                                          aux_dtype, preferences.aux_amax),
            inplace=self._options.inplace, **self._float8_scales(), aux_scale=aux_scale,
            fused=fused)

        cache_key = self._bind_engine(problem, preferences, algorithms, handle)
        self._problem, self._spec, self._inputs, self._cache_key = problem, spec, inputs, cache_key
        self._plan_arguments = arguments  # (a reset of scales given as numbers plans again with them)
        if self._cache is None:
            self._grad = tuple(n for n in self._grad if n != "epilog_inputs") + \
                _torch_route.grad_names(epilog_inputs=epilog_inputs)
        self._state = _PLANNED
        self._make_call()
        self._logger.debug("Matmul planned: epilog %s, %d candidate algorithms, workspace %d bytes", spec.name,
                           len(self._engine.algorithms), self._engine.workspace_bytes)
        return list(self._engine.algorithms)

    def _check_epilog(self, epilog, spec):
        """ValueError when cuBLASLt's ``epilog`` (None: none) cannot apply to this product: complex or integer
        results, an operand it cannot take, K = 1 for a backward activation, a d_scale it would not commute with."""
        d_dtype = self._d_dtype
        if epilog is not None and d_dtype.kind == "c":
            raise ValueError(f"epilog {epilog.name} does not apply to complex operands ({d_dtype.name}); "
                             f"epilogs need real dtypes")
        if epilog is not None and not (is_floating(d_dtype) and is_floating(self._types.operand)):
            raise ValueError(f"epilog {epilog.name} does not apply to {self._types.operand.name} operands "
                             f"({d_dtype.name} result); epilogs need cuBLASLt's floating-point dtypes (float16, "
                             f"bfloat16, float32, float64, float8)")
        for name in (*spec.inputs, *spec.outputs):
            HANDLERS[name].check(spec, d_dtype)
        if spec.activation in ("drelu", "dgelu") and self._product.k == 1:
            raise ValueError(f"epilog {epilog.name} needs K > 1 (cuBLASLt does not support K = 1); K is 1")
        d_scale = self._options.d_scale
        if epilog is not None and d_scale not in (None, 1) and d_dtype not in FLOAT8_DTYPES:
            # cuBLASLt applies d_scale to float8 results only; otherwise it is folded into alpha, which an epilog
            # (a non-linear one, or a bias added after the product) would not commute with
            raise ValueError(f"d_scale={d_scale} applies to float8 results; with a {d_dtype.name} result and "
                             f"epilog {epilog.name} it cannot be folded into alpha: scale alpha instead, or use a "
                             f"float8 result_type")

    def _bind_engine(self, problem, preferences, algorithms, handle):
        """Take the engine of ``problem`` (from the plan cache, or made for this object) and adopt ``algorithms``;
        returns the cache key (None without a cache)."""
        # The old plan goes first (its workspace counts against the cache bound); from here a failure must not
        # leave this object looking planned with a freed engine, so it falls back to the unplanned state.
        self._release_engine()
        self._state = _CREATED
        try:
            execution, options = self._execution, self._options
            allocator = self._holder.on(self._device_id, handle) if self._on_gpu else None

            def create():
                if allocator is not None:
                    refuse_planning_in_capture(self._holder, self._device_id, handle, "Matmul.plan")
                engine = make_engine(problem, execution, options, preferences, allocator)
                return engine, engine.workspace_bytes

            cache_key = None
            if self._cache is not None:
                cache_key = PlanKey((problem.key, execution, options, preferences, self._holder.name))  # (see FFT)
                entry = self._cache.acquire(cache_key, create)
                cache = self._cache
                self._engine, self._release = entry.plan, lambda: cache.release(entry)
            else:
                self._engine = create()[0]
                self._release = weakref.finalize(self, self._engine.free)
            if algorithms is not None:
                chosen = _algorithms.adopt(self._engine, algorithms) if self._cache is None else []
                if not chosen:
                    raise ValueError(f"plan(algorithms=...): none of the given algorithms {list(algorithms)!r} is "
                                     f"a candidate for this problem; the candidates are "
                                     f"{list(self._engine.algorithms)!r}")
                self._engine.algorithms[:] = chosen
        except BaseException:
            self._release_engine()
            raise
        return cache_key

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
        stream = stream_pointer(stream, self._holder.name, self._device_id) if self._on_gpu else None
        if self._on_gpu:
            refuse_in_capture(self._holder, self._device_id, stream, "Matmul.autotune",
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
        if release_workspace and self._cache is None:
            _algorithms.release_workspace(self._engine)
        self._logger.debug("Matmul autotune: %s", timings)
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
        if stream is not None and self._on_gpu:
            stream = stream_pointer(stream, self._holder.name, self._device_id)
        if algorithm is None and not release_workspace:
            return call.execute(stream)  # None: the current stream, resolved there
        if release_workspace and self._on_gpu:
            refuse_in_capture(self._holder, self._device_id, stream, "Matmul.execute(release_workspace=True)",
                              "replays would use the workspace given back", "leave it False while capturing")
        with _algorithms.using(self._engine, algorithm):
            result = call.execute(stream)
        if release_workspace and self._cache is None:
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
            mixed = sorted(set(tensors) - set(self._scale_tensors)) + sorted(set(numbers) & set(self._scale_tensors))
            if mixed:
                raise ValueError(f"reset_operands: scales {mixed} were planned as the other kind; a scale given as a "
                                 f"tensor is reset to a tensor, one given as a number to a number")
            inputs_given, epilog_inputs = epilog_inputs, {**(epilog_inputs or {}), **tensors}
        if self._released:
            needed = [n for n in ("a", "b", "c") if n in self._staged] + list(self._inputs)
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
            if name not in self._staged:
                raise ValueError("reset_operands(c=...): the Matmul was built without c")
            op = _operands.wrap_operand(value, name, written=name == "c" and self._options.inplace)
            if name == "c":
                if tuple(op.shape) != self._c_shape:
                    raise ValueError(f"reset_operands: c has shape {op.shape}, the plan was built for {self._c_shape}")
                op = expand_c(op, self._result_shape, self._vector_a, self._vector_b)
                p = self._product
                new_c_given = stage_matrix(name, op, p.m, p.n, None, p.batch_shape, p.moves, self._types.engine_c)
                self._c_given.check_replacement(new_c_given)
                fresh = c_in_d_order(new_c_given, self._problem.d, p) if self._state == _PLANNED else new_c_given
            else:
                fresh = (stage_a if name == "a" else stage_b)(op, self._product)
            self._staged[name].check_replacement(fresh)
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
                fresh = self._stage_input(name, value, self._spec)
                self._inputs[name].check_replacement(fresh)
                new[name] = fresh
        replaced = {"a": a, "b": b, "c": c, "epilog_inputs": epilog_inputs}
        self._grad = tuple(n for n in self._grad if replaced.get(n) is None) + _torch_route.grad_names(
            **{name: value for name, value in replaced.items() if value is not None})
        for name, fresh in new.items():
            if name in self._staged:
                self._staged[name] = fresh
            else:
                self._inputs[name] = fresh
        if new_c_given is not None:
            self._c_given = new_c_given
        if c is not None:
            self._c_object = c
        if a is not None:
            self._like = self._staged["a"].op
        self._alpha, self._beta = scalars
        self._released = False
        if quantization_scales is not None and numbers:  # they are the plan's (cuBLASLt's scale buffer, or alpha)
            self._options = dataclasses.replace(self._options, **numbers)
            self._scale_tensors = {**self._scale_tensors, **tensors}
            arguments = dict(self._plan_arguments)
            arguments["epilog_inputs"] = {**(arguments["epilog_inputs"] or {}), **(inputs_given or {})} or None
            self.plan(**arguments)
        elif self._state == _PLANNED:
            self._make_call()

    def release_operands(self):
        """Drop the references to the operands (and epilog inputs) until :meth:`reset_operands` gives them all
        again; ``execute()`` meanwhile raises InvalidPlanStateError."""
        self._check_not_freed("release_operands")
        self._staged = {name: s.released() for name, s in self._staged.items()}
        self._inputs = {name: s.released() for name, s in self._inputs.items()}
        if self._c_given is not None:
            self._c_given = self._c_given.released()
        self._like = self._staged["a"].op
        self._c_object, self._call, self._released = None, None, True

    def free(self):
        """Release the plan (library handles, descriptors, workspace) now; idempotent. The Matmul cannot be used
        afterwards (a ``with`` block calls it on exit)."""
        self._release_engine()
        self._state = _FREED
        self._staged = self._inputs = self._call = None

    def __enter__(self):
        self._check_not_freed("__enter__")
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        p = getattr(self, "_product", None)
        m, n, k = (p.m, p.n, p.k) if p is not None else ("?", "?", "?")
        return f"<Matmul {self._state} m={m} n={n} k={k} on {getattr(self, '_execution', '?')}>"

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
        new_alpha = self._alpha if alpha is None else check_scalar(alpha, "alpha", self._types)
        if beta is not None and "c" not in self._staged and beta != 0:
            raise ValueError(f"beta = {beta!r} needs an operand c; the Matmul was built without c")
        new_beta = self._beta if beta is None else check_scalar(beta, "beta", self._types)
        return new_alpha, new_beta

    def _release_engine(self):
        release, self._release, self._engine, self._call = self._release, None, None, None
        if release is not None:
            release()

    def _float8_scales(self):
        if self._staged["a"].op.dtype not in FLOAT8_DTYPES:
            if self._scale_tensors:
                raise ValueError("quantization scales apply to float8 operands only")
            return {}
        o = self._options
        if "d_scale" in self._scale_tensors and self._d_dtype not in FLOAT8_DTYPES:
            raise ValueError(f"a d scale given as a tensor applies to float8 results only; the result is "
                             f"{self._d_dtype.name} (give a number: it is folded into alpha)")
        return {name: None if name in self._scale_tensors else (1.0 if value is None else float(value))
                for name, value in (("a_scale", o.a_scale), ("b_scale", o.b_scale), ("d_scale", o.d_scale))}

    def _stage_input(self, name, value, spec):
        op = _operands.wrap_operand(value, name)
        like = self._like
        if op.package != like.package or op.device_id != like.device_id:
            raise ValueError(f"epilog input {name!r} must be of the operands' package and device "
                             f"({like.package}, {like.device_id}); it is {op.package}, {op.device_id}")
        return (HANDLERS[name] if self._fused is None else Data(name)).stage(op, self._product, spec, self._d_dtype)

    def _make_call(self):
        staged = {**self._staged, **self._inputs}
        types = self._types
        finish = Finish(self._vector_a, self._vector_b,
                        self._holder.name == "numpy" and self._like.package == "numpy",
                        self._like if self._product.moves else None, self._options.blocking is True,
                        self._c_object if self._options.inplace else None,
                        types.result if types.engine_result != types.result else None)
        self._call = MatmulCall(self._problem, self._engine, staged, self._holder, self._device_id, self._alpha,
                                self._beta, finish, self._cache_key)
