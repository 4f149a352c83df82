"""Linear layers whose bias and activation run in the GEMM's epilog, forward and backward.

``y = act(x @ W^T + b)`` runs as one GEMM ``y^T = act(W @ x^T + b)`` (the bias is one value per row of that product,
mathpy's convention; its column-major result is ``y`` row-major): RELU_BIAS, GELU_BIAS, or GELU_AUX_BIAS when a
gradient will be needed, which keeps the pre-activation for the backward.

The backward of an activation can be fused only into the GEMM that produces the gradient of the activation's output
(cuBLASLt's DRELU/DGELU multiply a GEMM's result by ``act'(aux)``), and that GEMM belongs to the *next* layer. So:

- :func:`linear` / :class:`Linear` alone: ``dW`` and the bias gradient come out of one GEMM (BGRADB on
  ``dW^T = x^T @ G``, which is ``dW`` row-major), ``dx`` out of another; ``G = dy * act'`` is elementwise;
- :func:`mlp` / :class:`MLP`, ``Linear -> act -> Linear`` as one autograd node (its hidden activation is internal, so
  no hook or ``autograd.grad`` can ask for the gradient the fusion skips): layer 2's input-gradient GEMM runs
  DGELU / DRELU_BGRAD with layer 1's aux, giving layer 1's pre-activation gradient (and, for RELU, its bias gradient;
  GELU's is one reduction of it, faster than cuBLASLt's DGELU_BGRAD: see ``_SEPARATE_BIAS_GRADIENT``); layer 2's
  weight gradient and bias gradient come from one BGRADB GEMM. No elementwise activation kernel is left in the
  backward.

``gelu`` is cuBLASLt's tanh approximation: ``torch.nn.functional.gelu(x, approximate="tanh")``. Inside
``torch.autocast`` both run in the autocast dtype, as torch.nn.Linear does.
"""

import torch

from ..host.matmul import matmul as _mathpy_matmul
from ..host.matmul._epilog import epilog_spec, gelu_aux_rows, relu_aux_rows
from ._common import call, define, requires_grad
from ._matmul import decode_options, clear_aux_padding, gelu_backward, matmul, product, relu_backward, torch_options

__all__ = ["Linear", "MLP", "linear", "mlp"]

_ACTIVATIONS = (None, "relu", "gelu")


def _epilog(activation, bias, keep):
    """The forward epilog: ``keep`` keeps what the backward needs (GELU's pre-activation; RELU's bitmask only when a
    fused DRELU will read it, see :func:`mlp`)."""
    if activation is None:
        return "BIAS" if bias else "DEFAULT"
    name = activation.upper() + ("_AUX" if keep else "")
    return name + ("_BIAS" if bias else "")


def _autocast(*tensors):
    """``tensors`` in the autocast dtype inside a ``torch.autocast`` region of their device, as torch.nn.Linear's
    ``addmm`` is (differentiable casts; None stays None); unchanged outside one."""
    device = tensors[0].device.type
    if device not in ("cpu", "cuda") or not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(None if t is None or not t.is_floating_point() else t.to(dtype) for t in tensors)


def _check(call, features, dtype, weight, bias, what="weight"):
    """``features``: the input's last extent (None: a 0-d input); ``dtype``: the input's."""
    if weight.dim() != 2:
        raise ValueError(f"{call}: {what} must be 2-D (out_features, in_features), not of shape {tuple(weight.shape)}")
    if features != weight.shape[1]:
        raise ValueError(f"{call}: the input has {features} features (its last axis) but {what} of shape "
                         f"{tuple(weight.shape)} takes {weight.shape[1]}")
    if dtype != weight.dtype:
        raise TypeError(f"{call}: the input ({dtype}) and {what} ({weight.dtype}) must have the same dtype")
    if bias is not None and (tuple(bias.shape) != (weight.shape[0],) or bias.dtype != weight.dtype):
        raise ValueError(f"{call}: the bias of {what} must have shape ({weight.shape[0]},) and dtype {weight.dtype}, "
                         f"not {tuple(bias.shape)} {bias.dtype}")


def linear(x, weight, bias=None, activation=None):
    """``act(x @ weight^T + bias)`` with the bias and activation fused into the GEMM, differentiable (see the module
    docstring), as ``torch.nn.functional.linear`` followed by ``relu`` / ``gelu(approximate="tanh")``. Complex
    tensors (no epilog exists for them) take no activation; their bias is added by torch."""
    call = "mathpy.torch.linear"
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{call}: activation {activation!r} is not supported; allowed are {list(_ACTIVATIONS)}")
    x, weight, bias = _autocast(x, weight, bias)
    _check(call, x.shape[-1] if x.dim() else None, x.dtype, weight, bias)
    flat = x.dim() == 2  # (a batch of rows as it is: no reshape in or out, a view each)
    x2 = x if flat else x.reshape(-1, weight.shape[1])
    options = torch_options(x2)
    if weight.is_complex():
        if activation is not None:
            raise ValueError(f"{call}: activation {activation!r} is not defined for complex tensors")
        y, _ = product(x2, weight.mT, row_major=True)
        y = y if bias is None else y + bias
    else:
        epilog = _epilog(activation, bias is not None, activation == "gelu" and requires_grad(x, weight, bias))
        if epilog in ("DEFAULT", "RELU", "GELU"):  # no per-row operand: either order, row-major y
            y, _ = product(x2, weight.mT, row_major=True, epilog=epilog, options=options)
        else:  # the bias is per row of W @ x^T, whose column-major result is y row-major
            d, _ = matmul(weight, x2.mT, None, 1, 0, epilog, bias, None, options, "")
            y = d.mT
    return y if flat else y.reshape(*x.shape[:-1], weight.shape[0])


