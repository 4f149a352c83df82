"""check_bounds in the GPU engine of Python epilogs: where a checked kernel's record of the first out-of-bounds
``data`` index lives (a global of its module, :data:`mathpy.jit._epilog_data.RECORD_SYMBOL`), and reading it after
a launch. The device side is :mod:`mathpy.jit._epilog_data`; the record's layout :mod:`mathpy.jit._bounds`.

The record belongs to the loaded kernel, which every plan of the same kernel shares: an execution reads it after
its launch and clears it, so with check_bounds two plans of one kernel that run at once on two streams may see each
other's error.
"""

import numpy as np

__all__ = ["record_address", "raise_recorded", "refuse_checked_capture"]


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
    """The device address of the record in a loaded kernel module (CUmodule)."""
    from ...jit._epilog_data import RECORD_SYMBOL

    _, address, _ = _check(_driver().cuModuleGetGlobal(module, RECORD_SYMBOL.encode()), "cuModuleGetGlobal")
    return int(address)


def refuse_checked_capture(package, device_id, stream):
    """StreamCaptureError when raw ``stream`` of ``package`` captures a CUDA graph: a checked execution waits on the
    host for its record, which no graph can record."""
    from ..._streams import refuse_in_capture

    refuse_in_capture(package, device_id, stream, "a matmul whose Python epilog checks bounds (check_bounds)",
                      "each execution waits on the host to read the kernel's error record",
                      "capture the product planned without check_bounds", anywhere=True)


def raise_recorded(address, epilog, data, stream):
    """After a launch on raw ``stream``: the OutOfBoundsError the record at ``address`` holds (then cleared), raised;
    ``epilog`` the MatmulEpilogFunction, ``data`` the DataLayout it read."""
    from ...jit._bounds import RECORD_WORDS, error_from_record

    driver = _driver()
    words = np.zeros(RECORD_WORDS, np.int64)
    _check(driver.cuMemcpyDtoHAsync(words.ctypes.data, address, words.nbytes, stream), "cuMemcpyDtoHAsync")
    _check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
    error = error_from_record(words, "matmul epilog", epilog.where, (("data", tuple(data.shape)),))
    if error is not None:
        _check(driver.cuMemsetD8Async(address, 0, words.nbytes, stream), "cuMemsetD8Async")
        _check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        raise error
