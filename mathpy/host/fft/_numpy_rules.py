"""numpy.fft's argument rules, as NumPy 2 applies them: lengths, axes, ``norm``, dtypes, ``out=`` and the order of the
one-dimensional transforms an N-D call stands for. Pure functions of shapes and dtypes; :mod:`._functions` runs
what they decide.

An N-D call is NumPy's sequence of 1-D transforms (``fftn`` transforms the last axis first; ``rfftn`` does its real
axis first, ``irfftn`` last; an axis named twice in ``axes`` is transformed twice, each time with its own length).
:func:`stages` groups that sequence into plans of at most three distinct axes, padding or cropping before each:

>>> stages("C2C", (0, 1), (4, 6))                       # one plan
(('C2C', (0, 1), (4, 6)),)
>>> stages("C2C", (0, 0), (3, 6))                       # axis 0 twice: n=6 first, then n=3 (NumPy's order)
(('C2C', (0,), (6,)), ('C2C', (0,), (3,)))
>>> stages("C2R", (0, 1, 2, 3), (2, 2, 2, 8))           # more than three axes: the C2R plan holds the last three
(('C2C', (0,), (2,)), ('C2R', (1, 2, 3), (2, 2, 8)))
>>> cook_nd((4, 6), s=(3, -1), axes=(0, 1), inverse_real=True)   # -1: the input's length, also for irfftn
((3, 6), (0, 1), False)
>>> check_n(0)
Traceback (most recent call last):
...
ValueError: Invalid number of FFT data points (0) specified.
"""

import math
import operator
import warnings

import numpy as np

from ..._dtypes import COMPLEX32
from ..._out import check_writable
from ..._threads import parallel_sum

__all__ = ["AxisError", "MAX_AXES", "check_norm", "swap_norm", "check_n", "normalize_axis", "cook_1d", "cook_nd",
           "check_no_axes", "stages", "stage_shape", "computation_dtype", "result_dtype", "scale", "check_out",
           "LONG_DOUBLE", "ufunc_name", "check_floating_point"]

#: NumPy's AxisError: both a ValueError and an IndexError
AxisError = np.exceptions.AxisError if hasattr(np, "exceptions") else np.AxisError
MAX_AXES = 3  # axes per plan (cuFFT's most); more are decomposed

_NORMS = (None, "backward", "ortho", "forward")
_SWAP = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}
#: long double where it is wider than double (x86 Linux: 80-bit extended); elsewhere it is double itself.
LONG_DOUBLE = (np.dtype(np.longdouble), np.dtype(np.clongdouble)) if np.finfo(np.longdouble).nmant > 52 else ()

# NumPy 2's wording of its two deprecations, so that filters written for NumPy's warnings match mathpy's
_S_WITH_NONE = ("Passing an array containing `None` values to `s` is deprecated in NumPy 2.0 and will raise an error "
                "in a future version of NumPy. To use the default behaviour of the corresponding 1-D transform, pass "
                "the value matching the default for its `n` parameter. To use the default behaviour for every axis, "
                "the `s` argument can be omitted.")
_S_WITHOUT_AXES = ("`axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0). In a future version "
                   "of NumPy, this will raise an error and `s[i]` will correspond to the size along the transformed "
                   "axis specified by `axes[i]`. To retain current behaviour, pass a sequence [0, ..., k-1] to "
                   "`axes` for an array of dimension k.")


# --- scalars -----------------------------------------------------------------------------------------------------

def check_norm(norm):
    """``norm`` as "backward", "ortho" or "forward" (None is "backward"); NumPy's ValueError otherwise."""
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward".')
    return norm or "backward"


def swap_norm(norm):
    """The norm of the opposite direction (hfft / ihfft are irfft / rfft with it)."""
    return _SWAP[check_norm(norm)]


def check_n(n):
    """A transform length: an integer of at least 1 (TypeError / NumPy's ValueError otherwise). A bool is not a
    length: NumPy raises TypeError for ``n=True`` (``operator.index`` would take it as 1)."""
    if isinstance(n, (bool, np.bool_)):
        raise TypeError(f"an integer is required: n={n} is a bool, not an FFT length")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"'{type(n).__name__}' object cannot be interpreted as an integer (an FFT length must be "
                        f"an int)") from None
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return n


def normalize_axis(axis, ndim):
    """A non-negative axis; NumPy's AxisError (a ValueError and an IndexError) when out of range."""
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"an axis must be an integer, not {type(axis).__name__}") from None
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim)
    return axis % ndim


def scale(norm, inverse, lengths, real=np.dtype(np.float64)):
    """The factor ``norm`` applies after an unnormalised transform of ``lengths`` (None for 1): per 1-D transform
    in NumPy, so the product over all of them. Computed in double, or in long double for a long double transform
    (a double factor would cost long double its extra digits)."""
    total = math.prod(lengths)
    one = np.longdouble(1) if real in LONG_DOUBLE else 1.0
    if norm == "ortho":
        return one / np.sqrt(np.longdouble(total)) if real in LONG_DOUBLE else 1.0 / math.sqrt(total)
    if (norm == "backward") == inverse:
        return one / total
    return None


