"""The same prolog/epilog functions on the CPU execution space, compiled with numba for the CPU (``numba.njit``).

Semantics match the GPU exactly: the callback is called once per element with the element's offset (a uint64, as
cuFFT passes it) into the 1-D view of the operand's whole memory span, and ``user_info`` is the same 1-D array
(read-only) or None. One difference numba imposes: its CPU target has no float16 type, so float16 user data is read
as float32 here (the same values; arithmetic on them is float32 where the GPU's may be float16).

With ``check_bounds=True`` the function is compiled with numba's ``boundscheck=True`` and the loop stops at the first
element whose call indexes out of bounds; that call is run again in Python on guarded arrays
(:func:`mathpy.jit._bounds.locate_callback`), and :class:`~mathpy.OutOfBoundsError` names the array and the index.
As in NumPy, numba counts a negative index from the end: the checked CPU loop does not refuse one (the plan-time
check refuses the negative indices it can see).
"""

import threading
import time

import numpy as np

from .. import _memo
from .._errors import CallbackCompileError
from .._log import logger
from ._bounds import locate_callback
from ._cache import function_key
from ._helpers import known_to, with_compiled_helpers
from ._spec import CallbackSpec, check_function, describe_function

__all__ = ["apply_epilog_cpu", "apply_prolog_cpu", "jit_callback", "prepare_user_info", "run_loop"]

_lock = threading.RLock()
_state = {}  # "numba": module, "prolog": loop dispatcher, "epilog": loop dispatcher
_jitted = _memo.Memo("cpu-dispatchers", group="jit", max_entries=512)  # content key (or id) -> (py, dispatcher)


def _loops():
    if "numba" in _state:
        return _state
    with _lock:
        return _define_loops()


def _define_loops():
    if "numba" not in _state:
        import numba

        @numba.njit(cache=False)
        def prolog_loop(f, buf, offsets, info, out):
            for k in range(offsets.size):
                out[k] = f(buf, np.uint64(offsets[k]), info, None)

        @numba.njit(cache=False)
        def epilog_loop(f, buf, offsets, values, info):
            for k in range(offsets.size):
                f(buf, np.uint64(offsets[k]), values[k], info, None)

        @numba.njit(cache=False)
        def checked_prolog_loop(f, buf, offsets, info, out):
            for k in range(offsets.size):
                try:
                    out[k] = f(buf, np.uint64(offsets[k]), info, None)
                except Exception:  # numba's bounds check: the element is named in Python
                    return k
            return -1

        @numba.njit(cache=False)
        def checked_epilog_loop(f, buf, offsets, values, info):
            for k in range(offsets.size):
                try:
                    f(buf, np.uint64(offsets[k]), values[k], info, None)
                except Exception:
                    return k
            return -1

        _state.update(numba=numba, prolog=prolog_loop, epilog=epilog_loop, checked_prolog=checked_prolog_loop,
                      checked_epilog=checked_epilog_loop)
    return _state


def jit_callback(py, kind, check_bounds=False):
    """numba CPU dispatcher for ``py``; a new one when the function's code, closure or globals changed."""
    key, _ = function_key(py, CallbackSpec(kind, "cpu", None, (0, 0), check_bounds))
    if key is None:
        key = ("id", id(py), check_bounds)
    with _lock:
        found = _jitted.get(key)
        if found is not None and (not isinstance(key, tuple) or found[0] is py):
            return found[1]
        # NumPy's error model, as numba-cuda's on the GPU: a division by zero gives inf or nan, not ZeroDivisionError,
        # so a callback means the same on both; and without the exception check per division the callback runs
        # about 3x faster inside the passes' loops
        njit = _loops()["numba"].njit
        from numba.core.registry import cpu_target
        compiled = with_compiled_helpers(py, lambda helper: njit(helper, boundscheck=check_bounds,
                                                                 error_model="numpy"),
                                         known_to(cpu_target.typing_context))
        dispatcher = njit(compiled, boundscheck=check_bounds, error_model="numpy")
        _jitted.put(key, (py, dispatcher))
        return dispatcher


