"""An emulation of cuFFT's documented contract on host memory, standing in for mathpy's cuFFT binding so that
CUFFTEngine runs unchanged on the CPU (tests/test_cufft_emulated.py, tests/test_faults.py).

``cufftXtMakePlanMany`` records the plan's arguments and ``cufftXtExec`` executes them as cuFFT's advanced data layout
defines them (element ``(b, x0, x1, x2)`` at ``b * idist + ((x0 * inembed[1] + x1) * inembed[2] + x2) * istride``;
NULL embeds: the basic layout, strides and distances ignored; real/complex sides from the data types;
unnormalised). Reads and writes must stay inside the registered ``buffers``. ``fail`` makes a function return a
status (``{name: status}``), or raise an exception instance, to test faults.
"""

import contextlib
import ctypes
import math
import types

import numpy as np
import pytest

from _fake_gpu import HostMemory, pretend_a_gpu
from mathpy import _runtime
from mathpy._dtypes import COMPLEX32
from mathpy.bindings import cufft as real_cufft
from mathpy.bindings._types import DataType
from mathpy.host.fft import _cufft

__all__ = ["EmulatedCufft", "RecordingMemory", "emulated_cufft"]

_REAL = {DataType.R_16F: np.float16, DataType.R_32F: np.float32, DataType.R_64F: np.float64}
_COMPLEX = {DataType.C_16F: COMPLEX32, DataType.C_32F: np.complex64, DataType.C_64F: np.complex128}


def _widen(data, kind):
    """Elements as complex128 (float64 for the real input of R2C); complex half is two float16."""
    if data.dtype == COMPLEX32:
        return data["real"].astype(np.float64) + 1j * data["imag"].astype(np.float64)
    return data.astype(np.complex128 if kind != "R2C" else np.float64)


def _narrow(values, dtype):
    """``values`` rounded to the plan's output dtype (complex half: each part to float16)."""
    if np.dtype(dtype) == COMPLEX32:
        out = np.empty(values.shape, COMPLEX32)
        out["real"], out["imag"] = values.real.astype(np.float16), values.imag.astype(np.float16)
        return out
    return values.astype(dtype)


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

    def __init__(self, workspace=0):
        self.plans, self.executes, self.buffers, self.fail, self.workspace = {}, 0, [], {}, workspace
        self.allocations = []  # arrays the engine allocated (workspaces, staging copies)
        self.check = real_cufft.check
        self.lib = types.SimpleNamespace(**{name: self._checked(name, function) for name, function in (
            ("cufftCreate", self._create), ("cufftDestroy", lambda handle: self.plans.pop(handle)),
            ("cufftSetAutoAllocation", lambda handle, value: None),
            ("cufftSetWorkArea", lambda handle, pointer: None), ("cufftXtMakePlanMany", self._make_plan))})

    def _failure(self, name):
        """None, or the status / exception ``fail`` names for ``name`` (raised exceptions are re-raised here)."""
        failure = self.fail.get(name)
        if isinstance(failure, BaseException):  # a new instance: a raised one keeps its traceback's frames alive
            raise type(failure)(*failure.args)
        return failure

    def _checked(self, name, function):
        def call(*args):
            status = self._failure(name)
            if status:
                real_cufft.check(name, status)
            return function(*args)
        return call

    def set_jit_callback(self, handle, symbol, buffer, size, callback_type, caller_info):
        status = self._failure("cufftXtSetJITCallback")
        if status:
            real_cufft.check("cufftXtSetJITCallback", status)

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
        work_ref._obj.value = self.workspace

    def _exec(self, handle, input_pointer, output_pointer, direction):
        status = self._failure("cufftXtExec")
        if status:
            return status
        kind, n, in_dims, in_side, in_dtype, out_dims, out_side, out_dtype, batch = self.plans[handle]  # (an int: the engine passes its handle as one)
        self.executes += 1
        complex_size = np.dtype(in_dtype if kind == "C2R" else out_dtype).itemsize
        real_pointer = input_pointer if kind == "R2C" else output_pointer
        if kind != "C2C" and real_pointer % complex_size:  # cuFFT's rule (measured on the H200)
            return 4  # CUFFT_INVALID_VALUE
        in_index = _element_indices(in_dims, *in_side, batch)
        out_index = _element_indices(out_dims, *out_side, batch)
        buffers = self.buffers + self.allocations
        data = _host_view(buffers, input_pointer, int(in_index.max()) + 1, in_dtype)[in_index]
        data = _widen(data, kind)
        axes = tuple(range(1, len(n) + 1))
        if kind == "R2C":
            result = np.fft.rfftn(data, axes=axes)
        elif kind == "C2R":
            result = np.fft.irfftn(data, s=n, axes=axes) * math.prod(n)
        elif direction == -1:
            result = np.fft.fftn(data, axes=axes)
        else:
            result = np.fft.ifftn(data, axes=axes) * math.prod(n)
        output = _host_view(buffers, output_pointer, int(out_index.max()) + 1, out_dtype)
        output[out_index] = _narrow(result, out_dtype)
        return 0

    def unchecked(self, name):
        return {"cufftXtExec": self._exec,
                "cufftSetStream": lambda handle, stream: self._failure("cufftSetStream") or 0,
                "cufftSetWorkArea": lambda handle, area: self._failure("cufftSetWorkArea") or 0}[name]


class RecordingMemory(HostMemory):
    """The engines' allocator seam: host arrays, kept in ``arrays`` (the emulator checks addresses against them)."""

    def __init__(self):
        super().__init__()
        self.arrays = []

    def _empty(self, shape, dtype, device_id, zero):
        array = super()._empty(shape, dtype, device_id, zero)
        self.arrays.append(array)
        return array


@pytest.fixture
def emulated_cufft(monkeypatch):
    """CUFFTEngine on an EmulatedCufft, with mathpy's device queries answering "one GPU" and workspaces and staging
    buffers as host arrays (``.allocations``); create engines with ``allocator=emulator.memory.on(0, stream)``."""
    emulator = EmulatedCufft()
    monkeypatch.setattr(_cufft, "cufft", emulator)
    monkeypatch.setattr(_cufft, "_hot", {})  # the hot-path functions, made again from the emulator
    pretend_a_gpu(monkeypatch)
    monkeypatch.setattr(_runtime, "device_scope", lambda device_id: contextlib.nullcontext())
    monkeypatch.setattr(_runtime, "synchronize", lambda stream: None)
    monkeypatch.setattr(_runtime, "copy_device_to_device", lambda destination, source, nbytes, stream: ctypes.memmove(
        destination, source, nbytes))
    emulator.memory = RecordingMemory()
    emulator.allocations = emulator.memory.arrays
    return emulator
