"""``nvmath.memory`` on mathpy: the memory-manager protocol behind the ``allocator=`` options (mathpy's own, which is
nvmath-python's) and :class:`MemoryPointer`. See :mod:`mathpy._memory`."""

from ..._memory import BaseCUDAMemoryManager, BaseCUDAMemoryManagerAsync, MemoryPointer

__all__ = ["BaseCUDAMemoryManager", "BaseCUDAMemoryManagerAsync", "MemoryPointer"]
