"""Matmul options and plan preferences, and the dtype rules: which operand dtypes combine, which result, compute and
scale types go with them (cuBLASLt's table; nvmath-python's defaults are the model).

====================  =====================  ============================================  ===============
A / B dtype           result (D) dtypes      compute types (default first)                 scale type
====================  =====================  ============================================  ===============
float16               float16, float32       32F, 16F                                      float32 (16F: float16)
bfloat16              bfloat16, float32      32F                                           float32
float32               float32                32F (32F_FAST_TF32 with allow_tf32),          float32
                                             32F_FAST_TF32, 32F_FAST_16F, 32F_FAST_16BF
float64               float64                64F                                           float64
complex64             complex64              32F, 32F_FAST_TF32                            complex64
complex128            complex128             64F                                           complex128
float8 (e4m3/e5m2)    float8 (default A's),  32F                                           float32
                      bfloat16, float16,
                      float32
int8                  int8 (NumPy's), int32  32I (int32 sums, exact)                       int32
bool                  bool                   32I on the GPU (as int8), NATIVE on the CPU   int32 / bool
other integers, long  the operands' dtype    NATIVE (NumPy's own loops), CPU only          the result's
double, object
====================  =====================  ============================================  ===============

Operands of different dtypes are promoted first, with NumPy's rules (``np.result_type``: ``float32 @ float64`` is
float64, ``int64 @ float32`` is float64, ``bool @ int8`` is int8), except that float8 and bfloat16 combine only with
their own kind. The table's first result is the default (NumPy's result dtype; bfloat16 stays bfloat16 as in
cuBLASLt).

Integers are exact: NumPy's wrap-around arithmetic in the result's dtype (an int8 result is the exact int32 sum
wrapped to int8, as ``numpy.matmul`` gives it). On the GPU cuBLASLt multiplies integers only as int8 x int8 with int32
accumulation (``CUBLAS_COMPUTE_32I``, in its "TN" form: the API stages A row-major and B column-major); bool operands
take that path as 0/1 int8 and come back as ``count != 0``, and an int8 result is the int32 one wrapped. Every other
integer dtype, long double and object arrays have no exact GPU kernel and are refused there with a TypeError before
any work (``execution='cpu'`` runs them).

float8: A and B may be e4m3 or e5m2 but not both e5m2; needs a GPU of compute capability >= 8.9 (any CPU works);
C (when given) has the result's dtype, or bfloat16/float16 for a float8 result. Scale factors ``a_scale``,
``b_scale``, ``d_scale`` (floats, default 1) apply to float8 products only:
``D = d_scale * epilog(alpha * a_scale * b_scale * A @ B + beta * C)``.

>>> resolve_types(np.dtype(np.float32), np.dtype(np.float32), None, MatmulOptions(allow_tf32=True))[:3]
(dtype('float32'), '32F_FAST_TF32', dtype('float32'))
>>> from mathpy import CudaDataType, MatmulComputeType
>>> MatmulOptions(compute_type=MatmulComputeType.COMPUTE_32F_FAST_TF32, scale_type=CudaDataType.CUDA_R_32F)
MatmulOptions(compute_type='32F_FAST_TF32', scale_type=dtype('float32'), ...)
>>> resolve_types(np.dtype(np.int8), np.dtype(np.int8), None, MatmulOptions(), on_gpu=True)  # doctest: +ELLIPSIS
MatmulTypes(result=dtype('int8'), compute='32I', scale=dtype('int32'), ..., engine_result=dtype('int32'))
>>> resolve_types(np.dtype(np.int64), np.dtype(np.float32), None, MatmulOptions()).result
dtype('float64')
>>> MatmulPlanPreferences(limit=0)
Traceback (most recent call last):
...
ValueError: MatmulPlanPreferences.limit must be a positive int, not 0
"""

import dataclasses
import logging
import typing

import numpy as np

from ... import _cuda
from ..._dtypes import BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2, dtype_name
from ..._memory import check_allocator
from ...jit._bounds import check_option
from ...bindings._types import CudaDataType, to_dtype
from ...bindings.cublaslt import MatmulComputeType

