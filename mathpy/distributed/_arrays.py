"""Local array work in the operand's own package: allocation, the slicing and index gathers that pack and unpack
exchanges, casts and scaling. NumPy on the host; CuPy or torch on the operand's GPU, in that package's current stream
(:meth:`Arrays.on_stream` makes a caller's stream current for a block of work).

Selectors are tuples with one entry per axis: a ``slice`` (a view, no copy) or an int64 NumPy array of positions
(a gather; moved to the device once by :meth:`Arrays.selectors`).

>>> import numpy as np
>>> xs = arrays_for("numpy", None)
>>> x = np.arange(12).reshape(3, 4)
>>> xs.take(x, (slice(1, 3), np.array([0, 2]))).tolist()
[[4, 6], [8, 10]]
>>> y = xs.zeros((3, 4), x.dtype)
>>> xs.put(y, (np.array([0, 2]), slice(0, 2)), np.ones((2, 2), x.dtype))
>>> y.tolist()
[[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]
"""

import contextlib
import functools

import numpy as np

from .. import _operands

__all__ = ["Arrays", "arrays_for", "region_offset", "torch_stream_scope"]


def region_offset(shape, selectors):
    """The flat offset of the region ``selectors`` picks from a C-contiguous array of ``shape`` when that region is
    one contiguous run of memory (all slices, only the outermost partial axis longer than one), else None.

    >>> region_offset((4, 6), (slice(1, 3), slice(0, 6))), region_offset((4, 6), (slice(1, 3), slice(0, 2)))
    (6, None)
    """
    lengths, starts = [], []
    for s, n in zip(selectors, shape):
        if not isinstance(s, slice):
            return None
        start, stop, _ = s.indices(n)
        lengths.append(max(stop - start, 0))
        starts.append(start)
    if 0 in lengths:
        return 0
    partial = [axis for axis, (length, n) in enumerate(zip(lengths, shape)) if length != n]
    if partial and any(lengths[axis] != 1 for axis in range(partial[-1])):
        return None
    offset, stride = 0, 1
    for start, n in zip(reversed(starts), reversed(shape)):
        offset += start * stride
        stride *= n
    return offset


class Arrays:
    """The operations of one package on one device (``device_id`` None: the host)."""

    def __init__(self, package, device_id):
        self.package, self.device_id = package, device_id

    def empty(self, shape, dtype):
        return _operands.empty(self.package, tuple(shape), np.dtype(dtype), self.device_id)

    def empty_ordered(self, shape, dtype, order):
        """A new array of ``shape`` whose axes lie in memory in ``order`` (outermost first)."""
        base = self.empty([shape[a] for a in order], dtype)
        inverse = tuple(int(i) for i in np.argsort(order))
        return base.permute(inverse) if self.package == "torch" else base.transpose(inverse)

    def view(self, flat, start, count, shape):
        """The part ``[start, start + count)`` of 1-D ``flat`` seen with ``shape`` (no copy)."""
        return flat[start:start + count].reshape(shape)

    def dtype(self, x):
        return _operands.wrap_operand(x).dtype

    def is_c_contiguous(self, x):
        return _operands.wrap_operand(x).is_c_contiguous

    def selectors(self, selectors):
        """``selectors`` with the index arrays moved to where this package computes."""
        return selectors

    def synchronize(self):
        """Wait for the work queued on the current stream (nothing on the host)."""


