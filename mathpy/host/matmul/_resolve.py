"""One matmul's arguments resolved, and planned into a problem: the steps both the stateful :class:`~._matmul.Matmul`
and the stateless :func:`~._stateless.run` take, with no object of either.

- :func:`resolve` applies numpy.matmul's rules (:mod:`._numpy_rules`), the dtype rules (:mod:`._options`) and where
  the product runs, and stages the operands (:mod:`._layouts`): a :class:`Resolved`;
- :func:`plan_problem` checks the epilog and its inputs (:mod:`._epilog_operands`), chooses the result's layout (a
  Python epilog's route: :mod:`._fused`) and builds the :class:`~._problem.MatmulProblem` the engines take;
- :func:`engine_request` is what the plan asks of the engines (a plan cache key, and how to make one);
- :func:`make_call` binds a problem, an engine and the staged operands into the :class:`~._call.MatmulCall`.

A ``Resolved`` is the stateful Matmul's record of its operands (``reset_operands`` changes them); the stateless call
makes one per first call with new facts and keeps only the prepared call.
"""

import math

from ... import _cuda, _engines, _operands
from ..._execution import ExecutionCPU, ExecutionCUDA, resolve_execution
from ..._log import logger
from ..._options import check_or_create_options
from ..._plan_cache import PlanKey
from ..._streams import refuse_planning_in_capture
from ._call import Finish, MatmulCall, holder_for
from ._epilog import as_epilog, epilog_spec
from ._epilog_operands import HANDLERS, Data, gelu_aux_dtype, given_inputs, is_number, output_layouts, split_scales
from ._fused import check_fused_problem, fused_epilog, plan_fused
from ._layouts import (Product, c_in_d_order, check_inplace, expand_c, inplace_layout, result_layout, stage_a, stage_b,
                       stage_matrix)
from ._numpy_rules import check_c_shape, product_shape
from ._options import (FLOAT8_DTYPES, I8, MatmulOptions, MatmulPlanPreferences, check_scalar, is_floating,
                       refuse_block_scaling, resolve_types)
from ._problem import MatmulProblem

__all__ = ["Resolved", "resolve", "plan_problem", "engine_request", "make_engine", "make_call", "stage_input"]


def make_engine(problem, execution, options, preferences, allocator):
    """The engine for ``problem`` (:mod:`mathpy._engines`: NumPy on the CPU, cuBLASLt on a GPU with workspaces from
    ``allocator``, a :class:`~mathpy._packages.PackageStream`; mathpy's own GEMM for a Python epilog)."""
    api = "matmul" if problem.fused is None else "matmul-fused"
    if isinstance(execution, ExecutionCPU):
        return _engines.get(api, "cpu")(problem, execution=execution, options=options, preferences=preferences)
    return _engines.get(api, "cuda")(problem, execution=execution, options=options, preferences=preferences,
                                     allocator=allocator)


class Resolved:
    """A matmul's operands and arguments, resolved: the product's ``product`` (M, N, K, batch, staging facts), the
    ``staged`` operands by name, ``c_given`` (C as given, before a plan puts it in D's order), the dtypes
    (``types``, ``d_dtype``), ``alpha`` and ``beta``, the ``options`` and the quantization ``scale_tensors``, where
    it runs (``execution``, ``on_gpu``, ``device_id``), the package results are allocated in (``holder``) and come
    back in (``like``), and the shapes numpy.matmul's result takes (``result_shape``, ``vector_a``, ``vector_b``).
    ``fused``: the Python epilog of the last plan (None: none)."""

    __slots__ = ("product", "staged", "c_given", "vector_a", "vector_b", "result_shape", "d_dtype", "types", "alpha",
                 "beta", "options", "scale_tensors", "execution", "on_gpu", "device_id", "holder", "like", "c_object",
                 "c_shape", "logger", "fused")


