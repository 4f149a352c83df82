"""``cudaDataType`` (library_types.h), shared by the cuFFT and cuBLASLt bindings: one table from NumPy dtypes.

>>> cuda_data_type("float16"), cuda_data_type("float32", complex_=True), cuda_data_type("bfloat16")
(<DataType.R_16F: 2>, <DataType.C_32F: 4>, <DataType.R_16BF: 14>)
"""

import enum

import numpy as np

from .._dtypes import BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2

__all__ = ["DataType", "cuda_data_type"]


class DataType(enum.IntEnum):
    """cudaDataType_t (library_types.h; the same in CUDA 12.9 and 13)."""

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


_BY_DTYPE = {
    np.dtype(np.float16): DataType.R_16F, BFLOAT16: DataType.R_16BF, np.dtype(np.float32): DataType.R_32F,
    np.dtype(np.float64): DataType.R_64F, np.dtype(np.complex64): DataType.C_32F,
    np.dtype(np.complex128): DataType.C_64F, FLOAT8_E4M3: DataType.R_8F_E4M3, FLOAT8_E5M2: DataType.R_8F_E5M2,
    np.dtype(np.int8): DataType.R_8I, np.dtype(np.int32): DataType.R_32I,
}
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
