"""Launching numba-cuda kernels that need more than 48 KiB of dynamic shared memory.

A CUDA kernel gets at most 48 KiB of dynamic shared memory unless its limit is raised first (up to 227 KiB on sm_90,
163 KiB on sm_80); numba-cuda's launcher does not do it. :func:`allow_shared_memory` compiles the kernel for the
launch's argument types and sets the attribute on the compiled function (the ``CUkernel`` numba-cuda loads,
``cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`` for the current device), as numba-cuda itself
sets a kernel's shared-memory carveout.
"""

from .._compat import patch_numpy_for_numba_cuda

__all__ = ["allow_shared_memory"]


def allow_shared_memory(kernel, nbytes, *args):
    """Let ``kernel`` (a ``numba.cuda.jit`` kernel) be launched with ``nbytes`` of dynamic shared memory with
    arguments like ``args`` on the current device; returns ``kernel``. Call it once before the first such launch::

        mathpy.device.allow_shared_memory(kernel, 4 * GEMM.shared_memory_size_ab, a, b, c, 1.0, 0.0)
        kernel[grid, GEMM.block_dim, 0, 4 * GEMM.shared_memory_size_ab](a, b, c, 1.0, 0.0)

    Under numba's CUDA simulator there is no limit to raise. A request above what the device allows raises the
    driver's error (CUDA_ERROR_INVALID_VALUE)."""
    patch_numpy_for_numba_cuda()
    import numba

    if numba.config.ENABLE_CUDASIM:
        return kernel
    if not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes={nbytes!r} must be a non-negative number of bytes")
    from numba.cuda.cudadrv.driver import binding, driver

    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    function = compiled._codelibrary.get_cufunc()  # numba-cuda exposes the loaded function only here
    attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attribute, nbytes, function.handle, function.device.id)
    return kernel