def resolve(a, b, c, alpha, beta, options, execution, quantization_scales):
    """The :class:`Resolved` of ``a @ b`` (+ ``c``) with these arguments (numpy.matmul's rules and words; TypeError or
    ValueError naming a bad argument before anything is made)."""
    r = Resolved()
    options = check_or_create_options(MatmulOptions, options, "options")
    options, r.scale_tensors = split_scales(quantization_scales, options)
    r.logger = options.logger or logger
    for name, value in (("a", a), ("b", b)):
        if value is None:  # wrap_operands takes None for "no operand" (c)
            _operands.wrap_operand(value, name)  # TypeError: "a: expected an array, got NoneType"
    ops = _operands.wrap_operands({"a": a, "b": b, "c": c}, written=("c",) if options.inplace else ())
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
    r.alpha = check_scalar(alpha, "alpha", types)
    if c_op is None and beta != 0:
        raise ValueError(f"beta = {beta!r} needs an operand c; pass c or leave beta at 0")
    r.beta = check_scalar(beta, "beta", types)
    if options.inplace:
        check_inplace(c_op, result_shape, types.result)
    check_c_shape(c_op, result_shape)
    moves = (a_op.device_id is None) == on_gpu or (on_gpu and a_op.device_id != execution.device_id)

    # cuBLASLt has float8 and int8 kernels only in its "TN" form: the API stages A row-major, B column-major
    tn_gpu = on_gpu and (types.operand in FLOAT8_DTYPES or types.operand == I8)
    r.product = Product(m, n, k, batch_shape, moves, tn_gpu, operand=types.operand)
    r.staged = {"a": stage_a(a_op, r.product), "b": stage_b(b_op, r.product)}
    r.c_given = None
    if c_op is not None:
        c_view = expand_c(c_op, result_shape, a_op.ndim == 1, b_op.ndim == 1)
        r.c_given = r.staged["c"] = stage_matrix("c", c_view, m, n, None, batch_shape, moves, types.engine_c)
    r.vector_a, r.vector_b = a_op.ndim == 1, b_op.ndim == 1
    r.result_shape, r.d_dtype, r.types, r.options = result_shape, types.result, types, options
    r.execution, r.on_gpu, r.device_id = execution, on_gpu, execution.device_id if on_gpu else None
    r.like = a_op  # results go to a's package and device
    r.c_object = c  # in place: the caller's c is the result
    r.c_shape = None if c_op is None else tuple(c_op.shape)
    r.holder = _result_holder(a_op, on_gpu, moves)
    r.fused = None
    return r


def _result_holder(a_op, on_gpu, moves):
    """The package results are allocated in: ``a``'s where it can hold them on the execution device, else the device
    package (GPU) or NumPy (CPU); ``moves``: the operands change device."""
    if on_gpu:
        holder = a_op.package if (_operands.holder_of(a_op.package).name == a_op.package and not moves) else \
            _operands.device_package()
        return holder_for(holder, True)
    return holder_for(a_op.package if (not moves and a_op.package in ("numpy", "torch")) else "numpy", False)


