"""Staging and layout rules of the matmul API: how each operand reaches the engine, and how the result is stored.

The API gives the engine every operand's own strides (transposed and strided operands are not copied) and copies only
what one batch stride and one unit matrix stride cannot express (:func:`stage_matrix`), plus the layouts cuBLASLt has
no kernels for (:func:`stage_a`, :func:`stage_b`). A :class:`Staged` input records the decision;
:func:`bring` carries it out at execution time (copies and host <-> device moves, in the stream's order, through the
array package interface). :func:`result_layout` chooses D's order (see ``_problem``'s result layout convention).

>>> import numpy as np
>>> from mathpy._operands import wrap_operand
>>> a = np.zeros((2, 8, 6), np.float32)
>>> stage_matrix("a", wrap_operand(a.swapaxes(1, 2)), 6, 8, "row", (2,), False).layout.is_col_major
True
>>> stage_matrix("a", wrap_operand(a[:, :, ::2]), 8, 3, "row", (2,), False).mode     # no unit stride: a copy
'contiguous'
"""

import dataclasses
import math
import typing

import numpy as np

from ... import _operands
from ..._dtypes import FLOAT8_E4M3, FLOAT8_E5M2
from ..._strides import c_strides
from ._epilog import MatmulEpilog
from ._problem import MatrixLayout, col_major, row_major

_FLOAT8 = (FLOAT8_E4M3, FLOAT8_E5M2)

__all__ = ["Staged", "Product", "engine_dtype", "matrix_strides", "batch_stride", "stage_matrix", "stage_a", "stage_b",
           "c_in_d_order", "result_layout", "expand_c", "bring", "engine_view", "drop_vector_axes", "check_inplace",
           "inplace_layout", "strided_view"]


class Product(typing.NamedTuple):
    """The product's extents as the API resolved them: ``m x k @ k x n`` over ``batch_shape``; ``moves``: the
    operands cross between host and device; ``tn_gpu``: float8 or int8 operands on a GPU (cuBLASLt has kernels only
    for its "TN" form of them); ``bgrad``: "a"/"b" while a GPU plan is for BGRADA/BGRADB (they need their own A/B
    layouts); ``operand``: the dtype A and B enter the engine in (None: their own; else they are converted), except
    float8 operands, which enter as they are: e4m3 and e5m2 may be mixed (:func:`engine_dtype`)."""

    m: int
    n: int
    k: int
    batch_shape: tuple
    moves: bool
    tn_gpu: bool
    bgrad: str | None = None
    operand: np.dtype | None = None


@dataclasses.dataclass
class Staged:
    """One input as the engine will see it: its layout and how it is brought there (``mode``: None = used as it is,
    "contiguous" = a C-order copy, "broadcast" = a C-order copy broadcast to the full batch, "colmajor" = a copy with
    column-major matrices: the aux formats, C in D's order, A or B in the order cuBLASLt has kernels for). A copy is
    converted to ``layout.dtype`` when the operand's dtype differs (NumPy's promotion of mixed dtypes, bool as int8
    and C as int32 for cuBLASLt's integer kernels)."""

    name: str
    op: object  # the caller's Operand
    layout: MatrixLayout
    mode: str | None
    full_shape: tuple | None  # "broadcast" / "colmajor": the shape to broadcast to before copying (None: as is)
    move: bool  # crosses between host and device

    def signature(self):
        return (self.op.package, self.op.device_id, self.op.shape, self.op.dtype, self.layout, self.mode)

    def released(self):
        """The same input without the caller's array (its facts stay: checks and result placement need them)."""
        o = self.op
        return dataclasses.replace(self, op=_operands.Operand(None, o.package, o.shape, o.strides, o.dtype,
                                                              o.device_id, 0))

    def check_replacement(self, fresh):
        """ValueError (for ``reset_operands``) unless Staged ``fresh`` enters the plan as this input does."""
        if self.signature() != fresh.signature():
            o, f = self.op, fresh.op
            raise ValueError(f"reset_operands: {self.name} must match the operand the plan was built for (package "
                             f"{o.package}, device {o.device_id}, shape {o.shape}, dtype {o.dtype.name}, strides "
                             f"{o.strides}); got package {f.package}, device {f.device_id}, shape {f.shape}, dtype "
                             f"{f.dtype.name}, strides {f.strides}")


