"""The prepared call of the matmul API: one :class:`MatmulCall` is a planned :class:`~._problem.MatmulProblem`
bound to an engine and to the current operands, and owns the only "allocate, run, finish" of the API.

- :meth:`MatmulCall.execute` brings the inputs that need a copy or a move (:func:`~._layouts.bring`), allocates D
  and the epilog outputs in the stream's order, runs the engine and returns the result where the caller's operands
  live; :meth:`MatmulCall.arguments` is its first half (``autotune`` times the engine on them).
- :meth:`MatmulCall.execute_pointers` is the same when nothing is copied (``direct``): it takes the operands' device
  addresses, which is how the stateless ``matmul`` reuses a call for new operands (:mod:`._stateless`).

The engine runs under its lock when it has one (a cached engine may be shared by threads).
"""

import contextlib
import types

import numpy as np

from ... import _operands, _packages  # noqa: F401 (holder_for)
from ..._streams import keep_for_graph, refuse_in_capture
from ._epilog_operands import HANDLERS
from ._layouts import bring, drop_vector_axes, engine_view

__all__ = ["MatmulCall", "Finish", "holder_for"]

_NO_LOCK = contextlib.nullcontext()
_NONE = types.MappingProxyType({})  # no epilog outputs (read-only: shared by every call)


class Finish:
    """How a result is handed back: ``vector_a`` / ``vector_b`` (1-D operands: numpy.matmul drops their axes),
    ``numpy_scalar`` (a 1-D @ 1-D product on NumPy is a scalar), ``like`` (the caller's operand when results move back
    to its package and device, else None), ``blocking`` (wait for the GPU), ``c`` (in-place products: the caller's
    ``c``, which is the result), ``cast`` (the result's dtype when the engine's D has another: cuBLASLt's int32 for
    an int8 or bool product, wrapped or tested against 0 as NumPy)."""

    __slots__ = ("vector_a", "vector_b", "numpy_scalar", "like", "blocking", "c", "cast")

    def __init__(self, vector_a, vector_b, numpy_scalar, like, blocking, c=None, cast=None):
        self.vector_a, self.vector_b, self.numpy_scalar = vector_a, vector_b, numpy_scalar
        self.like, self.blocking, self.c, self.cast = like, blocking, c, cast


