"""The CPU engine: one :class:`~mathpy.host.fft._layout.Transform` on scipy.fft, with the same semantics as the cuFFT
engine (unnormalised; direction -1 forward, +1 inverse; R2C/C2R halve the last transform axis) and the same Python
prolog/epilog callbacks, run by mathpy.jit's numba-compiled CPU loops with the offsets of the transform's layouts.
"""

import numpy as np

try:  # SciPy's own pocketfft, not the uarray front end: with mathpy.fft.scipy_backend active, scipy.fft.fftn
    from scipy.fft import _pocketfft as _pocketfft  # would call back into mathpy
except ImportError:  # pragma: no cover (a SciPy that moved it)
    import scipy.fft as _pocketfft

from ..._log import logger
from ...jit import apply_epilog_cpu, apply_prolog_cpu
from ._callback import dry_run, element_offsets, span

__all__ = ["CPUEngine"]


def _flat_span(array):
    """The 1-D view of an array's whole memory span (non-negative strides), starting at its first element."""
    n = span(array.shape, tuple(s // array.itemsize for s in array.strides))
    return np.lib.stride_tricks.as_strided(array, (n,), (array.itemsize,))


class CPUEngine:
    """scipy.fft with ``workers=execution.num_threads``; ``execute`` takes NumPy arrays in the Transform's layouts."""

    workspace_bytes = 0

    def __init__(self, transform, *, execution, prolog=None, epilog=None):
        if transform.precision == np.float16:
            raise TypeError("half precision FFTs (float16 / complex32) run only on the GPU (ExecutionCUDA); "
                            "use float32 on the CPU")
        for bound in (prolog, epilog):
            if bound is not None:
                dry_run(bound)  # typing errors in the user's function surface now, at plan time
        self.transform, self.prolog, self.epilog = transform, prolog, epilog
        self.workers = execution.num_threads or -1
        self._freed = False
        t = transform
        self._s = [t.output_shape[a] for a in t.axes] if t.fft_type == "C2R" else None
        self._in_offsets = element_offsets(t.input_shape, t.input_strides) if prolog is not None else None
        self._out_offsets = element_offsets(t.output_shape, t.output_strides) if epilog is not None else None
        logger.debug("CPU FFT plan %s workers=%s prolog=%s epilog=%s", t, self.workers, prolog is not None,
                     epilog is not None)

    def execute(self, input_array, output_array, direction, stream=None):
        t = self.transform
        x = input_array
        if self.prolog is not None:
            x = apply_prolog_cpu(self.prolog.function, _flat_span(x), self._in_offsets, self.prolog.user_info,
                                 check_bounds=self.prolog.check_bounds)
        if t.fft_type == "C2C":
            if direction < 0:
                y = _pocketfft.fftn(x, axes=t.axes, norm="backward", workers=self.workers)
            else:
                y = _pocketfft.ifftn(x, axes=t.axes, norm="forward", workers=self.workers)
        elif t.fft_type == "R2C":
            y = _pocketfft.rfftn(x, axes=t.axes, norm="backward", workers=self.workers)
        else:
            y = _pocketfft.irfftn(x, s=self._s, axes=t.axes, norm="forward", workers=self.workers)
        if self.epilog is not None:
            y = y.astype(output_array.dtype, copy=False)
            apply_epilog_cpu(self.epilog.function, _flat_span(output_array), self._out_offsets, y,
                             self.epilog.user_info, check_bounds=self.epilog.check_bounds)
        else:
            np.copyto(output_array, y, casting="same_kind")

    def free(self):
        self._freed = True
        self.prolog = self.epilog = None