__all__ = ["MatmulOptions", "MatmulPlanPreferences", "MatmulTypes", "resolve_types", "refuse_block_scaling",
           "check_scalar", "SUPPORTED_DTYPES", "FLOAT8_DTYPES", "COMPUTE_TYPES", "RESULT_ORDERS", "is_floating", "BF16",
           "E4M3", "EPILOG_ROUTES", "F16", "I8"]

#: How a Python epilog may run on a GPU (``MatmulPlanPreferences.epilog_route``; see ``_fused_route``).
EPILOG_ROUTES = ("auto", "library", "fused", "elementwise", "generic")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
BF16, E4M3, E5M2 = BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2
FLOAT8_DTYPES = (E4M3, E5M2)
I8, I32, BOOL = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.bool_)
#: cuBLASLt's dtypes (bool goes through int8 on the GPU; other integers, long double and object arrays are CPU-only)
SUPPORTED_DTYPES = (F16, BF16, F32, F64, C64, C128, E4M3, E5M2, I8)
COMPUTE_TYPES = ("16F", "32F", "32F_FAST_TF32", "32F_FAST_16F", "32F_FAST_16BF", "64F", "32I")
RESULT_ORDERS = (None, "C", "F")

_RESULTS = {F16: (F16, F32), BF16: (BF16, F32), F32: (F32,), F64: (F64,), C64: (C64,), C128: (C128,), I8: (I8, I32),
            BOOL: (BOOL,)}
_COMPUTE = {F16: ("32F", "16F"), BF16: ("32F",), F32: ("32F", "32F_FAST_TF32", "32F_FAST_16F", "32F_FAST_16BF"),
            F64: ("64F",), C64: ("32F", "32F_FAST_TF32"), C128: ("64F",), I8: ("32I",)}
_FLOAT8_RESULTS = (E4M3, E5M2, BF16, F16, F32)
_NUMPY_KINDS = "biufcO"  # what numpy.matmul takes (NATIVE products on the CPU)
_ML_DTYPES = {dtype.name: dtype for dtype in (BF16, E4M3, E5M2)}


def is_floating(dtype):
    """Whether ``dtype`` is one of cuBLASLt's real floating-point dtypes (what epilogs apply to)."""
    return dtype in (F16, BF16, F32, F64, E4M3, E5M2)


class MatmulTypes(typing.NamedTuple):
    """The dtypes of one product (see the module table)."""

    result: np.dtype         # the result's dtype
    compute: str             # a cuBLAS compute type name, or "NATIVE": NumPy's own loop in the result's dtype
    scale: np.dtype          # alpha and beta
    operand: np.dtype        # the dtype A and B enter the engine in (promoted; int8 for bool on the GPU)
    engine_result: np.dtype  # D's dtype in the engine (int32 for int8 and bool products on the GPU)

    @property
    def engine_c(self):
        """The dtype the engine reads C in: D's, but C's own (None: 16 bits, never rounded) for a float8 result."""
        return None if self.result in FLOAT8_DTYPES else self.engine_result


def _as_dtype(value, name):
    if value is None:
        return None
    if isinstance(value, CudaDataType):
        value = to_dtype(value)
    if isinstance(value, str) and value in _ML_DTYPES:  # names NumPy does not know
        return _ML_DTYPES[value]
    try:
        return np.dtype(value)
    except TypeError:
        raise ValueError(f"{name} {value!r} is not a dtype; allowed are {[d.name for d in SUPPORTED_DTYPES]} "
                         f"(and, on the CPU, NumPy's other numeric dtypes)") from None


