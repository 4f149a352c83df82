"""nvmath-python's MXFP8 helpers (``nvmath.linalg.advanced.helpers.matmul``) through ``mathpy.compat.nvmath``, on torch
CPU tensors: the scale tensor's size and values, its inverse, the offset of each element's scale (against cuBLASLt's
block-scale layout as its documentation describes it, checked as a whole: every 32-element block of a matrix has one
scale of its own), applying the scales; and the refusal, naming Blackwell, on a GPU older than compute capability 10.0.
"""

import numpy as np
import pytest

import mathpy.compat.nvmath as nvmath

torch = pytest.importorskip("torch")  # nvmath's helpers take torch tensors only; every test here needs them
helpers = nvmath.linalg.advanced.helpers.matmul


def test_create_scale_has_one_uint8_per_block_holding_exponent_plus_127():
    x = torch.zeros(3, 256, 128, dtype=torch.float8_e4m3fn)
    for exponent in (-127, -1, 0, 3, 128):
        scale = helpers.create_mxfp8_scale(x, exponent)
        assert scale.dtype == torch.uint8 and tuple(scale.shape) == (x.numel() // 32,)
        assert (scale == exponent + 127).all()
    for bad in (-128, 129, 1.5, True):
        with pytest.raises(ValueError, match=r"exponent should be an integer from \[-127, 128\]"):
            helpers.create_mxfp8_scale(x, bad)
    with pytest.raises(ValueError, match="Only torch.Tensor is currently supported .* 'numpy' package"):
        helpers.create_mxfp8_scale(np.zeros((128, 128)), 0)


def test_invert_scale_is_the_reciprocal_power_of_two_and_leaves_its_argument():
    scale = torch.tensor([0, 1, 126, 127, 128, 254, 255], dtype=torch.uint8)
    before = scale.clone()
    inverse = helpers.invert_mxfp8_scale(scale)
    assert inverse.dtype == torch.uint8 and (scale == before).all()
    exponents = scale.to(torch.int64).clamp(max=254) - 127
    assert ((inverse.to(torch.int64) - 127) == -exponents).all()  # 2^-e for 2^e (255, NaN: as 254)
    with pytest.raises(ValueError, match="requires the specified scale tensor to have dtype 'uint8'"):
        helpers.invert_mxfp8_scale(scale.to(torch.int16))


def _offsets(x):
    grid = torch.meshgrid(*(torch.arange(n) for n in x.shape), indexing="ij")
    return helpers.get_mxfp8_scale_offset(x, grid)


@pytest.mark.parametrize("shape, transposed", [((128, 128), False), ((256, 384), False), ((384, 256), True),
                                               ((2, 128, 256), False)])
def test_every_block_of_32_has_its_own_scale(shape, transposed):
    """Elements share a scale exactly when they share a 32-element block along the contiguous dimension, and the
    offsets of a matrix's blocks are 0 .. size/32 - 1, each once (a bijection: the scale tensor is filled whole)."""
    x = torch.zeros(shape, dtype=torch.float8_e4m3fn)
    if transposed:
        x = torch.zeros(shape[::-1], dtype=torch.float8_e4m3fn).T  # column-major: blocks run down the columns
    offsets = _offsets(x).reshape(-1)
    grid = [g.reshape(-1) for g in torch.meshgrid(*(torch.arange(n) for n in x.shape), indexing="ij")]
    inner = -2 if transposed else -1
    blocks = torch.stack([*grid[:inner], grid[inner] // 32, *(grid[inner + 1:] if inner == -2 else [])], dim=1)
    pairs = set(zip(map(tuple, blocks.tolist()), offsets.tolist()))
    assert len({b for b, _ in pairs}) == len(pairs) == len({o for _, o in pairs})  # one offset per block, all distinct
    assert sorted(o for _, o in pairs) == list(range(x.numel() // 32))


def test_offsets_follow_the_documented_tile_layout():
    """cuBLASLt's layout of one 128 x 128 tile's 512 scales: row r and block j at (r % 32) * 16 + (r // 32) * 4 + j;
    the tiles of a row of tiles in turn, then the next row of tiles."""
    x = torch.zeros(256, 512, dtype=torch.float8_e4m3fn)  # 2 x 4 tiles
    cases = {(0, 0): 0, (0, 31): 0, (0, 32): 1, (0, 96): 3, (1, 0): 16, (31, 0): 31 * 16, (32, 0): 4, (33, 64): 22,
             (127, 127): 31 * 16 + 3 * 4 + 3, (0, 128): 512, (5, 300): 2 * 512 + 5 * 16 + 1, (128, 0): 4 * 512,
             (200, 500): (4 + 3) * 512 + (72 % 32) * 16 + (72 // 32) * 4 + 3}
    for index, offset in cases.items():
        assert helpers.get_mxfp8_scale_offset(x, index) == offset, index
    with pytest.raises(ValueError, match="Index length should match"):
        helpers.get_mxfp8_scale_offset(x, (0,))


def test_apply_scale_multiplies_each_block_by_its_power_of_two():
    x = (torch.arange(128 * 128, dtype=torch.float32).reshape(128, 128) % 7 - 3).to(torch.float8_e4m3fn)
    scale = helpers.create_mxfp8_scale(x, 2)
    scale[helpers.get_mxfp8_scale_offset(x, (5, 40))] = 127 - 3  # the block of x[5, 32:64]: 2^-3
    got = helpers.apply_mxfp8_scale(x, scale)
    expected = x.to(torch.float32) * 4.0
    expected[5, 32:64] = x[5, 32:64].to(torch.float32) / 8.0
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    with pytest.raises(ValueError, match=r"The shape of scale \(10,\) is not compatible"):
        helpers.apply_mxfp8_scale(x, scale[:10])


def test_creating_a_scale_on_a_gpu_older_than_blackwell_names_blackwell(monkeypatch):
    """torch CPU tensors posing as cuda:0 tensors of a pretended Hopper GPU (and then a Blackwell one)."""
    from _fake_gpu import pretend_a_gpu
    from test_matmul_orchestration import PosingTorch
    from mathpy import _packages

    x = torch.zeros(128, 128, dtype=torch.float8_e4m3fn)
    with _packages.use(PosingTorch(), device_package_name="torch"):
        pretend_a_gpu(monkeypatch, compute_capability=(9, 0))
        with pytest.raises(ValueError, match=r"need a Blackwell GPU \(compute capability 10.0 or newer\); cuda:0 has "
                                             r"compute capability 9.0"):
            helpers.create_mxfp8_scale(x, 0)
        pretend_a_gpu(monkeypatch, compute_capability=(10, 0))
        assert (helpers.create_mxfp8_scale(x, 0) == 127).all()
