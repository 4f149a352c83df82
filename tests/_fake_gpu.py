"""Stand-ins for a GPU on a CPU-only machine, plugged in through mathpy's own seams:

- the array package interface (:mod:`mathpy._packages`): a package whose "device memory" is host memory;
- the engine table (:mod:`mathpy._engines`): engines that compute on raw addresses of that memory;
- the device query functions of :mod:`mathpy._cuda` (is there a GPU, which compute capability).

No private name of the code under test is replaced.
"""

import contextlib
import ctypes

import numpy as np

from mathpy import _cuda
from mathpy._packages import ArrayPackage


def pretend_a_gpu(monkeypatch, compute_capability=(9, 0)):
    """Make mathpy's device queries report one GPU of ``compute_capability``."""
    monkeypatch.setattr(_cuda, "device_count", lambda: 1)
    monkeypatch.setattr(_cuda, "is_available", lambda: True)
    monkeypatch.setattr(_cuda, "require_device", lambda device_id=0: None)
    monkeypatch.setattr(_cuda, "compute_capability", lambda device_id=0: tuple(compute_capability))


def host_view(pointer, dtype, shape, strides):
    """The host memory at ``pointer`` seen with element ``strides`` (what a CUDA library would address)."""
    dtype = np.dtype(dtype)
    if min(shape, default=1) == 0:
        return np.zeros(shape, dtype)
    span = 1 + sum((e - 1) * s for e, s in zip(shape, strides))
    raw = np.frombuffer((ctypes.c_uint8 * (span * dtype.itemsize)).from_address(pointer), np.uint8)
    return np.lib.stride_tricks.as_strided(raw.view(dtype), shape, tuple(s * dtype.itemsize for s in strides))


class HostMemory(ArrayPackage):
    """A device package for engine tests: "device arrays" are NumPy arrays on device 0; it records what is
    allocated (shape, dtype, device, stream) and which stream is current."""

    name = module = "hostmemory"
    device_arrays = True

    def __init__(self):
        super().__init__()
        self.allocations, self.current = [], 0
        self.capturing = set()  # streams that pose as capturing a CUDA graph

    def owns(self, obj):
        return False

    def is_capturing(self, device_id, stream):
        return (self.current if stream is None else stream) in self.capturing

    def pointer(self, array):
        return array.__array_interface__["data"][0]

    def current_stream(self, device_id):
        return self.current

    @contextlib.contextmanager
    def stream_scope(self, device_id, stream):
        previous = self.current
        self.current = previous if stream is None else stream
        try:
            yield
        finally:
            self.current = previous

    def _empty(self, shape, dtype, device_id, zero):
        self.allocations.append((tuple(shape), np.dtype(dtype), device_id, self.current))
        return (np.zeros if zero else np.empty)(shape, dtype)

    def _from_numpy(self, host, device_id):
        return np.array(host)
