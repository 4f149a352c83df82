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

@difference("fft-not-an-array")
def _():
    n, m = both(lambda xp: xp.fft(None))
    return expect(n.startswith("raises IndexError") and m.startswith("raises TypeError: a: expected an array, got "
                                                                      "NoneType"), n, m)


@difference("fft-float16-norm-factor")
def _():
    x = np.random.default_rng(0).standard_normal(6).astype(np.float16)
    single = np.fft.ifft(x.astype(np.float32))
    numpy_error = float(np.max(np.abs(np.fft.ifft(x) - single)))
    mathpy_error = float(np.max(np.abs(mathpy.fft.ifft(x) - single)))
    n, m = f"differs from single precision by {numpy_error:.1e}", f"by {mathpy_error:.1e}"
    return expect(numpy_error > 1e-5 > 1e-7 > mathpy_error, n, m)


@difference("fft-out-honoured")
def _():
    x, out = np.ones((3, 3)), np.empty((3, 3), complex)
    numpy_used = np.fft.ifft2(x, out=out) is out
    mathpy_used = mathpy.fft.ifft2(x, out=out) is out
    return expect(not numpy_used and mathpy_used, f"ifft2(out=o) is o: {numpy_used}", f"{mathpy_used}")


@difference("fft-out-n-d-resize")
def _():
    n, m = both(lambda xp: xp.fftn(np.ones((4, 4)), s=(8, 8), axes=(0, 1), out=np.empty((8, 8), complex)))
    return expect(n.startswith("raises ValueError") and m.startswith("returns complex128 (8, 8)"), n, m)


@difference("fft-int-s-axes")
def _():
    n, m = both(lambda xp: xp.fftn(np.ones((4, 4)), s=4, axes=1))
    return expect(n.startswith("raises TypeError") and m.startswith("returns complex128 (4, 4)"), n, m)


@difference("fft-long-double-gpu")
def _():
    from mathpy.host.fft._problem import fft_problem
    from mathpy.host.fft._options import FFTOptions
    from mathpy._operands import wrap_operand
    x = np.ones(4, np.clongdouble)
    n = outcome(lambda: np.fft.fft(x))
    if np.finfo(np.longdouble).nmant <= 52:  # long double is double here (Windows, some ARM): nothing to differ
        return n, n
    if mathpy.cuda_is_available():
        m = outcome(lambda: mathpy.fft.fft(x, execution="cuda"))
    else:  # the rule itself, as the GPU path applies it before any work
        import mathpy._cuda as cuda
        saved = cuda.require_device
        cuda.require_device = lambda device_id=0: None
        try:
            m = outcome(lambda: fft_problem(wrap_operand(x), None, FFTOptions(), mathpy.ExecutionCUDA(0)))
        finally:
            cuda.require_device = saved
    return expect(n.startswith("returns complex") and m.startswith("raises TypeError") and "cpu" in m, n, m)


