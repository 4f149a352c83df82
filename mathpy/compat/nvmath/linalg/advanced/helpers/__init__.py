"""``nvmath.linalg.advanced.helpers`` on mathpy: :mod:`.matmul`, the MXFP8 block-scale helpers.

>>> import mathpy.compat.nvmath as nvmath
>>> sorted(nvmath.linalg.advanced.helpers.matmul.__all__)
['apply_mxfp8_scale', 'create_mxfp8_scale', 'get_mxfp8_scale_offset', 'invert_mxfp8_scale']
"""

from . import matmul

__all__ = ["matmul"]