class MatmulCall:
    """``problem`` executed by ``engine`` on the Staged inputs ``staged`` (A, B, C and the epilog inputs by name).
    ``holder``: the ArrayPackage results are allocated in; ``device_id`` None on the CPU; ``cache_key``: the
    engine's key in the plan cache, when it was borrowed from one."""

    def __init__(self, problem, engine, staged, holder, device_id, alpha, beta, finish, cache_key=None):
        self.problem, self.engine, self.staged, self.cache_key = problem, engine, dict(staged), cache_key
        self.holder, self.device_id, self.on_gpu = holder, device_id, device_id is not None
        self.alpha, self.beta, self.finish = alpha, beta, finish
        self._lock = getattr(engine, "lock", None) or _NO_LOCK
        self._inputs = tuple(name for name, _ in problem.epilog_inputs)
        # inputs the engine reads where they are: their arguments are made once
        self._fixed = {name: self._argument(name, s.layout, s.op) for name, s in self.staged.items()
                       if s.mode is None and not s.move}
        self.inplace = problem.inplace  # D is C: no allocation; the caller's c is the result
        self.direct = self.on_gpu and len(self._fixed) == len(self.staged) and not self.inplace
        fixed = self._fixed
        self._direct_args = (fixed.get("a"), fixed.get("b"), fixed.get("c"),
                             {name: fixed.get(name) for name in self._inputs}) if self.direct else None
        d, batch_shape = problem.d, problem.batch_shape
        if d.is_col_major:  # allocated (*batch, N, M) and seen as (*batch, M, N)
            self._d = ((*batch_shape, d.rows, d.cols), d.dtype, _swapped(len(batch_shape) + 2))
        else:
            self._d = ((*batch_shape, d.rows, d.cols), d.dtype, None)
        self._outputs = []
        for name, layout in problem.epilog_outputs:
            shape, swap, zero = HANDLERS[name].allocation(layout, batch_shape, self.on_gpu)
            if swap:
                shape, order = (*shape[:-2], shape[-1], shape[-2]), _swapped(len(shape))
            else:
                order = None
            self._outputs.append((name, layout, shape, order, zero))
        self._makers = {}  # stream (None: the current one) -> (make D, ((name, make output), ...)), made once
        self._pointer, self._current_stream = holder.pointer, holder.current_stream
        f = finish
        self._bare = not self._outputs and not (f.vector_a or f.vector_b) and f.like is None and not f.blocking \
            and not self.inplace and f.cast is None
        # host memory crosses to or from the device, or the host waits: nothing a CUDA graph can record
        self._host_bound = self.on_gpu and (f.like is not None or f.blocking or
                                            any(s.move for s in self.staged.values()))

    def detached(self):
        """The same call without its operands (for :meth:`execute_pointers` only): what the stateless memo keeps, so
        that it holds no caller's array alive."""
        copy = _copy(self)
        copy.staged, copy._fixed, copy._direct_args, copy._makers = {}, {}, None, {}
        return copy

    def rebind(self, engine, cache_key):
        """The same call on another engine of the same problem (the cache planned it again)."""
        copy = _copy(self)
        copy.engine, copy.cache_key, copy._makers = engine, cache_key, {}
        copy._lock = getattr(engine, "lock", None) or _NO_LOCK
        return copy

    # --- running ---------------------------------------------------------------------------------------------------
    def execute(self, stream):
        """Compute the product on the staged operands on raw ``stream`` (None on the CPU); the result, or
        ``(result, aux)`` when the epilog has outputs."""
        if self._direct_args is not None:
            return self.execute_pointers(*self._direct_args, stream)
        if self.on_gpu:
            if stream is None:
                stream = self._current_stream(self.device_id)
            if self._host_bound:
                self._refuse_in_capture(stream)
        queue = self.holder.on(self.device_id, stream)
        args, (d, outputs, keep) = self.arguments(stream, queue)
        with self._lock:
            self.engine.execute(**args, stream=stream)
        if keep and self.on_gpu:  # (a capture's replays read the copies: kept with the plan where the pool reuses)
            keep_for_graph(self.engine, self.holder, self.device_id, stream, keep)
        del keep  # copies were read by the queued work: the pool frees them in stream order
        return self._finish(d, outputs, queue, stream)

    def execute_pointers(self, a, b, c, inputs, stream=None):
        """:meth:`execute` for a ``direct`` call on other operands of the same facts, given by device address (``c``
        None without C; ``inputs``: epilog input addresses by name), on raw ``stream`` (None: the holder package's
        current stream)."""
        makers = self._makers.get(stream)
        if makers is None:
            makers = self._new_makers(stream)
        if stream is None:
            stream = self._current_stream(self.device_id)
        if self._host_bound:  # (blocking=True: a direct call moves nothing)
            self._refuse_in_capture(stream)
        make_d, make_outputs = makers
        d = make_d()
        if make_outputs:
            pointer = self._pointer
            outputs, out_args = {}, {}
            for name, make in make_outputs:
                outputs[name] = tensor = make()
                out_args[name] = pointer(tensor)
        else:
            outputs = out_args = _NONE
        with self._lock:
            self.engine.execute(a, b, c, self._pointer(d), inputs, out_args, self.alpha, self.beta, stream)
        if self._bare:  # nothing to drop, move or wait for
            return d
        return self._finish(d, outputs, self.holder.on(self.device_id, stream), stream)

    def _refuse_in_capture(self, stream):
        refuse_in_capture(self.holder, self.device_id, stream, "a matmul of host (NumPy) operands on the GPU, or with "
                          "options.blocking=True,", "copies between host and device memory and waits on the host are "
                          "not graph work", "capture it with device arrays (CuPy, torch CUDA tensors) and "
                          "blocking='auto'", anywhere=True)

    def _new_makers(self, stream):
        """(make D, ((name, make output), ...)) on ``stream`` (None: the current one at each call)."""
        if len(self._makers) > 64:  # streams come and go
            self._makers.clear()
        queue = self.holder.on(self.device_id, stream)
        shape, dtype, order = self._d
        outputs = tuple((name, queue.maker(out_shape, layout.dtype, out_order, zero))
                        for name, layout, out_shape, out_order, zero in self._outputs)
        makers = self._makers[stream] = (queue.maker(shape, dtype, order), outputs)
        return makers

    def arguments(self, stream, queue=None):
        """``(execute keyword arguments, (D, outputs, copies to keep alive until the engine call is queued))``."""
        queue = queue or self.holder.on(self.device_id, stream)
        values = dict(self._fixed)
        brought = {}
        if len(values) < len(self.staged):
            with queue.scope():  # copies are ordered before the product
                for name, s in self.staged.items():
                    if name not in values:
                        op = brought[name] = bring(s, self.device_id, stream)
                        values[name] = self._argument(name, s.layout, op)
        if self.inplace:  # D is C as the engine reads it: the caller's memory, or its staged copy
            d = brought["c"].tensor if "c" in brought else self.staged["c"].op.tensor
        else:
            shape, dtype, order = self._d
            d = queue.empty(shape, dtype, order)
        outputs, out_args = {}, {}
        for name, layout, shape, order, zero in self._outputs:
            outputs[name] = tensor = queue.empty(shape, layout.dtype, order, zero)
            out_args[name] = self._argument(name, layout, _operands.wrap_operand(tensor))
        if self.inplace:
            d_argument = values["c"]
        else:
            d_argument = None
            if type(d) is np.ndarray:  # the CPU engine's (batch, M, N) view of the D just allocated (batches dense)
                d_argument = d.reshape(self.problem.batch, self.problem.m, self.problem.n)
                if d_argument.base is not (d if d.base is None else d.base):  # a copy: view the memory itself
                    d_argument = None
            if d_argument is None:
                d_argument = self._argument("d", self.problem.d, _operands.wrap_operand(d))
        args = {"a": values["a"], "b": values["b"], "c": values.get("c"), "d": d_argument,
                "epilog_inputs": {name: values[name] for name in self._inputs}, "epilog_outputs": out_args,
                "alpha": self.alpha, "beta": self.beta}
        return args, (d, outputs, list(brought.values()))

    def _argument(self, name, layout, op):
        """What the engine takes for one operand: a device address, or a NumPy view for the CPU engine."""
        if self.on_gpu:
            return op.data_ptr
        if name in ("a", "b", "c", "d"):
            return engine_view(layout, op.numpy())
        if self.problem.fused is not None:  # a Python epilog's operand (any name): read as it is
            return op.numpy()
        return HANDLERS[name].cpu_view(layout, op.numpy())

    def _finish(self, d, outputs, queue, stream):
        f = self.finish
        if self.inplace:
            self._write_back(d, stream)
            d = f.c
        else:
            if f.cast is not None:
                with queue.scope():  # ordered after the product, on its stream
                    d = self.holder.astype(d, f.cast)
            d = drop_vector_axes(d, f.vector_a, f.vector_b, f.numpy_scalar)
        if f.like is not None:
            d = _operands.as_package(d, f.like, stream)
            outputs = {name: _operands.as_package(t, f.like, stream) for name, t in outputs.items()}
        elif self.on_gpu and f.blocking:
            queue.synchronize()
        return (d, outputs) if self._outputs else d

    def _write_back(self, d, stream):
        """In place with C staged (copied, or moved across host and device): copy the result into the caller's c."""
        c = self.staged["c"].op  # a view of the caller's c (with the axes of 1-D operands put back)
        if d is c.tensor:
            return
        result = _operands.wrap_operand(d)
        if c.on_host:
            host = result.numpy() if result.on_host else _operands.to_host(result, stream).tensor
            np.copyto(c.numpy(), host)
            return
        if result.on_host:
            result = _operands.to_device(result, c.device_id, stream)
        c.interface.on(c.device_id, stream).copy_into(c.tensor, result.tensor)


def _copy(call):
    copy = object.__new__(MatmulCall)
    copy.__dict__.update(call.__dict__)
    return copy


def _swapped(ndim):
    """The storage order that makes the last two axes column-major."""
    return (*range(ndim - 2), ndim - 1, ndim - 2)


def holder_for(package_name, on_gpu):
    """The ArrayPackage that results are allocated in."""
    return _operands.holder_of(package_name) if on_gpu else _packages.get(package_name)

