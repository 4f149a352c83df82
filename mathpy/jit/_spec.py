"""What a callback is compiled for: kind, element type, user-data type, compute capability; cuFFT's names and codes.

Pure Python (no numba import): the compile cache and the FFT layer use it on every call.
"""

import dataclasses
import dis
import inspect

import numpy as np

from .._errors import CallbackCompileError

__all__ = [
    "CALLBACK_TYPES", "ELEMENT_DTYPES", "USER_INFO_DTYPES", "CallbackSpec", "describe_function", "make_spec",
    "check_function", "returns_of", "compile_error",
]

#: cuFFT's ``cufftXtCallbackType`` codes, by (kind, element dtype).
CALLBACK_TYPES = {
    ("prolog", "complex64"): 0,   # CUFFT_CB_LD_COMPLEX
    ("prolog", "complex128"): 1,  # CUFFT_CB_LD_COMPLEX_DOUBLE
    ("prolog", "float32"): 2,     # CUFFT_CB_LD_REAL
    ("prolog", "float64"): 3,     # CUFFT_CB_LD_REAL_DOUBLE
    ("epilog", "complex64"): 4,   # CUFFT_CB_ST_COMPLEX
    ("epilog", "complex128"): 5,  # CUFFT_CB_ST_COMPLEX_DOUBLE
    ("epilog", "float32"): 6,     # CUFFT_CB_ST_REAL
    ("epilog", "float64"): 7,     # CUFFT_CB_ST_REAL_DOUBLE
}

ELEMENT_DTYPES = ("float32", "float64", "complex64", "complex128")
USER_INFO_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64", "complex64", "complex128")

_FUNCTION_STEM = {"complex64": "Complex", "complex128": "DoubleComplex", "float32": "Real", "float64": "DoubleReal"}
# Itanium mangling of the by-value element argument of a store callback (float2 / double2 are structs in CUDA C++).
_MANGLED_ELEMENT = {"complex64": "6float2", "complex128": "7double2", "float32": "f", "float64": "d"}


def _mangled_name(kind, element_dtype):
    """cuFFT's default C++ callback symbol, e.g. ``_Z27cufftJITCallbackLoadComplexPvyS_S_``: cuFFT declares
    ``(void*, unsigned long long, [element,] void*, void*)``."""
    name = "cufftJITCallback" + ("Load" if kind == "prolog" else "Store") + _FUNCTION_STEM[element_dtype]
    middle = "" if kind == "prolog" else _MANGLED_ELEMENT[element_dtype]
    return f"_Z{len(name)}{name}Pvy{middle}S_S_"


def _dtype_name(dtype, what, allowed):
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise ValueError(f"{what} {dtype!r} is not a NumPy dtype; allowed: {', '.join(allowed)}") from None
    if name not in allowed:
        raise ValueError(f"{what} {name!r} is not supported; allowed: {', '.join(allowed)}")
    return name


@dataclasses.dataclass(frozen=True)
class CallbackSpec:
    kind: str                      # "prolog" | "epilog"
    element_dtype: str             # one of ELEMENT_DTYPES
    user_info_dtype: str | None    # one of USER_INFO_DTYPES, or None for an opaque pointer
    compute_capability: tuple      # (major, minor)
    check_bounds: bool = False     # every access checked against the sizes in the header (see mathpy.jit._bounds)

    @property
    def cufft_callback_type(self):
        return CALLBACK_TYPES[(self.kind, self.element_dtype)]

    @property
    def mangled_name(self):
        return _mangled_name(self.kind, self.element_dtype)

    @property
    def is_complex(self):
        return self.element_dtype.startswith("complex")


def make_spec(kind, element_dtype, user_info_dtype, compute_capability, check_bounds=False):
    if kind not in ("prolog", "epilog"):
        raise ValueError(f"kind must be 'prolog' or 'epilog', got {kind!r}")
    element = _dtype_name(element_dtype, "element_dtype", ELEMENT_DTYPES)
    if user_info_dtype is None or (isinstance(user_info_dtype, str) and user_info_dtype == "void"):
        info = None
    else:
        info = _dtype_name(user_info_dtype, "user_info_dtype", USER_INFO_DTYPES)
    try:
        if isinstance(compute_capability, str):  # "90", "9.0", "100" as nvmath-python and CuPy spell it
            text = compute_capability.replace(".", "")
            cc = (int(text[:-1]), int(text[-1]))
        else:
            cc = tuple(int(c) for c in compute_capability)
    except (TypeError, ValueError, IndexError):
        cc = ()
    if len(cc) != 2 or cc < (5, 0):
        raise ValueError(f"compute_capability must be (major, minor) >= (5, 0), got {compute_capability!r}")
    return CallbackSpec(kind, element, info, cc, bool(check_bounds))


def describe_function(fn):
    """``name (file:line)`` for error messages."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    if code is None:
        return name
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


_ARITY = {"prolog": ("data_in", "offset", "user_info", "unused"),
          "epilog": ("data_out", "offset", "value", "user_info", "unused")}


def returns_of(code):
    """(returns a value, returns None) judged from the bytecode: ``return``/fall-through of the constant None
    counts as returning nothing."""
    value = nothing = False
    previous = None
    for ins in dis.get_instructions(code):
        if ins.opname == "RETURN_CONST":  # Python 3.12+
            if ins.argval is None:
                nothing = True
            else:
                value = True
        elif ins.opname == "RETURN_VALUE":
            if previous is not None and previous.opname == "LOAD_CONST" and previous.argval is None:
                nothing = True
            else:
                value = True
        if ins.opname not in ("CACHE", "NOP", "EXTENDED_ARG"):
            previous = ins
    return value, nothing


# (code object, kind) pairs that passed check_function. What it checks (parameters, return statements) is a property
# of the code object, so a stateless call in a hot loop need not disassemble the same function again.
_CHECKED = set()


def check_function(fn, kind):
    """Reject, before any compilation, what cannot be a ``kind`` callback: not a Python function, wrong number of
    parameters, a prolog returning nothing, an epilog returning a value."""
    py = getattr(fn, "py_func", fn)  # accept numba dispatchers
    if not inspect.isfunction(py):
        raise TypeError(f"a {kind} callback must be a Python function, got {type(fn).__name__}")
    if (py.__code__, kind) in _CHECKED and not hasattr(py, "__signature__"):
        return py
    where = describe_function(py)
    params = list(inspect.signature(py).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    expected = _ARITY[kind]
    if len(positional) != len(params) or len(params) != len(expected):
        raise TypeError(f"{kind} callback {where} must take exactly {len(expected)} positional parameters "
                        f"({', '.join(expected)}), got ({', '.join(str(p) for p in params)})")
    returns_value, returns_nothing = returns_of(py.__code__)
    if kind == "prolog" and not returns_value:
        raise TypeError(f"prolog callback {where} returns nothing; it must return the loaded element, e.g. "
                        f"`return data_in[offset] * 2`")
    if kind == "epilog" and returns_value:
        raise TypeError(f"epilog callback {where} returns a value; an epilog stores it instead, e.g. "
                        f"`data_out[offset] = value * 2`, and returns nothing")
    _CHECKED.add((py.__code__, kind))
    return py


def compile_error(epilog, where_compiled, error):
    """A CallbackCompileError for a numba error raised while compiling matmul epilog ``epilog`` (anything with a
    ``where``: the function's name and place) for ``where_compiled`` ("the CPU", "the GPU ...")."""
    return CallbackCompileError(f"cannot compile matmul epilog {epilog.where} for {where_compiled}:\n"
                                f"{str(error).strip()}")
