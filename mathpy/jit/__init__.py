"""Python prolog/epilog callbacks for cuFFT's LTO (JIT) callbacks, and the same callbacks on the CPU.

Callback signatures (nvmath-python compatible)::

    def prolog(data_in, offset, user_info, unused):        # returns the element the FFT loads
        return data_in[offset] * user_info[offset % 1024]

    def epilog(data_out, offset, value, user_info, unused): # stores the element the FFT computed
        data_out[offset] = value * np.float32(2)

``data_in`` / ``data_out`` are typed pointers to the element type (``data[i]`` reads or writes element ``i``),
``offset`` is the uint64 element offset cuFFT passes, ``user_info`` a read-only typed pointer to
``user_info_dtype`` (an opaque pointer when the callback has no user data), ``unused`` an opaque pointer (cuFFT's
shared-memory pointer). On the GPU a complex element is read and stored as one vector access and user data is read
through the read-only data cache (``ld.global.nc``, like CUDA C++'s ``__ldg``): user data must therefore stay
unchanged during the transform and must not overlap the FFT's input or output. Write constants as NumPy scalars of
the element's precision (``np.float32(2)``): a Python float promotes complex64 arithmetic to complex128.

Public functions (re-exported as ``mathpy.fft.compile_prolog`` / ``compile_epilog``)::

    compile_prolog(fn, element_dtype, user_info_dtype=None, *, compute_capability=None) -> bytes
    compile_epilog(fn, element_dtype, user_info_dtype=None, *, compute_capability=None) -> bytes

They return LTO-IR whose only exported symbol is cuFFT's default C++-mangled callback name for the element type, so
the host passes symbol NULL to ``cufftXtSetJITCallback``. ``element_dtype``: float32, float64, complex64,
complex128 (the real ones are R2C prolog loads and C2R epilog stores). ``user_info_dtype``: any NumPy numeric dtype
(bool, int8..uint64, float16/32/64, complex64/128), or None / "void". ``compute_capability`` defaults to the current
GPU's (NoDeviceError without a GPU: pass e.g. ``(9, 0)`` to compile on a CPU-only machine).

Internal API for the FFT layer
------------------------------
``compile_callback(fn, kind, element_dtype, user_info_dtype=None, compute_capability=None, *, cache=True)
-> CompiledCallback`` where ``kind`` is "prolog" or "epilog". Fields of the frozen dataclass ``CompiledCallback``::

    ltoir: bytes                 give to cufftXtSetJITCallback and keep referenced until cufftXtMakePlanMany returns
    symbol: None                 pass as the symbol argument (NULL): the default name is exported
    mangled_name: str            that name, e.g. "_Z28cufftJITCallbackStoreComplexPvy6float2S_S_"
    cufft_callback_type: int     LD_COMPLEX 0, LD_COMPLEX_DOUBLE 1, LD_REAL 2, LD_REAL_DOUBLE 3,
                                 ST_COMPLEX 4, ST_COMPLEX_DOUBLE 5, ST_REAL 6, ST_REAL_DOUBLE 7
    kind, element_dtype, user_info_dtype (NumPy dtype names, or None), compute_capability (tuple)
    key: str | None              content hash (plan caches may key on it: equal keys mean identical code)
    function_name: str           "qualname (file:line)" of the user's function

Which element type for which transform: C2C uses the complex type for both; R2C loads the real type (prolog) and
stores the complex type (epilog); C2R loads the complex type and stores the real type.

Errors, raised at compile time and naming the function and its file:line: ``TypeError`` for a wrong number of
parameters, a prolog that returns nothing or an epilog that returns a value; ``ValueError`` for an unsupported
element or user-data dtype; :class:`mathpy.CallbackCompileError` (a TypeError) for numba typing errors, e.g.
indexing ``user_info`` compiled without user data, or assigning to ``user_info``.

Caching: results are cached in memory and on disk (``$MATHPY_CACHE_DIR`` or ``~/.cache/mathpy/jit``), keyed by the
function's bytecode, constants, closure values and the values of the globals it reads, the types, the compute
capability and the toolchain; a hit in a new process takes about a millisecond and does not import numba-cuda.
Compile times are logged at DEBUG level on the ``mathpy`` logger.

``check_user_info(user_info, compiled_dtype, layout_shape, *, function_name=...) -> int`` validates the user data
for a compiled callback (None vs compiled without user data; dtype equality, TypeError otherwise; a C-contiguous
scalar, a suffix of ``layout_shape`` broadcast over the leading axes, or the full layout, ValueError otherwise) and
returns its element count.

Bounds (:mod:`mathpy.jit._bounds`): the FFT API refuses, when it binds a callback, an index the function's source
shows to leave ``data_in`` / ``data_out`` or the user data; ``compile_callback(..., check_bounds=True)`` and
``apply_*_cpu(..., check_bounds=True)`` build the checked variants ``FFTOptions(check_bounds=True)`` uses.

CPU callbacks
-------------
``apply_prolog_cpu(fn, buffer_1d, offsets, user_info=None) -> values`` computes
``values[k] = fn(buffer_1d, offsets[k], user_info, None)`` and ``apply_epilog_cpu(fn, buffer_1d, offsets, values,
user_info=None) -> buffer_1d`` calls ``fn(buffer_1d, offsets[k], values[k], user_info, None)`` for every k, as numba
CPU-compiled loops (cached per function content and argument types). ``buffer_1d`` is the 1-D NumPy view of the
operand's whole memory span (element type), ``offsets`` an integer array of element offsets into it (the operand's
element strides; passed to ``fn`` as uint64, as on the GPU) shaped like ``values``, ``user_info`` a NumPy array
(flattened, read-only) or None. The prolog's values have ``buffer_1d``'s dtype and ``offsets``' shape; the epilog
writes into ``buffer_1d`` in place. So the FFT layer runs, for an input x of shape S::

    values = apply_prolog_cpu(prolog, x_span_1d, element_offsets(x), user_info)   # then FFT(values)
    apply_epilog_cpu(epilog, out_span_1d, element_offsets(out), fft_result, user_info)

Example (``cache=False`` keeps the doctest off the disk cache)::

    >>> import numpy as np
    >>> from mathpy import jit
    >>> def double(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value * np.float32(2)
    >>> cb = jit.compile_callback(double, "epilog", "complex64", None, (9, 0), cache=False)
    >>> cb.mangled_name, cb.cufft_callback_type, cb.symbol
    ('_Z28cufftJITCallbackStoreComplexPvy6float2S_S_', 4, None)
    >>> out = np.zeros(3, np.complex64)
    >>> jit.apply_epilog_cpu(double, out, np.arange(3), np.array([1, 2j, 3], np.complex64))
    array([2.+0.j, 0.+4.j, 6.+0.j], dtype=complex64)
"""

from ._compile import CompiledCallback, compile_callback, compile_epilog, compile_prolog, current_compute_capability
from ._cpu import apply_epilog_cpu, apply_prolog_cpu
from ._spec import CALLBACK_TYPES, ELEMENT_DTYPES, USER_INFO_DTYPES
from ._user_data import check_user_info
from .._errors import CallbackCompileError

__all__ = [
    "CALLBACK_TYPES", "CallbackCompileError", "CompiledCallback", "ELEMENT_DTYPES", "USER_INFO_DTYPES",
    "apply_epilog_cpu", "apply_prolog_cpu", "check_user_info", "compile_callback", "compile_epilog",
    "compile_prolog", "current_compute_capability",
]
