"""Operands from any array package, seen through one interface.

An :class:`Operand` records what the host APIs need of an array (shape, strides in elements, dtype, device, data
pointer) and keeps the caller's own object, so that results can be made in the caller's package and on its device.
Everything package-specific is behind :mod:`mathpy._packages` (``op.interface``).

Supported: NumPy arrays (and array-likes), CuPy arrays, torch tensors on the CPU or a GPU, and any object with
``__dlpack__`` or ``__cuda_array_interface__`` (those are adopted by the device package: CuPy, or torch without CuPy).
Packages are imported only when an operand of theirs arrives, so ``import mathpy`` needs neither CuPy nor torch.

dtypes are NumPy dtypes throughout; bfloat16 and float8 are the ``ml_dtypes`` ones, torch's complex32 is
:data:`mathpy._dtypes.COMPLEX32` (:mod:`mathpy._dtypes`).

A torch tensor with a lazy conjugate or negative bit (``x.conj()`` of a complex tensor, ``x.conj().imag``) keeps the
values before that bit in its memory, which is what mathpy's engines read. :func:`wrap_operand` therefore reads it as
a resolved copy made when it is wrapped (a stateful FFT or Matmul holds that copy: later writes through the lazy view
do not reach it), and refuses one that mathpy would write into (``out=``, an in-place operand), as the writes would go
to the copy. The stateless calls' prepared calls, which run on a tensor's address, never run on such a tensor.

>>> import numpy as np
>>> op = wrap_operand(np.ones((4, 6), dtype=np.float32)[:, ::2])
>>> op.package, op.shape, op.strides, op.dtype, op.device_id
('numpy', (4, 3), (6, 2), dtype('float32'), None)
"""

import numpy as np

from . import _packages
from ._packages import device_package, package_of
from ._strides import is_c_contiguous

__all__ = ["Operand", "wrap_operand", "wrap_operands", "package_of", "device_package", "to_device", "to_host",
           "empty", "as_package", "asarray", "PLANNED_FACTS", "check_like_planned"]


