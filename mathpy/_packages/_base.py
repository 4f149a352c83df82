"""The interface every array package implements (see :mod:`mathpy._packages` for what uses it)."""

import contextlib

import numpy as np

from .._strides import dense_permutation

__all__ = ["ArrayPackage", "PackageStream"]


class ArrayPackage:
    """What mathpy needs of one array package. Subclasses set ``name`` (``Operand.package``), ``module`` (the
    top-level module whose arrays they own) and ``device_arrays``, and implement the methods below. Streams are raw
    ``cudaStream_t`` ints (0 is the legacy default stream); ``stream=None`` means "the package's current stream".
    dtypes are NumPy dtypes (:mod:`mathpy._dtypes`)."""

    name = None
    module = None
    device_arrays = False
    #: Whether device memory this package allocates while a stream captures a CUDA graph belongs to that graph (torch
    #: gives each graph a private pool), so that nothing else is handed it while the graph may replay. Where it does
    #: not (CuPy's memory pool), scratch that a captured call frees after its launch would be reused under the graph:
    #: mathpy keeps such scratch with the plan instead (:func:`mathpy._streams.keep_for_graph`).
    graph_pool = False

    def __init__(self):
        self._streams = {}

    # --- recognising and describing arrays ---------------------------------------------------------------------
    def owns(self, obj):
        """Whether ``obj`` is an array of this package."""
        raise NotImplementedError

    def describe(self, array):
        """``(shape, strides in elements, dtype, device_id or None, data pointer)`` of an array of this package."""
        raise NotImplementedError

    def facts(self, array):
        """``(key, address)``: cheap hashable facts that fix the array's layout and place (shape, strides, dtype,
        device, in the package's own terms) and its address: what the stateless calls key their prepared calls on.
        ``(None, 0)`` when the address does not hold the array's values (see :meth:`resolved`): no prepared call may
        run on it."""
        shape, strides, dtype, device_id, pointer = self.describe(array)
        return (tuple(shape), tuple(strides), dtype, device_id), pointer

    def pointer(self, array):
        """The address of the array's first element."""
        raise NotImplementedError

    def resolved(self, array, written=None):
        """``array`` with the values it stands for in its own memory: itself, except that a lazy view (a torch tensor
        with a conjugate or negative bit, whose memory holds the values before conjugation or negation) becomes a
        resolved copy. ``written``: the argument's name when mathpy writes into the array; a lazy view is then
        refused with a ValueError naming it, as writes into the copy would never reach the caller's tensor."""
        return array

    def numpy_dtype(self, native):
        """The NumPy dtype of the package's dtype ``native`` (TypeError when mathpy has none for it)."""
        return np.dtype(native)

    def native_dtype(self, dtype):
        """The package's spelling of NumPy dtype ``dtype``."""
        return np.dtype(dtype)

    # --- streams and ordering -----------------------------------------------------------------------------------
    def current_stream(self, device_id):
        """The raw handle of the package's current stream on ``device_id``."""
        raise ValueError(f"{self.name} arrays have no CUDA streams")

    def is_capturing(self, device_id, stream):
        """Whether raw ``stream`` (None: the package's current one) on ``device_id`` is capturing a CUDA graph."""
        if device_id is None:
            return False
        from .. import _runtime
        return _runtime.is_capturing(self.current_stream(device_id) if stream is None else stream)

    def stream_scope(self, device_id, stream):
        """A context making ``device_id`` and raw ``stream`` (None: the current one) current for the package; a null
        context when they already are, so that hot paths pay one comparison."""
        return contextlib.nullcontext()

    def on(self, device_id, stream=None):
        """The :class:`PackageStream` that allocates and copies on ``device_id`` in the order of ``stream`` (None: the
        current stream at each call). Made once per (device, stream) and reused."""
        key = (device_id, stream)
        found = self._streams.get(key)
        if found is None:
            if len(self._streams) > 256:  # streams come and go in long programs
                self._streams.clear()
            found = self._streams[key] = self._make_stream(device_id, stream)
        return found

    def _make_stream(self, device_id, stream):
        return PackageStream(self, device_id, stream)

    # --- views (no copies, no stream) ---------------------------------------------------------------------------
    def transpose(self, array, axes):
        return array.transpose(axes)

    def swap_last(self, array):
        """The view with the last two axes swapped."""
        return array.swapaxes(-1, -2)

    def broadcast_to(self, array, shape):
        raise NotImplementedError

    # --- element-wise work on the current stream ----------------------------------------------------------------
    def contiguous(self, array):
        """``array`` as a C-contiguous array (itself when it already is one)."""
        raise NotImplementedError

    def astype(self, array, dtype):
        return array.astype(dtype)

    def conj(self, array):
        return array.conj()

    def from_dlpack(self, obj):
        raise NotImplementedError

    def adopt(self, obj):
        """A view of a foreign object with ``__cuda_array_interface__`` (device packages only)."""
        raise TypeError(f"{self.name} cannot hold device arrays")

    def as_numpy(self, array):
        """A NumPy view of a host array of this package."""
        raise TypeError(f"{self.name} arrays live on a device; copy them to the host first")

    def from_host(self, array):
        """An array of this package on the host sharing NumPy ``array``'s memory."""
        raise TypeError(f"{self.name} has no host arrays")

    # --- what PackageStream calls, with the right device and stream current -------------------------------------
    def _empty(self, shape, dtype, device_id, zero):
        raise NotImplementedError

    def _maker(self, device_id, stream, shape, dtype, order, zero):
        """A function ``() -> new array`` (see :meth:`PackageStream.maker`); packages with a cheaper way override."""
        scope, empty, ordered = self.stream_scope, self._empty, self._empty_ordered

        def make():
            if device_id is None:
                return empty(shape, dtype, None, zero) if order is None else \
                    ordered(shape, dtype, None, order, zero)
            with scope(device_id, stream):
                if order is None:
                    return empty(shape, dtype, device_id, zero)
                return ordered(shape, dtype, device_id, order, zero)
        return make

    def _empty_ordered(self, shape, dtype, device_id, order, zero):
        base = self._empty(tuple(shape[a] for a in order), dtype, device_id, zero)
        return self.transpose(base, tuple(int(i) for i in np.argsort(order)))

    def _copy_into(self, destination, source):
        raise NotImplementedError

    def _scale(self, array, factor):
        array *= factor

    def _copy_scaled(self, destination, source, factor):
        self._copy_into(destination, source)
        self._scale(destination, factor)

    def _to_numpy(self, array, stream):
        raise NotImplementedError

    def _from_numpy(self, host, device_id):
        raise NotImplementedError

    def _upload(self, destination, host):
        self._copy_into(destination, self._from_numpy(host, None))

    def _synchronize(self, stream):
        from .. import _runtime
        _runtime.synchronize(stream)

    def __repr__(self):
        return f"<array package {self.name}>"


