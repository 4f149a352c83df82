"""The cuBLASLt matmul engine: a :class:`~._problem.MatmulProblem` planned once, executed many times.

**Layouts**: :mod:`._orient` maps the problem onto cuBLASLt's column-major operands (a row-major D is computed as
``D.T = B.T @ A.T``). Batches are cuBLASLt's strided batches, one stride per operand (0 broadcasts one matrix).
**Epilogs**: each epilog operand's handler (:mod:`._epilog_operands`) sets its descriptor attributes; pointers are
set per execute, only when they changed.

**Algorithms.** Planning asks cuBLASLt's heuristic for ``preferences.limit`` candidates (workspace bounded by
``preferences.max_workspace_bytes``, 32 MiB by default as torch gives cuBLASLt on Hopper). ``algorithms[0]`` is the
one in use; assigning to the list (``engine.algorithms[:] = [...]``) changes it. :meth:`CublasLtEngine.autotune` times
every candidate with CUDA events on the real operands and moves the fastest to the front. Skinny products autotune by
themselves on their first execute, over a wider pool of :data:`SELF_AUTOTUNE_POOL` candidates, and tiny ones put a
single-kernel candidate first (the rules and their measurements: :mod:`._algorithms`).

**Streams and workspace.** The workspace (the package's pool, or ``options.allocator``) is allocated on the plan's
home stream and used there; an execute on another stream takes one in that stream's order, so one plan serves every
stream. :meth:`~CublasLtEngine.release_workspace` gives it back until the next execute.

**The hot path.** :meth:`~CublasLtEngine.execute` writes the operand pointers and the stream (alpha/beta when they
change) into a prebuilt argument list of plain ints and calls ``cublasLtMatmul`` unchecked (status tested inline).
"""

import contextlib
import ctypes
import statistics
import threading
import weakref

import numpy as np

from ... import _cuda, _operands, _packages, _runtime
from ..._errors import CUDALibraryError, InvalidPlanStateError, UnsupportedLayoutError
from ..._log import logger
from ..._streams import keep_for_graph
from ..._workspace import WorkspaceSource
from ...bindings import cublaslt as lt
from ._algorithms import (HOST_BOUND_FLOPS, Candidates, CublasLtAlgorithm, needs_autotune, no_algorithm_message,
                          single_kernel_first)
from ._epilog import MatmulEpilog
from ._epilog_operands import HANDLERS, SCALE_NAMES, c_stand_in
from ._options import FLOAT8_DTYPES, MatmulPlanPreferences
from ._orient import SWAPPED_EPILOGS, SWAPPED_SCALES, Operation, as_column_major, orient

__all__ = ["CublasLtEngine", "CublasLtAlgorithm", "as_column_major", "orient", "needs_autotune", "get_handle"]

#: Pointer alignment the heuristic is told to assume by default (cuBLASLt's own default); smaller alignments found at
#: execute() time make the engine ask again with the smaller one.
DEFAULT_ALIGNMENT = 256
#: How many heuristic candidates the self-autotune of skinny products times (the plan keeps ``limit`` of them).
SELF_AUTOTUNE_POOL = 16
#: A stand-in for epilog pointers while planning: cuBLASLt's heuristic reads only their alignment.
_PLACEHOLDER_POINTER = 1 << 20
#: float8 scale factors are float32 values 256 bytes apart in one device buffer (each pointer 256-byte aligned).
_SCALE_SPACING = 64

get_handle = lt.device_handle  # one cuBLASLt handle per device, for the life of the process


# ---------------------------------------------------------------------------------------------------------------------
# Resources, released by free() or by the finalizer


