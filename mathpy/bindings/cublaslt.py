"""ctypes bindings to cuBLASLt (libcublasLt.so.12 of CUDA 12.x, libcublasLt.so.13 of CUDA 13), declared from tables.

Only what mathpy's matmul engine calls is declared: the handle, matmul / matrix-layout / preference descriptors made
with the ``*Create`` functions (the ``*Init`` ones take struct sizes that changed between CUDA 12 and 13), the
heuristic query and ``cublasLtMatmul``. Every value below was read from ``cublasLt.h`` / ``cublas_api.h`` /
``library_types.h`` of both CUDA 12.9 (cuBLAS 12.9) and CUDA 13 (cuBLAS 13.1); the two agree on all of them.

Attribute values are set through :func:`set_attribute`, which knows each attribute's C type (cuBLASLt checks the
size and answers CUBLAS_STATUS_INVALID_VALUE for a wrong one)::

    desc = create_matmul_desc(ComputeType.COMPUTE_32F, DataType.R_32F)
    set_attribute(desc, MatmulDesc.TRANSA, Operation.T)

Nothing here needs a GPU or the library at import time; the library is loaded on the first call.

>>> ctypes.sizeof(HeuristicResult), HeuristicResult.wavesCount.offset, MatmulEpilog.GELU_AUX_BIAS.value
(96, 76, 164)
>>> cuda_data_type("float16"), cuda_data_type("bfloat16")
(<CudaDataType.CUDA_R_16F: 2>, <CudaDataType.CUDA_R_16BF: 14>)
"""

import ctypes
import enum
import threading
from ctypes import (POINTER, c_float, c_int, c_int8, c_int32, c_int64, c_size_t, c_uint16, c_uint32, c_uint64,
                    c_void_p)


from .._errors import CUDALibraryError
from ._loader import STATUS, Library
from ._types import DataType, cuda_data_type

__all__ = [
    "STATUS_NAMES", "DataType", "ComputeType", "MatmulComputeType", "Operation", "Order", "PointerMode",
    "MatmulEpilog", "MatmulDesc", "MatrixLayout", "Preference", "AlgoConfig", "AlgoCap", "MatmulAlgo", "HeuristicResult",
    "library", "version",
    "cuda_data_type", "create_handle", "device_handle", "destroy_handle", "create_matmul_desc", "destroy_matmul_desc",
    "create_matrix_layout", "destroy_matrix_layout", "create_preference", "destroy_preference", "set_attribute",
    "get_attribute", "attribute_type", "algo_config", "set_algo_config", "algo_capabilities", "algo_check",
    "heuristics",
]

# cublasStatus_t (cublas_api.h; identical in CUDA 12.9 and 13).
STATUS_NAMES = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}


class MatmulComputeType(enum.IntEnum):
    """cuBLAS's ``cublasComputeType_t`` (cublas_api.h): how a matrix product accumulates. mathpy's compute type
    strings are the names without their prefix (``"32F_FAST_TF32"`` is ``COMPUTE_32F_FAST_TF32``); either form is
    accepted by :class:`~mathpy.MatmulOptions`.

    Notes
    -----
    The GPU passes it to cuBLASLt; the CPU engine emulates the 32F, 16F, TF32/16F/16BF fast modes, 64F and 32I
    (int8 products) compute types.

    Examples
    --------
    >>> import mathpy
    >>> mathpy.MatmulOptions(compute_type=mathpy.MatmulComputeType.COMPUTE_32I).compute_type
    '32I'
    """

    COMPUTE_16F = 64
    COMPUTE_16F_PEDANTIC = 65
    COMPUTE_32F = 68
    COMPUTE_32F_PEDANTIC = 69
    COMPUTE_64F = 70
    COMPUTE_64F_PEDANTIC = 71
    COMPUTE_32I = 72
    COMPUTE_32I_PEDANTIC = 73
    COMPUTE_32F_FAST_16F = 74
    COMPUTE_32F_FAST_16BF = 75
    COMPUTE_32F_FAST_TF32 = 77
    COMPUTE_32F_EMULATED_16BFX9 = 78  # cuBLAS >= 12.9
    COMPUTE_64F_EMULATED_FIXEDPOINT = 79  # cuBLAS 13


ComputeType = MatmulComputeType  # the bindings' name


class Operation(enum.IntEnum):
    """cublasOperation_t."""

    N = 0
    T = 1
    C = 2


class Order(enum.IntEnum):
    """cublasLtOrder_t."""

    COL = 0
    ROW = 1