def _reports(call):
    """The RuntimeWarning messages of ``call()`` and its result."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return [str(w.message) for w in caught if w.category is RuntimeWarning], result


_REPORTING = mathpy.ExecutionCPU(fp_reports=True)


@difference("fft-single-precision-overflow")
def _():
    x = np.full(8, 3e38, np.float32)
    (n_reports, n_result), (m_reports, m_result) = (_reports(lambda: np.fft.fft(x)),
                                                    _reports(lambda: mathpy.fft.fft(x, execution=_REPORTING)))
    n = f"{n_reports}, NaNs: {int(np.isnan(n_result).sum())}"
    m = f"{m_reports}, NaNs: {int(np.isnan(m_result).sum())}"
    return expect(n_reports == ["overflow encountered in cast"] and not np.isnan(n_result).any()
                  and "overflow encountered in fft" in m_reports and np.isnan(m_result).any(), n, m)


@difference("fft-fp-reports")
def _():
    x = np.full(8, 1e308)
    (n_reports, n_result), (m_reports, m_result) = _reports(lambda: np.fft.fft(x)), _reports(lambda: mathpy.fft.fft(x))
    asked, _ = _reports(lambda: mathpy.fft.fft(x, execution=_REPORTING))
    return expect(n_reports and not m_reports and asked == n_reports
                  and np.array_equal(n_result, m_result, equal_nan=True), f"{n_reports}", f"{m_reports}")


@difference("fft-fp-reports-per-plan")
def _():
    x = np.full((4, 4), 1e308)
    (n_reports, _), (m_reports, _) = (_reports(lambda: np.fft.fft2(x)),
                                      _reports(lambda: mathpy.fft.fft2(x, execution=_REPORTING)))
    return expect(len(n_reports) == 3 and len(m_reports) == 2 and set(n_reports) == set(m_reports),
                  f"{n_reports}", f"{m_reports}")


# --- numpy.matmul --------------------------------------------------------------------------------------------------

def both_matmul(a, b, **kwargs):
    return outcome(lambda: np.matmul(a, b)), outcome(lambda: mathpy.matmul(a, b, **kwargs))


@difference("matmul-not-an-array")
def _():
    n, m = both_matmul(None, np.ones((4, 2)))
    return expect(n.startswith("raises ValueError") and m.startswith("raises TypeError: a: expected an array"), n, m)


@difference("matmul-f-ordered-a")
def _():
    a, b = np.asfortranarray(np.ones((3, 4))), np.ones((4, 5))
    numpy_c, mathpy_f = np.matmul(a, b).flags.c_contiguous, mathpy.matmul(a, b).flags.f_contiguous
    forced = mathpy.matmul(a, b, options={"result_order": "C"}).flags.c_contiguous
    return expect(numpy_c and mathpy_f and forced, f"C-ordered result: {numpy_c}",
                  f"F-ordered result: {mathpy_f} (C with result_order='C': {forced})")


@difference("matmul-ml-dtypes")
def _():
    import ml_dtypes
    bf16 = np.ones((2, 3), ml_dtypes.bfloat16)
    n, m = both_matmul(bf16, bf16.T)
    nm, mm = both_matmul(bf16, np.ones((3, 2), np.float32))
    return expect(n.startswith("returns float32") and m.startswith("returns bfloat16") and nm.startswith("returns")
                  and mm.startswith("raises TypeError"), n + "; with float32: " + nm, m + "; with float32: " + mm)


@difference("matmul-integers-gpu")
def _():
    from mathpy.host.matmul._options import MatmulOptions, resolve_types
    a = np.ones((3, 4), np.int64)
    n = outcome(lambda: np.matmul(a, a.T))
    try:  # the rule the GPU path applies before any work
        resolve_types(a.dtype, a.dtype, None, MatmulOptions(), on_gpu=True)
        m = "computes it on the GPU"
    except TypeError as error:
        m = f"on the GPU raises TypeError: {error}"
    int8 = outcome(lambda: resolve_types(np.dtype(np.int8), np.dtype(np.int8), None, MatmulOptions(), on_gpu=True))
    return expect(n.startswith("returns int64") and "raises TypeError" in m and "execution='cpu'" in m
                  and int8.startswith("returns"), n, m[:120])


@difference("matmul-ufunc-keywords")
def _():
    a = np.ones((2, 3), np.float32)
    n = outcome(lambda: np.matmul(a, a.T, dtype=np.float64, casting="same_kind"))
    m = outcome(lambda: mathpy.matmul(a, a.T, dtype=np.float64, casting="same_kind"))
    spelled = outcome(lambda: mathpy.matmul(a, a.T, options={"result_type": np.float32}, out=np.empty((2, 2))))
    return expect(n.startswith("returns float64") and m.startswith("raises TypeError") and "dtype" in m
                  and spelled.startswith("returns float64"), n, f"{m}; options= and out=: {spelled}")


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
