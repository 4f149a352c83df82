"""prolog= / epilog= as users give them, resolved for one transform (a :class:`BoundCallback` an engine consumes).

Accepted forms of ``prolog=`` / ``epilog=``:

- a Python function with nvmath-python's signature (``prolog(data_in, offset, user_info, unused) -> value``,
  ``epilog(data_out, offset, value, user_info, unused)``): compiled by :mod:`mathpy.jit` to LTO-IR for the GPU, or
  run as a numba-compiled loop on the CPU, with no user data;
- ``Callback(fn, data=...)``: the same with user data (``user_info`` in the callback), one of
    * a scalar (a Python number, a 0-d or one-element array): ``user_info[0]``;
    * a filter with the shape of the layout the callback sees (:attr:`FFT.input_layout` for a prolog,
      :attr:`FFT.output_layout` for an epilog): ``user_info[offset]`` is the filter's value for the element at
      ``offset``, whatever the layout's strides (mathpy lays the filter out in the callback's layout);
    * a window whose shape is a suffix of that layout's shape, broadcast over the leading (batch) axes: the callback
      reads ``user_info[offset % window.size]`` (the layout must be C-contiguous over those trailing axes);
  user data on the host is copied to the execution device; user data on the GPU is used in place (no copy), so the
  plan reads it when the FFT runs;
- LTO-IR (GPU only): ``bytes``, or nvmath-python's ``{"ltoir": bytes, "data": device pointer or array}``, or
  ``Callback(ltoir_bytes, data=...)``; the LTO-IR must export cuFFT's default callback name for the element type.

Normalization: callbacks see the unnormalised transform (a prolog the input, an epilog the raw FFT result); the
``norm=`` scale of the stateless functions is applied to the stored output after the epilog ran.

Bounds (:mod:`mathpy.jit._bounds`): binding a Python function refuses, with a ValueError, an index it runs on every
call that its source shows to reach outside ``data_in`` / ``data_out`` (the span of the layout) or its user data;
with ``FFTOptions(check_bounds=True)`` every access is also checked when it runs (:class:`~mathpy.OutOfBoundsError`).
On the GPU a checked callback's ``caller_info`` is a small header in device memory (the user data's address and
size, the layout's span, the record of the first bad access) instead of the user data's address.
"""

import dataclasses
import hashlib
import math

import numpy as np

from ... import _cuda, _operands
from ..._execution import ExecutionCPU
from ..._strides import c_strides

__all__ = ["Callback", "BoundCallback", "as_callback", "bind_callback", "element_dtype_for", "callback_identity",
           "dry_run", "element_offsets", "raise_recorded", "span"]


