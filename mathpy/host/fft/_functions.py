"""NumPy-compatible stateless FFTs: ``import mathpy.fft as fft`` replaces ``numpy.fft``.

Each function takes NumPy's parameters (``n`` / ``s``, ``axis`` / ``axes``, ``norm``, ``out``) and returns NumPy 2's
dtypes (float32/complex64 stay single precision; integers and bools promote to float64/complex128), plus keyword-only

- ``prolog=`` / ``epilog=``: callbacks fused into the transform (a Python function, ``mathpy.fft.Callback(fn,
  data=...)`` or LTO-IR). They see the unnormalised transform; the ``norm`` scale is applied after the epilog. The
  prolog sees the input after ``n``/``s`` padded or cropped it (C-contiguous), the epilog the result.
- ``options=``: :class:`FFTOptions` (``fft_type`` and ``last_axis_parity`` are set by the function).
- ``execution=``: "cpu", "cuda" or an ExecutionCPU/ExecutionCUDA; default: where the operand lives.
- ``stream=``: the CUDA stream.

Results come back in the caller's package and on its device. Each call is a thin layer over :class:`FFT` with plans
from the plan cache (:func:`plan_cache_info`). More than three transform axes are decomposed into several plans.

>>> import numpy as np
>>> x = np.arange(6, dtype=np.float32)
>>> fft(x).dtype, rfft(x).shape, irfft(rfft(x), n=6).dtype
(dtype('complex64'), (4,), dtype('float32'))
>>> bool(np.allclose(ifft(fft(x)), x, atol=1e-6))
True
"""

import contextlib
import math
import operator
import sys

import numpy as np

from ... import _cuda, _execution, _operands
from ..._execution import ExecutionCUDA, resolve_execution
from ..._options import check_or_create_options
from ..._streams import stream_pointer
from ._options import FFTOptions
from . import _plan
from ._plan import FFT, engine_lock, normalize_axes, plan_cache, prepare

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
    if dtype == np.float16:
        raise TypeError("half precision (float16) FFTs are not available on this path: they run only on the GPU, and "
                        "mathpy's operand layer has no complex32 yet; convert to float32")
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
    if op.package == "torch":
        tensor = op.tensor.to(_operands._torch_dtypes()[1][dtype])
    else:
        tensor = op.tensor.astype(dtype)
    return _operands.wrap_operand(tensor)


def _conj(op):
    if op.package == "torch":
        import torch
        return _operands.wrap_operand(torch.conj_physical(op.tensor))
    return _operands.wrap_operand(op.tensor.conj())


def _xp(package):
    if package == "cupy":
        import cupy
        return cupy
    return np


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
    if op.package == "torch":
        import torch
        tensor = op.tensor
        result = torch.zeros(new_shape, dtype=tensor.dtype, device=tensor.device)
        result[index] = tensor[index]
    else:
        xp = _xp(op.package)
        if op.package == "cupy":
            with xp.cuda.Device(op.device_id):
                result = xp.zeros(new_shape, dtype=op.dtype)
        else:
            result = xp.zeros(new_shape, dtype=op.dtype)
        result[index] = op.tensor[index]
    return _operands.wrap_operand(result)


def _ordered_on(op, stream):
    if op.on_host or stream is None:
        return contextlib.nullcontext()
    return _plan._on_stream(op.package, op.device_id, stream_pointer(stream, op.package, op.device_id))


def _empty_result(op, shape, dtype):
    return _operands.empty(op.package, shape, dtype, op.device_id)


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

def _recipe(tag, a, params, out, prolog, epilog, options, execution, stream):
    """The stateless fast path at a function's entry: (result, None) when a prepared recipe ran, else (None, key)
    with the key under which the general path leaves a recipe (None: not eligible). Eligible: a CuPy array or CUDA
    torch tensor, plain arguments (no out, callbacks, options, execution or stream), one GPU."""
    if out is not None or prolog is not None or epilog is not None or options is not None or \
            execution is not None or stream is not None:
        return None, None
    signature = _gpu_signature(a)
    if signature is None:
        return None, None
    key = (tag, params) + signature[1:]
    try:
        recipe = _plan._fast_recipes.get(key)
    except TypeError:  # an unhashable argument: the general path checks it
        return None, None
    if recipe is not None:
        result = recipe(signature[0])
        if result is not None:
            return result, None
        _plan._fast_recipes.pop(key, None)  # its engine was evicted: plan again
    return None, key


