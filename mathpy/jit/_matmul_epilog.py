"""Python matmul epilogs: checking them, compiling them into the GEMM kernels (GPU) and running them with numba (CPU).

A matmul epilog is ``f(value, row, col, data) -> value`` or ``f(value, batch, row, col, data) -> value``: ``value`` is
one element of ``alpha * A @ B + beta * C`` in the compute precision (float32 for float16/bfloat16/float32 operands,
float64 for float64), ``row`` / ``col`` (and ``batch``) its int64 coordinates in the result, ``data`` the read-only
array given as ``epilog_inputs={"data": x}`` or None. The value returned is rounded to the result's dtype and stored.

In the Hopper kernel (compute capability 9.0) with a float16 or bfloat16 result, the function's float32 divisions
are compiled as ``div.full.f32`` (at most 2 ulp, 2^-22 relative, far below the result's rounding) instead of IEEE
division, whose branch to a rare slow path per division kept the GPU from overlapping the elements' work; other
results keep IEEE division.

``data`` is indexed like a NumPy array of its own shape and strides (``data[row, col]``, ``data[row]``,
``data[batch, row, col]``); float16 and bfloat16 data read as float32 (exactly), so the function sees the same
values on the CPU and the GPU. On the GPU it is read through the read-only data cache (``ld.global.nc``): it must not
overlap the result. Indices that every call reaches and that the function's source shows are checked against the
data's shape when planning (a ValueError names what it needs); others are checked only with ``check_bounds``
(:mod:`mathpy.jit._bounds`), otherwise not (as in numba kernels): index inside the array.

Errors are raised before any work and name the function's file and line: ``TypeError`` for a wrong number of
parameters or a function that returns nothing, ``ValueError`` for an unsupported data dtype or shape, and
:class:`mathpy.CallbackCompileError` when numba cannot compile the function.
"""

import dataclasses
import threading

import numpy as np

from .._errors import CallbackCompileError
from ._spec import _returns, describe_function

__all__ = ["MatmulEpilogFunction", "DATA_DTYPES", "as_matmul_epilog", "data_compute_dtype", "apply_cpu",
           "device_function", "data_view_maker", "wrap_compile_error"]

#: dtypes a ``data`` array may have (NumPy names; bfloat16 as torch / ml_dtypes name it).
DATA_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
_NAMES = {4: "f(value, row, col, data)", 5: "f(value, batch, row, col, data)"}


@dataclasses.dataclass(frozen=True)
class MatmulEpilogFunction:
    """A checked user epilog: the Python function, whether it takes the batch index, and ``where`` (name, file:line)
    for messages. Hashable by the function's identity (plans key on it)."""

    function: object
    with_batch: bool
    where: str

    def __repr__(self):
        return f"<matmul epilog {self.where}>"


_checked = {}  # code object -> (parameter count)


