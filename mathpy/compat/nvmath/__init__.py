"""nvmath-python's host APIs on mathpy: ``import mathpy.compat.nvmath as nvmath`` runs nvmath-python programs.

- :mod:`.fft`: ``fft``, ``ifft``, ``rfft``, ``irfft``, ``FFT``, ``FFTOptions``, ``FFTDirection``, ``DeviceCallable``,
  ``compile_prolog``, ``compile_epilog``, ``ExecutionCPU``, ``ExecutionCUDA``, ``UnsupportedLayoutError``;
- :mod:`.linalg.advanced`: ``matmul``, ``Matmul``, ``MatmulEpilog``, ``MatmulOptions``, ``MatmulPlanPreferences``,
  ``MatmulEpilogPreferences``, ``MatmulQuantizationScales``, ``MatmulComputeType``, ``Algorithm``, ...;
- :mod:`.memory` and, here, ``BaseCUDAMemoryManager``, ``BaseCUDAMemoryManagerAsync``, ``MemoryPointer``,
  ``CudaDataType``.

Everything is a thin adapter over mathpy's own objects (see :mod:`mathpy.compat`); semantics, defaults and error types
are nvmath-python 1.0's. The feature-by-feature correspondence is in ``docs/compat_nvmath.md``.

>>> import mathpy.compat.nvmath as nvmath
>>> nvmath.CudaDataType.CUDA_R_32F, nvmath.fft.FFTDirection.INVERSE
(<CudaDataType.CUDA_R_32F: 0>, <FFTDirection.INVERSE: 1>)
"""

from ..._memory import BaseCUDAMemoryManager, BaseCUDAMemoryManagerAsync, MemoryPointer
from ...bindings._types import CudaDataType
from . import fft, linalg, memory

__all__ = ["fft", "linalg", "memory", "CudaDataType", "BaseCUDAMemoryManager", "BaseCUDAMemoryManagerAsync",
           "MemoryPointer"]