def matrix_strides(rows, cols, rs, cs):
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


def batch_stride(batch_shape, op_batch_shape, op_batch_strides, matrix_size):
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


def stage_matrix(name, op, rows, cols, promote, batch_shape, force_copy, dtype=None):
    """Layout of operand ``op`` (A, B or C) as a batched rows x cols matrix. ``promote``: None, "row" (1-D operand is
    one row: A) or "col" (1-D operand is one column: B). ``dtype``: the dtype the engine reads (None: op's own;
    another one makes a converted copy)."""
    dtype = op.dtype if dtype is None else np.dtype(dtype)
    move = force_copy  # callers pass "the operand crosses between host and device" here
    force_copy = force_copy or dtype != op.dtype

    def layout(shape, strides):
        if promote == "row" and len(shape) == 1:
            rs, cs, bshape, bstrides = 0, strides[0], (), ()
        elif promote == "col" and len(shape) == 1:
            rs, cs, bshape, bstrides = strides[0], 0, (), ()
        else:
            rs, cs, bshape, bstrides = strides[-2], strides[-1], shape[:-2], strides[:-2]
            rs = 0 if shape[-2] != rows else rs  # a broadcast row or column of c
            cs = 0 if shape[-1] != cols else cs
        matrix = matrix_strides(rows, cols, rs, cs)
        stride = batch_stride(batch_shape, bshape, bstrides, rows * cols)
        if matrix is None or stride is None:
            return None
        return MatrixLayout(rows, cols, matrix[0], matrix[1], math.prod(batch_shape), stride, dtype)

    if not force_copy:
        found = layout(op.shape, op.strides)
        if found is not None:
            return Staged(name, op, found, None, None, False)
    found = layout(op.shape, c_strides(op.shape))
    if found is not None:
        return Staged(name, op, found, "contiguous", None, move)
    full = (*batch_shape, rows, cols)
    return Staged(name, op, layout(full, c_strides(full)), "broadcast", full, move)


def engine_dtype(op, product):
    """The dtype operand ``op`` (A or B) enters the engine in: the product's promoted one, but a float8 operand's own
    (cuBLASLt multiplies e4m3 by e5m2 as they are; converting one to the other's format would round it again, or
    make e5m2 x e5m2, which has no algorithm)."""
    if op.dtype in _FLOAT8 or product.operand is None:
        return op.dtype
    return product.operand


def _col_major_staged(name, op, rows, cols, product):
    """``op`` (2-D or more) copied into column-major matrices with contiguous (or one broadcast) batches."""
    batch = math.prod(product.batch_shape)
    full = None if op.ndim == 2 else (*product.batch_shape, rows, cols)
    layout = MatrixLayout(rows, cols, 1, max(rows, 1), batch, 0 if full is None else rows * cols,
                          engine_dtype(op, product))
    return Staged(name, op, layout, "colmajor", full, product.moves)


def stage_a(op, product):
    """A as the engine sees it (in ``product.operand``'s dtype). On the GPU, float8 and int8 take only a row-major A
    (cuBLASLt's "TN" form) and BGRADA only a column-major one (op(A) = N; measured with cuBLASLt 13.1 on an H200: the
    other layouts get no algorithm)."""
    m, k, batch_shape, moves = product.m, product.k, product.batch_shape, product.moves
    dtype = engine_dtype(op, product)
    staged = stage_matrix("a", op, m, k, "row", batch_shape, moves, dtype)
    if product.tn_gpu and m > 1 and not staged.layout.is_row_major:
        return dataclasses.replace(stage_matrix("a", op, m, k, "row", batch_shape, True, dtype), move=moves)
    if product.bgrad == "a" and not staged.layout.is_col_major:
        return _col_major_staged("a", op, m, k, product)
    return staged


