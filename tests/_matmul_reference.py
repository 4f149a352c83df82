"""Reference helpers shared by the matmul tests, written independently of mathpy's implementation: the RELU bitmask
format of ``mathpy.host.matmul._epilog`` bit by bit, numpy.matmul's product written out in exact arithmetic, byte
strides of any array mathpy accepts, the process's RSS."""

import decimal
import fractions
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


def _exact(x):
    """A NumPy scalar as an exact Python number: int (bool as 0/1), Fraction, or a (real, imag) pair of Fractions."""
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer, fractions.Fraction)):
        return int(x) if isinstance(x, np.integer) else x
    if isinstance(x, (complex, np.complexfloating)):
        return (_exact(x.real), _exact(x.imag))
    return fractions.Fraction(*x.as_integer_ratio())


def _times(x, y):
    if isinstance(x, tuple) or isinstance(y, tuple):
        (xr, xi), (yr, yi) = (x if isinstance(x, tuple) else (x, 0)), (y if isinstance(y, tuple) else (y, 0))
        return (xr * yr - xi * yi, xr * yi + xi * yr)
    return x * y


def _plus(x, y):
    if isinstance(x, tuple) or isinstance(y, tuple):
        (xr, xi), (yr, yi) = (x if isinstance(x, tuple) else (x, 0)), (y if isinstance(y, tuple) else (y, 0))
        return (xr + yr, xi + yi)
    return x + y


def exact_matmul(a, b):
    """numpy.matmul's product of NumPy arrays ``a`` and ``b`` written out element by element in exact arithmetic
    (Python ints and Fractions: no rounding, no NumPy loop): an object array of numpy.matmul's result shape (1-D
    operands and batch broadcasting as numpy.matmul's)."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2, b2 = np.broadcast_to(a2, (*batch, m, k)), np.broadcast_to(b2, (*batch, k, n))
    out = np.empty((*batch, m, n), dtype=object)
    for index in np.ndindex(*batch, m, n):
        *where, i, j = index
        total = 0
        for p in range(k):
            total = _plus(total, _times(_exact(a2[(*where, i, p)]), _exact(b2[(*where, p, j)])))
        out[index] = total
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def as_result(exact, dtype):
    """``exact`` (from :func:`exact_matmul`) as numpy.matmul's result of ``dtype``: integers modulo 2**bits (NumPy's
    wrap-around), bool as "some term is true"; for floating-point dtypes the exact value to long double precision
    (about 1e-19 relative: far below any result's rounding), to compare within a derived bound."""
    dtype = np.dtype(dtype)
    values = np.asarray(exact, dtype=object)
    if dtype.kind == "b":
        return np.vectorize(lambda v: v != 0, otypes=[bool])(values)
    if dtype.kind in "iu":
        bits = 8 * dtype.itemsize
        low = -(1 << (bits - 1)) if dtype.kind == "i" else 0
        return np.vectorize(lambda v: ((v - low) % (1 << bits)) + low, otypes=[object])(values).astype(dtype)
    if dtype.kind == "c":
        part = np.vectorize(lambda v, k: _long_double(v[k] if isinstance(v, tuple) else (v if k == 0 else 0)),
                            otypes=[np.longdouble])
        return part(values, 0) + 1j * part(values, 1).astype(np.clongdouble)
    return np.vectorize(_long_double, otypes=[np.longdouble])(values)


def _long_double(value):
    """An exact rational as the nearest long double (through a 30-digit decimal: long double has at most 21)."""
    value = fractions.Fraction(value)
    with decimal.localcontext() as context:
        context.prec = 30
        return np.longdouble(format(decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator), ".25e"))