class _Resources:
    """Everything a plan holds; ``release()`` is idempotent and is also the weakref.finalize safety net. The workspace
    is used on the home stream only, so it goes back to the stream-ordered pool at once; the float8 scales are read on
    every stream the plan ran on, which are waited for first."""

    def __init__(self):
        self.desc, self.preference, self.layouts = None, None, []
        self.workspace, self.scales, self.alignment_preferences = None, None, []
        self.foreign_streams = set()  # streams other than the home one that read the scales

    def drop_allocations(self, keep_scales=False):
        """Let go of the workspace (and the float8 scales, after the other streams that read them)."""
        if self.foreign_streams and self.scales is not None and not keep_scales:
            try:
                for stream in self.foreign_streams:
                    _runtime.synchronize(stream)
            except Exception as e:  # at interpreter exit the runtime may be gone
                logger.debug("cuBLASLt plan release: stream synchronisation failed: %s", e)
            self.foreign_streams.clear()
        workspace, self.workspace = self.workspace, None
        if workspace is not None:
            workspace.release()
        if not keep_scales:
            self.scales = None

    def release(self):
        errors = []
        for destroy, handles in ((lt.destroy_matrix_layout, self.layouts),
                                 (lt.destroy_preference, self.alignment_preferences)):
            while handles:
                try:
                    destroy(handles.pop())
                except Exception as e:  # keep releasing the rest
                    errors.append(e)
        for attribute, destroy in (("preference", lt.destroy_preference), ("desc", lt.destroy_matmul_desc)):
            handle = getattr(self, attribute)
            setattr(self, attribute, None)
            if handle is not None:
                try:
                    destroy(handle)
                except Exception as e:
                    errors.append(e)
        self.drop_allocations()
        if errors:
            logger.warning("cuBLASLt plan release: %s", errors[0])


# ---------------------------------------------------------------------------------------------------------------------
# The engine