def plan_problem(r, epilog, epilog_inputs, preferences):
    """``(problem, spec, inputs, preferences)``: the MatmulProblem of Resolved ``r`` with this epilog (an enum, a name
    or a Python function) and its inputs staged by name, the epilog's spec and the checked preferences. BGRADA/BGRADB
    restage A/B in ``r`` (their own layouts), and ``r.fused`` becomes the Python epilog (or None)."""
    fused = fused_epilog(epilog, epilog_inputs)  # a Python function: checked here, before any work
    if fused is not None:
        check_fused_problem(fused, r.staged["a"].layout.dtype, r.staged["b"].layout.dtype, r.d_dtype,
                            r.types.compute)
        epilog = None
    epilog = as_epilog(epilog)
    spec = epilog_spec(epilog)
    preferences = check_or_create_options(MatmulPlanPreferences, preferences, "preferences")
    check_epilog(r, epilog, spec)
    given, aux_scale, wanted = given_inputs(epilog_inputs, epilog, spec, fused)
    r.fused = fused  # (a Python epilog's operands may have any name: stage_input)
    aux_dtype = gelu_aux_dtype(spec, preferences.aux_type, preferences.aux_amax, aux_scale is not None,
                               r.staged["a"].op.dtype, r.staged["b"].op.dtype, r.d_dtype,
                               None if r.c_given is None else r.c_given.op.dtype)
    # a required input given as None is named ("bias: expected an array"); a Python epilog's data is optional
    inputs = {name: stage_input(r, name, given[name], spec) for name in wanted
              if name in given and not (fused is not None and given[name] is None)}
    inputs.update({name: stage_input(r, name, value, spec) for name, value in r.scale_tensors.items()})
    if aux_scale is not None and not is_number(aux_scale):
        inputs["aux_scale"] = stage_input(r, "aux_scale", aux_scale, spec)
    aux_scale = None if aux_dtype not in FLOAT8_DTYPES or "aux_scale" in inputs else float(aux_scale or 1.0)
    bgrad = spec.bgrad if r.on_gpu and spec.bgrad in ("a", "b") else None
    if bgrad != r.product.bgrad:  # BGRADA/BGRADB need their own A/B layouts
        r.product = r.product._replace(bgrad=bgrad)
        r.staged["a"] = stage_a(r.staged["a"].op, r.product)
        r.staged["b"] = stage_b(r.staged["b"].op, r.product)
    return _problem(r, epilog, spec, inputs, fused, aux_dtype, aux_scale, preferences), spec, inputs, preferences


def _problem(r, epilog, spec, inputs, fused, aux_dtype, aux_scale, preferences):
    """The MatmulProblem (the result's layout chosen, C put in its order) of :func:`plan_problem`."""
    p, options = r.product, r.options
    if options.inplace:
        d_layout = inplace_layout(r.c_given, epilog)
    else:
        d_layout = result_layout(epilog, r.types.engine_result, r.staged["a"], r.staged["b"], r.c_given, p,
                                 options.result_order)
    if fused is not None:  # bounds, its own result layout and, on a GPU, its route (_fused_route)
        fused, d_layout = plan_fused(fused, inputs, p, d_layout.batch, r.d_dtype, options, r.staged, r.c_given,
                                     r.types.compute, r.device_id, preferences.epilog_route, r.logger)
    if r.c_given is not None:
        r.staged["c"] = c_in_d_order(r.c_given, d_layout, p)
    return MatmulProblem(
        m=p.m, n=p.n, k=p.k, batch=d_layout.batch, batch_shape=p.batch_shape, a=r.staged["a"].layout,
        b=r.staged["b"].layout, c=r.staged["c"].layout if "c" in r.staged else None, d=d_layout,
        compute_type=r.types.compute, scale_type=r.types.scale, epilog=epilog,
        epilog_inputs=tuple((name, s.layout) for name, s in inputs.items()),
        epilog_outputs=output_layouts(spec, p.m, p.n, d_layout.batch, r.d_dtype, options.result_amax, aux_dtype,
                                      preferences.aux_amax),
        inplace=options.inplace, **float8_scales(r), aux_scale=aux_scale, fused=fused)


