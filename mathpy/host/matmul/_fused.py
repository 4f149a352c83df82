"""Matmul with a Python epilog: what the problem carries, how its operands are validated, the route on a GPU, and the
CPU engine. (The GPU engine is :mod:`._fused_cuda`, its route rule :mod:`._fused_route`; the epilog's contract and
compilers are in :mod:`mathpy.jit`.)

``matmul(a, b, epilog=f, epilog_inputs={"bias": x, "gate": g})``: ``D = f(alpha * A @ B + beta * C)`` element by
element, with ``f(value, row, col, bias, gate)`` or ``f(value, batch, row, col, bias, gate)`` (see
:mod:`mathpy.jit._matmul_epilog`; one operand may be given as ``"data"``). Named epilogs (RELU, GELU, BIAS...) keep
going to cuBLASLt; a Python function goes to these engines. The result is row-major (C order), as numpy.matmul gives
it, except on the GPU route that runs cuBLASLt's bias-by-row epilog (column-major, as that epilog needs).

Supported: float16, bfloat16, float32, float64 and complex64 operands (A and B of one dtype; C and D of the result
dtype). Refused before any work: float8, integer and complex128 operands, an operand of another package or device
than A, of an unsupported dtype or of more than 3 dimensions.

>>> import numpy as np, mathpy
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> def clamp_row(value, row, col, scale):
...     return min(value * scale[row], np.float32(40))
>>> mathpy.matmul(a, a.T, epilog=clamp_row, epilog_inputs={"scale": np.array([1, 2], np.float32)})
array([[ 5., 14.],
       [28., 40.]], dtype=float32)
"""

import dataclasses
import types

import numpy as np

from ... import _threads
from ..._strides import c_strides
from ...jit import _matmul_epilog as E
from ...jit._cpu_passes import matmul_epilog_pass
from ._cpu import CPUEngine, store_result
from . import _cpu_epilog
from ._cpu_epilog import python_epilog_pass
from ._options import BF16

__all__ = ["FusedEpilog", "DataLayout", "fused_epilog", "check_fused_problem", "stage_data", "FusedCPUEngine",
           "FUSED_DTYPES", "gpu_route", "plan_fused"]

FUSED_DTYPES = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64))


@dataclasses.dataclass(frozen=True)
class DataLayout:
    """An operand of the epilog as the kernels index it: shape, strides in elements, dtype name."""

    shape: tuple
    strides: tuple
    dtype: str

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def kind(self):
        """(dtype, ndim): what the compiled epilog depends on."""
        return (self.dtype, self.ndim)


@dataclasses.dataclass(frozen=True)
class FusedEpilog:
    """The Python epilog of a problem, the layout of each operand in the function's order (``(name, DataLayout or
    None)``; None: the function gets None), on a GPU the :class:`~._fused_route.Route` it takes, and
    ``check_bounds``: every index checked when it runs (:mod:`mathpy.jit._bounds`)."""

    epilog: E.MatmulEpilogFunction
    operands: tuple = ()
    route: object = None
    check_bounds: bool = False

    @property
    def name(self):
        return self.epilog.where

    @property
    def kinds(self):
        return tuple(None if layout is None else layout.kind for _, layout in self.operands)


def fused_epilog(epilog, epilog_inputs=None):
    """A checked :class:`~mathpy.jit._matmul_epilog.MatmulEpilogFunction` when ``epilog`` is a Python function (or a
    numba dispatcher) whose operands are the keys of ``epilog_inputs``, else None (a named epilog)."""
    if epilog is None or isinstance(epilog, (str, int, bool)) or not callable(epilog):
        return None
    names = tuple(epilog_inputs) if isinstance(epilog_inputs, dict) else ()
    return E.as_matmul_epilog(epilog, names)


def check_fused_problem(epilog, a_dtype, b_dtype, d_dtype, compute_type):
    """Refuse, before any work, what the fused engines do not take (ValueError naming the value and what is
    allowed)."""
    for what, dtype in (("a", a_dtype), ("b", b_dtype), ("the result", d_dtype)):
        if dtype not in FUSED_DTYPES:
            raise ValueError(f"matmul epilog {epilog.where}: {what} has dtype {dtype.name}; Python epilogs take "
                             f"float16, bfloat16, float32, float64 or complex64 operands")
    if a_dtype != b_dtype:
        raise ValueError(f"matmul epilog {epilog.where}: a ({a_dtype.name}) and b ({b_dtype.name}) must have one "
                         f"dtype")
    if (a_dtype.kind == "c") != (d_dtype.kind == "c"):
        raise ValueError(f"matmul epilog {epilog.where}: a {a_dtype.name} product cannot have a {d_dtype.name} "
                         f"result")
    if compute_type == "16F":  # the epilog's value is float32: the product must be accumulated in it
        raise ValueError(f"matmul epilog {epilog.where}: compute type 16F is not supported with a Python epilog (its "
                         f"value is float32); allowed: 32F")


def stage_data(op, name="data"):
    """(DataLayout, needs a C-order copy) of the epilog operand ``op``; ValueError when it cannot be one (its
    package and device are the caller's to check)."""
    dtype = op.dtype.name
    if dtype not in E.DATA_DTYPES:
        raise ValueError(f"epilog input {name!r} has dtype {dtype}; a Python epilog's operands may be "
                         f"{', '.join(E.DATA_DTYPES)}")
    if not 0 <= len(op.shape) <= 3:
        raise ValueError(f"epilog input {name!r} has shape {tuple(op.shape)}; it must have at most 3 dimensions "
                         f"(x[row, col], x[row], x[batch, row, col], ...)")
    strides = tuple(op.strides)
    copy = any(s < 0 for s in strides)  # the kernel indexes with non-negative strides
    if copy:
        strides = c_strides(op.shape)
    return DataLayout(tuple(op.shape), strides, dtype), copy


