"""NumPy-compatible stateless FFTs: ``import mathpy.fft as fft`` replaces ``numpy.fft``.

Each function takes NumPy's parameters (``n`` / ``s``, ``axis`` / ``axes``, ``norm``, ``out``) and returns NumPy 2's
dtypes (float32/complex64 stay single precision; integers and bools promote to float64/complex128), plus keyword-only

- ``prolog=`` / ``epilog=``: callbacks fused into the transform (a Python function, ``mathpy.fft.Callback(fn,
  data=...)`` or LTO-IR). They see the unnormalised transform; the ``norm`` scale is applied after the epilog. The
  prolog sees the input after ``n``/``s`` padded or cropped it (C-contiguous), the epilog the result.
- ``options=``: :class:`FFTOptions` (``fft_type`` is set by the function, and ``last_axis_parity`` by the lengths:
  ``irfft`` / ``irfftn`` take the default length of the last axis from it when ``n`` / ``s`` do not give one).
- ``execution=``: "cpu", "cuda" or an ExecutionCPU/ExecutionCUDA; default: where the operand lives.
- ``stream=``: the CUDA stream.

Results come back in the caller's package and on its device. A call resolves NumPy's rules here, then plans a
:class:`FFT` with an engine from the plan cache (:func:`plan_cache_info`) and runs its prepared call; a repeated call
with the same argument facts runs that prepared call directly (:mod:`._stateless`). More than three transform axes
are decomposed into several plans.

>>> import numpy as np
>>> x = np.arange(6, dtype=np.float32)
>>> fft(x).dtype, rfft(x).shape, irfft(rfft(x), n=6).dtype
(dtype('complex64'), (4,), dtype('float32'))
>>> bool(np.allclose(ifft(fft(x)), x, atol=1e-6))
True
"""

import contextlib
import dataclasses
import math
import operator

import numpy as np

from ... import _cuda, _operands, _torch_route
from ..._execution import ExecutionCUDA, resolve_execution
from ..._options import check_or_create_options
from ..._streams import stream_pointer
from . import _stateless
from ._call import copy_to_out
from ._options import FFTOptions
from ._plan import FFT, plan_cache
from ._problem import fft_problem, normalize_axes

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn",
           "hfft", "ihfft"]

_NORMS = (None, "backward", "ortho", "forward")
_SWAP = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}
_MAX_AXES = 3


# --- dtype handling ----------------------------------------------------------------------------------------------

def _promoted(dtype, complex_result):
    """NumPy 2's computation dtype for an input dtype (complex when ``complex_result``)."""
    if dtype.kind == "c":
        if not complex_result:
            raise TypeError(f"a real-input FFT needs a real operand, not {dtype}")
        return dtype if dtype in (np.complex64, np.complex128) else np.dtype(np.complex128)
    if dtype in (np.float16, np.float32):  # float16 is computed in single precision, as NumPy does
        return np.dtype(np.complex64) if complex_result else np.dtype(np.float32)
    if dtype == np.float32:
        return np.dtype(np.complex64) if complex_result else dtype
    if dtype.kind in "biuf":
        if dtype.kind == "f" and dtype.itemsize > 8:
            raise TypeError(f"{dtype} FFTs are not supported; use float64")
        return np.dtype(np.complex128) if complex_result else np.dtype(np.float64)
    raise TypeError(f"FFT of dtype {dtype} is not supported; use a real or complex floating-point or integer array")


def _astype(op, dtype):
    if op.dtype == dtype:
        return op
    return _operands.wrap_operand(op.interface.astype(op.tensor, dtype))


def _conj(op):
    return _operands.wrap_operand(op.interface.conj(op.tensor))


def _resize(op, sizes):
    """Crop or zero-pad ``op`` to ``sizes`` ({axis: length}) at the end of each axis, in its own package."""
    shape = list(op.shape)
    changed = {a: n for a, n in sizes.items() if shape[a] != n}
    if not changed:
        return op
    new_shape = list(shape)
    for axis, n in changed.items():
        new_shape[axis] = n
    index = tuple(slice(0, min(shape[a], new_shape[a])) for a in range(len(shape)))
    result = op.interface.on(op.device_id).empty(new_shape, op.dtype, zero=True)
    result[index] = op.tensor[index]
    return _operands.wrap_operand(result)


# --- argument resolution (NumPy 2's rules) -----------------------------------------------------------------------

def _check_norm(norm):
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm!r}; should be "backward", "ortho" or "forward"')
    return norm or "backward"


