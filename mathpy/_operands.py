"""Operands from any array package, seen through one interface.

An :class:`Operand` records what the host APIs need of an array (shape, strides in elements, dtype, device, data
pointer) and keeps the caller's own object, so that results can be made in the caller's package and on its device.

Supported: NumPy arrays (and array-likes), CuPy arrays, torch tensors on the CPU or a GPU, and any object with
``__dlpack__`` or ``__cuda_array_interface__`` (those come back as CuPy arrays, or torch tensors without CuPy).
Packages are imported only when an operand of theirs arrives, so ``import mathpy`` needs neither CuPy nor torch.

dtypes are NumPy dtypes throughout; bfloat16 and float8 are the ``ml_dtypes`` ones.

>>> import numpy as np
>>> op = wrap_operand(np.ones((4, 6), dtype=np.float32)[:, ::2])
>>> op.package, op.shape, op.strides, op.dtype, op.device_id
('numpy', (4, 3), (6, 2), dtype('float32'), None)
"""

import functools
import sys

import ml_dtypes
import numpy as np

from ._errors import LibraryNotFoundError

__all__ = ["Operand", "wrap_operand", "wrap_operands", "package_of", "to_device", "to_host", "empty", "as_package",
           "gpu_array_package"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
FLOAT8_E5M2 = np.dtype(ml_dtypes.float8_e5m2)


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
    def on_host(self):
        return self.device_id is None

    @property
    def is_c_contiguous(self):
        expected = 1
        for extent, stride in zip(reversed(self.shape), reversed(self.strides)):
            if extent != 1 and stride != expected:
                return False
            expected *= extent
        return True

    def numpy(self):
        """A NumPy view of a host operand (no copy)."""
        return _PACKAGES[self.package].as_numpy(self.tensor)

    def __repr__(self):
        where = "host" if self.on_host else f"cuda:{self.device_id}"
        return f"Operand({self.package}, {where}, shape={self.shape}, strides={self.strides}, dtype={self.dtype})"


class _NumPy:
    name = "numpy"

    @staticmethod
    def wrap(array):
        itemsize = array.dtype.itemsize
        strides = tuple(s // itemsize for s in array.strides)
        return Operand(array, "numpy", array.shape, strides, array.dtype, None, array.ctypes.data)

    @staticmethod
    def as_numpy(array):
        return array

    @staticmethod
    def from_numpy(array, like):
        return array

    @staticmethod
    def empty(shape, dtype, device_id, stream):
        return np.empty(shape, dtype)


class _CuPy:
    name = "cupy"

    @staticmethod
    def wrap(array):
        itemsize = array.dtype.itemsize
        strides = tuple(s // itemsize for s in array.strides)
        return Operand(array, "cupy", array.shape, strides, array.dtype, array.device.id, array.data.ptr)

    @staticmethod
    def as_numpy(array):
        raise TypeError("a CuPy array lives on the GPU; move it to the host first")

    @staticmethod
    def empty(shape, dtype, device_id, stream):
        import cupy
        if device_id == cupy.cuda.runtime.getDevice() and (not stream or stream == cupy.cuda.get_current_stream().ptr):
            return cupy.empty(shape, dtype)  # the hot path: no context switches
        with cupy.cuda.Device(device_id), _cupy_stream(stream):
            return cupy.empty(shape, dtype)

    @staticmethod
    def from_numpy(array, device_id, stream):
        import cupy
        with cupy.cuda.Device(device_id), _cupy_stream(stream):
            return cupy.asarray(array)

    @staticmethod
    def to_numpy(array, stream):
        return array.get(stream=_cupy_stream(stream) if stream else None, order="A")  # keep the layout


_external_streams = {}


def _cupy_stream(stream):
    """A context making raw handle ``stream`` CuPy's current stream (wrappers are reused: they own nothing)."""
    import contextlib

    import cupy
    if not stream:
        return contextlib.nullcontext()
    wrapper = _external_streams.get(stream)
    if wrapper is None:
        wrapper = _external_streams[stream] = cupy.cuda.ExternalStream(stream)
    return wrapper


@functools.cache
@functools.lru_cache(maxsize=None)
def _torch_dtypes():
    """(torch dtype -> NumPy dtype, NumPy dtype -> torch dtype); built once (hot paths call it)."""
    import torch
    pairs = {torch.bool: np.bool_, torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16,
             torch.int32: np.int32, torch.int64: np.int64, torch.float16: np.float16, torch.float32: np.float32,
             torch.float64: np.float64, torch.complex64: np.complex64, torch.complex128: np.complex128,
             torch.bfloat16: BFLOAT16, torch.float8_e4m3fn: FLOAT8_E4M3, torch.float8_e5m2: FLOAT8_E5M2}
    to_numpy = {t: np.dtype(n) for t, n in pairs.items()}
    return to_numpy, {n: t for t, n in to_numpy.items()}


# NumPy has no view for these; torch tensors of them cross to NumPy as same-sized integers reinterpreted.
_VIEW_AS = {BFLOAT16: np.int16, FLOAT8_E4M3: np.uint8, FLOAT8_E5M2: np.uint8}


class _Torch:
    name = "torch"

    @staticmethod
    def wrap(tensor):
        dtype = _torch_dtypes()[0].get(tensor.dtype)
        if dtype is None:
            raise TypeError(f"torch dtype {tensor.dtype} is not supported by mathpy")
        device_id = tensor.device.index if tensor.device.type == "cuda" else None
        if tensor.device.type not in ("cpu", "cuda"):
            raise ValueError(f"torch tensors on {tensor.device.type!r} are not supported; use 'cpu' or 'cuda'")
        if device_id is None and tensor.device.type == "cuda":
            device_id = 0
        return Operand(tensor, "torch", tensor.shape, tensor.stride(), dtype, device_id, tensor.data_ptr())

    @staticmethod
    def as_numpy(tensor):
        dtype = _torch_dtypes()[0][tensor.dtype]
        if dtype in _VIEW_AS:
            return tensor.detach().view(_torch_dtypes()[1][np.dtype(_VIEW_AS[dtype])]).numpy().view(dtype)
        return tensor.detach().numpy()

    @staticmethod
    def _from_numpy_host(array):
        import torch
        if array.dtype in _VIEW_AS:
            return torch.from_numpy(array.view(_VIEW_AS[array.dtype])).view(_torch_dtypes()[1][array.dtype])
        return torch.from_numpy(array)

    @staticmethod
    def empty(shape, dtype, device_id, stream):
        import torch
        torch_dtype = _torch_dtypes()[1][np.dtype(dtype)]
        if device_id is None:
            return torch.empty(shape, dtype=torch_dtype)
        device = _torch_device(device_id)
        if not stream or stream == torch.cuda.current_stream(device).cuda_stream:
            return torch.empty(shape, dtype=torch_dtype, device=device)  # the hot path: no stream switch
        with _torch_stream(stream, device_id):
            return torch.empty(shape, dtype=torch_dtype, device=device)

    @staticmethod
    def from_numpy(array, device_id, stream):
        tensor = _Torch._from_numpy_host(np.ascontiguousarray(array) if array.ndim else array)
        if device_id is None:
            return tensor
        with _torch_stream(stream, device_id):
            return tensor.to(f"cuda:{device_id}", non_blocking=False)

    @staticmethod
    def to_numpy(tensor, stream):
        with _torch_stream(stream, tensor.device.index):
            return _Torch.as_numpy(tensor.cpu())


@functools.cache
def _torch_device(device_id):
    import torch
    return torch.device("cuda", device_id)


def _torch_stream(stream, device_id):
    import contextlib

    import torch
    if not stream:
        return contextlib.nullcontext()
    wrapper = _external_streams.get(("torch", stream))
    if wrapper is None:
        wrapper = torch.cuda.ExternalStream(stream, device=_torch_device(device_id))
        _external_streams[("torch", stream)] = wrapper
    return torch.cuda.stream(wrapper)


_PACKAGES = {"numpy": _NumPy, "cupy": _CuPy, "torch": _Torch}


def package_of(obj):
    """"numpy", "cupy", "torch", or None when ``obj`` is of none of them (checked without importing the packages)."""
    if isinstance(obj, np.ndarray):
        return "numpy"
    module = type(obj).__module__.partition(".")[0]
    if module == "cupy" and "cupy" in sys.modules and isinstance(obj, sys.modules["cupy"].ndarray):
        return "cupy"
    if module == "torch" and "torch" in sys.modules and isinstance(obj, sys.modules["torch"].Tensor):
        return "torch"
    return None


def gpu_array_package():
    """The package that holds device arrays made for host operands or foreign device objects: CuPy, else torch."""
    import importlib.util
    for name in ("cupy", "torch"):
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            return name
    raise LibraryNotFoundError("GPU execution of NumPy or foreign device arrays needs CuPy or PyTorch to hold device "
                               "memory: pip install -e '.[cupy]' in mathpy's source tree (or install torch)")


def wrap_operand(obj, name="operand"):
    """Wrap any supported array (see the module docstring) as an :class:`Operand`."""
    package = package_of(obj)
    if package is not None:
        return _PACKAGES[package].wrap(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        package = gpu_array_package()
        if package == "cupy":
            import cupy
            return _CuPy.wrap(cupy.asarray(obj))
        import torch
        return _Torch.wrap(torch.as_tensor(obj, device="cuda"))
    if hasattr(obj, "__dlpack__"):
        device_type, _ = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
        if device_type == 1:  # kDLCPU
            return _NumPy.wrap(np.from_dlpack(obj))
        if device_type in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
            package = gpu_array_package()
            module = __import__(package)
            return _PACKAGES[package].wrap(module.from_dlpack(obj))
        raise ValueError(f"{name}: DLPack device type {device_type} is not supported (CPU and CUDA are)")
    try:
        array = np.asarray(obj)
    except Exception as e:
        raise TypeError(f"{name} of type {type(obj).__name__} is not an array mathpy understands (NumPy, CuPy, torch, "
                        f"__dlpack__, __cuda_array_interface__)") from e
    if array.dtype == object:
        raise TypeError(f"{name} of type {type(obj).__name__} is not a numeric array")
    return _NumPy.wrap(array)


def wrap_operands(named):
    """Wrap ``{name: array or None}``; all must share one package and one device, else a ValueError names them."""
    wrapped = {key: (None if value is None else wrap_operand(value, key)) for key, value in named.items()}
    present = [(key, op) for key, op in wrapped.items() if op is not None]
    first_key, first = present[0]
    for key, op in present[1:]:
        if op.package != first.package or op.device_id != first.device_id:
            raise ValueError(f"operands must share one package and device: {first_key} is {_where(first)} but {key} is "
                             f"{_where(op)}")
    return wrapped


def _where(op):
    return f"a {op.package} array on " + ("the host" if op.on_host else f"cuda:{op.device_id}")


def to_device(op, device_id, stream):
    """A copy of host operand ``op`` on ``device_id``, in the operand's package if it has device arrays."""
    package = op.package if op.package in ("cupy", "torch") else gpu_array_package()
    return _PACKAGES[package].wrap(_PACKAGES[package].from_numpy(op.numpy(), device_id, stream))


def to_host(op, stream):
    """A NumPy copy of device operand ``op``, ordered after the work on ``stream``."""
    return _NumPy.wrap(_PACKAGES[op.package].to_numpy(op.tensor, stream))


def empty(package, shape, dtype, device_id, stream=None):
    """A new uninitialised array of ``package`` (a NumPy array for "numpy" on the host), allocated in stream order."""
    if device_id is not None and package == "numpy":
        package = gpu_array_package()
    return _PACKAGES[package].empty(tuple(shape), np.dtype(dtype), device_id, stream)


def as_package(array, like, stream=None):
    """``array`` as an array of ``like``'s package on ``like``'s device; no copy when it already is one."""
    result = wrap_operand(array)
    if result.package == like.package and result.device_id == like.device_id:
        return array
    if result.device_id is not None and result.device_id == like.device_id:
        return __import__(like.package).from_dlpack(result.tensor)
    host = result.numpy() if result.on_host else to_host(result, stream).tensor
    if like.device_id is None:
        return _Torch._from_numpy_host(host) if like.package == "torch" else host
    return _PACKAGES[like.package].from_numpy(host, like.device_id, stream)
