"""Block-level FFT and GEMM for numba-cuda kernels (placeholder docstring, completed below)."""

from ._fft import FFTDescription, fft

__all__ = ["fft", "FFTDescription"]
