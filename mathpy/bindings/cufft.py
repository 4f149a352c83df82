"""ctypes declarations of the cuFFT functions mathpy calls (cufft.h, cufftXt.h), one table row per function.

cuFFT is found by cuda-pathfinder on first use; nvJitLink is loaded first because cuFFT dlopens it by name when it
plans LTO callbacks and the wheel carries no RUNPATH to find it. Every call that returns a ``cufftResult`` raises
:class:`mathpy.CUDALibraryError` naming the status (``CUFFT_INVALID_SIZE (8): cufft cufftXtMakePlanMany failed``).

Signatures (checked against cufft.h / cufftXt.h of CUDA 12.9 and 13.0)::

    cufftResult cufftCreate(cufftHandle *handle);                       // cufftHandle is int
    cufftResult cufftDestroy(cufftHandle plan);
    cufftResult cufftSetAutoAllocation(cufftHandle plan, int autoAllocate);
    cufftResult cufftSetWorkArea(cufftHandle plan, void *workArea);
    cufftResult cufftSetStream(cufftHandle plan, cudaStream_t stream);
    cufftResult cufftGetSize(cufftHandle handle, size_t *workSize);
    cufftResult cufftGetVersion(int *version);
    cufftResult cufftGetProperty(libraryPropertyType type, int *value);
    cufftResult cufftXtMakePlanMany(cufftHandle plan, int rank, long long *n, long long *inembed, long long istride,
        long long idist, cudaDataType inputtype, long long *onembed, long long ostride, long long odist,
        cudaDataType outputtype, long long batch, size_t *workSize, cudaDataType executiontype);
    cufftResult cufftXtExec(cufftHandle plan, void *input, void *output, int direction);
    // CUDA 13 (cuFFT 12.x); CUDA 12 (cuFFT 11.3-11.4) exports the same as __cufftXtSetJITCallback_12_7:
    cufftResult cufftXtSetJITCallback(cufftHandle plan, const char *symbolName, const void *ltoir, size_t size,
        cufftXtCallbackType type, void **caller_info);
"""

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_longlong, c_size_t, c_void_p

from ._loader import STATUS, Library

__all__ = ["lib", "STATUS_NAMES", "FORWARD", "INVERSE", "version", "set_jit_callback", "unchecked", "check"]

STATUS_NAMES = {
    0: "CUFFT_SUCCESS",
    1: "CUFFT_INVALID_PLAN",
    2: "CUFFT_ALLOC_FAILED",
    3: "CUFFT_INVALID_TYPE",
    4: "CUFFT_INVALID_VALUE",
    5: "CUFFT_INTERNAL_ERROR",
    6: "CUFFT_EXEC_FAILED",
    7: "CUFFT_SETUP_FAILED",
    8: "CUFFT_INVALID_SIZE",
    9: "CUFFT_UNALIGNED_DATA",
    10: "CUFFT_INCOMPLETE_PARAMETER_LIST",  # removed in CUDA 13
    11: "CUFFT_INVALID_DEVICE",
    12: "CUFFT_PARSE_ERROR",                # removed in CUDA 13
    13: "CUFFT_NO_WORKSPACE",
    14: "CUFFT_NOT_IMPLEMENTED",
    15: "CUFFT_LICENSE_ERROR",              # removed in CUDA 13
    16: "CUFFT_NOT_SUPPORTED",
    17: "CUFFT_MISSING_DEPENDENCY",         # CUDA 13
    18: "CUFFT_NVRTC_FAILURE",              # CUDA 13
    19: "CUFFT_NVJITLINK_FAILURE",          # CUDA 13
    20: "CUFFT_NVSHMEM_FAILURE",            # CUDA 13
}

# cudaDataType arguments: mathpy.bindings._types.cuda_data_type

FORWARD, INVERSE = -1, 1            # CUFFT_FORWARD, CUFFT_INVERSE
MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL = 0, 1, 2  # libraryPropertyType

cufftHandle = c_int
_JIT_CALLBACK_ARGS = [cufftHandle, c_char_p, c_void_p, c_size_t, c_int, POINTER(c_void_p)]

_TABLE = {
    "cufftCreate": (STATUS, [POINTER(cufftHandle)]),
    "cufftDestroy": (STATUS, [cufftHandle]),
    "cufftSetAutoAllocation": (STATUS, [cufftHandle, c_int]),
    "cufftSetWorkArea": (STATUS, [cufftHandle, c_void_p]),
    "cufftSetStream": (STATUS, [cufftHandle, c_void_p]),
    "cufftGetSize": (STATUS, [cufftHandle, POINTER(c_size_t)]),
    "cufftGetVersion": (STATUS, [POINTER(c_int)]),
    "cufftGetProperty": (STATUS, [c_int, POINTER(c_int)]),
    "cufftXtMakePlanMany": (STATUS, [cufftHandle, c_int, POINTER(c_longlong), POINTER(c_longlong), c_longlong,
                                     c_longlong, c_int, POINTER(c_longlong), c_longlong, c_longlong, c_int,
                                     c_longlong, POINTER(c_size_t), c_int]),
    "cufftXtExec": (STATUS, [cufftHandle, c_void_p, c_void_p, c_int]),
    "cufftXtSetJITCallback": (STATUS, _JIT_CALLBACK_ARGS),
    # CUDA 12.x headers map cufftXtSetJITCallback to this symbol; the unversioned one there has an older signature.
    "cufftXtSetJITCallback_12_7": (STATUS, _JIT_CALLBACK_ARGS, "__cufftXtSetJITCallback_12_7"),
}
lib = Library("cufft", status_names=STATUS_NAMES, extra="cu13", prerequisites=("nvJitLink",))
lib.declare(_TABLE)

_version = None


def version():
    """cufftGetVersion(): e.g. 12000 for cuFFT 12.0 (CUDA 13), 11400 for cuFFT 11.4 (CUDA 12.9)."""
    global _version
    if _version is None:
        value = c_int()
        lib.cufftGetVersion(ctypes.byref(value))
        _version = value.value
    return _version


def set_jit_callback(handle, symbol, ltoir_buffer, size, callback_type, caller_info):
    """cufftXtSetJITCallback under the symbol this cuFFT exports for the 6-argument form.

    ``ltoir_buffer`` and ``caller_info`` (a ``(c_void_p * 1)`` host array of one device pointer) must stay referenced
    until cufftXtMakePlanMany returns: cuFFT reads them when it plans, not here."""
    function = lib.cufftXtSetJITCallback if version() >= 12000 else lib.cufftXtSetJITCallback_12_7
    function(handle, symbol, ltoir_buffer, size, callback_type, caller_info)


def unchecked(function):
    """A separate ctypes function object for ``function`` returning the raw int status (no errcheck): for hot paths
    that check the status inline with :func:`check`."""
    return lib.unchecked(function)


def check(function, status):
    """Raise the CUDALibraryError of ``status`` (for the hot path, which calls an unchecked function)."""
    lib.check(function, status)
