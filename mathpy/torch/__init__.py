"""mathpy for PyTorch training: autograd, torch.compile and fused layers.

Nothing to call to turn it on: :mod:`mathpy.fft`'s functions and :func:`mathpy.matmul` hand a torch tensor that requires
grad (with grad mode on), or any torch tensor while torch.compile traces, to this package, which runs the same
computation as torch custom ops (``torch.ops.mathpy.*``) with backward formulas that call mathpy again: the backward of
an FFT is an FFT, the backward of a matmul is matmuls. Fused matmul epilogs train fused. Arguments with no backward
(Python callbacks, ``out=``, in-place options, the stateful ``FFT`` / ``Matmul``) raise an error that names them,
never a silently detached result.

Public here:

- :class:`Linear`: a drop-in :class:`torch.nn.Linear` whose bias and activation (``"relu"``, ``"gelu"``) run in the
  GEMM's epilog, and whose backward gets the bias gradient out of the weight-gradient GEMM (BGRADB);
- :class:`MLP`: ``Linear -> activation -> Linear`` as one node, so the activation's derivative comes out of the
  second layer's input-gradient GEMM (DGELU / DRELU_BGRAD, the latter with the first bias gradient);
- :func:`linear`, :func:`mlp`: the same as functions;
- :class:`SpectralConv`: the Fourier layer of a Fourier Neural Operator (neuraloperator's ``SpectralConv``) with a
  pruned multi-dimensional transform (the later FFT passes run over the kept modes only), the channel mixing as one
  batched complex GEMM over the modes and the bias in the DC mode; :func:`spectral_conv` as a function.

``import mathpy`` does not import torch; this package does.
"""

from . import _fft  # noqa: F401  (declares torch.ops.mathpy.fft_*)
from ._linear import MLP, Linear, linear, mlp
from ._spectral import SpectralConv, spectral_conv

__all__ = ["Linear", "MLP", "linear", "mlp", "SpectralConv", "spectral_conv"]
