"""The dtypes mathpy names itself. dtypes are NumPy dtypes throughout mathpy; bfloat16 and float8 are the ml_dtypes
ones. How each array package spells them is in that package's module (:mod:`mathpy._packages`); the CUDA libraries'
``cudaDataType`` codes are in :mod:`mathpy.bindings._types`.

NumPy has no complex half, and neither has ml_dtypes: :data:`COMPLEX32` (torch's ``complex32`` / ``chalf``) is the
structured dtype of its memory layout, a float16 real part followed by a float16 imaginary part (4 bytes). It only
describes and moves such data (shapes, strides in elements, copies); arithmetic on it happens in torch or cuFFT.
Only torch has arrays of it, so only torch operands and results carry it; :func:`dtype_name` spells it "complex32".

>>> COMPLEX32.itemsize, dtype_name(COMPLEX32), dtype_name(np.dtype(np.complex64))
(4, 'complex32', 'complex64')
"""

import ml_dtypes
import numpy as np

__all__ = ["BFLOAT16", "COMPLEX32", "FLOAT8_E4M3", "FLOAT8_E5M2", "VIEW_AS", "dtype_name"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
FLOAT8_E5M2 = np.dtype(ml_dtypes.float8_e5m2)
COMPLEX32 = np.dtype([("real", np.float16), ("imag", np.float16)])

#: Packages that have no view for these dtypes exchange them as same-sized integers, reinterpreted on arrival.
VIEW_AS = {BFLOAT16: np.dtype(np.int16), FLOAT8_E4M3: np.dtype(np.uint8), FLOAT8_E5M2: np.dtype(np.uint8),
           COMPLEX32: np.dtype(np.int32)}


def dtype_name(dtype):
    """The name of a mathpy dtype as messages and the nvmath adapters spell it ("complex32" for :data:`COMPLEX32`,
    which NumPy would call "void32")."""
    dtype = np.dtype(dtype)
    return "complex32" if dtype == COMPLEX32 else dtype.name
