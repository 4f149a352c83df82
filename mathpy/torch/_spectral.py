"""The Fourier Neural Operator's spectral convolution (neuraloperator's ``SpectralConv``), with less work than a full
transform.

``y = irfftn(W * rfftn(x)[low modes]) + b``: a real FFT over the grid axes, a complex linear map of the channels at
each kept low mode, the inverse FFT back to the grid. neuraloperator transforms the whole grid, shifts it, allocates
the full zero spectrum and transforms it all back. Here:

- **a pruned transform** (:mod:`._pruned`): the last axis is transformed first (R2C) and cut to its kept bins; each
  further axis is transformed over the kept columns only, and cut in turn. Back, each pass pads only the axis it
  transforms. At 512² with 16 modes the second pass runs over 9 of 257 columns. The last axis's two passes (the only
  ones over the whole grid) run as an R2C FFT cut to the kept bins and a C2R FFT of the padded bins, or, with
  ``last_axis="gemm"``, as GEMMs with the kept bins' DFT matrix, so that no full half spectrum is written at all
  (``"auto"`` takes the FFT form: see ``_gemm_last_axis``);
- **the weight multiply is one batched complex GEMM** over the modes (:func:`mathpy.matmul`): ``(M, B, C) @ (M, C, O)``;
- **the bias goes into the DC mode** of the mixed spectrum (a constant added to every grid point is the DC bin of the
  inverse transform), instead of another pass over the output.

Gradients are exact (each pruned op's backward is its padded partner; the GEMM's is mathpy.matmul's), and everything
compiles (``torch.compile(fullgraph=True)``).

Modes follow neuraloperator: ``n_modes[i]`` modes along grid axis ``i``, of which the last axis keeps
``n_modes[-1] // 2 + 1`` non-negative frequencies (it is the real transform's halved axis), the others frequencies
``-(m // 2) .. (m - 1) // 2``. The weight is ``(*modes, in_channels, out_channels)`` with each non-last mode axis in
FFT order (0, 1, ..., then the negative frequencies), which is neuraloperator's weight ``(in, out, *modes)`` with those
axes ``ifftshift``-ed (:meth:`SpectralConv.load_neuraloperator`).
"""

import math

import torch

from ..host.fft._numpy_rules import check_norm
from ..host.matmul import matmul as _mathpy_matmul
from ._pruned import c2c_low, c2c_pad, c2r_low, c2r_low_gemm, r2c_low, r2c_low_gemm

__all__ = ["SpectralConv", "spectral_conv"]

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def spectral_conv(x, weight, bias=None, norm="forward", last_axis="auto"):
    """The spectral convolution of ``x`` ``(batch, in_channels, *grid)`` with ``weight`` ``(*modes, in_channels,
    out_channels)`` (complex; ``modes``: the kept modes per grid axis, the last one the non-negative frequencies of the
    real transform) and a real ``bias`` ``(out_channels,)``; ``norm`` the FFT normalisation of the forward transform
    (neuraloperator's default: ``"forward"``); ``last_axis``: how the last grid axis is transformed, ``"fft"``,
    ``"gemm"`` (its kept bins' DFT matrix) or ``"auto"``. Computed in ``weight``'s precision (16-bit input: the
    last axis's GEMMs in that dtype, with tensor cores); the result has ``x``'s dtype. See the module docstring."""
    d = weight.dim() - 2
    _check(x, weight, bias, d)
    norm = check_norm(norm)
    modes, (channels, out_channels) = tuple(weight.shape[:d]), tuple(weight.shape[d:])
    grid = tuple(x.shape[2:])
    real = _REAL[weight.dtype]
    gemm = _gemm_last_axis(last_axis, x, modes[-1])
    if gemm:
        y = r2c_low_gemm(x if x.dtype in _GEMM_DTYPES or x.dtype == real else x.to(real), modes[-1], norm)
        y = y if y.dtype == weight.dtype else y.to(weight.dtype)
    else:
        y = r2c_low(x if x.dtype == real else x.to(real), modes[-1], norm)
    for axis in range(d - 1, 0, -1):  # tensor axis 1 + axis holds grid axis ``axis`` (1-based); innermost first
        y = c2c_low(y.movedim(axis + 1, -1), modes[axis - 1], norm).movedim(-1, axis + 1)
    batch, count = y.shape[0], math.prod(modes)
    spectrum = y.reshape(batch, channels, count).permute(2, 0, 1).contiguous()  # (modes, batch, in): one GEMM
    z = _mathpy_matmul(spectrum, weight.reshape(count, channels, out_channels))  # (modes, batch, out)
    if bias is not None:  # a constant on the grid is the DC mode (mode 0) of the unnormalised inverse, times its scale
        z = torch.cat((z[:1] + (bias * _dc_scale(norm, grid)).to(z.dtype), z[1:]))
    z = z.permute(1, 2, 0).reshape(batch, out_channels, *modes)
    for axis in range(1, d):
        z = c2c_pad(z.movedim(axis + 1, -1), grid[axis - 1], norm).movedim(-1, axis + 1)
    if gemm:
        out = c2r_low_gemm(z, grid[-1], norm, x.dtype if x.dtype in _GEMM_DTYPES else real)
    else:
        out = c2r_low(z, grid[-1], norm)
    return out if out.dtype == x.dtype else out.to(x.dtype)


