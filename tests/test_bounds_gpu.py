"""Bounds of callbacks and epilogs on the GPU: cuFFT with the checked LTO-IR of mathpy's callbacks, and the checked
builds of every matmul route that runs a Python epilog (cuBLASLt + the elementwise pass, the generic kernel, the fused
Hopper kernel), several operands, and a checked execution refused in a CUDA graph capture. The same cases as
tests/test_bounds.py, which runs the GPU code on the host; here a real GPU runs it, where an unchecked out-of-bounds
access reads or writes foreign memory.

Run on a GPU machine: ``PYTHONPATH=. python -m pytest -m gpu tests/test_bounds_gpu.py -q``.
"""

import re

import ml_dtypes
import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from mathpy import OutOfBoundsError, StreamCaptureError

from _tolerance import assert_fft_close, assert_within, matmul_bound
from test_bounds import (X8, epilog_far_store, epilog_late_store, gate, late_gate, prolog_by_value, prolog_full,
                         prolog_late, prolog_plus_3)

pytestmark = pytest.mark.gpu


def _offset(error):
    return int(re.search(r"at offset (\d+)", str(error)).group(1))


def test_refused_when_planning_on_the_gpu():
    cp = pytest.importorskip("cupy")
    x = cp.asarray(X8)
    with pytest.raises(ValueError, match="data_in has 8"):
        mfft.fft(x, prolog=prolog_plus_3)
    with pytest.raises(ValueError, match="data_out has 8"):
        mfft.fft(x, epilog=epilog_far_store, options={"check_bounds": True})


@pytest.mark.parametrize("kind, callback, array, shift", [
    ("prolog", "late", "user_info", 2),   # offsets 6 and 7 read user_info[8], user_info[9]
    ("epilog", "store", "data_out", 5),   # offsets 6 and 7 write data_out[11], data_out[12]
])
def test_cufft_check_bounds_names_the_array_and_the_index(kind, callback, array, shift):
    cp = pytest.importorskip("cupy")
    x = cp.asarray(X8)
    given = (mfft.Callback(prolog_late, data=cp.ones(8, np.float32)) if callback == "late" else epilog_late_store)
    for _ in range(2):  # the record is cleared after each error: the next execution reports again
        with pytest.raises(OutOfBoundsError) as info:
            mfft.fft(x, options={"check_bounds": True}, **{kind: given})
        error = info.value
        assert error.array == array and error.index[0] == _offset(error) + shift and _offset(error) in (6, 7)


def test_cufft_check_bounds_on_data_dependent_indices():
    cp = pytest.importorskip("cupy")
    levels = cp.asarray(np.linspace(1, 2, 16, dtype=np.float32))
    codes = (np.arange(128) % 16).reshape(8, 16).astype(np.complex64)
    callback = mfft.Callback(prolog_by_value, data=levels)
    with mfft.FFT(cp.asarray(codes), axes=[1], execution="cuda", options={"check_bounds": True}) as f:
        f.plan(prolog=callback)
        got = cp.asnumpy(f.execute())
        expected = np.fft.fft(codes.astype(np.complex128) * np.linspace(1, 2, 16)[np.arange(16)], axis=-1)
        assert_fft_close(got, expected, np.float32, 16)
        bad = codes.copy()
        bad[3, 5] = 16
        f.reset_operand(cp.asarray(bad))
        with pytest.raises(OutOfBoundsError) as info:
            f.execute()
        assert (info.value.array, info.value.index, _offset(info.value)) == ("user_info", (16,), 53)
        f.reset_operand(cp.asarray(codes))  # the record was cleared: a clean execution again
        assert_fft_close(cp.asnumpy(f.execute()), expected, np.float32, 16)


@pytest.mark.parametrize("shape, axis", [((64, 256), -1), ((256, 64), 0)])
def test_checked_cufft_results_equal_unchecked(shape, axis):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    full = rng.standard_normal(shape).astype(np.float32)
    results = [cp.asnumpy(mfft.fft(cp.asarray(x), axis=axis, prolog=mfft.Callback(prolog_full, data=cp.asarray(full)),
                                   options={"check_bounds": check})) for check in (False, True)]
    np.testing.assert_array_equal(results[0], results[1])
    assert_fft_close(results[1], np.fft.fft(x.astype(np.complex128) * full, axis=axis), np.float32, shape[axis])