class PointerMode(enum.IntEnum):
    """cublasLtPointerMode_t."""

    HOST = 0
    DEVICE = 1
    DEVICE_VECTOR = 2


class MatmulEpilog(enum.IntEnum):
    """The epilogs fused into a matrix product: cuBLASLt's ``cublasLtEpilogue_t`` values, passed to it unchanged.

    ``epilog=`` of :func:`~mathpy.matmul` and :meth:`Matmul.plan <mathpy.Matmul.plan>` takes a member, its name
    (any case: ``"relu_bias"``) or its value. An epilog is applied to ``X = alpha * a @ b + beta * c`` before the
    result is stored: ``RELU`` / ``GELU`` (tanh approximation), with ``_BIAS`` adding ``epilog_inputs["bias"]``
    (one value per row of the result), with ``_AUX`` also returning what the backward pass needs (the RELU bitmask
    or GELU's input), ``DRELU`` / ``DGELU`` multiplying by the activation's derivative from that aux input, with
    ``_BGRAD`` also returning the bias gradient, and ``BGRADA`` / ``BGRADB`` returning the sums of A or B over K.

    Notes
    -----
    Epilogs take cuBLASLt's real floating-point dtypes (float16, bfloat16, float32, float64, float8 operands) on
    both execution spaces: fused into cuBLASLt's kernel on the GPU, and on the CPU implemented exactly as
    documented in ``mathpy.host.matmul._epilog``, bit formats included. With a per-row operand or output the result is
    column-major (cuBLASLt's convention, as nvmath-python's).

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> a, b = np.array([[1.0, -2.0], [3.0, 4.0]]), np.eye(2)
    >>> mathpy.matmul(a, b, epilog=mathpy.MatmulEpilog.RELU_BIAS, epilog_inputs={"bias": np.array([1.0, -10.0])})
    array([[2., 0.],
           [0., 0.]])
    """

    DEFAULT = 1
    RELU = 2
    BIAS = 4
    RELU_BIAS = 6
    GELU = 32
    GELU_BIAS = 36
    RELU_AUX = 130
    RELU_AUX_BIAS = 134
    DRELU = 136
    DRELU_BGRAD = 152
    GELU_AUX = 160
    GELU_AUX_BIAS = 164
    DGELU = 192
    DGELU_BGRAD = 208
    BGRADA = 256
    BGRADB = 512


class MatmulDesc(enum.IntEnum):
    """cublasLtMatmulDescAttributes_t (the C type of each value is in ``_ATTRIBUTE_TYPES``)."""

    COMPUTE_TYPE = 0
    SCALE_TYPE = 1
    POINTER_MODE = 2
    TRANSA = 3
    TRANSB = 4
    TRANSC = 5
    FILL_MODE = 6
    EPILOGUE = 7
    BIAS_POINTER = 8
    BIAS_BATCH_STRIDE = 10
    EPILOGUE_AUX_POINTER = 11
    EPILOGUE_AUX_LD = 12
    EPILOGUE_AUX_BATCH_STRIDE = 13
    ALPHA_VECTOR_BATCH_STRIDE = 14
    SM_COUNT_TARGET = 15
    A_SCALE_POINTER = 17
    B_SCALE_POINTER = 18
    C_SCALE_POINTER = 19
    D_SCALE_POINTER = 20
    AMAX_D_POINTER = 21
    EPILOGUE_AUX_DATA_TYPE = 22
    EPILOGUE_AUX_SCALE_POINTER = 23
    EPILOGUE_AUX_AMAX_POINTER = 24
    FAST_ACCUM = 25
    BIAS_DATA_TYPE = 26


class MatrixLayout(enum.IntEnum):
    """cublasLtMatrixLayoutAttribute_t."""

    TYPE = 0
    ORDER = 1
    ROWS = 2
    COLS = 3
    LD = 4
    BATCH_COUNT = 5
    STRIDED_BATCH_OFFSET = 6
    PLANE_OFFSET = 7


class Preference(enum.IntEnum):
    """cublasLtMatmulPreferenceAttributes_t."""

    SEARCH_MODE = 0
    MAX_WORKSPACE_BYTES = 1
    REDUCTION_SCHEME_MASK = 3
    MIN_ALIGNMENT_A_BYTES = 5
    MIN_ALIGNMENT_B_BYTES = 6
    MIN_ALIGNMENT_C_BYTES = 7
    MIN_ALIGNMENT_D_BYTES = 8
    MAX_WAVES_COUNT = 9
    IMPL_MASK = 12


