"""The matmul problem as both engines (CPU and cuBLASLt) see it, after the API resolved numpy.matmul semantics.

``D = epilog(alpha * A @ B + beta * C)`` for a batch of ``batch`` products ``(M x K) @ (K x N)``.

Every operand is a :class:`MatrixLayout`: the logical matrix as it enters the product (A: M x K, B: K x N, C and D:
M x N; no transpose flags: a transposed operand simply has ``col_stride == 1``), with strides in elements. The API
guarantees for A, B, C and D:

- one of the two matrix strides is 1 (``row_stride == 1``: column-major with leading dimension ``col_stride``;
  ``col_stride == 1``: row-major with leading dimension ``row_stride``); for a matrix with one row or one column the
  strides are normalised so that this holds and the leading dimension is at least the other extent (``>= 1``);
  operands whose layout cannot be expressed so are copied by the API before the engine sees them;
- the whole batch is one stride (``batch_stride``; 0 = the same matrix for every batch, only for A, B and C);
- D never overlaps an input.

**Result layout convention** (both engines follow it; the API allocates D; batches always contiguous,
``batch_stride == M * N``):

- with an epilog that has a per-row operand or output (BIAS*, *_AUX*, DRELU*, DGELU*, BGRADA, BGRADB): D is
  column-major in its last two axes (``row_stride == 1``, ``col_stride == M``; as an array of shape ``(*batch, M, N)``
  its strides are ``(..., 1, M)``). This is what lets a bias be "one value per row of the result" as in nvmath-python
  and cuBLASLt;
- with no epilog, RELU or GELU (elementwise, no per-row operand): D takes C's order when ``c`` is given (so
  ``beta * C`` reads and writes alike); without ``c``, D is row-major (C order, as numpy.matmul gives) when the
  operands and the result have 4 bytes or more per element (float32, float64, complex) unless A and B are both
  column-major, and column-major for 16-bit and float8 operands. cuBLASLt then
  runs NN on row-major float32 operands instead of TT: measured on an H200 (cuBLASLt 13.1), 4096^3 float32 took
  2.674 ms NN vs 2.791 ms TT, while 8192^3 bfloat16 / float16 took 1.398 / 1.481 ms TT vs 1.432 / 1.539 ms NN.

Epilog inputs and outputs are ``(name, MatrixLayout)`` pairs in the formats :mod:`._epilog` documents (each made
by its handler in :mod:`._epilog_operands`):

- ``bias`` / bias gradients: ``rows = L`` (M, or N for ``bgradb``), ``cols = 1``, ``row_stride = 1``,
  ``col_stride = L``, ``batch_stride`` in elements (0 = one bias for every batch). Dtype: see ``_epilog``.
- ``gelu_aux``: ``rows = M``, ``cols = N``, ``row_stride = 1``, ``col_stride = gelu_aux_rows(M)`` (cuBLASLt's
  EPILOGUE_AUX_LD), ``batch_stride`` (EPILOGUE_AUX_BATCH_STRIDE), in elements.
- ``relu_aux``: the same, but **strides are in bits**, cuBLASLt's unit for the bitmask: ``col_stride =
  8 * relu_aux_rows(M)``, ``batch_stride = 8 * relu_aux_rows(M) * N`` (or 0 as an input broadcast over batches);
  ``dtype`` is uint8, the dtype of the tensor that holds the bits.

>>> lay = col_major(3, 4, 2, np.float32)
>>> lay.row_stride, lay.col_stride, lay.batch_stride, lay.is_col_major
(1, 3, 12, True)
"""

import dataclasses
import operator

import numpy as np

from ._epilog import MatmulEpilog, epilog_spec

__all__ = ["MatrixLayout", "MatmulProblem", "col_major", "row_major"]


@dataclasses.dataclass(frozen=True)
class MatrixLayout:
    """One operand as a cuBLASLt-style batched matrix: logical (rows, cols) as it enters the product, row/col strides
    in elements (bits for ``relu_aux``), batch count and batch stride (0 = broadcast), dtype."""

    rows: int
    cols: int
    row_stride: int
    col_stride: int
    batch: int
    batch_stride: int
    dtype: np.dtype

    @property
    def is_col_major(self):
        return self.row_stride == 1

    @property
    def is_row_major(self):
        return self.col_stride == 1 and self.row_stride != 1

    @property
    def ld(self):
        """The leading dimension (the stride that is not 1)."""
        return self.col_stride if self.row_stride == 1 else self.row_stride

    def transposed(self):
        """The same memory seen as the transposed matrix."""
        return dataclasses.replace(self, rows=self.cols, cols=self.rows, row_stride=self.col_stride,
                                   col_stride=self.row_stride)


def col_major(rows, cols, batch, dtype):
    """A fresh column-major layout with contiguous batches."""
    return MatrixLayout(rows, cols, 1, max(rows, 1), batch, rows * cols, np.dtype(dtype))


def row_major(rows, cols, batch, dtype):
    """A fresh row-major layout with contiguous batches."""
    return MatrixLayout(rows, cols, max(cols, 1), 1, batch, rows * cols, np.dtype(dtype))


@dataclasses.dataclass(frozen=True)
class MatmulProblem:
    """``D = epilog(alpha * A @ B + beta * C)``, batched, as the engines see it (see the module docstring).

    ``batch_shape`` is the numpy.matmul batch shape of the result (``batch == prod(batch_shape)``); ``compute_type``
    is a cuBLAS compute type name without its prefix ("32F", "32F_FAST_TF32", "64F", ...), ``scale_type`` the dtype of
    alpha and beta; ``a_scale``/``b_scale``/``d_scale`` the float8 scale factors (None when unused; D = d_scale *
    epilog(alpha * a_scale * b_scale * A @ B + beta * C)); ``inplace``: D is written into C's memory (``c == d``).
    Besides the epilog's own outputs, ``epilog_outputs`` may hold ``("result_amax", ...)``: the largest absolute value
    of the result before ``d_scale`` (float8 results), and ``("gelu_aux_amax", ...)``: that of the GELU aux before
    ``aux_scale`` (a float8 aux, whose dtype is its layout's)."""

    m: int
    n: int
    k: int
    batch: int
    batch_shape: tuple
    a: MatrixLayout
    b: MatrixLayout
    c: MatrixLayout | None
    d: MatrixLayout
    compute_type: str
    scale_type: np.dtype
    epilog: MatmulEpilog | None
    epilog_inputs: tuple  # ((name, MatrixLayout), ...)
    epilog_outputs: tuple  # ((name, MatrixLayout), ...)
    a_scale: float | None = None
    b_scale: float | None = None
    d_scale: float | None = None
    aux_scale: float | None = None  # a float8 GELU aux: stored as aux_scale * X
    inplace: bool = False  # D is C's memory (c and d have the same layout)
    fused: object = None  # a ``_fused.FusedEpilog`` (Python epilog and its data layout) when epilog is None

    def __post_init__(self):  # plan caches hash problems on every stateless call: hash once
        object.__setattr__(self, "_hash", hash(_fields_of_problem(self)))

    def __hash__(self):
        return self._hash

    @property
    def key(self):
        """Hashable; equal for problems that can share a plan."""
        return self

    @property
    def spec(self):
        return epilog_spec(self.epilog)


_fields_of_problem = operator.attrgetter(*(f.name for f in dataclasses.fields(MatmulProblem)))