@dataclasses.dataclass(frozen=True)
class MatmulOptions:
    """Options of a matrix product (:func:`~mathpy.matmul`, :class:`~mathpy.Matmul`); a dict of the same fields is
    accepted wherever an instance is.

    Parameters
    ----------
    compute_type : str or MatmulComputeType, optional
        A cuBLAS compute type, by name (``"32F"``, ``"16F"``, ``"32F_FAST_TF32"``, ``"32F_FAST_16F"``,
        ``"32F_FAST_16BF"``, ``"64F"``, ``"32I"``) or as a :class:`~mathpy.MatmulComputeType`; None picks the
        default for the operands' dtype (the module table), or the one that goes with ``scale_type`` when that is
        given (16F for a float16 scale type).
    scale_type : dtype or CudaDataType, optional
        The dtype of alpha and beta (a dtype, its name or a :class:`~mathpy.CudaDataType`); None picks the one that
        goes with the compute type.
    result_type : dtype or CudaDataType, optional
        The result's dtype; None: NumPy's result dtype of the operands (the table lists the choices, e.g. float32
        for float16 operands, int32 for int8 ones).
    allow_tf32 : bool, optional
        Let float32 (and complex64) products use TF32 tensor cores when ``compute_type`` is None. Default False.
    a_scale, b_scale, d_scale : float, optional
        float8 scale factors (None = 1): ``D = d_scale * epilog(alpha * a_scale * b_scale * A @ B + beta * C)``.
    blocking : {"auto", True}, optional
        True waits for the GPU before returning; ``"auto"`` (default) only when the result goes back to host
        memory.
    fast_accumulation : bool, optional
        float8 only: let cuBLASLt accumulate in lower precision (faster, less accurate). Ignored on the CPU.
    inplace : bool, optional
        Write the result into ``c`` (which must then have the result's shape and dtype, no broadcasting, and a row-
        or column-major layout; epilogs with a per-row operand need it column-major); the call returns ``c``.
    result_amax : bool, optional
        float8 results only: also return the largest absolute value of the result before ``d_scale`` (cuBLASLt's
        AMAX_D) as ``aux["result_amax"]``, a float32 array of shape (1,): what the next scale is computed from.
    block_scaling : bool, optional
        MXFP8 block scaling; needs a Blackwell GPU (compute capability >= 10.0) and is refused (mathpy does not
        implement it).
    sm_count_target : int, optional
        How many SMs cuBLASLt may use (0: all; ignored on the CPU).
    logger : logging.Logger, optional
        Where this product's messages go (default: the ``"mathpy"`` logger).
    allocator : memory manager, optional
        A memory manager (:class:`~mathpy.BaseCUDAMemoryManager` protocol) the GPU workspace is drawn from
        (default: the operands' package's stream-ordered pool).
    result_order : {None, "C", "F"}, optional
        The result's memory order. None (default, nvmath-python's rule): ``c``'s order when ``c`` is given, else
        column-major when the epilog has a per-row operand (bias, aux, bias gradients), else ``a``'s order (C
        order for C-ordered operands, as numpy.matmul). ``"C"``: row-major; ``"F"``: column-major (cuBLASLt's own
        order, a few percent faster for 16-bit products on an H200).
    check_bounds : bool or None, optional
        For a Python-function epilog: check every index it reads its operands with against their shapes when it
        runs; an index outside one raises :class:`~mathpy.OutOfBoundsError` naming the epilog, the operand and the
        index, after the product (whose result is then not to be used), instead of reading foreign memory. None
        (default): on when the environment variable ``MATHPY_CHECK_BOUNDS`` is 1 (read when a plan is made), else
        off. A checked epilog runs slower (on the GPU a compare and a branch per operand read, its own compiled
        kernel, and each execution waits for the GPU to read the error record, so it cannot be captured in a CUDA
        graph). Indices that every call reaches and that the epilog's source shows are checked against each
        operand's shape when planning whatever this option says. Where the GPU plan runs cuBLASLt's own epilog
        (the ``library`` route: the function is cuBLASLt's bias / residual / activation), no user code runs and
        every read was checked when planning, so nothing more is checked. Named epilogs are not affected.

    Raises
    ------
    ValueError
        A compute type, blocking or result order that is not one of the allowed values (named).
    TypeError
        ``allow_tf32``, ``fast_accumulation``, ``logger``, ``check_bounds`` or a scale factor of the wrong type, an
        ``allocator`` without the memory-manager methods.

    Notes
    -----
    Whether a combination is allowed is decided with the operands (a TypeError or ValueError names the allowed
    ones), on the CPU and the GPU alike; compute types and TF32 are emulated on the CPU (inputs rounded as the
    tensor cores round them), ``fast_accumulation`` applies to the GPU only.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> a = np.ones((2, 3), np.float16)
    >>> mathpy.matmul(a, a.T, options=mathpy.MatmulOptions(result_type=np.float32)).dtype
    dtype('float32')
    >>> mathpy.matmul(a, a.T, options={"result_order": "F"}).flags.f_contiguous
    True
    """

    compute_type: str | None = None
    scale_type: object = None
    result_type: object = None
    allow_tf32: bool = False
    a_scale: float | None = None
    b_scale: float | None = None
    d_scale: float | None = None
    blocking: object = "auto"
    fast_accumulation: bool = False
    inplace: bool = False
    result_amax: bool = False
    block_scaling: bool = False
    sm_count_target: int = 0
    logger: logging.Logger | None = None
    allocator: object = None
    result_order: str | None = None
    check_bounds: bool | None = None

    def __post_init__(self):
        given = self.compute_type
        if isinstance(given, int) and not isinstance(given, bool):  # a MatmulComputeType (or its value)
            try:
                object.__setattr__(self, "compute_type", MatmulComputeType(given).name[len("COMPUTE_"):])
            except ValueError:
                raise ValueError(f"MatmulOptions.compute_type {given!r} is not a cublasComputeType_t value") from None
        if self.compute_type is not None and self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"MatmulOptions.compute_type {given!r} is not supported; allowed are None or one of "
                             f"{list(COMPUTE_TYPES)} (or the MatmulComputeType members of those names)")
        object.__setattr__(self, "scale_type", _as_dtype(self.scale_type, "MatmulOptions.scale_type"))
        object.__setattr__(self, "result_type", _as_dtype(self.result_type, "MatmulOptions.result_type"))
        if not isinstance(self.allow_tf32, bool):
            raise TypeError(f"MatmulOptions.allow_tf32 must be a bool, not {self.allow_tf32!r}")
        for name in ("a_scale", "b_scale", "d_scale"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.floating))):
                raise TypeError(f"MatmulOptions.{name} must be None or a real number, not {value!r}")
        for name in ("fast_accumulation", "inplace", "result_amax", "block_scaling"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"MatmulOptions.{name} must be a bool, not {getattr(self, name)!r}")
        if self.blocking not in (True, "auto"):
            raise ValueError(f"MatmulOptions.blocking must be True or 'auto', not {self.blocking!r}")
        if isinstance(self.sm_count_target, bool) or not isinstance(self.sm_count_target, int) or \
                self.sm_count_target < 0:
            raise ValueError(f"MatmulOptions.sm_count_target must be a non-negative int, not {self.sm_count_target!r}")
        if self.logger is not None and not isinstance(self.logger, logging.Logger):
            raise TypeError(f"MatmulOptions.logger must be a logging.Logger, not {type(self.logger).__name__}")
        check_allocator(self.allocator, "MatmulOptions.allocator")
        if self.result_order not in RESULT_ORDERS:
            raise ValueError(f"MatmulOptions.result_order must be one of {list(RESULT_ORDERS)}, not "
                             f"{self.result_order!r}")
        check_option(self.check_bounds, "MatmulOptions")


