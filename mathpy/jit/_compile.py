"""compile_callback / compile_prolog / compile_epilog: cache lookup, then numba-cuda on a miss."""

import dataclasses
import threading
import time

from .. import _memo
from .._docstrings import fill
from .._errors import CallbackCompileError, LibraryNotFoundError, NoDeviceError
from .._log import logger
from ._cache import function_key, load_entry, nvvm_file_id, store_entry
from ._spec import check_function, describe_function, make_spec

__all__ = ["CompiledCallback", "compile_callback", "compile_epilog", "compile_prolog", "current_compute_capability"]

_DOCS = {
    "raises": """\
TypeError
    ``fn`` has the wrong number of parameters, a prolog returns nothing or an epilog returns a value.
ValueError
    An unsupported element or user-data dtype (named, with the allowed ones), or a compute capability the
    installed NVVM does not support.
:class:`~mathpy.CallbackCompileError`
    numba cannot type or compile the function; the message names the function, its file and line.
:class:`~mathpy.NoDeviceError`
    ``compute_capability`` was not given and there is no GPU to take it from.
:class:`~mathpy.LibraryNotFoundError`
    libNVVM is not installed (``pip install numba-cuda[cu13]``).""",
    "notes": """\
No GPU is needed when ``compute_capability`` is given: numba-cuda compiles with NVVM alone. Results are cached in
memory and on disk (``$MATHPY_CACHE_DIR`` or ``~/.cache/mathpy/jit``), keyed by the function's code, constants,
closure and the globals it reads, so a later process gets them in about a millisecond. The LTO-IR wraps the
function in cuFFT's exact callback prototype, so that cuFFT's link inlines it (no call per element).""",
}


@dataclasses.dataclass(frozen=True)
class CompiledCallback:
    """A callback compiled for cuFFT's LTO (JIT) callbacks, as :func:`compile_callback` returns it.

    On a GPU, the FFT passes ``ltoir`` to ``cufftXtSetJITCallback`` with symbol NULL; the CPU execution space runs
    the Python function instead (:func:`apply_prolog_cpu`, :func:`apply_epilog_cpu`).

    Parameters
    ----------
    ltoir : bytes
        LTO-IR; pass to ``cufftXtSetJITCallback`` and keep alive until planning returns.
    symbol : None
        What to pass as the symbol argument: always None (NULL), because the LTO-IR exports cuFFT's default name
        for ``cufft_callback_type``.
    mangled_name : str
        That default name, e.g. ``_Z27cufftJITCallbackLoadComplexPvyS_S_`` (informative).
    cufft_callback_type : int
        cuFFT's ``cufftXtCallbackType`` code (LD_COMPLEX 0 ... ST_REAL_DOUBLE 7).
    kind, element_dtype, user_info_dtype, compute_capability : str, str, str or None, tuple
        What it was compiled for (dtype names as str).
    key : str or None
        The cache key (hex), or None when the function could not be fingerprinted.
    function_name : str
        ``name (file:line)`` of the user's function, for messages.

    Examples
    --------
    >>> from mathpy import jit
    >>> def load(data_in, offset, user_info, unused):
    ...     return data_in[offset]
    >>> compiled = jit.compile_callback(load, "prolog", "float64", None, (9, 0))
    >>> compiled.mangled_name, compiled.kind
    ('_Z30cufftJITCallbackLoadDoubleRealPvyS_S_', 'prolog')
    """

    ltoir: bytes
    symbol: None
    mangled_name: str
    cufft_callback_type: int
    kind: str
    element_dtype: str
    user_info_dtype: str | None
    compute_capability: tuple
    key: str | None
    function_name: str


_memory = _memo.Memo("callbacks", group="jit", max_entries=512)  # cache key -> CompiledCallback
# (id(fn), spec) -> (fn, CompiledCallback), for functions that cannot be fingerprinted
_memory_by_identity = _memo.Memo("callbacks-by-identity", group="jit", max_entries=256)
_lock = threading.RLock()


def current_compute_capability():
    """(major, minor) of the current CUDA device; NoDeviceError when there is no GPU."""
    from .. import _cuda

    if not _cuda.is_available():
        raise NoDeviceError("compute_capability was not given and there is no CUDA GPU to take it from; pass "
                            "e.g. compute_capability=(9, 0) to compile a callback without a GPU")
    try:
        from cuda.bindings import runtime

        status, device = runtime.cudaGetDevice()
        device = int(device) if int(status) == 0 else 0
    except Exception:  # pragma: no cover (no runtime library: fall back to device 0)
        device = 0
    return _cuda.compute_capability(device)


