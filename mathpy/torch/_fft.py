"""mathpy.fft for torch tensors that need a gradient or a place in a torch.compile graph.

Three custom ops run mathpy's transforms; everything NumPy's signatures add around them (``n``/``s`` padding and
cropping, dtype promotion, the Hermitian functions' conjugates) is done with differentiable torch ops before and after,
so the ops see exactly-sized operands and their backward formulas stay transforms:

- ``mathpy::fft_c2c(x, dim, norm, forward)``: ``fftn`` / ``ifftn``. Backward: the opposite transform with the swapped
  norm (the adjoint of a DFT scaled by ``c`` is the inverse DFT scaled by ``c``, unnormalised otherwise).
- ``mathpy::fft_r2c(x, dim, norm)``: ``rfftn``. Backward: ``fft_c2r`` of the gradient with the interior bins halved
  (a one-sided spectrum drops the mirrored bins, whose gradient is zero; a C2R counts each interior bin twice and
  ignores the imaginary parts of the DC and Nyquist bins, which is exactly the real part of the adjoint).
- ``mathpy::fft_c2r(x, dim, norm, last)``: ``irfftn`` to a last axis of length ``last``. Backward: ``fft_r2c`` of the
  gradient with the interior bins doubled (each stands for itself and its mirror).

Each op has a fake-tensor implementation (shape, dtype, C-contiguous strides) for torch.compile. The formulas are
torch's own (``torch.fft``'s derivatives); ``torch.autograd.gradcheck`` checks them in the tests.
"""

import torch
import torch.nn.functional as F

from .. import fft as _mathpy_fft
from .._options import check_or_create_options
from ..host.fft import FFTOptions
from ..host.fft._numpy_rules import check_no_axes, check_norm, cook_1d, cook_nd, stages, swap_norm
from ._common import plain, reason, refuse

__all__ = ["fft_c2c", "fft_r2c", "fft_c2r", "route"]

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


# --- the ops -----------------------------------------------------------------------------------------------------

@torch.library.custom_op("mathpy::fft_c2c", mutates_args=())
def fft_c2c(x: torch.Tensor, dim: list[int], norm: str, forward: bool) -> torch.Tensor:
    """Complex-to-complex FFT of ``x`` over ``dim`` (mathpy.fft.fftn / ifftn)."""
    transform = _mathpy_fft.fftn if forward else _mathpy_fft.ifftn
    return transform(plain(x), axes=dim, norm=norm).contiguous()


@torch.library.custom_op("mathpy::fft_r2c", mutates_args=())
def fft_r2c(x: torch.Tensor, dim: list[int], norm: str) -> torch.Tensor:
    """Real-to-complex FFT of ``x`` over ``dim``, the last one halved (mathpy.fft.rfftn)."""
    return _mathpy_fft.rfftn(plain(x), axes=dim, norm=norm).contiguous()


@torch.library.custom_op("mathpy::fft_c2r", mutates_args=())
def fft_c2r(x: torch.Tensor, dim: list[int], norm: str, last: int) -> torch.Tensor:
    """Complex-to-real inverse FFT of ``x`` over ``dim``; the last axis of the result has length ``last`` and ``x``
    holds its ``last // 2 + 1`` bins (mathpy.fft.irfftn)."""
    s = [x.shape[d] for d in dim[:-1]] + [last]
    return _mathpy_fft.irfftn(plain(x), s=s, axes=dim, norm=norm).contiguous()


@fft_c2c.register_fake
def _(x, dim, norm, forward):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@fft_r2c.register_fake
def _(x, dim, norm):
    shape = list(x.shape)
    shape[dim[-1]] = shape[dim[-1]] // 2 + 1
    return x.new_empty(shape, dtype=_COMPLEX[x.dtype])


@fft_c2r.register_fake
def _(x, dim, norm, last):
    shape = list(x.shape)
    shape[dim[-1]] = last
    return x.new_empty(shape, dtype=_REAL[x.dtype])


def _setup(ctx, inputs, output):
    ctx.x_shape = inputs[0].shape
    ctx.dim, ctx.norm = inputs[1], inputs[2]
    ctx.extra = inputs[3] if len(inputs) > 3 else None


def _c2c_backward(ctx, grad):
    return fft_c2c(grad, ctx.dim, swap_norm(ctx.norm), not ctx.extra), None, None, None


def _r2c_backward(ctx, grad):
    n = ctx.x_shape[ctx.dim[-1]]
    return fft_c2r(grad * _bin_weights(n, 0.5, grad, ctx.dim[-1]), ctx.dim, swap_norm(ctx.norm), n), None, None


def _c2r_backward(ctx, grad):
    spectrum = fft_r2c(grad, ctx.dim, swap_norm(ctx.norm))
    return spectrum * _bin_weights(ctx.extra, 2.0, spectrum, ctx.dim[-1]), None, None, None


fft_c2c.register_autograd(_c2c_backward, setup_context=_setup)
fft_r2c.register_autograd(_r2c_backward, setup_context=_setup)
fft_c2r.register_autograd(_c2r_backward, setup_context=_setup)