class CublasLtEngine:
    """A planned cuBLASLt matmul (see the module docstring). Constructed by the matmul API from a MatmulProblem.

    ``allocator``: the :class:`~mathpy._packages.PackageStream` whose stream-ordered pool holds the workspace and
    the float8 scales; its stream (or the package's current one) is the plan's home stream (None: the device
    package's current stream). Executions on another stream take a workspace of their own from the same pool, so one
    plan serves every stream. ``autotune_first_execute``: None decides with :func:`needs_autotune`; True/False force
    it. Callers that share an engine between threads hold :attr:`lock` around :meth:`execute`."""

    def __init__(self, problem, *, execution=None, options=None, preferences=None, allocator=None,
                 autotune_first_execute=None):
        self.problem, self._options = problem, options
        self.device_id = 0 if execution is None or execution.device_id is None else execution.device_id
        preferences = preferences if preferences is not None else MatmulPlanPreferences()
        _cuda.require_device(self.device_id)
        if allocator is None:
            allocator = _packages.get(_operands.device_package()).on(self.device_id)
        if allocator.stream is None:
            allocator = allocator.package.on(self.device_id, allocator.package.current_stream(self.device_id))
        self._allocator, self._home = allocator, allocator.stream
        self._source = WorkspaceSource(allocator, getattr(options, "allocator", None), self.device_id)
        self.lock = threading.Lock()
        self._resources = res = _Resources()
        self._finalizer = weakref.finalize(self, res.release)
        self._freed = False
        try:
            self._build(problem, preferences)
            self._prepare_self_autotune(autotune_first_execute)
        except BaseException:
            self._finalizer()  # a failed plan leaves nothing allocated
            self._freed = True
            raise

    def _prepare_self_autotune(self, autotune_first_execute):
        problem, res = self.problem, self._resources
        if autotune_first_execute is None:
            autotune_first_execute = needs_autotune(problem.m, problem.n, problem.k, problem.batch,
                                                    len(self.algorithms))
        self._autotune_pending = bool(autotune_first_execute) and len(self.algorithms) > 1
        self._pool = None
        if self._autotune_pending and self._limit < SELF_AUTOTUNE_POOL:
            # The first execute times a wider pool than the plan's candidates: the fastest one for a skinny product
            # is often further down cuBLASLt's list. algorithms stays at most `limit` long.
            la, lb, lc, ld = self._layouts
            try:
                found = lt.heuristics(self._handle, res.desc, la, lb, lc, ld, res.preference, SELF_AUTOTUNE_POOL)
            except Exception as e:
                logger.debug("cuBLASLt: wider heuristic query failed (%s); autotuning the plan's candidates", e)
                found = []
            extra = [CublasLtAlgorithm(result, rank) for rank, result in enumerate(found)]
            self._pool = list(self.algorithms) + [alg for alg in extra if alg not in self.algorithms]
        if self._autotune_pending:
            # Hold the largest workspace any timed candidate needs from the start, so that workspace_bytes (what a
            # plan cache accounts for) is never exceeded; the first execute shrinks it to the winner's.
            self._ensure_workspace(max(alg.workspace_bytes for alg in (self._pool or self.algorithms)))

    # -- planning ------------------------------------------------------------------------------------------------------

    def _build(self, problem, preferences):
        res = self._resources
        a_dtype, d_dtype = problem.a.dtype, problem.d.dtype
        float8 = a_dtype in FLOAT8_DTYPES or problem.b.dtype in FLOAT8_DTYPES
        if float8 and tuple(_cuda.compute_capability(self.device_id)) < (8, 9):
            raise ValueError(f"float8 matmul needs compute capability >= 8.9; device {self.device_id} has "
                             f"{_cuda.compute_capability(self.device_id)}")
        self._handle = get_handle(self.device_id)
        try:
            compute = lt.ComputeType["COMPUTE_" + problem.compute_type]
        except KeyError:
            raise ValueError(f"compute type {problem.compute_type!r} is not a cuBLAS compute type; allowed are "
                             f"{[c.name[8:] for c in lt.ComputeType]}") from None
        scale = lt.cuda_data_type(problem.scale_type)

        swap, a, b, c, d = orient(problem)
        epilog = problem.epilog
        if swap:
            if epilog not in SWAPPED_EPILOGS:
                raise UnsupportedLayoutError(f"epilog {epilog.name} needs a column-major result; got a row-major one")
            epilog = SWAPPED_EPILOGS[epilog]
        self._swap = swap
        op_a, rows_a, cols_a, ld_a = as_column_major(a)
        op_b, rows_b, cols_b, ld_b = as_column_major(b, Operation.T if epilog is MatmulEpilog.BGRADB else None)
        op_d, rows_d, cols_d, ld_d = as_column_major(d)
        if op_d is not Operation.N:
            raise UnsupportedLayoutError(f"the result must be stored column-major or row-major; got {problem.d}")

        res.desc = desc = lt.create_matmul_desc(compute, scale)
        lt.set_attribute(desc, lt.MatmulDesc.TRANSA, op_a)
        lt.set_attribute(desc, lt.MatmulDesc.TRANSB, op_b)
        batch = problem.batch
        la = self._layout(a.dtype, rows_a, cols_a, ld_a, batch, a.batch_stride)
        lb = self._layout(b.dtype, rows_b, cols_b, ld_b, batch, b.batch_stride)
        ld = self._layout(d.dtype, rows_d, cols_d, ld_d, batch, d.batch_stride)
        if problem.inplace:  # D is C's memory: cuBLASLt takes one layout for both
            lc = ld
        elif c is not None:
            op_c, rows_c, cols_c, ld_c = as_column_major(c)
            if op_c is not Operation.N:
                raise UnsupportedLayoutError(f"c must be stored in the result's order (cuBLASLt reads C without "
                                             f"transposing it); c is {problem.c}, the result {problem.d}")
            lc = self._layout(c.dtype, rows_c, cols_c, ld_c, batch, c.batch_stride)
        elif d_dtype in FLOAT8_DTYPES:  # cuBLASLt wants C in 16 bits for float8 results; never read (beta = 0)
            lc = self._layout(c_stand_in(problem.epilog_outputs), rows_d, cols_d, ld_d, batch, d.batch_stride)
        else:
            lc = ld

        self._c_stand_in = 0  # C's pointer when the problem has no C (0: D's)
        self._alpha_factor = self._set_float8_scales(desc, problem, swap, c is None) if float8 else 1.0
        sm_count = getattr(self._options, "sm_count_target", 0)
        if sm_count:
            lt.set_attribute(desc, lt.MatmulDesc.SM_COUNT_TARGET, sm_count)
        self._set_epilog(desc, problem, epilog, swap)

        self._layouts = (la, lb, lc, ld)
        self.algorithms = self._candidates(problem, preferences, (op_a, op_b, float8))
        self._alignment_mask = DEFAULT_ALIGNMENT - 1

        # Host alpha/beta of the scale type, and the argument list of cublasLtMatmul (ints only).
        self._alpha_buffer = np.zeros(1, dtype=problem.scale_type)
        self._beta_buffer = np.zeros(1, dtype=problem.scale_type)
        self._alpha = self._beta = None
        self._algo = lt.MatmulAlgo()
        self._args = [self._handle, desc, self._alpha_buffer.ctypes.data, 0, la, 0, lb,
                      self._beta_buffer.ctypes.data, 0, lc, 0, ld, ctypes.addressof(self._algo), 0, 0, 0]
        self._matmul = lt.library.unchecked("cublasLtMatmul")  # its status is tested inline (see _launch)
        self._switch_device = _cuda.device_count() > 1
        self.workspace_bytes, self._workspace_pointer, self._released = 0, 0, False
        self._use(self.algorithms[0])
        logger.debug("cuBLASLt plan %sx%sx%s batch %d (%s%s, swap=%s, epilog=%s): %d candidates, using %r",
                     problem.m, problem.n, problem.k, batch, op_a.name, op_b.name, swap,
                     None if epilog is None else epilog.name, len(self.algorithms), self.algorithms[0])

    def _candidates(self, problem, preferences, described):
        """cuBLASLt's heuristic's algorithms for the layouts and descriptor made, under ``preferences``, small
        products' single-kernel ones first; ValueError when it has none (``described``: the operations and whether
        the product is float8, for the message)."""
        res = self._resources
        self._filters = tuple((attribute, value) for attribute, value in (
            (lt.Preference.REDUCTION_SCHEME_MASK, preferences.reduction_scheme_mask),
            (lt.Preference.IMPL_MASK, preferences.numerical_impl_mask),
            (lt.Preference.MAX_WAVES_COUNT, preferences.max_waves_count or None)) if value is not None)
        res.preference = self._preference(preferences.max_workspace_bytes, DEFAULT_ALIGNMENT)
        self._limit = preferences.limit
        self._max_workspace = preferences.max_workspace_bytes
        try:
            found = lt.heuristics(self._handle, res.desc, *self._layouts, res.preference, preferences.limit)
        except CUDALibraryError as e:  # e.g. CUBLAS_STATUS_INVALID_VALUE for a combination it rejects outright
            raise ValueError(f"{no_algorithm_message(self.problem, self.device_id, *described)} ({e})") from e
        if not found:
            raise ValueError(no_algorithm_message(self.problem, self.device_id, *described))
        candidates = [CublasLtAlgorithm(result, rank) for rank, result in enumerate(found)]
        if 2.0 * problem.m * problem.n * problem.k * problem.batch <= HOST_BOUND_FLOPS:
            candidates = single_kernel_first(candidates)
        return Candidates(candidates, self._chosen_by_caller)

    def _set_float8_scales(self, desc, problem, swap, no_c):
        """Put a float8 product's scale factors on the device (float32, the compute type; D's only for a float8
        result) and point ``desc`` at them; returns the factor folded into alpha (a d_scale of a wider result)."""
        alpha_factor, d_dtype = 1.0, problem.d.dtype
        scales = {lt.MatmulDesc.A_SCALE_POINTER: problem.a_scale, lt.MatmulDesc.B_SCALE_POINTER: problem.b_scale}
        scales = {SWAPPED_SCALES[attribute] if swap else attribute: v for attribute, v in scales.items()}
        scales[lt.MatmulDesc.EPILOGUE_AUX_SCALE_POINTER] = problem.aux_scale  # (a float8 aux's; else None)
        d_scale = problem.d_scale
        if d_dtype in FLOAT8_DTYPES:
            scales[lt.MatmulDesc.D_SCALE_POINTER] = d_scale
        elif d_scale is not None and d_scale != 1:  # (the API refuses it with an epilog, which would not commute)
            alpha_factor = float(d_scale)  # d_scale * (alpha X + beta C) = (d_scale alpha) X + (d_scale beta) C
        scales = {attribute: value for attribute, value in scales.items() if value is not None}
        # A float8 result without C: C (bfloat16, never read as beta = 0) needs a pointer other than D's, or
        # cuBLASLt sees an in-place product with C's and D's layouts differing (CUBLAS_STATUS_INVALID_VALUE).
        stand_in = d_dtype in FLOAT8_DTYPES and no_c
        if scales or stand_in:
            # one scale per 256 bytes: cuBLASLt wants each scale pointer aligned (a float32 right after
            # another one, 4-byte aligned, gave CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmul)
            host = np.zeros(_SCALE_SPACING * (len(scales) + stand_in), dtype=np.float32)
            host[:_SCALE_SPACING * len(scales):_SCALE_SPACING] = list(scales.values())
            self._resources.scales = self._allocator.from_numpy(host)
            base = self._allocator.package.pointer(self._resources.scales)
            for i, attribute in enumerate(scales):
                lt.set_attribute(desc, attribute, base + 4 * _SCALE_SPACING * i)
            if stand_in:
                self._c_stand_in = base + 4 * _SCALE_SPACING * len(scales)
        if getattr(self._options, "fast_accumulation", False):
            lt.set_attribute(desc, lt.MatmulDesc.FAST_ACCUM, 1)
        return alpha_factor

    def _set_epilog(self, desc, problem, epilog, swap):
        """The epilog's value, dtypes, leading dimensions and batch strides on ``desc``, and the slots of its
        pointers (and the result's amax's, which needs no epilog), which each execute() sets."""
        slots = []
        if epilog is not None:
            lt.set_attribute(desc, lt.MatmulDesc.EPILOGUE, int(epilog))
        for source, pairs in ((0, problem.epilog_inputs), (1, problem.epilog_outputs)):
            for name, layout in pairs:  # each operand's handler sets its own attributes
                pointer_attribute = HANDLERS[name].set_attributes(desc, layout, problem.d.dtype, problem.batch)
                if swap:  # a_scale / b_scale tensors follow their operands
                    pointer_attribute = SWAPPED_SCALES.get(pointer_attribute, pointer_attribute)
                lt.set_attribute(desc, pointer_attribute, _PLACEHOLDER_POINTER)
                slots.append((source, name, int(pointer_attribute)))
        self._slots = tuple(slots)
        self._slot_values = [_PLACEHOLDER_POINTER] * len(slots)
        self._slot_buffer = ctypes.c_void_p(0)
        self._set_desc_attribute = lt.library.cublasLtMatmulDescSetAttribute

    def _layout(self, dtype, rows, cols, ld, batch, batch_stride):
        layout = lt.create_matrix_layout(lt.cuda_data_type(dtype), rows, cols, ld)
        self._resources.layouts.append(layout)
        if batch > 1:
            lt.set_attribute(layout, lt.MatrixLayout.BATCH_COUNT, batch)
            lt.set_attribute(layout, lt.MatrixLayout.STRIDED_BATCH_OFFSET, batch_stride)
        return layout

    def _preference(self, max_workspace, alignment):
        preference = lt.create_preference()
        try:
            lt.set_attribute(preference, lt.Preference.MAX_WORKSPACE_BYTES, max_workspace)
            for attribute, value in self._filters:  # the caller's reduction-scheme / implementation / waves limits
                lt.set_attribute(preference, attribute, value)
            if alignment != DEFAULT_ALIGNMENT:
                for attribute in (lt.Preference.MIN_ALIGNMENT_A_BYTES, lt.Preference.MIN_ALIGNMENT_B_BYTES,
                                  lt.Preference.MIN_ALIGNMENT_C_BYTES, lt.Preference.MIN_ALIGNMENT_D_BYTES):
                    lt.set_attribute(preference, attribute, alignment)
        except BaseException:
            lt.destroy_preference(preference)
            raise
        return preference

    def _chosen_by_caller(self, algorithm):
        """The caller changed ``algorithms``: use its first one, and no longer autotune on its own."""
        self._autotune_pending, self._pool = False, None
        self._use(algorithm)

    def _use(self, algorithm):
        """Make ``algorithm`` the one execute() runs, growing or shrinking the workspace to what it needs."""
        self._load(algorithm)
        self._ensure_workspace(algorithm.workspace_bytes, exact=True)

    def _load(self, algorithm):
        """Copy ``algorithm`` into the algo struct that cublasLtMatmul's prebuilt argument list points to."""
        ctypes.memmove(ctypes.addressof(self._algo), ctypes.addressof(algorithm.algo), ctypes.sizeof(self._algo))

    def _ensure_workspace(self, nbytes, exact=False):
        held = self._resources.workspace is not None or not self.workspace_bytes
        if held and (nbytes == self.workspace_bytes or (not exact and nbytes < self.workspace_bytes)):
            return
        if not exact:
            nbytes = max(nbytes, self.workspace_bytes)
        res = self._resources
        res.drop_allocations(keep_scales=True)
        if nbytes:
            res.workspace = self._source.take(nbytes, self._home)
            pointer = res.workspace.pointer
        else:
            pointer = 0
        self._released = False
        self.workspace_bytes, self._workspace_pointer = nbytes, pointer
        self._args[13], self._args[14] = pointer, nbytes

    def _realign(self, pointers):
        """Some pointer is less aligned than the plan assumed: ask the heuristic again for that alignment."""
        alignment = DEFAULT_ALIGNMENT
        while alignment > 1 and pointers & (alignment - 1):
            alignment //= 2
        preference = self._preference(self._max_workspace, alignment)
        self._resources.alignment_preferences.append(preference)
        la, lb, lc, ld = self._layouts
        found = lt.heuristics(self._handle, self._resources.desc, la, lb, lc, ld, preference, self._limit)
        if not found:
            raise ValueError(f"cuBLASLt has no algorithm for operands aligned to {alignment} bytes; pass arrays "
                             f"aligned to at least 16 bytes")
        logger.debug("cuBLASLt: operands aligned to %d bytes only; replanned (%d candidates)", alignment, len(found))
        candidates = Candidates((CublasLtAlgorithm(result, rank) for rank, result in enumerate(found)),
                                 self._chosen_by_caller)
        self.algorithms = candidates
        self._alignment_mask = alignment - 1
        self._use(candidates[0])

    # -- execution -----------------------------------------------------------------------------------------------------

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream):
        """Run the product on device pointers ``a``, ``b``, ``c`` (None: no C), ``d``, epilog pointers by name, host
        scalars ``alpha``/``beta``, on the raw stream handle ``stream``."""
        args = self._args
        if self._swap:
            args[3], args[5] = b, a
        else:
            args[3], args[5] = a, b
        if c is None:
            c, beta = self._c_stand_in or d, 0
        args[8], args[10], args[15] = c, d, stream
        if alpha != self._alpha:
            self._alpha = alpha
            self._alpha_buffer[0] = alpha * self._alpha_factor
        if beta != self._beta:
            self._beta = beta
            self._beta_buffer[0] = beta * self._alpha_factor
        pointers = a | b | c | d
        if self._slots:
            pointers |= self._set_epilog_pointers(epilog_inputs, epilog_outputs)
        if pointers & self._alignment_mask:
            self._realign(pointers)
        if self._autotune_pending and not self._allocator.package.is_capturing(self.device_id, stream):
            self._self_autotune(stream)  # (a capture records the heuristic's choice: timing waits on the host)
        if stream != self._home:
            self._execute_elsewhere(args, stream)
            return
        if self._released:  # release_workspace() gave it back: take it again
            self._ensure_workspace(self.workspace_bytes)
        if self._switch_device:
            with _runtime.device_scope(self.device_id):
                self._launch(args)
        else:
            status = self._matmul(*args)  # _launch, inlined: this is the hot path
            if status:
                self._launch(args, status)

    def _launch(self, args, status=None):
        """cublasLtMatmul on the argument list (``status``: a launch of it that failed). Raises on failure, except on a
        thread without a current context (:func:`mathpy._runtime.bind_primary_context`): bound, it launches again."""
        status = self._matmul(*args) if status is None else status
        if status and _runtime.bind_primary_context(self.device_id):
            status = self._matmul(*args)
        if status:
            lt.library.check("cublasLtMatmul", status)

    def release_workspace(self):
        """Give the workspace back now (after the work queued on the home stream, for a caller's memory manager);
        the next execute takes it again."""
        self._resources.drop_allocations(keep_scales=True)
        self._workspace_pointer = self._args[13] = 0
        self._released = bool(self.workspace_bytes)

    @contextlib.contextmanager
    def using(self, algorithm):
        """Executes in the block run ``algorithm`` (a candidate), then ``algorithms[0]`` again (no self-autotune)."""
        if algorithm not in self.algorithms:
            raise ValueError(f"the algorithm {algorithm!r} is not one of this plan's candidates "
                             f"{list(self.algorithms)!r}; plan(algorithms=[...]) makes it one")
        self._autotune_pending, self._pool = False, None
        current = self.algorithms[0]
        if algorithm is current or algorithm == current:
            yield
            return
        self._load(algorithm)
        self._ensure_workspace(algorithm.workspace_bytes)
        try:
            yield
        finally:
            self._load(current)

    def adopt(self, algorithms):
        """``algorithms`` as this plan's candidates: reconfigured ones once cublasLtMatmulAlgoCheck accepts them."""
        adopted = []
        for algorithm in algorithms:
            if algorithm in self.algorithms:
                adopted.append(self.algorithms[self.algorithms.index(algorithm)])
                continue
            try:
                result = lt.algo_check(self._handle, self._resources.desc, *self._layouts, algorithm.algo)
            except CUDALibraryError as e:
                raise ValueError(f"cuBLASLt rejects {algorithm!r} for this product ({e})") from None
            adopted.append(CublasLtAlgorithm(result, algorithm.rank))
        return adopted

    def _execute_elsewhere(self, args, stream):
        """An execution on a stream other than the plan's home: with a workspace of its own from the pool, in that
        stream's order (freed after the launch: later work on that stream reuses it in order; kept with the plan when
        a graph capture records the launch and the pool would hand it on)."""
        scratch = None
        if self.workspace_bytes:
            scratch = self._source.take(self.workspace_bytes, stream)
            args[13] = scratch.pointer
        if self._resources.scales is not None:
            self._resources.foreign_streams.add(stream)
        try:
            with _runtime.device_scope(self.device_id) if self._switch_device else contextlib.nullcontext():
                self._launch(args)
        finally:
            args[13] = self._workspace_pointer
            if scratch is not None and not keep_for_graph(self, self._allocator.package, self.device_id, stream,
                                                          scratch, pooled=self._source.manager is None):
                scratch.release()

    def _set_epilog_pointers(self, epilog_inputs, epilog_outputs):
        pointers = 0
        values, buffer = self._slot_values, self._slot_buffer
        for i, (source, name, attribute) in enumerate(self._slots):
            pointer = (epilog_inputs if source == 0 else epilog_outputs)[name]
            if pointer != values[i]:
                if name in SCALE_NAMES and pointer % 256:  # cuBLASLt: CUBLAS_STATUS_NOT_SUPPORTED at launch
                    raise ValueError(f"the {name} tensor is at an address not aligned to 256 bytes ({pointer:#x}); "
                                     f"cuBLASLt needs float8 scale pointers 256-byte aligned (a freshly allocated "
                                     f"one-element tensor is)")
                buffer.value = pointer
                self._set_desc_attribute(self._resources.desc, attribute, ctypes.addressof(buffer), 8)
                values[i] = pointer
            if name not in SCALE_NAMES:
                pointers |= pointer
        return pointers

    # -- autotuning ----------------------------------------------------------------------------------------------------

    def _self_autotune(self, stream):
        """First execute of a skinny product: time the candidate pool on this call's operands, keep the fastest.
        A failure here only logs: the call then runs the heuristic's choice."""
        self._autotune_pending = False
        args = self._args
        try:
            self._time_candidates(lambda: self._launch(args), stream, iterations=None, rounds=2, pool=self._pool)
        except Exception as e:
            logger.warning("cuBLASLt self-autotune failed (%s); using the heuristic's first choice", e)
            self._use(self.algorithms[0])
        self._pool = None

    def autotune(self, operands, stream=None, iterations=3):
        """Time every candidate on ``operands`` (the keyword arguments of :meth:`execute`) with CUDA events on
        ``stream``, keep the fastest (it becomes ``algorithms[0]``) and return ``[(algorithm, seconds), ...]``
        fastest first (seconds per call, the median of the rounds)."""
        operands = dict(operands)
        operands.pop("stream", None)
        stream = 0 if stream is None else stream
        self._autotune_pending = False
        self.execute(**operands, stream=stream)  # sets pointers, scalars, alignment
        args = self._args
        return self._time_candidates(lambda: self._launch(args), stream, iterations, rounds=3)

    def _time_candidates(self, run, stream, iterations, rounds, pool=None):
        candidates = list(pool or self.algorithms)
        self._ensure_workspace(max(alg.workspace_bytes for alg in candidates))
        timings = []
        if stream != self._home:  # the timed calls use the plan's own workspace: the home stream is done with it
            _runtime.synchronize(self._home)
        scope = _runtime.device_scope(self.device_id) if self._switch_device else contextlib.nullcontext()
        with scope, _runtime.EventTimer() as events:
            if iterations is None:  # enough calls per round for ~0.2 ms of GPU time (event resolution ~0.5 us)
                self._load(candidates[0])
                run()
                events.start(stream)
                run()
                once = events.elapsed(stream)
                iterations = int(min(max(2e-4 / max(once, 1e-7), 3), 50))
            for algorithm in candidates:
                self._load(algorithm)
                try:
                    run()  # warm-up
                except Exception as e:  # a candidate that fails to launch is dropped
                    logger.debug("cuBLASLt autotune: %r failed: %s", algorithm, e)
                    continue
                per_round = []
                for _ in range(rounds):
                    events.start(stream)
                    for _ in range(iterations):
                        run()
                    per_round.append(events.elapsed(stream) / iterations)
                timings.append((algorithm, statistics.median(per_round)))
        if not timings:
            raise RuntimeError("cuBLASLt autotune: no candidate algorithm ran")
        timings.sort(key=lambda pair: pair[1])
        best = timings[0][0]
        kept = [alg for alg in self.algorithms if alg != best]
        if pool is not None and best not in self.algorithms:
            kept = kept[:max(len(self.algorithms) - 1, 0)]
        list.__setitem__(self.algorithms, slice(None), [best] + kept)
        self._use(best)
        logger.debug("cuBLASLt autotune %sx%sx%s: %s", self.problem.m, self.problem.n, self.problem.k,
                     [(alg.rank, f"{seconds * 1e6:.1f} us") for alg, seconds in timings])
        return timings

    # -- lifetime ------------------------------------------------------------------------------------------------------

    def free(self):
        """Release the descriptors, preference and workspace (the per-device handle stays cached). Idempotent."""
        if not self._freed:
            self._freed = True
            self._finalizer()
            self.execute = self.autotune = self._freed_call

    def _freed_call(self, *args, **kwargs):
        raise InvalidPlanStateError("the cuBLASLt plan was freed; plan again")

    def __repr__(self):
        p = self.problem
        state = "freed" if self._freed else f"{len(self.algorithms)} candidates, workspace {self.workspace_bytes}"
        return f"<CublasLtEngine {p.m}x{p.n}x{p.k} batch {p.batch} {p.a.dtype.name}: {state}>"
