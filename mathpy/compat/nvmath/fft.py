"""``nvmath.fft`` on mathpy: nvmath-python's FFT host API as thin adapters over :mod:`mathpy.fft`.

Semantics are nvmath-python 1.0's where they differ from mathpy's own API:

- ``fft`` / ``ifft`` / ``rfft`` / ``irfft`` are N-D over ``axes=`` (all axes by default, at most three), keyword-only
  after the operand, and unnormalised in both directions (``ifft(fft(x))`` is ``x`` times the transform size);
  ``direction=None`` is the transform type's own direction (forward for C2C, as nvmath-python's ``execute()``);
  ``options={"inplace": True}`` writes the result into the operand, also for a host operand run with
  ``execution="cuda"`` (copied to the GPU, transformed there, copied back into the same array);
  ``irfft`` returns ``2 * (m - 1)`` or, with ``FFTOptions(last_axis_parity="odd")``, ``2 * m - 1`` points along the
  last axis; ``fft``/``ifft`` take complex operands only (ValueError), ``rfft`` real ones (RuntimeError);
- ``FFT`` plans once (``plan()`` again is a no-op), ``execute(direction=, stream=, release_workspace=)``,
  ``reset_operand(operand, stream=)`` (no operand, or None: the operand is released; another package: a TypeError),
  ``release_operand()``,
  ``get_input_layout()`` / ``get_output_layout()``, ``create_key`` / ``get_key``, ``estimate_workspace_size(key)``;
- ``prolog=`` / ``epilog=``: a :class:`DeviceCallable` or its dict (``{"ltoir": bytes or pointer, "size": ...,
  "data": device pointer}``), LTO-IR from :func:`compile_prolog` / :func:`compile_epilog`; mathpy's own forms (a
  Python function, :class:`mathpy.fft.Callback`) are accepted too and also run on the CPU;
- half precision as nvmath-python's on the GPU: torch float16 and complex32 (``torch.chalf``) operands go through
  :class:`mathpy.fft.FFT` in half precision (complex32 / float16 results; power-of-two lengths, no callbacks); NumPy
  and CuPy have no complex32, so their float16 operands are refused there (nvmath-python 1.0 has no complex32 for them
  either), and on the CPU every half-precision operand is refused;
- ``FFTOptions`` is nvmath's mutable dataclass (``fft_type``, ``inplace``, ``last_axis_parity``, ``result_layout``
  "optimized" by default, ``logger``, ``blocking``, ``allocator``); ``execution=`` takes ``ExecutionCPU`` /
  ``ExecutionCUDA``, "cpu"/"cuda" or a dict.

Each call is translated into mathpy's API: the functions call mathpy's stateless transforms (with their plan cache,
so a repeated call costs microseconds), :class:`FFT` wraps a :class:`mathpy.fft.FFT`.

>>> import numpy as np
>>> import mathpy.compat.nvmath as nvmath
>>> x = np.exp(2j * np.pi * np.arange(8) / 8).astype(np.complex64)
>>> y = nvmath.fft.fft(x)
>>> bool(np.allclose(y, np.fft.fft(x), atol=1e-5)), bool(np.allclose(nvmath.fft.ifft(y), 8 * x, atol=1e-4))
(True, True)
>>> nvmath.fft.irfft(nvmath.fft.rfft(np.ones((4, 7))), options={"last_axis_parity": "odd"}).shape
(4, 7)
"""

import ctypes
import dataclasses
import logging
import operator

from ... import fft as _mp
from ..._dtypes import dtype_name as _dtype_name
from ..._errors import InvalidPlanStateError, UnsupportedLayoutError
from ..._execution import ExecutionCPU, ExecutionCUDA
from ..._memory import check_allocator
from ...host.fft._fft import make_engine
from ._common import check_or_create_options, dtype_name, object_logger, operand_package

__all__ = ["FFTDirection", "FFTOptions", "DeviceCallable", "ExecutionCUDA", "ExecutionCPU", "compile_prolog",
           "compile_epilog", "FFT", "fft", "ifft", "rfft", "irfft", "UnsupportedLayoutError",
           "estimate_workspace_size"]

FFTDirection = _mp.FFTDirection

#: nvmath's name for the error of a freed FFT (mathpy's InvalidPlanStateError).
InvalidFFTState = InvalidPlanStateError

