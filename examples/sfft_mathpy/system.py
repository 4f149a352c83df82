"""SFFT's linear system from the correlation windows, and its solve.

With the basis functions ``phi_{e,s}(x) = f_e(x - s) - u(s) f_e(x)`` (u(s) = 0 at the kernel centre, 1 elsewhere:
SFFT's delta-minus-centre basis) for every kernel field e and offset s, and the background polynomials T_pq, the
least-squares normal equations of ``J ~ sum a_{e,s} phi_{e,s} + sum b_pq T_pq`` are, with
``C_ab(tau) = sum_y f_a(y) f_b(y + tau)``::

    <phi_{e,s}, phi_{e',s'}> = C_ee'(s - s') - u(s') C_ee'(s) - u(s) C_ee'(-s') + u(s) u(s') C_ee'(0)
    <phi_{e,s}, T_pq>        = C_{e,T}(s) - u(s) C_{e,T}(0)          <T_pq, T_p'q'> = sum T_pq T_p'q'
    <phi_{e,s}, J>           = C_{e,J}(s) - u(s) C_{e,J}(0)          <T_pq, J>      = C_{T,J}(0)

SFFT builds the same matrix from full-image FFTs of every product of spectra and scales it by powers of 1/(N0 N1):
its kernel unknowns multiply ``phi / (N0 N1)``, so its solution's kernel part is ``N0 N1`` times the one here (the
background part is the same). The matrix is symmetric positive definite: it is solved by Cholesky after a symmetric
diagonal scaling, in float64; a matrix that Cholesky finds not positive definite (rounding, a degenerate image) is
solved by LU with partial pivoting, as SFFT solves it.
"""

import numpy as np

__all__ = ["NormalEquations", "kernel_images"]