def _prepare(buffer_1d, offsets, user_info):
    buffer_1d = np.asarray(buffer_1d)
    if buffer_1d.ndim != 1:
        raise ValueError(f"buffer_1d must be 1-D (the operand's whole memory span), got shape {buffer_1d.shape}")
    offsets = np.asarray(offsets)
    if offsets.dtype.kind not in "iu":
        raise TypeError(f"offsets must be an integer array, got {offsets.dtype}")
    flat = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= buffer_1d.size):
        raise ValueError(f"offsets must lie in [0, {buffer_1d.size}), got [{flat.min()}, {flat.max()}]")
    return buffer_1d, offsets, flat, prepare_user_info(user_info)


def prepare_user_info(user_info):
    """User data as the CPU loops read it: 1-D, C-contiguous, read-only, float16 as float32 (None stays None)."""
    if user_info is None:
        return None
    user_info = np.asarray(user_info)
    user_info = np.ascontiguousarray(user_info.reshape(-1) if user_info.ndim != 1 else user_info)
    if user_info.dtype == np.float16:  # numba's CPU target has no float16: the same values as float32
        user_info = user_info.astype(np.float32)
    user_info = user_info.view()
    user_info.flags.writeable = False  # as on the GPU, where user data is read through non-coherent loads
    return user_info


def _run(kind, py, loop_args, check_bounds=False):
    """Run the ``kind`` loop; with ``check_bounds``, the index of the first element whose call failed, or -1."""
    return run_loop(kind, py, _loops()[("checked_" if check_bounds else "") + kind], loop_args)


def run_loop(kind, py, loop, loop_args):
    """``loop(*loop_args)`` (a loop compiled around ``py``), its result returned; numba's typing errors become a
    CallbackCompileError naming the user's function."""
    numba = _loops()["numba"]
    start = time.perf_counter()
    try:
        failed = loop(*loop_args)
    except numba.core.errors.TypingError as e:
        raise CallbackCompileError(f"cannot compile {kind} callback {describe_function(py)} for the CPU:\n"
                                   f"{str(e).strip()}") from e
    except NotImplementedError as e:  # numba's CPU target lacks a type of the arguments (it names only the type)
        dtypes = ", ".join(sorted({str(getattr(arg, "dtype", "")) for arg in loop_args[1:]} - {""}))
        raise CallbackCompileError(f"cannot compile {kind} callback {describe_function(py)} for the CPU: numba's CPU "
                                   f"target does not support {e} (arrays of {dtypes}); pass user data of another "
                                   f"dtype (float32 for float16), or run it on the GPU") from e
    elapsed = time.perf_counter() - start
    if elapsed > 0.05:
        logger.debug("mathpy.jit: CPU %s %s ran (compile included) in %.1f ms", kind, describe_function(py),
                     elapsed * 1e3)
    return failed


def _raise_failed(kind, py, failed, buffer_1d, flat, values, user_info):
    if failed is not None and failed >= 0:
        value = None if values is None else values[failed]
        raise locate_callback(py, kind, describe_function(py), buffer_1d, int(flat[failed]), value, user_info)


