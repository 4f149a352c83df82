"""Pruned and padded one-axis transforms: the pieces of a multi-dimensional FFT that keeps only low modes.

A spectral layer (:class:`~mathpy.torch.SpectralConv`) needs, of an N-D spectrum, only the lowest few modes along each
axis. Transforming the last axis first and dropping its high modes leaves the later passes only the kept columns to
transform (a pruned multi-dimensional FFT); going back, each pass pads only the axis it transforms. Four ops, all on
the **last axis** (the layer moves the axis it transforms there; a non-contiguous operand is made dense first, which
after the first pass touches pruned data only):

- ``mathpy::fft_r2c_low(x, keep, norm)``: the first ``keep`` bins of ``rfft(x)`` (frequencies 0 .. keep - 1);
- ``mathpy::fft_c2r_low(x, n, norm)``: ``irfft`` to length ``n`` of a one-sided spectrum of which ``x`` holds the
  first bins (the rest are zero);
- ``mathpy::fft_c2c_low(x, keep, norm, forward)``: the ``keep`` lowest frequencies of ``fft(x)`` (``ifft`` when not
  ``forward``), in FFT order: ``0 .. ceil(keep/2) - 1`` then ``-floor(keep/2) .. -1``;
- ``mathpy::fft_c2c_pad(x, n, norm, forward)``: the length-``n`` transform of a spectrum of which ``x`` holds those
  lowest frequencies (the rest are zero).

Each op's backward is its partner: the adjoint of "transform, then keep" is "pad, then the adjoint transform", and
back (the C2C pair with the opposite direction and the swapped norm; the real pair with the one-sided spectrum's bin
weights, as for :mod:`._fft`'s ``fft_r2c`` / ``fft_c2r``), so gradients are exact and never transform the discarded
modes. ``torch.autograd.gradcheck`` checks them in float64.

The real pair has a second form for few kept bins, :func:`r2c_low_gemm` / :func:`c2r_low_gemm`: the kept part of a
real DFT is a ``(n, 2 keep)`` real matrix, so the pruned R2C is one GEMM (mathpy.matmul) that reads the grid once and
writes only the kept bins, and the padded C2R one GEMM that reads only them and writes the grid: no full half
spectrum, zero-padded or not, is ever written. It costs ``4 n keep`` flops per row against the FFT's ``~5 n log2 n``
but moves half the bytes or less; with few bins, or 16-bit tensor cores, that is the faster side of a memory-bound
pass. Gradients come from mathpy.matmul's (the transposed matrix).
"""

import torch

import math

from .. import _memo
from .. import fft as _mathpy_fft
from ..host.fft._numpy_rules import swap_norm
from ..host.matmul import MatmulOptions
from ..host.matmul import matmul as _mathpy_matmul
from ._common import call, define, eager

__all__ = ["r2c_low", "c2r_low", "c2c_low", "c2c_pad", "r2c_low_gemm", "c2r_low_gemm", "split"]

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def split(keep):
    """``(non-negative, negative)`` frequencies among the ``keep`` lowest, in FFT order (0 first)."""
    return keep - keep // 2, keep // 2


def _dense(x):
    return x if x.is_contiguous() else x.contiguous()


# --- kernels and fakes -------------------------------------------------------------------------------------------

# Each kernel runs mathpy's transform unscaled and applies the norm's factor on the small side, the kept bins, inside a
# copy it makes anyway (the cut, the padding): no pass over the full spectrum scales it.
_UNSCALED = {True: "backward", False: "forward"}  # forward (inverse) transforms with this norm are not scaled


def _factor(norm, n, forward):
    """What ``norm`` multiplies a length-``n`` forward (``forward``) or inverse transform by; None for 1."""
    return {"backward": None, "ortho": 1 / math.sqrt(n), "forward": 1 / n}[norm if forward else swap_norm(norm)]


