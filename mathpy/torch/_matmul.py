"""mathpy.matmul for torch tensors that need a gradient or a place in a torch.compile graph.

One custom op, ``mathpy::matmul(a, b, c, alpha, beta, epilog, bias, aux, options, preferences) -> (d, extra)``, runs
``mathpy.matmul`` (``extra``: the epilog's one output, or an empty tensor); the plain product ``a @ b``, most calls,
runs as ``mathpy::mm(a, b) -> d``, whose two arguments and one output cost an eager call less. The backward, for
``D = act(alpha * a @ b + beta * c + bias)`` with numpy.matmul's broadcasting and 1-D operands:

- ``G = dD * act'(X)``: RELU from ``D > 0``; GELU from the pre-activation ``X``, which the forward keeps by running the
  epilog's AUX form (GELU_BIAS runs as GELU_AUX_BIAS; the user still gets D alone);
- ``da = conj(alpha) G @ b^H`` and ``db = conj(alpha) a^H @ G``, through this op again (so higher derivatives and
  torch.compile work), each computed in the operand's own order (row- or column-major: the swapped product when that
  is what gives it), summed over broadcast batch axes;
- the bias gradient (the sum of G over N) comes out of the ``da`` product's kernel (BGRADA, or BGRADB when that
  product runs swapped); ``dc = conj(beta) G`` summed to c's shape.

The result's layout is mathpy's contract (``mathpy.host.matmul._layouts.result_layout``): column-major with a per-row
epilog operand, else ``result_order``, else the order of the first of c, a, b that has one, else row-major. The fake
implementation gives that layout; the kernel copies into it in the (unexpected) case mathpy returns another, so
compiled and eager code see the same strides.
"""

import ast
import dataclasses
import numpy as np
import torch

from .. import _memo
from .._options import check_or_create_options
from ..host.matmul._epilog import MatmulEpilog
from ..host.matmul._options import MatmulOptions, MatmulPlanPreferences
from ..host.matmul._stateless import run as _mathpy_matmul
from ..host.matmul._epilog import epilog_spec, gelu_aux_rows, relu_aux_rows
from ._common import (PLAIN_TENSORS, compiling, grad_enabled, call, define, reason, refuse, refuse_placement,
                      requires_grad)

__all__ = ["decode_options", "matmul", "mm", "route", "product", "gelu_backward", "relu_backward", "encode_options",
           "clear_aux_padding", "torch_options"]

_ANY_ORDER = ("DEFAULT", "RELU", "GELU")  # epilogs without a per-row operand: D may be stored either way
_DIFFERENTIABLE = ("DEFAULT", "RELU", "BIAS", "RELU_BIAS", "GELU", "GELU_BIAS", "RELU_AUX", "RELU_AUX_BIAS",
                   "GELU_AUX", "GELU_AUX_BIAS")
_KEEP_PRE_ACTIVATION = {"GELU": "GELU_AUX", "GELU_BIAS": "GELU_AUX_BIAS"}
_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_NUMBERS = (int, float, complex)


# --- the op ------------------------------------------------------------------------------------------------------

def _kernel(a, b, c, alpha, beta, epilog, bias, aux, options, preferences):
    """``mathpy.matmul(a, b, c, alpha=, beta=, epilog=, epilog_inputs={bias / aux})`` -> ``(d, extra)``; ``epilog``
    is a MatmulEpilog name, ``options`` / ``preferences`` encoded by :func:`encode_options`."""
    spec = _SPECS[epilog]
    inputs = None
    if bias is not None or aux is not None:
        inputs = {}
        if bias is not None:
            inputs["bias"] = bias
        if aux is not None:
            inputs[spec.inputs[0]] = aux
    result = _mathpy_matmul(a, b, c, alpha=alpha, beta=beta, epilog=epilog, epilog_inputs=inputs,
                            options=decode_options(options) if options else None,
                            preferences=decode_options(preferences) if preferences else None)
    if not spec.outputs:
        return result, result.new_empty(0)
    d, outputs = result
    extra = outputs[spec.outputs[0]]
    clear_aux_padding(extra, spec.outputs[0], 1 if a.dim() == 1 else a.shape[-2])
    return d, extra


