"""The CPU engine: one :class:`~mathpy.host.fft._layout.Transform` on the fastest CPU FFT library installed
(:mod:`._cpu_libraries`), with the same semantics as the cuFFT engine (unnormalised unless a ``scale`` is given;
direction -1 forward, +1 inverse; R2C/C2R halve the last transform axis) and the same Python prolog/epilog callbacks.

Without callbacks the library transforms the caller's input straight into the output (no copy, the norm inside the
library where it can). Callbacks are fused into the passes that move data in and out of the transform, run by
numba on every thread (:mod:`mathpy.jit._cpu_passes`, :mod:`mathpy._threads`), in one of three strategies:

- ``"passes"``: the prolog pass writes a dense copy of the input, the library transforms it on every thread into a
  dense buffer, and the epilog pass stores that buffer (then the norm); each pass runs on every thread;
- ``"blocks"`` (at least two transforms per thread): each thread loads a block of transforms through the prolog,
  transforms it on one library thread and stores it through the epilog while it is still in its cache;
- ``"parallel"`` (the same blocks, float32 and float64, when pyFFTW is installed, the call has at least
  PARALLEL_MIN_THREADS threads and the callbacks cannot raise): the whole call is one numba
  ``parallel`` loop, each block transformed by FFTW's C API (:mod:`._fftw_c`) on the numba thread that loads and
  stores it. The other two run their passes from a Python thread pool, whose threads take the GIL for each block,
  and beside the library's own threads, which spin after a transform (FFTW's OpenMP workers): on 16 cores (256 x
  4096 complex64, an epilog) the passes took 1.4-1.6 ms and the blocks 1.6-1.9 ms against 0.2 ms for the plain
  transform; this strategy has one thread team and no Python per block.

Which is faster depends on the machine (the blocks save a trip to memory; the passes let the library thread one
transform and pay a few microseconds of Python per block less): a transform that can take several times them at its
first call, on copies of the call's arrays (each strategy's library chosen in its first run), and keeps the fastest.

Callbacks see the element offsets of the Transform's layouts, as on the GPU.

>>> import numpy as np
>>> from mathpy import ExecutionCPU
>>> from mathpy.host.fft._layout import Transform
>>> t = Transform("C2C", "float64", (2, 4), (4, 1), (2, 4), (4, 1), (1,))
>>> engine, out = CPUEngine(t, execution=ExecutionCPU(fft_library="pocketfft")), np.empty((2, 4), complex)
>>> engine.execute(np.ones((2, 4), complex), out, -1, scale=0.25)
>>> out.real
array([[1., 0., 0., 0.],
       [1., 0., 0., 0.]])
"""

import math
import statistics
import threading
import time
import weakref

import numpy as np

from ... import _threads
from ..._log import logger
from ..._strides import c_strides, dense_strides
from ...jit import _cpu_passes as passes
from ...jit import apply_epilog_cpu, apply_prolog_cpu
from ._callback import dry_run, element_offsets, span
from . import _fftw_c
from ._cpu_libraries import (FFTW_PLANNING_SECONDS, Executor, aligned_layout, candidates, like, scale_in_place,
                              transform_bytes)
from ._layout import Transform

__all__ = ["CPUEngine"]

#: Bytes of a block of transforms (input and output) that a thread keeps in its cache between the prolog, the
#: transform and the epilog, when the threads leave a choice.
BLOCK_BYTES = 1 << 20
#: At most this many blocks per call: each costs a few microseconds of Python under the GIL.
MAX_BLOCKS = 16
#: At least this many transforms per block when the threads leave enough.
MIN_BLOCK_ROWS = 4
#: The "parallel" strategy competes from this many threads on. With fewer, the Python pool's GIL costs little (on 2
#: cores both were within run-to-run noise of each other), and compiling the parallel loop (about 3 s per callback
#: function on 2 cores) would lengthen the first call for nothing.
PARALLEL_MIN_THREADS = _threads.PARALLEL_MIN_THREADS


