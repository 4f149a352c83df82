"""Tolerances of the numerical tests, derived in one place from each dtype's unit roundoff and the problem's size.

- ``unit_roundoff(dtype)``: u = eps / 2 (2^-24 for float32, 2^-11 for float16, 2^-8 for bfloat16).
- Matmul: cuBLASLt and the CPU engine accumulate ``alpha * A @ B`` in the compute precision (float32 for 16-bit and
  8-bit inputs) and round once to the result dtype, so elementwise (Higham, Accuracy and Stability, 3.1)::

      |computed - exact| <= gamma_k * alpha * (|A| @ |B|) + roundings * u_out * |exact|,   gamma_k = k u / (1 - k u)

  with ``roundings`` = 1 for one rounding to the result dtype (2 when an epilog's input is rounded too). A per-product
  16-bit rounding violates this bound (it adds about sqrt(k) u_16 |A||B|).
- cuBLASLt's GELU / DGELU are approximations whose measured error (H200, cuBLASLt 13.1, see FACTS.md) is
  ``ACTIVATION_ERROR[precision]`` relative to max(|x|, 1): float64 5e-9; float32 1.5e-5 (at most 1e-4 absolute at
  |x| ~ 7); with a 16-bit result, at most one unit of its precision. cuBLASLt rounds a 16-bit epilog's product to
  the result type before the bias and the activation (see ``epilog_bounds``).
- FFT: a Cooley-Tukey/Bluestein FFT in precision u has a normwise relative error of order u log2(n) (Higham 24.1);
  ``fft_bound`` allows ``FFT_CONSTANT * u * (log2(n) + 1)`` of the reference's 2-norm, per transform array.
"""

import math

import ml_dtypes
import numpy as np

__all__ = ["ACTIVATION_ERROR", "FFT_CONSTANT", "GELU_SLOPE", "accumulation_dtype", "assert_fft_close",
           "assert_within", "epilog_bounds", "fft_bound", "gamma", "matmul_bound", "unit_roundoff"]

#: Measured relative accuracy of cuBLASLt's GELU-family epilogs (FACTS.md), by the precision they compute in.
ACTIVATION_ERROR = {"float64": 5e-9, "float32": 1.5e-5}
#: max |gelu'(x)| (about 1.13); |gelu''| is smaller, so DGELU's factor gelu'(aux) is bounded by it too.
GELU_SLOPE = 1.13
#: The constant of the FFT error bound: cuFFT's and pocketfft's measured errors stay below 2 u log2(n).
FFT_CONSTANT = 8