class NormalEquations:
    """Index tables of one configuration, kept on the device of ``xp``; :meth:`assemble` gathers the system from the
    correlation windows, :meth:`solve` returns SFFT's solution vector, :meth:`kernels` the kernel images."""

    def __init__(self, params, xp=np):
        p = self.params = params
        self.xp = xp
        slot = {pair: i for i, pair in enumerate(p.slots)}
        k = range(p.Fij)
        # kernel x kernel: C_ab for a <= b, the other half flipped (tau -> -tau)
        self._kk_slot = xp.asarray([[slot[(min(a, b), max(a, b))] for b in k] for a in k])
        self._kk_flip = xp.asarray([[a > b for b in k] for a in k])
        self._kb_slot = xp.asarray([[slot[(a, p.T(pq))] for pq in range(p.Fpq)] for a in k])
        self._kj_slot = xp.asarray([slot[(a, p.J)] for a in k])
        self._bj_slot = xp.asarray([slot[(p.T(pq), p.J)] for pq in range(p.Fpq)])
        s = p.offsets
        r0, r1 = 2 * p.w0, 2 * p.w1
        d = s[:, None, :] - s[None, :, :]
        self._lag = tuple(xp.asarray(a) for a in (d[..., 0] + r0, d[..., 1] + r1))      # s - s'
        self._at = tuple(xp.asarray(a) for a in (s[:, 0] + r0, s[:, 1] + r1))           # s
        self._at_negative = tuple(xp.asarray(a) for a in (r0 - s[:, 0], r1 - s[:, 1]))  # -s
        self._centre = (r0, r1)
        self._u = xp.asarray(np.any(s != 0, axis=1).astype(np.float64))
        self._gram = xp.asarray(p.background_gram())
        self._free = xp.asarray(p.free)

    def assemble(self, windows):
        """(M, r): the normal matrix (NEQ, NEQ) and right-hand side (NEQ,) over all unknowns, float64, from the
        correlation windows (slots, 4 w0 + 1, 4 w1 + 1), lag (tau0, tau1) at [tau0 + 2 w0, tau1 + 2 w1]."""
        xp, p, u = self.xp, self.params, self._u
        c = windows[self._kk_slot]                                            # (Fij, Fij, lags0, lags1)
        c = xp.where(self._kk_flip[:, :, None, None], c[:, :, ::-1, ::-1], c)
        at_s, at_neg, centre = c[:, :, self._at[0], self._at[1]], c[:, :, self._at_negative[0], self._at_negative[1]], \
            c[:, :, self._centre[0], self._centre[1]]
        kk = (c[:, :, self._lag[0], self._lag[1]] - at_s[:, :, :, None] * u[None, :]
              - u[:, None] * at_neg[:, :, None, :] + (u[:, None] * u[None, :]) * centre[:, :, None, None])
        kk = kk.transpose(0, 2, 1, 3).reshape(p.Fijab, p.Fijab)
        kb = self._projection(windows[self._kb_slot])                          # (Fij, Fpq, Fab)
        kb = kb.transpose(0, 2, 1).reshape(p.Fijab, p.Fpq)
        m = xp.concatenate([xp.concatenate([kk, kb], axis=1), xp.concatenate([kb.T, self._gram], axis=1)], axis=0)
        rhs = xp.concatenate([self._projection(windows[self._kj_slot]).reshape(-1),
                              windows[self._bj_slot][:, self._centre[0], self._centre[1]]])
        return m, rhs

    def _projection(self, c):
        """C(s) - u(s) C(0) for windows c (..., lags0, lags1): (..., Fab)."""
        return c[..., self._at[0], self._at[1]] - self._u * c[..., self._centre[0], self._centre[1], None]

    def solve(self, m, rhs, method="cholesky"):
        """(SFFT's solution vector (NEQ,) float64, relative residual) of the system (M, r) over all unknowns: the
        free ones solved (``method`` "cholesky" or "lu"), the forbidden stripes zero, the kernel part in SFFT's
        units. The residual ``|A x - b| / (|A| |x| + |b|)`` of the scaled system is a device scalar (reading it
        waits for the device): far above rounding when Cholesky met a matrix that is not numerically positive
        definite (NumPy raises there, CuPy does not)."""
        xp, p = self.xp, self.params
        free = self._free
        a, b = m[free][:, free], rhs[free]
        scale = 1 / xp.sqrt(xp.diagonal(a))
        a = a * scale[:, None] * scale[None, :]
        b = b * scale
        if method not in ("cholesky", "lu"):
            raise ValueError(f"method must be 'cholesky' or 'lu', got {method!r}")
        x = self._cholesky_solve(a, b) if method == "cholesky" else xp.linalg.solve(a, b)
        residual = xp.linalg.norm(a @ x - b) / (xp.linalg.norm(a) * xp.linalg.norm(x) + xp.linalg.norm(b))
        solution = xp.zeros(p.NEQ, np.float64)
        solution[free] = x * scale
        solution[:p.Fijab] *= p.pixels
        return solution, residual

    def _cholesky_solve(self, a, b):
        """A x = b for symmetric positive definite A; NaN where A is not (NumPy raises, CuPy fills NaN)."""
        xp = self.xp
        try:
            lower = xp.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            return xp.full(b.shape, np.nan)
        if xp is np:
            import scipy.linalg as linalg
        else:
            import cupyx.scipy.linalg as linalg
        y = linalg.solve_triangular(lower, b, lower=True)
        return linalg.solve_triangular(lower, y, lower=True, trans="T")

    def kernels(self, solution):
        """(Fij, L0, L1) kernel images of a solution (:func:`kernel_images`)."""
        return kernel_images(self.params, solution)


def kernel_images(params, solution):
    """(Fij, L0, L1) kernel images of SFFT's solution vector in the basis of the fields (the model is
    ``sum_e K_e (x) f_e``): the coefficients, with the centre holding a_centre minus the other offsets' sum; NumPy or
    CuPy, as ``solution``."""
    p = params
    a = solution[:p.Fijab].reshape(p.Fij, p.Fab) / p.pixels
    centre = p.w0 * p.L1 + p.w1
    kernel = a.copy()
    kernel[:, centre] = 2 * a[:, centre] - a.sum(axis=1)
    return kernel.reshape(p.Fij, p.L0, p.L1)
