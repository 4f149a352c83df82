"""The prepared call of the FFT API: one :class:`FFTCall` is a planned :class:`~._problem.FFTProblem` bound to an
engine, and owns the only "allocate, run, finish" of the API.

Both the stateful :meth:`mathpy.fft.FFT.execute` and the stateless functions' prepared calls
(:mod:`._stateless`) run an ``FFTCall``:

- :meth:`FFTCall.execute` takes an :class:`~mathpy._operands.Operand`: stages the input when the problem says so
  (a dense copy on the execution device, an upload for a host operand), allocates the output in the stream's order,
  runs the engine, scales, synchronises when asked, and brings the result to the caller (``out=``, or its package
  and device);
- :meth:`FFTCall.execute_direct` is the same for the common GPU case in which nothing is staged or copied back
  (``problem.direct``): it takes the operand's device address and returns the new result array. Its output is
  allocated by a maker resolved once per stream (with ``stream=None``, the holder package's current stream at each
  call: one C call to find it, one to allocate).

Engines are executed under their own lock: cuFFT's stream and work area are per plan, and one plan serves every
stream (see :mod:`._cufft`). An engine's ``free()`` takes that lock too, and an execution that finds the engine freed
raises InvalidPlanStateError (``locked``: the engine has such a lock).
"""

import contextlib

import numpy as np

from ... import _operands, _packages
from ..._out import copy_into
from ..._threads import threads_for
from ..._streams import keep_for_graph, refuse_in_capture
from ._callback import raise_recorded
from ._numpy_rules import check_floating_point, ufunc_name

__all__ = ["FFTCall", "new_staging", "scale_parts"]

_NO_LOCK = contextlib.nullcontext()


