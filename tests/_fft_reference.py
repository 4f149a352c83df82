"""Helpers shared by the FFT tests."""

import numpy as np


def rand(shape, dtype=np.complex64, seed=0):
    """Reproducible standard-normal data of ``dtype`` (complex: independent real and imaginary parts)."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(shape)
    return data.astype(dtype)
