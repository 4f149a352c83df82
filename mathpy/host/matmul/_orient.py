"""How a :class:`~._problem.MatmulProblem` maps onto cuBLASLt's operands (pure Python, tested without a GPU).

**Layouts.** cuBLASLt is column-major: it computes ``D = op(A) @ op(B)`` where each operand is stored column-major
(``rows x cols`` with a leading dimension ``ld``) and ``op`` is N (as stored) or T (transposed). A row-major matrix
``X`` (``col_stride == 1``) is the column-major storage of ``X.T``, so it enters as that storage with ``op = T``; no
copy is made. The result D (and C) must be stored column-major as they are (cuBLASLt supports only ``op(C) = N``):

- D column-major (always the case with an epilog that has a per-row operand or output): the product is taken as it
  is.
- D row-major (the API's choice for no epilog / RELU / GELU, see ``_problem``): ``D.T = B.T @ A.T`` is computed instead,
  with D.T column-major (the swap of operands and of M and N that BLAS users know). Elementwise epilogs (RELU, GELU)
  are unaffected; BGRADA and BGRADB swap roles; bias and aux epilogs need a column-major D (the API ensures it).

>>> from mathpy.host.matmul._problem import row_major, col_major
>>> as_column_major(row_major(3, 5, 1, "float32"))   # a row-major 3 x 5 is the column-major 5 x 3 storage, op T
(<Operation.T: 1>, 5, 3, 5)
>>> as_column_major(col_major(3, 5, 1, "float32"))
(<Operation.N: 0>, 3, 5, 3)
"""

from ..._errors import UnsupportedLayoutError
from ...bindings import cublaslt as lt
from ._epilog import MatmulEpilog

__all__ = ["as_column_major", "orient", "SWAPPED_EPILOGS", "SWAPPED_SCALES", "Operation"]

Operation = lt.Operation


def as_column_major(layout, prefer=None):
    """``(op, rows, cols, ld)``: ``layout`` (a logical matrix as it enters the product) as cuBLASLt's column-major
    storage ``rows x cols`` with leading dimension ``ld`` and the ``op`` that turns that storage into the matrix.
    ``prefer=Operation.T``: a one-row or one-column matrix, which fits either form, enters transposed (BGRADB has
    kernels only for op(B) = T). Raises UnsupportedLayoutError when neither stride is 1 (the API copies such operands
    first).

    >>> from mathpy.host.matmul._problem import row_major, col_major
    >>> as_column_major(row_major(1, 5, 1, "float32"))                      # one row: as stored
    (<Operation.N: 0>, 1, 5, 1)
    >>> as_column_major(row_major(1, 5, 1, "float32"), prefer=Operation.T)  # or transposed, when a kernel needs it
    (<Operation.T: 1>, 5, 1, 5)
    >>> as_column_major(col_major(4, 1, 1, "float32"), prefer=Operation.T)
    (<Operation.T: 1>, 1, 4, 1)
    """
    r, c, rs, cs = layout.rows, layout.cols, layout.row_stride, layout.col_stride
    if prefer is Operation.T and c == 1:  # one column: the 1 x r storage of its transpose, elements rs apart
        return Operation.T, 1, r, max(rs, 1)
    if prefer is Operation.T and r == 1 and cs == 1:  # one contiguous row: the c x 1 storage of its transpose
        return Operation.T, c, 1, max(c, 1)
    if r == 1:  # one row: the row stride is never used; store it as a 1 x c column-major matrix
        rs = 1
    if c == 1:  # one column: the column stride is never used
        cs = max(r, 1) if rs == 1 else 1
    if rs == 1 and cs >= max(r, 1):
        return Operation.N, r, c, cs
    if cs == 1 and rs >= max(c, 1):
        return Operation.T, c, r, rs
    raise UnsupportedLayoutError(f"a {r} x {c} matrix with strides ({layout.row_stride}, {layout.col_stride}) has no "
                                 f"unit stride with a leading dimension covering the other extent; cuBLASLt needs "
                                 f"row- or column-major storage (copy it first)")


def orient(problem):
    """``(swap, a, b, c, d)``: the problem's layouts in the orientation cuBLASLt computes, where D is column-major.
    ``swap`` is True when D is row-major and ``D.T = B.T @ A.T`` is computed instead (a and b are then B.T and A.T)."""
    d = problem.d
    if d.row_stride == 1 or d.cols == 1 or d.rows == 1:
        return False, problem.a, problem.b, problem.c, d
    if d.col_stride != 1:
        raise UnsupportedLayoutError(f"the result must be row- or column-major, not strides ({d.row_stride}, "
                                     f"{d.col_stride})")
    c = None if problem.c is None else problem.c.transposed()
    return True, problem.b.transposed(), problem.a.transposed(), c, d.transposed()


#: The scale pointers of A and B trade places with the operands when ``D.T = B.T @ A.T`` is computed.
SWAPPED_SCALES = {lt.MatmulDesc.A_SCALE_POINTER: lt.MatmulDesc.B_SCALE_POINTER,
                  lt.MatmulDesc.B_SCALE_POINTER: lt.MatmulDesc.A_SCALE_POINTER}

SWAPPED_EPILOGS = {None: None, MatmulEpilog.RELU: MatmulEpilog.RELU, MatmulEpilog.GELU: MatmulEpilog.GELU,
                    MatmulEpilog.BGRADA: MatmulEpilog.BGRADB, MatmulEpilog.BGRADB: MatmulEpilog.BGRADA}