@dataclasses.dataclass(frozen=True)
class MatmulPlanPreferences:
    """What planning may choose (``preferences=`` of :func:`~mathpy.matmul` and :meth:`Matmul.plan
    <mathpy.Matmul.plan>`; a dict of the same fields is accepted).

    Parameters
    ----------
    limit : int, optional
        How many candidate algorithms to ask cuBLASLt's heuristic for (it returns at most this many; they are what
        :meth:`Matmul.autotune <mathpy.Matmul.autotune>` times). Default 8.
    max_workspace_bytes : int, optional
        The largest workspace a plan may use. Default 32 MiB (what torch gives cuBLASLt on Hopper).
    reduction_scheme_mask, numerical_impl_mask : int, optional
        cuBLASLt's masks of allowed split-K reduction schemes and numerical implementations (None: all).
    max_waves_count : float, optional
        Exclude algorithms with more waves than this (0: no limit).
    aux_type : dtype or CudaDataType, optional
        The dtype of the GELU aux output (epilogs GELU_AUX, GELU_AUX_BIAS; nvmath-python's
        ``MatmulEpilogPreferences.aux_type``). None: the result's dtype, or with a float8 result C's (float16
        without C). cuBLASLt allows another one only with a float8 result: bfloat16 when there is no C, and
        ``float8_e4m3fn`` for GELU_AUX with e4m3 operands and result and a float16 C (or none). A float8 aux holds
        ``aux_scale * X`` (saturated), X the pre-activation; ``aux_scale`` is an epilog input (a number, or a float32
        one-element array read at every execution; default 1).
    aux_amax : bool, optional
        A float8 aux only: also return the largest absolute value of X (before ``aux_scale``) as
        ``aux["gelu_aux_amax"]``, a float32 array of shape (1,).
    epilog_route : {"auto", "library", "fused", "elementwise", "generic"}, optional
        How a Python epilog runs on a GPU. "auto" (default) follows the rule of ``docs/matmul_epilogs.md``:
        cuBLASLt's own epilog when the function is one ("library"), mathpy's fused TMA + wgmma kernel on Hopper
        where it wins ("fused"), else cuBLASLt's product followed by one compiled pass over the result
        ("elementwise"). "generic" is the block-GEMM kernel with the epilog. A route that cannot run the product
        raises a ValueError saying why. The plan logs the route and its reason (INFO on the ``mathpy`` logger).

    Raises
    ------
    ValueError
        A limit that is not a positive int, a negative workspace, mask or waves count, an ``aux_type`` that is not a
        dtype. Whether the aux type, amax and scale go with the epilog and dtypes is checked by ``plan()`` (a
        ValueError naming the allowed ones).
    TypeError
        ``aux_amax`` that is not a bool.

    Notes
    -----
    The GPU's heuristic applies them; the CPU has one "algorithm" (NumPy's matmul) and ignores them.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> with mathpy.Matmul(np.ones((4, 4)), np.ones((4, 4))) as mm:
    ...     algorithms = mm.plan(preferences=mathpy.MatmulPlanPreferences(limit=4))
    >>> algorithms
    [CPUAlgorithm('numpy')]
    """

    limit: int = 8
    max_workspace_bytes: int = 32 * 1024 * 1024
    reduction_scheme_mask: int | None = None
    numerical_impl_mask: int | None = None
    max_waves_count: float = 0.0
    aux_type: object = None
    aux_amax: bool = False
    epilog_route: str = "auto"

    def __post_init__(self):
        object.__setattr__(self, "aux_type", _as_dtype(self.aux_type, "MatmulPlanPreferences.aux_type"))
        if self.epilog_route not in EPILOG_ROUTES:
            raise ValueError(f"MatmulPlanPreferences.epilog_route must be one of {list(EPILOG_ROUTES)}, not "
                             f"{self.epilog_route!r}")
        if not isinstance(self.aux_amax, bool):
            raise TypeError(f"MatmulPlanPreferences.aux_amax must be a bool, not {self.aux_amax!r}")
        for name in ("reduction_scheme_mask", "numerical_impl_mask"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"MatmulPlanPreferences.{name} must be None or a non-negative int, not {value!r}")
        if isinstance(self.max_waves_count, bool) or not isinstance(self.max_waves_count, (int, float)) or \
                self.max_waves_count < 0:
            raise ValueError(f"MatmulPlanPreferences.max_waves_count must be a non-negative number, not "
                             f"{self.max_waves_count!r}")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"MatmulPlanPreferences.limit must be a positive int, not {self.limit!r}")
        if (isinstance(self.max_workspace_bytes, bool) or not isinstance(self.max_workspace_bytes, int)
                or self.max_workspace_bytes < 0):
            raise ValueError(f"MatmulPlanPreferences.max_workspace_bytes must be a non-negative int, not "
                             f"{self.max_workspace_bytes!r}")


