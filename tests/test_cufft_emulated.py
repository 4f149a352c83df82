"""CUFFTEngine against an emulation of cuFFT's documented contract, on the CPU.

:class:`EmulatedCufft` (tests/_cufft_emulator.py) stands in for the cuFFT binding: ``cufftXtMakePlanMany`` records
the plan's arguments and ``cufftXtExec`` executes them on host memory as cuFFT's advanced data layout defines them
(element ``(b, x0, x1, x2)`` at ``b * idist + ((x0 * inembed[1] + x1) * inembed[2] + x2) * istride``; NULL embeds:
the basic layout, strides and distances ignored; real/complex sides from the data types; unnormalised). The engine
runs unchanged (its layout arguments, looped executes, two-part plans, in-place plans), and every result is compared
with NumPy's FFT of the same logical arrays, so any argument the engine gets wrong (a swapped distance, a wrong
embed, a wrong loop offset) gives a wrong answer here. What cuFFT does beyond its documentation is measured on the
GPU (tests/test_fft_cuda.py).
"""

import math

import numpy as np
import pytest

from mathpy._errors import UnsupportedLayoutError
from mathpy._execution import ExecutionCUDA
from mathpy.host.fft import _cufft
from mathpy.host.fft._layout import Transform

from _cufft_emulator import emulated_cufft  # noqa: F401  (the fixture)


@pytest.fixture
def emulated(emulated_cufft):  # noqa: F811
    return emulated_cufft


def _strided(buffer, shape, strides):
    return np.lib.stride_tricks.as_strided(buffer, shape, [s * buffer.itemsize for s in strides])


def _span(shape, strides):
    return 1 + sum((e - 1) * s for e, s in zip(shape, strides))


def _reference(t, x):
    n = [(t.output_shape if t.fft_type == "C2R" else t.input_shape)[a] for a in t.axes]
    wide = x.astype(np.float64 if t.fft_type == "R2C" else np.complex128)
    if t.fft_type == "R2C":
        return np.fft.rfftn(wide, axes=t.axes)
    if t.fft_type == "C2R":
        return np.fft.irfftn(wide, s=n, axes=t.axes) * math.prod(n)
    return np.fft.fftn(wide, axes=t.axes)


def run_engine(emulator, t):
    """Execute Transform ``t`` with CUFFTEngine on host buffers; returns (result, NumPy reference)."""
    precision = np.dtype(t.precision)
    complex_ = np.result_type(precision, np.complex64)
    in_dtype = precision if t.fft_type == "R2C" else complex_
    out_dtype = precision if t.fft_type == "C2R" else complex_
    rng = np.random.default_rng(sum(t.input_shape) + 7 * len(t.axes))
    in_span, out_span = _span(t.input_shape, t.input_strides), _span(t.output_shape, t.output_strides)
    in_buffer = (rng.standard_normal(in_span) + (1j * rng.standard_normal(in_span) if in_dtype.kind == "c" else 0))
    in_buffer = in_buffer.astype(in_dtype)
    x = _strided(in_buffer, t.input_shape, t.input_strides).copy()
    out_buffer = np.full(out_span, np.nan, out_dtype)
    emulator.buffers[:] = [in_buffer, out_buffer]
    engine = _cufft.CUFFTEngine(t, execution=ExecutionCUDA(0), allocator=emulator.memory.on(0, 0))
    try:
        engine.execute(in_buffer.ctypes.data, out_buffer.ctypes.data, -1 if t.fft_type != "C2R" else 1, 0)
    finally:
        engine.free()
    return _strided(out_buffer, t.output_shape, t.output_strides), _reference(t, x)


def _check(emulator, t):
    result, expected = run_engine(emulator, t)
    scale = max(1.0, float(np.abs(expected).max()))
    tolerance = 64 * np.finfo(np.dtype(t.precision)).eps * scale
    np.testing.assert_allclose(result, expected, rtol=0, atol=tolerance, err_msg=str(t))


