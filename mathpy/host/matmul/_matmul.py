"""Matrix products with numpy.matmul semantics on cuBLASLt (GPU) or NumPy (CPU): the stateful :class:`Matmul` and the
stateless :func:`matmul`, a thin layer over it with a plan cache.

The API resolves numpy.matmul's rules (batch broadcasting, 1-D operands) into a :class:`~._problem.MatmulProblem`,
gives the engine every operand's strides (transposed and strided operands are not copied) and copies only what one
batch stride and one unit matrix stride cannot express. Results come back in the caller's package and on its device.

>>> import numpy as np
>>> from mathpy.host.matmul import Matmul, matmul   # public as mathpy.matmul / mathpy.Matmul
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> matmul(a, a.T)                       # a transposed operand: no copy, the engine gets its strides
array([[ 5., 14.],
       [14., 50.]], dtype=float32)
>>> d, aux = matmul(a, a.T, epilog="relu_aux")
>>> aux["relu_aux"].shape                        # bitmask: ceil(2 / 8) rounded up to 16 bytes, per column
(16, 2)
>>> with Matmul(a, a.T) as mm:
...     algorithms = mm.plan(epilog="bias", epilog_inputs={"bias": np.array([1, -1], np.float32)})
...     mm.execute()                            # one bias value per row of the result
array([[ 6., 15.],
       [13., 49.]], dtype=float32)
"""

import contextlib
import dataclasses
import math
import threading
import weakref

import numpy as np

from ..._cuda import compute_capability, require_device
from ..._errors import InvalidPlanStateError
from ..._execution import ExecutionCPU, ExecutionCUDA, resolve_execution
from ..._execution import _default as _default_execution
from ..._log import logger
from ..._operands import as_package, empty, gpu_array_package, to_device, to_host, wrap_operand, wrap_operands
from ..._options import check_or_create_options
from ..._plan_cache import PlanCache
from ..._streams import stream_pointer
from ._cpu import CPUEngine
from ._epilog import EPILOG_INPUT_NAMES, MatmulEpilog, as_epilog, epilog_spec, gelu_aux_rows, relu_aux_rows
from ._options import BF16, F16, FLOAT8_DTYPES, MatmulOptions, MatmulPlanPreferences, resolve_types
from ._problem import MatmulProblem, MatrixLayout, epilog_output_layouts, epilog_output_shape

__all__ = ["Matmul", "matmul", "matmul_plan_cache"]

#: The plan cache behind :func:`matmul` (resize or clear it with its methods).
matmul_plan_cache = PlanCache("matmul", max_plans=64, max_bytes=1 << 30)


# ---------------------------------------------------------------------------------------------------------------------
# Layouts


def _matrix_strides(rows, cols, rs, cs):
    """Normalised (row_stride, col_stride) with one of them 1 and a valid leading dimension, or None (copy needed)."""
    rs_free, cs_free = rows <= 1, cols <= 1
    if rs_free and cs_free:
        return 1, 1
    if rs_free:  # one row: column-major with ld = cs (>= 1 row) whatever cs is, so C and D orders agree
        return (1, cs) if cs >= 1 else None
    if cs_free:
        if rs == 1:
            return 1, max(rows, 1)
        return (rs, 1) if rs >= 1 else None
    if rs == 1 and cs >= rows:
        return 1, cs
    if cs == 1 and rs >= cols:
        return rs, 1
    return None


def _batch_stride(batch_shape, op_batch_shape, op_batch_strides, matrix_size):
    """One stride for the flattened batch (0 = broadcast), or None when the batch needs a copy."""
    pad = len(batch_shape) - len(op_batch_shape)
    shape = (1,) * pad + tuple(op_batch_shape)
    strides = (0,) * pad + tuple(op_batch_strides)
    dims = [(extent, 0 if shape[i] == 1 else strides[i]) for i, extent in enumerate(batch_shape) if extent != 1]
    if not dims:
        return matrix_size
    if all(stride == 0 for _, stride in dims):
        return 0
    for (extent, stride), (inner_extent, inner_stride) in zip(dims, dims[1:]):
        if stride != inner_stride * inner_extent:
            return None
    return dims[-1][1] if dims[-1][1] > 0 else None


def _c_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


@dataclasses.dataclass
class _Staged:
    """One input as the engine will see it: its layout and how it is brought there (``mode``: None = used as it is,
    "contiguous" = a C-order copy, "broadcast" = a C-order copy broadcast to the full batch, "colmajor" = a copy with
    column-major matrices: the aux formats, C in D's order, A or B in the order cuBLASLt has kernels for)."""

    name: str
    op: object  # the caller's Operand
    layout: MatrixLayout
    mode: str | None
    full_shape: tuple | None  # "broadcast" / "colmajor": the shape to broadcast to before copying (None: as is)
    move: bool  # crosses between host and device

    def signature(self):
        return (self.op.package, self.op.device_id, self.op.shape, self.op.dtype, self.layout, self.mode)


def _stage_matrix(name, op, rows, cols, promote, batch_shape, force_copy):
    """Layout of operand ``op`` (A, B or C) as a batched rows x cols matrix. ``promote``: None, "row" (1-D operand is
    one row: A) or "col" (1-D operand is one column: B)."""

    def layout(shape, strides):
        if promote == "row" and len(shape) == 1:
            rs, cs, bshape, bstrides = 0, strides[0], (), ()
        elif promote == "col" and len(shape) == 1:
            rs, cs, bshape, bstrides = strides[0], 0, (), ()
        else:
            rs, cs, bshape, bstrides = strides[-2], strides[-1], shape[:-2], strides[:-2]
            rs = 0 if shape[-2] != rows else rs  # a broadcast row or column of c
            cs = 0 if shape[-1] != cols else cs
        matrix = _matrix_strides(rows, cols, rs, cs)
        batch_stride = _batch_stride(batch_shape, bshape, bstrides, rows * cols)
        if matrix is None or batch_stride is None:
            return None
        batch = math.prod(batch_shape)
        return MatrixLayout(rows, cols, matrix[0], matrix[1], batch, batch_stride, op.dtype)

    if not force_copy:
        found = layout(op.shape, op.strides)
        if found is not None:
            return _Staged(name, op, found, None, None, False)
    found = layout(op.shape, _c_strides(op.shape))
    if found is not None:
        return _Staged(name, op, found, "contiguous", None, force_copy)
    full = (*batch_shape, rows, cols)
    return _Staged(name, op, layout(full, _c_strides(full)), "broadcast", full, force_copy)


