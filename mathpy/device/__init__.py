"""Block-level FFT and GEMM for numba-cuda kernels (placeholder docstring, completed below)."""

from ._fft import FFTDescription, fft
from ._matmul import MatmulDescription, matmul

__all__ = ["fft", "FFTDescription", "matmul", "MatmulDescription"]
