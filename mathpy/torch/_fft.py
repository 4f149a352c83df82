"""mathpy.fft for torch tensors that need a gradient or a place in a torch.compile graph.

Three ops (declared as :mod:`._common` says: an eager call costs what an autograd.Function costs) run mathpy's
transforms; everything NumPy's signatures add around them (``n``/``s`` padding and
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
torch's own (``torch.fft``'s derivatives); ``torch.autograd.gradcheck`` checks them in the tests. :func:`route` turns a
public call into these ops, and remembers what NumPy's rules decided per operand shape and dtype.
"""

import torch
import torch.nn.functional as F

from .. import _memo
from .._options import check_or_create_options
from ..host.fft._numpy_call import n_d, one_d
from ..host.fft._options import FFTOptions
from ..host.fft._numpy_rules import check_no_axes, check_norm, cook_1d, cook_nd, stage_shape, stages, swap_norm
from ._common import PLAIN_TENSORS, compiling, call, define, eager, reason, refuse, refuse_placement

__all__ = ["fft_c2c", "fft_r2c", "fft_c2r", "route"]

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


# --- the ops -----------------------------------------------------------------------------------------------------

def _transform(name, kind, inverse, x, dim, norm, n=None):
    """mathpy's un-routed ``name`` of ``x`` over ``dim`` (one axis: the 1-D function, the shortest path to the
    remembered prepared call; ``n``: the 1-D length or the N-D ``s``)."""
    if len(dim) == 1:
        result = one_d(name, kind, inverse, x, n, dim[0], norm, None, None, None, None, None, None)
    else:
        result = n_d(name + "n", kind, inverse, x, n, dim, norm, None, None, None, None, None, None)
    return result.contiguous()


def _c2c_kernel(x, dim, norm, forward):
    return _transform("fft", "C2C", False, x, dim, norm) if forward else _transform("ifft", "C2C", True, x, dim, norm)


def _r2c_kernel(x, dim, norm):
    return _transform("rfft", "R2C", False, x, dim, norm)


def _c2r_kernel(x, dim, norm, last):
    s = last if len(dim) == 1 else [x.shape[d] for d in dim[:-1]] + [last]
    return _transform("irfft", "C2R", True, x, dim, norm, s)


def _c2c_fake(x, dim, norm, forward):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _r2c_fake(x, dim, norm):
    shape = list(x.shape)
    shape[dim[-1]] = shape[dim[-1]] // 2 + 1
    return x.new_empty(shape, dtype=_COMPLEX[x.dtype])


def _c2r_fake(x, dim, norm, last):
    shape = list(x.shape)
    shape[dim[-1]] = last
    return x.new_empty(shape, dtype=_REAL[x.dtype])


def _c2c_save(ctx, output, x, dim, norm, forward):
    ctx.dim, ctx.norm, ctx.forward = dim, norm, forward


def _c2c_backward(ctx, grad):
    """The opposite transform with the swapped norm."""
    return fft_c2c(grad, ctx.dim, swap_norm(ctx.norm), not ctx.forward), None, None, None


def _r2c_save(ctx, output, x, dim, norm):
    ctx.dim, ctx.norm, ctx.n = dim, norm, x.shape[dim[-1]]


def _r2c_backward(ctx, grad):
    """A C2R of the gradient with the interior bins halved."""
    weighted = grad * _bin_weights(ctx.n, 0.5, grad, ctx.dim[-1])
    return fft_c2r(weighted, ctx.dim, swap_norm(ctx.norm), ctx.n), None, None


def _c2r_save(ctx, output, x, dim, norm, last):
    ctx.dim, ctx.norm, ctx.last = dim, norm, last


def _c2r_backward(ctx, grad):
    """An R2C of the gradient with the interior bins doubled."""
    spectrum = fft_r2c(grad, ctx.dim, swap_norm(ctx.norm))
    return spectrum * _bin_weights(ctx.last, 2.0, spectrum, ctx.dim[-1]), None, None, None


_C2C_OP = define("fft_c2c(Tensor x, int[] dim, str norm, bool forward) -> Tensor", _c2c_kernel, _c2c_fake,
                 _c2c_save, _c2c_backward)
