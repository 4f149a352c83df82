"""SFFT's configuration as mathpy's backend reads it: sizes, the order of the unknowns, and which correlations the
normal equations need.

SFFT (Hu et al. 2022) fits the image J with the image I convolved by a kernel on delta functions whose values vary
as polynomials of position, plus a polynomial background. ``Params`` holds what ``SingleSFFTConfigure.SSC`` puts in
its parameter dictionary (``SFFTConfig[0]``) and the orders SFFT numbers its unknowns in, so that the solution
vector means the same thing here and there:

- kernel offsets ``ab``: ``(a, b)`` for a in [-w0, w0] (rows), b in [-w1, w1] (columns), a major;
- kernel polynomials ``ij``: ``(i, j)`` with i + j <= DK, i major; background polynomials ``pq`` likewise (DB);
- the solution: ``a[ij * Fab + ab]`` for every (ij, ab), then ``b[pq]``; with ConstPhotRatio the coefficients of
  the kernel centre for ij > 0 are held at zero (SFFT's "forbidden stripes"), so the kernel's sum is one constant.

The *fields* are the real images the correlations are taken between: ``I * cx^i cy^j`` for every ij, then J, then
the background polynomials ``cx^p cy^q`` (cx = (row + 1) / N0, cy = (column + 1) / N1, SFFT's scaled
coordinates). A *slot* is one correlation ``c_ab(tau) = sum_y f_a(y) f_b(y + tau)`` of two fields.
"""

import dataclasses

import numpy as np

__all__ = ["Params"]

_KEYS = ("N0", "N1", "w0", "w1", "DK", "DB", "ConstPhotRatio")


@dataclasses.dataclass(frozen=True)
class Params:
    """Sizes of one SFFT configuration (SFFT's names). Build it with :meth:`from_sfft` from SFFT's configuration, or
    directly (``Params(N0, N1, w0, w1, DK, DB, ConstPhotRatio)``) without SFFT installed."""

    N0: int
    N1: int
    w0: int
    w1: int
    DK: int
    DB: int
    ConstPhotRatio: bool = True

    def __post_init__(self):
        for name in ("N0", "N1", "w0", "w1", "DK", "DB"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise TypeError(f"Params.{name} must be an integer, got {value!r}")
        for name in ("DK", "DB"):
            if not 0 <= getattr(self, name) <= 3:
                raise ValueError(f"Params.{name} must be 0, 1, 2 or 3 (SFFT's polynomial orders), got "
                                 f"{getattr(self, name)}")
        for name, size, half in (("w0", self.N0, self.w0), ("w1", self.N1, self.w1)):
            if half < 0 or 4 * half + 1 > size:
                raise ValueError(f"Params.{name} = {half}: the kernel half-width must be at least 0 and 4 {name} + 1 "
                                 f"(the lags of the normal equations) at most the image size {size}")
        if not isinstance(self.ConstPhotRatio, (bool, np.bool_)):
            raise TypeError(f"Params.ConstPhotRatio must be True or False, got {self.ConstPhotRatio!r}")

    @classmethod
    def from_sfft(cls, config):
        """From SFFT's configuration: the tuple ``SingleSFFTConfigure.SSC`` returns (its parameter dictionary
        first) or that dictionary."""
        params = config[0] if isinstance(config, tuple) else config
        if not isinstance(params, dict) or any(key not in params for key in _KEYS):
            raise TypeError(f"expected SFFT's configuration (SingleSFFTConfigure.SSC's tuple or its parameter "
                            f"dictionary, with keys {', '.join(_KEYS)}), got {type(config).__name__}")
        return cls(*(int(params[key]) if key != "ConstPhotRatio" else bool(params[key]) for key in _KEYS))

    # --- SFFT's derived sizes ------------------------------------------------------------------------------------
    @property
    def L0(self):
        return 2 * self.w0 + 1

    @property
    def L1(self):
        return 2 * self.w1 + 1

    @property
    def Fab(self):
        return self.L0 * self.L1

    @property
    def Fij(self):
        return (self.DK + 1) * (self.DK + 2) // 2

    @property
    def Fpq(self):
        return (self.DB + 1) * (self.DB + 2) // 2

    @property
    def Fijab(self):
        return self.Fij * self.Fab

    @property
    def NEQ(self):
        return self.Fijab + self.Fpq

    @property
    def pixels(self):
        return self.N0 * self.N1

    # --- orders --------------------------------------------------------------------------------------------------
    @property
    def ij(self):
        """Kernel polynomial exponents (i, j), SFFT's order."""
        return tuple((i, j) for i in range(self.DK + 1) for j in range(self.DK + 1 - i))

    @property
    def pq(self):
        """Background polynomial exponents (p, q), SFFT's order."""
        return tuple((p, q) for p in range(self.DB + 1) for q in range(self.DB + 1 - p))

    @property
    def offsets(self):
        """(Fab, 2) kernel offsets (a, b), SFFT's order."""
        a, b = np.meshgrid(np.arange(-self.w0, self.w0 + 1), np.arange(-self.w1, self.w1 + 1), indexing="ij")
        return np.stack([a.reshape(-1), b.reshape(-1)], axis=1)

    @property
    def free(self):
        """Indices of the unknowns that are solved for: all, or without the forbidden stripes (ConstPhotRatio)."""
        keep = np.ones(self.NEQ, bool)
        if self.ConstPhotRatio:
            centre = self.w0 * self.L1 + self.w1
            keep[np.arange(1, self.Fij) * self.Fab + centre] = False
        return np.flatnonzero(keep)

    # --- fields and slots ----------------------------------------------------------------------------------------
    @property
    def fields(self):
        """E: the kernel-weighted images, J, the background polynomials."""
        return self.Fij + 1 + self.Fpq

    @property
    def J(self):
        """The field index of J."""
        return self.Fij

    def T(self, pq):
        """The field index of background polynomial ``pq``."""
        return self.Fij + 1 + pq

    @property
    def slots(self):
        """The correlations (a, b) the normal equations need, in this order: kernel x kernel (a <= b: the other half
        is the same correlation at -tau), kernel x J, kernel x background, background x J. The background x
        background block depends on nothing but the sizes (:meth:`background_gram`)."""
        k = range(self.Fij)
        return (tuple((a, b) for a in k for b in k if a <= b) + tuple((a, self.J) for a in k)
                + tuple((a, self.T(pq)) for a in k for pq in range(self.Fpq))
                + tuple((self.T(pq), self.J) for pq in range(self.Fpq)))

    def coordinates(self):
        """SFFT's scaled coordinates cx (N0, 1) and cy (1, N1), float64."""
        return ((np.arange(self.N0, dtype=np.float64)[:, None] + 1) / self.N0,
                (np.arange(self.N1, dtype=np.float64)[None, :] + 1) / self.N1)

    def background_gram(self):
        """(Fpq, Fpq) sum over the image of the products of the background polynomials (float64)."""
        cx, cy = self.coordinates()
        sx = np.array([[np.sum(cx ** (p + p2)) for p2 in range(self.DB + 1)] for p in range(self.DB + 1)])
        sy = np.array([[np.sum(cy ** (q + q2)) for q2 in range(self.DB + 1)] for q in range(self.DB + 1)])
        return np.array([[sx[p, p2] * sy[q, q2] for p2, q2 in self.pq] for p, q in self.pq])