class FFTCall:
    """``problem`` executed by ``engine``; the bound callbacks are kept for as long as the call may run, and
    ``cache_key`` is the engine's key in a plan cache (what the stateless functions borrow it under)."""

    __slots__ = ("problem", "engine", "callbacks", "cache_key", "holder", "locked", "host_direct", "staged", "_lock",
                 "_run", "_out_shape", "_out_dtype", "_out_order", "_scale_type", "_device_id", "_pointer",
                 "_current_stream", "_makers", "_checked", "_report_threads", "_scaled_copy")

    def __init__(self, problem, engine, callbacks=(), cache_key=None):
        self.problem, self.engine, self.callbacks, self.cache_key = problem, engine, tuple(callbacks), cache_key
        t = problem.transform
        self.holder = _packages.get(problem.holder)
        lock = getattr(engine, "lock", None)
        self.locked, self._lock = lock is not None, lock or _NO_LOCK
        executor = getattr(engine, "executor", None)
        self._run = executor() if executor is not None else engine.execute
        self._out_shape, self._out_dtype = t.output_shape, t.output_dtype
        order = problem.out_order
        self._out_order = None if order == tuple(range(len(order))) else order
        self._scale_type, self._device_id = problem.scale_type, problem.device_id
        self._pointer, self._current_stream = self.holder.pointer, self.holder.current_stream
        self._makers = {}  # stream (None: the current one) -> the output's allocation on it, resolved once
        # the CPU engine reads the caller's NumPy array where it lies and writes a new one: execute_host()
        self.host_direct = not problem.on_gpu and problem.local and not problem.copy_input and \
            not problem.options.inplace
        # a device operand copied into a dense buffer (cuFFT's C2R overwrites its input), nothing else: execute_staged()
        self.staged = problem.on_gpu and problem.local and problem.copy_input and not problem.options.inplace and \
            problem.options.blocking is not True
        # The norm's factor rides on that copy (one pass instead of a copy and a scale of the result; a linear
        # transform commutes with a real factor), unless a callback would see the scaled values; not for complex32,
        # which not every package multiplies.
        plan_callbacks = getattr(engine, "callbacks", None)  # (None: an engine that does not say)
        self._scaled_copy = problem.copy_input and plan_callbacks is not None and \
            not any(cb is not None for cb in plan_callbacks) and problem.scale_type is not np.float16
        # NumPy's floating-point reports: a pass over each result on this many threads (0: none, the default)
        self._report_threads = threads_for(problem.execution) if getattr(problem.execution, "fp_reports", False) \
            else 0
        # GPU callbacks compiled with check_bounds: each execution reads their error records afterwards (the plan's
        # callbacks say so: the stateless functions remember their calls bound without callbacks)
        checked = plan_callbacks if plan_callbacks else self.callbacks
        self._checked = problem.on_gpu and any(cb is not None and getattr(cb, "check_bounds", False) for cb in checked)

    # --- the direct GPU case ---------------------------------------------------------------------------------------
    def execute_direct(self, x_ptr, direction, stream=None, scale=None):
        """Transform the device data at ``x_ptr`` (laid out as ``problem.transform.input_strides``) on raw
        ``stream`` (None: the holder package's current stream); returns the new output array (of the holder
        package, on the device)."""
        if self._checked:
            self._refuse_in_capture(stream)  # before any work (None: the current stream)
        make = self._makers.get(stream)
        if make is None:
            make = self._maker(stream)
        result = make()
        if stream is None:
            stream = self._current_stream(self._device_id)
        with self._lock:
            self._run(x_ptr, self._pointer(result), direction, stream)
        if self._checked:
            self._raise_recorded(stream)
        if scale is not None:
            self.holder.on(self._device_id, stream).scale(result, self._scale_type(scale))
        return result

    def execute_staged(self, x, direction, stream=None, scale=None):
        """:meth:`execute_direct` for a device operand ``x`` of the holder package that the engine reads through a
        dense copy (``staged``); returns the new output array."""
        if self._checked:
            self._refuse_in_capture(stream)
        if stream is None:
            stream = self._current_stream(self._device_id)
        queue = self.holder.on(self._device_id, stream)
        make = self._makers.get((stream, "staging"))
        copy = (make or self._maker(stream, staging=True))()
        scale = self._stage(queue, copy, x, scale)
        keep_for_graph(self.engine, self.holder, self._device_id, stream, copy)  # (a capture's replays read it)
        make = self._makers.get(stream)
        result = (make or self._maker(stream))()
        with self._lock:
            self._run(self._pointer(copy), self._pointer(result), direction, stream)
        if self._checked:
            self._raise_recorded(stream)
        if scale is not None:
            queue.scale(result, self._scale_type(scale))
        return result

    def _stage(self, queue, copy, source, scale):
        """Copy device array ``source`` into ``copy``, with the norm's ``scale`` where it may ride on the copy
        (``__init__``); returns the scale still to apply to the result (None: none)."""
        if scale is not None and self._scaled_copy:
            queue.copy_scaled(copy, source, self._scale_type(scale))
            return None
        queue.copy_into(copy, source)
        return scale

    def _refuse_in_capture(self, stream):
        refuse_in_capture(self.holder, self._device_id, stream, "an FFT whose callbacks check bounds (check_bounds)",
                          "each execution waits on the host to read the callbacks' error records",
                          "capture the FFT planned without check_bounds", anywhere=True)

    def _raise_recorded(self, stream):
        """An out-of-bounds access recorded by the checked callbacks the engine was planned with (a plan cache may
        give this call an engine planned with other bindings of equal keys: theirs hold the records)."""
        raise_recorded(getattr(self.engine, "callbacks", None) or (), self._device_id, stream)

    def _maker(self, stream, staging=False):
        """The allocation of the output (``staging``: of the input's dense copy) on ``stream``, resolved once."""
        if len(self._makers) > 64:  # streams come and go
            self._makers.clear()
        if staging:
            t = self.problem.transform
            key, layout = (stream, "staging"), (t.input_shape, t.input_dtype, self.problem.in_order)
        else:
            key, layout = stream, (self._out_shape, self._out_dtype, self._out_order)
        make = self._makers[key] = self.holder.on(self._device_id, stream).maker(*layout)
        return make

    # --- the direct CPU case ---------------------------------------------------------------------------------------
    def execute_host(self, array, direction, scale=None, out=None):
        """:meth:`execute` for a NumPy array laid out as ``problem.transform.input_strides`` on the CPU
        (``host_direct``): returns the new output array, or ``out`` written (one :meth:`takes_out` accepted)."""
        if out is not None:
            result = out
        else:
            make = self._makers.get(None)
            if make is None:
                make = self._maker(None)
            result = make()
        self._run_cpu(array, result, direction, scale)
        if self._report_threads:
            t = self.problem.transform
            check_floating_point(array, result, ufunc_name(t.fft_type, direction, t.n[-1]), self._report_threads)
        return result

    def takes_out(self, out, array):
        """Whether NumPy array ``out`` can be written directly as the result of :meth:`execute_host` of ``array``: the
        transform's output shape, dtype and strides, writable, and apart from ``array``."""
        t = self.problem.transform
        return (out.dtype == t.output_dtype and out.shape == t.output_shape and out.flags.writeable
                and out.strides == tuple(s * out.itemsize for s in t.output_strides)
                and not np.may_share_memory(out, array))

    def _run_cpu(self, x, result, direction, scale):
        if scale is not None and getattr(self.engine, "scales", False):  # the engine scales inside its passes
            self.engine.execute(x, result, direction, None, scale=scale)
        else:
            self.engine.execute(x, result, direction, None)
            if scale is not None:
                scale_parts(result, self._scale_type(scale))

    # --- every case ----------------------------------------------------------------------------------------------
    def execute(self, op, direction, stream, scale=None, out=None, staging=None):
        """Transform operand ``op`` (the planned signature); ``stream`` is a raw handle on the GPU (None on the CPU),
        ``scale`` a factor applied after the epilog, ``out`` an Operand to write into, ``staging`` a reusable host
        buffer for the CPU's dense copy of the input."""
        p = self.problem
        if not p.on_gpu:
            return self._execute_cpu(op, direction, scale, out, staging)
        if stream is None:
            stream = self._current_stream(self._device_id)
        if op.on_host or (out is not None and out.on_host) or p.options.blocking is True:
            refuse_in_capture(self.holder, self._device_id, stream, "an FFT of host (NumPy) data on the GPU, or with "
                              "options.blocking=True,", "copies between host and device memory and waits on the host "
                              "are not graph work", "capture it with device arrays (CuPy, torch CUDA tensors) and "
                              "blocking='auto'", anywhere=True)
        if self._checked:
            self._refuse_in_capture(stream)
        queue = self.holder.on(self._device_id, stream)
        if p.copy_input:
            t = p.transform
            if op.on_host:  # one upload into the dense buffer, in its storage order
                order = p.in_order
                x = queue.empty(tuple(t.input_shape[a] for a in order), t.input_dtype)
                queue.upload_into(x, op.numpy().transpose(order))
            else:
                x = queue.empty(t.input_shape, t.input_dtype, p.in_order)
                scale = self._stage(queue, x, op.tensor, scale)
            x_ptr = self._pointer(x)
            keep_for_graph(self.engine, self.holder, self._device_id, stream, x)  # (a capture's replays read it)
        else:
            x, x_ptr = op.tensor, op.data_ptr
        if p.options.inplace:
            result, result_ptr = x, x_ptr
        else:
            result = queue.empty(self._out_shape, self._out_dtype, self._out_order)
            result_ptr = self._pointer(result)
        with self._lock:
            self._run(x_ptr, result_ptr, direction, stream)
        if self._checked:
            self._raise_recorded(stream)
        if scale is not None:
            queue.scale(result, self._scale_type(scale))
        if p.options.blocking is True:
            queue.synchronize()
        if p.options.inplace:
            if x is not op.tensor:  # a host operand transformed in its device copy: the result goes back into it
                host = _operands.to_host(_operands.wrap_operand(x), stream).tensor
                np.copyto(op.numpy().transpose(p.in_order), host)
            return op.tensor
        if out is not None:
            copy_into(out, result, stream)
            return out.tensor
        if op.on_host:
            return _operands.as_package(result, op, stream)
        return result

    def _execute_cpu(self, op, direction, scale, out, staging):
        p = self.problem
        t = p.transform
        x = op.numpy() if p.local else _operands.to_host(op, None).tensor
        if p.copy_input:
            if staging is None:
                staging = new_staging(p)
            np.copyto(staging, x, casting="no")
            x = staging
        if p.options.inplace:
            result = x
        elif out is not None and out.package == "numpy" and out.strides == t.output_strides and \
                out.dtype == t.output_dtype and not np.may_share_memory(out.tensor, x):
            result = out.tensor
        else:
            result = _packages.get("numpy").on(None).empty(t.output_shape, t.output_dtype, p.out_order)
        self._run_cpu(x, result, direction, scale)
        if p.options.inplace:
            return op.tensor
        if self._report_threads:
            check_floating_point(x, result, ufunc_name(t.fft_type, direction, t.n[-1]), self._report_threads)
        if out is not None:
            if result is not out.tensor:
                copy_into(out, result, None)
            return out.tensor
        if op.package == "numpy" and op.on_host:
            return result
        return _operands.as_package(result, op, None)


def scale_parts(result, factor):
    """``result *= factor`` for a real ``factor``, part by part as NumPy's gufunc scales: a complex multiply would make
    ``inf+0j`` into ``inf+nanj`` (and warn of an invalid value)."""
    if result.dtype.kind != "c":
        result *= factor
    elif result.flags.c_contiguous or result.flags.f_contiguous:  # one pass over the real view
        flat = result.ravel(order="A")
        flat.view(flat.real.dtype)[...] *= factor
    else:
        result.real[...] *= factor
        result.imag[...] *= factor


def new_staging(problem):
    """A host buffer for the CPU's dense copy of the input (the stateful FFT keeps one)."""
    t = problem.transform
    return _packages.get("numpy").on(None).empty(t.input_shape, t.input_dtype, problem.in_order)