_REAL = ("float16", "float32", "float64")
_COMPLEX = ("complex32", "complex64", "complex128")
_HALF = ("float16", "complex32")  # computed in half precision by mathpy's FFT (its stateless functions promote float16)


def _direction(value):
    """nvmath's rule: an FFTDirection, "forward"/"inverse" in any case, or -1/+1 (ValueError otherwise)."""
    if isinstance(value, str) and value.upper() in ("FORWARD", "INVERSE"):
        return FFTDirection[value.upper()]
    return FFTDirection(value)


@dataclasses.dataclass
class FFTOptions:
    """nvmath's FFT options (a mutable dataclass; a dict of its fields is accepted wherever it is)."""

    fft_type: str | None = None
    inplace: bool = False
    last_axis_parity: str = "even"
    result_layout: str = "optimized"
    logger: logging.Logger | None = None
    blocking: object = "auto"
    allocator: object = None

    def __post_init__(self):
        allowed = [None, "C2C", "C2R", "R2C"]
        if self.fft_type not in allowed:
            raise ValueError(f"The value specified for 'fft_type' must be one of {allowed}.")
        if not isinstance(self.inplace, bool):
            raise ValueError("The value specified for 'inplace' must be of type bool (True or False).")
        if self.last_axis_parity not in ("even", "odd"):
            raise ValueError("The value specified for 'last_axis_parity' must be one of ['even', 'odd'].")
        if self.result_layout not in ("natural", "optimized"):
            raise ValueError("The value specified for 'result_layout' must be one of ['natural', 'optimized'].")
        if self.blocking not in (True, "auto"):
            raise ValueError("The value specified for 'blocking' must be either True or 'auto'.")
        check_allocator(self.allocator, "FFTOptions.allocator")


@dataclasses.dataclass
class DeviceCallable:
    """An LTO-IR callback: ``ltoir`` (bytes, or a pointer with ``size``) and ``data`` (a device pointer to the user
    data, 0 or None for none)."""

    ltoir: int | bytes | None = None
    size: int | None = None
    data: int | None = None

    def __post_init__(self):
        if self.ltoir is None:
            return
        if not isinstance(self.ltoir, (int, bytes)):
            raise ValueError("The LTO-IR code must be provided as a bytes object or as a Python int representing the "
                             "pointer to the LTO-IR code.")
        if isinstance(self.ltoir, int) and self.size is None:
            raise ValueError("The size of the LTO-IR code specified as a pointer must be explicitly provided using the "
                             "'size' option.")
        if isinstance(self.ltoir, bytes):
            self.size = len(self.ltoir)
        if not isinstance(self.size, int):
            raise ValueError(f"Invalid size value: {self.size}.")
        if self.data is None:
            self.data = 0
        if not isinstance(self.data, int):
            raise ValueError("The 'data' attribute must be a Python int representing a device pointer to user data.")

    def as_callback(self):
        """mathpy's form: a :class:`mathpy.fft.Callback` of the LTO-IR bytes with the data pointer (None when empty)."""
        if self.ltoir is None:
            return None
        code = self.ltoir if isinstance(self.ltoir, bytes) else ctypes.string_at(self.ltoir, self.size)
        return _mp.Callback(code, data=self.data or None)


def _callback(value, kind):
    """``prolog=`` / ``epilog=`` as mathpy takes it: nvmath's DeviceCallable or dict, or mathpy's own forms."""
    if value is None or isinstance(value, _mp.Callback) or callable(value):
        return value
    return check_or_create_options(DeviceCallable, value, kind).as_callback()


def compile_prolog(prolog_fn, element_dtype, user_info_dtype, *, compute_capability=None):
    """Compile ``prolog_fn(data_in, offset, user_info, unused) -> value`` to LTO-IR (bytes) for :func:`fft` and
    :meth:`FFT.plan` (see :func:`mathpy.fft.compile_prolog`). ``compute_capability``: "90"-style string (or a
    (major, minor) tuple); default: the current GPU's."""
    return _mp.compile_prolog(prolog_fn, element_dtype, _info_dtype(user_info_dtype),
                              compute_capability=_capability(compute_capability))


def compile_epilog(epilog_fn, element_dtype, user_info_dtype, *, compute_capability=None):
    """Compile ``epilog_fn(data_out, offset, value, user_info, unused)`` to LTO-IR (bytes) (see
    :func:`compile_prolog`)."""
    return _mp.compile_epilog(epilog_fn, element_dtype, _info_dtype(user_info_dtype),
                              compute_capability=_capability(compute_capability))


