"""CUDA streams given by the caller, in any of the forms the ecosystem uses, reduced to a raw ``cudaStream_t`` value.

Accepted: None (the current stream of the package that holds the operands on the device), an int (a raw handle; 0 is
the legacy default stream), a CuPy stream (``.ptr``), a torch stream (``.cuda_stream``) or any object implementing the
``__cuda_stream__`` protocol (cuda.core, ...). Streams are a per-call matter: plans do not depend on them (the engines
take the stream at each execution).

>>> stream_handle(5), stream_handle(None)
(5, None)
"""

from . import _operands

__all__ = ["stream_handle", "stream_pointer"]


def stream_handle(stream):
    """``stream`` as an int handle, or None when it is None (the caller then asks the package for its current one)."""
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int handle or a stream object, not a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream handle {stream} is negative; a cudaStream_t is a non-negative int")
        return stream
    if hasattr(stream, "__cuda_stream__"):
        version, handle = stream.__cuda_stream__()
        return int(handle)
    for attribute in ("ptr", "cuda_stream", "handle"):  # CuPy, torch, others
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"stream must be None, an int handle, a CuPy or torch stream, or an object with __cuda_stream__; "
                    f"got {type(stream).__name__}")


def stream_pointer(stream, package, device_id):
    """``stream`` as an int handle; None means the current stream, on ``device_id``, of the package that holds
    ``package``'s arrays on the device (``package`` itself, or the device package for NumPy)."""
    handle = stream_handle(stream)
    if handle is None:
        return _operands.holder_of(package).current_stream(device_id)
    return handle
