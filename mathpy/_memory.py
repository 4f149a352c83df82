"""Device memory drawn through a memory manager the caller provides (the ``allocator=`` option of FFT and matmul).

The protocol is nvmath-python's, so managers written for it (and numba's and CuPy's memory pointers) work unchanged:

- :class:`BaseCUDAMemoryManagerAsync`: ``memalloc_async(size, stream) -> owner``, stream-ordered on ``stream`` (an
  object with ``handle`` / ``__cuda_stream__`` / ``int()`` giving the raw ``cudaStream_t``);
- :class:`BaseCUDAMemoryManager`: ``memalloc(size) -> owner``, synchronous or on the current stream.

``owner`` owns the memory: it exposes the address as ``device_ptr``, ``device_pointer`` or ``ptr`` and releases the
memory (to the OS or a pool) when it is garbage-collected or its ``free()`` is called. :class:`MemoryPointer` is a
ready-made owner. mathpy keeps the owner while it uses the memory and releases it (``free()`` when the owner has
one, else by dropping it) after the work using it was enqueued on the stream it was allocated on.

Managers for the two pools mathpy already orders its allocations on: :class:`CupyMemoryManager` and
:class:`TorchMemoryManager` (``(device_id, logger=None)``, as nvmath's own managers are constructed).

>>> class Counting:                      # a manager of one's own: only memalloc is required
...     def __init__(self): self.live = 0
...     def memalloc(self, size):
...         self.live += size
...         def release(): self.live -= size
...         return MemoryPointer(4096, size, finalizer=release)
>>> manager = Counting()
>>> allocation = allocate(check_allocator(manager), 256, stream=0, device_id=0)
>>> allocation.pointer, manager.live
(4096, 256)
>>> allocation.release(); manager.live
0
>>> check_allocator(object())
Traceback (most recent call last):
...
TypeError: allocator must implement memalloc(size) or memalloc_async(size, stream) (the BaseCUDAMemoryManager \
protocol); got object
"""

import weakref
from abc import abstractmethod
from typing import Protocol, runtime_checkable

__all__ = ["MemoryPointer", "BaseCUDAMemoryManager", "BaseCUDAMemoryManagerAsync", "CupyMemoryManager",
           "TorchMemoryManager", "StreamRef", "Allocation", "allocate", "check_allocator", "device_pointer"]


class MemoryPointer:
    """An owner of device memory, as a memory manager returns it (nvmath-python's ``MemoryPointer``).

    Parameters
    ----------
    device_ptr : int
        The address of the memory.
    size : int
        Its size in bytes.
    finalizer : callable or None
        Called once without arguments, at :meth:`free` or when the object is collected: what gives the memory back.

    Raises
    ------
    RuntimeError
        :meth:`free` called a second time (it would release someone else's memory).

    Notes
    -----
    mathpy keeps the owner while the GPU uses the memory and frees it after the work using it was enqueued, on the
    stream it was allocated on. The CPU execution space draws no device memory.

    Examples
    --------
    >>> import mathpy
    >>> released = []
    >>> pointer = mathpy.MemoryPointer(0x1000, 256, finalizer=lambda: released.append(True))
    >>> pointer
    MemoryPointer(device_ptr=0x1000, size=256)
    >>> pointer.free(); released
    [True]
    """

    def __init__(self, device_ptr, size, finalizer):
        self.device_ptr, self.size = int(device_ptr), int(size)
        self._finalizer = weakref.finalize(self, finalizer) if finalizer is not None else None

    def free(self):
        """Release the memory now; a second call raises RuntimeError (it would release someone else's memory)."""
        if self._finalizer is None:
            return
        if not self._finalizer.alive:
            raise RuntimeError(f"the buffer at {self.device_ptr:#x} was already freed")
        self._finalizer()

    def __repr__(self):
        return f"MemoryPointer(device_ptr={self.device_ptr:#x}, size={self.size})"


@runtime_checkable
class BaseCUDAMemoryManager(Protocol):
    """The protocol of a memory manager allocating synchronously (or on the current stream): ``memalloc(size)``
    returns an owner of ``size`` bytes (a :class:`MemoryPointer`, or anything with ``device_ptr`` /
    ``device_pointer`` / ``ptr``). Pass one as ``allocator=`` in :class:`~mathpy.fft.FFTOptions` or
    :class:`~mathpy.MatmulOptions`; nvmath-python's managers work unchanged.

    Notes
    -----
    Only GPU workspaces are drawn from it; on the CPU it is ignored.

    Examples
    --------
    >>> import mathpy
    >>> class Pool:
    ...     def memalloc(self, size):
    ...         return mathpy.MemoryPointer(0x2000, size, finalizer=None)
    >>> isinstance(Pool(), mathpy.BaseCUDAMemoryManager)
    True
    """

    @abstractmethod
    def memalloc(self, size):
        """Return an owner of ``size`` bytes of device memory (see the module docstring)."""


@runtime_checkable
class BaseCUDAMemoryManagerAsync(Protocol):
    """The protocol of a memory manager allocating in stream order: ``memalloc_async(size, stream)`` returns an
    owner of ``size`` bytes usable in the order of ``stream`` (an object with ``handle``, ``int()`` and
    ``__cuda_stream__`` giving the raw ``cudaStream_t``).

    Notes
    -----
    Preferred over :class:`BaseCUDAMemoryManager` when a manager implements both: mathpy orders its allocations on
    the stream the work runs on. Only GPU workspaces are drawn from it.

    Examples
    --------
    >>> import mathpy
    >>> class StreamPool:
    ...     def memalloc_async(self, size, stream):
    ...         return mathpy.MemoryPointer(0x3000, size, finalizer=None)
    >>> isinstance(StreamPool(), mathpy.BaseCUDAMemoryManagerAsync)
    True
    """

    @abstractmethod
    def memalloc_async(self, size, stream):
        """Return an owner of ``size`` bytes of device memory usable in the order of ``stream``."""


