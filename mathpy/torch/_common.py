"""What the torch-side modules share: how an op is declared and differentiated at torch's own cost, handing tensors to
mathpy's kernels, and the one way to refuse an argument.

**Declaring an op.** Each ``torch.ops.mathpy.<name>`` is declared with :func:`define`: ``torch.library`` ``define`` +
``impl`` (one kernel for every device: mathpy dispatches itself) + ``register_fake`` (its output's metadata, for
torch.compile), and an :class:`torch.autograd.Function` registered at the ``Autograd`` key. ``torch.library.custom_op``
with ``register_autograd`` would do the same in one decorator, but costs tens of microseconds of Python per eager call
and per backward boundary (pytorch issues 139500, 176592, 177109); this costs what an ``autograd.Function`` costs.

**Calling it.** :func:`call` is the one entry of every op: in eager mode, on plain tensors (no dispatch mode, no
functorch transform, not traced), it runs the kernel directly, or, when a gradient will be recorded, the Function's C
``apply`` (what ``Function.apply`` reaches after its Python preamble, which binds default arguments, which these
Functions do not have, and unwraps tensors leaked from finished functorch transforms), whose ``forward`` again runs
the kernel directly. Anything else (torch.compile, fake or functional tensors, a ``TorchDispatchMode``, vmap/grad)
goes through the dispatcher, ``torch.ops.mathpy.<name>``: the ``Autograd`` kernel records the same Function's twin,
whose ``forward`` re-enters the dispatcher below autograd. Both record the same backward, so eager, compiled and
traced code agree.
"""

import torch

__all__ = ["grad_enabled", "compiling", "PLAIN_TENSORS", "define", "call", "eager", "refuse", "refuse_placement",
           "requires_grad", "reason", "Op"]

_LIBRARY = torch.library.Library("mathpy", "FRAGMENT")

# (C functions, but for is_compiling, which dynamo must see by name: call()'s checks cost well under a microsecond)
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_active = torch._C._are_functorch_transforms_active
grad_enabled = torch.is_grad_enabled
_below_autograd = torch._C._AutoDispatchBelowAutograd
compiling = torch.compiler.is_compiling
_c_apply = torch._C._FunctionBase.__dict__["apply"]


class Op:
    """One declared op: ``op`` (the dispatcher's OpOverload), ``kernel`` (mathpy's work, on tensors that no route sends
    back here) and ``fast_apply``: the C ``apply`` of the Function whose forward runs the kernel directly."""

    __slots__ = ("op", "kernel", "fast_apply")

    def __init__(self, op, kernel, fast_apply):
        self.op, self.kernel, self.fast_apply = op, kernel, fast_apply


def define(schema, kernel, fake, save, backward, strict=None):
    """Declare ``torch.ops.mathpy.<schema's name>`` (module docstring) and return its :class:`Op`. ``kernel(*args)``
    computes it, ``fake(*args)`` gives empty outputs of the right metadata, ``save(ctx, output, *args)`` keeps what
    ``backward(ctx, *output_grads)`` (an autograd.Function's backward) needs. Two Functions share them: one whose
    forward re-enters the dispatcher below autograd (registered at the ``Autograd`` key), one whose forward runs the
    kernel (the direct path). ``strict``: the kernel the dispatcher runs instead of ``kernel`` when the outputs must
    also have exactly the fake's strides (a compiled graph relies on them; eager code needs only the same values)."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema)
    op = getattr(torch.ops.mathpy, name).default

    def dispatched(ctx, *args):
        with _below_autograd():
            output = op(*args)
        save(ctx, output, *args)
        return output

    def direct(ctx, *args):
        output = kernel(*args)
        save(ctx, output, *args)
        return output

    functions = [type(f"{name}_{kind}", (torch.autograd.Function,),
                      {"forward": staticmethod(forward), "backward": staticmethod(backward),
                       "__doc__": f"The gradient of torch.ops.mathpy.{name}, {kind}."})
                 for kind, forward in (("dispatched", dispatched), ("direct", direct))]
    _LIBRARY.impl(name, _detached(strict or kernel), "CompositeExplicitAutograd")
    _LIBRARY.impl(name, functions[0].apply, "Autograd")
    torch.library.register_fake(f"mathpy::{name}", fake, lib=_LIBRARY)
    return Op(op, kernel, _c_apply.__get__(None, functions[1]))


def _detached(kernel):
    """The dispatcher's kernel: below autograd, but maybe with grad mode on (a direct ``torch.ops.mathpy`` call with
    ``torch.autograd.set_grad_enabled`` games, an AOT graph): detached operands keep mathpy's entry hook from routing
    the kernel's own calls back here."""
    def run(*args):
        return kernel(*(a.detach() if isinstance(a, torch.Tensor) else a for a in args))
    return run


def eager(tensors):
    """Whether ``tensors`` (None entries skipped) can take the direct path: plain tensors, no dispatch mode, no
    functorch transform, not under torch.compile."""
    if compiling() or _dispatch_modes() or _functorch_active():  # (is_compiling first: dynamo folds it)
        return False
    for t in tensors:
        if t is not None and type(t) not in PLAIN_TENSORS:
            return False
    return True


def call(op, tensors, *args):
    """Run ``op`` on ``args`` (whose tensors are ``tensors``): differentiable, at an autograd.Function's cost in eager
    mode (module docstring)."""
    if not eager(tensors):
        return op.op(*args)
    if grad_enabled():
        for t in tensors:
            if t is not None and t.requires_grad:
                return op.fast_apply(*args)
    return op.kernel(*args)


def plain(tensor):
    """``tensor`` as mathpy's kernels read it: detached, with its lazy conjugate/negative bits applied (mathpy reads
    memory through the data pointer, which does not see those bits)."""
    if tensor is None:
        return None
    return tensor.detach().resolve_conj().resolve_neg()


def requires_grad(*tensors):
    """Whether a gradient will be recorded for any of ``tensors`` (grad mode on and one of them requires grad)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def reason(**named):
    """Why a call was routed here, for error messages: ``"(NAME requires grad)"`` for the first tensor in ``named``
    that does, else ``"(torch.compile is tracing it)"``."""
    if torch.is_grad_enabled():
        for name, t in named.items():
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return f"({name} requires grad)"
    return "(torch.compile is tracing it)"


def refuse_placement(call, execution, stream, why, what="tensor"):
    """Refuse ``execution=`` and ``stream=``: autograd and compiled graphs run where the tensors are, on torch's
    current stream."""
    if execution is not None:
        refuse(call, "execution=", f"moves data between devices outside autograd {why}",
               f"move the {what} with .to(device) (differentiable) and leave execution=None")
    if stream is not None:
        refuse(call, "stream=", f"is not supported here {why}",
               "make the stream current with torch.cuda.stream(...): mathpy runs on torch's current stream")


def refuse(call, argument, why, fix):
    """The error for an argument that mathpy.torch cannot differentiate or compile: names the call and the argument,
    says why and how to proceed."""
    raise TypeError(f"{call}: {argument} {why}; {fix}")
