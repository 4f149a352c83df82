"""What the torch-side modules share: handing tensors to mathpy's kernels, and the one way to refuse an argument."""

import torch

__all__ = ["plain", "refuse", "requires_grad", "reason"]


def plain(tensor):
    """``tensor`` as mathpy's kernels read it: detached (a custom op's kernel runs below autograd; detaching also keeps
    the entry hook from routing the kernel's own call back here) and with its lazy conjugate/negative bits applied
    (mathpy reads memory through the data pointer, which does not see those bits)."""
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


def refuse(call, argument, why, fix):
    """The error for an argument that mathpy.torch cannot differentiate or compile: names the call and the argument,
    says why and how to proceed."""
    raise TypeError(f"{call}: {argument} {why}; {fix}")
