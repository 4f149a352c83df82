"""The CPU engine's pass over a product's result: what cuBLASLt does after ``A @ B`` (alpha, ``beta * C``, the bias,
RELU or GELU, the RELU bitmask and the GELU aux), in one numba pass over D, a block of rows per thread, and a Python
epilog (:mod:`mathpy.jit._cpu_passes`) likewise. From :data:`mathpy._threads.PARALLEL_MIN_THREADS` threads on, the
pass is one numba ``parallel`` loop over the blocks (:func:`mathpy._threads.numba_team`), else the blocks go to
mathpy's pool (:func:`mathpy._threads.run_chunks`), as do a GELU's (its tanh in NumPy's vectorised ufuncs on each piece
of rows right after, while it is in cache) and an epilog that can raise (a parallel loop would lose the exception).

The pass walks D in memory order: its arrays are views ``(batch, P, Q)`` with Q the contiguous axis (for a row-major
D, P = M rows and Q = N columns; for a column-major D, the transposed view: P = N, Q = M). A bias and the aux outputs
exist only with a column-major D (the result layout convention of :mod:`._problem`), so they run along Q: the bias
``(batches, M)`` and the bitmask bytes and GELU aux of one column are contiguous, as cuBLASLt lays them out.

Definitions are :mod:`._epilog`'s: ``relu(x) = max(x, 0)`` (NaN stays NaN), the tanh approximation of GELU, bit ``i``
of the bitmask set when ``X[i] > 0``, padding bits and rows zero.
"""

import math
import threading

import numpy as np

from ... import _threads

__all__ = ["epilog_pass", "python_epilog_pass", "parallel"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715

#: Rows of a GELU pass are done in pieces of about this many bytes: the activation's NumPy ufuncs then run on data
#: in cache, and few enough pieces keep the GIL-held Python between them short.
SUB_BLOCK_BYTES = 1 << 18

_lock = threading.Lock()
_kernel = {}


def _get(name):
    if not _kernel:
        with _lock:
            if not _kernel:
                from . import _cpu_epilog_kernels as kernels  # (numba: on the first pass)
                _kernel.update((name, getattr(kernels, name)) for name in kernels.__all__)
    return _kernel[name]


def _blocks(x, threads):
    """How many blocks (and threads) a pass over ``x`` runs in."""
    return _threads.threads_for_bytes(threads, x.nbytes)


def parallel(blocks):
    """Whether a pass of ``blocks`` blocks runs as one numba parallel loop (else on the pool): on at least
    PARALLEL_MIN_THREADS threads, which numba's pool must have (``NUMBA_NUM_THREADS``). Fewer blocks never start
    numba's threads."""
    least = _threads.PARALLEL_MIN_THREADS
    return blocks >= least and _threads.numba_team_size(blocks) >= least


def _in_parallel(kernel, args, blocks):
    """``kernel(*args, team)``, a numba parallel loop of one block per thread of the team."""
    with _threads.numba_team(blocks) as team:
        result = kernel(*args, team)
    _threads.spun(_threads.numba_spin_seconds())
    return result


def _in_blocks(work, x, threads):
    """``work(start, stop)`` over the ``batch * P`` rows of ``x`` (at least one), a block per thread, on the pool."""
    count = x.shape[0] * x.shape[1]
    blocks = _blocks(x, threads)
    step = -(-count // blocks)
    _threads.run_chunks(lambda i: work(i * step, min(count, (i + 1) * step)), -(-count // step), blocks)


def epilog_pass(x, threads, *, alpha=None, c=None, beta=None, bias=None, activation=None, relu_aux=None,
                gelu_aux=None):
    """In place on ``x`` (``(batch, P, Q)``, Q contiguous): ``x = act(alpha * x + beta * c + bias)``, storing the
    pre-activation into ``gelu_aux`` and the bitmask of ``x > 0`` into ``relu_aux`` when given (views ``(batch, P,
    bytes)`` / ``(batch, P, rows)`` with their padding). ``c``: ``(1 or batch, P, Q)``; ``bias``: ``(1 or batch,
    Q)``; ``activation``: None, "relu", "gelu"."""
    if x.shape[0] * x.shape[1] == 0:  # no rows: nothing to pass over (an aux output has no row either)
        return
    dtype = x.dtype.type
    scaled = alpha is not None
    alpha, beta = dtype(1 if alpha is None else alpha), dtype(0 if beta is None else beta)
    blocks = _blocks(x, threads)
    if x.dtype.kind == "c" or (activation is None and bias is None and relu_aux is None and gelu_aux is None):
        if parallel(blocks):
            _in_parallel(_get("scale_rows_parallel"), (x, c, alpha, beta, scaled), blocks)
            return
        kernel = _get("scale_rows")
        _in_blocks(lambda start, stop: kernel(x, c, alpha, beta, scaled, start, stop), x, threads)
        return
    relu, zero = activation == "relu", dtype(0)
    gelu = activation == "gelu"
    if not gelu and parallel(blocks):
        _in_parallel(_get("rows_parallel"), (x, c, bias, relu_aux, gelu_aux, alpha, beta, scaled, relu, zero), blocks)
        return
    kernel = _get("rows")
    sub_rows = max(1, SUB_BLOCK_BYTES // max(1, x.shape[2] * x.itemsize))

    def work(start, stop):
        for first in range(start, stop, sub_rows if gelu else stop - start):  # GELU: in cache, right after
            last = min(stop, first + sub_rows) if gelu else stop
            kernel(x, c, bias, relu_aux, gelu_aux, alpha, beta, scaled, relu, zero, first, last)
            if gelu:
                _gelu_rows(x, first, last)
    _in_blocks(work, x, threads)


def _gelu_rows(x, start, stop):
    """GELU (the tanh approximation) in place on rows ``start..stop`` of ``x`` seen as ``(batch * P, Q)``, in NumPy
    ufuncs: their tanh is vectorised (numba's calls the C library's scalar one, 4x slower)."""
    p_count, dtype = x.shape[1], x.dtype.type
    k0, k0k1 = dtype(_SQRT_2_OVER_PI), dtype(_SQRT_2_OVER_PI * _GELU_C)
    while start < stop:
        b, p = divmod(start, p_count)
        rows = x[b, p:min(p_count, p + stop - start)]
        t = rows * rows
        t *= k0k1
        t += k0
        t *= rows  # k0 (x + c x^3)
        np.tanh(t, out=t)
        t += dtype(1)
        t *= dtype(0.5)
        rows *= t
        start += len(rows)


def python_epilog_pass(run, x, data, threads, loop=None):
    """A compiled Python epilog (:func:`mathpy.jit._cpu_passes.matmul_epilog_pass`) over ``x`` (``(batch, M, N)``,
    C-contiguous), in place, a block of rows per thread: in one numba parallel loop when ``loop`` (the same epilog's
    parallel pass) is given and the threads allow, else on the pool."""
    if x.shape[0] * x.shape[1] == 0:
        return
    blocks = _blocks(x, threads)
    if loop is not None and parallel(blocks):
        _in_parallel(loop, (x, data), blocks)
        return
    _in_blocks(lambda start, stop: run(x, data, start, stop), x, threads)