def _build(py, spec, key, where):
    from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    from . import _device  # imports numba-cuda (about a second the first time)

    inner = "__mathpy_callback_" + (key[:24] if key else f"{id(py):x}")
    try:
        ltoir = _device.build_ltoir(spec, py, inner)
    except _device.NUMBA_ERRORS as e:
        message = str(e).strip()
        raise CallbackCompileError(
            f"cannot compile {spec.kind} callback {where} for element {spec.element_dtype}, user_info "
            f"{spec.user_info_dtype or 'void'}:\n{message}") from e
    except _device.CC_ERRORS as e:
        raise ValueError(f"compute_capability {spec.compute_capability} is not supported by the installed NVVM: "
                         f"{e}") from e
    except _device.MISSING_NVVM_ERRORS as e:
        raise LibraryNotFoundError(f"libNVVM, which compiles callbacks, was not found: {e}. Install the CUDA "
                                   f"toolkit's NVVM, e.g. `pip install numba-cuda[cu13]`") from e
    version, path = _device.nvvm_version()
    return ltoir, version, path


@fill(_DOCS)
def compile_callback(fn, kind, element_dtype, user_info_dtype=None, compute_capability=None, *, cache=True,
                     check_bounds=False):
    """Compile ``fn`` as a cuFFT LTO ``kind`` callback.

    Parameters
    ----------
    fn : function
        ``prolog(data_in, offset, user_info, unused) -> value`` or ``epilog(data_out, offset, value, user_info,
        unused)`` (see :mod:`mathpy.jit` for what works inside).
    kind : {"prolog", "epilog"}
        A load (prolog) or store (epilog) callback.
    element_dtype : {"float32", "float64", "complex64", "complex128"}
        The element the callback loads (prolog) or stores (epilog).
    user_info_dtype : dtype or None, optional
        dtype of the user data (``user_info[i]`` reads element ``i``); None compiles without user data.
    compute_capability : tuple of int, optional
        ``(major, minor)``; by default the current GPU's (a :class:`mathpy.NoDeviceError` without a GPU).
    cache : bool, optional
        False skips the disk cache (the in-memory cache is always used).
    check_bounds : bool, optional
        Compile every access with a bounds check (what ``FFTOptions(check_bounds=True)`` uses). Such LTO-IR expects
        ``caller_info`` to point to a header in device memory, not to the user data: int64 words ``[user data
        address, its element count, the FFT data's element count, 8 words of record, zeroed]``
        (:mod:`mathpy.jit._bounds`); a bad access is skipped and recorded there.

    Returns
    -------
    CompiledCallback
        The LTO-IR with what it was compiled for.

    Raises
    ------
    {raises}

    Notes
    -----
    {notes}

    Examples
    --------
    >>> import numpy as np
    >>> from mathpy import jit
    >>> def scale(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value * user_info[0]
    >>> compiled = jit.compile_callback(scale, "epilog", "complex64", "float32", (9, 0))
    >>> compiled.cufft_callback_type, compiled.user_info_dtype, compiled.symbol
    (4, 'float32', None)
    """
    start = time.perf_counter()
    py = check_function(fn, kind)
    if compute_capability is None:
        compute_capability = current_compute_capability()
    spec = make_spec(kind, element_dtype, user_info_dtype, compute_capability, check_bounds)
    key, snapshot = function_key(py, spec)  # hashed again only when the function or what it reads changed
    if key is not None:
        found = _memory.get(key)
        if found is not None:
            return found
    else:
        found = _memory_by_identity.get((id(py), spec))
        if found is not None and found[0] is py:
            return found[1]
    where = describe_function(py)
    if key is None:
        logger.debug("mathpy.jit: %s cannot be fingerprinted: it is compiled once per process, without the disk "
                     "cache", where)

    def make(ltoir):
        return CompiledCallback(ltoir=ltoir, symbol=None, mangled_name=spec.mangled_name,
                                cufft_callback_type=spec.cufft_callback_type, kind=spec.kind,
                                element_dtype=spec.element_dtype, user_info_dtype=spec.user_info_dtype,
                                compute_capability=spec.compute_capability, key=key, function_name=where)

    with _lock:
        if key is not None and cache:
            entry = load_entry(key)
            if entry is not None and entry[0].get("mangled_name") == spec.mangled_name:
                result = make(entry[1])
                _memory.put(key, result)
                logger.debug("mathpy.jit: %s %s loaded from the disk cache in %.2f ms", kind, where,
                             (time.perf_counter() - start) * 1e3)
                return result
        ltoir, nvvm_version, nvvm_path = _build(py, spec, key, where)
        result = make(ltoir)
        if key is not None:
            _memory.put(key, result)
            if cache:
                store_entry(key, {"mangled_name": spec.mangled_name, "function": where,
                                  "nvvm_version": list(nvvm_version), "nvvm_file": nvvm_file_id(nvvm_path)}, ltoir)
        else:
            _memory_by_identity.put((id(py), spec), (py, result))
    logger.debug("mathpy.jit: compiled %s %s for %s/%s cc %s in %.1f ms", kind, where, spec.element_dtype,
                 spec.user_info_dtype, spec.compute_capability, (time.perf_counter() - start) * 1e3)
    return result


