"""torch: tensors on the CPU or a CUDA device; device memory from torch's stream-ordered caching allocator. The
torch <-> NumPy dtype table lives here. Imported only when torch tensors arrive or torch holds device memory."""

import contextlib
import functools

import numpy as np
try:
    import torch
except ImportError:  # only mathpy._packages.get imports this module, and only with torch present; the guard
    torch = None  # lets pytest's doctest collection import it on a machine without it

from .._dtypes import BFLOAT16, COMPLEX32, FLOAT8_E4M3, FLOAT8_E5M2, VIEW_AS
from .._strides import dense_strides
from ._base import ArrayPackage

__all__ = ["TorchPackage", "TO_NUMPY", "TO_TORCH"]


def _tables():
    """(torch dtype -> NumPy dtype, NumPy dtype -> torch dtype)."""
    to_numpy = {t: np.dtype(n) for t, n in {
        torch.bool: np.bool_, torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16,
        torch.int32: np.int32, torch.int64: np.int64, torch.float16: np.float16, torch.float32: np.float32,
        torch.float64: np.float64, torch.complex64: np.complex64, torch.complex128: np.complex128,
        torch.bfloat16: BFLOAT16, torch.float8_e4m3fn: FLOAT8_E4M3, torch.float8_e5m2: FLOAT8_E5M2,
        torch.complex32: COMPLEX32}.items()}
    return to_numpy, {n: t for t, n in to_numpy.items()}


#: torch dtype -> NumPy dtype, and back.
TO_NUMPY, TO_TORCH = _tables() if torch is not None else ({}, {})

# torch's C accessor of the current stream's raw handle (no Stream object per call), when this torch has it.
_raw_current_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None) or \
    (lambda device_id: torch.cuda.current_stream(device_id).cuda_stream)