def _r2c_low_kernel(x, keep, norm):
    n = x.shape[-1]
    _check_keep(keep, n // 2 + 1, "fft_r2c_low")
    if keep == n // 2 + 1:
        return _mathpy_fft.rfft(_dense(x), axis=-1, norm=norm)
    kept = _mathpy_fft.rfft(_dense(x), axis=-1, norm="backward")[..., :keep]
    factor = _factor(norm, n, True)
    return kept.contiguous() if factor is None else torch.mul(kept, factor).contiguous()


def _c2r_low_kernel(x, n, norm):
    keep, bins = x.shape[-1], n // 2 + 1
    _check_keep(keep, bins, "fft_c2r_low")
    if keep == bins:
        return _mathpy_fft.irfft(_dense(x), n=n, axis=-1, norm=norm)
    # the missing bins are zeros; padded here (scaled on the way), so that the transform is a remembered stateless
    # call (NumPy's padding rule would take the full path at every call)
    padded = x.new_zeros((*x.shape[:-1], bins))
    _scaled_into(padded[..., :keep], x, _factor(norm, n, False))
    return _mathpy_fft.irfft(padded, n=n, axis=-1, norm=_UNSCALED[False])


def _c2c_low_kernel(x, keep, norm, forward):
    n = x.shape[-1]
    _check_keep(keep, n, "fft_c2c_low")
    transform = _mathpy_fft.fft if forward else _mathpy_fft.ifft
    if keep == n:
        return transform(_dense(x), axis=-1, norm=norm)
    spectrum = transform(_dense(x), axis=-1, norm=_UNSCALED[forward])
    positive, negative = split(keep)
    kept = torch.cat((spectrum[..., :positive], spectrum[..., n - negative:]), dim=-1)
    factor = _factor(norm, n, forward)
    return kept if factor is None else kept.mul_(factor)


def _c2c_pad_kernel(x, n, norm, forward):
    keep = x.shape[-1]
    _check_keep(keep, n, "fft_c2c_pad")
    transform = _mathpy_fft.fft if forward else _mathpy_fft.ifft
    if keep == n:
        return transform(_dense(x), axis=-1, norm=norm)
    positive, negative = split(keep)
    padded = x.new_zeros((*x.shape[:-1], n))
    factor = _factor(norm, n, forward)
    _scaled_into(padded[..., :positive], x[..., :positive], factor)
    _scaled_into(padded[..., n - negative:], x[..., positive:], factor)
    return transform(padded, axis=-1, norm=_UNSCALED[forward])


def _scaled_into(destination, source, factor):
    """``destination[...] = source * factor`` in one kernel (``factor`` None: a copy)."""
    if factor is None:
        destination.copy_(source)
    else:
        torch.mul(source, factor, out=destination)


def _check_keep(keep, n, what):
    """``keep`` bins of an axis of ``n``: a ValueError otherwise. A plain test, not torch._check: dynamo (torch 2.11)
    cannot trace torch._check's message function when it reads these closure variables, and under torch.compile the
    test becomes a guard on the lengths."""
    if not 1 <= keep <= n:
        raise ValueError(f"{what}: {keep} bins of an axis of {n} (allowed: 1 to {n})")


def _r2c_low_fake(x, keep, norm):
    _check_keep(keep, x.shape[-1] // 2 + 1, "fft_r2c_low")
    return x.new_empty((*x.shape[:-1], keep), dtype=_COMPLEX[x.dtype])


def _c2r_low_fake(x, n, norm):
    _check_keep(x.shape[-1], n // 2 + 1, "fft_c2r_low")
    return x.new_empty((*x.shape[:-1], n), dtype=_REAL[x.dtype])


def _c2c_low_fake(x, keep, norm, forward):
    _check_keep(keep, x.shape[-1], "fft_c2c_low")
    return x.new_empty((*x.shape[:-1], keep))


def _c2c_pad_fake(x, n, norm, forward):
    _check_keep(x.shape[-1], n, "fft_c2c_pad")
    return x.new_empty((*x.shape[:-1], n))


# --- gradients ---------------------------------------------------------------------------------------------------

def _r2c_low_save(ctx, output, x, keep, norm):
    ctx.n, ctx.norm = x.shape[-1], norm


def _r2c_low_backward(ctx, grad):
    """Pad, halve the interior bins, C2R (``_fft``'s R2C rule on the kept bins)."""
    weighted = grad * _weights(ctx.n, grad.shape[-1], 0.5, grad)
    return c2r_low(weighted, ctx.n, swap_norm(ctx.norm)), None, None


def _c2r_low_save(ctx, output, x, n, norm):
    ctx.keep, ctx.n, ctx.norm = x.shape[-1], n, norm


def _c2r_low_backward(ctx, grad):
    """R2C, keep the bins ``x`` held, double the interior ones."""
    spectrum = r2c_low(grad, ctx.keep, swap_norm(ctx.norm))
    return spectrum * _weights(ctx.n, ctx.keep, 2.0, spectrum), None, None


def _c2c_low_save(ctx, output, x, keep, norm, forward):
    ctx.n, ctx.norm, ctx.forward = x.shape[-1], norm, forward


def _c2c_low_backward(ctx, grad):
    """Pad, then the opposite transform with the swapped norm."""
    return c2c_pad(grad, ctx.n, swap_norm(ctx.norm), not ctx.forward), None, None, None


def _c2c_pad_save(ctx, output, x, n, norm, forward):
    ctx.keep, ctx.norm, ctx.forward = x.shape[-1], norm, forward


def _c2c_pad_backward(ctx, grad):
    """The opposite transform with the swapped norm, then keep the bins ``x`` held."""
    return c2c_low(grad, ctx.keep, swap_norm(ctx.norm), not ctx.forward), None, None, None


_weight_cache = _memo.Memo("pruned-weights", group="torch", max_entries=64)  # (n, keep, interior, dtype, device)


def _weights(n, keep, interior, like):
    """The first ``keep`` bin weights of a length-``n`` one-sided spectrum: ``interior`` for the bins with a mirror
    (1 .. (n - 1) // 2), 1 for DC and Nyquist; remembered in eager mode (not while a CUDA graph captures)."""
    remember = eager((like,))
    key = (n, keep, interior, like.dtype, like.device)
    weights = _weight_cache.get(key) if remember else None
    if weights is None:
        weights = torch.ones(keep, dtype=_REAL.get(like.dtype, like.dtype), device=like.device)
        weights[1:min(keep, (n - 1) // 2 + 1)] = interior
        if remember and not (like.is_cuda and torch.cuda.is_current_stream_capturing()):
            _weight_cache.put(key, weights)
    return weights


_R2C_LOW = define("fft_r2c_low(Tensor x, int keep, str norm) -> Tensor", _r2c_low_kernel, _r2c_low_fake,
                  _r2c_low_save, _r2c_low_backward)
_C2R_LOW = define("fft_c2r_low(Tensor x, int n, str norm) -> Tensor", _c2r_low_kernel, _c2r_low_fake,
                  _c2r_low_save, _c2r_low_backward)
_C2C_LOW = define("fft_c2c_low(Tensor x, int keep, str norm, bool forward) -> Tensor", _c2c_low_kernel,
                  _c2c_low_fake, _c2c_low_save, _c2c_low_backward)
_C2C_PAD = define("fft_c2c_pad(Tensor x, int n, str norm, bool forward) -> Tensor", _c2c_pad_kernel, _c2c_pad_fake,
                  _c2c_pad_save, _c2c_pad_backward)


def r2c_low(x, keep, norm):
    """The first ``keep`` bins of ``rfft(x)`` along the last axis (real ``x``), differentiable."""
    return call(_R2C_LOW, (x,), x, keep, norm)


def c2r_low(x, n, norm):
    """``irfft(x, n)`` along the last axis, ``x`` holding the first bins of the one-sided spectrum, differentiable."""
    return call(_C2R_LOW, (x,), x, n, norm)


def c2c_low(x, keep, norm, forward=True):
    """The ``keep`` lowest frequencies (FFT order) of ``fft(x)`` (``ifft``) along the last axis, differentiable."""
    return call(_C2C_LOW, (x,), x, keep, norm, forward)


def c2c_pad(x, n, norm, forward=False):
    """The length-``n`` ``ifft`` (``fft``) along the last axis of a spectrum of which ``x`` holds the lowest frequencies
    in FFT order, differentiable."""
    return call(_C2C_PAD, (x,), x, n, norm, forward)


# --- the real pair as GEMMs ----------------------------------------------------------------------------------------

_FLOAT32_RESULT = MatmulOptions(result_type="float32")


def r2c_low_gemm(x, keep, norm):
    """:func:`r2c_low` as one GEMM with the ``(n, 2 keep)`` matrix of the kept bins' cosines and sines; ``x`` of a
    16-bit dtype is multiplied in it (tensor cores) with a float32 result. Differentiable (mathpy.matmul)."""
    n = x.shape[-1]
    _check_keep(keep, n // 2 + 1, "r2c_low_gemm")
    matrix = _dft_matrix(n, keep, norm, False, x.dtype, x.device)
    options = _FLOAT32_RESULT if x.dtype in (torch.float16, torch.bfloat16) else None
    rows = _mathpy_matmul(x.reshape(-1, n), matrix, options=options)  # (rows, 2 keep): re, im interleaved
    return torch.view_as_complex(rows.reshape(*x.shape[:-1], keep, 2))


def c2r_low_gemm(x, n, norm, dtype=None):
    """:func:`c2r_low` as one GEMM with the ``(2 keep, n)`` matrix of the one-sided inverse (each interior bin twice,
    DC and Nyquist once, their imaginary parts ignored, as irfft); computed in ``dtype`` (a 16-bit one: tensor cores,
    a result in that dtype; None: ``x``'s real dtype). Differentiable (mathpy.matmul)."""
    keep = x.shape[-1]
    _check_keep(keep, n // 2 + 1, "c2r_low_gemm")
    dtype = dtype or _REAL[x.dtype]
    real = torch.view_as_real(x if x.is_contiguous() else x.contiguous()).reshape(-1, 2 * keep)
    matrix = _dft_matrix(n, keep, norm, True, dtype, x.device)
    return _mathpy_matmul(real if real.dtype == dtype else real.to(dtype), matrix).reshape(*x.shape[:-1], n)


_matrices = _memo.Memo("pruned-dft-matrices", group="torch", max_entries=64)  # (n, keep, norm, inverse, ...)


def _dft_matrix(n, keep, norm, inverse, dtype, device):
    """The real DFT matrix of the first ``keep`` bins of a length-``n`` axis: ``(n, 2 keep)`` forward (columns re, im
    of each bin), ``(2 keep, n)`` inverse; scaled by ``norm``; computed in float64 from exact integer phases, rounded
    once to ``dtype``. Remembered in eager mode (not while a CUDA graph captures)."""
    key = (n, keep, norm, inverse, dtype, device)
    remember = eager(()) and not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())
    matrix = _matrices.get(key) if remember else None
    if matrix is not None:
        return matrix
    phase = torch.outer(torch.arange(keep, dtype=torch.float64), torch.arange(n, dtype=torch.float64))
    angle = (2 * math.pi / n) * torch.remainder(phase, n)  # (keep, n), exact j * w mod n
    scale = {"backward": 1.0, "ortho": 1 / math.sqrt(n), "forward": 1.0 / n}[norm]
    if inverse:
        scale = {"backward": 1.0 / n, "ortho": 1 / math.sqrt(n), "forward": 1.0}[norm]
        count = torch.full((keep, 1), 2.0, dtype=torch.float64)
        count[0] = 1.0
        if n % 2 == 0 and keep == n // 2 + 1:
            count[-1] = 1.0  # the Nyquist bin stands for itself only
        pair = torch.stack((count * torch.cos(angle), -count * torch.sin(angle)), dim=1)  # (keep, 2, n)
        matrix = (scale * pair).reshape(2 * keep, n)
    else:
        pair = torch.stack((torch.cos(angle), -torch.sin(angle)), dim=1)  # (keep, 2, n)
        matrix = (scale * pair).reshape(2 * keep, n).T
    matrix = matrix.to(device=device, dtype=dtype).contiguous()
    if remember:
        _matrices.put(key, matrix)
    return matrix
