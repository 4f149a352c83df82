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
    "StreamCaptureError",
    "OutOfBoundsError",
]


class MathpyError(Exception):
    """Base class of mathpy's own errors (argument errors are the built-in ValueError and TypeError).

    Examples
    --------
    >>> import mathpy
    >>> issubclass(mathpy.NoDeviceError, mathpy.MathpyError)
    True
    """


class CUDALibraryError(MathpyError, RuntimeError):
    """A CUDA library call returned an error status.

    Parameters
    ----------
    library, function : str
        The library (``"cufft"``, ``"cublasLt"``) and the function that failed.
    status : int
        The status code.
    status_name : str
        Its name, e.g. ``"CUFFT_INVALID_SIZE"``.
    detail : str, optional
        What mathpy knows about the cause.

    Examples
    --------
    >>> import mathpy
    >>> error = mathpy.CUDALibraryError("cufft", "cufftXtMakePlanMany", 4, "CUFFT_INVALID_SIZE")
    >>> str(error), error.status
    ('CUFFT_INVALID_SIZE (4): cufft cufftXtMakePlanMany failed', 4)
    """

    def __init__(self, library, function, status, status_name, detail=""):
        self.library, self.function, self.status, self.status_name = library, function, status, status_name
        self.detail = detail
        message = f"{status_name} ({status}): {library} {function} failed"
        super().__init__(f"{message}. {detail}" if detail else message)

    def __reduce__(self):
        # pickled with its own arguments: a process pool sends a worker's exception back to the parent, whose
        # result thread dies (and the pool hangs) when the exception cannot be rebuilt from BaseException's args
        return type(self), (self.library, self.function, self.status, self.status_name, self.detail)


class LibraryNotFoundError(MathpyError, ImportError):
    """A CUDA library (cuFFT, cuBLASLt, nvJitLink, NVVM) or an optional package (CuPy or torch to hold device
    memory) that the call needs is not installed; the message says what to install.

    Examples
    --------
    >>> import mathpy
    >>> issubclass(mathpy.LibraryNotFoundError, ImportError)
    True
    """


class NoDeviceError(MathpyError, RuntimeError):
    """CUDA execution was asked for, but no usable GPU (or driver) is present.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy, mathpy.fft
    >>> def spectrum(x):
    ...     try:
    ...         return mathpy.fft.fft(x, execution="cuda")
    ...     except mathpy.NoDeviceError:       # no GPU here: the CPU computes the same
    ...         return mathpy.fft.fft(x)
    >>> spectrum(np.ones(4))
    array([4.+0.j, 0.+0.j, 0.+0.j, 0.+0.j])
    """


class InvalidPlanStateError(MathpyError, RuntimeError):
    """A stateful object (:class:`~mathpy.fft.FFT`, :class:`~mathpy.Matmul`) was used in the wrong state: freed, or
    not planned yet.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> mm = mathpy.Matmul(np.ones((2, 2)), np.ones((2, 2)))
    >>> mm.execute()
    Traceback (most recent call last):
    ...
    mathpy._errors.InvalidPlanStateError: Matmul.execute: call plan() first
    """


class StreamCaptureError(MathpyError, RuntimeError):
    """A call was made while its stream was capturing a CUDA graph (``torch.cuda.graph``, CuPy's
    ``Stream.begin_capture``) and it does work a graph cannot record: planning (cuFFT and cuBLASLt allocate and upload
    when they plan), autotuning (it times on the host), waiting on the host (``blocking=True``), or copies between host
    and device memory (NumPy operands or results with GPU execution). Raised before any work is queued, so the capture
    stays valid; the message names the call and what to do instead (usually: run the call once before the capture,
    so that it is planned).

    Examples
    --------
    >>> import mathpy
    >>> error = mathpy.StreamCaptureError("FFT.plan cannot be captured in a CUDA graph: ...")
    >>> isinstance(error, RuntimeError)
    True
    """


class UnsupportedLayoutError(MathpyError, ValueError):
    """The operands' layout cannot be expressed to the library and copying was not allowed (an in-place FFT of a
    layout cuFFT cannot address).

    Parameters
    ----------
    message : str
        The text (also ``.message``, as nvmath-python's error of the same name has it).
    permutation : tuple of int, optional
        When known: the axis order to copy the operand into (``x.transpose(permutation).copy()``) so that the call
        works.
    axes : tuple of int, optional
        The transform axes in that permuted layout (None when no single permutation helps).

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy, mathpy.fft
    >>> x = np.ones((4, 8, 6), np.complex64).transpose(1, 0, 2)      # batch axes that fold into no one stride
    >>> mathpy.fft.FFT(x, axes=[2], options={"inplace": True})
    Traceback (most recent call last):
    ...
    mathpy._errors.UnsupportedLayoutError: an in-place FFT needs a layout the library addresses directly; ...
    >>> e = mathpy.UnsupportedLayoutError("copy it", permutation=(1, 0), axes=(1,))
    >>> str(e), e.permutation, e.axes, e.message
    ('copy it', (1, 0), (1,), 'copy it')
    """

    def __init__(self, message, permutation=None, axes=None):
        super().__init__(message)
        self.message, self.permutation, self.axes = message, permutation, axes


class CallbackCompileError(MathpyError, TypeError):
    """A user's prolog or epilog could not be compiled; the message names the function and its source line.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy, mathpy.fft
    >>> def broken(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value + "text"
    >>> try:
    ...     mathpy.fft.fft(np.ones(4), epilog=broken)
    ... except mathpy.CallbackCompileError as error:
    ...     print(str(error).splitlines()[0][:47])
    cannot compile epilog callback broken (<doctest
    """


class OutOfBoundsError(MathpyError, IndexError):
    """A prolog, an epilog or a matmul epilog compiled with ``check_bounds`` indexed one of its arrays out of bounds.
    The access was skipped (a load gave zero, a store wrote nothing), so the result is not to be used.

    Parameters
    ----------
    message : str
        The text: the function (name, file and line), the array, the index and the array's extent.
    callback : str, optional
        The function's ``name (file:line)``.
    array : str, optional
        The array as the callback's signature names it (``"data_in"``, ``"data_out"``, ``"user_info"``, ``"data"``).
    index : tuple of int, optional
        The index that was out of bounds (one entry per axis).

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy, mathpy.fft
    >>> def late(data_in, offset, user_info, unused):
    ...     if offset > 1:                   # under a condition: only a run can tell
    ...         return data_in[offset] * user_info[offset + 2]
    ...     return data_in[offset]
    >>> window = mathpy.fft.Callback(late, data=np.ones(4, np.float32))
    >>> try:
    ...     mathpy.fft.fft(np.ones(4, np.complex64), prolog=window, options={"check_bounds": True})
    ... except mathpy.OutOfBoundsError as error:
    ...     print(error.array, error.index)
    user_info (4,)
    """

    def __init__(self, message, callback=None, array=None, index=None):
        super().__init__(message)
        self.callback, self.array, self.index = callback, array, index