_GEMM_DTYPES = (torch.float16, torch.bfloat16)  # the last axis's GEMMs run in these as they come


def _gemm_last_axis(choice, x, keep):
    """Whether the last axis of ``x`` runs as GEMMs (``choice``: "auto", "fft" or "gemm"; x None: only check it)."""
    if choice not in ("auto", "fft", "gemm"):
        raise ValueError(f"last_axis must be 'auto', 'fft' or 'gemm', not {choice!r}")
    if choice == "gemm" and x is not None and x.is_cuda:
        # on the H200 the layer in this form was 0.12 off (relative) at a 128^2 grid with 16 modes, 64 channels and a
        # batch of 32, while each of its GEMM ops alone, the FFT form and the plain torch layer agreed to 2e-7 (and
        # smaller layers agreed): refused on CUDA until that is found, rather than a wrong result
        raise ValueError("last_axis='gemm' is not available on CUDA devices (wrong results seen on an H200 at 128^2 "
                         "grids); use last_axis='fft' (the default)")
    return choice == "gemm"  # ("auto": the FFT form)


def _dc_scale(norm, grid):
    """What the inverse transform multiplies the DC bin by on its way to every grid point."""
    total = math.prod(grid)
    return {"forward": 1.0, "backward": 1.0 * total, "ortho": math.sqrt(total)}[norm]


