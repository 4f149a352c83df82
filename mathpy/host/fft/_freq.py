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
    """Return the sample frequencies of an ``n``-point discrete Fourier transform, as :func:`numpy.fft.fftfreq`.

    Parameters
    ----------
    n : int
        Window length.
    d : float, optional
        Sample spacing (the inverse of the sampling rate). Default 1.
    device : {None, "cpu"}, optional
        NumPy 2's argument: where a NumPy result lives (only ``"cpu"``).
    like : array, optional
        An array whose package and device the result takes (a CuPy array gives a CuPy result on its GPU); default:
        a NumPy array.

    Returns
    -------
    array
        ``[0, 1, ..., n/2 - 1, -n/2, ..., -1] / (d * n)`` for even ``n`` (``(n - 1) / 2`` positive terms for odd),
        float64.

    Raises
    ------
    ValueError
        A negative or non-integer ``n`` (NumPy's messages), a ``device`` other than ``"cpu"``.
    ZeroDivisionError
        ``n`` is 0 (as NumPy).

    Notes
    -----
    Computed by NumPy on the CPU, then moved to ``like``'s package and device.

    Examples
    --------
    >>> import mathpy.fft
    >>> mathpy.fft.fftfreq(4, d=0.5)
    array([ 0. ,  0.5, -1. , -0.5])
    """
    return _like(np.fft.fftfreq(n, d, **_device(device)), like)


def rfftfreq(n, d=1.0, *, device=None, like=None):
    """Return the sample frequencies of an ``n``-point real discrete Fourier transform (the ``n // 2 + 1``
    non-negative ones :func:`rfft` returns), as :func:`numpy.fft.rfftfreq`.

    Parameters
    ----------
    n : int
        Window length.
    d : float, optional
        Sample spacing. Default 1.
    device : {None, "cpu"}, optional
        NumPy 2's argument (only ``"cpu"``).
    like : array, optional
        An array whose package and device the result takes; default: a NumPy array.

    Returns
    -------
    array
        ``[0, 1, ..., n // 2] / (d * n)``, float64.

    Raises
    ------
    ValueError
        A negative or non-integer ``n``, a ``device`` other than ``"cpu"``.
    ZeroDivisionError
        ``n`` is 0 (as NumPy).

    Examples
    --------
    >>> import mathpy.fft
    >>> mathpy.fft.rfftfreq(5)
    array([0. , 0.2, 0.4])
    """
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
    """Shift the zero-frequency term to the centre of the spectrum, as :func:`numpy.fft.fftshift`.

    Parameters
    ----------
    x : array_like
        Input array; a CuPy or torch array is shifted by its own package, on its device.
    axes : int or sequence of ints, optional
        Axes to shift (default: all).

    Returns
    -------
    array
        The shifted array, in ``x``'s package and on its device.

    Raises
    ------
    TypeError
        ``x`` is not an array.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.fftshift(mathpy.fft.fftfreq(5))
    array([-0.4, -0.2,  0. ,  0.2,  0.4])
    """
    return _shift(x, axes, inverse=False)


def ifftshift(x, axes=None):
    """The inverse of :func:`fftshift`, as :func:`numpy.fft.ifftshift` (they differ for odd lengths).

    Parameters
    ----------
    x : array_like
        Input array (any package, any device).
    axes : int or sequence of ints, optional
        Axes to shift (default: all).

    Returns
    -------
    array
        The shifted array, in ``x``'s package and on its device.

    Raises
    ------
    TypeError
        ``x`` is not an array.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.ifftshift(mathpy.fft.fftshift(np.arange(5)))
    array([0, 1, 2, 3, 4])
    """
    return _shift(x, axes, inverse=True)