def as_matmul_epilog(fn):
    """``fn`` checked as a matmul epilog (see the module docstring), or TypeError naming what is wrong."""
    import inspect

    py = getattr(fn, "py_func", fn)  # accept numba dispatchers
    if not inspect.isfunction(py):
        raise TypeError(f"a matmul epilog must be a Python function, got {type(fn).__name__}")
    where = describe_function(py)
    count = _checked.get(py.__code__)
    if count is None:
        params = list(inspect.signature(py).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != len(params) or len(params) not in _NAMES:
            raise TypeError(f"matmul epilog {where} must take 4 or 5 positional parameters, {_NAMES[4]} or "
                            f"{_NAMES[5]}; it takes ({', '.join(str(p) for p in params)})")
        returns_value, returns_nothing = _returns(py.__code__)
        if not returns_value or returns_nothing:
            raise TypeError(f"matmul epilog {where} must return the value to store on every path, e.g. "
                            f"`return value * data[row, col]`; it "
                            f"{'returns nothing' if not returns_value else 'returns nothing on some path'}")
        count = _checked[py.__code__] = len(params)
    return MatmulEpilogFunction(py, count == 5, where)


def data_compute_dtype(dtype_name):
    """The NumPy dtype ``data[...]`` yields for a ``data`` array of ``dtype_name`` (16-bit floats read as float32)."""
    if dtype_name not in DATA_DTYPES:
        raise ValueError(f"epilog input 'data' has dtype {dtype_name}; allowed: {', '.join(DATA_DTYPES)}")
    return np.dtype(np.float32) if dtype_name in ("float16", "bfloat16") else np.dtype(dtype_name)


def wrap_compile_error(epilog, where_compiled, error):
    """A CallbackCompileError for a numba error raised while compiling ``epilog``."""
    return CallbackCompileError(f"cannot compile matmul epilog {epilog.where} for {where_compiled}:\n"
                                f"{str(error).strip()}")


# ---------------------------------------------------------------------------------------------------------------------
# CPU

_cpu_lock = threading.Lock()
_cpu_loops = {}
_cpu_functions = {}


def _loop(with_batch):
    if with_batch in _cpu_loops:
        return _cpu_loops[with_batch]
    import numba

    if with_batch:
        @numba.njit(cache=False)
        def loop(f, x, data, out):
            for b in range(x.shape[0]):
                for i in range(x.shape[1]):
                    for j in range(x.shape[2]):
                        out[b, i, j] = f(x[b, i, j], b, i, j, data)
    else:
        @numba.njit(cache=False)
        def loop(f, x, data, out):
            for b in range(x.shape[0]):
                for i in range(x.shape[1]):
                    for j in range(x.shape[2]):
                        out[b, i, j] = f(x[b, i, j], i, j, data)
    _cpu_loops[with_batch] = loop
    return loop


def apply_cpu(epilog, x, data, check_bounds=False):
    """``epilog`` applied to every element of ``x`` (shape ``(batch, M, N)``, the compute dtype), compiled for the CPU
    with numba; returns a new array of ``x``'s dtype. ``data``: a NumPy array or None (16-bit floats are read as
    float32). ``check_bounds``: every index checked (:mod:`._epilog_checked`)."""
    import numba

    with _cpu_lock:
        loop = _loop(epilog.with_batch)
        key = (epilog.function, "check_bounds") if check_bounds else epilog.function
        jitted = _cpu_functions.get(key)
        if jitted is None:
            jitted = _cpu_functions[key] = numba.njit(cache=False, boundscheck=check_bounds)(epilog.function)
    if data is not None:
        data = np.asarray(data)
        if data.dtype.itemsize == 2 and data.dtype.kind not in "iu":  # float16 / bfloat16
            data = data.astype(np.float32)
        data = data.view()
        data.flags.writeable = False
    out = np.empty_like(x)
    try:
        if check_bounds:
            from ._epilog_checked import run_checked
            run_checked(epilog, jitted, x, data, out)
        else:
            loop(jitted, x, data, out)
    except numba.core.errors.TypingError as e:
        raise wrap_compile_error(epilog, "the CPU", e) from e
    return out


# ---------------------------------------------------------------------------------------------------------------------
# GPU


def device_function(epilog):
    """The epilog as a numba-cuda device function, inlined into the GEMM kernel that calls it."""
    from .._compat import patch_numba_cuda_ufuncs

    patch_numba_cuda_ufuncs()
    from numba import cuda

    return cuda.jit(device=True, forceinline=True)(epilog.function)


def data_view_maker(dtype_name, ndim, tile=None, checked=False):
    """An intrinsic ``MAKE_DATA(ptr, s0, s1, s2, t0, t1, t2)`` building the kernel-side read-only view of a data
    array (shape ``s``, strides ``t`` in elements; the first ``ndim`` used). ``tile`` = (bm, bn): the view of a data
    array whose block tile the kernel stages in shared memory (``MAKE_DATA`` then also takes the buffer's address, the
    batch index and the tile's first row and column). ``checked``: indices checked against the shape (check_bounds;
    the kernel module then records the first bad one in ``_epilog_data.RECORD_SYMBOL``)."""
    from . import _epilog_data

    if tile is not None:
        return _epilog_data.staged_maker(dtype_name, ndim, *tile, checked=checked)
    return _epilog_data.maker(dtype_name, ndim, checked)
