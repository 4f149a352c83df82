"""Thin, table-driven ctypes bindings to the CUDA libraries mathpy calls, found with cuda-pathfinder.

Each library module declares its functions once (name, result, argument types) and its status names once; every call
that returns a status goes through one check that raises :class:`mathpy.CUDALibraryError` naming the status.
"""
