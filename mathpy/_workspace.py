"""Where the engines' workspaces (cuFFT's work area, cuBLASLt's workspace) come from: the array package's
stream-ordered pool, or the memory manager the caller gave as ``options.allocator`` (:mod:`mathpy._memory`).

A :class:`Workspace` is one such allocation. Memory from a package's pool goes back to the pool in the order of the
stream it was allocated on, so dropping it right after the launch that uses it is safe. A caller's manager gives no
such guarantee (its ``free()`` may hand the memory to anyone at once), so before a manager's memory is released the
stream that used it is synchronised.

>>> from mathpy import MemoryPointer
>>> class Manager:
...     def __init__(self): self.live = 0
...     def memalloc(self, size):
...         self.live += size
...         return MemoryPointer(8192, size, finalizer=lambda: setattr(self, "live", self.live - size))
>>> manager = Manager()
>>> source = WorkspaceSource(pool=None, manager=manager, device_id=0)
>>> work = source.take(512, stream=None, synchronize=lambda stream: None)
>>> work.pointer, work.nbytes, manager.live
(8192, 512, 512)
>>> work.release(); manager.live
0
"""

import numpy as np

from . import _memory

__all__ = ["WorkspaceSource", "Workspace"]


class Workspace:
    """``nbytes`` of device memory at ``pointer``, used on raw ``stream``.

    :meth:`release` gives it back (idempotent).
    """

    __slots__ = ("pointer", "nbytes", "stream", "_owner", "_synchronize")

    def __init__(self, pointer, nbytes, stream, owner, synchronize):
        self.pointer, self.nbytes, self.stream = pointer, nbytes, stream
        self._owner, self._synchronize = owner, synchronize  # synchronize: None for pool memory

    def release(self):
        owner, self._owner = self._owner, None
        if owner is None:
            return
        if self._synchronize is not None:  # a caller's manager: the GPU must be done with it first
            try:
                self._synchronize(self.stream)
            finally:
                owner.release()


class WorkspaceSource:
    """Allocates workspaces for one engine: from ``manager`` (a memory manager following the protocol of
    :mod:`mathpy._memory`) when given, else from ``pool`` (a :class:`~mathpy._packages.PackageStream` whose package's
    pool serves every stream)."""

    __slots__ = ("pool", "manager", "device_id")

    def __init__(self, pool, manager=None, device_id=None):
        self.pool, self.manager = pool, manager
        self.device_id = device_id if device_id is not None else getattr(pool, "device_id", None)

    def take(self, nbytes, stream, synchronize=None):
        """A :class:`Workspace` of ``nbytes`` usable in the order of raw ``stream`` (None: the pool's own stream).
        ``synchronize(stream)``: how to wait for a stream (the CUDA runtime's by default)."""
        if self.manager is not None:
            if synchronize is None:
                from . import _runtime
                synchronize = _runtime.synchronize
            allocation = _memory.allocate(self.manager, nbytes, stream or 0, self.device_id)
            return Workspace(allocation.pointer, nbytes, stream, allocation, synchronize)
        queue = self.pool if stream is None or stream == self.pool.stream else \
            self.pool.package.on(self.device_id, stream)
        array = queue.empty((nbytes,), np.uint8)
        return Workspace(queue.package.pointer(array), nbytes, stream, _Held(array), None)


class _Held:
    """Pool memory: released by dropping the array (the pool orders the reuse on its stream)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def release(self):
        self.array = None