class AlgoConfig(enum.IntEnum):
    """cublasLtMatmulAlgoConfigAttributes_t (read-only use: describing a candidate)."""

    ID = 0
    TILE_ID = 1
    SPLITK_NUM = 2
    REDUCTION_SCHEME = 3
    CTA_SWIZZLING = 4
    CUSTOM_OPTION = 5
    STAGES_ID = 6
    INNER_SHAPE_ID = 7
    CLUSTER_SHAPE_ID = 8


class AlgoCap(enum.IntEnum):
    """cublasLtMatmulAlgoCapAttributes_t (read-only: what an algorithm supports; TILE_IDS and STAGES_IDS are arrays)."""

    SPLITK_SUPPORT = 0
    REDUCTION_SCHEME_MASK = 1
    CTA_SWIZZLING_SUPPORT = 2
    STRIDED_BATCH_SUPPORT = 3
    OUT_OF_PLACE_RESULT_SUPPORT = 4
    UPLO_SUPPORT = 5
    TILE_IDS = 6
    CUSTOM_OPTION_MAX = 7
    CUSTOM_MEMORY_ORDER = 10
    POINTER_MODE_MASK = 11
    EPILOGUE_MASK = 12
    STAGES_IDS = 13
    LD_NEGATIVE = 14
    NUMERICAL_IMPL_FLAGS = 15
    MIN_ALIGNMENT_A_BYTES = 16
    MIN_ALIGNMENT_B_BYTES = 17
    MIN_ALIGNMENT_C_BYTES = 18
    MIN_ALIGNMENT_D_BYTES = 19
    POINTER_ARRAY_BATCH_SUPPORT = 21
    FLOATING_POINT_EMULATION_SUPPORT = 22
    POINTER_ARRAY_GROUPED_SUPPORT = 23


# The C type of every attribute value, as the header documents it. One table per enumeration: IntEnum members of
# different enumerations with equal values are equal dict keys.
_ATTRIBUTE_TYPES = {
    MatmulDesc: {
        "COMPUTE_TYPE": c_int32, "SCALE_TYPE": c_int32, "POINTER_MODE": c_int32, "TRANSA": c_int32,
        "TRANSB": c_int32, "TRANSC": c_int32, "FILL_MODE": c_int32, "EPILOGUE": c_uint32, "BIAS_POINTER": c_void_p,
        "BIAS_BATCH_STRIDE": c_int64, "EPILOGUE_AUX_POINTER": c_void_p, "EPILOGUE_AUX_LD": c_int64,
        "EPILOGUE_AUX_BATCH_STRIDE": c_int64, "ALPHA_VECTOR_BATCH_STRIDE": c_int64, "SM_COUNT_TARGET": c_int32,
        "A_SCALE_POINTER": c_void_p, "B_SCALE_POINTER": c_void_p, "C_SCALE_POINTER": c_void_p,
        "D_SCALE_POINTER": c_void_p, "AMAX_D_POINTER": c_void_p, "EPILOGUE_AUX_DATA_TYPE": c_int32,
        "EPILOGUE_AUX_SCALE_POINTER": c_void_p, "EPILOGUE_AUX_AMAX_POINTER": c_void_p, "FAST_ACCUM": c_int8,
        "BIAS_DATA_TYPE": c_int32,
    },
    MatrixLayout: {
        "TYPE": c_uint32, "ORDER": c_int32, "ROWS": c_uint64, "COLS": c_uint64, "LD": c_int64, "BATCH_COUNT": c_int32,
        "STRIDED_BATCH_OFFSET": c_int64, "PLANE_OFFSET": c_int64,
    },
    Preference: {
        "SEARCH_MODE": c_uint32, "MAX_WORKSPACE_BYTES": c_uint64, "REDUCTION_SCHEME_MASK": c_uint32,
        "MIN_ALIGNMENT_A_BYTES": c_uint32, "MIN_ALIGNMENT_B_BYTES": c_uint32, "MIN_ALIGNMENT_C_BYTES": c_uint32,
        "MIN_ALIGNMENT_D_BYTES": c_uint32, "MAX_WAVES_COUNT": c_float, "IMPL_MASK": c_uint64,
    },
    AlgoConfig: {
        "ID": c_int32, "TILE_ID": c_uint32, "SPLITK_NUM": c_int32, "REDUCTION_SCHEME": c_uint32,
        "CTA_SWIZZLING": c_uint32, "CUSTOM_OPTION": c_uint32, "STAGES_ID": c_uint32, "INNER_SHAPE_ID": c_uint16,
        "CLUSTER_SHAPE_ID": c_uint16,
    },
    AlgoCap: {  # TILE_IDS and STAGES_IDS: arrays of this type
        "SPLITK_SUPPORT": c_int32, "REDUCTION_SCHEME_MASK": c_uint32, "CTA_SWIZZLING_SUPPORT": c_uint32,
        "STRIDED_BATCH_SUPPORT": c_int32, "OUT_OF_PLACE_RESULT_SUPPORT": c_int32, "UPLO_SUPPORT": c_int32,
        "TILE_IDS": c_uint32, "CUSTOM_OPTION_MAX": c_int32, "CUSTOM_MEMORY_ORDER": c_int32,
        "POINTER_MODE_MASK": c_uint32, "EPILOGUE_MASK": c_uint32, "STAGES_IDS": c_uint32, "LD_NEGATIVE": c_int32,
        "NUMERICAL_IMPL_FLAGS": c_uint64, "MIN_ALIGNMENT_A_BYTES": c_uint32, "MIN_ALIGNMENT_B_BYTES": c_uint32,
        "MIN_ALIGNMENT_C_BYTES": c_uint32, "MIN_ALIGNMENT_D_BYTES": c_uint32, "POINTER_ARRAY_BATCH_SUPPORT": c_int32,
        "FLOATING_POINT_EMULATION_SUPPORT": c_int32, "POINTER_ARRAY_GROUPED_SUPPORT": c_int32,
    },
}
_ARRAY_CAPS = ("TILE_IDS", "STAGES_IDS")
assert all(set(table) == set(kind.__members__) for kind, table in _ATTRIBUTE_TYPES.items())


