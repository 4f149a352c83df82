"""Launching numba-cuda kernels that need more than 48 KiB of dynamic shared memory.

A CUDA kernel gets at most 48 KiB of dynamic shared memory unless its limit is raised first (up to 227 KiB on sm_90,
163 KiB on sm_80); numba-cuda's launcher does not do it. :func:`allow_shared_memory` compiles the kernel for the
launch's argument types and sets the attribute on the compiled function (the ``CUkernel`` numba-cuda loads,
``cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`` for the current device), as numba-cuda itself
sets a kernel's shared-memory carveout.
"""

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

__all__ = ["allow_shared_memory"]


def allow_shared_memory(kernel, nbytes, *args):
    """Let a kernel be launched with more than 48 KiB of dynamic shared memory.

    Compiles ``kernel`` for the types of ``args`` (numba-cuda compiles a kernel per argument types at its first
    launch) and raises that compiled kernel's limit of dynamic shared memory to ``nbytes`` on the current device.
    Call it once before the first launch that needs the memory.

    Parameters
    ----------
    kernel : numba.cuda dispatcher
        A ``@numba.cuda.jit`` kernel.
    nbytes : int
        Bytes of dynamic shared memory the launches will ask for (at most 227 KiB on sm_90, 163 KiB on sm_80).
    args
        Arguments like those of the launches (device arrays, scalars): they select the compiled version.

    Returns
    -------
    kernel
        The same kernel, ready for ``kernel[grid, block, stream, nbytes](*args)``.

    Raises
    ------
    ValueError
        ``nbytes`` is not a non-negative integer.
    numba.cuda.cudadrv.driver.CudaAPIError
        The device does not allow ``nbytes`` (CUDA_ERROR_INVALID_VALUE).

    Notes
    -----
    Under numba's CUDA simulator there is no limit to raise: the kernel is returned as it is.

    Examples
    --------
    Four 128 x 128 x 32 fp16 k-slice buffers need more than the default 48 KiB:

    >>> import numpy as np, mathpy.device
    >>> GEMM = mathpy.device.matmul(128, 128, 32, np.float16)
    >>> 4 * GEMM.shared_memory_size_ab
    75776

    On a GPU, with ``kernel = matmul_multistage_kernel(GEMM, 128, 4)`` (``tests/_device_checks.py``) and device arrays
    ``a``, ``b``, ``c``::

        mathpy.device.allow_shared_memory(kernel, 4 * GEMM.shared_memory_size_ab, a, b, c, 1.0, 0.0)
        kernel[batch, GEMM.block_dim, 0, 4 * GEMM.shared_memory_size_ab](a, b, c, 1.0, 0.0)
    """
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