def resolve_types(a_dtype, b_dtype, c_dtype, options, on_gpu=False):
    """The :class:`MatmulTypes` of a product of operands of these dtypes (``c_dtype`` None without C) on the GPU or
    the CPU, or a TypeError/ValueError naming the bad combination and the allowed ones."""
    float8 = a_dtype in FLOAT8_DTYPES or b_dtype in FLOAT8_DTYPES
    if float8:
        if a_dtype not in FLOAT8_DTYPES or b_dtype not in FLOAT8_DTYPES:
            raise TypeError(f"float8 operands combine only with float8 operands: a is {a_dtype.name}, b is "
                            f"{b_dtype.name}")
        if a_dtype == E5M2 and b_dtype == E5M2:
            raise TypeError("a and b cannot both be float8_e5m2 (cuBLASLt supports e4m3 x e4m3, e4m3 x e5m2 and "
                            "e5m2 x e4m3)")
        operand, results, computes = a_dtype, _FLOAT8_RESULTS, ("32F",)
    else:
        operand = _promote(a_dtype, b_dtype)
        if operand in _RESULTS:
            results, computes = _RESULTS[operand], _COMPUTE.get(operand, ("NATIVE",))
        else:  # NumPy's other numeric dtypes: its own loops, on the CPU
            results, computes = (operand,), ("NATIVE",)
    result = options.result_type or operand
    if result not in results:
        raise TypeError(f"result_type {result.name} is not supported for {operand.name} operands; allowed are "
                        f"{[d.name for d in results]}")
    if float8 and result == E5M2 and a_dtype == b_dtype == E4M3:  # cuBLASLt has no such kernel (H200, 13.1)
        raise TypeError("result_type float8_e5m2 needs an e5m2 operand: cuBLASLt has no e4m3 x e4m3 product with an "
                        "e5m2 result (its float8 results are e4m3 there; float16, bfloat16 and float32 work too)")
    if on_gpu:
        _check_gpu(operand)
    if c_dtype is not None:
        allowed_c = (BF16, F16) if result in FLOAT8_DTYPES else (result,)
        if c_dtype not in allowed_c:
            raise TypeError(f"c has dtype {c_dtype.name}; with a {result.name} result it must be one of "
                            f"{[d.name for d in allowed_c]}")
    compute = options.compute_type
    if operand == BOOL:
        computes = ("32I",) if on_gpu else ("NATIVE",)
    if compute is None and options.scale_type is not None:  # the compute type that goes with the scale type
        compute = {F16: "16F", F64: "64F", C128: "64F"}.get(options.scale_type)
        compute = compute if compute in computes else None
    if compute is None:
        compute = "32F_FAST_TF32" if options.allow_tf32 and "32F_FAST_TF32" in computes else computes[0]
    elif compute not in computes:
        raise ValueError(f"compute_type {compute!r} is not supported for {operand.name} operands; allowed are "
                         f"{[c for c in computes if c != 'NATIVE'] or [None]}")
    complex_ = operand.kind == "c"
    if compute == "NATIVE":
        scale = result
    elif compute == "32I":
        scale = I32
    elif compute == "16F":
        scale = F16
    elif compute == "64F":
        scale = C128 if complex_ else F64
    else:
        scale = C64 if complex_ else F32
    if options.scale_type is not None and options.scale_type != scale:
        raise ValueError(f"scale_type {options.scale_type.name} does not go with compute type {compute!r}; "
                         f"allowed is {scale.name}")
    if not float8 and any(getattr(options, s) is not None for s in ("a_scale", "b_scale", "d_scale")):
        raise ValueError("a_scale, b_scale and d_scale apply to float8 operands only; the operands are "
                         f"{operand.name}")
    if options.result_amax and result not in FLOAT8_DTYPES:
        raise ValueError(f"result_amax applies to float8 results only; the result is {result.name}")
    engine_operand = I8 if (on_gpu and operand == BOOL) else operand
    engine_result = I32 if (on_gpu and compute == "32I") else result
    return MatmulTypes(result, compute, scale, engine_operand, engine_result)