def attribute_type(attribute):
    """The ctypes type of an attribute's value (``attribute``: a member of MatmulDesc, MatrixLayout, Preference,
    AlgoConfig or AlgoCap)."""
    return _ATTRIBUTE_TYPES[type(attribute)][attribute.name]


class MatmulAlgo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 64 opaque bytes (a plain value: copy it to keep a choice)."""

    _fields_ = [("data", c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t (96 bytes in CUDA 12 and 13)."""

    _fields_ = [("algo", MatmulAlgo), ("workspaceSize", c_size_t), ("state", c_int), ("wavesCount", c_float),
                ("reserved", c_int * 4)]


assert ctypes.sizeof(MatmulAlgo) == 64 and ctypes.sizeof(HeuristicResult) == 96
assert HeuristicResult.workspaceSize.offset == 64 and HeuristicResult.state.offset == 72

_HANDLE = c_void_p  # cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t

library = Library("cublasLt", status_names=STATUS_NAMES, extra="cu13")
library.declare({
    "cublasLtCreate": (STATUS, [POINTER(_HANDLE)]),
    "cublasLtDestroy": (STATUS, [_HANDLE]),
    "cublasLtGetVersion": (c_size_t, []),
    "cublasLtGetCudartVersion": (c_size_t, []),
    # (desc*, cublasComputeType_t, cudaDataType_t scaleType)
    "cublasLtMatmulDescCreate": (STATUS, [POINTER(_HANDLE), c_int, c_int]),
    "cublasLtMatmulDescDestroy": (STATUS, [_HANDLE]),
    "cublasLtMatmulDescSetAttribute": (STATUS, [_HANDLE, c_int, c_void_p, c_size_t]),
    "cublasLtMatmulDescGetAttribute": (STATUS, [_HANDLE, c_int, c_void_p, c_size_t, POINTER(c_size_t)]),
    "cublasLtMatrixLayoutCreate": (STATUS, [POINTER(_HANDLE), c_int, c_uint64, c_uint64, c_int64]),
    "cublasLtMatrixLayoutDestroy": (STATUS, [_HANDLE]),
    "cublasLtMatrixLayoutSetAttribute": (STATUS, [_HANDLE, c_int, c_void_p, c_size_t]),
    "cublasLtMatrixLayoutGetAttribute": (STATUS, [_HANDLE, c_int, c_void_p, c_size_t, POINTER(c_size_t)]),
    "cublasLtMatmulPreferenceCreate": (STATUS, [POINTER(_HANDLE)]),
    "cublasLtMatmulPreferenceDestroy": (STATUS, [_HANDLE]),
    "cublasLtMatmulPreferenceSetAttribute": (STATUS, [_HANDLE, c_int, c_void_p, c_size_t]),
    "cublasLtMatmulPreferenceGetAttribute": (STATUS, [_HANDLE, c_int, c_void_p, c_size_t, POINTER(c_size_t)]),
    # (handle, desc, A, B, C, D layouts, preference, requestedAlgoCount, results[], returnAlgoCount*)
    "cublasLtMatmulAlgoGetHeuristic": (STATUS, [_HANDLE, _HANDLE, _HANDLE, _HANDLE, _HANDLE, _HANDLE, _HANDLE, c_int,
                                                POINTER(HeuristicResult), POINTER(c_int)]),
    "cublasLtMatmulAlgoConfigGetAttribute": (STATUS, [POINTER(MatmulAlgo), c_int, c_void_p, c_size_t,
                                                      POINTER(c_size_t)]),
    "cublasLtMatmulAlgoConfigSetAttribute": (STATUS, [POINTER(MatmulAlgo), c_int, c_void_p, c_size_t]),
    "cublasLtMatmulAlgoCapGetAttribute": (STATUS, [POINTER(MatmulAlgo), c_int, c_void_p, c_size_t, POINTER(c_size_t)]),
    # (handle, desc, A, B, C, D layouts, algo*, result*): is this (possibly reconfigured) algorithm usable, and with
    # how much workspace
    "cublasLtMatmulAlgoCheck": (STATUS, [_HANDLE, _HANDLE, _HANDLE, _HANDLE, _HANDLE, _HANDLE, POINTER(MatmulAlgo),
                                         POINTER(HeuristicResult)]),
    # (handle, desc, alpha*, A, Adesc, B, Bdesc, beta*, C, Cdesc, D, Ddesc, algo*, workspace, workspaceSize, stream).
    # Every argument is passed as a plain int (addresses included) so that the hot path converts nothing.
    "cublasLtMatmul": (STATUS, [_HANDLE, _HANDLE, c_void_p, c_void_p, _HANDLE, c_void_p, _HANDLE, c_void_p, c_void_p,
                                _HANDLE, c_void_p, _HANDLE, c_void_p, c_void_p, c_size_t, c_void_p]),
})

