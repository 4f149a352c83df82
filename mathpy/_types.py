"""CUDA's data-type and compute-type enumerations under their C names, and the NumPy dtypes they stand for.

:class:`CudaDataType` is ``cudaDataType_t`` (library_types.h) and :class:`ComputeType` is ``cublasComputeType_t``
(cublas_api.h), with the names and values nvmath-python uses, so code written against those enumerations runs
unchanged. Wherever mathpy takes a dtype (``MatmulOptions.result_type``, ``scale_type``) it also takes a
:class:`CudaDataType`; :func:`to_dtype` / :func:`from_dtype` convert.

>>> CudaDataType.CUDA_R_16BF.value, to_dtype(CudaDataType.CUDA_C_32F)
(14, dtype('complex64'))
>>> from_dtype("float8_e4m3fn"), ComputeType.COMPUTE_32F_FAST_TF32.value
(<CudaDataType.CUDA_R_8F_E4M3: 28>, 77)
>>> to_dtype(CudaDataType.CUDA_R_4I)
Traceback (most recent call last):
...
ValueError: CUDA_R_4I has no NumPy dtype mathpy supports; supported are CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F, \
CUDA_R_64F, CUDA_C_32F, CUDA_C_64F, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_8I, CUDA_R_8U, CUDA_R_32I
"""

import enum

import ml_dtypes
import numpy as np

__all__ = ["CudaDataType", "ComputeType", "to_dtype", "from_dtype"]


class CudaDataType(enum.IntEnum):
    """``cudaDataType_t``: the element type of a library operand."""

    CUDA_R_16F = 2
    CUDA_C_16F = 6
    CUDA_R_16BF = 14
    CUDA_C_16BF = 15
    CUDA_R_32F = 0
    CUDA_C_32F = 4
    CUDA_R_64F = 1
    CUDA_C_64F = 5
    CUDA_R_4I = 16
    CUDA_C_4I = 17
    CUDA_R_4U = 18
    CUDA_C_4U = 19
    CUDA_R_8I = 3
    CUDA_C_8I = 7
    CUDA_R_8U = 8
    CUDA_C_8U = 9
    CUDA_R_16I = 20
    CUDA_C_16I = 21
    CUDA_R_16U = 22
    CUDA_C_16U = 23
    CUDA_R_32I = 10
    CUDA_C_32I = 11
    CUDA_R_32U = 12
    CUDA_C_32U = 13
    CUDA_R_64I = 24
    CUDA_C_64I = 25
    CUDA_R_64U = 26
    CUDA_C_64U = 27
    CUDA_R_8F_E4M3 = 28
    CUDA_R_8F_E5M2 = 29
    CUDA_R_4F_E2M1 = 33


class ComputeType(enum.IntEnum):
    """``cublasComputeType_t``: how a matrix product accumulates (mathpy's compute type strings are these names
    without ``COMPUTE_``: ``"32F_FAST_TF32"`` is ``COMPUTE_32F_FAST_TF32``)."""

    COMPUTE_16F = 64
    COMPUTE_16F_PEDANTIC = 65
    COMPUTE_32F = 68
    COMPUTE_32F_PEDANTIC = 69
    COMPUTE_64F = 70
    COMPUTE_64F_PEDANTIC = 71
    COMPUTE_32I = 72
    COMPUTE_32I_PEDANTIC = 73
    COMPUTE_32F_FAST_16F = 74
    COMPUTE_32F_FAST_16BF = 75
    COMPUTE_32F_FAST_TF32 = 77
    COMPUTE_32F_EMULATED_16BFX9 = 78  # cuBLAS >= 12.9
    COMPUTE_64F_EMULATED_FIXEDPOINT = 79  # cuBLAS 13


_D = CudaDataType
_DTYPES = {
    _D.CUDA_R_16F: np.dtype(np.float16), _D.CUDA_R_16BF: np.dtype(ml_dtypes.bfloat16),
    _D.CUDA_R_32F: np.dtype(np.float32), _D.CUDA_R_64F: np.dtype(np.float64),
    _D.CUDA_C_32F: np.dtype(np.complex64), _D.CUDA_C_64F: np.dtype(np.complex128),
    _D.CUDA_R_8F_E4M3: np.dtype(ml_dtypes.float8_e4m3fn), _D.CUDA_R_8F_E5M2: np.dtype(ml_dtypes.float8_e5m2),
    _D.CUDA_R_8I: np.dtype(np.int8), _D.CUDA_R_8U: np.dtype(np.uint8), _D.CUDA_R_32I: np.dtype(np.int32),
}
_FROM_DTYPES = {dtype: value for value, dtype in _DTYPES.items()}
del _D


def to_dtype(value):
    """The NumPy dtype of a :class:`CudaDataType` (or its int value); ValueError for types without one."""
    member = CudaDataType(value)
    dtype = _DTYPES.get(member)
    if dtype is None:
        raise ValueError(f"{member.name} has no NumPy dtype mathpy supports; supported are "
                         f"{', '.join(m.name for m in _DTYPES)}")
    return dtype


def from_dtype(dtype):
    """The :class:`CudaDataType` of a NumPy dtype (or its name, ``"bfloat16"`` and ``"float8_*"`` included)."""
    if isinstance(dtype, str) and hasattr(ml_dtypes, dtype):
        dtype = getattr(ml_dtypes, dtype)
    dtype = np.dtype(dtype)
    try:
        return _FROM_DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype.name} has no CUDA data type mathpy supports; supported are "
                         f"{', '.join(d.name for d in _FROM_DTYPES)}") from None
