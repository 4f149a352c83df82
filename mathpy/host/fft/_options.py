"""Options of the FFT host API: one small validated dataclass, accepted as an instance, a dict or None, and the
direction of a transform as an enum.

>>> FFTOptions(result_layout="optimized", last_axis_parity="odd")
FFTOptions(fft_type=None, inplace=False, last_axis_parity='odd', blocking='auto', result_layout='optimized', \
logger=None, allocator=None, check_bounds=None)
>>> FFTDirection.INVERSE == 1, FFTDirection["FORWARD"]
(True, <FFTDirection.FORWARD: -1>)
"""

import dataclasses
import enum
import logging

from ..._memory import check_allocator
from ...jit._bounds import check_option

__all__ = ["FFTOptions", "FFTDirection"]

_FFT_TYPES = (None, "C2C", "R2C", "C2R")
_PARITIES = ("even", "odd")
_RESULT_LAYOUTS = ("natural", "optimized")


class FFTDirection(enum.IntEnum):
    """The direction of a transform, wherever one is taken (``execute(direction=...)``): FORWARD (-1, the sign of
    the exponent) or INVERSE (+1). The strings "forward" / "inverse" and the ints -1 / +1 are the same.

    Notes
    -----
    The same on the CPU and the GPU; the stateful FFT is unnormalised either way.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> x = np.ones(4, np.complex64)
    >>> with mathpy.fft.FFT(x) as f:
    ...     f.plan()
    ...     f.execute(direction=mathpy.fft.FFTDirection.INVERSE)
    array([4.+0.j, 0.+0.j, 0.+0.j, 0.+0.j], dtype=complex64)
    """

    FORWARD = -1
    INVERSE = 1


@dataclasses.dataclass(frozen=True)
class FFTOptions:
    """How :class:`~mathpy.fft.FFT` plans a transform; the stateless functions take the same object (or a dict).

    Parameters
    ----------
    fft_type : {None, "C2C", "R2C", "C2R"}, optional
        None (default): from the operand's dtype (real -> ``"R2C"``, complex -> ``"C2C"``); ``"C2R"`` transforms
        a complex Hermitian half spectrum to a real result. The stateless functions set it themselves.
    inplace : bool, optional
        Write the result into the operand (C2C only; the operand must be writable, live where the FFT runs, and
        have a layout the library can address). Default False.
    last_axis_parity : {"even", "odd"}, optional
        C2R only: whether the real output's last transform axis has ``2 * (m - 1)`` (even, the default) or
        ``2 * (m - 1) + 1`` points, ``m`` being the operand's length there (the stateless ``irfft`` / ``irfftn``
        use it when ``n`` / ``s`` do not give the length).
    blocking : {"auto", True}, optional
        True: :meth:`~mathpy.fft.FFT.execute` waits for the GPU to finish; ``"auto"`` (default): only when the
        result must travel to host memory.
    result_layout : {"natural", "optimized"}, optional
        ``"natural"`` (default): the result's axes are stored in the operand's order; ``"optimized"``: when the
        batch axes interleave with the transform axes in memory (a transform over axis 0 of a C-ordered array),
        the transform axes are stored innermost, which cuFFT writes faster. :attr:`FFT.output_layout
        <mathpy.fft.FFT.output_layout>` says which strides the result has. Ignored in place.
    logger : logging.Logger, optional
        Where the FFT's messages go (default: the ``"mathpy"`` logger).
    allocator : memory manager, optional
        A memory manager (:class:`~mathpy.BaseCUDAMemoryManager` protocol) the GPU workspace is drawn from
        (default: the operand's package's stream-ordered pool); ignored on the CPU.
    check_bounds : bool or None, optional
        Compile Python prologs and epilogs with a bounds check on every index they use (``data_in`` /
        ``data_out``, ``user_info``): an index outside its array raises :class:`~mathpy.OutOfBoundsError` naming
        the callback, the array and the index, after the transform (whose result is then not to be used), instead
        of reading or writing foreign memory. None (default): on when the environment variable
        ``MATHPY_CHECK_BOUNDS`` is 1 (read when a plan is made), else off. Checked callbacks run slower (on the GPU
        each access costs a compare and a branch, and every execution waits for the GPU to read the error record);
        the callback guide has the figures. Indices that every call reaches and that the callback's source shows
        are checked when planning whatever this option says.

    Raises
    ------
    ValueError
        An ``fft_type``, ``last_axis_parity``, ``blocking`` or ``result_layout`` that is not one of the allowed
        values (named).
    TypeError
        ``inplace`` that is not a bool, a ``logger`` that is not a logging.Logger, an ``allocator`` without the
        memory-manager methods, a ``check_bounds`` that is neither None nor a bool.

    Notes
    -----
    The same options apply on the CPU and the GPU, except the GPU-only ``allocator`` and ``result_layout``'s
    speed reason (the CPU honours the layout too).

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> spectrum = np.fft.rfft(np.arange(5.0))
    >>> with mathpy.fft.FFT(spectrum, options={"fft_type": "C2R", "last_axis_parity": "odd"}) as f:
    ...     f.plan()
    ...     f.execute() / 5
    array([0., 1., 2., 3., 4.])
    >>> mathpy.fft.FFTOptions(fft_type="R2R")
    Traceback (most recent call last):
    ...
    ValueError: FFTOptions.fft_type 'R2R' is not supported; allowed are [None, 'C2C', 'R2C', 'C2R']
    """

    fft_type: str | None = None
    inplace: bool = False
    last_axis_parity: str = "even"
    blocking: object = "auto"
    result_layout: str = "natural"
    logger: logging.Logger | None = None
    allocator: object = None
    check_bounds: bool | None = None

    def __post_init__(self):
        if self.fft_type not in _FFT_TYPES:
            raise ValueError(f"FFTOptions.fft_type {self.fft_type!r} is not supported; allowed are {list(_FFT_TYPES)}")
        if not isinstance(self.inplace, bool):
            raise TypeError(f"FFTOptions.inplace must be a bool, not {self.inplace!r}")
        if self.last_axis_parity not in _PARITIES:
            raise ValueError(f"FFTOptions.last_axis_parity {self.last_axis_parity!r} is not supported; allowed are "
                             f"{list(_PARITIES)}")
        if self.blocking not in (True, "auto"):
            raise ValueError(f"FFTOptions.blocking must be True or 'auto', not {self.blocking!r}")
        if self.result_layout not in _RESULT_LAYOUTS:
            raise ValueError(f"FFTOptions.result_layout {self.result_layout!r} is not supported; allowed are "
                             f"{list(_RESULT_LAYOUTS)}")
        if self.logger is not None and not isinstance(self.logger, logging.Logger):
            raise TypeError(f"FFTOptions.logger must be a logging.Logger, not {type(self.logger).__name__}")
        check_allocator(self.allocator, "FFTOptions.allocator")
        check_option(self.check_bounds, "FFTOptions")