class Linear(torch.nn.Linear):
    """:class:`torch.nn.Linear` with an optional fused activation: ``act(x @ weight^T + bias)`` in one GEMM, forward
    and backward (see :mod:`mathpy.torch`). ``activation``: None, ``"relu"`` or ``"gelu"`` (tanh approximation).
    Parameters, initialisation and ``state_dict`` are torch.nn.Linear's."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, *, activation=None):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not supported; allowed are {list(_ACTIVATIONS)}")
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation = activation

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self):
        return super().extra_repr() + f", activation={self.activation!r}"


# --- the fused pair ----------------------------------------------------------------------------------------------

def _mlp_kernel(x, w1, b1, w2, b2, activation, keep, options):
    """``(y, h, aux)``: ``h = act(x @ w1^T + b1)`` (rows: the flattened leading axes of x), ``y = h @ w2^T + b2``
    (x's leading axes), ``aux``: layer 1's epilog output (GELU pre-activation / RELU bitmask) when ``keep``, else
    empty."""
    x2 = x.reshape(-1, w1.shape[1])
    options = decode_options(options) if options else None
    h, aux = _layer(x2, w1, b1, _epilog(activation, b1 is not None, keep), options)
    if aux is not None:
        clear_aux_padding(aux, f"{activation}_aux", w1.shape[0])
    y, _ = _layer(h, w2, b2, _epilog(None, b2 is not None, False), options)
    return y.reshape(*x.shape[:-1], w2.shape[0]), h, (aux if aux is not None else h.new_empty(0))


def _layer(x2, weight, bias, epilog, options):
    """``epilog(x2 @ weight^T + bias)`` as a C-contiguous (rows, out) tensor, and the epilog's output."""
    spec = epilog_spec(epilog)
    result = _mathpy_matmul(weight, x2.mT, epilog=epilog, epilog_inputs=None if bias is None else {"bias": bias},
                            options=options)
    d, outputs = result if spec.outputs else (result, {})
    # d is column-major with any per-row epilog and for 16-bit products: then d^T is already C-contiguous
    return d.mT.contiguous(), (outputs[spec.outputs[0]] if spec.outputs else None)


def _mlp_fake(x, w1, b1, w2, b2, activation, keep, options):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    hidden = w1.shape[0]
    y = x.new_empty((*x.shape[:-1], w2.shape[0]))
    h = x.new_empty((rows, hidden))
    if not keep or activation not in ("relu", "gelu"):
        return y, h, h.new_empty(0)
    if activation == "relu":
        r = relu_aux_rows(hidden)
        return y, h, x.new_empty_strided((r, rows), (1, r), dtype=torch.uint8)
    r = gelu_aux_rows(hidden)
    return y, h, x.new_empty_strided((r, rows), (1, r))


def _mlp_save(ctx, output, x, w1, b1, w2, b2, activation, keep, options):
    y, h, aux = output
    ctx.set_materialize_grads(False)  # h and aux are outputs only to be saved: their gradients stay None
    ctx.activation, ctx.has_b1, ctx.x_shape, ctx.options = activation, b1 is not None, x.shape, options
    ctx.save_for_backward(x, w1, w2, h, aux if keep else None)


def _mlp_backward(ctx, grad_y, grad_h, grad_aux):
    x, w1, w2, h, aux = ctx.saved_tensors
    need_x, need_w1, need_b1, need_w2, need_b2 = ctx.needs_input_grad[:5]
    act, hidden, options = ctx.activation, w1.shape[0], ctx.options
    grad_w2 = grad_b2 = dz = grad_b1 = dh = None
    if grad_y is not None:
        g = grad_y.reshape(-1, w2.shape[0])
        if need_w2:  # dW2 = g^T h, row-major, with db2 = sum of g over rows (BGRADB on the swapped product)
            grad_w2, grad_b2 = product(g.mT, h, row_major=True, sum_a=need_b2, options=options)
        elif need_b2:
            grad_b2 = g.sum(0)
        if need_x or need_w1 or need_b1:
            fused = aux is not None and grad_h is None and grad_aux is None and w2.shape[0] > 1  # cuBLASLt: K > 1
            if fused:  # dZ^T = act'(aux) * (W2^T @ g^T) in one kernel; db1 = its row sums
                separate = act in _SEPARATE_BIAS_GRADIENT
                epilog = ("DRELU" if act == "relu" else "DGELU") + ("_BGRAD" if ctx.has_b1 and not separate else "")
                d, grad_b1 = product(w2.mT, g.mT, epilog=epilog, aux=aux, options=options)
                dz = d.mT
                if ctx.has_b1 and separate and need_b1:
                    grad_b1 = dz.sum(0)
            else:
                dh, _ = product(g, w2, row_major=True, options=options)
    if dz is None and (need_x or need_w1 or need_b1):
        dh = grad_h if dh is None else (dh if grad_h is None else dh + grad_h)
        dz = None if dh is None else _times_activation_grad(dh, act, h, aux, hidden)
        if grad_aux is not None and act == "gelu":
            part = grad_aux[:hidden].mT
            dz = part if dz is None else dz + part
        if dz is not None and need_b1:
            grad_b1 = dz.sum(0)
    if dz is None:
        return None, None, None, grad_w2, grad_b2, None, None, None
    grad_w1 = product(dz.mT, x.reshape(-1, w1.shape[1]), row_major=True, options=options)[0] if need_w1 else None
    grad_x = product(dz, w1, row_major=True, options=options)[0].reshape(ctx.x_shape) if need_x else None
    return grad_x, grad_w1, (grad_b1 if need_b1 else None), grad_w2, grad_b2, None, None, None


#: Activations whose fused backward GEMM leaves the bias gradient to a separate reduction: on an H200 (cuBLASLt 13.1,
#: bfloat16) DGELU_BGRAD took 0.517 ms at 4096 tokens x 2048 -> 8192 against 0.269 ms for DGELU and a sum of its
#: result (2.402 against 1.828 at 8192 x 4096 -> 16384): its bias-gradient reduction costs more than a pass over dZ.
_SEPARATE_BIAS_GRADIENT = ("gelu",)


def _times_activation_grad(dh, activation, h, aux, hidden):
    """``dh * act'(pre-activation)`` elementwise (the path without a fused DRELU/DGELU)."""
    if activation == "relu":
        return relu_backward(dh, h)
    return gelu_backward(dh, aux[:hidden].mT)


_MLP_OP = define("mlp(Tensor x, Tensor w1, Tensor? b1, Tensor w2, Tensor? b2, str activation, bool keep, "
                 "str options) -> "
                 "(Tensor, Tensor, Tensor)", _mlp_kernel, _mlp_fake, _mlp_save, _mlp_backward)


def mlp_op(x, w1, b1, w2, b2, activation, keep, options=""):
    """The op ``mathpy::mlp``, differentiable: ``(y, h, aux)`` (see :func:`_mlp_kernel`)."""
    return call(_MLP_OP, (x, w1, b1, w2, b2), x, w1, b1, w2, b2, activation, keep, options)


def mlp(x, w1, b1, w2, b2, activation="gelu"):
    """``act(x @ w1^T + b1) @ w2^T + b2`` as one fused node (see the module docstring); ``b1`` / ``b2`` may be None,
    ``activation`` is ``"relu"`` or ``"gelu"`` (tanh approximation)."""
    call = "mathpy.torch.mlp"
    if activation not in ("relu", "gelu"):
        raise ValueError(f"{call}: activation {activation!r} is not supported; allowed are 'relu', 'gelu'")
    x, w1, b1, w2, b2 = _autocast(x, w1, b1, w2, b2)
    _check(call, x.shape[-1] if x.dim() else None, x.dtype, w1, b1, "w1")
    _check(call, w1.shape[0], x.dtype, w2, b2, "w2")
    if x.is_complex():
        raise TypeError(f"{call}: complex tensors are not supported (cuBLASLt has no epilogs for them)")
    keep = requires_grad(x, w1, b1, w2, b2)
    return mlp_op(x, w1, b1, w2, b2, activation, keep, torch_options(x))[0]


class MLP(torch.nn.Module):
    """``Linear -> act -> Linear`` (a transformer's MLP block) as one fused node, forward and backward (see
    :mod:`mathpy.torch`). Parameters live in ``fc1`` and ``fc2`` (:class:`torch.nn.Linear`), so a state_dict of
    ``torch.nn.Sequential``-free MLPs with those names loads as it is. ``activation``: ``"gelu"`` (tanh approximation)
    or ``"relu"``."""

    def __init__(self, in_features, hidden_features, out_features=None, bias=True, activation="gelu", device=None,
                 dtype=None):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation {activation!r} is not supported; allowed are 'relu', 'gelu'")
        out_features = in_features if out_features is None else out_features
        self.fc1 = torch.nn.Linear(in_features, hidden_features, bias, device, dtype)
        self.fc2 = torch.nn.Linear(hidden_features, out_features, bias, device, dtype)
        self.activation = activation

    def forward(self, x):
        return mlp(x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias, self.activation)

    def extra_repr(self):
        return f"activation={self.activation!r}"
