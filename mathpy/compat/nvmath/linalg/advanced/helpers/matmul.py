"""nvmath-python's MXFP8 block-scale helpers (``nvmath.linalg.advanced.helpers.matmul``), for torch tensors.

MXFP8 (cuBLASLt's block scaling, ``MatmulOptions(block_scaling=True)``) scales each block of 32 consecutive elements
along a matrix's contiguous dimension by ``2 ** (s - 127)``, ``s`` one uint8 (UE8M0) per block. cuBLASLt stores the
scales of each 128 x 128 tile of a matrix as 512 bytes: the tile's 128 rows (along the non-contiguous dimension) by 4
blocks, with row ``r`` and block ``j`` at ``(r % 32) * 16 + (r // 32) * 4 + j``; tiles follow one another along the
contiguous dimension first, and matrices of a batch one after the other.

Block scaling runs only on Blackwell GPUs (compute capability 10.0 or newer). mathpy's matmul refuses it (naming
Blackwell on an older GPU, before any work), and so does :func:`create_mxfp8_scale` for a tensor on such a GPU: an
MXFP8 program stops at its first step with the reason. The other helpers are arithmetic on the scales and run
anywhere (a CPU tensor too), as nvmath-python's; :func:`invert_mxfp8_scale` leaves its argument unchanged (nvmath's
clamps 255 to 254 in place).

>>> import torch
>>> from mathpy.compat.nvmath.linalg.advanced.helpers.matmul import create_mxfp8_scale, get_mxfp8_scale_offset
>>> a = torch.zeros(256, 256, dtype=torch.float8_e4m3fn)   # two by two tiles
>>> scale = create_mxfp8_scale(a, -1)                       # 2 ** -1 for every block: 127 - 1 = 126
>>> tuple(scale.shape), int(scale[0])
((2048,), 126)
>>> [get_mxfp8_scale_offset(a, index) for index in [(1, 0), (32, 0), (0, 32), (0, 128), (128, 0)]]
[16, 4, 1, 512, 1024]
"""

from ...... import _cuda
from ......_operands import package_of, wrap_operand

__all__ = ["create_mxfp8_scale", "invert_mxfp8_scale", "get_mxfp8_scale_offset", "apply_mxfp8_scale"]

_BLOCK, _TILE = 32, 128
_BIAS = 127  # UE8M0: the scale is 2 ** (s - 127); 255 encodes NaN


def _torch_only(x, where, what="tensor"):
    package = package_of(x)
    if package != "torch":
        raise ValueError(f"Only torch.Tensor is currently supported by function '{where}'; the specified {what} "
                         f"belongs to '{package or type(x).__name__}' package.")


def _check_scale(scale, where, x=None):
    _torch_only(scale, where, "scale tensor")
    name = str(scale.dtype).replace("torch.", "")
    if name != "uint8":
        raise ValueError(f"The function '{where}' requires the specified scale tensor to have dtype 'uint8', whereas "
                         f"it has dtype '{name}'.")
    if x is not None and tuple(scale.shape) != (x.numel() // _BLOCK,):
        raise ValueError(f"The shape of scale {tuple(scale.shape)} is not compatible with a tensor of shape "
                         f"{tuple(x.shape)}. The expected scale shape is {(x.numel() // _BLOCK,)}.")


def _require_blackwell(x, where):
    device_id = wrap_operand(x).device_id
    if device_id is None:
        return
    major, minor = _cuda.compute_capability(device_id)
    if (major, minor) < (10, 0):
        raise ValueError(f"{where}: MXFP8 block scales are for block-scaled matmuls, which need a Blackwell GPU "
                         f"(compute capability 10.0 or newer); cuda:{device_id} has compute capability "
                         f"{major}.{minor}. Use per-tensor float8 scales (quantization_scales with numbers or "
                         f"one-element float32 tensors) instead")


def create_mxfp8_scale(x, exponent, stream=None):
    """A uint8 block-scale tensor for ``x`` (``x.numel() // 32`` scales, on ``x``'s device) that scales every block
    by ``2 ** exponent`` (``exponent`` an integer in [-127, 128]). ValueError, naming Blackwell, for a tensor on a GPU
    of compute capability below 10.0; ``stream`` is taken for nvmath's signature (torch orders the fill on its
    current stream)."""
    _torch_only(x, "create_mxfp8_scale")
    if isinstance(exponent, bool) or not isinstance(exponent, int) or not -127 <= exponent <= 128:
        raise ValueError("The exponent should be an integer from [-127, 128] range.")
    _require_blackwell(x, "create_mxfp8_scale")
    import torch
    return torch.full((x.numel() // _BLOCK,), exponent + _BIAS, dtype=torch.uint8, device=x.device)


def invert_mxfp8_scale(scale):
    """The reciprocal scales: ``2 ** -(s - 127)`` for each ``2 ** (s - 127)``, i.e. ``254 - s`` (the NaN code 255
    taken as the largest finite scale, 254)."""
    _check_scale(scale, "invert_mxfp8_scale")
    import torch
    return (2 * _BIAS - torch.clamp(scale, max=2 * _BIAS)).to(torch.uint8)


def get_mxfp8_scale_offset(x, index):
    """The position, in ``x``'s block-scale tensor, of the scale applied to ``x[index]`` (``index``: one integer, or
    one broadcastable integer tensor, per dimension of ``x``, which is at least 2-D)."""
    _torch_only(x, "get_mxfp8_scale_offset")
    shape, strides = tuple(x.shape), tuple(x.stride())
    if len(index) != len(shape):
        raise ValueError("Index length should match the number of dimensions of x.")
    if len(shape) < 2:
        raise ValueError(f"Got {len(shape)}-D tensor in `get_mxfp8_scale_offset`, but expected at least 2-D.")
    # the matrix's contiguous ("inner") dimension holds the 32-element blocks; the other is the tile's rows
    inner, outer = (-1, -2) if strides[-1] < strides[-2] else (-2, -1)
    row, block = index[outer], index[inner] // _BLOCK
    tiles_per_row = shape[inner] // _TILE
    blocks_per_tile_row = _TILE // _BLOCK
    tile = (row // _TILE) * tiles_per_row + block // blocks_per_tile_row
    r, j = row % _TILE, block % blocks_per_tile_row
    within = (r % 32) * 16 + (r // 32) * 4 + j
    matrix = 0
    if len(shape) > 2:  # the batch position, in matrices, from the batch strides
        step = min(strides[:-2])
        matrix = sum(i * s for i, s in zip(index[:-2], strides[:-2])) // step
    return matrix * (shape[-1] * shape[-2] // _BLOCK) + tile * (_TILE * _TILE // _BLOCK) + within


def apply_mxfp8_scale(x, scale):
    """``x`` as float32 with its block scales applied (each element times ``2 ** (s - 127)`` of its block): a check
    of MXFP8 results, not a fast path."""
    _torch_only(x, "apply_mxfp8_scale")
    _check_scale(scale, "apply_mxfp8_scale", x)
    import torch
    grid = torch.meshgrid(*(torch.arange(n) for n in x.shape), indexing="ij")
    offsets = get_mxfp8_scale_offset(x, grid).to(scale.device)
    return x.to(torch.float32) * torch.exp2(scale.to(torch.float32)[offsets] - _BIAS)
