"""The one seam between mathpy's public functions and torch autograd / torch.compile.

Each public FFT function (:mod:`mathpy.host.fft._functions`) and :func:`mathpy.matmul`
(:mod:`mathpy.host.matmul._functions`) starts with ``if wanted(...):`` and then calls mathpy.torch's ``route``.
:func:`wanted` is True when a torch tensor in the call needs what only :mod:`mathpy.torch` provides:

- a gradient: grad mode is on and a tensor requires grad (an operand, ``out``, an epilog input, a callback's user
  data), or
- a node in a torch.compile graph: dynamo is tracing and an operand is a torch tensor (mathpy's own code, with its
  pointers and library calls, cannot be traced; the custom ops of :mod:`mathpy.torch` can).

Then the call goes to :mod:`mathpy.torch` (imported by the public function on the first such call; ``import mathpy``
never imports torch, and this module imports no mathpy module), which differentiates it or refuses with an error that
names the argument it cannot differentiate. Otherwise nothing changes: the check reads ``sys.modules`` and, when
torch is loaded, a few tensor flags (well under a microsecond).

Stateful objects (``FFT``, ``Matmul``) have no backward: they record at construction which operands require grad
(:func:`grad_names`) and :func:`refuse` to execute them while grad mode is on, instead of returning a silently
detached result.
"""

import sys

__all__ = ["wanted", "grad_names", "refuse"]

_modules = sys.modules

# (tensor base type, torch.is_grad_enabled, torch.compiler.is_compiling) once torch is imported: every stateless call
# asks, and the attribute chains were a third of the check's cost. The same function objects are called, so dynamo
# still recognises is_compiling while it traces.
_hooks = []


def wanted(*arrays):
    """Whether this call belongs to :mod:`mathpy.torch`. ``arrays``: the call's operands and the arguments that may
    carry tensors (a dict's values and a :class:`~mathpy.fft.Callback`'s ``data`` are looked into); None entries are
    skipped."""
    if not _hooks:
        torch = _modules.get("torch")
        if torch is None:
            return False
        # TensorBase: every tensor type; a C type, faster to test than Tensor
        _hooks[:] = [torch._C.TensorBase, torch.is_grad_enabled, torch.compiler.is_compiling]
    tensor_base, grad_enabled, compiling = _hooks
    tensors = False
    for x in arrays:
        if x is None:
            continue
        if isinstance(x, tensor_base):
            if x.requires_grad and grad_enabled():
                return True
            tensors = True
            continue
        if type(x) is dict:
            inner = x.values()
        elif "data" in type(x).__dict__.get("__slots__", ()):  # a callback with user data (_has_user_data)
            inner = (x.data,)
        else:
            continue
        for t in inner:  # (isinstance against the C base type: torch.Tensor's own check runs Python code)
            if isinstance(t, tensor_base):
                if t.requires_grad and grad_enabled():
                    return True
                tensors = True
    return tensors and compiling()


def _has_user_data(x):
    """A callback object with user data (``Callback`` declares ``data`` in ``__slots__``; an array's ``.data`` is its
    buffer, which is not looked at)."""
    return "data" in type(x).__dict__.get("__slots__", ())


def _tensors(x, torch):
    if isinstance(x, torch.Tensor):
        return (x,)
    if type(x) is dict:
        return tuple(v for v in x.values() if isinstance(v, torch.Tensor))
    if _has_user_data(x) and isinstance(x.data, torch.Tensor):
        return (x.data,)
    return ()


def grad_names(**named):
    """The names among ``named`` (operands, dicts of them, callbacks) holding a torch tensor that requires grad."""
    torch = _modules.get("torch")
    if torch is None:
        return ()
    return tuple(name for name, x in named.items()
                 if x is not None and any(t.requires_grad for t in _tensors(x, torch)))


def refuse(what, names):
    """Raise if grad mode is on: ``what`` (a stateful object's method) cannot differentiate ``names``."""
    torch = _modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return
    listed = ", ".join(repr(name) for name in names)
    raise TypeError(f"{what}: {listed} {'requires' if len(names) == 1 else 'require'} grad, but the stateful object "
                    f"has no backward, so the result would be silently detached from the graph. Use the stateless "
                    f"function (mathpy.fft.*, mathpy.matmul), which is differentiable, or call it under "
                    f"torch.no_grad(), or pass detached tensors")