def plan_fused(fused, inputs, product, batch, d_dtype, options, staged, c_given, compute_type, device_id, requested,
               logger):
    """``(FusedEpilog, D's layout)`` of a plan with the Python epilog ``fused`` (``inputs``: its Staged operands;
    ``options``: the MatmulOptions; ``staged``: A's and B's; ``c_given``: C as given, or None; ``device_id`` None on
    the CPU). First the indices the function's source shows are checked against every operand's shape (ValueError
    naming what the operand needs). The result is row-major except on the route that runs cuBLASLt's bias by row
    (column-major); on a GPU the route (``requested``: MatmulPlanPreferences.epilog_route) is logged with its
    reason."""
    from ...jit._bounds import check_epilog_indexing, resolve
    from ._layouts import c_in_d_order
    from ._problem import col_major, row_major

    if options.inplace:
        raise ValueError("a Python epilog writes a new result: it cannot run in place (inplace=True)")
    p = product
    d_layout, route = row_major(p.m, p.n, batch, d_dtype), None
    layouts = {name: s.layout for name, s in inputs.items()}
    check_epilog_indexing(fused.function, fused.with_batch, fused.where,
                          [(name, layouts[name].shape if name in layouts else None) for name in fused.operands],
                          batch, p.m, p.n)
    if device_id is not None:
        c = None if c_given is None else c_in_d_order(c_given, d_layout, p).layout
        route = gpu_route(fused, layouts, p.m, p.n, p.k, batch, staged["a"].layout, staged["b"].layout, c, d_dtype,
                          compute_type, device_id, requested)
        logger.info("Matmul epilog %s: %s", fused.where, route)
        if route.order == "F":
            d_layout = col_major(p.m, p.n, batch, d_dtype)
    operands = tuple((name, layouts.get(name)) for name in fused.operands)
    return FusedEpilog(fused, operands, route, resolve(options.check_bounds)), d_layout


def gpu_route(fused, operands, m, n, k, batch, a, b, c, d_dtype, compute_type, device_id, requested):
    """The :class:`~._fused_route.Route` of a GPU product (layouts ``a``, ``b``, ``c`` as they enter it) with the
    epilog ``fused`` reading ``operands`` (name -> DataLayout or None), on device ``device_id``."""
    from ... import _cuda
    from ...jit._epilog_recognize import recognize
    from ._fused_route import choose_route

    names = [None if operands.get(name) is None else name for name in fused.operands]
    recognized = recognize(fused.function, names, fused.with_batch)
    facts = types.SimpleNamespace(m=m, n=n, k=k, batch=batch, a=a, b=b, c=c, d_dtype=np.dtype(d_dtype),
                                  compute_type=compute_type)
    return choose_route(facts, recognized, operands, _cuda.compute_capability(device_id),
                        _cuda.multiprocessor_count(device_id), requested)


class FusedCPUEngine(CPUEngine):
    """The CPU engine: :class:`~._cpu.CPUEngine`'s product (NumPy's BLAS with cuBLASLt's numerics), then the epilog
    compiled by numba in one pass over the result, a block of rows per thread, then (16-bit results) one rounding to
    the result's dtype. Arguments of :meth:`execute` as for ``CPUEngine`` (NumPy views), with ``epilog_inputs`` the
    operand arrays (any strides) by name."""

    algorithm = "numpy+numba"

    def __init__(self, problem, **kwargs):
        super().__init__(problem, **kwargs)
        self._epilog = self._parallel = None  # compiled at the first execution

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream=None):
        p = self.problem
        if p.fused.check_bounds:  # a diagnostic: one element at a time, the first bad index named
            with _threads.blas_threads(self._blas_limit, self._work):
                x = self._product(a, b, c, alpha, beta)[0]
            x = np.ascontiguousarray(np.broadcast_to(x, (p.batch, p.m, p.n)))
            operands = [epilog_inputs.get(name) for name, _ in p.fused.operands]
            store_result(E.apply_cpu(p.fused.epilog, x, operands, True), d)
            return
        if self.native:  # float32 / float64 / complex64: the product in D itself, the epilog in place
            self._execute_native(a, b, c, d, {}, {}, alpha, beta)
            self.run_epilog(d, epilog_inputs)
            return
        with _threads.blas_threads(self._blas_limit, self._work):
            x = self._product(a, b, c, alpha, beta)[0]
        x = np.require(np.broadcast_to(x, (p.batch, p.m, p.n)), requirements=("C", "W"))  # the pass writes it
        self.run_epilog(x, epilog_inputs)
        store_result(x, d)

    def run_epilog(self, x, epilog_inputs):
        """The Python epilog in place on ``x`` (``(batch, M, N)``, C-contiguous, the compute dtype), on every
        thread; ``epilog_inputs``: its operand arrays by name."""
        operands = tuple(E.read_only(epilog_inputs.get(name)) for name, _ in self.problem.fused.operands)
        if self._epilog is None:
            epilog = self.problem.fused.epilog
            if _cpu_epilog.parallel(self.threads):  # (else no pass of this engine runs as a parallel loop)
                self._parallel = matmul_epilog_pass(epilog, len(operands), parallel=True)
            self._epilog = matmul_epilog_pass(epilog, len(operands))
        python_epilog_pass(self._epilog, x, operands, self.threads, self._parallel)
