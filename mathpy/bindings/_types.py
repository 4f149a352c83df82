"""``cudaDataType_t`` (library_types.h), shared by the cuFFT and cuBLASLt bindings and public as
``mathpy.CudaDataType``: CUDA's C names (``CUDA_R_32F``, as nvmath-python spells them) with the bindings' short names
(``R_32F``) as aliases, and the tables between it and NumPy dtypes.

>>> cuda_data_type("float16"), cuda_data_type("float32", complex_=True), cuda_data_type("bfloat16")
(<CudaDataType.CUDA_R_16F: 2>, <CudaDataType.CUDA_C_32F: 4>, <CudaDataType.CUDA_R_16BF: 14>)
>>> DataType.R_32F is CudaDataType.CUDA_R_32F, to_dtype(CudaDataType.CUDA_C_64F)
(True, dtype('complex128'))
>>> to_dtype(CudaDataType.CUDA_R_4I)
Traceback (most recent call last):
...
ValueError: CudaDataType CUDA_R_4I has no NumPy dtype in mathpy; supported: CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F, \
CUDA_R_64F, CUDA_C_32F, CUDA_C_64F, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_8I, CUDA_R_32I
"""

import enum

import numpy as np

from .._dtypes import BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2

__all__ = ["CudaDataType", "DataType", "cuda_data_type", "to_dtype"]


class CudaDataType(enum.IntEnum):
    """CUDA's ``cudaDataType_t`` (library_types.h; the same in CUDA 12.9 and 13), under CUDA's C names as
    nvmath-python exports them. :class:`~mathpy.MatmulOptions` takes its members wherever it takes a dtype.

    Notes
    -----
    The same values on every execution space: on the CPU a member stands for the NumPy (or ml_dtypes) dtype of the
    same type; members without one (4-bit integers) are refused with a ValueError.

    Examples
    --------
    >>> import mathpy
    >>> mathpy.CudaDataType.CUDA_R_32F.value, mathpy.MatmulOptions(scale_type=mathpy.CudaDataType.CUDA_R_32F).scale_type
    (0, dtype('float32'))
    """

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
    # the bindings' short spellings (aliases: the same members)
    R_32F = 0
    R_64F = 1
    R_16F = 2
    R_8I = 3
    C_32F = 4
    C_64F = 5
    C_16F = 6
    R_32I = 10
    R_16BF = 14
    C_16BF = 15
    R_8F_E4M3 = 28
    R_8F_E5M2 = 29


DataType = CudaDataType  # the bindings' name

_BY_DTYPE = {
    np.dtype(np.float16): DataType.R_16F, BFLOAT16: DataType.R_16BF, np.dtype(np.float32): DataType.R_32F,
    np.dtype(np.float64): DataType.R_64F, np.dtype(np.complex64): DataType.C_32F,
    np.dtype(np.complex128): DataType.C_64F, FLOAT8_E4M3: DataType.R_8F_E4M3, FLOAT8_E5M2: DataType.R_8F_E5M2,
    np.dtype(np.int8): DataType.R_8I, np.dtype(np.int32): DataType.R_32I,
}
_DTYPES = {code: dtype for dtype, code in _BY_DTYPE.items()}
_COMPLEX = {DataType.R_16F: DataType.C_16F, DataType.R_32F: DataType.C_32F, DataType.R_64F: DataType.C_64F,
            DataType.R_16BF: DataType.C_16BF}


def cuda_data_type(dtype, *, complex_=False):
    """The cudaDataType of a NumPy (or ml_dtypes) dtype; with ``complex_``, of the complex type whose parts have real
    dtype ``dtype`` (complex half, which NumPy lacks, included). ValueError naming the supported ones otherwise."""
    try:
        found = _BY_DTYPE[np.dtype(dtype)]
        return _COMPLEX[found] if complex_ else found
    except (KeyError, TypeError):
        raise ValueError(f"dtype {dtype!r} has no CUDA data type{' for its complex form' if complex_ else ''}; "
                         f"supported: {sorted(str(d) for d in _BY_DTYPE)}") from None


def to_dtype(value):
    """The NumPy dtype of a :class:`CudaDataType` (or its int value); ValueError for types without one."""
    member = CudaDataType(value)
    try:
        return _DTYPES[member]
    except KeyError:
        raise ValueError(f"CudaDataType {member.name} has no NumPy dtype in mathpy; supported: "
                         f"{', '.join(code.name for code in _DTYPES)}") from None
