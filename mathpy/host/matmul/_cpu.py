"""The CPU matmul engine: NumPy (BLAS) with cuBLASLt's numerics and output formats.

float16, bfloat16 and float8 products are computed in float32 and rounded once, like cuBLASLt's 32F compute type; int8
in int32 ("32I"); NumPy's other dtypes (integers, bool, long double, object) by NumPy itself ("NATIVE");
"32F_FAST_TF32" / "_16F" / "_16BF" round the float32 inputs to TF32 / float16 / bfloat16 first (what the tensor cores
see). Epilogs follow the definitions and formats of :mod:`._epilog` exactly (bitmask bits and padding, GELU tanh
approximation, bias gradients), so a CPU result can stand in for (and check) a GPU one.

Array arguments of :meth:`CPUEngine.execute` are NumPy views made by the API from the problem's layouts:
``a (batch, M, K)``, ``b (batch, K, N)``, ``c``/``d (batch, M, N)`` (``c`` may be None), epilog inputs and outputs
``bias``/bias gradients ``(batch, L)``, ``relu_aux (batch, relu_aux_rows(M), N)`` uint8, ``gelu_aux
(batch, gelu_aux_rows(M), N)`` (in float8: ``aux_scale * X``), the amaxes and scale arrays ``(1,)``. Batch strides of
inputs may be 0.
"""

import time

import ml_dtypes
import numpy as np

from ... import _threads
from ._cpu_epilog import epilog_pass
from ._epilog import gelu, gelu_grad, pack_bits, unpack_bits
from ._options import BF16, F16, FLOAT8_DTYPES

__all__ = ["store_result", "CPUEngine", "CPUAlgorithm", "HostCall"]


class CPUAlgorithm:
    """The one CPU "algorithm": NumPy's matmul on the platform BLAS (nothing to configure: no capabilities)."""

    name = "numpy"
    capabilities = {}
    algorithm_id = None

    def __repr__(self):
        return "CPUAlgorithm('numpy')"


_ALGORITHM = CPUAlgorithm()