def _capability(value):
    if value is None or isinstance(value, tuple):
        return value
    if not isinstance(value, str) or not value.isdigit():
        raise ValueError(f"The compute capability must be specified as a string ('80', '89', ...). The provided value "
                         f"{value} is invalid.")
    number = int(value)
    return number // 10, number % 10


def _info_dtype(value):
    """A numba type (nvmath allows them) as the dtype name it stands for; other values as given."""
    if value is not None and type(value).__module__.startswith("numba"):
        return str(value)
    return value


# --- the stateless functions --------------------------------------------------------------------------------------

def _check_axes(shape, axes):
    ndim = len(shape)
    if ndim == 0:
        raise ValueError("The tensor is 0-D (i.e. a scalar). FFT does not support scalars.")
    if axes is None:
        if ndim > 3:
            raise ValueError(f"The tensor is {ndim}-D and FFTs in number of dimensions > 3 is not supported. The FFT "
                             f"axes need to be specified using the 'axes' option.")
        return None
    axes = tuple(operator.index(a) for a in axes)
    if any(a >= ndim or a < -ndim for a in axes):
        raise ValueError(f"The specified FFT axes {axes} are out of bounds for a {ndim}-D tensor.")
    if len(axes) > 3:
        raise ValueError(f"Only up to 3D FFTs are currently supported. You can use the 'axes' option to specify up to "
                         f"three axes along which to perform the FFT. The current number of dimensions is "
                         f"{len(axes)} corresponding to the axes {axes}.")
    return axes


_OPTIMIZED = _mp.FFTOptions(result_layout="optimized")  # nvmath's defaults in mathpy's terms


def _native_options(options):
    """mathpy's FFTOptions for nvmath's (for None: its defaults with nvmath's "optimized" result layout); the
    stateless functions set the FFT type and parity themselves."""
    if options is None:
        return _OPTIMIZED
    return _mp.FFTOptions(fft_type=options.fft_type, inplace=options.inplace,
                          last_axis_parity=options.last_axis_parity, blocking=options.blocking,
                          result_layout=options.result_layout, logger=options.logger, allocator=options.allocator)


def _shape(operand):
    shape = getattr(operand, "shape", None)
    return tuple(shape) if shape is not None else tuple(__import__("numpy").shape(operand))


def _c2c(operand, axes, direction, options, execution, prolog, epilog, stream):
    name = dtype_name(operand)
    if name not in _COMPLEX:
        raise ValueError(f"This function expects complex operand, found {name}")
    axes = _check_axes(_shape(operand), axes)
    if options is not None:
        options = check_or_create_options(FFTOptions, options, "FFT options")
        if options.fft_type not in (None, "C2C"):  # nvmath refuses these on the FFT object: same path, same error
            return _stateful(operand, axes, direction, options, execution, prolog, epilog, stream)
    if direction is None:  # nvmath-python: the operand type's own direction
        direction = FFTDirection.FORWARD
    if name in _HALF:
        return _stateful(operand, axes, direction, options, execution, prolog, epilog, stream)
    forward = _direction(direction) == FFTDirection.FORWARD
    transform, norm = (_mp.fftn, "backward") if forward else (_mp.ifftn, "forward")  # unnormalised both ways
    return transform(operand, axes=axes, norm=norm, options=_native_options(options), execution=execution,
                     prolog=_callback(prolog, "prolog"), epilog=_callback(epilog, "epilog"), stream=stream)


def _stateful(operand, axes, direction, options, execution, prolog, epilog, stream):
    with FFT(operand, axes=axes, options=options, execution=execution, stream=stream) as f:
        f.plan(prolog=prolog, epilog=epilog, stream=stream, direction=direction)
        return f.execute(direction=direction, stream=stream)


def fft(operand, /, *, axes=None, direction=FFTDirection.FORWARD, options=None, execution=None, prolog=None,
        epilog=None, stream=None):
    """N-D complex-to-complex FFT over ``axes`` (all axes by default; at most three), unnormalised."""
    return _c2c(operand, axes, direction, options, execution, prolog, epilog, stream)


def ifft(operand, /, *, axes=None, direction=FFTDirection.INVERSE, options=None, execution=None, prolog=None,
         epilog=None, stream=None):
    """N-D complex-to-complex inverse FFT, unnormalised (no division by the transform size)."""
    return _c2c(operand, axes, direction, options, execution, prolog, epilog, stream)


