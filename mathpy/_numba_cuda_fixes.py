"""Narrow compatibility fixes for the installed stack, applied before numba-cuda compiles anything: by the modules
that compile with it (:mod:`mathpy.device` at its import, :mod:`mathpy.jit`'s compile paths), never by
``import mathpy``, which leaves NumPy as it found it."""

import numpy as np

__all__ = ["patch_numpy_for_numba_cuda", "patch_numba_cuda_ufuncs"]


def patch_numpy_for_numba_cuda():
    """numba-cuda 0.30 overloads ``np.row_stack``, which NumPy 2.5 removed; its first compile then fails with an
    AttributeError. Restoring the name as its documented equivalent (``np.vstack``) is all it needs."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


_UFUNCS_PATCHED = []


def patch_numba_cuda_ufuncs():
    """numba-cuda 0.30 types ``np.exp`` (and a few other NumPy ufuncs) on scalars in device code but has no lowering
    for them: compiling ``np.exp(x)`` fails with ``KeyError: <ufunc 'exp'>``. Add the real float32/float64 loops of the
    missing ones, lowered as their ``math`` equivalents (what numba-cuda does for ``np.log``), so one epilog written
    with NumPy functions compiles for the CPU and the GPU alike. Only entries that are missing are added."""
    if _UFUNCS_PATCHED:
        return
    patch_numpy_for_numba_cuda()
    import math

    from numba.cuda import ufuncs
    from numba.cuda.mathimpl import get_binary_impl_for_fn_and_ty, get_unary_impl_for_fn_and_ty

    db = ufuncs.ufunc_db()

    def unary(fn):
        def impl(context, builder, sig, args):
            return get_unary_impl_for_fn_and_ty(fn, sig.args[0])(context, builder, sig, args)
        return impl

    def binary(fn):
        def impl(context, builder, sig, args):
            return get_binary_impl_for_fn_and_ty(fn, sig.args[0])(context, builder, sig, args)
        return impl

    for ufunc, fn in ((np.exp, math.exp), (np.expm1, math.expm1), (np.log1p, math.log1p), (np.sqrt, math.sqrt),
                      (np.floor, math.floor), (np.ceil, math.ceil), (np.trunc, math.trunc), (np.fabs, math.fabs),
                      (np.erf if hasattr(np, "erf") else None, math.erf)):
        if ufunc is not None and ufunc not in db:
            db[ufunc] = {"f->f": unary(fn), "d->d": unary(fn)}
    for ufunc, fn in ((np.power, math.pow), (np.copysign, math.copysign)):
        if ufunc not in db:
            db[ufunc] = {"ff->f": binary(fn), "dd->d": binary(fn)}
    _UFUNCS_PATCHED.append(True)