def _matmul_operands(torch, m, n, k, dtype):
    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype) / k ** 0.5
    b = torch.randn(k, n, device="cuda", generator=g).to(dtype)
    data = torch.randn(m, n, device="cuda", generator=g).to(dtype)
    return a, b, data


@pytest.mark.parametrize("route, dtype_name, size", [("elementwise", "float32", (96, 80, 48)),
                                                    ("generic", "float32", (96, 80, 48)),
                                                    ("fused", "bfloat16", (256, 256, 64))])
def test_fused_matmul_check_bounds(route, dtype_name, size):
    """Each route that runs the user's function: the elementwise pass after cuBLASLt, the generic kernel, the Hopper
    kernel (on an H200; its data tile staged in shared memory, whose staged reads are checked too)."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    m, n, k = size
    a, b, data = _matmul_operands(torch, m, n, k, dtype)
    preferences = {"epilog_route": route}
    with pytest.raises(ValueError, match=r"needs a shape of at least \(%d, %d\)" % (m, n)):
        mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": data[:1, :1]}, preferences=preferences)
    for _ in range(2):  # the record is cleared after each error: the next execution reports again
        with pytest.raises(OutOfBoundsError) as info:  # rows 1.. read column n: which one comes first is the GPU's
            mathpy.matmul(a, b, epilog=late_gate, epilog_inputs={"data": data}, options={"check_bounds": True},
                          preferences=preferences)
        error = info.value
        assert error.array == "data" and error.index[1] == n and 1 <= error.index[0] < m
        assert "late_gate" in error.callback
    checked = mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": data}, options={"check_bounds": True},
                            preferences=preferences)
    unchecked = mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": data}, preferences=preferences)
    assert torch.equal(unchecked, checked)
    _assert_gated(checked, a, b, data, np.float32 if dtype_name == "float32" else ml_dtypes.bfloat16)


def _assert_gated(result, a, b, data, out):
    """``result`` is ``(a @ b) * data`` within the bound: the float32 product's error and its rounding (to float32
    in the elementwise pass's D, or in registers) scaled by |data|, then the product with data rounded to ``out``."""
    a64, b64, d64 = (t.double().cpu().numpy() for t in (a, b, data))
    exact = a64 @ b64
    bound = matmul_bound(a64, b64, out, roundings=2, exact=exact) * np.abs(d64)
    assert_within(result.double().cpu().numpy(), exact * d64, bound)


def _late_second(value, row, col, bias, gate):
    if row > 0:
        return value * gate[row, col] + bias[col + 1]
    return value * gate[row, col]


@pytest.mark.parametrize("route", ["elementwise", "generic"])
def test_check_bounds_names_the_operand(route):
    """Several operands: the record says which one was read outside (its position among the operands)."""
    torch = pytest.importorskip("torch")
    a, b, gate = _matmul_operands(torch, 64, 48, 32, torch.float32)
    bias = torch.ones(48, device="cuda")
    with pytest.raises(OutOfBoundsError) as info:
        mathpy.matmul(a, b, epilog=_late_second, epilog_inputs={"bias": bias, "gate": gate},
                      options={"check_bounds": True}, preferences={"epilog_route": route})
    assert info.value.array == "bias" and info.value.index == (48,) and "bias (48 elements)" in str(info.value)


def test_checked_matmul_is_refused_in_a_cuda_graph_capture():
    """A checked execution waits on the host for its record: inside a capture it raises StreamCaptureError before
    anything is queued, and the capture goes on to record the unchecked plan."""
    torch = pytest.importorskip("torch")
    a, b, data = _matmul_operands(torch, 64, 64, 32, torch.float32)
    with mathpy.Matmul(a, b, options={"check_bounds": True}) as checked, mathpy.Matmul(a, b) as plain:
        for mm in (checked, plain):
            mm.plan(epilog=gate, epilog_inputs={"data": data})
            mm.execute()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            with pytest.raises(StreamCaptureError, match="check_bounds"):
                checked.execute()
            out = plain.execute()
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
    _assert_gated(out, a, b, data, np.float32)
