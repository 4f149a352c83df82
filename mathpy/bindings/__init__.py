"""Thin, table-driven ctypes bindings to the CUDA libraries mathpy calls, found with cuda-pathfinder.

Each library module declares its functions once (name, result, argument types) and its status names once; every call
that returns a status goes through one check that raises :class:`mathpy.CUDALibraryError` naming the status.
"""

from ._compiled import enabled as compiled_entries_enabled

__all__ = ["compiled_entries_enabled"]