# Named layouts: each makes a different pair of plan arguments matter.
CASES = {
    "C2C contiguous batch": Transform("C2C", np.float64, (8, 64), (64, 1), (8, 64), (64, 1), (1,)),
    "R2C contiguous (idist 64, odist 33)": Transform("R2C", np.float64, (8, 64), (64, 1), (8, 33), (33, 1), (1,)),
    "R2C padded real rows": Transform("R2C", np.float64, (8, 64), (70, 1), (8, 33), (33, 1), (1,)),
    "R2C strided input, output batch-inner": Transform("R2C", np.float32, (6, 10), (1, 6), (6, 6), (1, 6), (1,)),
    "C2R padded complex rows": Transform("C2R", np.float64, (5, 9), (12, 1), (5, 16), (16, 1), (1,)),
    "C2R odd length": Transform("C2R", np.float64, (4, 8), (8, 1), (4, 15), (15, 1), (1,)),
    "C2C axis 0 (istride 16, idist 1)": Transform("C2C", np.float64, (8, 16), (16, 1), (8, 16), (16, 1), (0,)),
    "C2C in to out of other strides": Transform("C2C", np.float32, (8, 16), (1, 8), (8, 16), (20, 1), (1,)),
    "2-D R2C, batch outermost": Transform("R2C", np.float64, (3, 6, 10), (60, 10, 1), (3, 6, 6), (36, 6, 1),
                                          (1, 2)),
    "2-D C2R with padded embeds": Transform("C2R", np.float64, (3, 6, 5), (40, 6, 1), (3, 6, 8), (64, 8, 1),
                                            (1, 2)),
    "3-D C2C": Transform("C2C", np.float64, (2, 4, 3, 5), (60, 15, 5, 1), (2, 4, 3, 5), (60, 15, 5, 1), (1, 2, 3)),
    "batch axes that do not fold: looped": Transform("C2C", np.float64, (4, 8, 16), (128, 16, 1), (4, 8, 16),
                                                     (128, 16, 1), (1,)),
    "R2C halved axis of length 1: two plans": Transform("R2C", np.float64, (3, 1), (1, 1), (3, 1), (1, 1), (0, 1)),
    "C2R halved axis of length 1: two plans": Transform("C2R", np.float64, (3, 1), (1, 1), (3, 1), (1, 1), (0, 1)),
    # found by the thorough hypothesis profile on the H200 (refused before): looped executes at odd real offsets
    "R2C looped at odd real offsets": Transform("R2C", np.float32, (1, 1, 1, 3, 2), (6, 1, 3, 1, 3), (1, 1, 1, 3, 2),
                                                (6, 1, 3, 1, 3), (1,)),
    "C2R looped at odd real offsets": Transform("C2R", np.float32, (1, 3, 2, 1), (1, 1, 3, 1), (1, 3, 2, 1),
                                                (1, 1, 3, 1), (0,)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_named_layouts(emulated, name):
    _check(emulated, CASES[name])


def _random_transform(rng):
    """A random Transform: 1-4 dimensions, 1-3 transform axes, permuted and padded input and output strides."""
    ndim = int(rng.integers(1, 5))
    kind = ("C2C", "R2C", "C2R")[int(rng.integers(3))]
    full = tuple(int(v) for v in rng.choice([1, 2, 3, 4, 5, 6, 8], ndim))
    axes = sorted(rng.choice(ndim, int(rng.integers(1, min(ndim, 3) + 1)), replace=False).tolist())
    if kind != "C2C" and rng.random() < 0.5:  # any axis may be the halved one
        rng.shuffle(axes)
    axes = tuple(int(a) for a in axes)
    halved = list(full)
    halved[axes[-1]] = full[axes[-1]] // 2 + 1
    in_shape = tuple(halved) if kind == "C2R" else full
    out_shape = tuple(halved) if kind == "R2C" else full

    def layout(shape):
        order = rng.permutation(len(shape)) if rng.random() < 0.5 else np.arange(len(shape))
        strides, step = [0] * len(shape), 1
        for axis in order[::-1]:
            strides[axis] = step
            step *= shape[axis] + int(rng.integers(0, 3) if rng.random() < 0.3 else 0)
        return tuple(strides)

    precision = (np.float32, np.float64)[int(rng.integers(2))]
    return Transform(kind, precision, in_shape, layout(in_shape), out_shape, layout(out_shape), axes)


def test_random_layouts(emulated):
    rng = np.random.default_rng(12)
    checked = refused = 0
    for _ in range(400):
        t = _random_transform(rng)
        try:
            _check(emulated, t)
            checked += 1
        except UnsupportedLayoutError:
            refused += 1  # layouts one plan cannot address; the API copies those first
    assert checked >= 300, (checked, refused)
    assert not emulated.plans  # every engine destroyed its handle


@pytest.mark.parametrize("graph_pool", [False, True])
def test_a_captured_execute_keeps_its_work_area_with_the_plan(emulated, graph_pool):
    """issue 20: an execute on a stream other than the plan's home takes a work area of its own and gives it back to
    the pool after the launch; in a graph capture the graph keeps using it, so where the pool would hand it on
    (CuPy's; torch gives each graph a private pool) it stays with the plan. Misaligned R2C pointers stage their
    data: those copies are kept likewise."""
    from mathpy import _streams
    emulated.workspace = 4096
    emulated.memory.graph_pool = graph_pool
    t = CASES["R2C contiguous (idist 64, odist 33)"]
    x = np.random.default_rng(1).standard_normal(8 * 64 + 1)
    out = np.zeros(8 * 33 + 1, np.complex128)
    emulated.buffers[:] = [x, out]
    engine = _cufft.CUFFTEngine(t, execution=ExecutionCUDA(0), allocator=emulated.memory.on(0, 1))  # home: 1
    try:
        engine.execute(x.ctypes.data, out.ctypes.data, -1, 2)  # another stream, outside a capture
        assert engine not in _streams._graph_memory
        emulated.memory.capturing.add(3)
        engine.execute(x.ctypes.data, out.ctypes.data, -1, 3)
        engine.execute(x.ctypes.data + 8, out.ctypes.data + 16, -1, 3)  # misaligned real side: staged copies too
        kept = _streams._graph_memory.get(engine, [])
        if graph_pool:
            assert kept == []
        else:
            assert [w.nbytes for w in kept if hasattr(w, "nbytes") and not isinstance(w, np.ndarray)] == [4096] * 2
            assert sum(isinstance(w, np.ndarray) for w in kept) == 1  # the staged input (the output is aligned)
        np.testing.assert_allclose(out[1:].reshape(8, 33), np.fft.rfft(x[1:].reshape(8, 64)), atol=1e-10)
    finally:
        engine.free()