class PackageStream:
    """One package's work on one device in the order of one stream: allocation (from the package's stream-ordered
    pool, so memory stays valid until the GPU work queued before its release has run), copies, scaling,
    synchronisation. ``stream`` None follows the package's current stream.

    Every device array mathpy makes (results, staging copies, workspaces) comes from :meth:`empty`: this is where a
    per-call allocator plugs in."""

    def __init__(self, package, device_id, stream):
        self.package, self.device_id, self.stream = package, device_id, stream

    def scope(self):
        """A context making this device and stream current for the package (nothing to do when they already are)."""
        if self.device_id is None:
            return contextlib.nullcontext()
        return self.package.stream_scope(self.device_id, self.stream)

    def empty(self, shape, dtype, order=None, zero=False):
        """A new array of ``shape`` and NumPy ``dtype``, dense with its axes in storage ``order`` (outermost first;
        None: C order), zero-filled when ``zero``."""
        shape = tuple(shape)
        with self.scope():
            if order is None or order == tuple(range(len(shape))):
                return self.package._empty(shape, np.dtype(dtype), self.device_id, zero)
            return self.package._empty_ordered(shape, np.dtype(dtype), self.device_id, tuple(order), zero)

    def maker(self, shape, dtype, order=None, zero=False):
        """A function ``() -> new array`` doing :meth:`empty` (same arguments) with everything but the allocation
        resolved once: what the prepared calls use for their results, call after call."""
        shape = tuple(shape)
        order = None if order is None or tuple(order) == tuple(range(len(shape))) else tuple(order)
        return self.package._maker(self.device_id, self.stream, shape, np.dtype(dtype), order, zero)

    def empty_like_layout(self, shape, strides, dtype):
        """A new array of ``shape`` whose dense storage has the axis order of ``strides``."""
        return self.empty(shape, dtype, dense_permutation(strides))

    def copy_into(self, destination, source):
        """``destination[...] = source`` (both of this package, on this device)."""
        with self.scope():
            self.package._copy_into(destination, source)

    def copy_scaled(self, destination, source, factor):
        """``destination[...] = source * factor`` (a real ``factor``) in one pass where the package can."""
        with self.scope():
            self.package._copy_scaled(destination, source, factor)

    def scale(self, array, factor):
        """``array *= factor`` in place."""
        with self.scope():
            self.package._scale(array, factor)

    def to_numpy(self, array):
        """A NumPy copy (same layout) of a device array, made after the work queued so far on the stream."""
        return self.package._to_numpy(array, self.stream)

    def from_numpy(self, host):
        """A copy of NumPy array ``host`` as an array of this package on this device (C order)."""
        with self.scope():
            return self.package._from_numpy(host, self.device_id)

    def upload_into(self, destination, host):
        """Copy NumPy ``host`` into the C-contiguous device array ``destination`` of the same shape."""
        with self.scope():
            self.package._upload(destination, np.ascontiguousarray(host))

    def capturing(self):
        """Whether this stream (the current one when ``stream`` is None) is capturing a CUDA graph."""
        return self.package.is_capturing(self.device_id, self.stream)

    def synchronize(self):
        """Wait on the host for the work queued on this stream (the current one when ``stream`` is None)."""
        stream = self.stream if self.stream is not None else self.package.current_stream(self.device_id)
        self.package._synchronize(stream)

    def __repr__(self):
        return f"<{self.package.name} on device {self.device_id}, stream {self.stream}>"