def _module(package):
    """The array module of ``package`` ("numpy" or "cupy"; torch tensors are handled by their methods)."""
    return np if package == "numpy" else __import__(package)


def _copy(tensor, package, shape=None):
    """``tensor`` (broadcast to ``shape`` first when given) as a C-contiguous array of its package: a copy unless it
    already is one."""
    if shape:
        tensor = _broadcast(tensor, package, shape)
    return tensor.contiguous() if package == "torch" else _module(package).ascontiguousarray(tensor)


def _broadcast(tensor, package, shape):
    return tensor.expand(*shape) if package == "torch" else _module(package).broadcast_to(tensor, shape)


def _col_major_copy(tensor, package):
    """A copy whose last two axes are column-major (batches contiguous)."""
    if package == "torch":
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    module = _module(package)
    return module.ascontiguousarray(module.swapaxes(tensor, -1, -2)).swapaxes(-1, -2)


def _swap_last(tensor, package):
    return tensor.transpose(-1, -2) if package == "torch" else tensor.swapaxes(-1, -2)


# ---------------------------------------------------------------------------------------------------------------------
# Validation of epilog inputs


def _check_scalar(value, name, scale_type):
    if isinstance(value, bool) or not isinstance(value, (int, float, complex, np.number)):
        raise TypeError(f"{name} must be a number, not {value!r}")
    if np.iscomplexobj(value) and np.imag(value) != 0 and scale_type.kind != "c":
        raise TypeError(f"{name} = {value!r} is complex but the operands are real ({scale_type.name} scale type)")
    return scale_type.type(value)


def _stage_epilog_input(name, op, problem_shape, spec, d_dtype, force_copy):
    """Validate one epilog input and give its layout (formats: ``_epilog``)."""
    m, n, batch_shape = problem_shape
    batch = math.prod(batch_shape)
    shape, strides = tuple(op.shape), tuple(op.strides)
    if name == "bias":
        allowed = (BF16, F16) if d_dtype in FLOAT8_DTYPES else (d_dtype,)
        if op.dtype not in allowed:
            raise TypeError(f"epilog input 'bias' has dtype {op.dtype.name}; for a {d_dtype.name} result it must be "
                            f"{' or '.join(d.name for d in allowed)}")
        if shape in ((m,), (m, 1)):
            bshape, bstrides, stride = (), (), strides[0]
        elif len(shape) >= 3 and shape[-2:] == (m, 1) and shape[:-2] == tuple(batch_shape):
            bshape, bstrides, stride = shape[:-2], strides[:-2], strides[-2]
        else:
            allowed_shapes = [(m,), (m, 1)] + ([(*batch_shape, m, 1)] if batch_shape else [])
            raise ValueError(f"epilog input 'bias' has shape {shape}; it must hold one value per row of the result "
                             f"(M = {m}): allowed shapes are {allowed_shapes}")
        batch_stride = _batch_stride(batch_shape, bshape, bstrides, m)
        mode = None
        if force_copy or (stride != 1 and m > 1) or batch_stride is None:
            mode, batch_stride = "contiguous", (m if bshape else 0)
        if batch == 1:
            batch_stride = 0 if not bshape else m
        return _Staged(name, op, MatrixLayout(m, 1, 1, m, batch, batch_stride, op.dtype), mode, None, force_copy)
    # relu_aux / gelu_aux
    if name == "relu_aux":
        rows, dtype, unit = relu_aux_rows(m), np.dtype(np.uint8), 8
    else:
        rows, dtype, unit = gelu_aux_rows(m), d_dtype, 1
    forward = "RELU_AUX" if name == "relu_aux" else "GELU_AUX"
    if op.dtype != dtype:
        raise TypeError(f"epilog input {name!r} has dtype {op.dtype.name}; {spec.name} needs {dtype.name} "
                        f"(the dtype of the {name!r} output of {forward} / {forward}_BIAS)")
    if shape[-2:] != (rows, n) or (len(shape) > 2 and shape[:-2] != tuple(batch_shape)):
        allowed_shapes = [(rows, n)] + ([(*batch_shape, rows, n)] if batch_shape else [])
        raise ValueError(f"epilog input {name!r} has shape {shape}; for a {m} x {n} result it must be one of "
                         f"{allowed_shapes} (the format of the {name!r} output of {forward} / {forward}_BIAS)")
    bshape, bstrides = shape[:-2], strides[:-2]
    batch_stride = _batch_stride(batch_shape, bshape, bstrides, rows * n)
    canonical = strides[-2] == 1 and (strides[-1] == rows or n == 1) and batch_stride is not None
    mode = None
    if force_copy or not canonical:
        mode, batch_stride = "colmajor", (rows * n if bshape else 0)
    if batch == 1:
        batch_stride = 0
    layout = MatrixLayout(m, n, 1, rows * unit, batch, batch_stride * unit, dtype)
    return _Staged(name, op, layout, mode, None, force_copy)


# ---------------------------------------------------------------------------------------------------------------------
# Stateful API


class _SharedEngine:
    """A cached engine with a lock: plans in the cache may be borrowed by several threads at once."""

    def __init__(self, engine):
        self.engine, self.lock = engine, threading.Lock()

    def free(self):
        self.engine.free()


_FREED, _CREATED, _PLANNED = "freed", "created", "planned"
#: Epilogs that act elementwise with no per-row operand: the result may be stored row- or column-major.
_ANY_ORDER_EPILOGS = (MatmulEpilog.DEFAULT, MatmulEpilog.RELU, MatmulEpilog.GELU)


