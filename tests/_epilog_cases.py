"""Python matmul epilogs as users write them, with their operands and the error bound of a computed result, shared by
the CPU, fake-GPU and GPU tests of every route.

Each :class:`Case` is a function, the operands it reads (made for a given M, N, batch), which result dtypes it
applies to, and the two numbers its bound needs: ``lipschitz`` (max |df/dvalue| over the operands' range: how an
error in the product's value carries through) and ``operations`` (floating operations from the value to the result:
each may round once in the compute precision, relative to the magnitudes involved).

The bound of one element (``bound``): the product's error (Higham 3.1: ``gamma_{k+1} (|alpha| |A| @ |B| + |beta|
|C|)`` in the compute precision) and, where the route rounds the product to a 16-bit result before the epilog (the
elementwise pass after cuBLASLt), one unit of that rounding, both carried by ``lipschitz``; the epilog's own
``operations`` roundings in the compute precision; the final rounding to the result dtype; the smallest normal of the
result. The reference is the same function evaluated in float64 (complex128) on the exact product of the same
(rounded) operands.
"""

import dataclasses
import math

import ml_dtypes
import numpy as np

from _tolerance import gamma, unit_roundoff

BF16 = np.dtype(ml_dtypes.bfloat16)
REAL = ("float16", "bfloat16", "float32", "float64")
ALL = REAL + ("complex64",)
CLAMP = 4.0


def bias_col(value, row, col, bias):
    return value + bias[col]


def bias_row(value, row, col, bias):
    return value + bias[row]


def residual(value, row, col, residual):
    return np.float32(0.5) * value + residual[row, col]


def gated_silu(value, row, col, bias, gate):
    x = value + bias[col]
    return x / (np.float32(1) + math.exp(-x)) * gate[row, col]


def clamp(value, row, col, scale):
    return min(max(value * scale[row], np.float32(-CLAMP)), np.float32(CLAMP))


def batch_scale(value, batch, row, col, scale):
    return value * scale[batch]


def relu_bias(value, row, col, bias):
    return max(value + bias[col], np.float32(0))


def gelu_tanh(value, row, col, bias):
    x = value + bias[col]
    inner = np.float32(0.7978845608) * (x + np.float32(0.044715) * x ** 3)
    return np.float32(0.5) * x * (np.float32(1) + math.tanh(inner))


SHIFT = np.float32(0.25)  # a module-level constant the epilog reads


def mixed(value, row, col, keep, step):
    """math.erf, sqrt, log1p, abs, a comparison, a ternary, a bool and an int operand, a module constant (|df| <=
    1.13 + 0.5 + 1 or |step| <= 3)."""
    if keep[row, col]:
        y = math.erf(value) + math.sqrt(np.float32(1) + abs(value)) + math.log1p(abs(value))
    else:
        y = value * np.float32(step[col]) if value > 0 else -value
    return y + SHIFT


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    function: object
    operands: object  # (m, n, batch, rng, result dtype) -> {name: NumPy array}
    dtypes: tuple = ALL
    lipschitz: float = 1.0
    operations: int = 2
    batched_only: bool = False

    def make(self, m, n, batch, rng, dtype):
        return self.operands(m, n, batch, rng, np.dtype(dtype))

    def reference(self, x, operands):
        """``f`` on every element of the float64 / complex128 ``x`` (shape ``(batch, M, N)``), its arithmetic in
        float64 (:func:`wide`) with its float32 constants as they are."""
        converted = {k: v.astype(np.float64) if v.dtype.kind == "f" or v.dtype == BF16 else v
                     for k, v in operands.items()}
        out = np.empty_like(x)
        fn, args = wide(self.function), list(converted.values())
        with_batch = "batch" in self.function.__code__.co_varnames[:self.function.__code__.co_argcount]
        for b, i, j in np.ndindex(*x.shape):
            out[b, i, j] = fn(x[b, i, j], b, i, j, *args) if with_batch else fn(x[b, i, j], i, j, *args)
        return out