def stage_b(op, product):
    """B as the engine sees it: float8 and int8 need a column-major B, BGRADB a row-major one (op(B) = T)."""
    n, k, batch_shape, moves = product.n, product.k, product.batch_shape, product.moves
    dtype = engine_dtype(op, product)
    staged = stage_matrix("b", op, k, n, "col", batch_shape, moves, dtype)
    if product.tn_gpu and not staged.layout.is_col_major:
        if op.ndim == 1:
            return dataclasses.replace(stage_matrix("b", op, k, n, "col", batch_shape, True, dtype), move=moves)
        return _col_major_staged("b", op, k, n, product)
    if product.bgrad == "b" and n > 1 and not staged.layout.is_row_major:
        return dataclasses.replace(stage_matrix("b", op, k, n, "col", batch_shape, True, dtype), move=moves)
    return staged


def c_in_d_order(staged, d_layout, product):
    """C in D's order: cuBLASLt reads C as D is stored (a row-major C with a column-major D is copied)."""
    if not d_layout.is_col_major or staged.layout.is_col_major:
        return staged
    m, n, batch_shape = product.m, product.n, product.batch_shape
    layout = col_major(m, n, math.prod(batch_shape), staged.layout.dtype)
    return dataclasses.replace(staged, layout=layout, mode="colmajor", full_shape=(*batch_shape, m, n))


#: Epilogs that act elementwise with no per-row operand: the result may be stored row- or column-major.
ANY_ORDER_EPILOGS = (MatmulEpilog.DEFAULT, MatmulEpilog.RELU, MatmulEpilog.GELU)


def result_layout(epilog, d_dtype, a, b, c, product, result_order=None):
    """D's layout (``_problem``'s convention). ``result_order`` "C" (row-major) or "F" (column-major) when the caller
    asks; else nvmath-python's rule: C's order when C is given, column-major with a per-row epilog operand, else
    A's order (B's when A is a single row or column, whose order says nothing; row-major when neither says).
    ``a``, ``b``, ``c``: the Staged inputs (``c`` as given, or None).

    >>> from mathpy._operands import wrap_operand
    >>> p = Product(4, 5, 3, (), False, False)
    >>> a, b = stage_a(wrap_operand(np.ones((4, 3))), p), stage_b(wrap_operand(np.ones((3, 5))), p)
    >>> result_layout(None, np.dtype(np.float32), a, b, None, p).is_row_major          # C-ordered operands
    True
    >>> result_layout(MatmulEpilog.BIAS, np.dtype(np.float32), a, b, None, p).is_col_major   # a per-row bias
    True
    >>> result_layout(None, np.dtype(np.float32), a, b, None, p, "F").is_col_major
    True
    """
    m, n, batch = product.m, product.n, math.prod(product.batch_shape)
    per_row = not (epilog in ANY_ORDER_EPILOGS or epilog is None)
    if per_row:
        if result_order == "C":
            raise ValueError(f"result_order='C' is not possible with epilog {epilog.name}: its per-row operand "
                             f"needs a column-major result (use result_order=None or 'F')")
        is_row_major = False
    elif result_order is not None:
        is_row_major = result_order == "C"
    else:
        is_row_major = None
        for staged in (c, a, b):  # the first whose order says something
            if staged is not None and is_row_major is None:
                is_row_major = _row_major_order(staged.op)
        is_row_major = is_row_major is not False
    if is_row_major:
        return row_major(m, n, batch, d_dtype)
    return col_major(m, n, batch, d_dtype)


def _row_major_order(op):
    """Whether the caller's operand holds row-major (True) or column-major (False) matrices; None when they are a
    single row or column (or the operand is 1-D): either order describes them. Only a unit stride down the columns
    (and none along the rows) is column-major; every other layout is copied in C order or is row-major."""
    if op.ndim < 2 or op.shape[-2] <= 1 or op.shape[-1] <= 1:
        return None
    return not (op.strides[-2] == 1 and op.strides[-1] != 1)


def expand_c(c_op, result_shape, vector_a, vector_b):
    """c as an operand of rank ``len(batch_shape) + 2``: the axes a 1-D a or b removed from the result put back."""
    tensor = c_op.tensor
    rank = len(result_shape)
    if len(c_op.shape) < rank:
        tensor = tensor[(None,) * (rank - len(c_op.shape))]
    if vector_a:
        tensor = tensor[(Ellipsis, None, slice(None)) if not vector_b else (Ellipsis, None)]
    if vector_b:
        tensor = tensor[(Ellipsis, None)]
    return _operands.wrap_operand(tensor, "c")


