"""nvmath's matmul options, preferences, scales and enumerations.

The dataclasses are nvmath-python's (mutable, the same fields, defaults and checks); ``_matmul`` turns them into
:class:`mathpy.MatmulOptions` / :class:`mathpy.MatmulPlanPreferences` (``_Call``), refusing by name what mathpy's
matmul cannot express.
"""

import dataclasses
import enum
import logging
import re

import numpy as np

from .....bindings._types import CudaDataType
from .....bindings.cublaslt import MatmulComputeType
from ....._memory import check_allocator
from .....host.matmul import MatmulEpilog  # noqa: F401  (cuBLASLt's enumeration: the same names and values)
from ..._common import check_or_create_options

__all__ = ["MatmulEpilog", "MatmulInnerShape", "MatmulNumericalImplFlags", "MatmulOptions", "MatmulEpilogPreferences",
           "MatmulPlanPreferences", "MatmulQuantizationScales", "MatmulReductionScheme", "MatmulComputeType",
           "matrix_qualifiers_dtype", "memory_limit_bytes"]

matrix_qualifiers_dtype = np.dtype([("structure", object), ("is_conjugate", "<i4")])


class MatmulInnerShape(enum.IntEnum):
    """``cublasLtMatmulInnerShape_t``."""

    UNDEFINED = 0
    MMA884 = 1
    MMA1684 = 2
    MMA1688 = 3
    MMA16816 = 4


class MatmulReductionScheme(enum.IntEnum):
    """``cublasLtReductionScheme_t`` (combine with ``|`` into a mask)."""

    NONE = 0
    INPLACE = 1
    COMPUTE_TYPE = 2
    OUTPUT_TYPE = 4
    MASK = 7


class MatmulNumericalImplFlags(enum.IntEnum):
    """``cublasLtNumericalImplFlags_t`` (combine with ``|`` into a mask)."""

    OP_TYPE_FMA = 0x01
    OP_TYPE_TENSOR_HMMA = 0x02
    OP_TYPE_TENSOR_IMMA = 0x04
    OP_TYPE_TENSOR_DMMA = 0x08
    OP_TYPE_TENSOR_MASK = 0xFE
    OP_TYPE_MASK = 0xFF
    ACCUMULATOR_16F = 0x01 << 8
    ACCUMULATOR_32F = 0x02 << 8
    ACCUMULATOR_64F = 0x04 << 8
    ACCUMULATOR_32I = 0x08 << 8
    ACCUMULATOR_TYPE_MASK = 0xFF << 8
    INPUT_TYPE_16F = 0x01 << 16
    INPUT_TYPE_16BF = 0x02 << 16
    INPUT_TYPE_TF32 = 0x04 << 16
    INPUT_TYPE_32F = 0x08 << 16
    INPUT_TYPE_64F = 0x10 << 16
    INPUT_TYPE_8I = 0x20 << 16
    INPUT_TYPE_8F_E4M3 = 0x40 << 16
    INPUT_TYPE_8F_E5M2 = 0x80 << 16
    INPUT_TYPE_MASK = 0xFF << 16
    GAUSSIAN = 0x01 << 32
    ALL = (1 << 64) - 1


@dataclasses.dataclass
class MatmulOptions:
    """nvmath's matmul options (see the module docstring of :mod:`..advanced` for what each maps to)."""

    inplace: bool = False
    compute_type: int | None = None
    scale_type: int | None = None
    result_type: int | None = None
    result_amax: bool = False
    block_scaling: bool = False
    sm_count_target: int | None = 0
    fast_accumulation: bool | None = False
    device_id: int = 0
    handle: int | None = None
    logger: logging.Logger | None = None
    memory_limit: int | str | None = r"80%"
    blocking: object = "auto"
    allocator: object = None

    def __post_init__(self):
        if self.compute_type is not None:
            self.compute_type = MatmulComputeType(self.compute_type)
        if self.scale_type is not None:
            self.scale_type = CudaDataType(self.scale_type)
        if self.result_type is not None:
            self.result_type = CudaDataType(self.result_type)
        if self.sm_count_target is None:
            self.sm_count_target = 0
        if self.fast_accumulation is None:
            self.fast_accumulation = False
        if self.device_id is None:
            self.device_id = 0
        if self.memory_limit is None:
            self.memory_limit = r"80%"
        memory_limit_bytes(self.memory_limit, None)  # checks the form
        if self.blocking not in (True, "auto"):
            raise ValueError("The value specified for blocking must be either True or 'auto'.")
        if self.allocator is not None:
            try:
                check_allocator(self.allocator, "MatmulOptions.allocator")
            except TypeError:
                raise TypeError("The allocator must be an object of type that fulfills the BaseCUDAMemoryManager "
                                "protocol.") from None


@dataclasses.dataclass
class MatmulEpilogPreferences:
    """nvmath's epilog preferences: ``aux_type`` (a CudaDataType: the GELU aux's dtype) and ``aux_amax`` (also return
    its amax as ``"gelu_aux_amax"``); mathpy's ``MatmulPlanPreferences(aux_type=..., aux_amax=...)``. A float8
    aux_type needs the epilog input ``"aux_quantization_scale"`` (mathpy's ``"aux_scale"``)."""

    aux_type: int | None = None
    aux_amax: bool = False

    def __post_init__(self):
        if self.aux_type is not None:
            self.aux_type = CudaDataType(self.aux_type)


@dataclasses.dataclass
class MatmulPlanPreferences:
    """nvmath's planning preferences."""

    reduction_scheme_mask: int | None = MatmulReductionScheme.MASK
    max_waves_count: float | None = 0.0
    numerical_impl_mask: int | None = MatmulNumericalImplFlags.ALL
    limit: int = 8
    epilog: MatmulEpilogPreferences | None = None

    def __post_init__(self):
        if self.reduction_scheme_mask is None:
            self.reduction_scheme_mask = MatmulReductionScheme.MASK
        else:
            self.reduction_scheme_mask = MatmulReductionScheme(self.reduction_scheme_mask)
        if self.max_waves_count is None:
            self.max_waves_count = 0.0
        if self.numerical_impl_mask is None:
            self.numerical_impl_mask = MatmulNumericalImplFlags.ALL
        if self.limit is None:
            self.limit = 8
        self.epilog = check_or_create_options(MatmulEpilogPreferences, self.epilog, "epilog preferences")


@dataclasses.dataclass
class MatmulQuantizationScales:
    """float8 scale factors for A, B, C and D: numbers (or, in nvmath, one-element tensors)."""

    a: object = None
    b: object = None
    c: object = None
    d: object = None


_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|[KMG]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "KI": 1024, "KIB": 1024, "M": 1000 ** 2, "MB": 1000 ** 2,
          "MI": 1024 ** 2, "MIB": 1024 ** 2, "G": 1000 ** 3, "GB": 1000 ** 3, "GI": 1024 ** 3, "GIB": 1024 ** 3}


def memory_limit_bytes(value, device_bytes):
    """``memory_limit`` in bytes: an int, "2 GiB"-style text, or a percentage of ``device_bytes`` (None: only check
    the form). ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _MEMORY.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"The memory limit must be a non-negative int, a number with a unit (K[iB], M[iB], G[iB]) or "
                         f"a percentage such as '80%'; got {value!r}")
    number, unit = float(match.group(1)), (match.group(2) or "").upper()
    if unit == "%":
        return None if device_bytes is None else int(number / 100 * device_bytes)
    return int(number * _UNITS[unit])