_SETTERS = {MatmulDesc: "cublasLtMatmulDescSetAttribute", MatrixLayout: "cublasLtMatrixLayoutSetAttribute",
            Preference: "cublasLtMatmulPreferenceSetAttribute"}
_GETTERS = {MatmulDesc: "cublasLtMatmulDescGetAttribute", MatrixLayout: "cublasLtMatrixLayoutGetAttribute",
            Preference: "cublasLtMatmulPreferenceGetAttribute"}

def version():
    """cuBLASLt's version number (e.g. 130102 for 13.1.2)."""
    return int(library.cublasLtGetVersion())


def create_handle():
    handle = _HANDLE()
    library.cublasLtCreate(ctypes.byref(handle))
    return handle.value


_handles = {}
_handles_lock = threading.Lock()


def device_handle(device_id):
    """The process's cuBLASLt handle for ``device_id``: created on first use with that device current, kept for the
    life of the process (creating one costs milliseconds and some device memory)."""
    handle = _handles.get(device_id)
    if handle is None:
        with _handles_lock:
            handle = _handles.get(device_id)
            if handle is None:
                from .. import _runtime
                with _runtime.device_scope(device_id):
                    handle = create_handle()
                _handles[device_id] = handle
    return handle


def destroy_handle(handle):
    library.cublasLtDestroy(handle)


def create_matmul_desc(compute_type, scale_type):
    desc = _HANDLE()
    library.cublasLtMatmulDescCreate(ctypes.byref(desc), int(compute_type), int(scale_type))
    return desc.value


def destroy_matmul_desc(desc):
    library.cublasLtMatmulDescDestroy(desc)


def create_matrix_layout(data_type, rows, cols, ld):
    layout = _HANDLE()
    library.cublasLtMatrixLayoutCreate(ctypes.byref(layout), int(data_type), rows, cols, ld)
    return layout.value


def destroy_matrix_layout(layout):
    library.cublasLtMatrixLayoutDestroy(layout)


def create_preference():
    preference = _HANDLE()
    library.cublasLtMatmulPreferenceCreate(ctypes.byref(preference))
    return preference.value


def destroy_preference(preference):
    library.cublasLtMatmulPreferenceDestroy(preference)


