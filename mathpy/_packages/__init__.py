"""One home per array package: NumPy, CuPy, torch, and foreign ``__dlpack__`` / ``__cuda_array_interface__`` arrays.

Each package is an :class:`~._base.ArrayPackage` (``_numpy.py``, ``_cupy.py``, ``_torch.py``) and is the only place
that knows its package's API: how to recognise and describe an array (shape, strides in elements, NumPy dtype,
device, pointer), its dtype table, its current stream, stream scopes, views, and - through
:class:`~._base.PackageStream`, obtained with ``package.on(device_id, stream)`` - allocation, copies, scaling and
synchronisation in the order of one stream. The FFT and matmul APIs, callbacks and the engines' workspaces use only
this interface (through :mod:`mathpy._operands`); CUDA runtime calls that no package owns (raw copies, events) are in
:mod:`mathpy._runtime`.

Foreign device arrays (an object with ``__cuda_array_interface__`` or a CUDA ``__dlpack__``) are adopted by the
*device package*: CuPy when it is installed, else torch (:func:`device_package`). Packages are imported only when one
of their arrays arrives (or one is needed to hold device memory), so ``import mathpy`` needs neither CuPy nor torch.

:func:`use` replaces a package for a block (a fake device package on a CPU-only machine, or a plug-in).

>>> import numpy as np
>>> get("numpy").describe(np.zeros((2, 3), np.float32)[:, ::2])[:3]
((2, 2), (3, 2), dtype('float32'))
>>> package_of(np.zeros(3)), package_of([1, 2])
('numpy', None)
"""

import contextlib
import importlib
import importlib.util
import sys

from .._errors import LibraryNotFoundError
from ._base import ArrayPackage, PackageStream

__all__ = ["ArrayPackage", "PackageStream", "get", "package_of", "interface_of", "device_package", "capturing", "use"]

_MODULES = {"numpy": ("._numpy", "NumPyPackage"), "cupy": ("._cupy", "CuPyPackage"),
            "torch": ("._torch", "TorchPackage")}
_loaded = {}  # name -> ArrayPackage (made on first use)
_device_package = []  # the chosen device package's name, once known


def get(name):
    """The :class:`ArrayPackage` called ``name`` ("numpy", "cupy", "torch"), importing it on first use."""
    found = _loaded.get(name)
    if found is None:
        if name not in _MODULES:
            raise ValueError(f"array package {name!r} is not supported; allowed are {sorted(_MODULES)}")
        module, cls = _MODULES[name]
        found = _loaded[name] = getattr(importlib.import_module(module, __name__), cls)()
    return found


def package_of(obj):
    """The name of ``obj``'s package, or None when it is an array of none of them (decided without importing any)."""
    name = type(obj).__module__.partition(".")[0]
    package = _loaded.get(name)
    if package is None and name in _MODULES and name in sys.modules:
        package = get(name)
    return name if package is not None and package.owns(obj) else None


_by_type = {}  # type -> ArrayPackage or None, for the stateless calls' per-call lookups


def interface_of(obj):
    """The :class:`ArrayPackage` of ``obj``, or None (as :func:`package_of`, remembered per type)."""
    kind = type(obj)
    found = _by_type.get(kind, False)
    if found is False:
        name = package_of(obj)
        found = None if name is None else get(name)
        if len(_by_type) > 64:
            _by_type.clear()
        _by_type[kind] = found
    return found


def device_package():
    """The package that holds device memory for host operands and foreign device arrays: CuPy when installed, else
    torch; LibraryNotFoundError without either."""
    if not _device_package:
        for name in ("cupy", "torch"):
            if name in _loaded or sys.modules.get(name) is not None or importlib.util.find_spec(name) is not None:
                _device_package.append(name)
                break
        else:
            raise LibraryNotFoundError("GPU execution of NumPy or foreign device arrays needs CuPy or PyTorch to hold "
                                       "device memory: pip install -e '.[cupy]' in mathpy's source tree (or install "
                                       "torch)")
    return _device_package[0]


def capturing(device_id):
    """Whether the current stream of any device package in use is capturing a CUDA graph on ``device_id``: work that
    waits on the host or copies host memory would break such a capture even when queued on another stream."""
    return any(p.device_arrays and p.is_capturing(device_id, None) for p in list(_loaded.values()))


@contextlib.contextmanager
def use(package, device_package_name=None):
    """Use ``package`` (an :class:`ArrayPackage`) for arrays of its ``module`` within the block; with
    ``device_package_name`` also make that the device package. Restored on exit."""
    name = package.name
    saved, saved_device = _loaded.get(name), list(_device_package)
    _loaded[name] = package
    _by_type.clear()
    if device_package_name is not None:
        _device_package[:] = [device_package_name]
    try:
        yield package
    finally:
        if saved is None:
            _loaded.pop(name, None)
        else:
            _loaded[name] = saved
        _device_package[:] = saved_device
        _by_type.clear()