class Matmul:
    """A planned matrix product ``D = epilog(alpha * a @ b + beta * c)`` with numpy.matmul semantics, executed many
    times.

    Parameters: ``a``, ``b``, ``c`` (optional) from one package and device (NumPy, CuPy, torch, ``__dlpack__``...);
    ``alpha`` (default 1), ``beta`` (None: 1 when ``c`` is given, else 0); ``options`` (:class:`MatmulOptions` or dict);
    ``execution`` ("cpu", "cuda", ExecutionCPU/ExecutionCUDA, dict; None: where the operands live); ``stream``
    (CUDA stream for all GPU work; None: the operands' package's current stream).

    Life cycle: ``plan()`` (returns the candidate algorithms), optionally ``autotune()``, ``execute()`` any number of
    times (with ``reset_operands()`` between), ``free()`` (or use it as a context manager). A call in the wrong state
    raises :class:`~mathpy.InvalidPlanStateError`. Every ``execute()`` reads the current contents of the operands.
    """

    def __init__(self, a, b, c=None, *, alpha=1, beta=None, options=None, execution=None, stream=None,
                 _cache=None):
        self._state = _FREED  # until construction succeeds
        self._engine = self._exit = self._fast = self._fast_run = None
        self._gpu_bgrad = None  # "a" / "b" while a GPU plan is for BGRADA / BGRADB (_stage_ab copies A / B for it)
        self._cache_key = None  # the plan cache's key, once planned with a cache
        options = check_or_create_options(MatmulOptions, options, "options")
        ops = wrap_operands({"a": a, "b": b, "c": c})
        a_op, b_op, c_op = ops["a"], ops["b"], ops["c"]
        if a_op.ndim == 0 or b_op.ndim == 0:
            raise ValueError(f"matmul operands must have at least one dimension; a has shape {a_op.shape}, b has shape "
                             f"{b_op.shape}")
        a_shape = (1, *a_op.shape) if a_op.ndim == 1 else a_op.shape
        b_shape = (*b_op.shape, 1) if b_op.ndim == 1 else b_op.shape
        m, k = a_shape[-2:]
        k_b, n = b_shape[-2:]
        if k != k_b:
            raise ValueError(f"matmul: a of shape {a_op.shape} and b of shape {b_op.shape} do not match: a has {k} "
                             f"columns (K) but b has {k_b} rows")
        try:
            batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
        except ValueError:
            raise ValueError(f"matmul: the batch dimensions of a {a_op.shape[:-2]} and b {b_op.shape[:-2]} do not "
                             f"broadcast") from None
        result_shape = (*batch_shape, *([m] if a_op.ndim > 1 else []), *([n] if b_op.ndim > 1 else []))
        d_dtype, compute_type, scale_type = resolve_types(a_op.dtype, b_op.dtype, c_op and c_op.dtype, options)
        if beta is None:
            beta = 0 if c_op is None else 1
        alpha = _check_scalar(alpha, "alpha", scale_type)
        if c_op is None and beta != 0:
            raise ValueError(f"beta = {beta!r} needs an operand c; pass c or leave beta at 0")
        beta = _check_scalar(beta, "beta", scale_type)
        if c_op is not None:
            if tuple(c_op.shape) != result_shape:
                try:
                    ok = np.broadcast_shapes(c_op.shape, result_shape) == result_shape
                except ValueError:
                    ok = False
                if not ok:
                    raise ValueError(f"c has shape {c_op.shape}, which does not broadcast to the result's shape "
                                     f"{result_shape}")
        execution = resolve_execution(execution, a_op.device_id)
        on_gpu = isinstance(execution, ExecutionCUDA)
        if on_gpu and (a_op.dtype in FLOAT8_DTYPES or b_op.dtype in FLOAT8_DTYPES):
            require_device(execution.device_id)
            cc = compute_capability(execution.device_id)
            if tuple(cc) < (8, 9):
                raise ValueError(f"float8 matmul needs a GPU of compute capability >= 8.9; device "
                                 f"{execution.device_id} has {cc[0]}.{cc[1]} (use execution='cpu')")
        if on_gpu and m * n * k * math.prod(batch_shape) == 0:
            execution = ExecutionCPU()  # empty problems: nothing for cuBLASLt to do
            on_gpu = False
        moves = (a_op.device_id is None) == on_gpu or (on_gpu and a_op.device_id != execution.device_id)

        self._m, self._n, self._k, self._batch_shape, self._moves = m, n, k, batch_shape, moves
        self._float8_gpu = on_gpu and a_op.dtype in FLOAT8_DTYPES
        staged = {"a": self._stage_ab("a", a_op), "b": self._stage_ab("b", b_op)}
        if c_op is not None:
            c_view = _expand_c(c_op, result_shape, batch_shape, a_op.ndim == 1, b_op.ndim == 1)
            staged["c"] = _stage_matrix("c", c_view, m, n, None, batch_shape, moves)
        self._vector_a, self._vector_b = a_op.ndim == 1, b_op.ndim == 1
        self._result_shape, self._d_dtype = result_shape, d_dtype
        self._compute_type, self._scale_type = compute_type, scale_type
        self._alpha, self._beta, self._options = alpha, beta, options
        self._execution, self._on_gpu = execution, on_gpu
        self._like = a_op  # results go to a's package and device
        self._staged = staged
        self._c_staged = {"c": staged["c"]} if "c" in staged else {}  # as given, before plan() fixes C's order
        self._c_col_major = False
        self._c_shape = None if c_op is None else tuple(c_op.shape)
        self._cache = _cache
        self._user_stream = stream
        if on_gpu:
            self._device_id = execution.device_id
            self._package = a_op.package if (a_op.package in ("cupy", "torch") and not moves) else gpu_array_package()
            require_device(self._device_id)
            self._stream = stream_pointer(stream, self._package, self._device_id)
        else:
            self._device_id = None
            self._package = a_op.package if (not moves and a_op.package in ("numpy", "torch")) else "numpy"
            self._stream = None
        self._state = _CREATED
        logger.debug("Matmul %s x %s -> %s (batch %s), %s, %s on %s", (m, k), (k, n), result_shape, batch_shape,
                     d_dtype, compute_type, execution)

    # -- planning -----------------------------------------------------------------------------------------------------

    def plan(self, epilog=None, epilog_inputs=None, preferences=None, algorithms=None):
        """Choose the epilog and build the plan; returns the candidate algorithms (best first by the library's
        heuristic). ``algorithms`` restricts the candidates to the given ones (from an earlier ``plan()``)."""
        self._check_not_freed("plan")
        epilog = as_epilog(epilog)
        spec = epilog_spec(epilog)
        preferences = check_or_create_options(MatmulPlanPreferences, preferences, "preferences")
        if epilog is not None and self._d_dtype.kind == "c":
            raise ValueError(f"epilog {epilog.name} does not apply to complex operands ({self._d_dtype.name}); "
                             f"epilogs need real dtypes")
        if "gelu_aux" in (*spec.inputs, *spec.outputs) and self._d_dtype in FLOAT8_DTYPES:  # GELU_AUX*, DGELU*
            raise ValueError(f"epilog {epilog.name} is not supported for float8 results; use result_type "
                             f"bfloat16/float16/float32 in MatmulOptions")
        if spec.activation in ("drelu", "dgelu") and self._k == 1:
            raise ValueError(f"epilog {epilog.name} needs K > 1 (cuBLASLt does not support K = 1); K is 1")
        d_scale = self._options.d_scale
        if epilog is not None and d_scale not in (None, 1) and self._d_dtype not in FLOAT8_DTYPES:
            # cuBLASLt applies d_scale to float8 results only; otherwise it is folded into alpha, which an epilog
            # (a non-linear one, or a bias added after the product) would not commute with
            raise ValueError(f"d_scale={d_scale} applies to float8 results; with a {self._d_dtype.name} result and "
                             f"epilog {epilog.name} it cannot be folded into alpha: scale alpha instead, or use a "
                             f"float8 result_type")
        given = {} if epilog_inputs is None else epilog_inputs
        if not isinstance(given, dict):
            raise TypeError(f"epilog_inputs must be a dict, not {type(given).__name__}")
        missing = [name for name in spec.inputs if given.get(name) is None]
        unknown = sorted(set(given) - set(spec.inputs))
        if missing:
            raise ValueError(f"epilog {spec.name} needs epilog_inputs {list(spec.inputs)}; missing {missing}")
        if unknown:
            allowed = list(spec.inputs) or "none"
            raise ValueError(f"epilog_inputs {unknown} do not apply to epilog "
                             f"{'None' if epilog is None else spec.name}; it takes {allowed} (known inputs: "
                             f"{list(EPILOG_INPUT_NAMES)})")
        inputs = self._stage_epilog_inputs(given, spec)
        bgrad = spec.bgrad if self._on_gpu and spec.bgrad in ("a", "b") else None
        if bgrad != self._gpu_bgrad:  # BGRADA/BGRADB need their own A/B layouts (_stage_ab)
            self._gpu_bgrad = bgrad
            for name in ("a", "b"):
                self._staged[name] = self._stage_ab(name, self._staged[name].op)

        d_layout = self._d_layout(spec)
        self._c_col_major = "c" in self._c_staged and d_layout.is_col_major and \
            not self._c_staged["c"].layout.is_col_major
        if "c" in self._c_staged:
            self._staged["c"] = self._c_for_plan(self._c_staged["c"])
        outputs = epilog_output_layouts(epilog, self._m, self._n, d_layout.batch, self._d_dtype)
        problem = MatmulProblem(
            m=self._m, n=self._n, k=self._k, batch=d_layout.batch, batch_shape=self._batch_shape,
            a=self._staged["a"].layout, b=self._staged["b"].layout,
            c=self._staged["c"].layout if "c" in self._staged else None, d=d_layout,
            compute_type=self._compute_type, scale_type=self._scale_type, epilog=epilog,
            epilog_inputs=tuple((name, s.layout) for name, s in inputs.items()), epilog_outputs=outputs,
            **self._float8_scales())

        # The old plan goes first (its workspace counts against the cache bound); from here a failure must not
        # leave this object looking planned with a freed engine, so it falls back to the unplanned state.
        self._release_engine()
        self._state, self._fast, self._fast_run = _CREATED, None, None
        try:
            engine_cls = CPUEngine if not self._on_gpu else _cublaslt_engine()
            execution, options = self._execution, self._options

            extra = {"package": self._package, "stream": self._stream} if self._on_gpu else {}

            def create():
                engine = engine_cls(problem, execution=execution, options=options, preferences=preferences, **extra)
                return _SharedEngine(engine), engine.workspace_bytes

            if self._cache is not None:
                stack = contextlib.ExitStack()
                # the stream too: a plan's workspace must not be shared by products running at once on two streams
                key = (problem.key, execution, options, preferences, self._stream)
                shared = stack.enter_context(self._cache.borrow(key, create))
                self._engine, self._lock, self._exit = shared.engine, shared.lock, stack.close
                self._cache_key, self._create = key, create
            else:
                self._engine, self._lock = create()[0].engine, None
                self._exit = weakref.finalize(self, self._engine.free)
            if algorithms is not None:
                chosen = [alg for alg in algorithms if alg in self._engine.algorithms] if self._cache is None else []
                if not chosen:
                    raise ValueError(f"plan(algorithms=...): none of the given algorithms {list(algorithms)!r} is "
                                     f"a candidate for this problem; the candidates are "
                                     f"{list(self._engine.algorithms)!r}")
                self._engine.algorithms[:] = chosen
        except BaseException:
            self._release_engine()
            raise
        self._problem, self._spec, self._inputs = problem, spec, inputs
        self._state = _PLANNED
        self._prepare()
        logger.debug("Matmul planned: epilog %s, %d candidate algorithms, workspace %d bytes", spec.name,
                     len(self._engine.algorithms), self._engine.workspace_bytes)
        return list(self._engine.algorithms)

    @property
    def algorithms(self):
        """The candidate algorithms of the current plan, the one in use first."""
        self._check_planned("algorithms")
        return list(self._engine.algorithms)

    def autotune(self, iterations=3):
        """Time every candidate algorithm on the current operands and keep the fastest; returns
        ``[(algorithm, seconds), ...]`` fastest first."""
        self._check_planned("autotune")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"iterations must be a positive int, not {iterations!r}")
        with _stream_scope(self._package if self._on_gpu else None, self._stream, self._device_id):
            args, scratch = self._engine_args()  # scratch (result, outputs, copies) lives until the runs are enqueued
        with self._locked():
            timings = self._engine.autotune(args, self._stream, iterations)
        del scratch
        logger.debug("Matmul autotune: %s", timings)
        return timings

    # -- execution ----------------------------------------------------------------------------------------------------

    def execute(self, stream=None):
        """Compute the product on the current operands. Returns the result, or ``(result, aux)`` when the epilog has
        outputs (``aux``: dict of tensors named as in ``_epilog``), in the operands' package and on their device."""
        if self._state != _PLANNED:
            self._check_planned("execute")
        if stream is None and self._fast_run is not None:
            return self._fast_run()
        if stream is None:
            stream_ptr = self._stream
        else:
            stream_ptr = stream_pointer(stream, self._package, self._device_id) if self._on_gpu else None
        fast = self._fast
        if fast is not None and stream is None:  # GPU, nothing to copy: allocations and the library call only
            make_d, makers, pointer, fixed = fast
            d = make_d()
            outputs, out_args = {}, {}
            for name, make in makers:
                outputs[name] = tensor = make()
                out_args[name] = pointer(tensor)
            lock = self._lock
            if lock is None:
                self._engine.execute(fixed["a"], fixed["b"], fixed.get("c"), pointer(d), fixed["inputs"], out_args,
                                     self._alpha, self._beta, stream_ptr)
            else:
                with lock:
                    self._engine.execute(fixed["a"], fixed["b"], fixed.get("c"), pointer(d), fixed["inputs"],
                                         out_args, self._alpha, self._beta, stream_ptr)
            return self._finish(d, outputs, stream_ptr)
        with _stream_scope(self._package if self._on_gpu else None, stream_ptr, self._device_id):
            args, (d, outputs, keep) = self._engine_args(stream_ptr)
        with self._locked():
            self._engine.execute(**args, stream=stream_ptr)
        del keep
        return self._finish(d, outputs, stream_ptr)

    def reset_operands(self, a=None, b=None, c=None, epilog_inputs=None):
        """Give new operands of the same shapes, dtypes, layouts, package and device (else a ValueError and nothing
        changes). ``epilog_inputs`` (a dict) replaces the named epilog inputs of the plan."""
        self._check_not_freed("reset_operands")
        new = {}
        for name, value in (("a", a), ("b", b), ("c", c)):
            if value is None:
                continue
            if name not in self._staged:
                raise ValueError("reset_operands(c=...): the Matmul was built without c")
            op = wrap_operand(value, name)
            if name == "c":
                if tuple(op.shape) != self._c_shape:
                    raise ValueError(f"reset_operands: c has shape {op.shape}, the plan was built for {self._c_shape}")
                op = _expand_c(op, self._result_shape, self._batch_shape, self._vector_a, self._vector_b)
                fresh = _stage_matrix(name, op, self._m, self._n, None, self._batch_shape, self._moves)
                self._check_same(name, self._c_staged["c"], fresh)
                new_c_raw, fresh = fresh, self._c_for_plan(fresh)
            else:
                fresh = self._stage_ab(name, op)
            self._check_same(name, self._staged[name], fresh)
            new[name] = fresh
        if epilog_inputs is not None:
            self._check_planned("reset_operands(epilog_inputs=...)")
            if not isinstance(epilog_inputs, dict):
                raise TypeError(f"epilog_inputs must be a dict, not {type(epilog_inputs).__name__}")
            unknown = sorted(set(epilog_inputs) - set(self._inputs))
            if unknown:
                raise ValueError(f"reset_operands: epilog inputs {unknown} are not used by the plan's epilog "
                                 f"{self._spec.name}; it takes {list(self._inputs)}")
            for name, value in epilog_inputs.items():
                fresh = self._stage_epilog_inputs({name: value}, self._spec, only=name)[name]
                self._check_same(name, self._inputs[name], fresh)
                new[name] = fresh
        for name, fresh in new.items():
            if name in self._staged:
                self._staged[name] = fresh
                if name == "c":
                    self._c_staged["c"] = new_c_raw
            else:
                self._inputs[name] = fresh
        if self._state == _PLANNED:
            self._prepare()

    def free(self):
        """Release the plan (library handles, descriptors, workspace) at once. Idempotent."""
        self._release_engine()
        self._state = _FREED
        self._staged = self._inputs = self._fixed = self._fast = self._fast_run = None

    def __enter__(self):
        self._check_not_freed("__enter__")
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        return (f"<Matmul {self._state} m={getattr(self, '_m', '?')} n={getattr(self, '_n', '?')} "
                f"k={getattr(self, '_k', '?')} on {getattr(self, '_execution', '?')}>")

    # -- internals ----------------------------------------------------------------------------------------------------

    def _check_not_freed(self, what):
        if self._state == _FREED:
            raise InvalidPlanStateError(f"Matmul.{what}: the Matmul was freed; create a new one")

    def _check_planned(self, what):
        self._check_not_freed(what)
        if self._state != _PLANNED:
            raise InvalidPlanStateError(f"Matmul.{what}: call plan() first")

    def _locked(self):
        return self._lock if self._lock is not None else contextlib.nullcontext()

    def _release_engine(self):
        exit_, self._exit, self._engine = self._exit, None, None
        if exit_ is not None:
            exit_()

    def _float8_scales(self):
        if self._staged["a"].op.dtype not in FLOAT8_DTYPES:
            return {}
        o = self._options
        return {"a_scale": 1.0 if o.a_scale is None else float(o.a_scale),
                "b_scale": 1.0 if o.b_scale is None else float(o.b_scale),
                "d_scale": 1.0 if o.d_scale is None else float(o.d_scale)}

    def _check_same(self, name, old, fresh):
        if old.signature() != fresh.signature():
            o, f = old.op, fresh.op
            raise ValueError(f"reset_operands: {name} must match the operand the plan was built for (package "
                             f"{o.package}, device {o.device_id}, shape {o.shape}, dtype {o.dtype.name}, strides "
                             f"{o.strides}); got package {f.package}, device {f.device_id}, shape {f.shape}, dtype "
                             f"{f.dtype.name}, strides {f.strides}")

    def _stage_epilog_inputs(self, given, spec, only=None):
        ops = {}
        for name in ([only] if only else spec.inputs):
            op = wrap_operand(given[name], name)
            if op.package != self._like.package or op.device_id != self._like.device_id:
                raise ValueError(f"epilog input {name!r} must be of the operands' package and device "
                                 f"({self._like.package}, {self._like.device_id}); it is {op.package}, "
                                 f"{op.device_id}")
            ops[name] = _stage_epilog_input(name, op, (self._m, self._n, self._batch_shape), spec, self._d_dtype,
                                            self._moves)
        return ops

    def _stage_ab(self, name, op):
        """A or B as the engine sees it. On the GPU, layouts cuBLASLt has no kernels for are copied into ones it has:
        float8 takes only row-major A and column-major B (its "TN" form); BGRADA needs a column-major A (op(A) = N)
        and BGRADB a row-major B (op(B) = T) (measured with cuBLASLt 13.1 on an H200, every real dtype: the other
        layouts get no algorithm)."""
        m, n, k, batch_shape, moves = self._m, self._n, self._k, self._batch_shape, self._moves
        gpu_epilog = self._gpu_bgrad
        if name == "a":
            staged = _stage_matrix("a", op, m, k, "row", batch_shape, moves)
            if self._float8_gpu and m > 1 and not staged.layout.is_row_major:
                staged = dataclasses.replace(_stage_matrix("a", op, m, k, "row", batch_shape, True), move=moves)
            elif gpu_epilog == "a" and not staged.layout.is_col_major:
                staged = self._col_major_staged("a", op, m, k)
            return staged
        staged = _stage_matrix("b", op, k, n, "col", batch_shape, moves)
        if self._float8_gpu and not staged.layout.is_col_major:
            if op.ndim == 1:
                return dataclasses.replace(_stage_matrix("b", op, k, n, "col", batch_shape, True), move=moves)
            staged = self._col_major_staged("b", op, k, n)
        elif gpu_epilog == "b" and n > 1 and not staged.layout.is_row_major:
            staged = dataclasses.replace(_stage_matrix("b", op, k, n, "col", batch_shape, True), move=moves)
        return staged

    def _col_major_staged(self, name, op, rows, cols):
        """``op`` (2-D or more) copied into column-major matrices with contiguous (or one broadcast) batches."""
        batch_shape = self._batch_shape
        batch = math.prod(batch_shape)
        full = None if op.ndim == 2 else (*batch_shape, rows, cols)
        layout = MatrixLayout(rows, cols, 1, max(rows, 1), batch, 0 if full is None else rows * cols, op.dtype)
        return _Staged(name, op, layout, "colmajor", full, self._moves)

    def _c_for_plan(self, staged):
        """C in D's order: cuBLASLt reads C as D is stored (a row-major C with a column-major D is copied)."""
        if not self._c_col_major:
            return staged
        m, n, batch_shape = self._m, self._n, self._batch_shape
        batch = math.prod(batch_shape)
        layout = MatrixLayout(m, n, 1, max(m, 1), batch, m * n, staged.layout.dtype)
        return dataclasses.replace(staged, layout=layout, mode="colmajor", full_shape=(*batch_shape, m, n))

    def _d_layout(self, spec):
        m, n, batch = self._m, self._n, math.prod(self._batch_shape)
        c = self._c_staged.get("c")
        row_major = False
        if spec.epilog in _ANY_ORDER_EPILOGS:  # no per-row bias semantics: D may take the operands' order
            if c is not None:
                row_major = c.layout.is_row_major
            elif self._d_dtype.itemsize >= 4 and self._staged["a"].op.dtype.itemsize >= 4:
                row_major = not (self._staged["a"].layout.is_col_major and self._staged["b"].layout.is_col_major)
        self._d_row_major = row_major
        if row_major:
            return MatrixLayout(m, n, max(n, 1), 1, batch, m * n, self._d_dtype)
        return MatrixLayout(m, n, 1, max(m, 1), batch, m * n, self._d_dtype)

    def _prepare(self):
        """Precompute what execute() can reuse: inputs that need no copy and the output allocations' shapes."""
        self._fixed = {}
        for name, s in (*self._staged.items(), *self._inputs.items()):
            if s.mode is None and not s.move:
                self._fixed[name] = self._engine_operand(s, s.op)
        batch_shape = self._batch_shape
        self._d_alloc = (*batch_shape, self._m, self._n) if self._d_row_major else (*batch_shape, self._n, self._m)
        self._out_allocs = []
        for name, layout in self._problem.epilog_outputs:
            shape = epilog_output_shape(name, layout, batch_shape)
            swap = len(shape) >= 2 and name in ("relu_aux", "gelu_aux")
            alloc = (*shape[:-2], shape[-1], shape[-2]) if swap else shape
            self._out_allocs.append((name, layout, alloc, swap))
        self._fast = self._fast_run = None
        if self._on_gpu and len(self._fixed) == len(self._staged) + len(self._inputs):
            fixed = {name: self._fixed[name] for name in self._staged}
            fixed["inputs"] = {name: self._fixed[name] for name in self._inputs}
            alloc = _allocator(self._package, self._device_id, self._stream, self._user_stream is not None)
            make_d = alloc(self._d_alloc, self._d_dtype, not self._d_row_major)
            # cuBLASLt leaves a bitmask's padding bits as they were: allocate it zeroed (as the CPU engine writes it)
            makers = tuple((name, alloc(shape, layout.dtype, swap, name == "relu_aux"))
                           for name, layout, shape, swap in self._out_allocs)
            self._fast = (make_d, makers, _pointer_of(self._package), fixed)
            if not makers and self._lock is None and not (self._vector_a or self._vector_b) and \
                    self._options.blocking is not True:
                self._fast_run = _plain_run(self._engine.execute, make_d, _pointer_of(self._package), fixed,
                                            self._alpha, self._beta, self._stream)

    def _stage(self, s, stream):
        """Bring one input where the engine needs it (copies and moves); returns the operand to use."""
        op = s.op
        tensor, package = op.tensor, op.package
        if s.move and not op.on_host:  # device -> host
            tensor, package = to_host(op, stream).tensor, "numpy"
        if s.mode == "colmajor":
            if s.full_shape is not None:
                tensor = _broadcast(tensor, package, s.full_shape)
            tensor = _col_major_copy(tensor, package)
        elif s.mode is not None:
            tensor = _copy(tensor, package, s.full_shape)
        staged = wrap_operand(tensor)
        if s.move and staged.on_host and self._on_gpu:  # host -> device
            staged = to_device(staged, self._device_id, stream)
            if s.mode == "colmajor":
                staged = wrap_operand(_col_major_copy(staged.tensor, staged.package))
        return staged

    def _engine_operand(self, s, op):
        """What the engine takes for one input: a device pointer, or a NumPy view for the CPU engine."""
        if self._on_gpu:
            return op.data_ptr
        return _engine_view(s.name, s.layout, op.numpy())

    def _engine_args(self, stream=None):
        stream = self._stream if stream is None else stream
        values = dict(self._fixed)
        keep = []  # copies stay alive until the library call is enqueued (their memory is stream-ordered after)
        for name, s in (*self._staged.items(), *self._inputs.items()):
            if name not in values:
                staged = self._stage(s, stream)
                keep.append(staged)
                values[name] = self._engine_operand(s, staged)
        package, device_id = self._package, self._device_id
        d = empty(package, self._d_alloc, self._d_dtype, device_id, stream)
        if not self._d_row_major:
            d = _swap_last(d, package)
        outputs, out_args = {}, {}
        for name, layout, alloc, swap in self._out_allocs:
            tensor = empty(package, alloc, layout.dtype, device_id, stream)
            if name == "relu_aux" and self._on_gpu:  # cuBLASLt leaves the padding bits as they were
                _zero_fill(tensor, package)
            outputs[name] = _swap_last(tensor, package) if swap else tensor
            out_args[name] = self._output_arg(name, layout, outputs[name])
        p = self._problem
        args = {"a": values["a"], "b": values["b"], "c": values.get("c"), "d": self._output_arg("d", p.d, d),
                "epilog_inputs": {name: values[name] for name in self._inputs}, "epilog_outputs": out_args,
                "alpha": self._alpha, "beta": self._beta}
        return args, (d, outputs, keep)

    def _output_arg(self, name, layout, tensor):
        op = wrap_operand(tensor)
        if self._on_gpu:
            return op.data_ptr
        return _engine_view(name, layout, op.numpy())

    def _finish(self, d, outputs, stream):
        like = self._like
        d = _drop_vector_axes(d, self._vector_a, self._vector_b, self._package == "numpy" and like.package == "numpy")
        if self._moves:
            d = _to_caller(d, like, stream)
            outputs = {name: _to_caller(t, like, stream) for name, t in outputs.items()}
        elif self._on_gpu and self._options.blocking is True:
            _synchronize(self._package, stream, self._device_id)
        return (d, outputs) if self._problem.epilog_outputs else d


