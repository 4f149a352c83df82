"""Options of the FFT host API: one small validated dataclass, accepted as an instance, a dict or None."""

import dataclasses

__all__ = ["FFTOptions"]

_FFT_TYPES = (None, "C2C", "R2C", "C2R")
_PARITIES = ("even", "odd")


@dataclasses.dataclass(frozen=True)
class FFTOptions:
    """How :class:`mathpy.fft.FFT` plans a transform.

    fft_type          None (from the operand's dtype: real -> "R2C", complex -> "C2C"), "C2C", "R2C" or "C2R".
    inplace           write the result into the operand (C2C only; the operand must be writable and its layout one
                      the library can address).
    last_axis_parity  C2R only: whether the real output's last transform axis has even (2*(m-1)) or odd (2*(m-1)+1)
                      length, m being the operand's length there.
    blocking          True: ``execute`` waits for the GPU; "auto": only when the result must travel to the host.
    """

    fft_type: str | None = None
    inplace: bool = False
    last_axis_parity: str = "even"
    blocking: object = "auto"

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