def _real(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    if dtype.kind in "iub":
        return np.dtype(np.float64)
    return dtype


def unit_roundoff(dtype):
    """u = eps / 2 of ``dtype`` (of its real part for complex; float64's for integers)."""
    dtype = _real(dtype)
    finfo = ml_dtypes.finfo(dtype) if dtype.itemsize <= 2 and dtype != np.float16 else np.finfo(dtype)
    return float(finfo.eps) / 2


def accumulation_dtype(dtype):
    """The precision a product of ``dtype`` operands accumulates in: float32 for 8- and 16-bit types."""
    dtype = _real(dtype)
    return np.dtype(np.float32) if dtype.itemsize <= 2 else dtype


#: Hopper's float8 tensor-core products: each wgmma adds a group of FLOAT8_K_GROUP products into the float32
#: accumulator with about 13 mantissa bits kept, truncating (the same is reported for DeepSeek-V3's FP8 GEMMs). So a
#: float8 product carries up to FLOAT8_ACCUMULATION_U of sum |a||b| per group, beyond float32's gamma_k. Measured on
#: the H200 (cuBLASLt 13.1): e4m3 x e5m2 -> float32 with K = 96 (3 groups) off by up to 1.3e-4 of sum |a||b|, 20x what
#: float32 accumulation allows and within (3 + 1) * 2^-13 = 4.9e-4.
FLOAT8_ACCUMULATION_U = 2.0 ** -13
FLOAT8_K_GROUP = 32


def gamma(k, dtype, u=None):
    """gamma_k = k u / (1 - k u) of the accumulation precision of ``dtype`` (or of unit roundoff ``u``; twice that
    for complex)."""
    u = unit_roundoff(accumulation_dtype(dtype)) if u is None else u
    factor = 2 if np.dtype(dtype).kind == "c" else 1
    return factor * k * u / (1 - k * u)


def matmul_bound(a, b, out_dtype, *, alpha=1.0, roundings=1, exact=None):
    """Elementwise bound on |computed - exact| of ``alpha * a @ b`` stored as ``out_dtype`` (see the module)."""
    a64 = np.abs(np.asarray(a).astype(np.complex128 if np.iscomplexobj(a) else np.float64))
    b64 = np.abs(np.asarray(b).astype(np.complex128 if np.iscomplexobj(b) else np.float64))
    k = np.shape(a)[-1]
    magnitude = abs(alpha) * (a64 @ b64)
    if exact is None:
        exact = alpha * (np.asarray(a).astype(np.complex128) @ np.asarray(b).astype(np.complex128))
    u_out = unit_roundoff(out_dtype)
    tiny = float((ml_dtypes.finfo if _real(out_dtype).itemsize <= 2 and _real(out_dtype) != np.float16
                  else np.finfo)(_real(out_dtype)).smallest_normal)
    accumulation = gamma(k + 1, out_dtype)
    if any(str(np.asarray(x).dtype).startswith("float8") for x in (a, b)):
        accumulation += (math.ceil(k / FLOAT8_K_GROUP) + 1) * FLOAT8_ACCUMULATION_U
    return (accumulation * magnitude + roundings * u_out * np.abs(exact)
            + (2 if np.dtype(out_dtype).kind == "c" else 1) * tiny)


def epilog_bounds(epilog, a, b, dtype, alpha, bias, x, d):
    """Elementwise error bounds of a matmul epilog's pre-activation ``x = alpha a @ b (+ bias)`` and of its result
    ``d`` (``bias`` None or broadcastable to x; ``x``, ``d`` the exact values or close to them).

    The pre-activation carries the product's accumulation error and up to two roundings to the result dtype: cuBLASLt
    rounds ``alpha a @ b`` to a 16-bit result type before adding the bias and applying the activation (measured on an
    H200, cuBLASLt 13.1: 16-bit GELU/bias epilogs are off by about u_out |alpha a @ b| where |d| is much smaller), and
    the biased value may be rounded again. That error is carried through the activation (slope at most 1 for
    RELU/DRELU, GELU_SLOPE for GELU/DGELU); the GELU family adds its own evaluation error (cuBLASLt's measured
    ACTIVATION_ERROR, and at most one unit of a 16-bit result's precision); the result is rounded once more."""
    product = abs(alpha) * (np.abs(np.asarray(a).astype(np.float64)) @ np.abs(np.asarray(b).astype(np.float64)))
    magnitude = product if bias is None else product + np.abs(np.asarray(bias).astype(np.float64))
    u_out = unit_roundoff(dtype)
    x_error = gamma(np.shape(a)[-1] + 1, dtype) * magnitude + u_out * product + u_out * np.abs(x)
    gelu = "GELU" in str(epilog).upper()
    d_error = (GELU_SLOPE if gelu else 1.0) * x_error
    if gelu:
        evaluation = max(ACTIVATION_ERROR[accumulation_dtype(dtype).name], u_out if _real(dtype).itemsize <= 2 else 0)
        d_error = d_error + evaluation * np.maximum(np.abs(x), 1)
    return x_error, d_error + u_out * np.abs(d)


def assert_within(got, expected, bound, what=""):
    """Every |got - expected| <= bound (arrays broadcast); the message names the worst element and its ratio."""
    got = np.asarray(got)
    if got.dtype not in (np.longdouble, np.clongdouble):  # (long double keeps its digits)
        got = got.astype(np.complex128 if np.iscomplexobj(got) else np.float64)
    expected = np.asarray(expected)
    error = np.abs(got - expected)
    bound = np.broadcast_to(bound, error.shape)
    ratio = np.where(bound > 0, error / np.where(bound > 0, bound, 1), np.where(error > 0, np.inf, 0))
    if ratio.size and not np.all(ratio <= 1):
        worst = np.unravel_index(np.argmax(ratio), ratio.shape)
        raise AssertionError(f"{what}: {int(np.sum(ratio > 1))} of {ratio.size} elements exceed the derived bound; "
                             f"worst at {worst}: got {got[worst]}, expected {expected[worst]}, error {error[worst]:.3g}"
                             f" > bound {bound[worst]:.3g} ({ratio[worst]:.2f}x)")


def fft_bound(precision, n):
    """Normwise relative error bound of an FFT of total length ``n`` computed in ``precision``."""
    return FFT_CONSTANT * unit_roundoff(precision) * (math.log2(max(n, 1)) + 1)


def assert_fft_close(got, expected, precision, n, what="", sources=1):
    """||got - expected||_2 <= sources * fft_bound(precision, n) * ||expected||_2 (plus one unit roundoff of the
    largest element, for results that are tiny or zero). ``sources`` = 2 when ``expected`` was itself computed in
    ``precision`` (NumPy's float32 FFT) and carries an error of the same order."""
    got = np.asarray(got).astype(np.complex128)
    expected = np.asarray(expected).astype(np.complex128)
    error = float(np.linalg.norm((got - expected).ravel()))
    size = float(np.linalg.norm(expected.ravel()))
    allowed = sources * fft_bound(precision, n) * size + unit_roundoff(precision) * float(np.max(np.abs(expected),
                                                                                        initial=0))
    assert error <= allowed, f"{what}: FFT error {error:.3g} > derived bound {allowed:.3g} (n={n}, {precision})"
