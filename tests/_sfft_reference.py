"""An independent float64 reference of SFFT's subtraction for the tests: the least-squares fit written in real space
from its definition (Hu et al. 2022), with an explicit design matrix and LAPACK's least squares, no Fourier
transform anywhere.

The model of J is ``sum_{ij, s} a_{ij,s} phi_{ij,s} + sum_pq b_pq T_pq`` with the fields ``I_ij = I cx^i cy^j`` (cx =
(row + 1) / N0, cy = (column + 1) / N1), the basis ``phi_{ij,s} = I_ij(x - s) - I_ij(x)`` for kernel offsets s != 0
and ``I_ij`` at s = 0 (circular shifts), ``T_pq = cx^p cy^q``; ConstPhotRatio drops the s = 0 terms of ij != 0.
SFFT's solution holds ``a * N0 N1`` (its basis carries a factor 1 / (N0 N1)) and b, in SFFT's orders."""

import numpy as np

__all__ = ["design", "reference_subtract", "unknowns"]


def unknowns(n0, n1, w, dk, db, const_phot_ratio=True):
    """(orders of ij, orders of pq, offsets (Fab, 2), free column indices) in SFFT's order."""
    ij = [(i, j) for i in range(dk + 1) for j in range(dk + 1 - i)]
    pq = [(p, q) for p in range(db + 1) for q in range(db + 1 - p)]
    offsets = [(a, b) for a in range(-w, w + 1) for b in range(-w, w + 1)]
    centre = offsets.index((0, 0))
    free = [k for k in range(len(ij) * len(offsets) + len(pq))
            if not (const_phot_ratio and k < len(ij) * len(offsets) and k % len(offsets) == centre
                    and k // len(offsets) > 0)]
    return ij, pq, offsets, free


def design(image, w, dk, db):
    """(N0 N1, NEQ) design matrix of all unknowns, float64."""
    n0, n1 = image.shape
    ij, pq, offsets, _ = unknowns(n0, n1, w, dk, db)
    cx = (np.arange(n0)[:, None] + 1.0) / n0
    cy = (np.arange(n1)[None, :] + 1.0) / n1
    columns = []
    for i, j in ij:
        field = image.astype(np.float64) * cx ** i * cy ** j
        for a, b in offsets:
            shifted = np.roll(field, (a, b), axis=(0, 1))
            columns.append(shifted if (a, b) == (0, 0) else shifted - field)
    for p, q in pq:
        columns.append(np.broadcast_to(cx ** p * cy ** q, (n0, n1)))
    return np.stack([c.reshape(-1) for c in columns], axis=1)


def reference_subtract(I, J, mI, mJ, w, dk, db, const_phot_ratio=True):
    """(solution in SFFT's units, difference J - model, the design matrix of mI restricted to the free unknowns)."""
    n0, n1 = I.shape
    ij, _, offsets, free = unknowns(n0, n1, w, dk, db, const_phot_ratio)
    fit = design(mI, w, dk, db)[:, free]
    x = np.zeros(len(ij) * len(offsets) + (db + 1) * (db + 2) // 2)
    x[free] = np.linalg.lstsq(fit, np.asarray(mJ, np.float64).reshape(-1), rcond=None)[0]
    difference = np.asarray(J, np.float64) - (design(I, w, dk, db) @ x).reshape(n0, n1)
    solution = x.copy()
    solution[:len(ij) * len(offsets)] *= n0 * n1
    return solution, difference, fit