def set_attribute(descriptor, attribute, value):
    """Set a MatmulDesc / MatrixLayout / Preference ``attribute`` of ``descriptor`` to ``value`` (an int, float or
    address), converted to the attribute's C type."""
    ctype = attribute_type(attribute)
    buffer = ctype(int(value) if ctype not in (c_float, c_void_p) else value)
    getattr(library, _SETTERS[type(attribute)])(descriptor, int(attribute), ctypes.addressof(buffer),
                                                ctypes.sizeof(buffer))


def get_attribute(descriptor, attribute):
    """The value of a MatmulDesc / MatrixLayout / Preference ``attribute`` of ``descriptor``."""
    buffer = attribute_type(attribute)()
    written = c_size_t()
    getattr(library, _GETTERS[type(attribute)])(descriptor, int(attribute), ctypes.addressof(buffer),
                                                ctypes.sizeof(buffer), ctypes.byref(written))
    return buffer.value


def algo_config(algo):
    """``{"id": ..., "tile_id": ..., "splitk_num": ..., ...}`` (the :class:`AlgoConfig` names in lower case; those this
    cuBLASLt does not know are left out) of a :class:`MatmulAlgo`, for logs and reprs."""
    config = {}
    for attribute in AlgoConfig:
        buffer = attribute_type(attribute)()
        written = c_size_t()
        try:
            library.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), int(attribute), ctypes.addressof(buffer),
                                                         ctypes.sizeof(buffer), ctypes.byref(written))
        except Exception:  # an attribute this cuBLASLt does not know: describe the rest
            continue
        config[attribute.name.lower()] = buffer.value
    return config


def set_algo_config(algo, attribute, value):
    """Set one :class:`AlgoConfig` ``attribute`` of the :class:`MatmulAlgo` ``algo`` (in place; check the result with
    :func:`algo_check` before using it)."""
    buffer = attribute_type(attribute)(int(value))
    library.cublasLtMatmulAlgoConfigSetAttribute(ctypes.byref(algo), int(attribute), ctypes.addressof(buffer),
                                                 ctypes.sizeof(buffer))


def algo_capabilities(algo):
    """``{"splitk_support": ..., "tile_ids": (...), ...}``: what the :class:`MatmulAlgo` ``algo`` supports (the
    :class:`AlgoCap` names in lower case, arrays as tuples; those this cuBLASLt does not know are left out)."""
    capabilities = {}
    for attribute in AlgoCap:
        ctype = attribute_type(attribute)
        written = c_size_t()
        try:
            if attribute.name in _ARRAY_CAPS:  # ask for the size first
                library.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), int(attribute), None, 0,
                                                          ctypes.byref(written))
                buffer = (ctype * max(written.value // ctypes.sizeof(ctype), 1))()
            else:
                buffer = ctype()
            library.cublasLtMatmulAlgoCapGetAttribute(ctypes.byref(algo), int(attribute), ctypes.addressof(buffer),
                                                      ctypes.sizeof(buffer), ctypes.byref(written))
        except Exception:  # an attribute this cuBLASLt does not know
            continue
        if attribute.name in _ARRAY_CAPS:
            count = written.value // ctypes.sizeof(ctype)
            capabilities[attribute.name.lower()] = tuple(buffer[i] for i in range(count))
        else:
            capabilities[attribute.name.lower()] = buffer.value
    return capabilities


def algo_check(handle, desc, a_layout, b_layout, c_layout, d_layout, algo):
    """``cublasLtMatmulAlgoCheck``: the :class:`HeuristicResult` (workspace size, waves) of ``algo`` for the problem;
    CUDALibraryError (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED) when the algorithm cannot run it."""
    result = HeuristicResult()
    library.cublasLtMatmulAlgoCheck(handle, desc, a_layout, b_layout, c_layout, d_layout, ctypes.byref(algo),
                                    ctypes.byref(result))
    return result


def heuristics(handle, desc, a_layout, b_layout, c_layout, d_layout, preference, count):
    """Up to ``count`` :class:`HeuristicResult` of ``cublasLtMatmulAlgoGetHeuristic``, best first, those with a
    successful ``state`` only. An empty list means no algorithm supports the problem."""
    results = (HeuristicResult * count)()
    returned = c_int(0)
    try:
        library.cublasLtMatmulAlgoGetHeuristic(handle, desc, a_layout, b_layout, c_layout, d_layout, preference,
                                               count, results, ctypes.byref(returned))
    except CUDALibraryError as e:
        if e.status == 15:  # CUBLAS_STATUS_NOT_SUPPORTED: no algorithm for this problem
            return []
        raise
    return [HeuristicResult.from_buffer_copy(results[i]) for i in range(returned.value) if results[i].state == 0]
