"""CUDA streams given by the caller, in any of the forms the ecosystem uses, reduced to a raw ``cudaStream_t`` value;
and what a call owes a stream that is capturing a CUDA graph.

Accepted: None (the current stream of the package that holds the operands on the device), an int (a raw handle; 0 is
the legacy default stream), a CuPy stream (``.ptr``), a torch stream (``.cuda_stream``) or any object implementing the
``__cuda_stream__`` protocol (cuda.core, ...).

**One stream model.** Every GPU call takes its stream when it is made: ``stream=None`` is the operand package's current
stream at that moment (as torch, CuPy and nvmath-python do), whatever stream an object was built or planned on. Plans
do not depend on streams: the engines take the stream, and a workspace for it, at each execution.

**Graph capture.** A call on a capturing stream records its kernels, so it must queue nothing a graph cannot hold and
free nothing the graph still uses. Work a graph cannot record (planning, autotuning, host waits, host copies) is
refused before anything is queued (:func:`refuse_in_capture`, :class:`~mathpy.StreamCaptureError`); scratch memory a
captured launch uses is kept with the plan (:func:`keep_for_graph`) where the array package would otherwise hand it on.

>>> stream_handle(5), stream_handle(None)
(5, None)
"""

import weakref

from . import _operands, _packages
from ._errors import StreamCaptureError

__all__ = ["stream_handle", "stream_pointer", "refuse_in_capture", "refuse_planning_in_capture", "keep_for_graph"]


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


def refuse_in_capture(package, device_id, stream, call, why, fix, anywhere=False):
    """Raise :class:`~mathpy.StreamCaptureError` when raw ``stream`` (None: the current one) of ArrayPackage
    ``package`` on ``device_id`` is capturing a CUDA graph (``anywhere``: or the current stream of any device package:
    host copies and waits break a capture on another stream too); ``call`` cannot be recorded because ``why``; ``fix``
    says what to do instead. Call it before queueing any work, so that the capture stays valid."""
    if package.is_capturing(device_id, stream) or (anywhere and _packages.capturing(device_id)):
        raise StreamCaptureError(f"{call} cannot be captured in a CUDA graph: {why}; {fix}")


def refuse_planning_in_capture(package, device_id, stream, call):
    """:func:`refuse_in_capture` for ``call``, which would plan (allocate, upload, maybe time) on the GPU."""
    refuse_in_capture(package, device_id, stream, call, "planning allocates and uploads on the GPU (and may time "
                      "candidates)", "plan before the capture begins (for a stateless function: call it once with "
                      "the same arguments before the capture; that plans and caches it)")


#: plan -> scratch that graphs captured with it read or write: freed with the plan, not after the launch.
_graph_memory = weakref.WeakKeyDictionary()


def keep_for_graph(plan, package, device_id, stream, scratch, pooled=True):
    """Whether ``scratch`` (an array or Workspace that a launch on raw ``stream`` uses and that the caller would free
    after the launch) must be kept instead: True when the stream is capturing a graph and the memory does not belong to
    the graph (``pooled``: it comes from ``package``'s pool, whose ``graph_pool`` says; else from a caller's memory
    manager, which knows nothing of graphs). It is then kept as long as ``plan`` lives: a graph replays the plan's
    kernels, so it needs the plan alive anyway."""
    if (pooled and package.graph_pool) or not package.is_capturing(device_id, stream):
        return False
    _graph_memory.setdefault(plan, []).append(scratch)
    return True
