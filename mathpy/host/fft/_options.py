"""Options of the FFT host API: one small validated dataclass, accepted as an instance, a dict or None, and the
direction of a transform as an enum.

>>> FFTOptions(result_layout="optimized", last_axis_parity="odd")
FFTOptions(fft_type=None, inplace=False, last_axis_parity='odd', blocking='auto', result_layout='optimized', \
logger=None, allocator=None)
>>> FFTDirection.INVERSE == 1, FFTDirection["FORWARD"]
(True, <FFTDirection.FORWARD: -1>)
"""

import dataclasses
import enum
import logging

from ..._memory import check_allocator

__all__ = ["FFTOptions", "FFTDirection"]

_FFT_TYPES = (None, "C2C", "R2C", "C2R")
_PARITIES = ("even", "odd")
_RESULT_LAYOUTS = ("natural", "optimized")


class FFTDirection(enum.IntEnum):
    """The direction of a transform, wherever one is taken (``execute(direction=...)``): FORWARD (-1, the sign of
    the exponent) or INVERSE (+1). The strings "forward" / "inverse" and the ints -1 / +1 are the same."""

    FORWARD = -1
    INVERSE = 1


@dataclasses.dataclass(frozen=True)
class FFTOptions:
    """How :class:`mathpy.fft.FFT` plans a transform.

    fft_type          None (from the operand's dtype: real -> "R2C", complex -> "C2C"), "C2C", "R2C" or "C2R".
    inplace           write the result into the operand (C2C only; the operand must be writable and its layout one
                      the library can address).
    last_axis_parity  C2R only: whether the real output's last transform axis has even (2*(m-1)) or odd (2*(m-1)+1)
                      length, m being the operand's length there (the stateless ``irfft`` / ``irfftn`` use it when
                      ``n`` / ``s`` do not give the length).
    blocking          True: ``execute`` waits for the GPU; "auto": only when the result must travel to the host.
    result_layout     "natural" (default): the result's axes are stored in the operand's order; "optimized": when the
                      batch axes interleave with the transform axes in memory (a transform over axis 0 of a C-ordered
                      array), the transform axes are stored innermost, which cuFFT writes faster. ``FFT.output_layout``
                      says which strides the result has. Ignored in place.
    logger            the :class:`logging.Logger` the FFT's messages go to (default: the ``"mathpy"`` logger).
    allocator         a memory manager (:class:`~mathpy.BaseCUDAMemoryManager` protocol) the GPU workspace is drawn
                      from (default: the operand's package's stream-ordered pool); ignored on the CPU.
    """

    fft_type: str | None = None
    inplace: bool = False
    last_axis_parity: str = "even"
    blocking: object = "auto"
    result_layout: str = "natural"
    logger: logging.Logger | None = None
    allocator: object = None

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