class _NumPyLike(Arrays):
    """NumPy, and CuPy (which has NumPy's API)."""

    def __init__(self, package, device_id):
        super().__init__(package, device_id)
        if package == "cupy":
            import cupy
            self.xp = cupy
        else:
            self.xp = np

    def _device(self):
        if self.package == "cupy":
            return self.xp.cuda.Device(self.device_id)
        return contextlib.nullcontext()

    def selectors(self, selectors):
        if self.package == "numpy":
            return selectors
        with self._device():
            return tuple(s if isinstance(s, slice) else self.xp.asarray(s) for s in selectors)

    def zeros(self, shape, dtype):
        with self._device():
            return self.xp.zeros(tuple(shape), np.dtype(dtype))

    def flat(self, x):
        return x.reshape(-1)

    def take(self, x, selectors):
        view = x[tuple(s if isinstance(s, slice) else slice(None) for s in selectors)]
        for axis, s in enumerate(selectors):
            if not isinstance(s, slice):
                view = self.xp.take(view, s, axis=axis)
        return view

    def put(self, y, selectors, block):
        if all(isinstance(s, slice) for s in selectors):
            target = y[tuple(selectors)]
            if self.package == "numpy":
                np.copyto(target, block, casting="no")
            else:
                target[...] = block
            return
        shape = y.shape
        with self._device():
            index = [self.xp.arange(*s.indices(n)) if isinstance(s, slice) else s for s, n in zip(selectors, shape)]
            y[self.xp.ix_(*index)] = block

    def copy(self, destination, source):
        if self.package == "numpy":
            np.copyto(destination, source, casting="no")
        else:
            destination[...] = source

    def cast(self, x, dtype):
        return x if x.dtype == np.dtype(dtype) else x.astype(np.dtype(dtype))

    def cast_into(self, destination, source):
        if self.package == "numpy":
            np.copyto(destination, source, casting="unsafe")
        else:
            destination[...] = source

    def scale(self, x, factor):
        x *= x.real.dtype.type(factor)

    def add_scaled(self, x, y, factor):
        """``x += factor * y`` (``y`` converted to x's dtype)."""
        x += self.cast(y, x.dtype) * x.dtype.type(factor)

    def on_stream(self, stream):
        if self.package != "cupy" or stream is None:
            return contextlib.nullcontext()
        cuda = self.xp.cuda
        with cuda.Device(self.device_id):
            if stream == cuda.get_current_stream().ptr:
                return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(cuda.Device(self.device_id))
        stack.enter_context(cuda.Stream.null if stream == 0 else cuda.ExternalStream(stream))
        return stack

    def synchronize(self):
        if self.package == "cupy":
            with self.xp.cuda.Device(self.device_id):
                self.xp.cuda.get_current_stream().synchronize()


class _Torch(Arrays):
    def __init__(self, package, device_id):
        super().__init__(package, device_id)
        import torch
        self.torch = torch
        self.device = torch.device("cpu") if device_id is None else torch.device("cuda", device_id)

    def _torch_dtype(self, dtype):
        return _torch_dtype(np.dtype(dtype))

    def selectors(self, selectors):
        return tuple(s if isinstance(s, slice) else self.torch.as_tensor(s, device=self.device) for s in selectors)

    def zeros(self, shape, dtype):
        return self.torch.zeros(tuple(shape), dtype=self._torch_dtype(dtype), device=self.device)

    def flat(self, x):
        return x.reshape(-1)

    def take(self, x, selectors):
        view = x[tuple(s if isinstance(s, slice) else slice(None) for s in selectors)]
        for axis, s in enumerate(selectors):
            if not isinstance(s, slice):
                view = view.index_select(axis, s)
        return view

    def put(self, y, selectors, block):
        if all(isinstance(s, slice) for s in selectors):
            y[tuple(selectors)].copy_(block)
            return
        ndim = y.ndim
        index = []
        for axis, (s, n) in enumerate(zip(selectors, y.shape)):
            if isinstance(s, slice):
                s = self.torch.arange(*s.indices(n), device=self.device)
            index.append(s.reshape([-1 if a == axis else 1 for a in range(ndim)]))
        y[tuple(index)] = block

    def copy(self, destination, source):
        destination.copy_(source)

    def cast(self, x, dtype):
        target = self._torch_dtype(dtype)
        return x if x.dtype == target else x.to(target)

    def cast_into(self, destination, source):
        destination.copy_(source)

    def scale(self, x, factor):
        x.mul_(float(factor))

    def add_scaled(self, x, y, factor):
        """``x += factor * y`` (``y`` converted to x's dtype)."""
        x.add_(y.to(x.dtype), alpha=factor)

    def on_stream(self, stream):
        return torch_stream_scope(stream, self.device)

    def synchronize(self):
        if self.device_id is not None:
            self.torch.cuda.current_stream(self.device).synchronize()


def torch_stream_scope(stream, device):
    """A context making raw CUDA stream ``stream`` torch's current stream on ``device`` (a torch.device); nothing
    when it already is. Stream 0 is torch's own default stream object: an ExternalStream(0) is another stream to
    torch's allocator and event bookkeeping although CUDA runs both as the legacy stream, and work ordered through
    the two was seen to race (wrong results on two H200s)."""
    import torch
    if stream is None or device.type != "cuda" or stream == torch.cuda.current_stream(device).cuda_stream:
        return contextlib.nullcontext()
    if stream == 0:
        return torch.cuda.stream(torch.cuda.default_stream(device))
    return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device))


@functools.cache
def _torch_dtype(dtype):
    return _operands.empty("torch", (0,), dtype, None).dtype


@functools.cache
def arrays_for(package, device_id):
    """The :class:`Arrays` of ``package`` ("numpy", "cupy", "torch") on ``device_id`` (None: the host)."""
    if package == "torch":
        return _Torch(package, device_id)
    if package in ("numpy", "cupy"):
        return _NumPyLike(package, device_id)
    raise TypeError(f"mathpy.distributed works on NumPy, CuPy and torch arrays, not {package!r} ones")