def _drop_vector_axes(d, vector_a, vector_b, numpy_scalar):
    """The result without the axes numpy.matmul drops for a 1-D ``a`` / ``b``; with ``numpy_scalar`` a 1-D @ 1-D
    product is a NumPy scalar, as numpy.matmul gives it."""
    if vector_a and vector_b:
        d = d[..., 0, 0]
        return d[()] if numpy_scalar else d
    if vector_a:
        return d[..., 0, :]
    if vector_b:
        return d[..., 0]
    return d


def _plain_run(engine_execute, make_d, pointer, fixed, alpha, beta, stream):
    """The whole execute() of a stateful GPU plan with nothing to copy, no epilog output, matrix operands and a plan of
    its own: allocate D, call the engine. Everything else is bound once here."""
    a, b, c, inputs, no_outputs = fixed["a"], fixed["b"], fixed.get("c"), fixed["inputs"], {}

    def run():
        d = make_d()
        engine_execute(a, b, c, pointer(d), inputs, no_outputs, alpha, beta, stream)
        return d
    return run


def _allocator(package, device_id, stream, explicit_stream):
    """``alloc(shape, dtype, swap) -> make()``: ``make()`` returns a new array of ``shape`` (its last two axes swapped
    when ``swap``: column-major storage) on ``device_id``, from ``package``'s stream-ordered allocator on ``stream``.
    Everything but the allocation itself is resolved once."""
    if package == "cupy":
        import cupy
        device = cupy.cuda.Device(device_id)
        stream_obj = cupy.cuda.ExternalStream(stream, device_id)

        def alloc(shape, dtype, swap, zero=False):
            dtype = np.dtype(dtype)
            if swap and len(shape) == 2:
                final, order = (shape[1], shape[0]), "F"
            else:
                final, order = shape, "C"
            create = cupy.zeros if zero else cupy.empty

            def make():
                with device, stream_obj:
                    array = create(final, dtype, order=order)
                return array.swapaxes(-1, -2) if swap and order == "C" else array
            return make
        return alloc
    import torch

    from ..._operands import _torch_dtypes
    where = torch.device("cpu") if device_id is None else torch.device("cuda", device_id)  # cpu: for tests
    stream_obj = torch.cuda.ExternalStream(stream, device=where) if explicit_stream else None

    def alloc(shape, dtype, swap, zero=False):
        torch_dtype = _torch_dtypes()[1][np.dtype(dtype)]
        shape = tuple(shape)
        if swap:  # storage (..., a, b) seen as (..., b, a)
            *batch, rows, cols = shape
            final = (*batch, cols, rows)
            strides = (*_c_strides(shape)[:-2], 1, cols)
        else:
            final, strides = shape, _c_strides(shape)
        if zero:
            def create():
                return torch.empty_strided(final, strides, dtype=torch_dtype, device=where).zero_()
        else:
            def create():
                return torch.empty_strided(final, strides, dtype=torch_dtype, device=where)
        if stream_obj is None:  # torch's current stream: its allocator already orders on it
            return create

        def make():
            with torch.cuda.stream(stream_obj):
                return create()
        return make
    return alloc


