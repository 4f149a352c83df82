"""Local array work of the distributed algorithms, in the operand's own package: the slicing and index gathers that
pack and unpack exchanges, views of flat buffers, and (through the package's home in :mod:`mathpy._packages`)
allocation, copies, casts, scaling, stream scopes and synchronisation. NumPy on the host; CuPy or torch on the
operand's GPU, on that package's current stream.

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

from .. import _operands, _packages

__all__ = ["Arrays", "arrays_for", "region_offset"]


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
    """The operations of one package on one device (``device_id`` None: the host), on the current stream."""

    def __init__(self, package, device_id):
        self.package, self.device_id = package, device_id
        self.home = _packages.get(package)
        self.here = self.home.on(device_id)

    # --- through the package's home ------------------------------------------------------------------------------
    def empty(self, shape, dtype):
        return self.here.empty(tuple(shape), np.dtype(dtype))

    def zeros(self, shape, dtype):
        return self.here.empty(tuple(shape), np.dtype(dtype), zero=True)

    def empty_ordered(self, shape, dtype, order):
        """A new array of ``shape`` whose axes lie in memory in ``order`` (outermost first)."""
        return self.here.empty(tuple(shape), np.dtype(dtype), order=tuple(order))

    def copy(self, destination, source):
        """``destination[...] = source``, converting between floating dtypes."""
        self.here.copy_into(destination, source)

    cast_into = copy

    def cast(self, x, dtype):
        return x if self.dtype(x) == np.dtype(dtype) else self.home.astype(x, np.dtype(dtype))

    def scale(self, x, factor):
        self.here.scale(x, factor)

    def dtype(self, x):
        return self.home.numpy_dtype(x.dtype)

    def is_c_contiguous(self, x):
        return _operands.wrap_operand(x).is_c_contiguous

    def on_stream(self, stream):
        """A context making raw CUDA ``stream`` current (the package's own stream object for stream 0)."""
        if self.device_id is None or stream is None:
            return contextlib.nullcontext()
        return self.home.stream_scope(self.device_id, stream)

    def synchronize(self):
        """Wait for the work queued on the current stream (nothing on the host)."""
        if self.device_id is not None:
            self.here.synchronize()

    # --- flat buffers ----------------------------------------------------------------------------------------------
    def flat(self, x):
        """The 1-D view of a C-contiguous ``x``."""
        return x.reshape(-1)

    def view(self, flat, start, count, shape):
        """The part ``[start, start + count)`` of 1-D ``flat`` seen with ``shape`` (no copy)."""
        return flat[start:start + count].reshape(shape)

    def add_scaled(self, x, y, factor):
        """``x += factor * y`` (``y`` converted to x's dtype)."""
        x += self.cast(y, self.dtype(x)) * factor

    # --- selectors (package-specific below) ------------------------------------------------------------------------
    def selectors(self, selectors):
        """``selectors`` with the index arrays moved to where this package computes."""
        return selectors


class _NumPyLike(Arrays):
    """NumPy, and CuPy (which has NumPy's API)."""

    def __init__(self, package, device_id):
        super().__init__(package, device_id)
        if package == "cupy":
            import cupy
            self.xp = cupy
        else:
            self.xp = np

    def selectors(self, selectors):
        if self.package == "numpy":
            return selectors
        with self.here.scope():
            return tuple(s if isinstance(s, slice) else self.xp.asarray(s) for s in selectors)

    def take(self, x, selectors):
        view = x[tuple(s if isinstance(s, slice) else slice(None) for s in selectors)]
        for axis, s in enumerate(selectors):
            if not isinstance(s, slice):
                view = self.xp.take(view, s, axis=axis)
        return view

    def put(self, y, selectors, block):
        if all(isinstance(s, slice) for s in selectors):
            self.copy(y[tuple(selectors)], block)
            return
        with self.here.scope():
            index = [self.xp.arange(*s.indices(n)) if isinstance(s, slice) else s for s, n in zip(selectors, y.shape)]
            y[self.xp.ix_(*index)] = block


class _Torch(Arrays):
    def __init__(self, package, device_id):
        super().__init__(package, device_id)
        import torch
        self.torch = torch
        self.device = self.home.device(device_id)

    def selectors(self, selectors):
        return tuple(s if isinstance(s, slice) else self.torch.as_tensor(s, device=self.device) for s in selectors)

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

    def add_scaled(self, x, y, factor):
        x.add_(self.cast(y, self.dtype(x)), alpha=factor)


@functools.cache
def arrays_for(package, device_id):
    """The :class:`Arrays` of ``package`` ("numpy", "cupy", "torch") on ``device_id`` (None: the host)."""
    if package == "torch":
        return _Torch(package, device_id)
    if package in ("numpy", "cupy"):
        return _NumPyLike(package, device_id)
    raise TypeError(f"mathpy.distributed works on NumPy, CuPy and torch arrays, not {package!r} ones")
