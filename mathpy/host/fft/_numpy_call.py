"""How a numpy.fft call runs: NumPy's argument rules (:mod:`._numpy_rules`), then one or more FFT plans, each a
prepared call (:func:`._fft.borrow_call`) on an engine borrowed from the plan cache; a repeated call with the same
argument facts runs the first call's prepared call directly (:mod:`._stateless`).

``one_d`` and ``n_d`` run the public 1-D and N-D functions of :mod:`._functions` (once they are not routed to
mathpy.torch) and the kernels of mathpy.torch's FFT ops.
"""

import contextlib
import dataclasses
from typing import NamedTuple

import numpy as np

from ... import _cuda, _memo, _operands
from ..._execution import ExecutionCUDA, resolve_execution
from ..._options import check_or_create_options
from ..._out import copy_into, out_operand
from ..._streams import stream_handle, stream_pointer
from . import _stateless
from ._numpy_rules import (LONG_DOUBLE, check_no_axes, check_norm, check_out, computation_dtype, cook_1d, cook_nd,
                           result_dtype, scale, stage_shape, stages)
from ._options import FFTOptions
from ._fft import borrow_call, plan_cache
from ._problem import fft_problem

__all__ = ["one_d", "n_d", "conj", "scope"]


# --- operands ----------------------------------------------------------------------------------------------------

def _astype(op, dtype):
    if op.dtype == dtype:
        return op
    return _operands.wrap_operand(op.interface.astype(op.tensor, dtype))


def conj(op):
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


def scope(op, stream):
    """The caller's stream made current for work in ``op``'s own package (promotion, padding, casts)."""
    if op.on_host:
        return _NULL_SCOPE
    return op.interface.stream_scope(op.device_id, stream_pointer(stream, op.package, op.device_id))


# --- the one code path -------------------------------------------------------------------------------------------

class Arguments(NamedTuple):
    """A numpy.fft call's arguments as the public function took them, frozen, for the full path (made only when the
    memo of prepared calls misses): ``kind`` is "C2C", "R2C" or "C2R", ``inverse`` the direction."""

    name: str
    kind: str
    inverse: bool
    norm: object
    out: object
    prolog: object
    epilog: object
    options: object
    execution: object
    stream: object


def _run(args, op, axes, lengths, key):
    """Transform Operand ``op`` as numpy.fft's ``args.name`` does (``args``: the :class:`Arguments`): the 1-D
    transforms of ``args.kind`` over ``axes`` (repeats allowed) to logical ``lengths``, grouped into plans
    (:func:`._numpy_rules.stages`). ``key``: the call's key for :mod:`._stateless` (None: nothing to remember)."""
    name, kind, inverse, norm, out, prolog, epilog, options, execution, stream = args
    norm = check_norm(norm)
    out_op = None if out is None else out_operand(out, op)
    options = _DEFAULT_OPTIONS if options is None else check_or_create_options(FFTOptions, options, "options")
    executing = resolve_execution(execution, op.device_id)
    on_gpu = isinstance(executing, ExecutionCUDA)
    if on_gpu:
        _cuda.require_device(executing.device_id)  # before a GPU array package is looked for
    elif stream is not None:
        stream_handle(stream)  # the CPU runs on no stream, but a bad one is an error there too
    dtype = computation_dtype(op.dtype, kind != "R2C")
    if on_gpu and dtype in LONG_DOUBLE:
        raise TypeError(f"{name}: {op.dtype} FFTs run only on the CPU (cuFFT has no long double); run this one with "
                        f"execution='cpu', or convert the operand to float64/complex128 to run it on the GPU")
    plan = stages(kind, axes, lengths)
    result_shape = op.shape
    for stage_type, stage_axes, stage_lengths in plan:
        result_shape = stage_shape(result_shape, stage_type, stage_axes, stage_lengths)
    final_dtype = result_dtype(op.dtype, dtype, plan[-1][0], len(axes) == 1)
    if out_op is not None:
        check_out(out_op, result_shape, final_dtype, name)
    factor = scale(norm, inverse, lengths, np.dtype(dtype.char.lower()))
    if 0 in result_shape:  # an empty batch: nothing to transform
        return _finish_out(out_op, _operands.empty(op.package, result_shape, final_dtype, op.device_id))

    caller, last_index = op, len(plan) - 1
    if last_index:  # several plans: move once, not per stage; nothing to remember
        key = None
        if op.on_host and on_gpu:
            op = _operands.to_device(op, executing.device_id, None)
        elif not op.on_host and not on_gpu:
            op = _operands.to_host(op, None)
    direction = 1 if inverse else -1
    for index, (stage_type, stage_axes, stage_lengths) in enumerate(plan):
        first, last = index == 0, index == last_index
        # Promote, then pad or crop to the stage's lengths (C2R: the halved last axis holds n//2+1); on a GPU these
        # copies are ordered on the caller's stream, before the transform.
        sizes = dict(zip(stage_axes, stage_lengths))
        if stage_type == "C2R":
            sizes[stage_axes[-1]] = stage_lengths[-1] // 2 + 1
        if op.dtype != dtype or any(op.shape[a] != n for a, n in sizes.items()):
            key = None  # a prepared call runs on the caller's array as it is
            with scope(op, stream):
                op = _resize(_astype(op, dtype), sizes)
        parity = "odd" if stage_lengths[-1] % 2 else "even"
        stage_options = _stage_options(options, stage_type, options.inplace and not last_index, parity)
        problem = fft_problem(op, stage_axes, stage_options, executing)
        handle = stream_pointer(stream, problem.holder, problem.device_id) if problem.on_gpu else None
        call, entry = borrow_call(op, problem, prolog if first else None, epilog if last else None, handle)
        try:
            stage_out = out_op if (last and not last_index and final_dtype == problem.transform.output_dtype) \
                else None
            stage_direction = problem.direction(direction if stage_type == "C2C" else None)
            stage_scale = factor if last else None
            result = call.execute(op, stage_direction, handle, stage_scale, stage_out)
            if not last_index:  # (the prepared call does not depend on out=: reuse() checks each call's out)
                _stateless.remember(key, call, stage_direction, stage_scale)
        finally:
            plan_cache.release(entry)
        if not last:
            op, dtype = _operands.wrap_operand(result), result_dtype(dtype, dtype, stage_type, False)
    if last_index:
        result = _operands.as_package(result, caller)
    if out_op is not None and result is out_op.tensor:
        return result
    result_op = _operands.wrap_operand(result)
    if result_op.dtype != final_dtype:  # float16 in, float16 out (one-axis C2R, as NumPy)
        with scope(result_op, stream):
            result = _astype(result_op, final_dtype).tensor
    return _finish_out(out_op, result)