def refuse_block_scaling(dtype, execution):
    """MXFP8 block scaling: Blackwell only, and not implemented here."""
    if dtype not in FLOAT8_DTYPES:
        raise ValueError(f"block_scaling applies to float8 operands; the operands are {dtype.name}")
    if execution is not None:
        cc = tuple(_cuda.compute_capability(execution.device_id))
        if cc < (10, 0):
            raise ValueError(f"MXFP8 block scaling (block_scaling=True) needs a Blackwell GPU (compute capability >= "
                             f"10.0); device {execution.device_id} has compute capability {cc[0]}.{cc[1]}. Use "
                             f"per-tensor float8 scales instead")
    raise NotImplementedError("MXFP8 block scaling (block_scaling=True) runs only on Blackwell GPUs and mathpy does "
                              "not implement it; use per-tensor float8 scales")


def _promote(a_dtype, b_dtype):
    """NumPy's promotion of the operands' dtypes (bfloat16 only with itself, integers and bools: cuBLASLt's)."""
    for name, dtype in (("a", a_dtype), ("b", b_dtype)):
        if dtype.kind not in _NUMPY_KINDS and dtype != BF16:
            raise TypeError(f"operand {name} has dtype {dtype_name(dtype)}, which matmul does not support; allowed are "
                            f"{[d.name for d in SUPPORTED_DTYPES]} and, on the CPU, NumPy's other numeric dtypes")
    if a_dtype == b_dtype:
        return a_dtype
    if BF16 in (a_dtype, b_dtype):
        other = b_dtype if a_dtype == BF16 else a_dtype
        if other.kind not in "biu":
            raise TypeError(f"a bfloat16 operand combines only with bfloat16 (or integer) operands: a is "
                            f"{a_dtype.name}, b is {b_dtype.name}; convert one of them")
        return BF16
    return np.result_type(a_dtype, b_dtype)