def _check_n(n, what="n"):
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(n).__name__}") from None
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return n


def _cook_nd(shape, s, axes, inverse_real):
    """(lengths, axes) from NumPy's ``s`` / ``axes`` rules (``-1`` in ``s`` keeps the input's length)."""
    ndim = len(shape)
    if s is None:
        axes = normalize_axes(axes, ndim) if axes is not None else tuple(range(ndim))
        lengths = [shape[a] for a in axes]
        if inverse_real and axes:
            lengths[-1] = 2 * (shape[axes[-1]] - 1)
    else:
        s = (s,) if isinstance(s, (int, np.integer)) else tuple(s)
        if axes is None:
            if len(s) > ndim:
                raise ValueError(f"s {s} has more entries than the operand has dimensions ({ndim})")
            axes = tuple(range(ndim - len(s), ndim))
        else:
            axes = normalize_axes(axes, ndim)
        if len(s) != len(axes):
            raise ValueError(f"Shape s {s} and axes {axes} must have the same length")
        lengths = []
        for k, (n, axis) in enumerate(zip(s, axes)):
            if n == -1:
                n = shape[axis] if not (inverse_real and k == len(s) - 1) else 2 * (shape[axis] - 1)
            lengths.append(_check_n(n, "s"))
    if not axes:
        raise ValueError("axes must name at least one axis")
    for n in lengths:
        _check_n(n)
    return tuple(lengths), tuple(axes)


def _scale(norm, inverse, lengths):
    total = math.prod(lengths)
    if norm == "ortho":
        return 1.0 / math.sqrt(total)
    if (norm == "backward") == inverse:
        return 1.0 / total
    return None


# --- the one code path -------------------------------------------------------------------------------------------

def _run(fft_type, a, lengths, axes, norm, out, inverse, prolog, epilog, options, execution, stream, key):
    """Transform ``a`` (fft_type "C2C", "R2C", "C2R") over ``axes`` to logical ``lengths``. ``key``: the call's key
    for :mod:`._stateless` (None: nothing to remember)."""
    if out is None:
        op, out_op = _operands.wrap_operand(a, "a"), None
    else:
        ops = _operands.wrap_operands({"a": a, "out": out})
        op, out_op = ops["a"], ops["out"]
    norm = _check_norm(norm)
    options = _DEFAULT_OPTIONS if options is None else check_or_create_options(FFTOptions, options, "options")
    executing = resolve_execution(execution, op.device_id)
    on_gpu = isinstance(executing, ExecutionCUDA)
    if on_gpu:
        _cuda.require_device(executing.device_id)  # before a GPU array package is looked for
    dtype = _promoted(op.dtype, fft_type != "R2C")
    # Promote, then pad or crop to the logical lengths (C2R: the halved last axis holds n//2+1); on a GPU these
    # copies are ordered on the caller's stream, before the transform.
    sizes = dict(zip(axes, lengths))
    if fft_type == "C2R":
        sizes[axes[-1]] = lengths[-1] // 2 + 1
    if op.dtype != dtype or any(op.shape[a] != n for a, n in sizes.items()):
        key = None  # a prepared call runs on the caller's array as it is
        handle = None if op.on_host else stream_pointer(stream, op.package, op.device_id)
        with op.interface.stream_scope(op.device_id, handle) if handle is not None else _NULL_SCOPE:
            op = _resize(_astype(op, dtype), sizes)
    result_dtype = np.dtype(np.float32 if dtype in (np.float32, np.complex64) else np.float64) if fft_type == "C2R" \
        else np.result_type(dtype, np.complex64)
    result_shape = list(op.shape)
    if fft_type == "R2C":
        result_shape[axes[-1]] = lengths[-1] // 2 + 1
    elif fft_type == "C2R":
        result_shape[axes[-1]] = lengths[-1]
    result_shape = tuple(result_shape)
    if out_op is not None:
        if tuple(out_op.shape) != result_shape:
            raise ValueError(f"out has shape {out_op.shape}, but the result has shape {result_shape}")
        if not np.can_cast(result_dtype, out_op.dtype, "same_kind"):
            raise TypeError(f"out has dtype {out_op.dtype}, which cannot hold the {result_dtype} result")
    scale = _scale(norm, inverse, lengths)
    if any(extent == 0 for extent in op.shape):  # empty batch: nothing to transform
        result = _operands.empty(op.package, result_shape, result_dtype, op.device_id)
        return _finish_out(out_op, result)

    # Split into plans of at most three axes: R2C does its halved axis first, C2R last.
    if len(axes) <= _MAX_AXES:
        stages = [(fft_type, axes)]
    else:
        groups = [axes[max(0, i - _MAX_AXES):i] for i in range(len(axes), 0, -_MAX_AXES)]  # last axes first
        if fft_type == "C2R":
            stages = [("C2C", g) for g in reversed(groups[1:])] + [("C2R", groups[0])]
        else:
            stages = [(fft_type, groups[0])] + [("C2C", g) for g in groups[1:]]
        key = None
    caller = op
    if len(stages) > 1:  # move once, not per stage
        if op.on_host and on_gpu:
            op = _operands.to_device(op, executing.device_id, None)
        elif not op.on_host and not on_gpu:
            op = _operands.to_host(op, None)
    direction = 1 if inverse else -1
    parity = "odd" if lengths[-1] % 2 else "even"
    for index, (stage_type, stage_axes) in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        stage_options = _stage_options(options, stage_type, options.inplace and len(stages) == 1, parity)
        problem = fft_problem(op, stage_axes, stage_options, executing)
        handle = stream_pointer(stream, problem.holder, problem.device_id) if problem.on_gpu else None
        plan = FFT.for_problem(op, problem, handle, plan_cache)
        try:
            plan.plan(prolog=prolog if first else None, epilog=epilog if last else None)
            stage_out = out_op if (last and len(stages) == 1) else None
            stage_direction = problem.direction(direction if stage_type == "C2C" else None)
            stage_scale = scale if last else None
            result = plan.prepared_call.execute(op, stage_direction, handle, stage_scale, stage_out)
            if len(stages) == 1 and stage_out is None:
                _stateless.remember(key, plan.prepared_call, stage_direction, stage_scale)
        finally:
            plan.free()
        op = _operands.wrap_operand(result) if not last else op
    if len(stages) > 1:
        result = _operands.as_package(result, caller)
        return _finish_out(out_op, result)
    return result


