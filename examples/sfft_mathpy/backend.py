"""mathpy's backend for SFFT's subtraction: the planned transforms, their buffers, and one subtraction.

Where SFFT's pure-CuPy packet transforms each of its 1 + Fij + Fpq fields and then every product of two spectra over
the whole image (Fij^2 + 2 Fij Fpq + Fpq^2 + Fij + Fpq complex128 FFTs of N0 x N1, each read back at a few lags), this
backend runs five planned ``mathpy.fft.FFT`` objects, made once per configuration and device and executed for every
image pair, with the pointwise work in their callbacks (:mod:`.callbacks`):

1. ``field_fft``: the E fields' spectra in one batched, in-place 2-D transform, the fields computed as it loads them;
2. ``product_fft``: every correlation the normal equations need (:attr:`.Params.slots`; a correlation and its
   mirror are one) as one batched 1-D transform along the columns, over the rows k0 = 0..N0/2 of the frequency plane
   only (the spectra are Hermitian), loading the product of two spectra and storing only the 4 w1 + 1 lag columns;
   then one complex matmul (``mathpy.matmul``) sums the rows with the Hermitian weights at the 4 w0 + 1 row lags;
3. the normal equations are gathered from those windows and solved in float64 (:mod:`.system`);
4. ``kernel_fft``: the solved kernels' spectra, drawn from the kernel table as the transform loads them;
5. ``model_fft``: the fields of the image pair to subtract, their spectra multiplied by the kernels' (and the
   background's) as they are stored; their sum over the fields is the difference's spectrum, which
   ``difference_fft`` transforms back.

Buffers (complex128 unless said): ``spectra`` (rows, slots_per_row, N1) holds the fields' spectra, then the phase
table and the slot table: a callback's user data has the shape of the layout it sees (``mathpy.fft.Callback``'s
rule), so the correlation transform's user data is as large as its own buffer ``correlations``, whose start serves
the kernels' transforms and their multipliers afterwards. ``images`` (N0, N1) holds I + iJ of the pair being
transformed, ``kernel_table`` (N0, N1, float64) the kernels. The plans run on the stream that was current when the
backend was made.
"""

import dataclasses
import math

import numpy as np

import mathpy
import mathpy.fft

from .callbacks import callbacks
from .params import Params
from .system import NormalEquations

__all__ = ["Layout", "SFFTBackend", "CONTAMINATION_THRESHOLD"]

#: SFFT's threshold on the convolved contamination mask (its GeneralSFFTSubtract).
CONTAMINATION_THRESHOLD = -0.001
#: A Cholesky solve whose relative residual exceeds this failed (the matrix was not numerically positive definite).
RESIDUAL_LIMIT = 1e-8