class Callback:
    """A prolog or epilog with its user data, for ``prolog=`` / ``epilog=`` of the FFT functions and
    :meth:`FFT.plan <mathpy.fft.FFT.plan>`.

    Parameters
    ----------
    function : callable or bytes
        A Python function with nvmath-python's signature (``prolog(data_in, offset, user_info, unused) -> value``
        or ``epilog(data_out, offset, value, user_info, unused)``), or LTO-IR bytes exporting cuFFT's default
        callback name (GPU only).
    data : scalar or array, optional
        What the callback reads as ``user_info``: a scalar (``user_info[0]``), an array of the shape of the layout
        the callback sees (``user_info[offset]``), or a window of a suffix of that shape broadcast over the leading
        axes (``user_info[offset % window.size]``). Any numeric dtype: bool, int8 to uint64, float16 to float64,
        complex64, complex128. User data on the GPU is read in place when the plan runs; host data is copied to the
        execution device.

    Raises
    ------
    TypeError
        ``function`` is neither callable nor bytes. The data's dtype, shape and device, and the indices the
        function's source shows, are checked when the FFT is planned (TypeError / ValueError naming what is
        allowed, or the size an index needs).

    Notes
    -----
    The same function runs on the CPU (as a numba-compiled loop) and on a GPU (compiled to LTO-IR and fused into
    cuFFT's kernel), with the same offsets. Write constants as NumPy scalars of the element's precision
    (``np.float32(2)``): a Python float promotes complex64 arithmetic to complex128. The callback guide has more.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> def scale(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value * user_info[0]
    >>> half = mathpy.fft.Callback(scale, data=np.float32(0.5))
    >>> half
    Callback(scale, data=float32[()])
    >>> mathpy.fft.fft(np.ones(4, np.complex64), epilog=half)
    array([2.+0.j, 0.+0.j, 0.+0.j, 0.+0.j], dtype=complex64)
    """

    __slots__ = ("function", "data")

    def __init__(self, function, data=None):
        if not (callable(function) or isinstance(function, (bytes, bytearray, memoryview))):
            raise TypeError(f"Callback needs a Python function or LTO-IR bytes, not {type(function).__name__}")
        self.function, self.data = function, data

    def __repr__(self):
        name = getattr(self.function, "__name__", None) or f"<{len(self.function)} bytes of LTO-IR>"
        data = None
        if self.data is not None:
            shape = _shape_of(self.data)
            data = f"{_dtype_of(self.data)}{list(shape) if shape else '[()]'}"
        return f"Callback({name}, data={data})"


def _dtype_of(data):
    from ...jit._user_data import dtype_name
    return dtype_name(getattr(data, "dtype", np.asarray(data).dtype))


def _shape_of(data):
    return tuple(getattr(data, "shape", np.shape(data)))


@dataclasses.dataclass(eq=False)
class BoundCallback:
    """A user's callback resolved for one transform and execution space (see the engine contract).

    function     the Python function, or None when only LTO-IR was given
    ltoir        LTO-IR bytes (GPU), else None
    symbol       symbol name to pass to cuFFT (None: the default name)
    cufft_type   cuFFT's cufftXtCallbackType code
    data         the user-data Operand on the execution device (C-contiguous), or None
    data_ptr     what cuFFT gets as caller_info: the user data's pointer (0 without), or a checked callback's header
    key          hashable; equal keys give identical plans
    snapshot     for a Python function, the jit Snapshot that keeps its compiled code valid (None otherwise)
    check_bounds whether the function was compiled with bounds checks
    header       on the GPU with check_bounds: the header Operand (int64 words, see mathpy.jit._bounds)
    arrays       with check_bounds: (name, shape) of the callback's arrays by record id (data, then user_info)
    """

    kind: str
    function: object
    ltoir: bytes | None
    symbol: str | None
    cufft_type: int
    data: object
    data_ptr: int
    key: tuple
    element_dtype: str
    user_info_dtype: str | None
    snapshot: object = None
    check_bounds: bool = False
    header: object = None
    arrays: tuple = ()

    @property
    def reusable(self):
        """Whether the same bound callback is right for a later call with equal facts: no user data, user data read
        in place, or a scalar (whose value the key holds); copied arrays must be copied again at every call."""
        return self.data is None or self.key[-1] is None or self.key[-1][0] in ("ptr", "value")

    @property
    def user_info(self):
        """The user data as a 1-D NumPy array (CPU), or None."""
        if self.data is None:
            return None
        return self.data.numpy().reshape(-1)


def as_callback(value, kind):
    """Normalise what the user passed as ``prolog=`` / ``epilog=`` into a :class:`Callback` (or None)."""
    if value is None or isinstance(value, Callback):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"ltoir", "data", "function"})
        if unknown or ("ltoir" in value) == ("function" in value):
            raise ValueError(f"{kind} given as a dict must have exactly one of 'ltoir' or 'function', and optionally "
                             f"'data'; got keys {sorted(value)}")
        return Callback(value.get("ltoir", value.get("function")), value.get("data"))
    if callable(value) or isinstance(value, (bytes, bytearray, memoryview)):
        return Callback(value)
    raise TypeError(f"{kind} must be None, a Python function, a mathpy.fft.Callback, LTO-IR bytes or a dict "
                    f"{{'ltoir': bytes, 'data': pointer}}; got {type(value).__name__}")