# --- n and axis, s and axes --------------------------------------------------------------------------------------

def cook_1d(shape, n, axis, inverse_real, odd=False):
    """``(lengths, axes)`` of a 1-D function for an operand of ``shape``: NumPy's ``n`` / ``axis`` rules (irfft's
    default length is ``2 * (m - 1)``, plus 1 when ``odd``)."""
    axis = normalize_axis(axis, len(shape))
    if n is None:
        n = (shape[axis] - 1) * 2 + odd if inverse_real else shape[axis]
    return (check_n(n),), (axis,)


def cook_nd(shape, s, axes, inverse_real, odd=False, stacklevel=4):
    """``(lengths, axes, warned)``: NumPy 2's ``s`` / ``axes`` rules for an operand of ``shape`` (``-1`` in ``s``
    keeps the input's length, ``None`` the 1-D function's default; ``inverse_real``: irfftn, whose last default
    length is ``2 * (m - 1)``, plus 1 when ``odd``: nvmath-python's ``last_axis_parity="odd"``). Emits NumPy's
    DeprecationWarnings (``warned`` then True: such calls are not remembered, so that every call warns), attributed
    ``stacklevel`` frames up: the caller of the public function. Axes may repeat."""
    ndim = len(shape)
    warned = False
    shapeless = s is None
    if shapeless:
        s = list(shape) if axes is None else [shape[normalize_axis(a, ndim)] for a in _sequence(axes, "axes")]
    else:
        s = list(_sequence(s, "s"))
    if axes is None:
        if not shapeless:
            warnings.warn(_S_WITHOUT_AXES, DeprecationWarning, stacklevel=stacklevel)
            warned = True
        axes = list(range(-len(s), 0))
    else:
        axes = list(_sequence(axes, "axes"))
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    axes = tuple(normalize_axis(a, ndim) for a in axes)
    if inverse_real and shapeless and axes:
        s[-1] = (shape[axes[-1]] - 1) * 2 + odd
    if any(n is None for n in s):
        warnings.warn(_S_WITH_NONE, DeprecationWarning, stacklevel=stacklevel)
        warned = True
    lengths = []
    for k, (n, axis) in enumerate(zip(s, axes)):
        if n is None:  # the 1-D function's default
            n = (shape[axis] - 1) * 2 + odd if inverse_real and k == len(s) - 1 else shape[axis]
        elif isinstance(n, (int, np.integer)) and n == -1:
            n = shape[axis]
        lengths.append(check_n(n))
    return tuple(lengths), axes, warned


def check_no_axes(name, kind):
    """NumPy's rule for an N-D call over no axes: a C2C one returns its operand as it is, the others raise."""
    if kind != "C2C":
        raise IndexError(f"{name} needs at least one axis to transform; axes is empty")


def _sequence(value, what):
    """NumPy takes sequences for ``s`` and ``axes``; a bare integer is taken as a sequence of one (as SciPy does)."""
    if isinstance(value, (int, np.integer)):
        return (value,)
    try:
        return tuple(value)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers, not {type(value).__name__}") from None


# --- the sequence of 1-D transforms, grouped into plans ----------------------------------------------------------

def stages(kind, axes, lengths, max_axes=MAX_AXES):
    """``((fft_type, axes, lengths), ...)``: NumPy's 1-D transforms of an N-D call of ``kind`` ("C2C", "R2C" or "C2R")
    grouped into plans of at most ``max_axes`` distinct axes, in the order they run. The R2C plan runs first, the
    C2R plan last; in each, the halved axis is the last one. Before each plan the data is padded or cropped to its
    lengths (the C2R axis to ``n // 2 + 1``)."""
    count = len(axes)
    steps = [("C2C", i) for i in range(count)]  # (type, index into axes/lengths)
    if kind == "C2C":
        order = steps[::-1]  # fftn transforms the last axis first
    elif kind == "R2C":
        order = [("R2C", count - 1)] + steps[count - 2::-1] if count > 1 else [("R2C", 0)]
    else:
        order = steps[:-1] + [("C2R", count - 1)]
        order = order[::-1]  # grouped from the C2R step back, so that the C2R plan holds the last axes
    groups = []
    for step in order:
        group = groups[-1] if groups else None
        if group is None or len(group) == max_axes or any(axes[i] == axes[step[1]] for _, i in group):
            groups.append([step])
        else:
            group.append(step)
    if kind == "C2R":
        groups.reverse()
    result = []
    for group in groups:
        group.sort(key=lambda step: step[1])  # the given order; the R2C/C2R axis (the last index) stays last
        fft_type = group[-1][0]
        result.append((fft_type, tuple(axes[i] for _, i in group), tuple(lengths[i] for _, i in group)))
    return tuple(result)


def stage_shape(shape, fft_type, axes, lengths):
    """The output shape of one stage on an input of ``shape`` (any lengths: padding or cropping comes first)."""
    shape = list(shape)
    for axis, n in zip(axes, lengths):
        shape[axis] = n
    if fft_type == "R2C":
        shape[axes[-1]] = lengths[-1] // 2 + 1
    return tuple(shape)