def _zero_fill(tensor, package):
    """Zero ``tensor`` on its package's current stream (the caller made the plan's stream current)."""
    if package == "torch":
        tensor.zero_()
    else:
        tensor.fill(0)


def _pointer_of(package):
    if package == "cupy":
        return lambda array: array.data.ptr
    return lambda tensor: tensor.data_ptr()


@contextlib.contextmanager
def _stream_scope(package, stream, device_id):
    """Make ``stream`` current in ``package`` while inputs are copied, so copies are ordered before the product."""
    if package is None or not stream:
        yield
    elif package == "cupy":
        import cupy
        with cupy.cuda.Device(device_id), cupy.cuda.ExternalStream(stream, device_id):
            yield
    else:
        import torch
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=torch.device("cuda", device_id))):
            yield


def _engine_view(name, layout, base):
    """The CPU engine's NumPy view of the operand or epilog tensor ``name`` held in ``base`` (forms: ``_cpu``): A, B, C
    and D as ``(batch, rows, cols)``; the RELU bitmask and the GELU aux as ``(batch, ld, cols)`` column-major (the
    bitmask's strides, in bits in its layout, in bytes here); bias and bias gradients as ``(batch, L)``."""
    if name in ("a", "b", "c", "d"):
        return _view(base, (layout.batch, layout.rows, layout.cols),
                     (layout.batch_stride, layout.row_stride, layout.col_stride))
    if name in ("relu_aux", "gelu_aux"):
        unit = 8 if name == "relu_aux" else 1
        rows = layout.col_stride // unit
        return _view(base, (layout.batch, rows, layout.cols), (layout.batch_stride // unit, 1, rows))
    return _view(base, (layout.batch, layout.rows), (layout.batch_stride, 1))


def _view(base, shape, strides):
    """A (batch, rows, cols)-style NumPy view of ``base``'s memory with element strides."""
    itemsize, dtype = base.itemsize, base.dtype
    raw = base.view(f"u{itemsize}") if dtype.kind not in "biufc" or dtype.isbuiltin != 1 else base
    view = np.lib.stride_tricks.as_strided(raw, shape, tuple(s * itemsize for s in strides), writeable=True)
    return view if raw is base else view.view(dtype)


def _expand_c(c_op, result_shape, batch_shape, vector_a, vector_b):
    """c as an operand of rank ``len(batch_shape) + 2``: the axes a 1-D a or b removed from the result put back."""
    tensor = c_op.tensor
    rank = len(result_shape)
    if len(c_op.shape) < rank:
        tensor = tensor[(None,) * (rank - len(c_op.shape))]
    if vector_a:
        tensor = tensor[(Ellipsis, None, slice(None)) if not vector_b else (Ellipsis, None)]
    if vector_b:
        tensor = tensor[(Ellipsis, None)]
    return wrap_operand(tensor, "c")


def _to_caller(tensor, like, stream):
    """A result moved back to the caller's package and device (a name of its own: the fake-GPU tests replace it)."""
    return as_package(tensor, like, stream)


def _synchronize(package, stream, device_id):
    if package == "cupy":
        import cupy
        cupy.cuda.ExternalStream(stream, device_id).synchronize()
    else:
        import torch
        torch.cuda.ExternalStream(stream, device=f"cuda:{device_id}").synchronize()


def _cublaslt_engine():
    from ._cublaslt import CublasLtEngine
    return CublasLtEngine


# ---------------------------------------------------------------------------------------------------------------------
# Stateless API


def matmul(a, b, c=None, *, alpha=1, beta=None, epilog=None, epilog_inputs=None, options=None, preferences=None,
           execution=None, stream=None):
    """``epilog(alpha * a @ b + beta * c)`` with numpy.matmul semantics (see :class:`Matmul` for the parameters).

    Returns the result, or ``(result, aux)`` when the epilog has outputs. Plans are cached in
    :data:`matmul_plan_cache`, keyed on everything that makes plans differ. A repeated GPU call whose operands need no
    copy takes a fast path keyed on cheap facts (types, shapes, strides, dtypes, devices of the operands and every
    other argument): it reuses the validated, planned call and only reads the new data pointers and current stream."""
    key = _fast_key(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution, stream)
    if key is not None:
        entry = _fast_calls.get(key)
        if entry is not None:
            result = entry.run(a, b, c, epilog_inputs)
            if result is not _MISSED:
                return result
    mm = Matmul(a, b, c, alpha=alpha, beta=beta, options=options, execution=execution, stream=stream,
                _cache=matmul_plan_cache)
    try:
        mm.plan(epilog=epilog, epilog_inputs=epilog_inputs, preferences=preferences)
        if key is not None:
            entry = _FastCall.of(mm)
            if entry is not None:
                _fast_calls[key] = entry
                while len(_fast_calls) > _FAST_CALLS_MAX:
                    try:
                        del _fast_calls[next(iter(_fast_calls))]
                    except (KeyError, RuntimeError, StopIteration):  # another thread got there first
                        break
        return mm.execute()
    finally:
        mm.free()


# ---------------------------------------------------------------------------------------------------------------------
# The stateless call's fast path

_FAST_CALLS_MAX = 128
_fast_calls = {}  # fast key -> _FastCall (holds no operand and no GPU resource: plans stay in matmul_plan_cache)
_MISSED = object()
_ARRAY_KINDS = {}  # type -> "torch" / "cupy" / None


def _array_kind(obj):
    kind = _ARRAY_KINDS.get(type(obj), False)
    if kind is False:
        module = type(obj).__module__.split(".")[0]
        kind = module if module in ("torch", "cupy") and hasattr(obj, "shape") else None
        _ARRAY_KINDS[type(obj)] = kind
    return kind


def _facts(obj):
    """Cheap facts that fix an array's layout: None when the fast path does not apply to it."""
    kind = _array_kind(obj)
    if kind == "torch":
        return (obj.shape, obj.stride(), obj.dtype, obj.device)
    if kind == "cupy":
        return (obj.shape, obj.strides, obj.dtype, obj.device.id)
    return None


def _fast_key(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution, stream):
    if stream is not None:
        return None
    fa, fb = _facts(a), _facts(b)
    if fa is None or fb is None:
        return None
    fc = None
    if c is not None:
        fc = _facts(c)
        if fc is None:
            return None
    inputs = None
    if epilog_inputs:
        if type(epilog_inputs) is not dict:
            return None
        inputs = []
        for name in sorted(epilog_inputs):
            facts = _facts(epilog_inputs[name])
            if facts is None:
                return None
            inputs.append((name, facts))
        inputs = tuple(inputs)
    if type(options) is dict:
        options = tuple(sorted(options.items()))
    if type(preferences) is dict:
        preferences = tuple(sorted(preferences.items()))
    key = (fa, fb, fc, type(alpha), alpha, type(beta), beta, epilog, inputs, options, preferences, execution,
           _default_execution.get())
    try:
        hash(key)
    except TypeError:
        return None
    return key


class _FastCall:
    """What a planned stateless GPU call needs to run again on new operands with the same facts: the plan cache key
    and how to rebuild the engine if it was evicted, the output allocators, scalars and how the result is returned."""

    __slots__ = ("cache_key", "create", "stream", "package", "device_id", "make_d", "makers", "pointer", "has_c",
                 "inputs", "alpha", "beta", "finish", "has_outputs")

    @classmethod
    def of(cls, mm):
        """The fast call of a planned stateless Matmul, or None when its operands need copies or moves."""
        if mm._fast is None or mm._user_stream is not None or mm._cache_key is None:
            return None
        self = cls()
        self.cache_key, self.create = mm._cache_key, mm._create
        self.stream, self.package, self.device_id = mm._stream, mm._package, mm._device_id
        self.make_d, self.makers, self.pointer, _ = mm._fast
        self.has_c = "c" in mm._staged
        self.inputs = tuple(mm._inputs)
        self.alpha, self.beta = mm._alpha, mm._beta
        self.finish = (mm._vector_a, mm._vector_b, mm._package == "numpy" and mm._like.package == "numpy",
                       mm._options.blocking is True)
        self.has_outputs = bool(mm._problem.epilog_outputs)
        return self

    def run(self, a, b, c, epilog_inputs):
        stream = stream_pointer(None, self.package, self.device_id)
        if stream != self.stream:  # another current stream: plan (and cache) for it
            return _MISSED
        pointer = self.pointer
        pa, pb = pointer(a), pointer(b)
        pc = pointer(c) if self.has_c else None
        given = {name: pointer(epilog_inputs[name]) for name in self.inputs} if self.inputs else {}
        with matmul_plan_cache.borrow(self.cache_key, self.create) as shared:
            d = self.make_d()
            outputs, out_args = {}, {}
            for name, make in self.makers:
                outputs[name] = tensor = make()
                out_args[name] = pointer(tensor)
            with shared.lock:
                shared.engine.execute(pa, pb, pc, pointer(d), given, out_args, self.alpha, self.beta, stream)
        vector_a, vector_b, scalar, blocking = self.finish
        d = _drop_vector_axes(d, vector_a, vector_b, scalar)
        if blocking:
            _synchronize(self.package, stream, self.device_id)
        return (d, outputs) if self.has_outputs else d
