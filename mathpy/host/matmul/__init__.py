"""Matrix products on cuBLASLt (GPU) and NumPy (CPU) with numpy.matmul semantics, fused epilogs and autotuning.

- :func:`matmul`: stateless ``epilog(alpha * a @ b + beta * c)``; plans are cached in :data:`matmul_plan_cache`.
- :class:`Matmul`: stateful: ``plan()`` (candidate algorithms), ``autotune()``, ``execute()``, ``reset_operands()``,
  ``free()``; a context manager.
- :class:`MatmulEpilog`: every cuBLASLt epilog (the binding's own enum); inputs and outputs as documented in
  ``_epilog``.
- :class:`MatmulOptions`, :class:`MatmulPlanPreferences`: dtypes, compute/scale types, float8 scales; planning limits.

Where things are: ``_functions`` (the public function), ``_matmul`` (the stateful object), ``_stateless`` (the
stateless call's work and its memo), ``_call`` (the
prepared call: allocate, run, finish), ``_layouts`` (staging and layout rules), ``_epilog`` (the epilog table and
formats), ``_epilog_operands`` (one handler per epilog operand), ``_problem`` (what engines see), ``_options`` (dtype
rules), ``_cpu`` and ``_cublaslt`` (the engines).
"""

from ._epilog import MatmulEpilog
from ._matmul import Matmul, matmul_plan_cache
from ._options import MatmulOptions, MatmulPlanPreferences
from ._functions import matmul

__all__ = ["matmul", "Matmul", "MatmulEpilog", "MatmulOptions", "MatmulPlanPreferences", "matmul_plan_cache"]
