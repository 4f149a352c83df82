"""Python matmul epilogs: the contract a function follows, checking it, and running it with numba on the CPU. (The GPU
side: :mod:`._epilog_wrapper` compiles it into the small device function the GEMM kernels and the elementwise pass
link; :mod:`._epilog_recognize` tells when it is one of cuBLASLt's own epilogs.)

A matmul epilog is ``f(value, row, col, *operands) -> value`` or ``f(value, batch, row, col, *operands) -> value``:
``value`` is one element of ``alpha * A @ B + beta * C`` in the compute precision (float32 for float16, bfloat16 and
float32 operands, float64 for float64, complex64 for complex64), ``row`` / ``col`` (and ``batch``) its int64
coordinates in the result, and each operand a read-only array given in ``epilog_inputs`` under the name of its
parameter::

    def gated(value, row, col, bias, gate):           # epilog_inputs={"bias": b, "gate": g}
        x = value + bias[col]
        return x / (np.float32(1) + math.exp(-x)) * gate[row, col]

The operands are the function's last parameters, as many as ``epilog_inputs`` names; the parameters before them are
``value, row, col`` or ``value, batch, row, col``. A function of one operand may also get it as
``epilog_inputs={"data": x}`` whatever the parameter's name, or no ``epilog_inputs`` at all (it then gets ``None``):
that is ``f(value, row, col, data)`` / ``f(value, batch, row, col, data)``. The value returned is converted to the
compute precision, rounded to the result's dtype and stored.

In the Hopper kernel (compute capability 9.0) with a float16 or bfloat16 result, the function's float32 divisions
are compiled as ``div.full.f32`` (at most 2 ulp, 2^-22 relative, far below the result's rounding) instead of IEEE
division, whose branch to a rare slow path per division kept the GPU from overlapping the elements' work; other
results keep IEEE division.

Each operand is indexed like a NumPy array of its own shape and strides (``bias[col]``, ``gate[row, col]``,
``scale[batch]``, ``residual[batch, row, col]``), at most 3 dimensions, of a dtype in :data:`DATA_DTYPES`; float16
and bfloat16 operands read as float32 (exactly), so the function sees the same values on the CPU and the GPU. On the
GPU they are read through the read-only data cache (``ld.global.nc``): they must not overlap the result. Indices that
every call reaches and that the function's source shows are checked against each operand's shape when planning (a
ValueError names what it needs); others are checked only with ``check_bounds`` (:mod:`mathpy.jit._bounds`: numba's
boundscheck on the CPU, checked views on the GPU), otherwise not (as in numba kernels): index inside the array.

What the function may use is what numba compiles for the CPU and for CUDA: ``math.exp``, ``tanh``, ``erf``,
``sqrt``, ``log1p`` and the rest of ``math``, ``min`` / ``max``, comparisons, ``if`` / ternaries, module-level
constants and closures (their values are compiled in: a rebound global or a changed closure compiles again, see
:mod:`._cache`), integer and boolean operands. Write float constants as ``np.float32(...)`` to keep float32
arithmetic in float32.

Errors are raised before any work and name the function's file and line: ``TypeError`` for parameters that do not
fit the operands given or a function that returns nothing, ``ValueError`` for an unsupported operand dtype or shape,
and :class:`mathpy.CallbackCompileError` when numba cannot compile the function (numba's message, which points at the
offending line, included).
"""

import dataclasses

import numpy as np

from .. import _memo
from .._errors import CallbackCompileError
from ._spec import CallbackSpec, compile_error, describe_function, returns_of

__all__ = ["MatmulEpilogFunction", "DATA_DTYPES", "as_matmul_epilog", "data_compute_dtype", "apply_cpu", "read_only",
           "LEGACY_OPERAND"]

#: dtypes an operand may have (NumPy names; bfloat16 as torch / ml_dtypes name it).
DATA_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "int8", "int16", "int32", "int64", "uint8",
               "bool")
#: The ``epilog_inputs`` name a function of one operand may get it under, whatever the parameter is called.
LEGACY_OPERAND = "data"
_FORMS = "f(value, row, col, *operands) or f(value, batch, row, col, *operands)"
_MAX_OPERANDS = 8  # (mathpy.device._gemm_kernel.MAX_OPERANDS: the kernels' limit)


@dataclasses.dataclass(frozen=True)
class MatmulEpilogFunction:
    """A checked user epilog: the Python function, whether it takes the batch index, ``where`` (name, file:line) for
    messages, ``operands`` (the ``epilog_inputs`` names of its operand parameters, in their order) and ``key`` (the
    content key of :func:`mathpy.jit._cache.function_key`, None when the function cannot be fingerprinted).
    Equal when the function object, its operands and its key are: a rebound global makes another key, so plans and
    compiled kernels keyed on it are never stale."""

    function: object
    with_batch: bool
    where: str
    operands: tuple = (LEGACY_OPERAND,)
    key: str | None = None
    snapshot: object = dataclasses.field(default=None, compare=False, repr=False)

    def __repr__(self):
        return f"<matmul epilog {self.where}>"

    def current(self):
        """Whether what the key was computed from still holds (False: a global or a closure changed since)."""
        return self.snapshot is None or self.snapshot.valid()


