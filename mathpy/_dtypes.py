"""The dtypes mathpy names itself. dtypes are NumPy dtypes throughout mathpy; bfloat16 and float8 are the ml_dtypes
ones. How each array package spells them is in that package's module (:mod:`mathpy._packages`); the CUDA libraries'
``cudaDataType`` codes are in :mod:`mathpy.bindings._types`."""

import ml_dtypes
import numpy as np

__all__ = ["BFLOAT16", "FLOAT8_E4M3", "FLOAT8_E5M2", "VIEW_AS"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
FLOAT8_E5M2 = np.dtype(ml_dtypes.float8_e5m2)

#: Packages that have no view for these dtypes exchange them as same-sized integers, reinterpreted on arrival.
VIEW_AS = {BFLOAT16: np.dtype(np.int16), FLOAT8_E4M3: np.dtype(np.uint8), FLOAT8_E5M2: np.dtype(np.uint8)}