class Operand:
    """One array: the caller's object plus the facts a library call needs. ``device_id`` is None for host memory."""

    __slots__ = ("tensor", "package", "shape", "strides", "dtype", "device_id", "data_ptr")

    def __init__(self, tensor, package, shape, strides, dtype, device_id, data_ptr):
        self.tensor, self.package, self.shape, self.strides = tensor, package, tuple(shape), tuple(strides)
        self.dtype, self.device_id, self.data_ptr = dtype, device_id, data_ptr

    ndim = property(lambda self: len(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    @property
    def interface(self):
        """The operand's :class:`~mathpy._packages.ArrayPackage`."""
        return _packages.get(self.package)

    @property
    def on_host(self):
        return self.device_id is None

    @property
    def is_c_contiguous(self):
        return is_c_contiguous(self.shape, self.strides)

    def numpy(self):
        """A NumPy view of a host operand (no copy)."""
        if self.device_id is not None:
            raise TypeError(f"a {self.package} array on cuda:{self.device_id} has no NumPy view; copy it to the host")
        return self.interface.as_numpy(self.tensor)

    def __repr__(self):
        where = "host" if self.on_host else f"cuda:{self.device_id}"
        return f"Operand({self.package}, {where}, shape={self.shape}, strides={self.strides}, dtype={self.dtype})"


def _wrap(package, array):
    return Operand(array, package.name, *package.describe(array))


def wrap_operand(obj, name="operand", written=False):
    """Wrap any supported array (see the module docstring) as an :class:`Operand`; ``written``: mathpy writes into it
    (a lazy torch view is then refused, naming ``name``, instead of read as a resolved copy)."""
    package = package_of(obj)
    if package is not None:
        interface = _packages.get(package)
        return _wrap(interface, interface.resolved(obj, name if written else None))
    if hasattr(obj, "__cuda_array_interface__"):
        holder = _packages.get(device_package())
        return _wrap(holder, holder.adopt(obj))
    if hasattr(obj, "__dlpack__"):
        device_type, _ = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
        if device_type == 1:  # kDLCPU
            return _wrap(_packages.get("numpy"), np.from_dlpack(obj))
        if device_type in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
            holder = _packages.get(device_package())
            return _wrap(holder, holder.from_dlpack(obj))
        raise ValueError(f"{name}: DLPack device type {device_type} is not supported (CPU and CUDA are)")
    try:
        array = np.asarray(obj)
    except ValueError as e:  # a ragged sequence: NumPy's kind of error and words, naming the operand
        raise ValueError(f"{name}: {e}") from None
    except Exception as e:
        raise TypeError(_not_an_array(name, obj)) from e
    if array.dtype.kind in _NOT_NUMERIC:  # None, strings, dicts...: NumPy makes a 0-d object or string array of them
        raise TypeError(_not_an_array(name, obj))
    return _wrap(_packages.get("numpy"), array)


_NOT_NUMERIC = "OSUVMm"  # object, bytes, str, void, datetime, timedelta


def _not_an_array(name, obj):
    return (f"{name}: expected an array, got {type(obj).__name__} (mathpy takes NumPy, CuPy and torch arrays, "
            f"sequences of numbers, and objects with __dlpack__ or __cuda_array_interface__)")


def wrap_operands(named, written=()):
    """Wrap ``{name: array or None}`` (those named in ``written`` as written into); all must share one package and one
    device, else a ValueError names them."""
    wrapped = {key: (None if value is None else wrap_operand(value, key, key in written))
               for key, value in named.items()}
    present = [(key, op) for key, op in wrapped.items() if op is not None]
    first_key, first = present[0]
    for key, op in present[1:]:
        if op.package != first.package or op.device_id != first.device_id:
            raise ValueError(f"operands must share one package and device: {first_key} is {_where(first)} but {key} is "
                             f"{_where(op)}")
    return wrapped


#: What a plan is built for, of an operand: another operand can take its place when these are all the same.
PLANNED_FACTS = ("package", "device_id", "shape", "strides", "dtype")


def check_like_planned(new, planned, what, hint=""):
    """ValueError ``"{what} {fact} {new's value!r} differs from the planned {planned's value!r}{hint}"`` for the first
    of :data:`PLANNED_FACTS` in which Operand ``new`` differs from Operand ``planned``."""
    for fact in PLANNED_FACTS:
        value, planned_value = getattr(new, fact), getattr(planned, fact)
        if value != planned_value:
            raise ValueError(f"{what} {fact} {value!r} differs from the planned {planned_value!r}{hint}")


def _where(op):
    return f"a {op.package} array on " + ("the host" if op.on_host else f"cuda:{op.device_id}")


def holder_of(package_name):
    """The package that holds device arrays for operands of ``package_name`` (itself, or the device package)."""
    package = _packages.get(package_name)
    return package if package.device_arrays else _packages.get(device_package())


def to_device(op, device_id, stream):
    """A copy of host operand ``op`` on ``device_id``, in the operand's package if it has device arrays."""
    holder = holder_of(op.package)
    return _wrap(holder, holder.on(device_id, stream).from_numpy(op.numpy()))


def to_host(op, stream):
    """A NumPy copy of device operand ``op`` (same layout), ordered after the work on ``stream``."""
    return _wrap(_packages.get("numpy"), op.interface.on(op.device_id, stream).to_numpy(op.tensor))


def empty(package, shape, dtype, device_id, stream=None):
    """A new uninitialised C-order array of ``package`` (a NumPy array for "numpy" on the host; the device package's
    for "numpy" on a device), allocated in the order of ``stream``."""
    return holder_of(package).on(device_id, stream).empty(shape, dtype) if device_id is not None else \
        _packages.get(package).on(None).empty(shape, dtype)


def asarray(array, package, device_id=None, stream=None):
    """A copy of NumPy ``array`` as an array of ``package`` on ``device_id`` (None: the host)."""
    array = np.asarray(array)
    if device_id is None:
        interface = _packages.get(package)
        return array if package == "numpy" else interface.from_host(np.ascontiguousarray(array) if array.ndim
                                                                   else array)
    return holder_of(package).on(device_id, stream).from_numpy(array)


def as_package(array, like, stream=None):
    """``array`` as an array of ``like``'s package on ``like``'s device; no copy when it already is one."""
    result = wrap_operand(array)
    if result.package == like.package and result.device_id == like.device_id:
        return array
    if result.device_id is not None and result.device_id == like.device_id:
        return _packages.get(like.package).from_dlpack(result.tensor)
    host = result.numpy() if result.on_host else to_host(result, stream).tensor
    return asarray(host, like.package, like.device_id, stream)
