"""Checks that every difference listed in docs/guides/differences.md still exists, measured against NumPy on the CPU.

    python docs/guides/check_differences.py          # one line per difference: what NumPy and mathpy do today

Each check runs the same call through NumPy and mathpy and asserts the documented difference. When a fix removes a
difference its check fails with "gone": delete the row from the page and the check from this file
(tests/test_docs.py runs every check and compares the ids here with the page's).
"""

import contextlib
import inspect
import os
import sys
import warnings

import numpy as np

if __name__ == "__main__":  # run from a checkout without installing it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import mathpy  # noqa: E402
import mathpy.fft  # noqa: E402

CHECKS = {}  # id -> function returning (NumPy's outcome, mathpy's outcome) after asserting the difference


def difference(check_id):
    def register(function):
        CHECKS[check_id] = function
        return function
    return register


class Gone(AssertionError):
    """The documented difference no longer exists."""


def outcome(call):
    """What a call does: ``"returns complex128 (4,)"`` (plus warnings) or ``"raises ValueError: ..."``."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = call()
    except Exception as error:  # noqa: BLE001 - the outcome is what we report
        message = str(error).splitlines()[0] if str(error) else ""
        return f"raises {type(error).__name__}: {message[:90]}"
    text = f"returns {getattr(result, 'dtype', type(result).__name__)} {getattr(result, 'shape', '')}".strip()
    categories = sorted({w.category.__name__ for w in caught if not w.category.__module__.startswith("numba")})
    return text + (f" with {', '.join(categories)}" if categories else "")


def expect(condition, numpy_outcome, mathpy_outcome):
    if not condition:
        raise Gone(f"gone: NumPy {numpy_outcome}; mathpy {mathpy_outcome}")
    return numpy_outcome, mathpy_outcome


def both(call):
    """(NumPy's outcome, mathpy's outcome) of ``call(module)`` for numpy.fft and mathpy.fft."""
    return outcome(lambda: call(np.fft)), outcome(lambda: call(mathpy.fft))


# --- numpy.fft ---------------------------------------------------------------------------------------------------

@difference("fft-clongdouble")
def _():
    n, m = both(lambda xp: xp.fft(np.ones(4, np.clongdouble)))
    if np.finfo(np.longdouble).nmant <= 52:  # long double is double here (Windows, some ARM): nothing to differ
        return n, m
    return expect(("complex256" in n or "complex192" in n) and "complex128" in m, n, m)


@difference("fft-longdouble")
def _():
    n, m = both(lambda xp: xp.rfft(np.ones(4, np.longdouble)))
    if np.finfo(np.longdouble).nmant <= 52:
        return n, m
    return expect(n.startswith("returns") and m.startswith("raises TypeError"), n, m)


@difference("fft-repeated-axes")
def _():
    n, m = both(lambda xp: xp.fftn(np.ones((4, 4)), axes=(0, 0)))
    return expect(n.startswith("returns") and m.startswith("raises ValueError"), n, m)


@difference("fft-empty-operand")
def _():
    n, m = both(lambda xp: xp.fft(np.zeros(0)))
    return expect(n.startswith("raises ValueError") and m.startswith("returns"), n, m)


@difference("fft-s-with-none")
def _():
    n, m = both(lambda xp: xp.fftn(np.ones((4, 4)), s=(None, 4), axes=(0, 1)))
    return expect("DeprecationWarning" in n and m.startswith("raises TypeError"), n, m)


@difference("fft-s-without-axes")
def _():
    n, m = both(lambda xp: xp.fftn(np.ones((4, 4)), s=(4, 4)))
    return expect("DeprecationWarning" in n and m.startswith("returns") and "DeprecationWarning" not in m, n, m)


@difference("fft-out-not-an-array")
def _():
    n, m = both(lambda xp: xp.fft(np.ones(4), out=[0, 0, 0, 0]))
    same = n == m
    return expect(n.startswith("raises TypeError") and m.startswith("raises TypeError") and not same, n, m)


@difference("fft-out-wrong-shape")
def _():
    n, m = both(lambda xp: xp.fft(np.ones(4), out=np.empty(3, complex)))
    return expect(n.startswith("raises ValueError") and m.startswith("raises ValueError") and n != m, n, m)


@difference("fft-not-an-array")
def _():
    n, m = both(lambda xp: xp.fft(None))
    return expect(m.startswith("raises ValueError") and "NoneType" not in m and n != m, n, m)


@difference("fft-axis-out-of-range")
def _():
    n, m = both(lambda xp: xp.fft(np.ones(4), axis=2))
    return expect(n.startswith("raises IndexError") and m.startswith("raises ValueError"), n, m)


@difference("fft-help")
def _():
    n = f"docstring of {len(np.fft.fft.__doc__.splitlines())} lines with Parameters"
    doc = mathpy.fft.fft.__doc__ or ""
    m = f"docstring of {len(doc.strip().splitlines())} line(s)"
    return expect("Parameters" in np.fft.fft.__doc__ and "Parameters" not in doc, n, m)


# --- numpy.matmul --------------------------------------------------------------------------------------------------

def both_matmul(a, b):
    return outcome(lambda: np.matmul(a, b)), outcome(lambda: mathpy.matmul(a, b))


@difference("matmul-integer-bool")
def _():
    n, m = both_matmul(np.ones((3, 4), np.int32), np.ones((4, 2), np.int32))
    nb, mb = both_matmul(np.ones((3, 4), bool), np.ones((4, 2), bool))
    return expect(n.startswith("returns int32") and m.startswith("raises TypeError") and nb.startswith("returns bool")
                  and mb.startswith("raises TypeError"), n, m)


@difference("matmul-mixed-dtypes")
def _():
    n, m = both_matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float64))
    ni, mi = both_matmul(np.ones((3, 4), np.int64), np.ones((4, 2), np.float64))
    return expect(n.startswith("returns float64") and m.startswith("raises TypeError") and ni.startswith("returns")
                  and mi.startswith("raises TypeError"), n, m)


@difference("matmul-longdouble")
def _():
    n, m = both_matmul(np.ones((3, 4), np.longdouble), np.ones((4, 2), np.longdouble))
    return expect(n.startswith("returns") and m.startswith("raises TypeError"), n, m)


@difference("matmul-16-bit-result-order")
def _():
    a, b = np.ones((3, 4), np.float16), np.ones((4, 5), np.float16)
    numpy_c, mathpy_c = np.matmul(a, b).flags.c_contiguous, mathpy.matmul(a, b).flags.c_contiguous
    n, m = f"C-contiguous result: {numpy_c}", f"C-contiguous result: {mathpy_c} (column-major)"
    return expect(numpy_c and not mathpy_c, n, m)


@difference("matmul-not-an-array")
def _():
    n, m = both_matmul(None, np.ones((4, 2)))
    return expect(n.startswith("raises ValueError") and m.startswith("raises AttributeError"), n, m)


# --- bad input that NumPy has no counterpart for -------------------------------------------------------------------

@difference("matmul-unknown-epilog-input")
def _():
    m = outcome(lambda: mathpy.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32),
                                      epilog=mathpy.MatmulEpilog.BIAS, epilog_inputs={"biass": np.ones(3, np.float32)}))
    return expect("biass" not in m, "-", m)


@difference("callback-float16-user-data")
def _():
    def scale(data_out, offset, value, user_info, unused):
        data_out[offset] = value * user_info[0]

    m = outcome(lambda: mathpy.fft.fft(np.ones(4, np.complex64), epilog=mathpy.fft.Callback(scale, data=np.float16(2))))
    return expect(m.startswith("raises NotImplementedError"), "-", m)


# --- nvmath-python (mathpy's side of each API difference; nvmath-python itself is not needed) ---------------------

@difference("nvmath-fft-signature")
def _():
    params = list(inspect.signature(mathpy.fft.fft).parameters)
    m = f"mathpy.fft.fft({', '.join(params)})"
    return expect(params[:5] == ["a", "n", "axis", "norm", "out"] and "axes" not in params,
                  "nvmath.fft.fft(operand, axes, options, execution, prolog, epilog, stream)", m)


@difference("nvmath-layout-accessors")
def _():
    has_methods = hasattr(mathpy.fft.FFT, "get_input_layout")
    has_properties = isinstance(inspect.getattr_static(mathpy.fft.FFT, "input_layout", None), property)
    return expect(has_properties and not has_methods, "FFT.get_input_layout() / get_output_layout()",
                  "FFT.input_layout / FFT.output_layout properties")


@difference("nvmath-python-callbacks")
def _():
    def double(data_out, offset, value, user_info, unused):
        data_out[offset] = value * np.float32(2)

    x = np.ones(4, np.complex64)
    with contextlib.suppress(Exception):
        ok = np.allclose(mathpy.fft.fft(x, epilog=double), np.fft.fft(x) * 2)
        return expect(ok, "LTO-IR from nvmath.fft.compile_epilog (GPU only)",
                      "a Python function, compiled by mathpy (CPU and GPU)")
    raise Gone("gone: mathpy.fft.fft no longer takes a Python function as epilog")


def run_all():
    """{id: (NumPy's outcome, mathpy's outcome)}; raises Gone naming every difference that no longer exists."""
    results, gone = {}, []
    for check_id, check in CHECKS.items():
        try:
            results[check_id] = check()
        except Gone as error:
            gone.append(f"{check_id}: {error}")
    if gone:
        raise Gone("documented differences that no longer exist (update docs/guides/differences.md):\n  "
                   + "\n  ".join(gone))
    return results


if __name__ == "__main__":
    print(f"numpy {np.__version__}, mathpy {mathpy.__version__}")
    for check_id, check in CHECKS.items():
        try:
            n, m = check()
            print(f"{check_id:28s} holds   {'nvmath' if check_id.startswith('nvmath') else 'NumPy'}: {n}\n"
                  f"{'':36s}mathpy: {m}")
        except Gone as error:
            print(f"{check_id:28s} GONE    {error}")
