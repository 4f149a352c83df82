"""mathpy: Pythonic GPU math on cuFFT and cuBLASLt, with Python callbacks fused into the library kernels.

Host APIs (:mod:`mathpy.fft`, :func:`mathpy.matmul`) take NumPy arrays, CuPy arrays, torch tensors or anything with
``__dlpack__`` / ``__cuda_array_interface__``, run where the operands live (or where ``execution=`` says) and return
results in the caller's package and on its device. The same calls run on the CPU with NumPy/SciPy when there is no GPU.
Block-level device APIs for numba-cuda kernels live in :mod:`mathpy.device`.
"""

from . import fft
from ._cuda import is_available as cuda_is_available
from ._errors import *  # noqa: F403
from ._errors import __all__ as _errors_all
from ._execution import ExecutionCPU, ExecutionCUDA, execution_space, get_execution_space
from ._memo import plan_cache_clear, plan_cache_info
from ._memory import (BaseCUDAMemoryManager, BaseCUDAMemoryManagerAsync, CupyMemoryManager, MemoryPointer,
                      TorchMemoryManager)
from .bindings._types import CudaDataType
from .bindings.cublaslt import MatmulComputeType
from ._version import __version__
from .host.matmul import Matmul, MatmulEpilog, MatmulOptions, MatmulPlanPreferences, matmul, matmul_plan_cache

__all__ = [
    "__version__",
    "ExecutionCPU",
    "ExecutionCUDA",
    "execution_space",
    "get_execution_space",
    "cuda_is_available",
    "fft",
    "matmul",
    "Matmul",
    "MatmulEpilog",
    "MatmulOptions",
    "MatmulPlanPreferences",
    "matmul_plan_cache",
    "plan_cache_info",
    "plan_cache_clear",
    "MatmulComputeType",
    "CudaDataType",
    "BaseCUDAMemoryManager",
    "BaseCUDAMemoryManagerAsync",
    "MemoryPointer",
    "CupyMemoryManager",
    "TorchMemoryManager",
    *_errors_all,
]
