"""SFFT's entry points on mathpy's backend, with SFFT's signatures: :func:`GSS` is ``GeneralSFFTSubtract_PureCupy.GSS``
(and ``GeneralSFFTSubtract.GSS`` for NumPy arrays), :func:`PCCP` is ``PureCupy_Customized_Packet.PCCP``. A backend
(its plans and buffers) is made on the first call for a configuration, device and stream and reused after."""

import numpy as np

from .backend import SFFTBackend
from .params import Params

__all__ = ["GSS", "PCCP", "backend_for"]

_BACKENDS = {}


def _array_module(array):
    if hasattr(array, "__cuda_array_interface__"):
        import cupy
        return cupy
    return np


def backend_for(params, like):
    """The :class:`~.backend.SFFTBackend` for ``params`` on the device of the array ``like`` (and the current CuPy
    stream), made on first use."""
    xp = _array_module(like)
    where = (xp.cuda.Device().id, xp.cuda.get_current_stream().ptr) if xp is not np else None
    key = (params, xp.__name__, where)
    backend = _BACKENDS.get(key)
    if backend is None:
        backend = _BACKENDS[key] = SFFTBackend(params, xp)
    return backend


def GSS(PixA_I, PixA_J, PixA_mI, PixA_mJ, SFFTConfig, ContamMask_I=None, VERBOSE_LEVEL=0):
    """SFFT's ``GeneralSFFTSubtract.GSS``: subtract I convolved with the matching kernel from J, the kernel and the
    background fitted on the masked pair (mI, mJ).

    Parameters
    ----------
    PixA_I, PixA_J, PixA_mI, PixA_mJ : array
        (N0, N1) float NumPy (mathpy's CPU execution space) or CuPy (GPU) arrays, NaN-free: I is convolved, J is
        not; the masked pair is what the fit sees.
    SFFTConfig : tuple, dict or Params
        SFFT's configuration (``SingleSFFTConfigure.SSC``'s result, either backend) or a :class:`~.params.Params`.
    ContamMask_I : array, optional
        I's contaminated pixels (True / 1); the result's third item is then where they spread in the convolved I.
    VERBOSE_LEVEL : int, optional
        Accepted for SFFT's signature; nothing is printed.

    Returns
    -------
    (Solution, PixA_DIFF, ContamMask_CI)
        SFFT's solution vector (its order and units), the difference ``J - K (x) I - background`` (float64) and the
        convolved contamination mask (None without ``ContamMask_I``), on the inputs' device.
    """
    params = SFFTConfig if isinstance(SFFTConfig, Params) else Params.from_sfft(SFFTConfig)
    return backend_for(params, PixA_I).subtract(PixA_I, PixA_J, PixA_mI, PixA_mJ, ContamMask_I)


def PCCP(PixA_REF_GPU, PixA_SCI_GPU, PixA_mREF_GPU, PixA_mSCI_GPU, ForceConv, GKerHW, KerPolyOrder=2, BGPolyOrder=2,
         ConstPhotRatio=True, CUDA_DEVICE_4SUBTRACT="0", VERBOSE_LEVEL=0):
    """SFFT's ``PureCupy_Customized_Packet.PCCP`` (the entry point of the Roman supernova pipeline): the NaN pixels of
    either image are filled from the masked images for the subtraction and NaN in the difference;
    ``ForceConv="REF"`` gives SCI - K (x) REF, ``"SCI"`` gives K (x) SCI - REF (so transients on SCI stay positive).
    Returns (Solution, PixA_DIFF). Arrays may be NumPy (CPU) or CuPy (GPU, on ``CUDA_DEVICE_4SUBTRACT``)."""
    if ForceConv not in ("REF", "SCI"):
        raise ValueError(f"ForceConv must be 'REF' or 'SCI', got {ForceConv!r}")
    xp = _array_module(PixA_REF_GPU)
    images = {"PixA_REF_GPU": PixA_REF_GPU, "PixA_SCI_GPU": PixA_SCI_GPU, "PixA_mREF_GPU": PixA_mREF_GPU,
              "PixA_mSCI_GPU": PixA_mSCI_GPU}
    for name, image in images.items():
        if getattr(image, "ndim", None) != 2:
            raise ValueError(f"{name} must be a 2-D array, got {type(image).__name__} of shape "
                             f"{getattr(image, 'shape', None)}")
    for name in ("PixA_mREF_GPU", "PixA_mSCI_GPU"):
        if bool(xp.isnan(images[name]).any()):
            raise ValueError(f"{name} contains NaN; the masked images must be NaN-free")
    params = Params(*PixA_REF_GPU.shape, GKerHW, GKerHW, KerPolyOrder, BGPolyOrder, bool(ConstPhotRatio))
    if xp is not np:
        with xp.cuda.Device(int(CUDA_DEVICE_4SUBTRACT)):
            return _packet(xp, params, ForceConv, PixA_REF_GPU, PixA_SCI_GPU, PixA_mREF_GPU, PixA_mSCI_GPU)
    return _packet(xp, params, ForceConv, PixA_REF_GPU, PixA_SCI_GPU, PixA_mREF_GPU, PixA_mSCI_GPU)


def _packet(xp, params, side, ref, sci, masked_ref, masked_sci):
    (i, j), (mi, mj) = ((ref, sci), (masked_ref, masked_sci)) if side == "REF" else ((sci, ref), (masked_sci, masked_ref))
    nan = xp.isnan(ref) | xp.isnan(sci)
    any_nan = bool(nan.any())
    if any_nan:
        i, j = xp.where(nan, mi, i), xp.where(nan, mj, j)
    solution, difference, _ = GSS(i, j, mi, mj, params)
    if any_nan:
        difference[nan] = np.nan
    if side == "SCI":
        difference *= -1
    return solution, difference
