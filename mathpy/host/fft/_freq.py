"""Sample frequencies and spectrum shifts, in the package (and on the device) of the caller's arrays.

``fftshift`` / ``ifftshift`` use the operand's own package (NumPy, CuPy, torch), so a GPU array stays on its GPU.
``fftfreq`` / ``rfftfreq`` take no array; they return NumPy arrays unless ``like=`` names an array whose package and
device the result should have.

>>> fftfreq(4, d=0.5)
array([ 0. ,  0.5, -1. , -0.5])
>>> rfftfreq(5)
array([0. , 0.2, 0.4])
>>> fftshift(np.arange(5))
array([3, 4, 0, 1, 2])
"""

import numpy as np

from ... import _operands

__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _like(result, like):
    if like is None:
        return result
    return _operands.as_package(result, _operands.wrap_operand(like, "like"))


def _device(device):
    """NumPy 2's ``device=`` argument ("cpu" or None), passed on only when given (NumPy 1.x has no such argument)."""
    return {} if device is None else {"device": device}


def fftfreq(n, d=1.0, *, device=None, like=None):
    """The sample frequencies of an ``n``-point FFT with sample spacing ``d`` (as ``numpy.fft.fftfreq``).

    ``like``: an array whose package and device the result takes (default: a NumPy array); ``device``: NumPy 2's
    argument, None or "cpu"."""
    return _like(np.fft.fftfreq(n, d, **_device(device)), like)


def rfftfreq(n, d=1.0, *, device=None, like=None):
    """The non-negative sample frequencies of an ``n``-point real FFT (as ``numpy.fft.rfftfreq``)."""
    return _like(np.fft.rfftfreq(n, d, **_device(device)), like)


def _shift(x, axes, inverse):
    package = _operands.package_of(x)
    if package is None:
        x = _operands.wrap_operand(x, "x").tensor
        package = _operands.package_of(x)
    if package == "torch":
        import torch
        dim = tuple(range(x.ndim)) if axes is None else axes
        return (torch.fft.ifftshift if inverse else torch.fft.fftshift)(x, dim=dim)
    if package == "cupy":
        import cupy
        return (cupy.fft.ifftshift if inverse else cupy.fft.fftshift)(x, axes=axes)
    return (np.fft.ifftshift if inverse else np.fft.fftshift)(x, axes=axes)


def fftshift(x, axes=None):
    """Move the zero-frequency term to the centre of ``axes`` (all by default), in ``x``'s package."""
    return _shift(x, axes, inverse=False)


def ifftshift(x, axes=None):
    """The inverse of :func:`fftshift`, in ``x``'s package."""
    return _shift(x, axes, inverse=True)
