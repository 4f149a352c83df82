"""check_bounds in the GPU engine of Python epilogs: where a checked kernel's record of the first out-of-bounds
operand index lives (a global of its module, :data:`mathpy.jit._epilog_data.RECORD_SYMBOL`, defined by the epilog
function that :mod:`mathpy.jit._epilog_wrapper` compiles and kept visible through the link), and reading it after a
launch. The device side is :mod:`mathpy.jit._epilog_data`; the record's layout :mod:`mathpy.jit._bounds` (its array
number is the operand's position among the epilog's operands).

The record belongs to the loaded kernel, which every plan of the same kernel shares: an execution reads it after
its launch and clears it, so with check_bounds two plans of one kernel that run at once on two streams may see each
other's error.
"""

import numpy as np

__all__ = ["runs_checked", "record_address", "raise_recorded", "refuse_checked_capture"]


def runs_checked(fused):
    """Whether a route that runs the user's function runs it checked (FusedEpilog ``fused``): check_bounds, and an
    operand to check."""
    return fused.check_bounds and any(layout is not None for _, layout in fused.operands)


def _driver():
    from cuda.bindings import driver

    return driver


def _check(result, what):
    from ..._errors import CUDALibraryError

    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise CUDALibraryError("cuda", what, int(status), getattr(status, "name", str(status)))
    return result


def record_address(module):
    """The device address of the record in a loaded kernel module (CUmodule), or None when the module has none (its
    epilog indexes no operand: nothing is checked)."""
    from ...jit._epilog_data import RECORD_SYMBOL

    driver = _driver()
    result = driver.cuModuleGetGlobal(module, RECORD_SYMBOL.encode())
    if result[0] == driver.CUresult.CUDA_ERROR_NOT_FOUND:
        return None
    _, address, _ = _check(result, "cuModuleGetGlobal")
    return int(address)


def refuse_checked_capture(package, device_id, stream):
    """StreamCaptureError when raw ``stream`` of ``package`` captures a CUDA graph: a checked execution waits on the
    host for its record, which no graph can record."""
    from ..._streams import refuse_in_capture

    refuse_in_capture(package, device_id, stream, "a matmul whose Python epilog checks bounds (check_bounds)",
                      "each execution waits on the host to read the kernel's error record",
                      "capture the product planned without check_bounds", anywhere=True)


def raise_recorded(address, fused, stream):
    """After a launch on raw ``stream``: the OutOfBoundsError the record at ``address`` holds (then cleared), raised;
    ``fused`` the problem's FusedEpilog (its function and operands)."""
    from ...jit._bounds import RECORD_WORDS, error_from_record

    if address is None:
        return
    driver = _driver()
    words = np.zeros(RECORD_WORDS, np.int64)
    _check(driver.cuMemcpyDtoHAsync(words.ctypes.data, address, words.nbytes, stream), "cuMemcpyDtoHAsync")
    _check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
    arrays = tuple((name, () if layout is None else tuple(layout.shape)) for name, layout in fused.operands)
    error = error_from_record(words, "matmul epilog", fused.name, arrays)
    if error is not None:
        _check(driver.cuMemsetD8Async(address, 0, words.nbytes, stream), "cuMemsetD8Async")
        _check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        raise error
