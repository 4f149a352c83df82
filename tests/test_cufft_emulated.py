"""CUFFTEngine against an emulation of cuFFT's documented contract, on the CPU.

:class:`EmulatedCufft` stands in for the cuFFT binding: ``cufftXtMakePlanMany`` records the plan's arguments and
``cufftXtExec`` executes them on host memory as cuFFT's advanced data layout defines them (element ``(b, x0, x1, x2)``
at ``b * idist + ((x0 * inembed[1] + x1) * inembed[2] + x2) * istride``; NULL embeds: the basic layout, strides and
distances ignored; real/complex sides from the data types; unnormalised). The engine runs unchanged (its layout
arguments, looped executes, two-part plans, in-place plans), and every result is compared with NumPy's FFT of the
same logical arrays, so any argument the engine gets wrong (a swapped distance, a wrong embed, a wrong loop offset)
gives a wrong answer here. What cuFFT does beyond its documentation is measured on the GPU (tests/test_fft_cuda.py).
"""

import contextlib
import ctypes
import math
import types

import numpy as np
import pytest

from mathpy._errors import UnsupportedLayoutError
from mathpy._execution import ExecutionCUDA
from mathpy.bindings import cufft as real_cufft
from mathpy.host.fft import _cufft
from mathpy.host.fft._layout import Transform

_REAL = {real_cufft.CUDA_R_32F: np.float32, real_cufft.CUDA_R_64F: np.float64}
_COMPLEX = {real_cufft.CUDA_C_32F: np.complex64, real_cufft.CUDA_C_64F: np.complex128}


def _host_view(buffers, pointer, count, dtype):
    """``count`` elements of ``dtype`` at host address ``pointer``, writable; they must lie inside one of the
    ``buffers`` (arrays) given to the plan: cuFFT would read or write foreign memory there."""
    nbytes = count * np.dtype(dtype).itemsize
    if not any(b.ctypes.data <= pointer and pointer + nbytes <= b.ctypes.data + b.nbytes for b in buffers):
        raise AssertionError(f"the plan addresses {nbytes} bytes at {pointer:#x}, outside the operands")
    return np.frombuffer((ctypes.c_char * nbytes).from_address(pointer), dtype=dtype)


def _element_indices(dims, embed, stride, dist, batch):
    """Element offsets of every (b, x0, ...) of one side of a plan, shaped (batch, *dims)."""
    index = np.zeros((batch, *dims), np.int64)
    index += (np.arange(batch) * dist).reshape((batch,) + (1,) * len(dims))
    for k, extent in enumerate(dims):
        step = stride * math.prod(embed[k + 1:])
        shape = [1] * (len(dims) + 1)
        shape[k + 1] = extent
        index += (np.arange(extent) * step).reshape(shape)
    return index


