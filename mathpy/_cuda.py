"""What CUDA hardware is present, asked of the driver through cuda-bindings. Nothing here needs a GPU to import.

The runtime calls (current device, streams, copies, events) are in :mod:`mathpy._runtime`."""

import functools
import os

from ._errors import NoDeviceError
from ._log import logger

__all__ = ["device_count", "is_available", "compute_capability", "device_name", "driver_version",
           "require_device", "multiprocessor_count"]


@functools.cache
def _driver():
    """The initialised driver module, or None with the reason logged (no libcuda, no device, or disabled)."""
    if os.environ.get("MATHPY_DISABLE_CUDA", "") not in ("", "0"):
        logger.debug("CUDA disabled by MATHPY_DISABLE_CUDA")
        return None
    try:
        from cuda.bindings import driver
        (status,) = driver.cuInit(0)
    except Exception as e:  # no libcuda.so: cuda-pathfinder raises its own DynamicLibNotFoundError
        logger.debug("no CUDA driver: %s", e)
        return None
    if status != driver.CUresult.CUDA_SUCCESS:
        logger.debug("cuInit failed: %s", status)
        return None
    return driver


def _call(fn, *args):
    status, *values = fn(*args)
    if int(status) != 0:
        raise NoDeviceError(f"CUDA driver call {fn.__name__} failed with {status}")
    return values[0] if len(values) == 1 else values


@functools.cache
def device_count():
    """Number of CUDA devices the driver reports; 0 without a driver."""
    driver = _driver()
    return 0 if driver is None else _call(driver.cuDeviceGetCount)


def is_available():
    """Return whether a CUDA GPU can be used (public as ``mathpy.cuda_is_available``).

    Returns
    -------
    bool
        True when the driver reports at least one device; False without a driver or GPU (never raises).

    Notes
    -----
    Without a GPU every host API runs on the CPU; ``execution="cuda"`` then raises
    :class:`~mathpy.NoDeviceError`.

    Examples
    --------
    >>> import mathpy
    >>> isinstance(mathpy.cuda_is_available(), bool)
    True
    """
    return device_count() > 0


def require_device(device_id=0):
    """Raise a NoDeviceError that says what to do when ``device_id`` cannot be used."""
    count = device_count()
    if count == 0:
        raise NoDeviceError(
            "CUDA execution needs an NVIDIA GPU and driver, and none was found. Run on the CPU instead "
            "(execution='cpu', the default for host operands) or install a driver on a machine with a GPU.")
    if not isinstance(device_id, int) or not 0 <= device_id < count:
        raise ValueError(f"device_id {device_id!r} is out of range: this machine has {count} CUDA device(s), "
                         f"ids 0..{count - 1}")


@functools.cache
def compute_capability(device_id=0):
    """(major, minor) of ``device_id``."""
    require_device(device_id)
    driver = _driver()
    attr = driver.CUdevice_attribute
    dev = _call(driver.cuDeviceGet, device_id)
    major = _call(driver.cuDeviceGetAttribute, attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    minor = _call(driver.cuDeviceGetAttribute, attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    return major, minor


@functools.cache
def multiprocessor_count(device_id=0):
    """Streaming multiprocessors of ``device_id`` (the grid of a persistent kernel)."""
    require_device(device_id)
    driver = _driver()
    dev = _call(driver.cuDeviceGet, device_id)
    return _call(driver.cuDeviceGetAttribute, driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)


@functools.cache
def device_name(device_id=0):
    require_device(device_id)
    driver = _driver()
    raw = _call(driver.cuDeviceGetName, 256, _call(driver.cuDeviceGet, device_id))
    return raw.split(b"\0", 1)[0].decode()


@functools.cache
def driver_version():
    """The driver's CUDA version as (major, minor), or None without a driver."""
    driver = _driver()
    if driver is None:
        return None
    version = _call(driver.cuDriverGetVersion)
    return version // 1000, (version % 1000) // 10
