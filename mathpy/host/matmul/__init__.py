"""Matrix products on cuBLASLt (GPU) and NumPy (CPU) with numpy.matmul semantics, fused epilogs and autotuning.

- :func:`matmul`: stateless ``epilog(alpha * a @ b + beta * c)``; plans are cached in :data:`matmul_plan_cache`.
- :class:`Matmul`: stateful: ``plan()`` (candidate algorithms), ``autotune()``, ``execute()``, ``reset_operands()``,
  ``free()``; a context manager.
- :class:`MatmulEpilog`: every cuBLASLt epilog; inputs and outputs as documented in ``_epilog``.
- :class:`MatmulOptions`, :class:`MatmulPlanPreferences`: dtypes, compute/scale types, float8 scales; planning limits.
"""

from ._epilog import MatmulEpilog
from ._matmul import Matmul, matmul, matmul_plan_cache
from ._options import MatmulOptions, MatmulPlanPreferences

__all__ = ["matmul", "Matmul", "MatmulEpilog", "MatmulOptions", "MatmulPlanPreferences", "matmul_plan_cache"]