class StreamRef:
    """The stream a stream-ordered allocation is ordered on, as mathpy hands it to ``memalloc_async``: ``handle``
    (the raw ``cudaStream_t``), ``int(stream)`` and the ``__cuda_stream__`` protocol all give it."""

    __slots__ = ("handle", "device_id")

    def __init__(self, handle, device_id):
        self.handle, self.device_id = int(handle), device_id

    ptr = property(lambda self: self.handle)

    def __int__(self):
        return self.handle

    def __cuda_stream__(self):
        return 0, self.handle

    def __repr__(self):
        return f"StreamRef(handle={self.handle:#x}, device_id={self.device_id})"


def check_allocator(value, name="allocator"):
    """``value`` if it follows the protocol, else TypeError naming what is missing (None stays None)."""
    if value is None or isinstance(value, (BaseCUDAMemoryManager, BaseCUDAMemoryManagerAsync)):
        return value
    raise TypeError(f"{name} must implement memalloc(size) or memalloc_async(size, stream) (the "
                    f"BaseCUDAMemoryManager protocol); got {type(value).__name__}")


def device_pointer(owner):
    """The address an owner holds (``device_ptr``, ``device_pointer`` or ``ptr``, as the protocol allows)."""
    for attribute in ("device_ptr", "device_pointer", "ptr"):
        value = getattr(owner, attribute, None)
        if value is not None:
            return int(getattr(value, "value", value))  # numba's device_pointer is a ctypes c_void_p
    raise TypeError(f"the allocator returned a {type(owner).__name__}, which has none of device_ptr, "
                    f"device_pointer or ptr")


class Allocation:
    """Memory drawn from a manager: ``pointer``, ``size`` and the ``owner`` kept alive until :meth:`release`."""

    __slots__ = ("pointer", "size", "owner")

    def __init__(self, pointer, size, owner):
        self.pointer, self.size, self.owner = pointer, size, owner

    def release(self):
        """Give the memory back (idempotent)."""
        owner, self.owner = self.owner, None
        free = getattr(owner, "free", None)
        if callable(free):
            free()


def allocate(manager, size, stream, device_id):
    """An :class:`Allocation` of ``size`` bytes from ``manager``, ordered on the raw ``stream`` when the manager is
    stream-ordered."""
    if isinstance(manager, BaseCUDAMemoryManagerAsync):
        owner = manager.memalloc_async(size, StreamRef(stream, device_id))
    else:
        owner = manager.memalloc(size)
    return Allocation(device_pointer(owner), size, owner)


class CupyMemoryManager:
    """A stream-ordered memory manager drawing from CuPy's memory pool (``cupy.cuda.alloc`` with the stream
    current), constructed as nvmath-python's.

    Parameters
    ----------
    device_id : int, optional
        The GPU (default 0).
    logger : logging.Logger, optional
        Where allocations are logged (DEBUG).

    Raises
    ------
    ImportError
        CuPy is not installed (when it first allocates, not when it is made).

    Notes
    -----
    Needs CuPy and a GPU when it allocates (not when it is made); CuPy's own errors (out of memory) pass through.

    Examples
    --------
    >>> import mathpy
    >>> options = mathpy.MatmulOptions(allocator=mathpy.CupyMemoryManager(device_id=0))
    >>> type(options.allocator).__name__
    'CupyMemoryManager'
    """

    def __init__(self, device_id=0, logger=None):
        self.device_id, self.logger = device_id, logger

    def memalloc_async(self, size, stream):
        import cupy

        with cupy.cuda.Device(self.device_id), cupy.cuda.ExternalStream(int(stream), self.device_id):
            memory = cupy.cuda.alloc(size)
        if self.logger is not None:
            self.logger.debug("CupyMemoryManager: %d bytes at %#x on device %d", size, memory.ptr, self.device_id)
        return MemoryPointer(memory.ptr, size, finalizer=_keep(memory))  # CuPy frees when `memory` goes


class TorchMemoryManager:
    """A stream-ordered memory manager drawing from torch's caching allocator, constructed as nvmath-python's.

    Parameters
    ----------
    device_id : int, optional
        The GPU (default 0).
    logger : logging.Logger, optional
        Where allocations are logged (DEBUG).

    Raises
    ------
    ImportError
        torch is not installed (when it first allocates, not when it is made).

    Notes
    -----
    Needs torch with CUDA and a GPU when it allocates (not when it is made); torch's own errors pass through.

    Examples
    --------
    >>> import mathpy, mathpy.fft
    >>> options = mathpy.fft.FFTOptions(allocator=mathpy.TorchMemoryManager(device_id=0))
    >>> type(options.allocator).__name__
    'TorchMemoryManager'
    """

    def __init__(self, device_id=0, logger=None):
        self.device_id, self.logger = device_id, logger

    def memalloc_async(self, size, stream):
        import torch

        torch_stream = torch.cuda.ExternalStream(int(stream), device=torch.device("cuda", self.device_id))
        pointer = torch.cuda.caching_allocator_alloc(size, device=self.device_id, stream=torch_stream)
        if self.logger is not None:
            self.logger.debug("TorchMemoryManager: %d bytes at %#x on device %d", size, pointer, self.device_id)
        delete = torch.cuda.caching_allocator_delete
        return MemoryPointer(pointer, size, finalizer=lambda: delete(pointer))


def _keep(obj):
    """A finalizer that holds ``obj`` until it runs (then drops it)."""
    holder = [obj]
    return holder.clear