def _run(kind, a, lengths, axes, norm, out, inverse, prolog, epilog, options, execution, stream, fast_key):
    """Transform ``a`` (kind "C2C", "R2C", "C2R") over ``axes`` to logical ``lengths``. ``fast_key``: the caller's
    recipe key from :func:`_recipe` (None: leave no recipe)."""
    if out is None:
        op, out_op = _operands.wrap_operand(a, "a"), None
    else:
        ops = _operands.wrap_operands({"a": a, "out": out})
        op, out_op = ops["a"], ops["out"]
    norm = _check_norm(norm)
    options = _DEFAULT_OPTIONS if options is None else check_or_create_options(FFTOptions, options, "options")
    dtype = _promoted(op.dtype, kind != "R2C")
    # Promote, then pad or crop to the logical lengths (C2R: the halved last axis holds n//2+1); on a GPU these
    # copies are ordered on the caller's stream, before the transform.
    sizes = dict(zip(axes, lengths))
    if kind == "C2R":
        sizes[axes[-1]] = lengths[-1] // 2 + 1
    if op.dtype != dtype or any(op.shape[a] != n for a, n in sizes.items()):
        fast_key = None  # the recipe runs on the caller's array as it is
        with _ordered_on(op, stream):
            op = _resize(_astype(op, dtype), sizes)
    result_dtype = np.dtype(np.float32 if dtype in (np.float32, np.complex64) else np.float64) if kind == "C2R" \
        else np.result_type(dtype, np.complex64)
    result_shape = list(op.shape)
    if kind == "R2C":
        result_shape[axes[-1]] = lengths[-1] // 2 + 1
    elif kind == "C2R":
        result_shape[axes[-1]] = lengths[-1]
    result_shape = tuple(result_shape)
    if out_op is not None:
        if tuple(out_op.shape) != result_shape:
            raise ValueError(f"out has shape {out_op.shape}, but the result has shape {result_shape}")
        if not np.can_cast(result_dtype, out_op.dtype, "same_kind"):
            raise TypeError(f"out has dtype {out_op.dtype}, which cannot hold the {result_dtype} result")
    scale = _scale(norm, inverse, lengths)
    if any(extent == 0 for extent in op.shape):  # empty batch: nothing to transform
        result = _empty_result(op, result_shape, result_dtype)
        return _finish_out(out_op, result)

    # Split into plans of at most three axes: R2C does its halved axis first, C2R last.
    if len(axes) <= _MAX_AXES:
        stages = [(kind, axes)]
    else:
        groups = [axes[max(0, i - _MAX_AXES):i] for i in range(len(axes), 0, -_MAX_AXES)]  # last axes first
        if kind == "C2R":
            stages = [("C2C", g) for g in reversed(groups[1:])] + [("C2R", groups[0])]
        else:
            stages = [(kind, groups[0])] + [("C2C", g) for g in groups[1:]]
    caller = op
    executing = resolve_execution(execution, op.device_id)
    if len(stages) > 1:  # move once, not per stage
        on_gpu = isinstance(executing, ExecutionCUDA)
        if op.on_host and on_gpu:
            op = _operands.to_device(op, executing.device_id, None)
        elif not op.on_host and not on_gpu:
            op = _operands.to_host(op, None)
    x = op.tensor
    direction = 1 if inverse else -1
    parity = "odd" if lengths[-1] % 2 else "even"
    if len(stages) == 1 and prolog is None and epilog is None:
        return _fast(op, axes, _stage_options(kind, options.inplace, parity, options.blocking), executing, stream,
                     direction if kind == "C2C" else None, scale, out_op, fast_key)
    for index, (stage_kind, stage_axes) in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        stage_options = _stage_options(stage_kind, options.inplace and len(stages) == 1, parity, options.blocking)
        plan = FFT(x, axes=stage_axes, options=stage_options, execution=executing, stream=stream, _cached=True)
        try:
            plan.plan(prolog=prolog if first else None, epilog=epilog if last else None)
            stage_out = out_op if (last and out_op is not None and len(stages) == 1) else None
            x = plan._execute(direction if stage_kind == "C2C" else None, None, scale if last else None, stage_out)
        finally:
            plan.free()
    if len(stages) > 1:
        x = _operands.as_package(x, caller)
        return _finish_out(out_op, x)
    return x


