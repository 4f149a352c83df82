"""Narrow compatibility fixes for the installed stack, applied before numba-cuda compiles anything."""

import numpy as np

__all__ = ["patch_numpy_for_numba_cuda"]


def patch_numpy_for_numba_cuda():
    """numba-cuda 0.30 overloads ``np.row_stack``, which NumPy 2.5 removed; its first compile then fails with an
    AttributeError. Restoring the name as its documented equivalent (``np.vstack``) is all it needs."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
