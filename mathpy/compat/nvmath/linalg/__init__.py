"""``nvmath.linalg`` on mathpy: :mod:`.advanced` (cuBLASLt matmul) and ``ComputeType`` (cuBLAS's compute types).

nvmath-python's generic ``nvmath.linalg.matmul`` (matrix qualifiers, CPU execution through NVPL) has no counterpart
here; ``nvmath.linalg.advanced.matmul`` runs the same products on the GPU or, through mathpy, on the CPU.
"""

from ...._errors import InvalidPlanStateError as InvalidMatmulState  # (nvmath's name for a freed Matmul)
from ....bindings.cublaslt import MatmulComputeType as ComputeType
from . import advanced

__all__ = ["advanced", "ComputeType", "InvalidMatmulState"]