def _check(x, weight, bias, d):
    call = "mathpy.torch.spectral_conv"
    if not weight.is_complex() or weight.dtype not in _REAL or d < 1:
        raise TypeError(f"{call}: weight must be a complex64 or complex128 tensor (*modes, in_channels, out_channels), "
                        f"not {weight.dtype} of shape {tuple(weight.shape)}")
    if x.dim() != d + 2 or x.shape[1] != weight.shape[d]:
        raise ValueError(f"{call}: x must be (batch, {weight.shape[d]} channels, {d} grid axes), not of shape "
                         f"{tuple(x.shape)}")
    if x.is_complex() or not (x.is_floating_point()):
        raise TypeError(f"{call}: x must be real floating point, not {x.dtype}")
    grid, modes = x.shape[2:], weight.shape[:d]
    too_many = [i for i in range(d) if modes[i] > (grid[i] // 2 + 1 if i == d - 1 else grid[i])]
    if too_many:
        raise ValueError(f"{call}: grid {tuple(grid)} is too small for the modes {tuple(modes)} (grid axis "
                         f"{too_many[0]} keeps at most {grid[too_many[0]]} modes, the last axis n // 2 + 1)")
    if bias is not None and tuple(bias.shape) != (weight.shape[d + 1],):
        raise ValueError(f"{call}: bias must have shape ({weight.shape[d + 1]},), not {tuple(bias.shape)}")


class SpectralConv(torch.nn.Module):
    """The Fourier layer of an FNO: ``irfftn(W * rfftn(x)[low modes]) + b`` over the last ``len(n_modes)`` axes of
    ``x`` ``(batch, in_channels, *grid)`` (1-D, 2-D or 3-D grids, any number of axes), with a pruned transform and
    the channel mixing as one complex GEMM (see :mod:`mathpy.torch`). ``n_modes``: modes kept per grid axis, as
    neuraloperator counts them (the last axis keeps ``n_modes[-1] // 2 + 1`` non-negative frequencies); ``norm``:
    the forward transform's normalisation. ``dtype``: the real dtype of the computation (float32: complex64 weights;
    float64: complex128); inputs of other floating dtypes (bfloat16, float16) are computed in it and come back in
    their own dtype. ``last_axis``: ``"auto"`` (default), ``"fft"`` or ``"gemm"``, how the last grid axis, the only
    one transformed over the whole grid, is transformed (:func:`spectral_conv`).

    Parameters: ``weight`` ``(*modes, in_channels, out_channels)`` complex, initialised as neuraloperator does
    (complex normal with standard deviation ``sqrt(2 / (in + out))``), and ``bias`` ``(out_channels,)``.

    >>> import torch, mathpy.torch as mt
    >>> layer = mt.SpectralConv(4, 6, n_modes=(8, 8))
    >>> tuple(layer.weight.shape), layer(torch.randn(2, 4, 32, 32)).shape
    ((8, 5, 4, 6), torch.Size([2, 6, 32, 32]))
    """

    def __init__(self, in_channels, out_channels, n_modes, bias=True, norm="forward", device=None, dtype=None,
                 last_axis="auto"):
        super().__init__()
        _gemm_last_axis(last_axis, None, 1)  # (checks the value)
        self.last_axis = last_axis
        n_modes = (n_modes,) if isinstance(n_modes, int) else tuple(n_modes)
        if not n_modes or any(not isinstance(m, int) or m < 1 for m in n_modes):
            raise ValueError(f"n_modes must be positive integers, one per grid axis, not {n_modes!r}")
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if dtype not in _COMPLEX:
            raise TypeError(f"dtype must be torch.float32 or torch.float64 (the transforms' precision), not {dtype}")
        self.in_channels, self.out_channels, self.n_modes, self.norm = in_channels, out_channels, n_modes, \
            check_norm(norm)
        modes = (*n_modes[:-1], n_modes[-1] // 2 + 1)
        std = math.sqrt(2.0 / (in_channels + out_channels))
        self.weight = torch.nn.Parameter(std * torch.randn(*modes, in_channels, out_channels, device=device,
                                                           dtype=_COMPLEX[dtype]))
        self.bias = torch.nn.Parameter(std * torch.randn(out_channels, device=device, dtype=dtype)) if bias else None

    def forward(self, x):
        return spectral_conv(x, self.weight, self.bias, self.norm, self.last_axis)

    @torch.no_grad()
    def load_neuraloperator(self, layer):
        """Copy the weights of neuraloperator's dense ``SpectralConv`` ``layer`` (same channels, modes and norm) into
        this layer: its weight ``(in, out, *modes)`` has the non-last mode axes centred (``fftshift``-ed)."""
        weight = layer.weight.to_tensor() if hasattr(layer.weight, "to_tensor") else layer.weight
        d = len(self.n_modes)
        if tuple(weight.shape) != (self.in_channels, self.out_channels, *self.weight.shape[:d]):
            raise ValueError(f"load_neuraloperator: its weight has shape {tuple(weight.shape)}; this layer's needs "
                             f"({self.in_channels}, {self.out_channels}, {', '.join(map(str, self.weight.shape[:d]))})")
        if getattr(layer, "fft_norm", self.norm) != self.norm:
            raise ValueError(f"load_neuraloperator: its fft_norm is {layer.fft_norm!r}, this layer's {self.norm!r}")
        weight = torch.fft.ifftshift(weight, dim=tuple(range(2, d + 1))) if d > 1 else weight
        self.weight.copy_(weight.permute(*range(2, d + 2), 0, 1))
        if self.bias is not None:
            self.bias.copy_(layer.bias.reshape(-1) if layer.bias is not None else torch.zeros_like(self.bias))

    def extra_repr(self):
        return f"{self.in_channels}, {self.out_channels}, n_modes={self.n_modes}, norm={self.norm!r}, " \
            f"last_axis={self.last_axis!r}"