def callback_identity(value, kind):
    """A hashable identity of a ``prolog=`` / ``epilog=`` argument, without compiling it (for ``FFT.create_key``):
    the function object or a digest of the LTO-IR, and the user data's value (a scalar), pointer (an int given with
    LTO-IR) or layout and address (an array)."""
    callback = as_callback(value, kind)
    if callback is None:
        return None
    function = callback.function
    if isinstance(function, (bytes, bytearray, memoryview)):
        code = ("ltoir", hashlib.blake2b(bytes(function), digest_size=16).hexdigest())
    else:
        code = ("function", function)
    data = callback.data
    if data is None:
        data_id = None
    elif isinstance(data, (bool, int, float, complex, np.generic)):
        data_id = ("value", type(data).__name__, data)
    else:
        op = _operands.wrap_operand(data, f"user data of the {kind}")
        data_id = ("array", op.package, op.device_id, op.shape, op.strides, op.dtype.str, op.data_ptr)
    return kind, code, data_id


def element_dtype_for(kind, fft_type, precision):
    """The element type a ``kind`` callback loads or stores for a transform (see mathpy.jit)."""
    real = np.dtype(precision)
    complex_ = np.result_type(real, np.complex64)
    if kind == "prolog":
        return (real if fft_type == "R2C" else complex_).name
    return (real if fft_type == "C2R" else complex_).name


def _digest(array):
    return hashlib.blake2b(np.ascontiguousarray(array).view(np.uint8).reshape(-1), digest_size=16).hexdigest()


def _prepare_data(data, layout_shape, layout_strides, execution, function_name):
    """User data as (operand on the execution device, C-contiguous, in the callback's layout; key part). The key part
    starts with "ptr" when the caller's own memory is used (the plan then reads it in place at every execution),
    "value" for a Python or NumPy scalar and "copy" for a copy keyed by its contents."""
    scalar = isinstance(data, (bool, int, float, complex, np.generic))
    if scalar:
        data = np.asarray(data)
    op = _operands.wrap_operand(data, f"user data of {function_name}")
    dtype = op.dtype
    from ...jit import USER_INFO_DTYPES
    from ...jit._user_data import user_data_role
    if dtype.name not in USER_INFO_DTYPES:
        raise TypeError(f"user data of {function_name} has dtype {dtype.name}; allowed are "
                        f"{', '.join(USER_INFO_DTYPES)}")
    on_gpu = not isinstance(execution, ExecutionCPU)
    if on_gpu and not op.on_host and op.device_id != execution.device_id:
        raise ValueError(f"user data of {function_name} lives on cuda:{op.device_id}, but the FFT runs on "
                         f"cuda:{execution.device_id}; move it there first")
    layout_shape, layout_strides = tuple(layout_shape), tuple(layout_strides)
    shape = op.shape
    role = user_data_role(shape, layout_shape, f"{function_name}")
    relayout = role == "full" and layout_strides != c_strides(layout_shape) and any(e != 1 for e in layout_shape)
    if role not in ("scalar", "full"):
        k = role
        trailing = [(e, s) for e, s in zip(layout_shape[-k:], layout_strides[-k:]) if e != 1]
        expected = [(e, s) for e, s in zip(layout_shape[-k:], c_strides(layout_shape[-k:])) if e != 1]
        if trailing != expected:
            raise ValueError(f"user data of {function_name} of shape {shape} is a window over the last {k} axes, but "
                             f"the callback's layout (shape {layout_shape}, strides {layout_strides}) is not "
                             f"C-contiguous over them, so `user_info[offset % {op.size}]` would not find it; give "
                             f"data of the full shape {layout_shape} instead")

    copied = relayout or not op.is_c_contiguous or (op.on_host == on_gpu)
    if not copied:
        key = ("ptr", op.data_ptr, shape, op.strides, dtype.str, op.device_id)
        return op, key
    host = op.numpy() if op.on_host else _operands.to_host(op, None).tensor
    if relayout:
        buffer = np.zeros(span(layout_shape, layout_strides), dtype)
        view = np.lib.stride_tricks.as_strided(buffer, layout_shape, tuple(s * dtype.itemsize for s in layout_strides))
        view[...] = host.reshape(layout_shape)
        host = buffer
    else:
        host = np.ascontiguousarray(host).reshape(-1)
    key = ("value" if scalar else "copy", _digest(host), host.shape, dtype.str)
    if on_gpu:
        device = _operands.to_device(_operands.wrap_operand(host), execution.device_id, None)
        device.interface.on(device.device_id).synchronize()  # the plan may run on another stream than the copy's
        return device, key
    return _operands.wrap_operand(host), key