def apply_prolog_cpu(fn, buffer_1d, offsets, user_info=None, *, check_bounds=False):
    """Run a prolog on the CPU: ``values[k] = fn(buffer_1d, offsets[k], user_info, None)`` for every ``k``, as a
    numba-compiled loop (what the CPU FFT engine does before its transform).

    Parameters
    ----------
    fn : function
        ``prolog(data_in, offset, user_info, unused) -> value``, nvmath-python's signature.
    buffer_1d : numpy.ndarray
        The 1-D view of the operand's whole memory span (its element type); ``offset`` indexes it.
    offsets : numpy.ndarray
        Integer element offsets (passed to ``fn`` as uint64, as cuFFT does), shaped as the values wanted.
    user_info : numpy.ndarray, optional
        The user data, flattened and read-only inside ``fn``.
    check_bounds : bool, optional
        Check every index ``fn`` uses (numba's ``boundscheck``); default False.

    Returns
    -------
    numpy.ndarray
        The values, shaped like ``offsets``, of ``buffer_1d``'s dtype.

    Raises
    ------
    ValueError
        ``buffer_1d`` is not 1-D, or an offset lies outside it.
    TypeError
        ``offsets`` are not integers; :class:`~mathpy.CallbackCompileError` when numba cannot compile ``fn`` for
        these types (user data of a dtype numba's CPU target lacks included).
    :class:`~mathpy.OutOfBoundsError`
        With ``check_bounds``: ``fn`` indexed ``data_in`` or ``user_info`` outside it (named, with the index).

    Notes
    -----
    The GPU runs the same function compiled to LTO-IR inside cuFFT (:func:`compile_callback`); the loop here is
    compiled once per function content and argument types.

    Examples
    --------
    >>> import numpy as np
    >>> from mathpy import jit
    >>> def window(data_in, offset, user_info, unused):
    ...     return data_in[offset] * user_info[offset]
    >>> jit.apply_prolog_cpu(window, np.arange(4.0), np.arange(4), np.array([0.0, 0.5, 1.0, 0.5]))
    array([0. , 0.5, 2. , 1.5])
    """
    py = check_function(fn, "prolog")
    buffer_1d, offsets, flat, user_info = _prepare(buffer_1d, offsets, user_info)
    out = np.empty(flat.size, dtype=buffer_1d.dtype)
    failed = _run("prolog", py, (jit_callback(py, "prolog", check_bounds), buffer_1d, flat, user_info, out),
                  check_bounds)
    _raise_failed("prolog", py, failed, buffer_1d, flat, None, user_info)
    return out.reshape(offsets.shape)


def apply_epilog_cpu(fn, buffer_1d, offsets, values, user_info=None, *, check_bounds=False):
    """Run an epilog on the CPU: ``fn(buffer_1d, offsets[k], values[k], user_info, None)`` for every ``k``, as a
    numba-compiled loop (what the CPU FFT engine does with its transform's result).

    Parameters
    ----------
    fn : function
        ``epilog(data_out, offset, value, user_info, unused)``, nvmath-python's signature.
    buffer_1d : numpy.ndarray
        The 1-D view of the output's whole memory span, written in place (it must be writable).
    offsets : numpy.ndarray
        Integer element offsets into ``buffer_1d``, shaped like ``values``.
    values : numpy.ndarray
        The values computed by the transform, one per offset.
    user_info : numpy.ndarray, optional
        The user data, flattened and read-only inside ``fn``.
    check_bounds : bool, optional
        Check every index ``fn`` uses (numba's ``boundscheck``); default False.

    Returns
    -------
    numpy.ndarray
        ``buffer_1d``.

    Raises
    ------
    ValueError
        ``buffer_1d`` is not 1-D or not writable, ``values`` and ``offsets`` differ in shape, an offset lies outside
        the buffer.
    TypeError
        ``offsets`` are not integers; :class:`~mathpy.CallbackCompileError` when numba cannot compile ``fn``.
    :class:`~mathpy.OutOfBoundsError`
        With ``check_bounds``: ``fn`` indexed ``data_out`` or ``user_info`` outside it; the elements before the
        failing one were stored.

    Notes
    -----
    The GPU runs the same function compiled into cuFFT's store (:func:`compile_callback`).

    Examples
    --------
    >>> import numpy as np
    >>> from mathpy import jit
    >>> def double(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value * np.float32(2)
    >>> out = np.zeros(3, np.complex64)
    >>> jit.apply_epilog_cpu(double, out, np.arange(3), np.array([1, 2j, 3], np.complex64))
    array([2.+0.j, 0.+4.j, 6.+0.j], dtype=complex64)
    """
    py = check_function(fn, "epilog")
    buffer_1d, offsets, flat, user_info = _prepare(buffer_1d, offsets, user_info)
    values = np.asarray(values)
    if values.shape != offsets.shape:
        raise ValueError(f"values shape {values.shape} must equal offsets shape {offsets.shape}")
    if not buffer_1d.flags.writeable:
        raise ValueError("buffer_1d must be writable: the epilog stores into it")
    values = np.ascontiguousarray(values).reshape(-1)
    failed = _run("epilog", py, (jit_callback(py, "epilog", check_bounds), buffer_1d, flat, values, user_info),
                  check_bounds)
    _raise_failed("epilog", py, failed, buffer_1d, flat, values, user_info)
    return buffer_1d