_checked = _memo.Memo("matmul-epilog-checks", group="jit", max_entries=1024)  # (code, names) -> (batch?, operands)
_KEY_SPEC = CallbackSpec("matmul-epilog", None, None, ())  # the content key: the function alone


def as_matmul_epilog(fn, names=None):
    """``fn`` checked as a matmul epilog whose operands are given under ``names`` (the keys of ``epilog_inputs``;
    None or empty: none given), or TypeError naming what is wrong (see the module docstring)."""
    import inspect

    py = getattr(fn, "py_func", fn)  # accept numba dispatchers
    if not inspect.isfunction(py):
        raise TypeError(f"a matmul epilog must be a Python function, got {type(fn).__name__}")
    where = describe_function(py)
    given = tuple(sorted(names or ()))
    found = _checked.get((py.__code__, given))
    if found is None:
        params = list(inspect.signature(py).parameters.values())
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != len(params):
            raise TypeError(f"matmul epilog {where} must take positional parameters only, {_FORMS}; it takes "
                            f"({', '.join(str(p) for p in params)})")
        found = _bind(positional, given, where)
        returns_value, returns_nothing = returns_of(py.__code__)
        if not returns_value or returns_nothing:
            raise TypeError(f"matmul epilog {where} must return the value to store on every path, e.g. "
                            f"`return value * data[row, col]`; it "
                            f"{'returns nothing' if not returns_value else 'returns nothing on some path'}")
        _checked.put((py.__code__, given), found)
    with_batch, operands = found
    from ._cache import function_key

    key, snapshot = function_key(py, _KEY_SPEC)
    return MatmulEpilogFunction(py, with_batch, where, operands, key, snapshot)


def _bind(params, given, where):
    """(with_batch, operand names in parameter order) of a function with parameters ``params`` given operands
    ``given``."""
    shown = f"({', '.join(params)})"
    if given and set(given) <= set(params):  # each operand named by its parameter
        operands = tuple(params[len(params) - len(given):])
        if set(operands) != set(given):
            raise TypeError(f"matmul epilog {where}: its operands {list(given)} must be its last parameters, after "
                            f"value, row, col (or value, batch, row, col); it takes {shown}")
        leading = len(params) - len(given)
    elif set(given) <= {LEGACY_OPERAND}:  # one operand, given as "data" or not at all
        if len(params) == 3 and not given:
            return False, ()
        operands, leading = (LEGACY_OPERAND,), len(params) - 1
    else:
        unknown = sorted(set(given) - set(params))
        raise TypeError(f"matmul epilog {where}: epilog_inputs {unknown} are not parameters of the function, which "
                        f"takes {shown}; name each operand as its parameter ({_FORMS})")
    if len(operands) > _MAX_OPERANDS:
        raise TypeError(f"matmul epilog {where} reads {len(operands)} operands; a matmul epilog takes at most "
                        f"{_MAX_OPERANDS} operands")
    if leading not in (3, 4):
        raise TypeError(f"matmul epilog {where} must take {_FORMS} with {len(operands)} operand(s) "
                        f"{list(operands)}; it takes {shown}")
    return leading == 4, operands


def data_compute_dtype(dtype_name):
    """The NumPy dtype ``operand[...]`` yields for an operand of ``dtype_name`` (16-bit floats read as float32)."""
    if dtype_name not in DATA_DTYPES:
        raise ValueError(f"an epilog operand has dtype {dtype_name}; allowed: {', '.join(DATA_DTYPES)}")
    return np.dtype(np.float32) if dtype_name in ("float16", "bfloat16") else np.dtype(dtype_name)


# ---------------------------------------------------------------------------------------------------------------------
# CPU


def read_only(data):
    """An operand as the CPU's compiled epilog reads it: read-only, 16-bit floats as float32 (the same values); None
    stays None."""
    if data is None:
        return None
    data = np.asarray(data)
    if data.dtype.itemsize == 2 and data.dtype.kind not in "iu":  # float16 / bfloat16 read as float32
        data = data.astype(np.float32)
    data = data.view()
    data.flags.writeable = False
    return data


def apply_cpu(epilog, x, operands=(), check_bounds=False):
    """``epilog`` applied to every element of ``x`` (shape ``(batch, M, N)``, the compute dtype), compiled for the CPU
    with numba (:func:`mathpy.jit._cpu_passes.matmul_epilog_pass`, on this thread); returns a new array of ``x``'s
    dtype. ``operands``: NumPy arrays (or None) in the order of ``epilog.operands``. ``check_bounds``: compiled with
    numba's ``boundscheck=True``; the first element whose call indexes outside an operand stops the loop and is run
    again in Python to name the operand and the index (OutOfBoundsError, :func:`mathpy.jit._bounds.locate_epilog`)."""
    from ._cpu_passes import matmul_epilog_pass

    operands = tuple(read_only(o) for o in operands)
    out = np.array(x, order="C")
    failed = matmul_epilog_pass(epilog, len(operands), check_bounds)(out, operands, 0, out.shape[0] * out.shape[1])
    if failed >= 0:
        from ._bounds import locate_epilog

        b, i, j = np.unravel_index(failed, x.shape)
        raise locate_epilog(epilog.function, epilog.with_batch, epilog.where, x[b, i, j], (b, i, j),
                            tuple(zip(epilog.operands, operands)))
    return out