_DEFAULT_OPTIONS = FFTOptions()
_options_memo = {}


def _stage_options(kind, inplace, parity, blocking):
    key = (kind, inplace, parity, blocking)
    found = _options_memo.get(key)
    if found is None:
        found = _options_memo[key] = FFTOptions(fft_type=kind, inplace=inplace, last_axis_parity=parity,
                                                blocking=blocking)
    return found


def _fast(op, axes, options, execution, stream, direction, scale, out_op, fast_key=None):
    """A single plan without callbacks: what ``with FFT(...) as f: f.plan(); f.execute()`` does, minus the
    per-call object: the prepared layouts are memoised by signature and the engine is borrowed from the plan cache.
    With ``fast_key`` (a plain call on a CuPy/torch array, see :func:`_gpu_signature`) it also leaves a recipe that
    the next call with that key runs directly (:func:`mathpy.host.fft._plan.gpu_recipe`)."""
    prep = prepare(op, axes, options, execution)
    if options.inplace and op.package == "numpy" and not op.tensor.flags.writeable:
        raise ValueError("an in-place FFT needs a writable operand")
    value = prep.direction(direction)
    stream = prep.stream_pointer(stream)
    with plan_cache.borrow(prep.key + (stream, None, None), prep.creator(None, None, stream)) as engine:
        if prep.on_gpu:
            lock = engine_lock(engine)
            if fast_key is not None and fast_key[-1] == stream:
                recipe = _plan.gpu_recipe(prep, engine, lock, value, stream, scale)
                if recipe is not None:
                    if len(_plan._fast_recipes) >= _plan._FAST_RECIPES_MAX:
                        _plan._fast_recipes.clear()
                    _plan._fast_recipes[fast_key] = recipe
            return prep.run_gpu(engine, lock, op, value, stream, scale, out_op)
        return prep.run_cpu(engine, op, op.numpy() if prep.local else None, value, scale, out_op, None)


_single_gpu = None
_stream_getters = {}


def _gpu_signature(a):
    """(data pointer, type, shape, strides, dtype, current stream) of a CuPy array or CUDA torch tensor on a
    single-GPU machine with no scoped execution default; None otherwise (the general path decides)."""
    global _single_gpu
    kind = type(a)
    cupy = sys.modules.get("cupy")
    if cupy is not None and kind is cupy.ndarray:
        package, pointer, strides = "cupy", a.data.ptr, a.strides
    else:
        torch = sys.modules.get("torch")
        if torch is None or kind is not torch.Tensor or not a.is_cuda:
            return None
        package, pointer, strides = "torch", a.data_ptr(), a.stride()
    if _execution._default.get() is not None:
        return None
    if _single_gpu is None:
        _single_gpu = _cuda.device_count() == 1
    if not _single_gpu:
        return None
    if package == "cupy":
        stream = cupy.cuda.get_current_stream().ptr
    else:
        getter = _stream_getters.get(package)
        if getter is None:
            getter = _stream_getters[package] = _plan._current_stream_getter(package)
        stream = getter(0)
    return pointer, kind, tuple(a.shape), strides, a.dtype, stream