_R2C_OP = define("fft_r2c(Tensor x, int[] dim, str norm) -> Tensor", _r2c_kernel, _r2c_fake, _r2c_save,
                 _r2c_backward)
_C2R_OP = define("fft_c2r(Tensor x, int[] dim, str norm, int last) -> Tensor", _c2r_kernel, _c2r_fake, _c2r_save,
                 _c2r_backward)


def fft_c2c(x, dim, norm, forward):
    """Complex-to-complex FFT of ``x`` over ``dim`` (mathpy.fft.fftn / ifftn), differentiable."""
    return call(_C2C_OP, (x,), x, dim, norm, forward)


def fft_r2c(x, dim, norm):
    """Real-to-complex FFT of ``x`` over ``dim``, the last one halved (mathpy.fft.rfftn), differentiable."""
    return call(_R2C_OP, (x,), x, dim, norm)


def fft_c2r(x, dim, norm, last):
    """Complex-to-real inverse FFT of ``x`` over ``dim``; the last axis of the result has length ``last`` and ``x``
    holds its ``last // 2 + 1`` bins (mathpy.fft.irfftn), differentiable."""
    return call(_C2R_OP, (x,), x, dim, norm, last)


_weights = _memo.Memo("bin-weights", group="torch", max_entries=64)  # (n, interior, dtype, device, axis, ndim)