def rfft(operand, /, *, axes=None, options=None, execution=None, prolog=None, epilog=None, stream=None):
    """N-D real-to-complex FFT; the last of ``axes`` becomes ``n // 2 + 1`` long."""
    name = dtype_name(operand)
    if name in _COMPLEX:
        raise RuntimeError(f"rfft expects a real input, but got {name}. Please use fft for complex input.")
    if name not in _REAL:
        raise ValueError(f"This function expects real operand, found {name}")
    axes = _check_axes(_shape(operand), axes)
    if options is not None:
        options = check_or_create_options(FFTOptions, options, "FFT options")
        if options.fft_type not in (None, "R2C"):
            return _stateful(operand, axes, None, options, execution, prolog, epilog, stream)
    if name in _HALF:
        return _stateful(operand, axes, None, options, execution, prolog, epilog, stream)
    return _mp.rfftn(operand, axes=axes, options=_native_options(options), execution=execution,
                     prolog=_callback(prolog, "prolog"), epilog=_callback(epilog, "epilog"), stream=stream)


def irfft(operand, /, *, axes=None, options=None, execution=None, prolog=None, epilog=None, stream=None):
    """N-D complex-to-real inverse FFT of a Hermitian half-spectrum, unnormalised; the last of ``axes`` becomes
    ``2 * (m - 1)`` long, or ``2 * m - 1`` with ``FFTOptions(last_axis_parity="odd")``."""
    name = dtype_name(operand)
    if name not in _COMPLEX:
        raise ValueError(f"This function expects complex operand, found {name}")
    shape = _shape(operand)
    checked = _check_axes(shape, axes)
    options = check_or_create_options(FFTOptions, options, "FFT options")
    options.fft_type = "C2R"  # as nvmath: irfft is C2R whatever the options say
    axes = tuple(range(len(shape))) if checked is None else checked
    m = shape[axes[-1]]
    n = 2 * (m - 1) + (options.last_axis_parity == "odd")
    if n < 1:
        raise ValueError(f"The size of the last FFT axis in the result for FFT type 'C2R' is 0 for operand shape = "
                         f"{shape} and axes = {axes}. To fix this, provide 'last_axis_parity' = 'odd' to the FFT "
                         f"options.")
    if name in _HALF:
        return _stateful(operand, checked, None, options, execution, prolog, epilog, stream)
    return _mp.irfftn(operand, s=(-1,) * (len(axes) - 1) + (n,), axes=axes, norm="forward",
                      options=_native_options(options), execution=execution,
                      prolog=_callback(prolog, "prolog"), epilog=_callback(epilog, "epilog"), stream=stream)


# --- the stateful FFT ---------------------------------------------------------------------------------------------

