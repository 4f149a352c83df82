"""NumPy: host arrays only. Device work for NumPy operands is done by the device package
(:func:`mathpy._packages.device_package`)."""

import numpy as np

from ._base import ArrayPackage

__all__ = ["NumPyPackage"]


class NumPyPackage(ArrayPackage):
    name = module = "numpy"
    device_arrays = False

    def owns(self, obj):
        return isinstance(obj, np.ndarray)

    def describe(self, array):
        itemsize = array.dtype.itemsize
        return (array.shape, tuple(map(itemsize.__rfloordiv__, array.strides)), array.dtype, None,
                array.__array_interface__["data"][0])

    def facts(self, array):
        return (array.shape, array.strides, array.dtype, None), array.__array_interface__["data"][0]

    def pointer(self, array):
        return array.__array_interface__["data"][0]

    def broadcast_to(self, array, shape):
        return np.broadcast_to(array, shape)

    def contiguous(self, array):
        return np.ascontiguousarray(array)

    def from_dlpack(self, obj):
        return np.from_dlpack(obj)

    def as_numpy(self, array):
        return array

    def from_host(self, array):
        return array

    def _empty(self, shape, dtype, device_id, zero):
        return (np.zeros if zero else np.empty)(shape, dtype)

    def _copy_into(self, destination, source):
        np.copyto(destination, source, casting="same_kind")

    def _to_numpy(self, array, stream):
        return array

    def _from_numpy(self, host, device_id):
        return host
