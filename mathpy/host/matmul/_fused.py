"""Matmul with a Python epilog fused into the product: what the problem carries, how ``data`` is validated, and the
CPU engine. (The GPU engine is :mod:`._fused_cuda`; the epilog checks and compilers are :mod:`mathpy.jit`.)

``matmul(a, b, epilog=f, epilog_inputs={"data": x})``: ``D = f(alpha * A @ B + beta * C)`` element by element, with
``f(value, row, col, data)`` or ``f(value, batch, row, col, data)`` (see :mod:`mathpy.jit._matmul_epilog`). Named
epilogs (RELU, GELU, BIAS...) keep going to cuBLASLt; a Python function goes to these engines. The result is
row-major (C order), as numpy.matmul gives it.

Supported: real float16, bfloat16, float32 and float64 operands (A and B of one dtype; C and D of the result dtype),
compute type "32F" (float64: "64F"). Refused before any work: complex and float8 operands, other compute types, a
``data`` of another package or device than the operands, of an unsupported dtype or of more than 3 dimensions.

>>> import numpy as np, mathpy
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> def clamp_row(value, row, col, data):
...     return min(value * data[row], np.float32(40))
>>> mathpy.matmul(a, a.T, epilog=clamp_row, epilog_inputs={"data": np.array([1, 2], np.float32)})
array([[ 5., 14.],
       [28., 40.]], dtype=float32)
"""

import dataclasses

import numpy as np

from ... import _threads
from ..._strides import c_strides
from ...jit import _matmul_epilog as E
from ...jit._cpu_passes import matmul_epilog_pass
from ._cpu import CPUEngine, _store
from ._cpu_epilog import python_epilog_pass
from ._options import BF16

__all__ = ["FusedEpilog", "DataLayout", "fused_epilog", "checked_fused_epilog", "check_fused_problem", "stage_data",
           "FusedCPUEngine", "FUSED_DTYPES"]

FUSED_DTYPES = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass(frozen=True)
class DataLayout:
    """The ``data`` epilog input as the kernel indexes it: shape, strides in elements, dtype name."""

    shape: tuple
    strides: tuple
    dtype: str

    @property
    def ndim(self):
        return len(self.shape)


@dataclasses.dataclass(frozen=True)
class FusedEpilog:
    """The Python epilog of a problem and the layout of its ``data`` (None: the function gets ``data=None``);
    ``check_bounds``: compiled with bounds checks (:mod:`mathpy.jit._bounds`)."""

    epilog: E.MatmulEpilogFunction
    data: DataLayout | None
    check_bounds: bool = False

    @property
    def name(self):
        return self.epilog.where


def fused_epilog(epilog):
    """A checked :class:`~mathpy.jit._matmul_epilog.MatmulEpilogFunction` when ``epilog`` is a Python function (or a
    numba dispatcher), else None (a named epilog)."""
    if epilog is None or isinstance(epilog, (str, int, bool)) or not callable(epilog):
        return None
    return E.as_matmul_epilog(epilog)


def checked_fused_epilog(epilog, data, batch, m, n, options):
    """The :class:`FusedEpilog` of ``epilog`` reading ``data`` (the staged input, with its ``layout``, or None) for a
    ``batch`` x ``m`` x ``n`` result, after the plan-time check of the indices its source shows (ValueError naming
    what ``data`` needs); compiled with bounds checks as ``options.check_bounds`` says."""
    from ...jit._bounds import check_epilog_indexing, resolve

    layout = None if data is None else data.layout
    if layout is not None:
        check_epilog_indexing(epilog.function, epilog.with_batch, epilog.where, layout.shape, batch, m, n)
    return FusedEpilog(epilog, layout, resolve(options.check_bounds))