def _bin_weights(n, interior, like, axis):
    """Weights of the ``n // 2 + 1`` bins of a one-sided spectrum of length ``n`` along ``axis`` (broadcastable
    against ``like``): ``interior`` for the bins that have a mirror (1 .. (n - 1) // 2), 1 for DC and Nyquist.
    Remembered in eager mode (a traced call makes them in its graph)."""
    plain = eager((like,))
    key = (n, interior, like.dtype, like.device, axis % like.dim(), like.dim())
    weights = _weights.get(key) if plain else None
    if weights is None:
        weights = torch.ones(n // 2 + 1, dtype=_REAL.get(like.dtype, like.dtype), device=like.device)
        weights[1:(n - 1) // 2 + 1] = interior
        shape = [1] * like.dim()
        shape[axis] = n // 2 + 1
        weights = weights.view(shape)
        # (not while a CUDA graph captures: its fill would run only at replay)
        if plain and not (like.is_cuda and torch.cuda.is_current_stream_capturing()):
            _weights.put(key, weights)
    return weights


# --- mathpy.fft's functions on torch tensors ---------------------------------------------------------------------

# name: (transform kind, inverse, n-dimensional)
_FUNCTIONS = {
    "fft": ("C2C", False, False), "ifft": ("C2C", True, False), "rfft": ("R2C", False, False),
    "irfft": ("C2R", True, False), "hfft": ("C2R", True, False), "ihfft": ("R2C", False, False),
    "fftn": ("C2C", False, True), "ifftn": ("C2C", True, True), "rfftn": ("R2C", False, True),
    "irfftn": ("C2R", True, True), "fft2": ("C2C", False, True), "ifft2": ("C2C", True, True),
    "rfft2": ("R2C", False, True), "irfft2": ("C2R", True, True),
}


# (name, n, axes, norm, shape, dtype) -> steps, for calls with no other argument
_recipes = _memo.Memo("fft-recipes", group="torch", max_entries=256)


def route(name, a, n, axes, norm, out, prolog, epilog, options, execution, stream):
    """``mathpy.fft.<name>(a, n_or_s, axis_or_axes, norm, out, ...)`` for a torch tensor that needs autograd or
    torch.compile: the same result (NumPy 2's rules and dtypes, :mod:`mathpy.host.fft._numpy_rules`), differentiable,
    built from the ops. What NumPy's rules decide for an operand's shape and dtype (the recipe: casts, resizes, the
    ops and their arguments) is remembered, so that a repeated eager call is one lookup and its ops."""
    if out is None and prolog is None and epilog is None and options is None and execution is None and \
            stream is None and type(a) in PLAIN_TENSORS and not compiling():
        try:
            key = (name, n if type(n) is not list else tuple(n), axes if type(axes) is not list else tuple(axes),
                   norm, a.shape, a.dtype)
            steps = _recipes.get(key)
        except TypeError:  # unhashable arguments: the full path judges them
            key = steps = None
        if steps is None:
            steps, memo = _recipe(name, a, n, axes, norm, None)
            if key is not None and memo:
                _recipes.put(key, steps)
    else:
        options = _check_supported(f"mathpy.fft.{name}", a, out, prolog, epilog, options, execution, stream)
        steps, _ = _recipe(name, a, n, axes, norm, options)
    for step in steps:
        a = step[0](a, *step[1:])
    return a


def _recipe(name, a, n, axes, norm, options):
    """``(steps, memo)``: the ops that compute ``mathpy.fft.<name>`` on ``a`` as a tuple of ``(function, *arguments)``
    run in turn on the operand, and whether they can be remembered for its shape and dtype (not when NumPy's rules
    warned: every call warns)."""
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"mathpy.fft.{name}: a is a {type(a).__module__}.{type(a).__name__}; with torch tensors that "
                        f"require grad (or under torch.compile) the operand must be a torch tensor")
    kind, inverse, n_dimensional = _FUNCTIONS[name]
    if name in ("hfft", "ihfft"):  # hfft = irfft(conj(a)), ihfft = conj(rfft(a)), both with the norm swapped
        norm = swap_norm(norm)
    odd = kind == "C2R" and options is not None and options.last_axis_parity == "odd"
    warned = False
    if n_dimensional:
        # stacklevel: the warnings name the caller of the public function (_functions._n_d and route stand between)
        lengths, axes, warned = cook_nd(tuple(a.shape), n, axes, kind == "C2R", odd, stacklevel=6)
        if not axes:
            check_no_axes(name, kind)
            check_norm(norm)
            return (), not warned
    else:
        lengths, axes = cook_1d(tuple(a.shape), n, axes, kind == "C2R", odd)
    norm = check_norm(norm)
    steps = []
    dtype = _promoted_dtype(a.dtype, kind != "R2C")
    if dtype != a.dtype:
        steps.append((_cast, dtype))
    if name == "hfft":
        steps.append((torch.conj_physical,))
    # NumPy's sequence of 1-D transforms, one op per run of distinct axes (an axis named twice is transformed twice,
    # each time padded or cropped to its own length)
    shape = list(a.shape)
    for fft_type, stage_axes, stage_lengths in stages(kind, axes, lengths, max_axes=len(axes)):
        sizes = dict(zip(stage_axes, stage_lengths))
        if fft_type == "C2R":
            sizes[stage_axes[-1]] = stage_lengths[-1] // 2 + 1
        if any(shape[axis] != size for axis, size in sizes.items()):
            steps.append((_resized, sizes))
        dim = list(stage_axes)
        if fft_type == "C2C":
            steps.append((fft_c2c, dim, norm, not inverse))
        elif fft_type == "R2C":
            steps.append((fft_r2c, dim, norm))
        else:
            steps.append((fft_c2r, dim, norm, stage_lengths[-1]))
        shape = list(stage_shape(shape, fft_type, stage_axes, stage_lengths))
    if name == "ihfft":
        steps.append((torch.conj_physical,))
    return tuple(steps), not warned


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
    refuse_placement(call, execution, stream, why)
    return options


def _promoted_dtype(dtype, complex_result):
    """NumPy 2's computation dtype for a tensor of ``dtype`` (complex when ``complex_result``)."""
    if dtype.is_complex:
        if not complex_result:
            raise TypeError(f"a real-input FFT needs a real operand, not {dtype}")
        if dtype not in _REAL:
            raise TypeError(f"FFT of dtype {dtype} is not supported; use complex64 or complex128")
        return dtype
    if dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"half precision ({dtype}) FFTs are not available on this path; convert to float32")
    if dtype == torch.float32:
        return torch.complex64 if complex_result else dtype
    return torch.complex128 if complex_result else torch.float64  # float64, integers, bool: as NumPy


def _cast(x, dtype):
    return x.to(dtype)  # differentiable


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