def bind_callback(callback, kind, fft_type, precision, layout_shape, layout_strides, execution, check_bounds=False):
    """Resolve a :class:`Callback` (see :func:`as_callback`) for one transform; validates everything at plan time,
    the indices the function's source shows included. ``check_bounds``: compile a Python function with bounds
    checks (LTO-IR is used as given)."""
    if callback is None:
        return None
    if np.dtype(precision) == np.float16:  # before anything compiles: cuFFT would refuse the plan
        raise ValueError(f"half-precision (float16 / complex32) FFTs take no {kind}: cuFFT has no half-precision "
                         f"callback types; use float32 / complex64 operands with callbacks")
    from ... import jit
    element = element_dtype_for(kind, fft_type, precision)
    if element not in jit.ELEMENT_DTYPES:
        raise TypeError(f"{kind} callbacks run on transforms of {', '.join(jit.ELEMENT_DTYPES)} elements; this "
                        f"transform's elements are {element} (long double): convert the operand to float64/"
                        f"complex128 to use callbacks")
    function = callback.function
    on_gpu = not isinstance(execution, ExecutionCPU)
    if isinstance(function, (bytes, bytearray, memoryview)):
        if not on_gpu:
            raise ValueError(f"a {kind} given as LTO-IR runs only on the GPU; pass the Python function to run it on "
                             f"the CPU")
        ltoir = bytes(function)
        data, data_ptr, data_key = None, 0, None
        if isinstance(callback.data, int) and not isinstance(callback.data, bool):
            data_ptr, data_key = callback.data, ("ptr", callback.data)
        elif callback.data is not None:
            data, data_key = _prepare_data(callback.data, layout_shape, layout_strides, execution, f"{kind} LTO-IR")
            data_ptr = data.data_ptr
        return BoundCallback(kind, None, ltoir, None, jit.CALLBACK_TYPES[(kind, element)], data, data_ptr,
                             (kind, "ltoir", hashlib.blake2b(ltoir, digest_size=16).hexdigest(), data_key),
                             element, None, None)

    from ...jit._bounds import check_callback_indexing
    from ...jit._cache import function_key
    from ...jit._spec import CallbackSpec, check_function, describe_function, make_spec
    py = check_function(function, kind)
    name = describe_function(py)
    data = data_key = None
    info = None
    if callback.data is not None:
        data, data_key = _prepare_data(callback.data, layout_shape, layout_strides, execution, f"{kind} {name}")
        info = data.dtype.name
    data_count = span(layout_shape, layout_strides)  # offsets index this span, from 0 to its last element
    check_callback_indexing(py, kind, name, data_count, data_count == math.prod(layout_shape),
                            None if data is None else data.size)
    cc = _cuda.compute_capability(execution.device_id) if on_gpu else (0, 0)
    spec = make_spec(kind, element, info, cc, check_bounds) if on_gpu else \
        CallbackSpec(kind, element, info, cc, check_bounds)
    key, snapshot = function_key(py, spec)  # the compiled code's identity; valid while `snapshot` holds
    fn_key = ("fn", key) if key is not None else ("id", id(py), py, check_bounds)
    data_ptr = 0 if data is None else data.data_ptr
    header, arrays = None, ()
    if check_bounds:
        arrays = (("data_in" if kind == "prolog" else "data_out", (data_count,)),
                  ("user_info", (0 if data is None else data.size,)))
        if on_gpu:
            header = _header(data, data_count, execution)
            data_ptr = header.data_ptr
    ltoir = symbol = None
    if on_gpu:
        compiled = jit.compile_callback(py, kind, element, info, cc, check_bounds=check_bounds)
        ltoir, symbol = compiled.ltoir, compiled.symbol
    return BoundCallback(kind, py, ltoir, symbol, jit.CALLBACK_TYPES[(kind, element)], data, data_ptr,
                         (kind, fn_key, element, info, data_key), element, info, snapshot, check_bounds, header,
                         arrays)