def bring(staged, device_id, stream):
    """Carry out ``staged``'s copies and moves: the Operand the engine reads (``device_id`` None: the CPU engine).
    Copies run in the order of raw ``stream`` (the caller makes it current: ``PackageStream.scope()``)."""
    op = staged.op
    if staged.move and not op.on_host:  # device -> host
        op = _operands.to_host(op, stream)
    tensor, package = op.tensor, op.interface
    if op.dtype != staged.layout.dtype:  # promoted (mixed dtypes), or bool as int8 / C as int32 for cuBLASLt
        tensor = package.astype(tensor, staged.layout.dtype)
    if staged.mode == "colmajor":
        if staged.full_shape is not None:
            tensor = package.broadcast_to(tensor, staged.full_shape)
        tensor = _col_major_copy(tensor, package)
    elif staged.mode is not None:
        if staged.full_shape:
            tensor = package.broadcast_to(tensor, staged.full_shape)
        tensor = package.contiguous(tensor)
    result = _operands.wrap_operand(tensor)
    if staged.move and result.on_host and device_id is not None:  # host -> device
        result = _operands.to_device(result, device_id, stream)
        if staged.mode == "colmajor":
            result = _operands.wrap_operand(_col_major_copy(result.tensor, result.interface))
    return result


def _col_major_copy(tensor, package):
    """A copy whose last two axes are column-major (batches contiguous)."""
    return package.swap_last(package.contiguous(package.swap_last(tensor)))


def engine_view(layout, base):
    """The CPU engine's ``(batch, rows, cols)`` NumPy view of A, B, C or D held in ``base`` (element strides)."""
    return strided_view(base, (layout.batch, layout.rows, layout.cols),
                        (layout.batch_stride, layout.row_stride, layout.col_stride))


def strided_view(base, shape, strides):
    """A NumPy view of ``base``'s memory with element strides (dtypes NumPy cannot stride directly go as integers)."""
    itemsize, dtype = base.itemsize, base.dtype
    raw = base.view(f"u{itemsize}") if dtype.kind not in "biufcO" or dtype.isbuiltin != 1 else base
    view = np.lib.stride_tricks.as_strided(raw, shape, tuple(s * itemsize for s in strides), writeable=True)
    return view if raw is base else view.view(dtype)


def drop_vector_axes(d, vector_a, vector_b, numpy_scalar):
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


def check_inplace(c_op, result_shape, d_dtype):
    """In place, c is the result: it must be given, have the result's shape and dtype, and be writable."""
    if c_op is None:
        raise ValueError("MatmulOptions(inplace=True) writes the result into c: pass c")
    if tuple(c_op.shape) != tuple(result_shape):
        raise ValueError(f"in place, c must have the result's shape {tuple(result_shape)} (it cannot be broadcast); "
                         f"c has shape {tuple(c_op.shape)}")
    if c_op.dtype != d_dtype:
        raise TypeError(f"in place, c must have the result's dtype {d_dtype.name}; c is {c_op.dtype.name} (set "
                        f"MatmulOptions.result_type={c_op.dtype.name!r} if that is the result you want)")
    if c_op.package == "numpy" and not c_op.tensor.flags.writeable:
        raise ValueError("in place, c must be writable; it is a read-only NumPy array")


def inplace_layout(c_given, epilog):
    """D's layout in place: C's own (ValueError when it cannot hold D: broadcast batches, or a row-major C with an
    epilog that needs a column-major result)."""
    layout = c_given.layout
    if layout.batch > 1 and layout.batch_stride == 0:
        raise ValueError("in place, c cannot repeat one matrix over the batch (a batch stride of 0)")
    if epilog not in (None, *ANY_ORDER_EPILOGS) and not layout.is_col_major:
        raise ValueError(f"in place with epilog {epilog.name}, c must be column-major in its last two axes (the "
                         f"epilog needs a column-major result): e.g. np.asfortranarray(c) or c.mT.contiguous().mT")
    return layout