def _strict_kernel(a, b, c, alpha, beta, epilog, bias, aux, options, preferences):
    """:func:`_kernel` with the strides the fake promises."""
    d, extra = _kernel(a, b, c, alpha, beta, epilog, bias, aux, options, preferences)
    spec = _SPECS[epilog]
    d_layout, extra_layout = _layouts(a, b, c, spec, d.dtype, _result_order(options))
    d = _in_layout(d, d_layout)
    return d, (_in_layout(extra, extra_layout) if spec.outputs else extra)


_SPECS = {e.name: epilog_spec(e) for e in MatmulEpilog}  # the op's epilog argument is a name

def clear_aux_padding(aux, name, m):
    """Zero the rows of a RELU/GELU aux matrix past the ``m`` rows of the product (cuBLASLt's leading dimension is
    rounded up and it never writes the rest): an op's outputs must be a function of its inputs, and torch.compile's
    AOT check compares them whole (the H200 found allocator leftovers there). No work when m needs no padding."""
    used = {"gelu_aux": m, "relu_aux": -(-m // 8)}.get(name)
    if used is not None and aux.shape[-2] > used:
        aux[..., used:, :].zero_()


def _fake(a, b, c, alpha, beta, epilog, bias, aux, options, preferences):
    spec = _SPECS[epilog]
    if a.dim() == 0 or b.dim() == 0:
        raise ValueError("matmul operands must have at least one dimension")
    k_a, k_b = a.shape[-1], (b.shape[-2] if b.dim() > 1 else b.shape[0])
    torch._check(k_a == k_b, lambda: f"matmul: a of shape {tuple(a.shape)} and b of shape {tuple(b.shape)} do not "
                                     f"match")
    d_dtype = _result_dtype(a, options)
    (d_shape, d_strides), extra = _layouts(a, b, c, spec, d_dtype, _result_order(options))
    d = a.new_empty_strided(d_shape, d_strides, dtype=d_dtype)
    if extra is None:
        return d, a.new_empty(0, dtype=d_dtype)
    shape, strides, dtype = extra
    return d, a.new_empty_strided(shape, strides, dtype=dtype)


def _result_dtype(a, options):
    name = (decode_options(options) or {}).get("result_type")
    return getattr(torch, name) if name else a.dtype


def _result_order(options):
    return (decode_options(options) or {}).get("result_order")


def _layouts(a, b, c, spec, d_dtype, order):
    """``((shape, strides) of d, (shape, strides, dtype) of the epilog's output or None)``: the kernel's results, as
    the fake promises them (``order``: MatmulOptions.result_order)."""
    a_vec, b_vec = a.dim() == 1, b.dim() == 1
    m = 1 if a_vec else a.shape[-2]
    n = 1 if b_vec else b.shape[-1]
    batch_a, batch_b = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    batch = batch_a if (batch_a == batch_b or not batch_b) else \
        (batch_b if not batch_a else tuple(torch.broadcast_shapes(batch_a, batch_b)))
    shape, strides = _matrices_layout(batch, m, n, _row_major_result(spec, a, b, c, order))
    if a_vec or b_vec:  # numpy.matmul drops the axis of a 1-D operand
        keep = len(batch) + (0 if a_vec else 1), len(batch) + 1
        drop = {keep[0]} if a_vec and not b_vec else ({keep[1]} if b_vec and not a_vec else set(keep))
        shape = tuple(e for i, e in enumerate(shape) if i not in drop)
        strides = tuple(e for i, e in enumerate(strides) if i not in drop)
    if not spec.outputs:
        return (shape, strides), None
    name = spec.outputs[0]
    if name == "relu_aux":
        return (shape, strides), (*_matrices_layout(batch, relu_aux_rows(m), n, False), torch.uint8)
    if name == "gelu_aux":
        return (shape, strides), (*_matrices_layout(batch, gelu_aux_rows(m), n, False), d_dtype)
    length = n if name == "bgradb" else m
    vector = (*batch, length, 1) if batch else (length,)
    return (shape, strides), (vector, _contiguous_strides(vector), d_dtype)


def _matrices_layout(batch, rows, cols, row_major):
    """``(shape, strides)`` of ``(*batch, rows, cols)`` matrices, batches contiguous, each row- or column-major."""
    inner = (cols, 1) if row_major else (1, rows)
    strides, step = [], rows * cols
    for extent in reversed(batch):
        strides.append(step)
        step *= extent
    return (*batch, rows, cols), (*reversed(strides), *inner)


def _contiguous_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _row_major_result(spec, a, b, c, order=None):
    """mathpy's result order (``host.matmul._layouts.result_layout``): column-major with a per-row epilog operand,
    else ``order`` (MatmulOptions.result_order) when given, else the order of the first of c, a, b whose matrices have
    one (more than one row and column), row-major when none has. A wrong guess costs a copy, never a wrong answer."""
    if spec.name not in _ANY_ORDER:
        return False
    if order is not None:
        return order == "C"
    for t in (c, a, b):
        if t is not None and t.dim() >= 2 and t.shape[-2] > 1 and t.shape[-1] > 1:
            return not (t.stride(-2) == 1 and t.stride(-1) != 1)
    return True


def _col_major(t):
    """Whether mathpy reads ``t``'s matrices as column-major (a vector or a one-row/one-column matrix counts as
    column-major when its elements are contiguous, as mathpy normalises it)."""
    if t.dim() < 2:
        return True
    rows, cols = t.shape[-2], t.shape[-1]
    if rows <= 1:
        return True
    if cols <= 1:
        return t.stride(-2) == 1
    return t.stride(-2) == 1 and t.stride(-1) >= rows


def _in_layout(tensor, layout):
    """``tensor`` with the strides of ``layout`` ((shape, strides, ...)): itself when they already agree wherever an
    extent exceeds 1, else a copy."""
    shape, strides = layout[0], layout[1]
    if tuple(tensor.shape) != tuple(shape):
        raise AssertionError(f"mathpy returned shape {tuple(tensor.shape)}, expected {tuple(shape)}")
    if all(s == t or extent <= 1 for extent, s, t in zip(shape, tensor.stride(), strides)):
        return tensor
    return torch.empty_strided(shape, strides, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


# --- backward ----------------------------------------------------------------------------------------------------

def _save(ctx, output, a, b, c, alpha, beta, epilog, bias, aux, options, preferences):
    d, extra = output
    spec = _SPECS[epilog]
    ctx.set_materialize_grads(False)  # an unused output (the aux) gets None, not a tensor of zeros
    ctx.spec, ctx.alpha, ctx.beta = spec, alpha, beta
    ctx.options, ctx.preferences = (_backward_options(options) if options else ""), preferences
    ctx.c_shape, ctx.d_shape = (None if c is None else c.shape), d.shape
    ctx.bias_shape = None if bias is None else bias.shape
    keep_d = d if spec.activation == "relu" else None
    keep_x = extra if spec.aux_out == "gelu_aux" else None
    ctx.save_for_backward(a, b, keep_d, keep_x)


def _backward(ctx, grad_d, grad_extra):
    a, b, d, x = ctx.saved_tensors
    spec = ctx.spec
    if spec.name not in _DIFFERENTIABLE:
        raise RuntimeError(f"mathpy.matmul: epilog {spec.name} has no backward")
    a_vec, b_vec = a.dim() == 1, b.dim() == 1
    m = 1 if a_vec else a.shape[-2]
    g = None
    if grad_d is not None:
        g = _matrices(grad_d, a_vec, b_vec)
        if spec.activation == "relu":
            g = relu_backward(g, _matrices(d, a_vec, b_vec))
        elif spec.activation == "gelu":
            g = gelu_backward(g, x[..., :m, :])
    if grad_extra is not None and spec.aux_out == "gelu_aux":  # the pre-activation is an output too
        part = grad_extra[..., :m, :]
        g = part if g is None else g + part
    if g is None:
        return (None,) * 10
    needs = ctx.needs_input_grad
    need_c, need_bias = needs[2], needs[6] and ctx.bias_shape is not None
    grad_a, grad_b, bias_sums = _operand_grads(g, a, b, ctx.alpha.conjugate(), needs[0], needs[1], need_bias,
                                               ctx.options, ctx.preferences)
    grad_c = grad_bias = None
    if need_c:
        grad_c = (g * ctx.beta.conjugate()).reshape(ctx.d_shape).sum_to_size(ctx.c_shape)
    if need_bias:
        sums = g.sum(-1, keepdim=True) if bias_sums is None else bias_sums.reshape(*g.shape[:-1], 1)
        shape = ctx.bias_shape
        grad_bias = sums.squeeze(-1).sum_to_size(shape) if len(shape) == 1 else sums.sum_to_size(shape)
    return grad_a, grad_b, grad_c, None, None, None, grad_bias, None, None, None


def _operand_grads(g, a, b, alpha, need_a, need_b, need_bias, options, preferences):
    """``(da, db, the sums of G over N or None)`` of ``alpha * a @ b`` for the result's gradient ``G`` (as matrices):
    ``da = alpha G @ b^H``, ``db = alpha a^H @ G`` (``alpha`` already conjugated), each in its operand's order and
    summed over broadcast batch axes; the sums come out of the ``da`` product's kernel when ``need_bias``."""
    a_vec, b_vec = a.dim() == 1, b.dim() == 1
    g_op = g.to(a.dtype)  # a result_type other than the operands' (float16 operands, float32 result)
    a2 = a.unsqueeze(0) if a_vec else a
    b2 = b.unsqueeze(-1) if b_vec else b
    grad_a = grad_b = bias_sums = None
    if need_a:
        full, bias_sums = product(g_op, _adjoint(b2), alpha, row_major=not _col_major(a2), sum_a=need_bias,
                                  options=options, preferences=preferences)
        grad_a = full.sum_to_size(a2.shape).reshape(a.shape)
    if need_b:
        full, _ = product(_adjoint(a2), g_op, alpha, row_major=not _col_major(b2), options=options,
                          preferences=preferences)
        grad_b = full.sum_to_size(b2.shape).reshape(b.shape)
    return grad_a, grad_b, bias_sums


_MATMUL = define("matmul(Tensor a, Tensor b, Tensor? c, Scalar alpha, Scalar beta, str epilog, Tensor? bias, "
                 "Tensor? aux, str options, str preferences) -> (Tensor, Tensor)", _kernel, _fake, _save, _backward,
                 strict=_strict_kernel)


def matmul(a, b, c, alpha, beta, epilog, bias, aux, options, preferences):
    """The op ``mathpy::matmul``, differentiable: ``(d, extra)`` of ``epilog(alpha * a @ b + beta * c + bias)`` (see
    :func:`_kernel`)."""
    return call(_MATMUL, (a, b, c, bias, aux), a, b, c, alpha, beta, epilog, bias, aux, options, preferences)


# The plain product ``a @ b`` (no c, scalars, epilog or options: most calls) as an op of its own: one output and two
# arguments make its eager call and its autograd node cheaper than the general op's ten arguments and two outputs.

def _mm_kernel(a, b):
    return _mathpy_matmul(a, b)


def _mm_strict(a, b):
    return _strict_kernel(a, b, None, 1, 0, "DEFAULT", None, None, "", "")[0]


def _mm_fake(a, b):
    return _fake(a, b, None, 1, 0, "DEFAULT", None, None, "", "")[0]


def _mm_save(ctx, output, a, b):
    ctx.save_for_backward(a, b)


def _mm_backward(ctx, grad_d):
    if grad_d is None:
        return None, None
    a, b = ctx.saved_tensors
    g = _matrices(grad_d, a.dim() == 1, b.dim() == 1)
    grad_a, grad_b, _ = _operand_grads(g, a, b, 1, *ctx.needs_input_grad, False, "", "")
    return grad_a, grad_b


_MM = define("mm(Tensor a, Tensor b) -> Tensor", _mm_kernel, _mm_fake, _mm_save, _mm_backward, strict=_mm_strict)


def mm(a, b):
    """The op ``mathpy::mm``: ``a @ b`` with numpy.matmul's rules, differentiable."""
    return call(_MM, (a, b), a, b)


def _matrices(t, a_vec, b_vec):
    """A result (or its gradient) with the axes numpy.matmul dropped for 1-D operands put back."""
    if b_vec:
        t = t.unsqueeze(-1)
    if a_vec:
        t = t.unsqueeze(-2)
    return t


def _adjoint(t):
    """The conjugate transpose of ``t``'s matrices (a view for real dtypes; mathpy reads no lazy conjugate bit)."""
    return t.mT.conj_physical() if t.is_complex() else t.mT


def gelu_backward(grad, x):
    """``grad * gelu'(x)`` for cuBLASLt's GELU (the tanh approximation): torch's own GELU backward, one elementwise
    kernel that evaluates in float32 for 16-bit tensors and returns ``grad``'s dtype (an unfused formula in float32
    would make several full-size float32 temporaries), differentiable again."""
    return torch.ops.aten.gelu_backward(grad, x, approximate="tanh")


def relu_backward(grad, y):
    """``grad`` where ``y > 0``, else 0: torch's own ReLU backward, one kernel (no mask or zeros tensor)."""
    return torch.ops.aten.threshold_backward(grad, y, 0)


def product(a, b, alpha=1, *, row_major=None, epilog="DEFAULT", aux=None, sum_a=False, options="",
            preferences=""):
    """``epilog(alpha * a @ b)`` through the op; returns ``(d, the epilog's output or None)``.

    ``row_major``: the order wanted for ``d``'s matrices (None: mathpy's choice). An epilog without a per-row operand
    (DEFAULT, RELU, GELU) runs as the swapped product ``(b^T a^T)^T`` when that is what gives it. ``sum_a``: also the
    sum of ``a`` over its last axis (a bias gradient) from the same kernel: BGRADA, or BGRADB on the swapped product
    when a row-major ``d`` is wanted (BGRADA's result is column-major). ``aux``: the aux input of DRELU* / DGELU*."""
    if sum_a:
        if not row_major:
            return matmul(a, b, None, alpha, 0, "BGRADA", None, None, options, preferences)
        d, sums = matmul(b.mT, a.mT, None, alpha, 0, "BGRADB", None, None, options, preferences)
        return d.mT, sums
    spec = _SPECS[epilog]
    if row_major is not None and spec.name in _ANY_ORDER:
        order = _result_order(options)
        if _row_major_result(spec, a, b, None, order) != row_major and \
                _row_major_result(spec, b.mT, a.mT, None, order) != row_major:  # (d = its transpose)
            d, extra = matmul(b.mT, a.mT, None, alpha, 0, spec.name, None, aux, options, preferences)
            return d.mT, (extra if spec.outputs else None)
    d, extra = matmul(a, b, None, alpha, 0, spec.name, None, aux, options, preferences)
    return d, (extra if spec.outputs else None)


# --- options -----------------------------------------------------------------------------------------------------

def encode_options(cls, value, name):
    """``value`` (None, a ``cls`` instance or a dict) as the op's string argument: its non-default fields as
    ``name=repr`` pairs (dtypes by name), "" for none. In eager mode mathpy validates it here; while torch.compile
    traces, only unknown names are refused here (dynamo cannot trace the validation; the kernel's call validates the
    values when it runs). No JSON or dataclasses.fields: dynamo traces this function."""
    if value is None:
        return ""
    fields = _FIELDS[cls]
    if not torch.compiler.is_compiling():
        value = check_or_create_options(cls, value, name)
    elif isinstance(value, dict):
        unknown = sorted(set(value) - {field for field, _ in fields})
        if unknown:
            raise ValueError(f"{name}: unknown {cls.__name__} fields {unknown}")
    parts = []
    for field, default in fields:
        v = value.get(field, default) if isinstance(value, dict) else getattr(value, field)
        if v is not default and (default is None or v != default):  # (np.dtype("float64") == None is True)
            parts.append(f"{field}={(v.name if isinstance(v, np.dtype) else v)!r}")
    return ";".join(parts)


_FIELDS = {cls: tuple((f.name, f.default) for f in dataclasses.fields(cls))
           for cls in (MatmulOptions, MatmulPlanPreferences)}


_decoded = _memo.Memo("decoded-options", group="torch", max_entries=256)  # text -> dict (every call brings one)


def decode_options(text):
    """The dict encoded by :func:`encode_options` (None for ""; a fresh copy, which the caller may keep)."""
    if not text:
        return None
    found = _decoded.get(text)
    if found is None:
        found = {name: ast.literal_eval(value) for name, value in (part.split("=", 1) for part in text.split(";"))}
        _decoded.put(text, found)
    return dict(found)


def torch_options(like):
    """The options that give a float32 product what torch's own would get: TF32 tensor cores when
    ``torch.backends.cuda.matmul.allow_tf32`` is set (``torch.set_float32_matmul_precision("high")``) and ``like``
    is a float32 CUDA tensor; "" otherwise."""
    # (torch._C._get_cublas_allow_tf32 is what that flag reads; dynamo folds it to a constant)
    if like.dtype == torch.float32 and like.is_cuda and torch._C._get_cublas_allow_tf32():
        return "allow_tf32=True"
    return ""


def _backward_options(options):
    """The forward's options for the gradient products: the operands' dtype as the result, no float8 scales."""
    fields = decode_options(options) or {}
    dropped = ("result_type", "scale_type", "a_scale", "b_scale", "d_scale", "fast_accumulation")
    return ";".join(f"{name}={value!r}" for name, value in sorted(fields.items()) if name not in dropped)


# --- mathpy.matmul on torch tensors ------------------------------------------------------------------------------

def _named(epilog_inputs):
    return {f"epilog_inputs[{name!r}]": value for name, value in epilog_inputs.items()}


# the facts of a call without options -> (epilog to run, alpha, beta, output name or None)
_resolved = _memo.Memo("matmul-routes", group="torch", max_entries=256)


def route(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution, stream):
    """``mathpy.matmul(...)`` for torch tensors that need autograd or torch.compile: the same result, differentiable
    in a, b, c and the bias, built from the op. The checks' outcome for a call's facts (no options, preferences,
    execution or stream; operands' dtypes and which inputs are given) is remembered, so a repeated eager call is one
    lookup and the op."""
    bias = aux = None
    if options is None and preferences is None and execution is None and stream is None and type(a) in PLAIN_TENSORS \
            and type(b) in PLAIN_TENSORS and not compiling():
        names = None
        if epilog_inputs is not None:
            if type(epilog_inputs) is not dict:
                return _route(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution, stream)
            names = tuple((name, type(value)) for name, value in epilog_inputs.items())
            bias = epilog_inputs.get("bias")
            aux = epilog_inputs.get("relu_aux", epilog_inputs.get("gelu_aux"))
        grad = grad_enabled() and (a.requires_grad or b.requires_grad or (c is not None and c.requires_grad)
                                    or (bias is not None and bias.requires_grad)
                                    or (aux is not None and aux.requires_grad))
        try:
            key = (epilog, type(alpha), alpha, type(beta), beta, type(c), names, a.dtype, b.dtype, grad)
            found = _resolved.get(key)
        except TypeError:  # unhashable: the full path judges it
            key = found = None
        if found is None:
            found = _resolve(a, b, c, alpha, beta, epilog, epilog_inputs, grad)
            if key is not None:
                _resolved.put(key, found)
        run, alpha, beta, output = found
        if run == "DEFAULT" and c is None and bias is None and aux is None and type(alpha) in _NUMBERS \
                and alpha == 1 and beta == 0:  # (not alpha=None or a beta without c: the general op refuses them)
            return mm(a, b)
        d, extra = matmul(a, b, c, alpha, beta, run, bias, aux, "", "")
        return d if output is None else (d, {output: extra})
    return _route(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution, stream)


def _route(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution, stream):
    """The route with options, preferences, execution or stream, or under torch.compile: every check, every call."""
    call = "mathpy.matmul"
    grad_inputs = {} if epilog_inputs is None else epilog_inputs
    if not isinstance(grad_inputs, dict):
        raise TypeError(f"epilog_inputs must be a dict, not {type(grad_inputs).__name__}")
    bias = grad_inputs.get("bias")
    aux = grad_inputs.get("relu_aux", grad_inputs.get("gelu_aux"))
    grad = requires_grad(a, b, c, bias, aux)
    if execution is not None or stream is not None:
        refuse_placement(call, execution, stream, reason(a=a, b=b, c=c, **_named(grad_inputs)), "tensors")
    run, alpha, beta, output = _resolve(a, b, c, alpha, beta, epilog, epilog_inputs, grad)
    d, extra = matmul(a, b, c, alpha, beta, run, bias, aux, encode_options(MatmulOptions, options, "options"),
                      encode_options(MatmulPlanPreferences, preferences, "preferences"))
    return d if output is None else (d, {output: extra})


def _resolve(a, b, c, alpha, beta, epilog, epilog_inputs, grad):
    """``(epilog to run, alpha, beta, the name of the epilog's output or None)`` for a call, after every check that
    depends on the call's facts (the operands' types and dtypes, the epilog and its inputs' names, the scalars)."""
    call = "mathpy.matmul"
    grad_inputs = {} if epilog_inputs is None else epilog_inputs
    if not isinstance(grad_inputs, dict):
        raise TypeError(f"epilog_inputs must be a dict, not {type(grad_inputs).__name__}")
    for name, value in (("a", a), ("b", b), ("c", c), *((f"epilog_inputs[{k!r}]", v) for k, v in grad_inputs.items())):
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{call}: {name} is a {type(value).__module__}.{type(value).__name__}; with torch "
                            f"tensors that require grad (or under torch.compile) every operand must be a torch tensor")
    if callable(epilog) and not isinstance(epilog, (str, int)):  # a custom (Python) epilog: compiled, not derived
        refuse(call, "epilog= (a Python function)", "is a custom epilog, which mathpy cannot differentiate or compile "
               f"into a torch graph {reason(a=a, b=b, c=c, **_named(grad_inputs))}",
               "apply it with torch ops to the product, or call it under torch.no_grad() outside torch.compile")
    spec = epilog_spec(epilog)
    missing = [name for name in spec.inputs if grad_inputs.get(name) is None]
    unknown = sorted(set(grad_inputs) - set(spec.inputs))
    if missing or unknown:
        raise ValueError(f"epilog {spec.name} takes epilog_inputs {list(spec.inputs)}; missing {missing}, not "
                         f"applicable {unknown}")
    if grad and spec.name not in _DIFFERENTIABLE:
        refuse(call, f"epilog={spec.name}", f"is a backward epilog, which mathpy does not differentiate "
               f"{reason(a=a, b=b, c=c, **_named(grad_inputs))}",
               "run it under torch.no_grad() or with detached operands, as a backward pass does")
    if grad:
        for name, t in (("a", a), ("b", b)):
            if t.dtype in _FLOAT8:
                refuse(call, f"{name} ({t.dtype})", f"has no backward in mathpy {reason(a=a, b=b)}",
                       "train in bfloat16/float16 or run float8 products under torch.no_grad()")
    if spec.aux_out == "gelu_aux" and a.dtype in _FLOAT8:  # the op's fake promises the aux in D's dtype, one output
        refuse(call, f"epilog={spec.name} with {a.dtype} operands", f"has a GELU aux in its own dtype (and maybe its "
               f"amax), which mathpy's op does not describe {reason(a=a, b=b)}", "call it outside torch.compile")
    scalars = []
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, np.number):
            value = value.item()  # the op's Scalar argument takes Python numbers
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, complex))):
            raise TypeError(f"{name} must be a number, not {value!r}")
        scalars.append(value)
    alpha, beta = scalars
    if beta is None:
        beta = 0 if c is None else 1
    run = _KEEP_PRE_ACTIVATION.get(spec.name, spec.name) if grad else spec.name
    return run, alpha, beta, (spec.outputs[0] if spec.outputs else None)