def check_fused_problem(epilog, a_dtype, b_dtype, d_dtype, compute_type):
    """Refuse, before any work, what the fused engines do not take (ValueError naming the value and what is
    allowed)."""
    for what, dtype in (("a", a_dtype), ("b", b_dtype), ("the result", d_dtype)):
        if dtype not in FUSED_DTYPES:
            raise ValueError(f"matmul epilog {epilog.where}: {what} has dtype {dtype.name}; Python epilogs take "
                             f"float16, bfloat16, float32 or float64 operands")
    if a_dtype != b_dtype:
        raise ValueError(f"matmul epilog {epilog.where}: a ({a_dtype.name}) and b ({b_dtype.name}) must have one "
                         f"dtype")
    wanted = "64F" if a_dtype == np.float64 else "32F"
    if compute_type != wanted:
        raise ValueError(f"matmul epilog {epilog.where}: compute type {compute_type} is not supported with a Python "
                         f"epilog on {a_dtype.name} operands; allowed: {wanted}")


def stage_data(op):
    """(DataLayout, needs a C-order copy) of the ``data`` operand ``op``; ValueError when it cannot be one (its
    package and device are the caller's to check)."""
    dtype = op.dtype.name
    if dtype not in E.DATA_DTYPES:
        raise ValueError(f"epilog input 'data' has dtype {dtype}; a Python epilog's data may be "
                         f"{', '.join(E.DATA_DTYPES)}")
    if not 0 <= len(op.shape) <= 3:
        raise ValueError(f"epilog input 'data' has shape {tuple(op.shape)}; it must have at most 3 dimensions "
                         f"(data[row, col], data[row], data[batch, row, col], ...)")
    strides = tuple(op.strides)
    copy = any(s < 0 for s in strides)  # the kernel indexes with non-negative strides
    if copy:
        strides = c_strides(op.shape)
    return DataLayout(tuple(op.shape), strides, dtype), copy


class FusedCPUEngine(CPUEngine):
    """The CPU engine: :class:`~._cpu.CPUEngine`'s product (NumPy's BLAS with cuBLASLt's numerics), then the epilog
    compiled by numba in one pass over the result, a block of rows per thread, then (16-bit results) one rounding to
    the result's dtype. Arguments of :meth:`execute` as for ``CPUEngine`` (NumPy views), with
    ``epilog_inputs["data"]`` the data array (any strides) when given."""

    algorithm = "numpy+numba"

    def __init__(self, problem, **kwargs):
        super().__init__(problem, **kwargs)
        self._epilog = None  # compiled at the first execution

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream=None):
        p = self.problem
        if p.fused.check_bounds:  # a diagnostic: one element at a time, the first bad index named
            with _threads.blas_threads(self._blas_limit, self._work):
                x = self._product(a, b, c, alpha, beta)[0]
            x = np.ascontiguousarray(np.broadcast_to(x, (p.batch, p.m, p.n)))
            _store(E.apply_cpu(p.fused.epilog, x, epilog_inputs.get("data"), True), d)
            return
        if self.native:  # float32 / float64: the product in D itself, the epilog in place
            self._execute_native(a, b, c, d, {}, {}, alpha, beta)
            self.run_epilog(d, epilog_inputs.get("data"))
            return
        with _threads.blas_threads(self._blas_limit, self._work):
            x = self._product(a, b, c, alpha, beta)[0]
        x = np.require(np.broadcast_to(x, (p.batch, p.m, p.n)), requirements=("C", "W"))  # the pass writes it
        self.run_epilog(x, epilog_inputs.get("data"))
        _store(x, d)

    def run_epilog(self, x, data):
        """The Python epilog in place on ``x`` (``(batch, M, N)``, C-contiguous, the compute dtype), on every
        thread."""
        if self._epilog is None:
            self._epilog = matmul_epilog_pass(self.problem.fused.epilog)
        python_epilog_pass(self._epilog, x, _epilog_data(data), self.threads)


def _epilog_data(data):
    """The ``data`` array as the compiled epilog reads it: read-only, 16-bit floats as float32 (the same values)."""
    if data is None:
        return None
    data = np.asarray(data)
    if data.dtype.itemsize == 2 and data.dtype.kind not in "iu":  # float16 / bfloat16
        data = data.astype(np.float32)
    data = data.view()
    data.flags.writeable = False
    return data
