"""Plain Python helper functions inside callbacks and matmul epilogs (mathpy.jit._helpers): compiled with the function
that calls them on every target (the CPU's numba.njit, the GPU's device functions, checked here as LTO-IR and linked
PTX for sm_90 without a GPU), through globals and closures, helpers calling helpers; an edited helper never runs
stale code; a recursive helper gets numba's error, named."""

import math
import re

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from mathpy import CallbackCompileError

SHIFT = 0.25


def softplus(v):
    return math.log1p(math.exp(v))


def shifted_softplus(v):  # a helper that calls a helper and reads a module constant
    return softplus(v) + SHIFT


def twice(v):
    return 2 * v


def fft_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = twice(value) * user_info[offset % 16]


def matmul_epilog(value, row, col, bias):
    return shifted_softplus(value + bias[col])


def _scaler(factor):
    def scale(v):
        return v * factor

    def epilog(value, row, col, bias):  # the helper reached through a closure cell
        return scale(value) + bias[col]
    return epilog


rng = np.random.default_rng(3)


def test_fft_callbacks_call_helpers_on_the_cpu():
    x = (rng.standard_normal((4, 16)) + 1j * rng.standard_normal((4, 16))).astype(np.complex64)
    filt = rng.standard_normal(16).astype(np.float32)
    y = mfft.fft(x, epilog=mfft.Callback(fft_epilog, filt))
    np.testing.assert_allclose(y, 2 * np.fft.fft(x) * filt, rtol=1e-5, atol=1e-4)
    assert fft_epilog.__globals__["twice"] is twice  # the user's function is left as it was


def test_matmul_epilogs_call_helpers_through_globals_and_closures_on_the_cpu():
    a, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    bias = rng.standard_normal(7).astype(np.float32)
    product = a.astype(np.float64) @ b + bias
    d = mathpy.matmul(a, b, epilog=matmul_epilog, epilog_inputs={"bias": bias})
    np.testing.assert_allclose(d, np.log1p(np.exp(product)) + SHIFT, rtol=1e-5, atol=1e-5)
    d = mathpy.matmul(a, b, epilog=_scaler(3.0), epilog_inputs={"bias": bias})
    np.testing.assert_allclose(d, 3 * (a.astype(np.float64) @ b) + bias, rtol=1e-5, atol=1e-5)


def test_an_edited_helper_is_compiled_again(monkeypatch):
    """The compiled code depends on the helper's code: rebinding the helper (as editing and re-running a cell does)
    gives the new function's results, never the old compile's."""
    x = (rng.standard_normal((2, 16)) + 1j * rng.standard_normal((2, 16))).astype(np.complex64)
    ones = np.ones(16, np.float32)
    np.testing.assert_allclose(mfft.fft(x, epilog=mfft.Callback(fft_epilog, ones)), 2 * np.fft.fft(x), rtol=1e-5,
                               atol=1e-4)
    monkeypatch.setitem(globals(), "twice", lambda v: 5 * v)
    np.testing.assert_allclose(mfft.fft(x, epilog=mfft.Callback(fft_epilog, ones)), 5 * np.fft.fft(x), rtol=1e-5,
                               atol=1e-4)


def countdown(v):
    return v if v < 1 else countdown(v - 1)


def recursive_epilog(value, row, col, bias):
    return countdown(value) + bias[col]


def test_a_recursive_helper_gets_a_named_compile_error():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(CallbackCompileError, match="recursive_epilog"):
        mathpy.matmul(a, a, epilog=recursive_epilog, epilog_inputs={"bias": np.ones(2, np.float32)})


def test_fft_callbacks_with_helpers_compile_to_lto_ir_for_the_gpu():
    pytest.importorskip("numba.cuda")
    ltoir = mfft.compile_epilog(fft_epilog, "complex64", "float32", compute_capability=(9, 0))
    assert len(ltoir) > 0
    closure = _scaler(2.0)

    def through_closure(data_out, offset, value, user_info, unused):
        data_out[offset] = closure(value, 0, 0, user_info)
    assert len(mfft.compile_epilog(through_closure, "float32", "float32", compute_capability=(9, 0))) > 0


def test_matmul_epilogs_with_helpers_link_into_the_gpu_pass_inlined():
    """The helpers are device functions inlined into the epilog, which is inlined into the elementwise pass: the
    linked PTX calls nothing."""
    pytest.importorskip("numba.cuda")
    from mathpy.device import _epilog_pass as P
    from mathpy.device import _gemm_build
    from mathpy.device._gemm_kernel import EPILOG_SYMBOL
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _link
    from mathpy.jit import _matmul_epilog as E

    skeleton, _, _ = _gemm_build.pass_ltoir(P.PassConfig("float32", 1), (9, 0))
    wrapper, _ = W.wrapper_ltoir(E.as_matmul_epilog(matmul_epilog, ("bias",)), (("float32", 1),), "float32", None,
                                 (9, 0))
    cubin, ptx = _link.link({"pass": skeleton, "epilog": wrapper}, "sm_90", inlined=EPILOG_SYMBOL)
    assert cubin and not re.search(r"\bcall", ptx)
    assert "ex2.approx" in ptx or "lg2.approx" in ptx  # (exp and log1p, from the helpers)


def test_functions_numba_types_itself_are_left_as_they_are():
    """A function with an ``@overload`` (and numba-cuda's libdevice stubs) is a plain Python function too: numba's
    own typing of it wins, not a compile of its Python body."""
    pytest.importorskip("numba")
    from numba.extending import overload

    def plus_one(v):  # the Python body says + 10: the overload's + 1 must be what runs
        return v + 10

    @overload(plus_one)
    def _plus_one(v):
        return lambda v: v + 1

    def epilog(value, row, col, bias):
        return plus_one(value) + bias[col]

    a = np.eye(2, dtype=np.float32)
    d = mathpy.matmul(a, a, epilog=epilog, epilog_inputs={"bias": np.zeros(2, np.float32)})
    np.testing.assert_allclose(d, a + 1)


def test_libdevice_functions_stay_libdevices_on_the_gpu():
    pytest.importorskip("numba.cuda")
    from numba.cuda.libdevice import fast_sinf

    def sine(data_out, offset, value, user_info, unused):
        data_out[offset] = fast_sinf(value)
    assert len(mfft.compile_epilog(sine, "float32", compute_capability=(9, 0))) > 0