def _header(data, data_count, execution):
    """A checked callback's header on the execution device (see :mod:`mathpy.jit._bounds`): the user data's address
    and element count, the layout's span, and a cleared record."""
    from ...jit._bounds import HEADER_WORDS
    words = np.zeros(HEADER_WORDS, np.int64)
    if data is not None:
        words[0], words[1] = data.data_ptr, data.size
    words[2] = data_count
    header = _operands.to_device(_operands.wrap_operand(words), execution.device_id, None)
    header.interface.on(header.device_id).synchronize()  # the plan may run on another stream than the copy's
    return header


def raise_recorded(callbacks, device_id, stream):
    """After a GPU execution of checked ``callbacks`` (those an engine was planned with) on raw ``stream``: raise the
    OutOfBoundsError the first one's record holds (its record cleared for the next execution)."""
    from ...jit._bounds import HEADER_WORDS, RECORD_WORDS, error_from_record
    from ...jit._spec import describe_function
    for bound in callbacks:
        if bound is None or bound.header is None:
            continue
        queue = bound.header.interface.on(device_id, stream)
        words = queue.to_numpy(bound.header.tensor).reshape(-1)  # waits for the transform
        error = error_from_record(words[HEADER_WORDS - RECORD_WORDS:], bound.kind,
                                  describe_function(bound.function), bound.arrays)
        if error is not None:
            words[HEADER_WORDS - RECORD_WORDS:] = 0
            queue.upload_into(bound.header.tensor, words)
            queue.synchronize()
            raise error


def dry_run(bound):
    """Compile the CPU loop now (for no element: nothing runs), so typing errors surface when the CPU engine plans,
    not at execute."""
    from ...jit import apply_epilog_cpu, apply_prolog_cpu
    buffer = np.zeros(1, bound.element_dtype)
    offsets = np.zeros(0, np.int64)
    if bound.kind == "prolog":
        apply_prolog_cpu(bound.function, buffer, offsets, bound.user_info, check_bounds=bound.check_bounds)
    else:
        apply_epilog_cpu(bound.function, buffer, offsets, buffer[:0], bound.user_info,
                         check_bounds=bound.check_bounds)


def element_offsets(shape, strides):
    """The element offset of every element of a layout, shaped like it (int64)."""
    offsets = np.zeros(shape, np.int64)
    for axis, (extent, stride) in enumerate(zip(shape, strides)):
        index = np.arange(extent, dtype=np.int64) * stride
        offsets += index.reshape((extent,) + (1,) * (len(shape) - axis - 1))
    return offsets


def span(shape, strides):
    """Elements from the first to one past the last element of a layout with non-negative strides."""
    if any(e == 0 for e in shape):
        return 0
    return 1 + sum((e - 1) * s for e, s in zip(shape, strides))