class TorchPackage(ArrayPackage):
    name = module = "torch"
    device_arrays = True
    graph_pool = True  # torch.cuda.graph allocates from the graph's private pool during the capture

    def __init__(self):
        super().__init__()
        self._wrappers = {}  # (device, raw stream) -> torch stream object
        self._devices = {}
        self.raw_current_stream = _raw_current_stream
        if type(self).current_stream is TorchPackage.current_stream:  # hot paths call torch's C accessors directly
            self.current_stream = _raw_current_stream
        if type(self).pointer is TorchPackage.pointer:
            self.pointer = torch.Tensor.data_ptr

    def owns(self, obj):
        return isinstance(obj, torch.Tensor)

    def describe(self, tensor):
        dtype = self.numpy_dtype(tensor.dtype)
        device = tensor.device
        if device.type == "cuda":
            device_id = 0 if device.index is None else device.index
        elif device.type == "cpu":
            device_id = None
        else:
            raise ValueError(f"torch tensors on {device.type!r} are not supported; use 'cpu' or 'cuda'")
        return tensor.shape, tensor.stride(), dtype, device_id, tensor.data_ptr()

    def facts(self, tensor):
        if tensor.is_conj() or tensor.is_neg():  # data_ptr() holds the values before the lazy bit applies
            return None, 0
        return (tensor.shape, tensor.stride(), tensor.dtype, tensor.device), tensor.data_ptr()

    def resolved(self, tensor, written=None):
        # torch applies a conjugate / negative bit only inside its own kernels; mathpy's engines read the raw memory
        if not (tensor.is_conj() or tensor.is_neg()):
            return tensor
        if written is not None:
            bit, view, fix = ("conjugate", "a lazy .conj() view", ".resolve_conj()") if tensor.is_conj() else \
                ("negative", "a lazy view such as x.conj().imag", ".resolve_neg()")
            raise ValueError(f"{written}: a torch tensor with its {bit} bit set ({view}) cannot be written through; "
                             f"pass a resolved tensor ({fix})")
        return tensor.resolve_conj().resolve_neg()

    def pointer(self, tensor):
        return tensor.data_ptr()

    def numpy_dtype(self, native):
        dtype = TO_NUMPY.get(native)
        if dtype is None:
            raise TypeError(f"torch dtype {native} is not supported by mathpy")
        return dtype

    def native_dtype(self, dtype):
        return TO_TORCH[np.dtype(dtype)]

    def device(self, device_id):
        """The torch.device of ``device_id`` (None: the CPU), made once."""
        found = self._devices.get(device_id)
        if found is None:
            found = self._devices[device_id] = torch.device("cpu") if device_id is None else \
                torch.device("cuda", device_id)
        return found

    def current_stream(self, device_id):
        return self.raw_current_stream(device_id)

    def is_capturing(self, device_id, stream):
        if device_id is None or not torch.cuda.is_initialized():  # (no CUDA work yet: nothing can be capturing)
            return False
        if stream is None or stream == self.raw_current_stream(device_id):
            return torch.cuda.is_current_stream_capturing()
        return super().is_capturing(device_id, stream)

    def stream_scope(self, device_id, stream):
        # torch allocates on the device it is told; only the stream needs to be current
        if stream is None or self.raw_current_stream(device_id) == stream:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._stream(device_id, stream))

    def _stream(self, device_id, stream):
        key = (device_id, stream)
        wrapper = self._wrappers.get(key)
        if wrapper is None:
            if len(self._wrappers) > 256:
                self._wrappers.clear()
            device = self.device(device_id)
            wrapper = torch.cuda.default_stream(device) if stream == 0 else \
                torch.cuda.ExternalStream(stream, device=device)
            self._wrappers[key] = wrapper
        return wrapper

    def transpose(self, tensor, axes):
        return tensor.permute(axes)

    def swap_last(self, tensor):
        return tensor.transpose(-1, -2)

    def broadcast_to(self, tensor, shape):
        return tensor.expand(*shape)

    def contiguous(self, tensor):
        return tensor.contiguous()

    def astype(self, tensor, dtype):
        return tensor.to(TO_TORCH[np.dtype(dtype)])

    def conj(self, tensor):
        return torch.conj_physical(tensor)

    def from_dlpack(self, obj):
        return torch.from_dlpack(obj)

    def adopt(self, obj):
        """A torch view of a foreign object with ``__cuda_array_interface__``."""
        return torch.as_tensor(obj, device="cuda")

    def as_numpy(self, tensor):
        """A NumPy view of a CPU tensor (bfloat16, float8 and complex32 through same-sized integers)."""
        dtype = TO_NUMPY[tensor.dtype]
        view = VIEW_AS.get(dtype)
        if view is not None:
            return tensor.detach().view(TO_TORCH[view]).numpy().view(dtype)
        return tensor.detach().numpy()

    def from_host(self, array):
        """A CPU tensor sharing NumPy ``array``'s memory."""
        view = VIEW_AS.get(array.dtype)
        if view is not None:
            return torch.from_numpy(array.view(view)).view(TO_TORCH[array.dtype])
        return torch.from_numpy(array)

    def _empty(self, shape, dtype, device_id, zero):
        create = torch.zeros if zero else torch.empty
        return create(shape, dtype=TO_TORCH[dtype], device=self.device(device_id))

    def _empty_ordered(self, shape, dtype, device_id, order, zero):
        # one call for a permuted dense layout (the hot paths' column-major results)
        tensor = torch.empty_strided(shape, dense_strides(shape, order), dtype=TO_TORCH[dtype],
                                     device=self.device(device_id))
        return tensor.zero_() if zero else tensor

    def _maker(self, device_id, stream, shape, dtype, order, zero):
        strides = dense_strides(shape, order if order is not None else range(len(shape)))
        create = functools.partial(torch.empty_strided, shape, strides, dtype=TO_TORCH[dtype],
                                   device=self.device(device_id))
        if zero:
            empty = create

            def create():
                return empty().zero_()
        if device_id is None or stream is None:
            return create
        current, scope = self.current_stream, self.stream_scope

        def make():
            if current(device_id) == stream:  # the hot path: the stream is the current one
                return create()
            with scope(device_id, stream):
                return create()
        return make

    def _copy_into(self, destination, source):
        if not isinstance(source, torch.Tensor):
            source = torch.from_dlpack(source)
        destination.copy_(source)

    def _copy_scaled(self, destination, source, factor):
        if not isinstance(source, torch.Tensor):
            source = torch.from_dlpack(source)
        torch.mul(source, float(factor), out=destination)

    def _scale(self, tensor, factor):
        tensor.mul_(float(factor) if not np.iscomplexobj(factor) else complex(factor))

    def _to_numpy(self, tensor, stream):
        if tensor.device.type == "cpu":
            return self.as_numpy(tensor)
        with self.stream_scope(tensor.device.index, stream):
            return self.as_numpy(tensor.cpu())

    def _from_numpy(self, host, device_id):
        tensor = self.from_host(np.ascontiguousarray(host) if host.ndim else host)
        if device_id is None:
            return tensor
        return tensor.to(self.device(device_id), non_blocking=False)

    def _upload(self, destination, host):
        destination.copy_(self.from_host(host))