@dataclasses.dataclass(frozen=True)
class Layout:
    """The correlation buffer: ``rows`` frequency rows k0 of ``slots_per_row`` slots of N1 values; the transform's
    user data keeps its phase table at ``phase_at`` and its slot table at ``pair_at``; ``width`` lag columns."""

    rows: int
    slots_per_row: int
    width: int
    phase_at: int
    pair_at: int

    @classmethod
    def for_params(cls, p):
        rows = p.N0 // 2 + 1
        phase_at = p.fields * p.pixels
        pair_at = phase_at + p.N1
        need = pair_at + len(p.slots)  # the user data must hold the spectra and the tables
        return cls(rows, max(len(p.slots), -(-need // (rows * p.N1))), 4 * p.w1 + 1, phase_at, pair_at)


class SFFTBackend:
    """``SFFTBackend(params, xp)`` plans mathpy's SFFT subtraction for one configuration (:class:`.Params`) on the
    device of ``xp`` (NumPy: mathpy's CPU execution space; CuPy: the current GPU and stream);
    :meth:`subtract` then runs SFFT's ``GeneralSFFTSubtract`` on any number of image pairs."""

    def __init__(self, params, xp=np):
        if not isinstance(params, Params):
            raise TypeError(f"params must be a sfft_mathpy.Params, got {type(params).__name__}")
        p, lay = params, Layout.for_params(params)
        self.params, self.layout, self.xp = p, lay, xp
        shape = (lay.rows, lay.slots_per_row, p.N1)
        self.spectra = xp.zeros(shape, np.complex128)
        tables = self.spectra.reshape(-1)
        tables[lay.phase_at:lay.phase_at + p.N1] = xp.asarray(np.exp(-2j * np.pi * 2 * p.w1 * np.arange(p.N1) / p.N1))
        tables[lay.pair_at:lay.pair_at + len(p.slots)] = xp.asarray([complex(a, b) for a, b in p.slots])
        self.fields = tables[:p.fields * p.pixels].reshape(p.fields, p.N0, p.N1)
        self.correlations = xp.zeros(shape, np.complex128)
        self.multipliers = self.correlations.reshape(-1)[:p.fields * p.pixels].reshape(p.fields, p.N0, p.N1)
        self.images = xp.zeros((p.N0, p.N1), np.complex128)
        self.kernel_table = xp.zeros((p.N0, p.N1), np.float64)
        self.difference = xp.zeros((p.N0, p.N1), np.complex128)
        self.equations = NormalEquations(p, xp)
        self.lag_sum = xp.asarray(_lag_sum(p, lay.rows))

        cb = callbacks(p, lay)
        FFT, Callback = mathpy.fft.FFT, mathpy.fft.Callback
        inplace = {"inplace": True}
        fields = Callback(cb["field_prolog"], data=self.images)
        self.field_fft = FFT(self.fields, axes=(1, 2), options=inplace)
        self.field_fft.plan(prolog=fields)
        self.product_fft = FFT(self.correlations, axes=(2,), options=inplace)
        self.product_fft.plan(prolog=Callback(cb["product_prolog"], data=self.spectra), epilog=cb["window_epilog"])
        self.kernel_fft = FFT(self.multipliers[:p.Fij], axes=(1, 2), options=inplace)
        self.kernel_fft.plan(prolog=Callback(cb["kernel_prolog"], data=self.kernel_table))
        self.model_fft = FFT(self.fields, axes=(1, 2), options=inplace)
        self.model_fft.plan(prolog=fields, epilog=Callback(cb["multiplier_epilog"], data=self.multipliers))
        self.difference_fft = FFT(self.difference, axes=(0, 1), options=inplace)
        self.difference_fft.plan()

    @property
    def plans(self):
        return (self.field_fft, self.product_fft, self.kernel_fft, self.model_fft, self.difference_fft)

    def free(self):
        for plan in self.plans:
            plan.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    # --- the steps -----------------------------------------------------------------------------------------------
    def check(self, **images):
        """TypeError / ValueError naming an image that is not a 2-D real array of this configuration's shape on
        this backend's device."""
        p, xp = self.params, self.xp
        for name, image in images.items():
            on_gpu = hasattr(image, "__cuda_array_interface__")
            if on_gpu != (xp is not np) or not hasattr(image, "dtype"):
                where = "a CuPy array" if xp is not np else "a NumPy array"
                raise TypeError(f"{name} must be {where} (this backend runs there), got {type(image).__name__}")
            if image.dtype.kind not in ("biuf" if name == "ContamMask_I" else "f"):
                raise TypeError(f"{name} has dtype {image.dtype}; SFFT subtracts real images (float64)"
                                + (" and takes a boolean or numeric mask" if name == "ContamMask_I" else ""))
            if tuple(image.shape) != (p.N0, p.N1):
                raise ValueError(f"{name} has shape {tuple(image.shape)}; this configuration subtracts "
                                 f"({p.N0}, {p.N1}) images")

    def _load(self, I, J):
        """The pair whose fields the next forward transform computes."""
        self.xp.copyto(self.images.real, I)
        self.xp.copyto(self.images.imag, J)

    def windows(self, mI, mJ):
        """The correlation windows (slots, 4 w0 + 1, 4 w1 + 1) of the fields of (mI, mJ), float64."""
        p, lay, xp = self.params, self.layout, self.xp
        self._load(mI, mJ)
        self.field_fft.execute()
        self.product_fft.execute(direction="inverse")
        columns = xp.ascontiguousarray(self.correlations[:, :, :lay.width]).reshape(lay.rows, -1)
        lags = mathpy.matmul(self.lag_sum, columns).real.reshape(-1, lay.slots_per_row, lay.width)
        return xp.ascontiguousarray(lags.transpose(1, 0, 2)[:len(p.slots)])

    def solve(self, mI, mJ):
        """(SFFT's solution vector (NEQ,) float64, its relative residual as a device scalar)."""
        m, rhs = self.equations.assemble(self.windows(mI, mJ))
        return self.equations.solve(m, rhs)

    def difference_of(self, I, J, solution, background=True):
        """J minus I convolved with the solution's kernels, minus its background (when ``background``): (N0, N1)
        float64."""
        p, xp = self.params, self.xp
        kernels = self.equations.kernels(solution).reshape(-1)
        self.kernel_table.reshape(-1)[:kernels.size] = kernels
        self.kernel_fft.execute()
        b = solution[p.Fijab:] if background else xp.zeros(p.Fpq)
        self.multipliers.reshape(-1)[p.J * p.pixels:p.J * p.pixels + p.Fpq] = b
        self._load(I, J)
        self.model_fft.execute()
        xp.sum(self.fields, axis=0, out=self.difference)
        self.difference_fft.execute(direction="inverse")
        return self.difference.real * (1.0 / p.pixels)

    def subtract(self, I, J, mI, mJ, contamination=None):
        """SFFT's ``GeneralSFFTSubtract``: (solution, difference, convolved contamination mask or None), the
        solution fitted on (mI, mJ) and applied to (I, J); ``contamination`` a mask of I's bad pixels."""
        self.check(I=I, J=J, mI=mI, mJ=mJ, **({} if contamination is None else {"ContamMask_I": contamination}))
        solution, residual = self.solve(mI, mJ)
        difference = self.difference_of(I, J, solution)
        if not float(residual) <= RESIDUAL_LIMIT:  # one wait for the device, after everything was enqueued
            solution = self.equations.solve(*self.equations.assemble(self.windows(mI, mJ)), method="lu")[0]
            difference = self.difference_of(I, J, solution)
        mask = None
        if contamination is not None:
            spread = self.difference_of(contamination.astype(np.float64), self.xp.zeros_like(I), solution,
                                        background=False)
            mask = spread < CONTAMINATION_THRESHOLD
        return solution, difference, mask


def _lag_sum(p, rows):
    """(4 w0 + 1, rows): sums the frequency rows k0 = 0..N0/2 of the column-transformed products into the lags
    [-2 w0, 2 w0] along the rows, with the Hermitian weights (1 for k0 = 0 and N0/2, 2 otherwise) and 1/(N0 N1): the
    real part of the product is the correlation."""
    k0 = np.arange(rows)
    weights = np.full(rows, 2.0)
    weights[0] = 1.0
    if p.N0 % 2 == 0:
        weights[-1] = 1.0
    lags = np.arange(-2 * p.w0, 2 * p.w0 + 1)
    return weights * np.exp(2j * np.pi * np.outer(lags, k0) / p.N0) / p.pixels