class EmulatedCufft:
    """The cuFFT binding's surface as CUFFTEngine uses it, executing plans on host memory."""

    def __init__(self):
        self.plans, self.executes, self.buffers = {}, 0, []
        self.data_type, self.check = real_cufft.data_type, real_cufft.check
        self.lib = types.SimpleNamespace(
            cufftCreate=self._create, cufftDestroy=lambda handle: self.plans.pop(handle),
            cufftSetAutoAllocation=lambda handle, value: None, cufftSetWorkArea=lambda handle, pointer: None,
            cufftXtMakePlanMany=self._make_plan)

    def _create(self, handle_ref):
        handle = len(self.plans) + 100
        self.plans[handle] = None
        handle_ref._obj.value = handle

    def _make_plan(self, handle, rank, n, inembed, istride, idist, in_type, onembed, ostride, odist, out_type,
                   batch, work_ref, exec_type):
        n = tuple(n[:rank])
        kind = "R2C" if in_type in _REAL else "C2R" if out_type in _REAL else "C2C"
        halved = n[:-1] + (n[-1] // 2 + 1,)
        in_dims = halved if kind == "C2R" else n
        out_dims = halved if kind == "R2C" else n

        def side(dims, embed, stride, dist):
            if embed is None:  # the basic layout: cuFFT ignores stride and distance
                return dims, 1, math.prod(dims)
            return tuple(embed[:rank]), stride, dist

        in_dtype = (_REAL | _COMPLEX)[in_type]
        out_dtype = (_REAL | _COMPLEX)[out_type]
        self.plans[handle] = (kind, n, in_dims, side(in_dims, inembed, istride, idist), in_dtype, out_dims,
                              side(out_dims, onembed, ostride, odist), out_dtype, batch)
        work_ref._obj.value = 0

    def _exec(self, handle, input_pointer, output_pointer, direction):
        kind, n, in_dims, in_side, in_dtype, out_dims, out_side, out_dtype, batch = self.plans[handle.value]
        self.executes += 1
        in_index = _element_indices(in_dims, *in_side, batch)
        out_index = _element_indices(out_dims, *out_side, batch)
        data = _host_view(self.buffers, input_pointer, int(in_index.max()) + 1, in_dtype)[in_index].astype(
            np.complex128 if kind != "R2C" else np.float64)
        axes = tuple(range(1, len(n) + 1))
        if kind == "R2C":
            result = np.fft.rfftn(data, axes=axes)
        elif kind == "C2R":
            result = np.fft.irfftn(data, s=n, axes=axes) * math.prod(n)
        elif direction == -1:
            result = np.fft.fftn(data, axes=axes)
        else:
            result = np.fft.ifftn(data, axes=axes) * math.prod(n)
        output = _host_view(self.buffers, output_pointer, int(out_index.max()) + 1, out_dtype)
        output[out_index] = result.astype(out_dtype)
        return 0

    def unchecked(self, name):
        return {"cufftXtExec": self._exec, "cufftSetStream": lambda handle, stream: 0}[name]


@pytest.fixture
def emulated(monkeypatch):
    emulator = EmulatedCufft()
    monkeypatch.setattr(_cufft, "cufft", emulator)
    monkeypatch.setattr(_cufft, "_exec", None)
    monkeypatch.setattr(_cufft._cuda, "require_device", lambda device_id=0: None)
    monkeypatch.setattr(_cufft._cuda, "device_scope", lambda device_id: contextlib.nullcontext())
    monkeypatch.setattr(_cufft._cuda, "device_count", lambda: 1)
    return emulator


def _strided(buffer, shape, strides):
    return np.lib.stride_tricks.as_strided(buffer, shape, [s * buffer.itemsize for s in strides])


def _span(shape, strides):
    return 1 + sum((e - 1) * s for e, s in zip(shape, strides))


def _reference(t, x):
    n = [(t.output_shape if t.kind == "C2R" else t.input_shape)[a] for a in t.axes]
    wide = x.astype(np.float64 if t.kind == "R2C" else np.complex128)
    if t.kind == "R2C":
        return np.fft.rfftn(wide, axes=t.axes)
    if t.kind == "C2R":
        return np.fft.irfftn(wide, s=n, axes=t.axes) * math.prod(n)
    return np.fft.fftn(wide, axes=t.axes)


def run_engine(emulator, t):
    """Execute Transform ``t`` with CUFFTEngine on host buffers; returns (result, NumPy reference)."""
    precision = np.dtype(t.precision)
    complex_ = np.result_type(precision, np.complex64)
    in_dtype = precision if t.kind == "R2C" else complex_
    out_dtype = precision if t.kind == "C2R" else complex_
    rng = np.random.default_rng(sum(t.input_shape) + 7 * len(t.axes))
    in_span, out_span = _span(t.input_shape, t.input_strides), _span(t.output_shape, t.output_strides)
    in_buffer = (rng.standard_normal(in_span) + (1j * rng.standard_normal(in_span) if in_dtype.kind == "c" else 0))
    in_buffer = in_buffer.astype(in_dtype)
    x = _strided(in_buffer, t.input_shape, t.input_strides).copy()
    out_buffer = np.full(out_span, np.nan, out_dtype)
    emulator.buffers[:] = [in_buffer, out_buffer]
    engine = _cufft.CUFFTEngine(t, execution=ExecutionCUDA(0), package="cupy")
    try:
        engine.execute(in_buffer.ctypes.data, out_buffer.ctypes.data, -1 if t.kind != "C2R" else 1, 0)
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
    assert checked >= 250, (checked, refused)
    assert not emulated.plans  # every engine destroyed its handle