class _Wide:
    """numpy, with ``float32(c)`` giving the float32 value of ``c`` as a float64 (NumPy 2 would keep float32
    arithmetic with Python floats, which the compiled function, typed by numba, does not)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def float32(c):
        return np.float64(np.float32(c))


def wide(fn):
    """``fn`` evaluated in float64: its ``np`` seen through :class:`_Wide`, float32 globals as float64 values."""
    import types

    glb = {name: (_Wide() if value is np else np.float64(value) if isinstance(value, np.float32) else value)
           for name, value in fn.__globals__.items()}
    return types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)


def _same(dtype):
    """The operand dtype that goes with a result dtype (real part of complex: the operands are real)."""
    return np.dtype(np.float32) if dtype.kind == "c" else dtype


CASES = [
    Case("bias_col", bias_col, lambda m, n, b, rng, d: {"bias": rng.standard_normal(n).astype(_same(d))}),
    Case("bias_row", bias_row, lambda m, n, b, rng, d: {"bias": rng.standard_normal(m).astype(_same(d))}),
    Case("residual", residual, lambda m, n, b, rng, d: {
        "residual": (rng.standard_normal((m, n)) + (1j * rng.standard_normal((m, n)) if d.kind == "c" else 0))
        .astype(d)}, lipschitz=0.5),
    Case("gated_silu", gated_silu, lambda m, n, b, rng, d: {
        "bias": rng.standard_normal(n).astype(np.float32), "gate": rng.uniform(-2, 2, (m, n)).astype(BF16)},
        dtypes=REAL, lipschitz=1.1 * 2, operations=10),  # |silu'| <= 1.1, |gate| <= 2
    Case("clamp", clamp, lambda m, n, b, rng, d: {"scale": (rng.random(m) * 2).astype(np.float32)}, dtypes=REAL,
         lipschitz=2.0, operations=2),
    Case("batch_scale", batch_scale, lambda m, n, b, rng, d: {"scale": rng.uniform(-2, 2, b).astype(np.float32)},
         lipschitz=2.0, operations=1, batched_only=True),
    Case("relu_bias", relu_bias, lambda m, n, b, rng, d: {"bias": rng.standard_normal(n).astype(_same(d))},
         dtypes=REAL),
    Case("gelu_tanh", gelu_tanh, lambda m, n, b, rng, d: {"bias": rng.standard_normal(n).astype(_same(d))},
         dtypes=REAL, lipschitz=1.13, operations=12),
    Case("mixed", mixed, lambda m, n, b, rng, d: {
        "keep": rng.random((m, n)) > 0.5, "step": rng.integers(-3, 4, n).astype(np.int32)}, dtypes=REAL,
        lipschitz=3.0, operations=12),
]
BY_NAME = {case.name: case for case in CASES}


def compute_dtype(dtype):
    dtype = np.dtype(dtype)
    return dtype if dtype in (np.float64, np.complex64) else np.dtype(np.float32)


def bound(case, dtype, x, magnitude, ref, k, product_rounded=False):
    """Elementwise bound on |computed - ref| (see the module docstring): ``x`` the exact pre-epilog values,
    ``magnitude`` ``|alpha| |A| @ |B| + |beta| |C|``, ``ref`` the exact result."""
    dtype = np.dtype(dtype)
    u_compute, u_out = unit_roundoff(compute_dtype(dtype)), unit_roundoff(dtype)
    value_error = gamma(k + 1, compute_dtype(dtype)) * magnitude
    if product_rounded:
        value_error = value_error + u_out * np.abs(x)
    evaluation = case.operations * u_compute * (np.abs(ref) + case.lipschitz * np.abs(x) + 1)
    finfo = ml_dtypes.finfo(dtype) if dtype == BF16 else np.finfo(dtype)
    return case.lipschitz * value_error + evaluation + u_out * np.abs(ref) + float(finfo.smallest_normal)


def product(a, b, c=None, alpha=1.0, beta=0.0):
    """(x, magnitude) of ``alpha a @ b + beta c`` in float64 / complex128 (``(batch, M, N)``)."""
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    A, B = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
    x = alpha * np.matmul(A, B)
    magnitude = abs(alpha) * np.matmul(np.abs(A), np.abs(B))
    if c is not None:
        C = np.asarray(c).astype(wide)
        x, magnitude = x + beta * C, magnitude + abs(beta) * np.abs(C)
    return x, magnitude


def random(shape, dtype, rng, scale=1.0):
    dtype = np.dtype(dtype)
    values = rng.standard_normal(shape) * scale
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape) * scale
    return values.astype(dtype)