def _flat_span(array):
    """The 1-D view of an array's whole memory span (non-negative strides), starting at its first element."""
    n = span(array.shape, tuple(s // array.itemsize for s in array.strides))
    return np.lib.stride_tricks.as_strided(array, (n,), (array.itemsize,))


def _offsets(shape, strides):
    return element_offsets(tuple(shape), tuple(strides)).reshape(-1)


def _folded_stride(shape, strides, batch_axes):
    """The one stride that steps through the batch axes in C order, or None when they do not fold into one."""
    axes = [a for a in batch_axes if shape[a] > 1]
    if not axes:
        return 0
    for outer, inner in zip(axes, axes[1:]):
        if strides[outer] != strides[inner] * shape[inner]:
            return None
    return strides[axes[-1]]


class _Side:
    """One operand of a fused pass: offsets of its batch (C order over the batch axes) and of one transform's
    elements (C order over the transform axes, in the Transform's order), and the ``(batch, *transform)`` view of it
    when its batch axes fold into one stride."""

    def __init__(self, shape, strides, axes, batch_axes, dtype):
        self.batch = _offsets([shape[a] for a in batch_axes], [strides[a] for a in batch_axes])
        self.extents = tuple(shape[a] for a in axes)
        self.inner = _offsets(self.extents, [strides[a] for a in axes])
        self.step = passes.inner_step(self.inner)
        self.dtype, self.count = np.dtype(dtype), len(self.batch)
        fold = _folded_stride(shape, strides, batch_axes)
        self.folds = fold is not None
        self._strides = None if fold is None else (fold, *(strides[a] for a in axes))

    def batched(self, array):
        """``array`` (of this side's layout) as ``(batch, *transform)``; its batch axes must fold."""
        return np.lib.stride_tricks.as_strided(array, (self.count, *self.extents),
                                               tuple(s * self.dtype.itemsize for s in self._strides))

    def block_strides(self, shape, dense):
        """Element strides of a block of transforms of ``shape``: C order for a buffer, else this side's own."""
        return dense_strides(shape, range(len(shape))) if dense else self._strides


class CPUEngine:
    """The engine of ``transform`` on ``execution`` (an :class:`~mathpy.ExecutionCPU`); ``execute`` takes NumPy arrays
    in the Transform's layouts. ``library``: the CPU FFT library the transform runs on (chosen at its first execution;
    None before)."""

    scales = True  # execute() takes the norm's factor: the libraries and the passes apply it

    def __init__(self, transform, *, execution, prolog=None, epilog=None):
        if transform.precision == np.float16:
            raise TypeError("half precision FFTs (float16 / complex32) run only on the GPU (ExecutionCUDA); "
                            "use float32 on the CPU")
        self.transform, self.prolog, self.epilog = transform, prolog, epilog
        self.threads = _threads.threads_for(execution)
        libraries = candidates(execution.fft_library, transform)  # ImportError: a named library is missing
        t = transform
        if prolog is None and epilog is None:
            self._executor = Executor(t, libraries, self.threads, limit=execution.num_threads)
            self._fused = None
            # a pyFFTW plan owns arrays of the layouts (FFTW_MEASURE writes into the arrays it plans on)
            self.workspace_bytes = transform_bytes(t) if any(lib.plans for lib in libraries) else 0
        elif any(cb is not None and cb.check_bounds for cb in (prolog, epilog)):
            self._executor = None
            self._fused = _CheckedPass(t, prolog, epilog, libraries, self.threads, execution.num_threads)
            self.workspace_bytes = 0
        else:
            self._executor = None
            self._fused = _FusedPass(t, prolog, epilog, libraries, self.threads, execution.num_threads)
            self.workspace_bytes = self._fused.workspace_bytes
        self._freed = False
        logger.debug("CPU FFT plan %s threads=%d libraries=%s prolog=%s epilog=%s", t, self.threads,
                     [lib.name for lib in libraries], prolog is not None, epilog is not None)

    @property
    def library(self):
        """The CPU FFT library running the transform ("pocketfft", "fftw", "mkl")."""
        return (self._executor or self._fused).library

    @property
    def strategies(self):
        """The strategies that can run this transform's callbacks (``()`` without callbacks; see the module)."""
        return () if self._fused is None else tuple(self._fused.strategies)

    @property
    def strategy(self):
        """The strategy running the callbacks ("passes", "blocks" or "parallel"; None without callbacks). Setting it
        to one of :attr:`strategies` keeps it (no timing at the first call)."""
        return None if self._fused is None else self._fused.strategy

    @strategy.setter
    def strategy(self, name):
        if name not in self.strategies:
            raise ValueError(f"strategy {name!r} is not one of this plan's {list(self.strategies)}")
        self._fused.strategy, self._fused.timings = name, {name: None}

    def execute(self, input_array, output_array, direction, stream=None, scale=None):
        """Transform ``input_array`` into ``output_array`` (NumPy arrays in the Transform's layouts; one array for an
        in-place C2C plan), then multiply by ``scale`` (None: unnormalised), after the epilog."""
        forward = direction < 0
        scale = None if scale is None else self.transform.precision.type(scale)
        if self._fused is not None:
            self._fused(input_array, output_array, forward, scale)
            return
        norm, rest = _norm(scale, self.transform)
        self._executor(input_array, output_array, forward, norm)
        if rest is not None:
            scale_in_place(output_array, rest, self.threads)

    def free(self):
        self._freed = True
        self.prolog = self.epilog = None


def _norm(scale, t):
    """``(norm code, factor left to apply)`` of a ``scale``: 1/N (2) and 1/sqrt(N) (1) are the libraries' own."""
    if scale is None:
        return 0, None
    n = math.prod(t.n)
    if abs(float(scale) * n - 1) < 1e-12:
        return 2, None
    if abs(float(scale) ** 2 * n - 1) < 1e-12:
        return 1, None
    return 0, scale


class _FusedPass:
    """The callbacks of one Transform fused into the passes around the library's transform (see the module)."""

    def __init__(self, t, prolog, epilog, libraries, threads, limit):
        self.t, self.threads = t, threads
        batch_axes = [a for a in range(len(t.input_shape)) if a not in t.axes]
        self._in = _Side(t.input_shape, t.input_strides, t.axes, batch_axes, t.input_dtype)
        self._out = _Side(t.output_shape, t.output_strides, t.axes, batch_axes, t.output_dtype)
        self._load = passes.loader(None if prolog is None else prolog.function, "prolog")
        self._store = passes.storer(None if epilog is None else epilog.function, "epilog")
        self._prolog, self._epilog = prolog, epilog
        # free (input, output) buffers of each strategy: one pair per concurrent block or call
        self._block_buffers, self._whole_buffers = [], []
        self.strategies = self._strategies = {"passes": self._passes}
        self._whole_setup(libraries, batch_axes, limit)
        if self._in.count >= 2 * threads:  # a block of transforms per thread is possible: it competes
            self._blocked_setup(libraries)
            self._strategies["blocks"] = self._blocks
            if threads >= PARALLEL_MIN_THREADS:
                self._parallel_setup()
        self.workspace_bytes = max(self._workspace.values())
        self.strategy, self.timings = "passes", {}
        self._choosing = threading.Lock()
        self._dry_run()

    # --- planning ----------------------------------------------------------------------------------------------------
    def _blocked_setup(self, libraries):
        t, count, threads = self.t, self._in.count, self.threads
        per_transform = transform_bytes(t) // count
        blocks = max(threads, min(MAX_BLOCKS, (count * per_transform) // BLOCK_BYTES))
        # pocketfft vectorises across transforms: a block of fewer than 4 runs 3-4x slower per transform
        self._rows = max(-(-count // blocks), min(MIN_BLOCK_ROWS, count // threads))
        # the transform reads the caller's input (writes the caller's output) in place unless a callback sits there
        self._x_dense = self._prolog is not None or not self._in.folds
        self._out_dense = self._epilog is not None or not self._out.folds
        self._libraries = [lib for lib in libraries if lib.chunks] or candidates("pocketfft", t)
        self._executors = {}  # block length -> Executor on one thread
        self._workspace["blocks"] = threads * self._rows * per_transform

    def _parallel_setup(self):
        """Offer the "parallel" strategy when FFTW's C API and numba's parallel loops are there, and the callbacks
        cannot raise: an exception inside numba's parallel loop is lost (the element stays unwritten), where the
        other strategies' loops raise it."""
        t = self.t
        api = _fftw_c.library(t.precision) if any(lib.name == "fftw" for lib in self._libraries) else None
        if api is None or _threads.parallel_numba() is None or \
                any(cb is not None and passes.may_raise(cb.function) for cb in (self._prolog, self._epilog)):
            return
        self._api = api
        self._team = _threads.numba_team_size(self.threads)  # (numba's thread ids stay below it)
        self._buffers = None  # (input, output) blocks of every thread, made at the first call
        self._plans = {}  # forward -> FFTW's plan (see _plan)
        weakref.finalize(self, _destroy_plans, api, self._plans)
        self._run_blocks = passes.blocks(None if self._prolog is None else self._prolog.function,
                                         None if self._epilog is None else self._epilog.function,
                                         api.execute[t.fft_type])
        self._workspace["parallel"] = self._team * self._rows * transform_bytes(t) // self._in.count
        self._strategies["parallel"] = self._parallel

    def _whole_setup(self, libraries, batch_axes, limit):
        t = self.t
        order = batch_axes + list(t.axes)  # dense buffers: the batch outermost, the transform axes in their order
        in_strides = dense_strides(t.input_shape, order) if self._prolog is not None else t.input_strides
        out_strides = dense_strides(t.output_shape, order) if self._epilog is not None else t.output_strides
        self._whole = Transform(t.fft_type, t.precision, t.input_shape, in_strides, t.output_shape, out_strides,
                                t.axes)
        self._executor = Executor(self._whole, libraries, self.threads, destroy_input=self._prolog is not None,
                                  limit=limit)
        self._workspace = {"passes": (self._prolog is not None) * math.prod(t.input_shape) * t.input_dtype.itemsize
                           + (self._epilog is not None) * math.prod(t.output_shape) * t.output_dtype.itemsize}
        # the rows of the passes: the batch, or (one transform over several axes) the first transform axis
        self._rows_of = {}
        for side, strides in ((self._in, t.input_strides), (self._out, t.output_strides)):
            if side.count == 1 and len(t.axes) > 1:
                first = side.batch[0] + np.arange(side.extents[0], dtype=np.int64) * strides[t.axes[0]]
                inner = _offsets(side.extents[1:], [strides[a] for a in t.axes[1:]])
                self._rows_of[side] = first, inner, passes.inner_step(inner)
            else:
                self._rows_of[side] = side.batch, side.inner, side.step

    def _dry_run(self):
        """Compile both passes now, over no row (a callback must not run on arrays it was not given), so that typing
        errors surface when the FFT is planned."""
        none, one, (prolog_info, epilog_info) = np.zeros(0, np.int64), np.zeros(1, np.int64), self._user_info()
        t = self.t
        self._load(np.zeros(1, t.input_dtype), none, one, 1, prolog_info, np.zeros((0, 1), t.input_dtype))
        self._store(np.zeros(1, t.output_dtype), none, one, 1, np.zeros((0, 1), t.output_dtype), epilog_info, None)

    def _user_info(self):
        return tuple(None if cb is None else passes.prepare_user_info(cb.user_info)
                     for cb in (self._prolog, self._epilog))

    @property
    def library(self):
        if self.strategy == "parallel":
            return "fftw"
        executor = self._executors.get(self._rows) if self.strategy == "blocks" else self._executor
        return None if executor is None else executor.library

    # --- running -----------------------------------------------------------------------------------------------------
    def __call__(self, x, out, forward, scale):
        if not self.timings and len(self._strategies) > 1 and x is not out:
            with self._choosing:  # the other threads wait: every call runs the chosen strategy
                if not self.timings:
                    self._choose(x, out, forward, scale)
        self._strategies[self.strategy](x, out, forward, scale)

    def _choose(self, x, out, forward, scale):
        """Time the strategies on copies of the call's arrays, in interleaved rounds, and keep the fastest. A
        "parallel" strategy that fails at its first run (its loop compiled, its FFTW plan made only then) leaves the
        competition, logged: the others run these callbacks as well."""
        x_copy, out_copy = like(x), like(out)
        np.copyto(x_copy, x)
        samples = {name: [] for name in self._strategies}
        for _ in range(4):
            for name, run in list(self._strategies.items()):
                start = time.perf_counter()
                try:
                    run(x_copy, out_copy, forward, scale)
                except Exception as e:  # noqa: BLE001 - logged; the other strategies remain
                    if name != "parallel":
                        raise
                    logger.debug("CPU FFT %s: the parallel strategy failed (%s: %s); not used", self.t,
                                 type(e).__name__, e)
                    del self._strategies[name], samples[name]
                    self._buffers = None
                    continue
                samples[name].append(time.perf_counter() - start)
        self.timings = {name: statistics.median(times[1:]) for name, times in samples.items()}
        self.strategy = min(self.timings, key=self.timings.get)
        (self._whole_buffers if self.strategy == "blocks" else self._block_buffers).clear()
        if self.strategy != "parallel" and "parallel" in self._strategies:
            self._buffers = None
        logger.debug("CPU FFT %s with callbacks: %s (measured %s)", self.t, self.strategy,
                     {k: f"{v * 1e3:.3f} ms" for k, v in self.timings.items()})

    def _executor_for(self, rows):
        executor = self._executors.get(rows)
        if executor is None:
            t = self.t
            in_shape, out_shape = (rows, *self._in.extents), (rows, *self._out.extents)
            block = Transform(t.fft_type, t.precision, in_shape, self._in.block_strides(in_shape, self._x_dense),
                              out_shape, self._out.block_strides(out_shape, self._out_dense),
                              tuple(range(1, len(in_shape))))
            executor = self._executors[rows] = Executor(block, self._libraries, 1, destroy_input=self._x_dense)
        return executor

    def _blocks(self, x, out, forward, scale):
        rows, count, t = self._rows, self._in.count, self.t
        prolog_info, epilog_info = self._user_info()
        x_view = None if self._x_dense else self._in.batched(x)
        out_view = None if self._out_dense else self._out.batched(out)
        x_span = _flat_span(x) if self._x_dense else None
        out_span = _flat_span(out) if self._out_dense else None
        norm, rest = (0, None) if self._out_dense else _norm(scale, t)  # the store pass scales a dense output
        ins, outs = self._in, self._out

        def block(i):
            start, stop = i * rows, min(count, (i + 1) * rows)
            n = stop - start
            buffers = self._block_buffers.pop() if self._block_buffers else self._new_block()
            try:
                if x_view is None:
                    src = buffers[0][:n]
                    self._load(x_span, ins.batch[start:stop], ins.inner, ins.step, prolog_info, src.reshape(n, -1))
                else:
                    src = x_view[start:stop]
                dst = buffers[1][:n] if out_view is None else out_view[start:stop]
                self._executor_for(n)(src, dst, forward, norm)
                if out_view is None:
                    self._store(out_span, outs.batch[start:stop], outs.inner, outs.step, dst.reshape(n, -1),
                                epilog_info, scale)
                elif rest is not None:
                    dst *= rest
            finally:
                self._block_buffers.append(buffers)

        _threads.run_chunks(block, -(-count // rows), self.threads)

    def _plan(self, forward):
        """FFTW's plan of a block of ``rows`` dense transforms between thread 0's buffers, made at its first use."""
        key = bool(forward)
        plan = self._plans.get(key)
        if plan is None:
            t, (source, destination) = self.t, (b[0, :self._rows] for b in self._buffers)
            plan = self._api.plan(t.fft_type, t.n, self._rows, source, destination, forward,
                                  _fftw_c.FFTW_MEASURE | _fftw_c.FFTW_DESTROY_INPUT, FFTW_PLANNING_SECONDS)
            if plan is None:
                raise RuntimeError(f"FFTW made no plan of {self._rows} transforms of {t}")
            self._plans[key] = plan
        return plan

    def _parallel(self, x, out, forward, scale):
        rows, ins, outs = self._rows, self._in, self._out
        prolog_info, epilog_info = self._user_info()
        scaled = scale is not None
        if not scaled:
            scale = self.t.precision.type(1)
        with _threads.numba_team(self._team):  # one call at a time: the buffers are the engine's
            if self._buffers is None:
                self._buffers = tuple(_thread_buffers(self._team, rows, side.extents, side.dtype)
                                      for side in (ins, outs))
            plan = self._plan(forward)  # (a last, shorter block transforms its buffer's stale rows too)
            self._run_blocks(_flat_span(x), ins.batch, ins.inner, ins.step, _flat_span(out), outs.batch,
                             outs.inner, outs.step, rows, plan, *self._buffers, prolog_info, epilog_info, scale,
                             scaled)
        _threads.spun(_threads.numba_spin_seconds())

    def _new_block(self):
        t, rows = self.t, self._rows
        return (np.empty((rows, *self._in.extents), t.input_dtype),
                np.empty((rows, *self._out.extents), t.output_dtype))

    def _passes(self, x, out, forward, scale):
        prolog_info, epilog_info = self._user_info()
        buffers = self._whole_buffers.pop() if self._whole_buffers else self._new_buffers()
        try:
            src, dst = x, out
            if self._prolog is not None:
                src, x_span = buffers[0], _flat_span(x)
                self._pass(self._in, src, lambda rows, inner, step, part: self._load(x_span, rows, inner, step,
                                                                                     prolog_info, part))
            if self._epilog is not None:
                dst = buffers[1]
                norm, rest = 0, None  # the epilog pass scales
            else:
                norm, rest = _norm(scale, self.t)
            self._executor(src, dst, forward, norm)
            if self._epilog is not None:
                out_span = _flat_span(out)
                self._pass(self._out, dst, lambda rows, inner, step, part: self._store(out_span, rows, inner, step,
                                                                                      part, epilog_info, scale))
            elif rest is not None:
                scale_in_place(out, rest, self.threads)
        finally:
            self._whole_buffers.append(buffers)

    def _pass(self, side, buffer, run):
        """``run(row_offsets, inner_offsets, step, rows of buffer)`` over the rows of a pass, a block per thread."""
        row_offsets, inner, inner_step = self._rows_of[side]
        flat = _flat_span(buffer).reshape(len(row_offsets), -1)
        blocks = _threads.threads_for_bytes(self.threads, buffer.nbytes)
        rows_per_block = -(-len(row_offsets) // blocks)

        def block(i):
            rows = slice(i * rows_per_block, (i + 1) * rows_per_block)
            run(row_offsets[rows], inner, inner_step, flat[rows])

        _threads.run_chunks(block, -(-len(row_offsets) // rows_per_block), blocks)

    def _new_buffers(self):
        w = self._whole
        return (_dense(w.input_shape, w.input_strides, w.input_dtype) if self._prolog is not None else None,
                _dense(w.output_shape, w.output_strides, w.output_dtype) if self._epilog is not None else None)


class _CheckedPass:
    """Callbacks compiled with ``check_bounds``: mathpy.jit's checked loops, one element at a time so that the first
    access outside an array is named (:class:`~mathpy.OutOfBoundsError`), around the library's transform of dense
    C-ordered buffers. A diagnostic mode: one thread for the callbacks, two extra passes."""

    strategies = {"checked": None}
    strategy, library = "checked", None

    def __init__(self, t, prolog, epilog, libraries, threads, limit):
        for bound in (prolog, epilog):
            if bound is not None:
                dry_run(bound)  # typing errors in the user's function surface now, at plan time
        self.t, self.threads, self._prolog, self._epilog = t, threads, prolog, epilog
        dense = Transform(t.fft_type, t.precision, t.input_shape, c_strides(t.input_shape), t.output_shape,
                          c_strides(t.output_shape), t.axes)
        self._executor = Executor(dense, libraries, threads, destroy_input=True, limit=limit)
        self.library = self._executor.library
        self._in_offsets = element_offsets(t.input_shape, t.input_strides) if prolog is not None else None
        self._out_offsets = element_offsets(t.output_shape, t.output_strides) if epilog is not None else None

    def __call__(self, x, out, forward, scale):
        t, prolog, epilog = self.t, self._prolog, self._epilog
        if prolog is not None:
            x = apply_prolog_cpu(prolog.function, _flat_span(x), self._in_offsets, prolog.user_info,
                                 check_bounds=prolog.check_bounds)
        else:
            x = np.array(x, order="C")  # the library may overwrite its dense input
        y = np.empty(t.output_shape, t.output_dtype)
        self._executor(x, y, forward, 0)
        if epilog is not None:
            apply_epilog_cpu(epilog.function, _flat_span(out), self._out_offsets, y, epilog.user_info,
                             check_bounds=epilog.check_bounds)
        else:
            np.copyto(out, y)
        if scale is not None:
            scale_in_place(out, scale, self.threads)


def _thread_buffers(threads, rows, extents, dtype):
    """``(threads, rows', prod(extents))`` zeros of ``dtype``, C-contiguous, ``rows' >= rows`` rounded up so that
    each thread's block starts on a 16-byte boundary: FFTW runs a plan only on arrays aligned as the ones it was made
    on. (Zeros: a short last block transforms its stale rows too, which must not be NaNs or slow denormals.)"""
    dtype, elements = np.dtype(dtype), math.prod(extents)
    while rows * elements * dtype.itemsize % 16:
        rows += 1
    shape = (threads, rows, elements)
    buffers = aligned_layout(shape, c_strides(shape), dtype)
    buffers[...] = 0
    return buffers


def _destroy_plans(api, plans):
    for plan in plans.values():
        api.destroy(plan)
    plans.clear()


def _dense(shape, strides, dtype):
    """A new array of ``shape`` with the dense element ``strides``."""
    dtype = np.dtype(dtype)
    flat = np.empty(math.prod(shape), dtype)
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * dtype.itemsize for s in strides))
