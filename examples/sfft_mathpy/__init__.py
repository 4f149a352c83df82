"""SFFT's image subtraction (Hu et al. 2022, the ``sfft`` package) on mathpy: the same configuration, inputs and
outputs as SFFT's ``GeneralSFFTSubtract_PureCupy.GSS``, with the FFTs and the pointwise work around them in mathpy's
planned transforms and fused callbacks, on mathpy's CPU execution space (NumPy arrays) or a GPU (CuPy arrays).

It does not fork SFFT: it reads SFFT's configuration (:meth:`Params.from_sfft`) and computes the same normal
equations with its own transforms (:mod:`.backend`), so SFFT is needed only to make that configuration (a
:class:`Params` made directly needs no SFFT).

- :mod:`.params`: the configuration, the order of the unknowns, the fields and the correlations;
- :mod:`.callbacks`: the FFT callbacks; :mod:`.system`: the linear system and its solve;
- :mod:`.backend`: the plans and buffers (:class:`SFFTBackend`); :mod:`.packets`: SFFT's entry points.
"""

from .backend import SFFTBackend
from .packets import GSS, PCCP, backend_for
from .params import Params
from .system import kernel_images

__all__ = ["GSS", "PCCP", "Params", "SFFTBackend", "backend_for", "kernel_images"]