_DEFAULT_OPTIONS = FFTOptions()
_options_memo = _memo.Memo("stage-options", group="fft", max_entries=256)
_NULL_SCOPE = contextlib.nullcontext()


def _stage_options(options, fft_type, inplace, parity):
    """The caller's options for one plan of the call: its FFT type, in-place flag and parity set (memoised)."""
    key = (options, fft_type, inplace, parity)
    found = _options_memo.get(key)
    if found is None:
        found = dataclasses.replace(options, fft_type=fft_type, inplace=inplace, last_axis_parity=parity)
        _options_memo.put(key, found)
    return found


def _odd(options):
    """Whether ``options`` (None, a dict or FFTOptions) ask for an odd last axis of a C2R result: the default length
    of irfft's ``n`` (irfftn's last ``s``) is then ``2 * (m - 1) + 1`` (nvmath-python's ``last_axis_parity``)."""
    if options is None:
        return False
    if isinstance(options, dict):
        options = check_or_create_options(FFTOptions, options, "options")
    return getattr(options, "last_axis_parity", "even") == "odd"


def _inplace(options):
    """Whether ``options`` (None, a dict or FFTOptions) ask for a transform into the caller's array."""
    if options is None:
        return False
    if isinstance(options, dict):
        options = check_or_create_options(FFTOptions, options, "options")
    return getattr(options, "inplace", False) is True


def _finish_out(out_op, result):
    if out_op is None or result is out_op.tensor:
        return result
    copy_into(out_op, result, None)
    return out_op.tensor


def one_d(name, kind, inverse, a, n, axis, norm, out, prolog, epilog, options, execution, stream):
    """numpy.fft's 1-D functions: ``fft``, ``ifft`` ("C2C"), ``rfft`` ("R2C"), ``irfft`` ("C2R")."""
    result, key = _stateless.reuse(name, (n, axis, norm), a, out, prolog, epilog, options, execution, stream)
    if result is not None:
        return result
    op = _operands.wrap_operand(a, "a", written=_inplace(options))
    lengths, axes = cook_1d(op.shape, n, axis, kind == "C2R", odd=kind == "C2R" and _odd(options))
    args = Arguments(name, kind, inverse, norm, out, prolog, epilog, options, execution, stream)
    return _run(args, op, axes, lengths, key)


def n_d(name, kind, inverse, a, s, axes, norm, out, prolog, epilog, options, execution, stream):
    """numpy.fft's N-D functions (and the 2-D ones, which differ only in their default ``axes``)."""
    result, key = _stateless.reuse(name, (_hashable(s), _hashable(axes), norm), a, out, prolog, epilog, options,
                                   execution, stream)
    if result is not None:
        return result
    op = _operands.wrap_operand(a, "a", written=_inplace(options))
    lengths, axes, warned = cook_nd(op.shape, s, axes, kind == "C2R", odd=kind == "C2R" and _odd(options),
                                    stacklevel=5)  # cook_nd, n_d, _functions._n_d, the public function, its caller
    if warned:
        key = None  # every call warns, as NumPy's does
    if not axes:
        check_no_axes(name, kind)
        check_norm(norm)
        return _finish_out(None if out is None else out_operand(out, op), op.tensor)  # NumPy: the input as it is
    args = Arguments(name, kind, inverse, norm, out, prolog, epilog, options, execution, stream)
    return _run(args, op, axes, lengths, key)


def _hashable(value):
    """``s`` / ``axes`` as part of a prepared call's key: lists become tuples; anything else unhashable is left for the
    full path to judge (the lookup then fails with TypeError and is skipped)."""
    return tuple(value) if type(value) is list else value
