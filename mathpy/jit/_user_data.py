"""Checks of the user data an FFT passes to a compiled callback."""

import math

import numpy as np

__all__ = ["check_user_info", "dtype_name", "user_data_role"]


def dtype_name(dtype):
    """NumPy name of a NumPy, CuPy or torch dtype (``torch.complex64`` -> ``"complex64"``)."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        text = str(dtype)
        name = text.rsplit(".", 1)[-1]
        try:
            return np.dtype(name).name
        except TypeError:
            raise TypeError(f"{text} is not a numeric dtype") from None


def _is_contiguous(array):
    flags = getattr(array, "flags", None)
    if flags is not None:
        try:
            return bool(flags["C_CONTIGUOUS"])
        except (KeyError, TypeError):
            return bool(getattr(flags, "c_contiguous", True))
    is_contiguous = getattr(array, "is_contiguous", None)  # torch
    return bool(is_contiguous()) if callable(is_contiguous) else True


def _address(array):
    """Data address of a NumPy / CuPy / torch array, or None when it does not say."""
    for protocol in ("__cuda_array_interface__", "__array_interface__"):
        interface = getattr(array, protocol, None)
        if isinstance(interface, dict) and "data" in interface:
            return int(interface["data"][0] or 0)
    data_ptr = getattr(array, "data_ptr", None)  # torch
    return int(data_ptr()) if callable(data_ptr) else None


def user_data_role(shape, layout_shape, function_name="callback"):
    """The one rule for the shape of user data a callback reads for a layout of shape ``layout_shape``: "scalar" (one
    element), "full" (the layout's shape: ``user_info[offset]``) or the number k of trailing layout axes it covers
    (a window broadcast over the leading axes: ``user_info[offset % window.size]``). Leading 1s of ``shape`` are
    ignored. ValueError otherwise.

    >>> user_data_role((), (4, 8)), user_data_role((1, 4, 8), (4, 8)), user_data_role((8,), (4, 8))
    ('scalar', 'full', 1)
    """
    shape, layout_shape = tuple(int(e) for e in shape), tuple(int(e) for e in layout_shape)
    if math.prod(shape) == 1:
        return "scalar"
    squeezed = shape
    while squeezed and squeezed[0] == 1:
        squeezed = squeezed[1:]
    if squeezed == layout_shape:
        return "full"
    for k in range(len(layout_shape) - 1, 0, -1):
        if squeezed == layout_shape[-k:]:
            return k
    suffixes = " or ".join(str(layout_shape[i:]) for i in range(1, len(layout_shape))) or "none"
    raise ValueError(f"user data of {function_name} has shape {shape}; it must be a scalar, the shape of the layout "
                     f"the callback sees {layout_shape}, or a suffix of it ({suffixes})")


def check_user_info(user_info, compiled_dtype, layout_shape, *, function_name="callback"):
    """Check user data against a callback compiled for ``compiled_dtype`` that sees a layout of ``layout_shape``.

    Parameters
    ----------
    user_info : array or None
        The user data: None when the callback was compiled without it; otherwise a C-contiguous array (NumPy, CuPy,
        torch...), aligned to its element size, of the compiled dtype, that is a scalar (shape ``()`` or one
        element), has a shape equal to a suffix of ``layout_shape`` (one window, which the callback broadcasts over
        the leading axes by reading ``user_info[offset % window]``) or the full layout's; leading 1s of its shape
        are ignored.
    compiled_dtype : str or None
        The dtype name the callback was compiled for (``user_info_dtype``), or None.
    layout_shape : tuple of int
        The shape of the operand as the callback indexes it, batch included.
    function_name : str, optional
        How messages name the callback.

    Returns
    -------
    int
        The number of elements of the user data (the window size), 0 without user data.

    Raises
    ------
    TypeError
        A dtype other than the compiled one.
    ValueError
        User data given to a callback compiled without it (or missing), not C-contiguous, misaligned, or of a shape
        that is neither a scalar, a suffix of the layout nor the layout.

    Notes
    -----
    The FFT API runs the same checks when it binds a :class:`~mathpy.fft.Callback` at plan time, on the CPU and on
    the GPU; this function is for LTO-IR compiled separately (nvmath-python style).

    Examples
    --------
    >>> import numpy as np
    >>> from mathpy import jit
    >>> jit.check_user_info(np.ones(16, np.float32), "float32", (8, 16))   # one row's window
    16
    >>> jit.check_user_info(np.ones(16, np.float64), "float32", (8, 16))
    Traceback (most recent call last):
    ...
    TypeError: user data of callback has dtype float64, but the callback was compiled for float32
    """
    if user_info is None:
        if compiled_dtype is not None:
            raise ValueError(f"{function_name} was compiled to read user data of dtype {compiled_dtype}, but no "
                             f"user data was given")
        return 0
    if compiled_dtype is None:
        raise ValueError(f"{function_name} was compiled without user data (user_info_dtype=None), but user data "
                         f"was given; compile it with user_info_dtype={dtype_name(user_info.dtype)!r}")
    given = dtype_name(user_info.dtype)
    if given != compiled_dtype:
        raise TypeError(f"user data of {function_name} has dtype {given}, but the callback was compiled for "
                        f"{compiled_dtype}")
    shape = tuple(int(s) for s in getattr(user_info, "shape", ()))
    size = math.prod(shape)
    layout_shape = tuple(int(s) for s in layout_shape)
    if not _is_contiguous(user_info):
        raise ValueError(f"user data of {function_name} must be C-contiguous (the callback indexes its memory)")
    address = _address(user_info)
    alignment = np.dtype(given).itemsize  # a complex element is read as one vector: aligned to its full size
    if address is not None and size and address % alignment:
        raise ValueError(f"user data of {function_name} must be aligned to {alignment} bytes (its element size) "
                         f"for vector loads; it starts at an address {address % alignment} bytes past that")
    user_data_role(shape, layout_shape, function_name)
    return size