def _check_gpu(operand):
    if operand in _RESULTS or operand in FLOAT8_DTYPES:
        return
    if operand.kind in "iu":
        raise TypeError(f"{operand.name} products have no exact GPU kernel: cuBLASLt multiplies integers only as int8 "
                        f"(int8 x int8 with int32 accumulation). Run it on the CPU (execution='cpu'), or convert the "
                        f"operands: to int8 when the values fit, to float64 when products and sums stay below 2**53")
    raise TypeError(f"{operand.name} products run only on the CPU (cuBLASLt has no {operand.name} kernels); run it "
                    f"with execution='cpu', or convert the operands to float64/complex128")


def check_scalar(value, name, types):
    """alpha or beta as the scale type of ``types``; integer and bool products take integers (0 or 1 for bool)."""
    scale_type, logical = types.scale, types.result == BOOL
    if (isinstance(value, (bool, np.bool_)) and not logical) or \
            not isinstance(value, (bool, int, float, complex, np.number, np.bool_)):
        raise TypeError(f"{name} must be a number, not {value!r}")
    if np.iscomplexobj(value) and np.imag(value) != 0 and scale_type.kind not in "cO":
        raise TypeError(f"{name} = {value!r} is complex but the operands are real ({scale_type.name} scale type)")
    if scale_type.kind in "biu":
        if np.iscomplexobj(value) or not float(value).is_integer():
            raise TypeError(f"{name} = {value!r} must be an integer for {types.result.name} operands")
        value = int(value)
        low, high = (0, 1) if logical else (np.iinfo(scale_type).min, np.iinfo(scale_type).max)
        if not low <= value <= high:
            raise ValueError(f"{name} = {value} must lie in [{low}, {high}] for {types.result.name} operands")
    if scale_type.kind == "O":
        return value
    return scale_type.type(value)
