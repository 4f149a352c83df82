"""Reference helpers shared by the matmul tests, written independently of mathpy's implementation: the RELU bitmask
format of ``mathpy.host.matmul._epilog`` bit by bit, byte strides of any array mathpy accepts, the process's RSS."""

import math

import numpy as np


def pack_ref(mask):
    """A boolean ``(..., M, N)`` mask as the RELU bitmask: uint8 ``(..., rows, N)``, rows = ceil(M / 8) rounded up to
    16, bit i of column j in bit i % 8 (LSB first) of byte [i // 8, j], padding bits zero."""
    *batch, m, n = mask.shape
    rows = -(-math.ceil(m / 8) // 16) * 16
    out = np.zeros((*batch, rows, n), np.uint8)
    for i in range(m):
        out[..., i // 8, :] |= (mask[..., i, :].astype(np.uint8) << (i % 8))
    return out


def bits_ref(aux, m):
    """The boolean ``(..., m, N)`` mask held in a RELU bitmask: bit i of column j is bit i % 8 (LSB first) of byte
    [i // 8, j]."""
    return np.stack([(aux[..., i // 8, :] >> (i % 8)) & 1 for i in range(m)], axis=-2).astype(bool)


def strides_in_bytes(array):
    """Strides in bytes of a NumPy/CuPy/torch array (torch counts them in elements)."""
    from mathpy._operands import wrap_operand
    op = wrap_operand(array)
    return tuple(s * op.dtype.itemsize for s in op.strides)


def rss_bytes():
    """This process's resident set size (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