# --- dtypes and out= ---------------------------------------------------------------------------------------------

def computation_dtype(dtype, complex_input):
    """NumPy 2's computation dtype for an input ``dtype``: complex when ``complex_input`` (C2C, C2R), else real (R2C).
    float16 is computed in single precision, integers and bools in double, long double (CPU only) in long double;
    torch's complex32, which NumPy lacks, in complex64 as float16 is (half precision is the stateful FFT's)."""
    if dtype == COMPLEX32:
        dtype = np.dtype(np.complex64)
    if dtype.kind == "c":
        if not complex_input:
            raise TypeError(f"a real-input FFT (rfft, rfftn, ihfft) needs a real operand, not {dtype}")
        return dtype
    if dtype.kind not in "biuf":
        raise TypeError(f"FFT of dtype {dtype} is not supported; use a real or complex floating-point, integer or "
                        f"bool array")
    if dtype.kind == "f" and dtype.itemsize > 8:
        real = dtype
    elif dtype in (np.float16, np.float32):
        real = np.dtype(np.float32)
    else:
        real = np.dtype(np.float64)
    return np.result_type(real, np.complex64) if complex_input else real


def result_dtype(input_dtype, computed, fft_type, one_axis):
    """The result dtype of a transform computed in ``computed`` whose last stage is ``fft_type``: NumPy keeps a
    float16 input's precision in a one-axis C2R (``irfft`` / ``hfft`` of float16 is float16)."""
    if fft_type != "C2R":
        return np.result_type(computed, np.complex64)
    real = np.dtype(computed.char.lower()) if computed.kind == "c" else computed
    return input_dtype if (one_axis and input_dtype == np.float16) else real


def check_out(out_op, shape, dtype, name):
    """NumPy's checks of ``out=``: shape (ValueError "output array has wrong shape."), writability and casting."""
    if tuple(out_op.shape) != tuple(shape):
        raise ValueError(f"output array has wrong shape. (out has shape {tuple(out_op.shape)}; the result of {name} "
                         f"has shape {tuple(shape)})")
    check_writable(out_op, dtype, name)


# --- floating-point errors ---------------------------------------------------------------------------------------

def ufunc_name(fft_type, direction, last_length):
    """The name NumPy's warnings give a transform: its pocketfft gufunc's (``fft``, ``ifft``, ``rfft_n_even``,
    ``rfft_n_odd``, ``irfft``)."""
    if fft_type == "R2C":
        return "rfft_n_odd" if last_length % 2 else "rfft_n_even"
    if fft_type == "C2R":
        return "irfft"
    return "ifft" if direction == 1 else "fft"


def check_floating_point(x, result, name, threads=1):
    """NumPy's floating-point error reports for a transform of ``x`` into ``result`` (NumPy arrays): "overflow
    encountered in NAME" when ``result`` holds an infinity that ``x`` did not, then "invalid value encountered in
    NAME" when it holds a NaN that ``x`` did not (what the processor's flags tell NumPy's gufunc; scipy.fft does not
    look at them). Handled as :func:`numpy.seterr` / :class:`numpy.errstate` say: a RuntimeWarning by default.

    Run only for ``ExecutionCPU(fp_reports=True)``. The common case costs one pass over the result (a finite sum
    means a finite result): 15-25% of a transform on 2 cores, 2-5x on 16; none when both reports are ignored
    (``numpy.errstate(over="ignore", invalid="ignore")``)."""
    modes = np.geterr()
    if (modes["over"] == "ignore" and modes["invalid"] == "ignore") or _finite(result, threads):
        return
    if np.isinf(result).any() and not np.isinf(x).any():
        _floating_point_error("over", "overflow", name)
    if np.isnan(result).any() and not np.isnan(x).any():
        _floating_point_error("invalid", "invalid value", name)


def _finite(result, threads):
    """True only if every element of ``result`` is finite (False may also mean a sum that overflowed: that is not
    the transform's, so it is not reported here).

    A sum on mathpy's threads (:func:`~mathpy._threads.parallel_sum`). Not the BLAS dot product of the result with
    itself, which is 2-3x faster alone: right after a threaded FFTW transform its threads and the BLAS's contend, and
    a 128 x 3375 complex128 FFT took 12.1 ms with it against 8.7 ms with the sum (2 cores)."""
    with np.errstate(all="ignore"):
        return bool(np.isfinite(parallel_sum(result, threads)))


def _floating_point_error(kind, words, name):
    """Report one floating-point error as NumPy's ufuncs do under the current :func:`numpy.geterr` mode."""
    mode, message = np.geterr()[kind], f"{words} encountered in {name}"
    if mode == "warn":
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    elif mode == "raise":
        raise FloatingPointError(message)
    elif mode == "print":
        print(f"Warning: {message}")
    elif mode == "call":
        np.geterrcall()(words, {"over": 2, "invalid": 8}[kind])
    elif mode == "log":
        np.geterrcall().write(f"Warning: {message}\n")