def _round_tf32(x):
    """Round float32 values to TF32 (10 explicit mantissa bits), nearest-even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    finite = np.isfinite(x)
    return np.where(finite, rounded.view(np.float32), x)


def _round_inputs(x, compute_type):
    if compute_type == "32F_FAST_TF32":
        if x.dtype.kind == "c":
            return _round_tf32(x.real) + 1j * _round_tf32(x.imag).astype(np.complex64)
        return _round_tf32(x)
    if compute_type == "32F_FAST_16F" and x.dtype.kind == "f":
        return x.astype(F16).astype(np.float32)
    if compute_type == "32F_FAST_16BF" and x.dtype.kind == "f":
        return x.astype(BF16).astype(np.float32)
    return x


def _problem_compute_dtype(problem):
    """The dtype the product is computed in: int32 for "32I" (exact int8 products, wrapped to an int8 result as
    NumPy's), the result's own for "NATIVE" (NumPy's loops: other integers, bool, long double, object), else that
    of the floating-point operands (:func:`_compute_dtype`)."""
    if problem.compute_type == "32I":
        return np.dtype(np.int32)
    if problem.compute_type == "NATIVE":
        return problem.d.dtype
    return _compute_dtype(problem.a.dtype)


def _compute_dtype(dtype):
    """float32, float64 or complex for floating-point operands of ``dtype``, like cuBLASLt's compute types."""
    if dtype.kind == "c":
        return np.dtype(np.complex128) if dtype.itemsize == 16 else np.dtype(np.complex64)
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def store_result(values, out):
    """Round ``values`` into ``out``'s dtype (float8 saturates to the largest finite value, as cuBLASLt does)."""
    if out.dtype in FLOAT8_DTYPES:
        top = float(ml_dtypes.finfo(out.dtype).max)
        values = np.clip(values, -top, top)
    out[...] = values.astype(out.dtype)


def _scalar(dtype, value):
    return value if dtype.kind == "O" else dtype.type(value)


_NATIVE_COMPUTE = ("32F", "64F", "NATIVE")
_gemm = np.matmul  # the BLAS product of a native problem (a seam: the tests watch the BLAS's threads inside it)


def _native_product(problem, compute):
    """Whether the product is numpy.matmul of the operands as they are, in D's dtype: no conversion, no rounding of
    the inputs, no float8 scales."""
    p = problem
    dtypes = {p.a.dtype, p.b.dtype, p.d.dtype} | ({p.c.dtype} if p.c is not None else set())
    return (p.compute_type in _NATIVE_COMPUTE and dtypes == {compute} and compute.kind in "fciu"
            and p.a_scale is None and p.b_scale is None and p.d_scale is None and not p.inplace)


def _native_epilog(problem):
    """Whether the epilog pass does what the epilog asks: RELU / GELU, a bias, their bitmask or aux in D's dtype."""
    spec = problem.spec
    if problem.epilog is None:
        return True
    outputs = dict(problem.epilog_outputs)
    return (spec.activation in (None, "relu", "gelu") and spec.bgrad is None and problem.d.dtype.kind == "f"
            and (problem.d.is_col_major or not (spec.bias or spec.aux_out))  # per-row operands run along Q
            and set(outputs) <= {"relu_aux", "gelu_aux"} and problem.aux_scale is None
            and ("gelu_aux" not in outputs or outputs["gelu_aux"].dtype == problem.d.dtype))


class CPUEngine:
    """Executes a :class:`~._problem.MatmulProblem` with NumPy; see the module docstring for the argument forms."""

    algorithm = _ALGORITHM  # the one entry of ``algorithms``

    def __init__(self, problem, *, execution=None, options=None, preferences=None):
        self.problem = problem
        self.execution = execution
        self.algorithms = [self.algorithm]
        self.workspace_bytes = 0
        self._compute = _problem_compute_dtype(problem)
        self.threads = _threads.threads_for(execution)
        self._blas_limit = getattr(execution, "num_threads", None)
        self._work = problem.m * problem.n * problem.k * problem.batch
        #: the product is numpy.matmul's, computed into D itself (and what cuBLASLt adds after it, in one pass)
        self.native = _native_product(problem, self._compute) and _native_epilog(problem)

    def autotune(self, operands, stream=None, iterations=3):
        """Time the (single) algorithm; returns ``[(algorithm, seconds)]``."""
        start = time.perf_counter()
        for _ in range(iterations):
            self.execute(**operands, stream=stream)
        return [(self.algorithms[0], (time.perf_counter() - start) / max(iterations, 1))]

    def _product(self, a, b, c, scale, beta):
        """``(scale * A @ B + beta * C, A, B)`` in the compute dtype, A and B as the compute type reads them (the
        bias gradients sum them)."""
        p, ct = self.problem, self._compute
        A = _round_inputs(a.astype(ct), p.compute_type)
        B = _round_inputs(b.astype(ct), p.compute_type)
        x = np.matmul(A, B)
        if scale != 1:
            x *= _scalar(ct, scale)
        if c is not None and beta != 0:
            x += _scalar(ct, beta) * c.astype(ct)
        return x, A, B

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream=None):
        if self.native:
            self._execute_native(a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta)
            return
        with _threads.blas_threads(self._blas_limit, self._work):
            self._execute_numpy(a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta)

    def product_into(self, a, b, d):
        """``d[...] = a @ b`` by the BLAS, into D's own memory, on the threads the execution space allows."""
        with _threads.blas_threads(self._blas_limit, self._work):
            _gemm(a, b, out=d)

    def _execute_native(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta):
        """numpy.matmul into D, then one pass for alpha, beta * C, the bias, the activation and its aux output."""
        self.product_into(a, b, d)
        self.after_product(d, c, epilog_inputs.get("bias"), epilog_outputs, alpha, beta)

    def after_product(self, d, c, bias, epilog_outputs, alpha, beta):
        """The pass over D (``(batch, M, N)`` views, as ``execute`` takes them) that a native product needs after
        ``A @ B``: alpha, beta * C, the bias, the activation and its aux outputs; nothing when none of them is asked."""
        p = self.problem
        c = c if c is not None and beta != 0 else None
        if alpha == 1 and c is None and p.epilog is None:
            return
        # the pass walks D in memory order: a column-major D (every per-row epilog) as its transpose
        swap = (lambda x: x.swapaxes(1, 2)) if p.d.is_col_major else (lambda x: x)
        outputs = {name: swap(view) for name, view in epilog_outputs.items()}  # with their padding: the pass zeroes it
        epilog_pass(swap(d), self.threads, alpha=None if alpha == 1 else alpha, c=None if c is None else swap(c),
                    beta=beta, bias=bias, activation=p.spec.activation, relu_aux=outputs.get("relu_aux"),
                    gelu_aux=outputs.get("gelu_aux"))

    def host_call(self, call, a, b, epilog_inputs):
        """A :class:`HostCall` running ``call`` (this engine's :class:`~._call.MatmulCall`) on later NumPy operands of
        the facts of ``a``, ``b`` and ``epilog_inputs``, or None when the call needs more than the product and its
        pass on the caller's arrays: copies, C, epilog outputs, a bias other than ``(M,)``, a 1-D operand with more
        than the product."""
        p, f = self.problem, call.finish
        if not self.native or call.inplace or p.c is not None or p.epilog_outputs or f.cast is not None or \
                f.like is not None or any(s.mode is not None or s.move for s in call.staged.values()) or \
                (p.fused is not None and p.fused.check_bounds):  # a checked epilog runs its own diagnostic loop
            return None
        names = set(epilog_inputs or ())
        if p.fused is not None:  # a Python epilog reads its operands where they lie
            if names - {name for name, _ in p.fused.operands}:
                return None
        else:
            bias = (epilog_inputs or {}).get("bias")
            if names - {"bias"} or (bias is not None and (type(bias) is not np.ndarray or bias.shape != (p.m,))):
                return None
        plain = call.alpha == 1 and p.epilog is None and p.fused is None
        if not plain and (a.ndim < 2 or b.ndim < 2):
            return None
        shape = (*p.batch_shape, *(() if f.vector_a else (p.m,)), *(() if f.vector_b else (p.n,)))  # numpy.matmul's
        return HostCall(self, call.alpha, call.beta, shape, p.d.is_col_major and a.ndim >= 2 and b.ndim >= 2, plain)

    def _execute_numpy(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta):
        """Every other product, in NumPy operations on the compute dtype (cuBLASLt's numerics)."""
        p, ct = self.problem, self._compute
        spec = p.spec
        a_scale, b_scale, d_scale, aux_scale = (
            float(np.ravel(epilog_inputs[name])[0]) if name in epilog_inputs else getattr(p, name)
            for name in ("a_scale", "b_scale", "d_scale", "aux_scale"))  # arrays: read now
        scale = alpha
        if a_scale is not None or b_scale is not None:
            scale = scale * (1.0 if a_scale is None else a_scale) * (1.0 if b_scale is None else b_scale)
        x, A, B = self._product(a, b, c, scale, beta)
        if spec.bias:
            x += epilog_inputs["bias"].astype(ct)[:, :, None]
        m = p.m
        if spec.aux_out == "relu_aux":
            epilog_outputs["relu_aux"][...] = pack_bits(x > 0, epilog_outputs["relu_aux"].shape[1])
        elif spec.aux_out == "gelu_aux":
            aux = epilog_outputs["gelu_aux"]
            store_result(x if aux_scale is None else x * ct.type(aux_scale), aux[:, :m, :])  # (float8 aux only)
            aux[:, m:, :] = 0
            if "gelu_aux_amax" in epilog_outputs:  # of X, before aux_scale: what the next aux scale comes from
                epilog_outputs["gelu_aux_amax"][...] = np.max(np.abs(x)) if x.size else 0
        activation = spec.activation
        if activation == "relu":
            x = np.maximum(x, ct.type(0))
        elif activation == "gelu":
            x = gelu(x)
        elif activation == "drelu":
            x = x * unpack_bits(epilog_inputs["relu_aux"], m)
        elif activation == "dgelu":
            x = x * gelu_grad(epilog_inputs["gelu_aux"][:, :m, :].astype(ct))
        if spec.bgrad is not None:
            name = spec.outputs[0]
            if spec.bgrad == "d":
                grad = x.sum(axis=2)
            elif spec.bgrad == "a":
                grad = A.sum(axis=2)
            else:
                grad = B.sum(axis=1)
            store_result(grad, epilog_outputs[name])
        if "result_amax" in epilog_outputs:  # before d_scale, as cuBLASLt's AMAX_D: what the next scale comes from
            epilog_outputs["result_amax"][...] = np.max(np.abs(x)) if x.size else 0
        if d_scale is not None:
            x = x * ct.type(d_scale)
        if p.compute_type == "16F":
            x = x.astype(F16)
        store_result(x, d)

    def free(self):
        """Nothing to release (the engine protocol's free())."""


class HostCall:
    """The stateless matmul's prepared call on the CPU for NumPy operands read where they lie
    (:meth:`CPUEngine.host_call`): ``call(a, b, inputs)`` allocates D in the plan's layout, runs the BLAS product into
    it with numpy.matmul's shapes (batch broadcasting, 1-D operands) and the engine's pass over it, and returns it.
    The same product and pass as :meth:`CPUEngine.execute`, without the plan's views."""

    __slots__ = ("engine", "alpha", "beta", "shape", "plain", "_storage", "_swap", "_dtype")

    def __init__(self, engine, alpha, beta, shape, col_major, plain):
        self.engine, self.alpha, self.beta, self.shape, self.plain = engine, alpha, beta, shape, plain
        self._dtype = engine.problem.d.dtype
        self._swap = col_major and len(shape) >= 2
        self._storage = shape[:-2] + shape[:-3:-1] if self._swap else shape  # allocated; D is its transpose

    def __call__(self, a, b, inputs):
        engine = self.engine
        if not self.shape:  # 1-D @ 1-D: a NumPy scalar, as numpy.matmul gives it
            with _threads.blas_threads(engine._blas_limit, engine._work):
                return np.matmul(a, b)
        d = np.empty(self._storage, self._dtype)
        if self._swap:
            d = d.swapaxes(-1, -2)
        engine.product_into(a, b, d)
        if self.plain:
            return d
        d3 = d.reshape(-1, *self.shape[-2:])
        if engine.problem.fused is None:
            bias = inputs.get("bias") if inputs else None
            engine.after_product(d3, None, None if bias is None else bias[None], {}, self.alpha, self.beta)
        else:
            engine.after_product(d3, None, None, {}, self.alpha, self.beta)
            engine.run_epilog(d3, inputs or {})
        return d
