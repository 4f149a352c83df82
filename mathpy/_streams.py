"""CUDA streams given by the caller, in any of the forms the ecosystem uses, reduced to a raw ``cudaStream_t`` value.

Accepted: None (the operand package's current stream), an int (a raw handle), a CuPy stream (``.ptr``), a torch stream
(``.cuda_stream``) or any object implementing the ``__cuda_stream__`` protocol (cuda.core, ...).
"""

import sys

__all__ = ["stream_pointer", "current_stream_pointer"]


def current_stream_pointer(package, device_id):
    """The current stream of ``package`` ("cupy", "torch"; "numpy" uses whichever GPU package is installed)."""
    if package == "numpy":
        package = "cupy" if _importable("cupy") else "torch"
    if package == "cupy":
        import cupy
        with cupy.cuda.Device(device_id):
            return cupy.cuda.get_current_stream().ptr
    if package == "torch":
        import torch
        return torch.cuda.current_stream(device_id).cuda_stream
    raise ValueError(f"package {package!r} has no CUDA streams")


def stream_pointer(stream, package, device_id):
    """``stream`` as an int handle; None means ``package``'s current stream on ``device_id``."""
    if stream is None:
        return current_stream_pointer(package, device_id)
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


def _importable(name):
    if name in sys.modules:
        return True
    import importlib.util
    return importlib.util.find_spec(name) is not None
