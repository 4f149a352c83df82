"""A matmul epilog on the CPU with ``check_bounds``: compiled with numba's ``boundscheck=True`` and run by a loop that
stops at the first element whose call fails; that call is run again in Python on a guarded ``data`` to name the
index (:func:`mathpy.jit._bounds.locate_epilog`)."""

import threading

import numpy as np

from ._bounds import locate_epilog

__all__ = ["run_checked"]

_lock = threading.Lock()
_loops = {}


def _loop(with_batch):
    if with_batch in _loops:
        return _loops[with_batch]
    import numba

    if with_batch:  # one loop for both signatures: the call is the only difference
        call = numba.njit(lambda f, value, b, i, j, data: f(value, b, i, j, data))
    else:
        call = numba.njit(lambda f, value, b, i, j, data: f(value, i, j, data))

    @numba.njit(cache=False)
    def loop(f, x, data, out):
        for b in range(x.shape[0]):
            for i in range(x.shape[1]):
                for j in range(x.shape[2]):
                    try:
                        out[b, i, j] = call(f, x[b, i, j], b, i, j, data)
                    except Exception:  # numba's bounds check: the element is named in Python
                        return (b * x.shape[1] + i) * x.shape[2] + j
        return -1

    with _lock:
        _loops[with_batch] = loop
    return loop


def run_checked(epilog, jitted, x, data, out):
    """``out[b, i, j] = epilog(x[b, i, j], ...)`` with ``jitted`` (``epilog.function`` compiled with
    ``boundscheck=True``); OutOfBoundsError at the first element that indexes ``data`` out of bounds."""
    failed = _loop(epilog.with_batch)(jitted, x, data, out)
    if failed >= 0:
        b, i, j = np.unravel_index(failed, x.shape)
        raise locate_epilog(epilog.function, epilog.with_batch, epilog.where, x[b, i, j], (b, i, j), data)