_DEFAULT_OPTIONS = FFTOptions()
_options_memo = {}
_NULL_SCOPE = contextlib.nullcontext()


def _stage_options(options, fft_type, inplace, parity):
    """The caller's options for one plan of the call: its FFT type, in-place flag and parity set (memoised)."""
    key = (options, fft_type, inplace, parity)
    found = _options_memo.get(key)
    if found is None:
        if len(_options_memo) > 256:
            _options_memo.clear()
        found = _options_memo[key] = dataclasses.replace(options, fft_type=fft_type, inplace=inplace,
                                                         last_axis_parity=parity)
    return found


def _odd(options):
    """Whether ``options`` (None, a dict or FFTOptions) ask for an odd last axis of a C2R result."""
    if options is None:
        return False
    if isinstance(options, dict):
        options = check_or_create_options(FFTOptions, options, "options")
    return getattr(options, "last_axis_parity", "even") == "odd"


def _finish_out(out_op, result):
    if out_op is None or result is out_op.tensor:
        return result
    copy_to_out(out_op, result, None)
    return out_op.tensor


def _one_axis(a, n, axis):
    shape = _shape(a)
    ndim = len(shape)
    if ndim == 0:
        raise ValueError("an FFT needs an operand with at least one dimension")
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, without the general checks
        axis %= ndim
    else:
        (axis,) = normalize_axes((axis,), ndim)
    return axis, (_check_n(n) if n is not None else shape[axis])