def _finish_out(out_op, result):
    if out_op is None or result is out_op.tensor:
        return result
    _plan._copy_to_out(out_op, result, None)
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
    result, key = _recipe("fft", a, (n, axis, norm), out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, n = _one_axis(a, n, axis)
    return _run("C2C", a, (n,), (axis,), norm, out, False, prolog, epilog, options, execution, stream, key)


def ifft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """One-dimensional inverse discrete Fourier transform (as ``numpy.fft.ifft``)."""
    result, key = _recipe("ifft", a, (n, axis, norm), out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, n = _one_axis(a, n, axis)
    return _run("C2C", a, (n,), (axis,), norm, out, True, prolog, epilog, options, execution, stream, key)


def rfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """One-dimensional FFT of a real operand: the n//2+1 non-negative frequencies (as ``numpy.fft.rfft``)."""
    result, key = _recipe("rfft", a, (n, axis, norm), out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, n = _one_axis(a, n, axis)
    return _run("R2C", a, (n,), (axis,), norm, out, False, prolog, epilog, options, execution, stream, key)


def irfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Inverse of :func:`rfft`: a real result of length ``n`` (default ``2 * (m - 1)``) (as ``numpy.fft.irfft``)."""
    result, key = _recipe("irfft", a, (n, axis, norm), out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    axis, m = _one_axis(a, None, axis)
    n = _check_n(2 * (m - 1) if n is None else n)
    return _run("C2R", a, (n,), (axis,), norm, out, True, prolog, epilog, options, execution, stream, key)


def hfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """FFT of a Hermitian-symmetric signal given by its first half: a real spectrum (as ``numpy.fft.hfft``).

    Computed as ``irfft(conj(a), n, norm=swapped)``; callbacks apply to that C2R transform."""
    swapped = _SWAP[_check_norm(norm)]  # before any work: a bad norm is refused as numpy.fft does
    op = _operands.wrap_operand(a)
    op = _astype(op, _promoted(op.dtype, True))
    return irfft(_conj(op).tensor, n, axis, swapped, out, prolog=prolog, epilog=epilog, options=options,
                 execution=execution, stream=stream)


def ihfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Inverse of :func:`hfft` (as ``numpy.fft.ihfft``): ``conj(rfft(a, n, norm=swapped))``."""
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
    result, key = _recipe("fftn", a, (_hashable(s), _hashable(axes), norm), out, prolog, epilog, options, execution,
                          stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, False)
    return _run("C2C", a, lengths, axes, norm, out, False, prolog, epilog, options, execution, stream, key)


def ifftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """N-dimensional inverse FFT (as ``numpy.fft.ifftn``)."""
    result, key = _recipe("ifftn", a, (_hashable(s), _hashable(axes), norm), out, prolog, epilog, options, execution,
                          stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, False)
    return _run("C2C", a, lengths, axes, norm, out, True, prolog, epilog, options, execution, stream, key)


def rfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """N-dimensional FFT of a real operand; the last axis is halved (as ``numpy.fft.rfftn``)."""
    result, key = _recipe("rfftn", a, (_hashable(s), _hashable(axes), norm), out, prolog, epilog, options, execution,
                          stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, False)
    return _run("R2C", a, lengths, axes, norm, out, False, prolog, epilog, options, execution, stream, key)


def irfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
           stream=None):
    """Inverse of :func:`rfftn` (as ``numpy.fft.irfftn``)."""
    result, key = _recipe("irfftn", a, (_hashable(s), _hashable(axes), norm), out, prolog, epilog, options, execution,
                          stream)
    if result is not None:
        return result
    lengths, axes = _cook_nd(_shape(a), s, axes, True)
    return _run("C2R", a, lengths, axes, norm, out, True, prolog, epilog, options, execution, stream, key)


def fft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Two-dimensional FFT (as ``numpy.fft.fft2``)."""
    return fftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                stream=stream)


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Two-dimensional inverse FFT (as ``numpy.fft.ifft2``)."""
    return ifftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                 stream=stream)


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Two-dimensional FFT of a real operand (as ``numpy.fft.rfft2``)."""
    return rfftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                 stream=stream)


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
           stream=None):
    """Inverse of :func:`rfft2` (as ``numpy.fft.irfft2``)."""
    return irfftn(a, s, axes, norm, out, prolog=prolog, epilog=epilog, options=options, execution=execution,
                  stream=stream)


def _shape(a):
    shape = getattr(a, "shape", None)
    return tuple(shape) if shape is not None else np.shape(a)


def _hashable(value):
    """``s`` / ``axes`` as a recipe-key part: lists become tuples; anything else unhashable is left for the general
    path to judge (the lookup then fails with TypeError and is skipped)."""
    return tuple(value) if type(value) is list else value