@fill(_DOCS)
def compile_prolog(fn, element_dtype, user_info_dtype=None, *, compute_capability=None):
    """Compile ``fn(data_in, offset, user_info, unused) -> value`` to LTO-IR for a cuFFT load callback.

    Parameters
    ----------
    fn : function
        The prolog; it returns the element the FFT loads.
    element_dtype : {"float32", "float64", "complex64", "complex128"}
        The FFT's input element (real for R2C, complex for C2C and C2R).
    user_info_dtype : dtype or None, optional
        dtype of the user data the prolog reads, or None.
    compute_capability : tuple of int, optional
        ``(major, minor)``, e.g. ``(9, 0)``; by default the current GPU's.

    Returns
    -------
    bytes
        LTO-IR exporting cuFFT's default load-callback name for ``element_dtype``: pass symbol NULL to
        ``cufftXtSetJITCallback``, or give the bytes as ``prolog=`` to :func:`mathpy.fft.fft` on the GPU.

    Raises
    ------
    {raises}

    Notes
    -----
    {notes} nvmath-python's ``compile_prolog`` compiles the same functions; mathpy's FFT functions also take the
    Python function itself and compile it for the execution space they run on.

    Examples
    --------
    >>> import numpy as np, mathpy.fft
    >>> def triple(data_in, offset, user_info, unused):
    ...     return data_in[offset] * np.float32(3)
    >>> ltoir = mathpy.fft.compile_prolog(triple, "complex64", compute_capability=(9, 0))
    >>> type(ltoir), len(ltoir) > 0
    (<class 'bytes'>, True)
    """
    return compile_callback(fn, "prolog", element_dtype, user_info_dtype, compute_capability).ltoir


@fill(_DOCS)
def compile_epilog(fn, element_dtype, user_info_dtype=None, *, compute_capability=None):
    """Compile ``fn(data_out, offset, value, user_info, unused)`` to LTO-IR for a cuFFT store callback.

    Parameters
    ----------
    fn : function
        The epilog; it stores ``value`` (or what it computes from it) with ``data_out[offset] = ...``.
    element_dtype : {"float32", "float64", "complex64", "complex128"}
        The FFT's output element (real for C2R, complex for C2C and R2C).
    user_info_dtype : dtype or None, optional
        dtype of the user data the epilog reads, or None.
    compute_capability : tuple of int, optional
        ``(major, minor)``, e.g. ``(9, 0)``; by default the current GPU's.

    Returns
    -------
    bytes
        LTO-IR exporting cuFFT's default store-callback name for ``element_dtype``: pass symbol NULL to
        ``cufftXtSetJITCallback``, or give the bytes as ``epilog=`` to :func:`mathpy.fft.fft` on the GPU.

    Raises
    ------
    {raises}

    Notes
    -----
    {notes}

    Examples
    --------
    >>> import numpy as np, mathpy.fft
    >>> def double(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value * np.float32(2)
    >>> ltoir = mathpy.fft.compile_epilog(double, "complex64", compute_capability=(9, 0))
    >>> len(ltoir) > 0
    True
    """
    return compile_callback(fn, "epilog", element_dtype, user_info_dtype, compute_capability).ltoir
