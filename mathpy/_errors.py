"""The exceptions mathpy raises.

Argument errors stay the built-in ``ValueError`` / ``TypeError`` and quote the bad value and what is allowed. The classes
here are for what a caller cannot see in its own arguments: a library status, a missing GPU or library, a plan in the
wrong state.
"""

__all__ = [
    "MathpyError",
    "CUDALibraryError",
    "LibraryNotFoundError",
    "NoDeviceError",
    "InvalidPlanStateError",
    "UnsupportedLayoutError",
    "CallbackCompileError",
]


class MathpyError(Exception):
    """Base class of mathpy's own errors."""


class CUDALibraryError(MathpyError, RuntimeError):
    """A CUDA library call returned an error status; ``str()`` reads
    ``"CUFFT_INVALID_SIZE (4): cufft cufftXtMakePlanMany failed"`` (plus the detail, when given)."""

    def __init__(self, library, function, status, status_name, detail=""):
        self.library, self.function, self.status, self.status_name = library, function, status, status_name
        message = f"{status_name} ({status}): {library} {function} failed"
        super().__init__(f"{message}. {detail}" if detail else message)


class LibraryNotFoundError(MathpyError, ImportError):
    """A CUDA library (or an optional package) that the call needs is not installed."""


class NoDeviceError(MathpyError, RuntimeError):
    """CUDA execution was asked for, but no usable GPU (or driver) is present."""


class InvalidPlanStateError(MathpyError, RuntimeError):
    """A stateful object was used in the wrong state: freed, not planned yet, or given operands it was not built for."""


class UnsupportedLayoutError(MathpyError, ValueError):
    """The operands' layout cannot be expressed to the library and copying was not allowed.

    ``permutation`` (when known): the axis order to copy the operand into (``x.transpose(permutation).copy()``) so
    that the call works, with ``axes`` the transform axes in that permuted layout; both None when no single
    permutation helps. ``message`` is the text (as nvmath-python's error of the same name has them).

    >>> e = UnsupportedLayoutError("copy it", permutation=(1, 0), axes=(1,))
    >>> str(e), e.permutation, e.axes, e.message
    ('copy it', (1, 0), (1,), 'copy it')
    """

    def __init__(self, message, permutation=None, axes=None):
        super().__init__(message)
        self.message, self.permutation, self.axes = message, permutation, axes


class CallbackCompileError(MathpyError, TypeError):
    """A user's prolog or epilog could not be compiled; the message names the function and its source line."""
