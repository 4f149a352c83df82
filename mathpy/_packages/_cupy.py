"""CuPy: device arrays in CuPy's stream-ordered memory pool; dtypes are NumPy's. Imported only when CuPy arrays
arrive or CuPy holds device memory for host operands."""

import contextlib
import operator

import numpy as np

try:
    import cupy
except ImportError:  # only mathpy._packages.get imports this module, and only with cupy present; the guard
    cupy = None  # lets pytest's doctest collection import it on a machine without it

from ._base import ArrayPackage

__all__ = ["CuPyPackage"]


class CuPyPackage(ArrayPackage):
    name = module = "cupy"
    device_arrays = True

    def __init__(self):
        super().__init__()
        self._wrappers = {}  # raw stream -> cupy stream object (they own nothing: reusable)
        self._devices = {}
        if type(self).pointer is CuPyPackage.pointer:  # hot paths: a C accessor
            self.pointer = operator.attrgetter("data.ptr")

    def owns(self, obj):
        return isinstance(obj, cupy.ndarray)

    def describe(self, array):
        itemsize = array.dtype.itemsize
        return (array.shape, tuple(map(itemsize.__rfloordiv__, array.strides)), array.dtype, array.device.id,
                array.data.ptr)

    def facts(self, array):
        return (array.shape, array.strides, array.dtype, array.device.id), array.data.ptr

    def pointer(self, array):
        return array.data.ptr

    def current_stream(self, device_id):
        if cupy.cuda.runtime.getDevice() == device_id:
            return cupy.cuda.get_current_stream().ptr
        with self._device(device_id):
            return cupy.cuda.get_current_stream().ptr

    def stream_scope(self, device_id, stream):
        same_device = cupy.cuda.runtime.getDevice() == device_id
        if same_device and (stream is None or cupy.cuda.get_current_stream().ptr == stream):
            return contextlib.nullcontext()  # the hot path: nothing to switch
        scope = contextlib.ExitStack()
        if not same_device:
            scope.enter_context(self._device(device_id))
        if stream is not None:
            scope.enter_context(self._stream(stream))
        return scope

    def _device(self, device_id):
        device = self._devices.get(device_id)
        if device is None:
            device = self._devices[device_id] = cupy.cuda.Device(device_id)
        return device

    def _stream(self, stream):
        wrapper = self._wrappers.get(stream)
        if wrapper is None:
            if len(self._wrappers) > 256:
                self._wrappers.clear()
            wrapper = cupy.cuda.Stream.null if stream == 0 else cupy.cuda.ExternalStream(stream)
            self._wrappers[stream] = wrapper
        return wrapper

    def broadcast_to(self, array, shape):
        return cupy.broadcast_to(array, shape)

    def contiguous(self, array):
        return cupy.ascontiguousarray(array)

    def from_dlpack(self, obj):
        return cupy.from_dlpack(obj)

    def adopt(self, obj):
        """A CuPy view of a foreign object with ``__cuda_array_interface__``."""
        return cupy.asarray(obj)

    def _maker(self, device_id, stream, shape, dtype, order, zero):
        create = cupy.zeros if zero else cupy.empty
        transpose = None
        if order is not None:
            shape, transpose = tuple(shape[a] for a in order), tuple(int(i) for i in np.argsort(order))
        get_device, current = cupy.cuda.runtime.getDevice, cupy.cuda.get_current_stream

        def make():
            if get_device() == device_id and (stream is None or current().ptr == stream):  # the hot path
                array = create(shape, dtype)
            else:
                with self.stream_scope(device_id, stream):
                    array = create(shape, dtype)
            return array if transpose is None else array.transpose(transpose)
        return make

    def _empty(self, shape, dtype, device_id, zero):
        return (cupy.zeros if zero else cupy.empty)(shape, dtype)

    def _copy_into(self, destination, source):
        if not isinstance(source, cupy.ndarray):
            source = cupy.from_dlpack(source)
        cupy.copyto(destination, source, casting="same_kind")

    def _copy_scaled(self, destination, source, factor):
        if not isinstance(source, cupy.ndarray):
            source = cupy.from_dlpack(source)
        cupy.multiply(source, factor, out=destination)

    def _to_numpy(self, array, stream):
        return array.get(stream=None if stream is None else self._stream(stream), order="A")  # keeps the layout

    def _from_numpy(self, host, device_id):
        return cupy.asarray(host)

    def _upload(self, destination, host):
        destination.set(host)

    def _synchronize(self, stream):
        self._stream(stream).synchronize()
