"""numpy.matmul's rules for shapes: the product's M, N, K and batch with 1-D operands promoted and batch dimensions
broadcast, ``c``'s broadcast to the result, and ``out``'s shape (the matmul API's counterpart of
:mod:`mathpy.host.fft._numpy_rules`). NumPy's exception types, and its words where a program may match them.

>>> from types import SimpleNamespace as Op
>>> product_shape(Op(ndim=3, shape=(5, 2, 3)), Op(ndim=1, shape=(3,)))    # (m, n, k, batch, result)
(2, 1, 3, (5,), (5, 2))
"""

import numpy as np

__all__ = ["product_shape", "check_c_shape", "check_out_shape"]


def product_shape(a_op, b_op):
    """``(m, n, k, batch shape, result shape)`` of ``a @ b`` with numpy.matmul's rules (1-D operands promoted, batch
    dimensions broadcast); ValueError naming both shapes when they do not match."""
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
    return m, n, k, batch_shape, result_shape


def check_c_shape(c_op, result_shape):
    """ValueError when operand ``c`` (or None) does not broadcast to the result's shape."""
    if c_op is None or tuple(c_op.shape) == result_shape:
        return
    try:
        ok = np.broadcast_shapes(c_op.shape, result_shape) == result_shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"c has shape {c_op.shape}, which does not broadcast to the result's shape {result_shape}")


_SIGNATURE = "(n?,k),(k,m?)->(n?,m?)"


def check_out_shape(shape, batch_shape, core):
    """numpy.matmul's rule for ``out``'s ``shape``: its last ``len(core)`` axes are the result's core dimensions
    (M and N, without those of 1-D operands), and the operands' ``batch_shape`` broadcasts to the axes before them
    (NumPy's ValueErrors and words otherwise).

    >>> check_out_shape((5, 2, 4), (), (2, 4))          # the result, repeated 5 times
    >>> check_out_shape((2, 3), (), (2, 4))
    Traceback (most recent call last):
    ...
    ValueError: matmul: Output operand 0 has a mismatch in its core dimension 1, with gufunc signature \
(n?,k),(k,m?)->(n?,m?) (size 3 is different from 4)
    """
    if len(shape) < len(core):
        raise ValueError(f"matmul: Output operand 0 does not have enough dimensions (has {len(shape)}, gufunc core "
                         f"with signature {_SIGNATURE} requires {len(core)})")
    for index, (extent, wanted) in enumerate(zip(shape[len(shape) - len(core):], core)):
        if extent != wanted:
            raise ValueError(f"matmul: Output operand 0 has a mismatch in its core dimension {index}, with gufunc "
                             f"signature {_SIGNATURE} (size {extent} is different from {wanted})")
    loop = shape[:len(shape) - len(core)]
    try:
        broadcast = tuple(np.broadcast_shapes(loop, batch_shape))
    except ValueError:
        broadcast = batch_shape
    if broadcast != loop:
        raise ValueError(f"non-broadcastable output operand with shape {shape} doesn't match the broadcast shape "
                         f"{(*broadcast, *core)}")
