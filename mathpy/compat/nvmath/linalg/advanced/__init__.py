"""``nvmath.linalg.advanced`` on mathpy: cuBLASLt matrix products with epilogs, nvmath-python's names and rules.

``matmul``, ``Matmul`` (``plan`` / ``autotune`` / ``execute`` / ``reset_operands`` / ``free``), ``MatmulEpilog``,
``MatmulOptions``, ``MatmulPlanPreferences``, ``MatmulEpilogPreferences``, ``MatmulQuantizationScales``,
``MatmulComputeType``, ``MatmulInnerShape``, ``MatmulReductionScheme``, ``MatmulNumericalImplFlags``, ``Algorithm``,
``matrix_qualifiers_dtype``; each a thin adapter over :class:`mathpy.Matmul` / :func:`mathpy.matmul`.
``helpers.matmul``: the MXFP8 block-scale helpers (block scaling itself needs a Blackwell GPU and is refused, naming
it).

>>> import numpy as np
>>> import mathpy.compat.nvmath as nvmath
>>> a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
>>> nvmath.linalg.advanced.matmul(a, b, np.ones((2, 1), np.float32), beta=2.0)[0]
array([5., 5., 5., 5.], dtype=float32)
"""

from . import helpers
from ._algorithm import Algorithm, AlgorithmCapabilities
from ._matmul import Matmul, matmul
from ._options import (MatmulComputeType, MatmulEpilog, MatmulEpilogPreferences, MatmulInnerShape,
                       MatmulNumericalImplFlags, MatmulOptions, MatmulPlanPreferences, MatmulQuantizationScales,
                       MatmulReductionScheme, matrix_qualifiers_dtype)

__all__ = ["helpers", "Algorithm", "AlgorithmCapabilities", "Matmul", "matmul", "MatmulComputeType", "MatmulEpilog",
           "MatmulEpilogPreferences", "MatmulInnerShape", "MatmulNumericalImplFlags", "MatmulOptions", "MatmulPlanPreferences",
           "MatmulQuantizationScales", "MatmulReductionScheme", "matrix_qualifiers_dtype"]