def check_epilog(r, epilog, spec):
    """ValueError when cuBLASLt's ``epilog`` (None: none) cannot apply to this product: complex or integer
    results, an operand it cannot take, K = 1 for a backward activation, a d_scale it would not commute with."""
    d_dtype = r.d_dtype
    if epilog is not None and d_dtype.kind == "c":
        raise ValueError(f"epilog {epilog.name} does not apply to complex operands ({d_dtype.name}); "
                         f"epilogs need real dtypes")
    if epilog is not None and not (is_floating(d_dtype) and is_floating(r.types.operand)):
        raise ValueError(f"epilog {epilog.name} does not apply to {r.types.operand.name} operands "
                         f"({d_dtype.name} result); epilogs need cuBLASLt's floating-point dtypes (float16, "
                         f"bfloat16, float32, float64, float8)")
    for name in (*spec.inputs, *spec.outputs):
        HANDLERS[name].check(spec, d_dtype)
    if spec.activation in ("drelu", "dgelu") and r.product.k == 1:
        raise ValueError(f"epilog {epilog.name} needs K > 1 (cuBLASLt does not support K = 1); K is 1")
    d_scale = r.options.d_scale
    if epilog is not None and d_scale not in (None, 1) and d_dtype not in FLOAT8_DTYPES:
        # cuBLASLt applies d_scale to float8 results only; otherwise it is folded into alpha, which an epilog
        # (a non-linear one, or a bias added after the product) would not commute with
        raise ValueError(f"d_scale={d_scale} applies to float8 results; with a {d_dtype.name} result and "
                         f"epilog {epilog.name} it cannot be folded into alpha: scale alpha instead, or use a "
                         f"float8 result_type")


def float8_scales(r):
    """The problem's a/b/d scales given as numbers (None: a tensor input; {} for other than float8 operands)."""
    if r.staged["a"].op.dtype not in FLOAT8_DTYPES:
        if r.scale_tensors:
            raise ValueError("quantization scales apply to float8 operands only")
        return {}
    o = r.options
    if "d_scale" in r.scale_tensors and r.d_dtype not in FLOAT8_DTYPES:
        raise ValueError(f"a d scale given as a tensor applies to float8 results only; the result is "
                         f"{r.d_dtype.name} (give a number: it is folded into alpha)")
    return {name: None if name in r.scale_tensors else (1.0 if value is None else float(value))
            for name, value in (("a_scale", o.a_scale), ("b_scale", o.b_scale), ("d_scale", o.d_scale))}


def stage_input(r, name, value, spec):
    """Epilog input ``name`` staged for Resolved ``r`` (of the operands' package and device, else ValueError)."""
    op = _operands.wrap_operand(value, name)
    like = r.like
    if op.package != like.package or op.device_id != like.device_id:
        raise ValueError(f"epilog input {name!r} must be of the operands' package and device "
                         f"({like.package}, {like.device_id}); it is {op.package}, {op.device_id}")
    return (HANDLERS[name] if r.fused is None else Data(name)).stage(op, r.product, spec, r.d_dtype)


def engine_request(r, problem, preferences, handle, what):
    """``(plan cache key, create)`` of ``problem``'s engine: ``create()`` makes one (on raw stream ``handle`` on a
    GPU) and returns it with its workspace bytes; ``what`` names the caller in a refusal during a graph capture."""
    execution, options, holder, device_id = r.execution, r.options, r.holder, r.device_id
    allocator = holder.on(device_id, handle) if r.on_gpu else None

    def create():
        if allocator is not None:
            refuse_planning_in_capture(holder, device_id, handle, what)
        engine = make_engine(problem, execution, options, preferences, allocator)
        return engine, engine.workspace_bytes

    # the holder package too: an engine takes other streams' workspaces from its pool (see the FFT's)
    return PlanKey((problem.key, execution, options, preferences, holder.name)), create


def make_call(r, problem, engine, inputs, cache_key):
    """The :class:`~._call.MatmulCall` of ``problem`` on ``engine`` with ``r``'s staged operands and these staged
    epilog ``inputs``."""
    types = r.types
    finish = Finish(r.vector_a, r.vector_b, r.holder.name == "numpy" and r.like.package == "numpy",
                    r.like if r.product.moves else None, r.options.blocking is True,
                    r.c_object if r.options.inplace else None,
                    types.result if types.engine_result != types.result else None)
    return MatmulCall(problem, engine, {**r.staged, **inputs}, r.holder, r.device_id, r.alpha, r.beta, finish,
                      cache_key)