def _bin_weights(n, interior, like, axis):
    """Weights of the ``n // 2 + 1`` bins of a one-sided spectrum of length ``n`` along ``axis`` (broadcastable
    against ``like``): ``interior`` for the bins that have a mirror (1 .. (n - 1) // 2), 1 for DC and Nyquist."""
    weights = torch.ones(n // 2 + 1, dtype=_REAL.get(like.dtype, like.dtype), device=like.device)
    weights[1:(n - 1) // 2 + 1] = interior
    shape = [1] * like.dim()
    shape[axis] = n // 2 + 1
    return weights.view(shape)


# --- mathpy.fft's functions on torch tensors ---------------------------------------------------------------------

# name: (transform kind, inverse, n-dimensional)
_FUNCTIONS = {
    "fft": ("C2C", False, False), "ifft": ("C2C", True, False), "rfft": ("R2C", False, False),
    "irfft": ("C2R", True, False), "hfft": ("C2R", True, False), "ihfft": ("R2C", False, False),
    "fftn": ("C2C", False, True), "ifftn": ("C2C", True, True), "rfftn": ("R2C", False, True),
    "irfftn": ("C2R", True, True), "fft2": ("C2C", False, True), "ifft2": ("C2C", True, True),
    "rfft2": ("R2C", False, True), "irfft2": ("C2R", True, True),
}


def route(name, a, n, axes, norm, out, prolog, epilog, options, execution, stream):
    """``mathpy.fft.<name>(a, n_or_s, axis_or_axes, norm, out, ...)`` for a torch tensor that needs autograd or
    torch.compile: the same result (NumPy 2's rules and dtypes, :mod:`mathpy.host.fft._numpy_rules`), differentiable,
    built from the custom ops."""
    call = f"mathpy.fft.{name}"
    options = _check_supported(call, a, out, prolog, epilog, options, execution, stream)
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"{call}: a is a {type(a).__module__}.{type(a).__name__}; with torch tensors that require grad "
                        f"(or under torch.compile) the operand must be a torch tensor")
    kind, inverse, n_dimensional = _FUNCTIONS[name]
    if name in ("hfft", "ihfft"):  # hfft = irfft(conj(a)), ihfft = conj(rfft(a)), both with the norm swapped
        norm = swap_norm(norm)
    odd = kind == "C2R" and options is not None and options.last_axis_parity == "odd"
    if n_dimensional:
        # stacklevel: the warnings name the caller of the public function (n_d and _torch_route.fft stand between)
        lengths, axes, _ = cook_nd(tuple(a.shape), n, axes, kind == "C2R", odd, stacklevel=6)
        if not axes:
            check_no_axes(name, kind)
            check_norm(norm)
            return a
    else:
        lengths, axes = cook_1d(tuple(a.shape), n, axes, kind == "C2R", odd)
    norm = check_norm(norm)
    x = _promoted(a, kind != "R2C")
    if name == "hfft":
        x = torch.conj_physical(x)
    # NumPy's sequence of 1-D transforms, one op per run of distinct axes (an axis named twice is transformed twice,
    # each time padded or cropped to its own length)
    for fft_type, stage_axes, stage_lengths in stages(kind, axes, lengths, max_axes=len(axes)):
        sizes = dict(zip(stage_axes, stage_lengths))
        if fft_type == "C2R":
            sizes[stage_axes[-1]] = stage_lengths[-1] // 2 + 1
        x = _resized(x, sizes)
        if fft_type == "C2C":
            x = fft_c2c(x, list(stage_axes), norm, not inverse)
        elif fft_type == "R2C":
            x = fft_r2c(x, list(stage_axes), norm)
        else:
            x = fft_c2r(x, list(stage_axes), norm, stage_lengths[-1])
    return torch.conj_physical(x) if name == "ihfft" else x


def _check_supported(call, a, out, prolog, epilog, options, execution, stream):
    """Refuse, naming it, each argument that has no backward (or no place in a compiled graph); returns ``options``
    as FFTOptions (or None)."""
    why = reason(a=a, out=out, **{f"the user data of {name}": getattr(callback, "data", None)
                                  for name, callback in (("prolog=", prolog), ("epilog=", epilog))})
    if out is not None:
        refuse(call, "out=", f"writes into an existing tensor, which autograd cannot record {why}",
               "drop out= and use the returned tensor")
    for argument, callback in (("prolog=", prolog), ("epilog=", epilog)):
        if callback is not None:
            refuse(call, argument, f"is a callback, which mathpy cannot differentiate or compile into a torch graph "
                   f"{why}", "do the elementwise work with torch ops around the transform, or call it under "
                   "torch.no_grad() (outside torch.compile) with tensors whose user data does not require grad")
    if options is not None:
        options = check_or_create_options(FFTOptions, options, "options")
        if options.inplace:
            refuse(call, "options.inplace=True", f"overwrites the operand, which has no backward {why}",
                   "leave inplace False")
    if execution is not None:
        refuse(call, "execution=", f"moves data between devices outside autograd {why}",
               "move the tensor with .to(device) (differentiable) and leave execution=None")
    if stream is not None:
        refuse(call, "stream=", f"is not supported here {why}",
               "make the stream current with torch.cuda.stream(...): mathpy runs on torch's current stream")
    return options


def _promoted(x, complex_result):
    """``x`` in NumPy 2's computation dtype (complex when ``complex_result``), by a differentiable cast."""
    dtype = x.dtype
    if dtype.is_complex:
        if not complex_result:
            raise TypeError(f"a real-input FFT needs a real operand, not {dtype}")
        if dtype not in _REAL:
            raise TypeError(f"FFT of dtype {dtype} is not supported; use complex64 or complex128")
        return x
    if dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"half precision ({dtype}) FFTs are not available on this path; convert to float32")
    if dtype == torch.float32:
        return x.to(torch.complex64) if complex_result else x
    return x.to(torch.complex128 if complex_result else torch.float64)  # float64, integers, bool: as NumPy


def _resized(x, sizes):
    """``x`` cropped or zero-padded at the end of each axis to ``sizes`` ({axis: length}); differentiable."""
    pad = [0] * (2 * x.dim())
    for axis, n in sizes.items():
        pad[2 * (x.dim() - 1 - axis) + 1] = n - x.shape[axis]
    if not any(pad):
        return x
    while not pad[-1] and not pad[-2]:
        del pad[-2:]
    return F.pad(x, pad)