class FFT:
    """nvmath's stateful FFT over a :class:`mathpy.fft.FFT` (see the module docstring for the semantics)."""

    def __init__(self, operand, /, *, axes=None, options=None, execution=None, stream=None):
        options = check_or_create_options(FFTOptions, options, "FFT options")
        axes = _check_axes(_shape(operand), axes)
        name = dtype_name(operand)
        if name not in _REAL + _COMPLEX:
            raise ValueError(f"Unsupported dtype '{name}' for FFT.")
        self.options, self.logger = options, object_logger(options.logger)
        self._fft = _mp.FFT(operand, axes=axes, options=_native_options(options), execution=execution,
                            stream=stream)
        self.package = operand_package(operand)
        self.operand_data_type = name
        self._planned = self._released = self._freed = False
        self.logger.info("The FFT type is %s over axes %s on %s.", self.fft_abstract_type, self.axes,
                         self.execution_options)

    # nvmath's public attributes, read from the mathpy object
    fft_abstract_type = property(lambda self: self._fft.fft_type)
    axes = property(lambda self: self._fft.axes)
    execution_options = property(lambda self: self._fft.execution)
    execution_space = property(lambda self: self._fft.execution.name)
    result_data_type = property(lambda self: _dtype_name(self._fft.output_dtype))
    inplace = property(lambda self: self.options.inplace)

    def get_input_layout(self):
        """(shape, strides) in elements of the input the transform reads (prolog offsets index it)."""
        return self._fft.input_layout

    def get_output_layout(self):
        """(shape, strides) in elements of the result (epilog offsets index it)."""
        return self._fft.output_layout

    def plan(self, *, prolog=None, epilog=None, stream=None, direction=None):
        """Plan the transform with optional LTO-IR callbacks; a second call does nothing (as in nvmath)."""
        self._check_valid()
        if self._planned:
            self.logger.debug("The FFT has already been planned, and redoing the plan is not supported.")
            return
        if direction is not None:
            self._check_direction(direction)
        self._fft.plan(prolog=_callback(prolog, "prolog"), epilog=_callback(epilog, "epilog"), stream=stream)
        self._planned = True
        self.logger.info("The FFT has been planned.")

    def execute(self, direction=None, stream=None, release_workspace=False):
        """Run the transform (unnormalised); the result comes back in the operand's package and on its device."""
        self._check_valid()
        if self._released:
            raise RuntimeError("Execution cannot be performed after the operand has been released. Use "
                               "reset_operand() to provide a new operand before performing the execution.")
        if direction is not None:
            direction = int(self._check_direction(direction))
        return self._fft.execute(direction=direction, stream=stream, release_workspace=release_workspace)

    def reset_operand(self, operand=None, *, stream=None):
        """Use a new operand of the same package, device, dtype and layout from the next :meth:`execute` on; with
        no operand (None), drop the reference to the current one (:meth:`execute` then needs a new one first)."""
        self._check_valid()
        if operand is None:
            self.release_operand()
            self.logger.info("The operand has been reset to None.")
            return
        package = operand_package(operand)
        if package != self.package:
            raise TypeError(f"Library package mismatch: '{self.package}' => '{package}'")
        self.reset_operand_unchecked(operand, stream=stream)

    def reset_operand_unchecked(self, operand, *, stream=None):
        """:meth:`reset_operand` (mathpy checks the operand either way: the check costs microseconds)."""
        self._fft.reset_operand(operand, stream=stream)
        self._released = False

    def release_operand(self):
        """Drop the reference to the operand (execute() needs a reset_operand() first)."""
        self._check_valid()
        self._fft.reset_operand()
        self._released = True

    def get_key(self, *, prolog=None, epilog=None):
        """The hashable key of this FFT's problem with the given callbacks (see :meth:`create_key`)."""
        self._check_valid()
        if not self._planned:
            raise RuntimeError("Returning the key cannot be performed before plan() has been called.")
        return self._fft.get_key(_callback(prolog, "prolog"), _callback(epilog, "epilog"))

    @staticmethod
    def create_key(operand, *, axes=None, options=None, execution=None, prolog=None, epilog=None):
        """A hashable key of the FFT problem of ``operand`` (its metadata only): FFTs with equal keys can share a
        plan, for caches of one's own. For use within one process."""
        options = check_or_create_options(FFTOptions, options, "FFT options")
        axes = _check_axes(_shape(operand), axes)
        return _mp.FFT.create_key(operand, axes=axes, options=_native_options(options), execution=execution,
                                  prolog=_callback(prolog, "prolog"), epilog=_callback(epilog, "epilog"))

    def free(self):
        """Release the plan and its workspace; idempotent."""
        self._freed = True
        self._fft.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _check_valid(self):
        if self._freed:
            raise InvalidFFTState("The FFT object cannot be used after resources are free'd")

    def _check_direction(self, direction):
        value = _direction(direction)
        kind = self.fft_abstract_type
        if (kind == "C2R" and value != FFTDirection.INVERSE) or (kind == "R2C" and value != FFTDirection.FORWARD):
            raise ValueError(f"The specified direction {value.name} is not compatible with the FFT type '{kind}'.")
        return value

    def __repr__(self):
        return f"<nvmath-compatible {self._fft!r}>"


def estimate_workspace_size(key, *, technique="default", handle=None):
    """The workspace bytes a plan of ``key`` (from :meth:`FFT.create_key`) needs: 0 on the CPU; on the GPU mathpy
    plans it and reads the size cuFFT reports (both techniques: the size is exact)."""
    if technique not in ("default", "refined"):
        raise ValueError(f"technique must be 'default' or 'refined', got {technique!r}.")
    if not isinstance(key, tuple) or len(key) < 4 or key[0] != "FFT":
        raise ValueError(f"The key must be a tuple as returned by FFT.create_key(). Got {key!r}.")
    transform, execution = key[1], key[2]
    if isinstance(execution, ExecutionCPU):
        return 0
    engine = make_engine(transform, execution, None, None, None)
    try:
        return int(engine.workspace_bytes)
    finally:
        engine.free()
