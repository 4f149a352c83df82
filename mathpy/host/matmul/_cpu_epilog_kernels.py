"""The numba kernels of :mod:`._cpu_epilog`'s pass over a product's result, at module level so that numba caches them
on disk (``cache=True``): a parallel kernel took about 1 s to compile on 2 cores, once per dtype and set of inputs
(C, bias, aux outputs), and a process that finds them in the cache loads them in milliseconds. Imported on the first
pass only (``import mathpy`` does not import numba).

- ``rows(x, c, bias, relu_aux, gelu_aux, alpha, beta, scaled, relu, zero, start, stop)``: rows ``start..stop`` of
  ``x`` seen as ``(batch * P, Q)``;
- ``scale_rows(x, c, alpha, beta, scaled, start, stop)``: alpha and ``beta * c`` alone, any dtype, complex included;
- ``rows_parallel`` / ``scale_rows_parallel``: the same over every row, with ``blocks`` in place of ``start, stop``:
  one numba ``parallel`` loop of ``blocks`` blocks.
"""

import numba

__all__ = ["rows", "scale_rows", "rows_parallel", "scale_rows_parallel"]


@numba.njit(nogil=True, cache=True)
def rows(x, c, bias, relu_aux, gelu_aux, alpha, beta, scaled, relu, zero, start, stop):
    p_count, q_count = x.shape[1], x.shape[2]
    for r in range(start, stop):
        b = r // p_count
        p = r - b * p_count
        for q in range(q_count):
            v = x[b, p, q]
            if scaled:
                v = alpha * v
            if c is not None:
                v += beta * c[b if c.shape[0] > 1 else 0, p, q]
            if bias is not None:
                v += bias[b if bias.shape[0] > 1 else 0, q]
            if gelu_aux is not None:
                gelu_aux[b, p, q] = v
            if relu and v < zero:
                v = zero
            x[b, p, q] = v
        if gelu_aux is not None:
            for q in range(q_count, gelu_aux.shape[2]):
                gelu_aux[b, p, q] = zero
        if relu_aux is not None:
            for byte in range(relu_aux.shape[2]):
                bits = 0
                for bit in range(8):
                    q = byte * 8 + bit
                    if q < q_count and x[b, p, q] > zero:
                        bits |= 1 << bit
                relu_aux[b, p, byte] = bits

@numba.njit(nogil=True, cache=True)
def scale_rows(x, c, alpha, beta, scaled, start, stop):  # any dtype, complex included
    p_count = x.shape[1]
    for r in range(start, stop):
        b = r // p_count
        p = r - b * p_count
        for q in range(x.shape[2]):
            v = x[b, p, q]
            if scaled:
                v = alpha * v
            if c is not None:
                v += beta * c[b if c.shape[0] > 1 else 0, p, q]
            x[b, p, q] = v

@numba.njit(parallel=True, nogil=True, cache=True)
def rows_parallel(x, c, bias, relu_aux, gelu_aux, alpha, beta, scaled, relu, zero, blocks):
    count = x.shape[0] * x.shape[1]
    step = (count + blocks - 1) // blocks
    for block in numba.prange(blocks):
        rows(x, c, bias, relu_aux, gelu_aux, alpha, beta, scaled, relu, zero, block * step,
             min(count, (block + 1) * step))

@numba.njit(parallel=True, nogil=True, cache=True)
def scale_rows_parallel(x, c, alpha, beta, scaled, blocks):
    count = x.shape[0] * x.shape[1]
    step = (count + blocks - 1) // blocks
    for block in numba.prange(blocks):
        scale_rows(x, c, alpha, beta, scaled, block * step, min(count, (block + 1) * step))