def fft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
        stream=None):
    """One-dimensional discrete Fourier transform (as ``numpy.fft.fft``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("fft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("fft", (n, axis, norm), a, out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, n = _one_axis(a, n, axis)
    return _run("C2C", a, (n,), (axis,), norm, out, False, prolog, epilog, options, execution, stream, key)


def ifft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """One-dimensional inverse discrete Fourier transform (as ``numpy.fft.ifft``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("ifft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("ifft", (n, axis, norm), a, out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, n = _one_axis(a, n, axis)
    return _run("C2C", a, (n,), (axis,), norm, out, True, prolog, epilog, options, execution, stream, key)


def rfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """One-dimensional FFT of a real operand: the n//2+1 non-negative frequencies (as ``numpy.fft.rfft``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("rfft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("rfft", (n, axis, norm), a, out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, n = _one_axis(a, n, axis)
    return _run("R2C", a, (n,), (axis,), norm, out, False, prolog, epilog, options, execution, stream, key)


def irfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Inverse of :func:`rfft`: a real result of length ``n`` (default ``2 * (m - 1)``) (as ``numpy.fft.irfft``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("irfft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("irfft", (n, axis, norm), a, out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, m = _one_axis(a, None, axis)
    n = _check_n(2 * (m - 1) + _odd(options) if n is None else n)
    return _run("C2R", a, (n,), (axis,), norm, out, True, prolog, epilog, options, execution, stream, key)


def hfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """FFT of a Hermitian-symmetric signal given by its first half: a real spectrum (as ``numpy.fft.hfft``).

    Computed as ``irfft(conj(a), n, norm=swapped)``; callbacks apply to that C2R transform."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("hfft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    swapped = _SWAP[_check_norm(norm)]  # before any work: a bad norm is refused as numpy.fft does
    op = _operands.wrap_operand(a)
    op = _astype(op, _promoted(op.dtype, True))
    return irfft(_conj(op).tensor, n, axis, swapped, out, prolog=prolog, epilog=epilog, options=options,
                 execution=execution, stream=stream)


def ihfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Inverse of :func:`hfft` (as ``numpy.fft.ihfft``): ``conj(rfft(a, n, norm=swapped))``."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("ihfft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    swapped = _SWAP[_check_norm(norm)]
    out_op = _operands.wrap_operands({"a": a, "out": out})["out"]  # a and out: one package, one device
    result = rfft(a, n, axis, swapped, prolog=prolog, epilog=epilog, options=options, execution=execution,
                  stream=stream)
    result = _conj(_operands.wrap_operand(result)).tensor
    if out_op is not None and tuple(out_op.shape) != tuple(result.shape):
        raise ValueError(f"out has shape {out_op.shape}, but the result has shape {tuple(result.shape)}")
    return _finish_out(out_op, result)


def fftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """N-dimensional FFT over ``axes`` (all by default) (as ``numpy.fft.fftn``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("fftn", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("fftn", (_hashable(s), _hashable(axes), norm), a, out, prolog, epilog, options,
                                    execution, stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, False)
    return _run("C2C", a, lengths, axes, norm, out, False, prolog, epilog, options, execution, stream, key)


def ifftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """N-dimensional inverse FFT (as ``numpy.fft.ifftn``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("ifftn", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("ifftn", (_hashable(s), _hashable(axes), norm), a, out, prolog, epilog, options,
                                    execution, stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, False)
    return _run("C2C", a, lengths, axes, norm, out, True, prolog, epilog, options, execution, stream, key)


def rfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """N-dimensional FFT of a real operand; the last axis is halved (as ``numpy.fft.rfftn``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("rfftn", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("rfftn", (_hashable(s), _hashable(axes), norm), a, out, prolog, epilog, options,
                                    execution, stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, False)
    return _run("R2C", a, lengths, axes, norm, out, False, prolog, epilog, options, execution, stream, key)


def irfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
           stream=None):
    """Inverse of :func:`rfftn` (as ``numpy.fft.irfftn``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("irfftn", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    result, key = _stateless.reuse("irfftn", (_hashable(s), _hashable(axes), norm), a, out, prolog, epilog, options,
                                    execution, stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, True)
    if _odd(options) and (s is None or tuple(np.atleast_1d(s))[-1] == -1):  # the default length: 2 * (m - 1) + 1
        lengths = lengths[:-1] + (lengths[-1] + 1,)
    return _run("C2R", a, lengths, axes, norm, out, True, prolog, epilog, options, execution, stream, key)


def fft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Two-dimensional FFT (as ``numpy.fft.fft2``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("fft2", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    return fftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                stream=stream)


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Two-dimensional inverse FFT (as ``numpy.fft.ifft2``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("ifft2", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    return ifftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                 stream=stream)


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Two-dimensional FFT of a real operand (as ``numpy.fft.rfft2``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("rfft2", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    return rfftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                 stream=stream)


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
           stream=None):
    """Inverse of :func:`rfft2` (as ``numpy.fft.irfft2``)."""
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_route.fft("irfft2", a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    return irfftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                  stream=stream)


def _shape(a):
    shape = getattr(a, "shape", None)
    return tuple(shape) if shape is not None else np.shape(a)


def _hashable(value):
    """``s`` / ``axes`` as part of a prepared call's key: lists become tuples; anything else unhashable is left for the
    full path to judge (the lookup then fails with TypeError and is skipped)."""
    return tuple(value) if type(value) is list else value
