"""Python epilogs fused into matmul on the GPU (TMA + wgmma kernel on sm_90, the generic block-GEMM kernel elsewhere)
against a float64 reference computed from the same (rounded) operands. Outputs are poisoned (NaN) before each
run so an element the kernel does not write fails the comparison.

Run on a GPU machine: ``PYTHONPATH=. python -m pytest -m gpu tests/test_matmul_fused_gpu.py -q``.
"""

import math

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU machines
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import mathpy  # noqa: E402


def silu_gate(value, row, col, data):
    return value / (np.float32(1) + math.exp(-value)) * data[row, col]


def scale_clamp(value, row, col, data):
    return min(max(value * data[row], np.float32(-4)), np.float32(4))


def batch_mix(value, batch, row, col, data):
    return value * data[batch, row, col] + np.float32(batch) - np.float32(0.001) * np.float32(col)


def _ref_silu(x, data):
    return x / (1 + np.exp(-x)) * data


# rounding of the result (bf16: 8 bits of mantissa) + fp32 accumulation of K products
_TOL = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3, torch.float32: 1e-5, torch.float64: 1e-12}


def _check(out, ref, dtype, k):
    out = out.double().cpu().numpy()
    assert np.isfinite(out).all(), "unwritten (poisoned) or non-finite results"
    err = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
    tol = _TOL[dtype] * (1 + math.log2(max(k, 2)) / 16)
    assert err < tol, f"relative error {err:.3g} > {tol:.3g}"


def _operands(m, n, k, dtype, batch=(), b_transposed=False, a_transposed=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(*batch, m, k, device="cuda", generator=g).to(dtype) / math.sqrt(k)
    if a_transposed:
        a = torch.randn(*batch, k, m, device="cuda", generator=g).to(dtype).transpose(-1, -2) / math.sqrt(k)
    if b_transposed:
        b = torch.randn(*batch, n, k, device="cuda", generator=g).to(dtype).transpose(-1, -2)
    else:
        b = torch.randn(*batch, k, n, device="cuda", generator=g).to(dtype)
    return a, b


def _poisoned_run(mm):
    """Execute twice, NaN-filling the first result before the second run: torch's caching allocator hands the same
    block to the second result, so an element the kernel does not write stays NaN."""
    first = mm.execute()
    first.fill_(float("nan"))
    del first
    return mm.execute()


@pytest.mark.parametrize("m, n, k, dtype, b_t, a_t", [
    (256, 512, 128, torch.bfloat16, False, False),    # whole tiles
    (300, 520, 200, torch.bfloat16, False, False),    # tails in M, N and K
    (128, 256, 64, torch.float16, True, False),       # B K-major (W.T of a linear layer)
    (192, 384, 96, torch.bfloat16, False, True),      # A M-major
    (1000, 130, 72, torch.bfloat16, True, True),      # both transposed, N just over 128
    (64, 96, 40, torch.float32, False, False),        # generic kernel
    (70, 50, 33, torch.float64, True, False),         # generic kernel, double
])
def test_silu_gate(m, n, k, dtype, b_t, a_t):
    a, b = _operands(m, n, k, dtype, b_transposed=b_t, a_transposed=a_t)
    gate = torch.randn(m, n, device="cuda").to(dtype)
    with mathpy.Matmul(a, b) as mm:
        mm.plan(epilog=silu_gate, epilog_inputs={"data": gate})
        out = _poisoned_run(mm)
    assert out.dtype == dtype and out.shape == (m, n)
    x = a.double().cpu().numpy() @ b.double().cpu().numpy()
    _check(out, _ref_silu(x, gate.double().cpu().numpy()), dtype, k)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_scale_clamp_stateless(dtype):
    m, n, k = 384, 256, 256
    a, b = _operands(m, n, k, dtype, seed=3)
    a = a * 8
    scale = torch.rand(m, device="cuda", dtype=torch.float32) * 2
    out = mathpy.matmul(a, b, epilog=scale_clamp, epilog_inputs={"data": scale})
    x = a.double().cpu().numpy() @ b.double().cpu().numpy()
    ref = np.clip(x * scale.double().cpu().numpy()[:, None], -4, 4)
    _check(out, ref, dtype, k)


def test_batched_with_c_and_batch_index():
    batch, m, n, k = 3, 200, 136, 64
    a, b = _operands(m, n, k, torch.float16, batch=(batch,), seed=5)
    c = torch.randn(batch, m, n, device="cuda", dtype=torch.float16)
    data = torch.randn(batch, m, n, device="cuda", dtype=torch.float32)
    out = mathpy.matmul(a, b, c, alpha=0.5, beta=-1.5, epilog=batch_mix, epilog_inputs={"data": data})
    x = 0.5 * (a.double().cpu().numpy() @ b.double().cpu().numpy()) - 1.5 * c.double().cpu().numpy()
    ref = x * data.double().cpu().numpy() + np.arange(batch)[:, None, None] - 0.001 * np.arange(n)
    _check(out, ref, torch.float16, k)


def gate_and_neighbour(value, batch, row, col, data):
    # its own element (staged in shared memory) and one 300 columns on, usually in another tile (device memory)
    return value * data[batch, row, col] + np.float32(0.5) * data[batch, row, (col + 300) % 2100]


def test_staged_batched_data_over_more_tiles_than_sms():
    """bf16 with a 3-D bf16 data array staged tile by tile (one per batch entry), read inside and outside the
    block's tile, 162 tiles (more than the H200's 132 SMs: blocks loop), edge tiles in M, N and K."""
    batch, m, n, k = 2, 1100, 2100, 200
    a, b = _operands(m, n, k, torch.bfloat16, batch=(batch,), seed=11)
    data = torch.randn(batch, m, n, device="cuda").to(torch.bfloat16)
    with mathpy.Matmul(a, b) as mm:
        mm.plan(epilog=gate_and_neighbour, epilog_inputs={"data": data})
        out = _poisoned_run(mm)
    x = a.double().cpu().numpy() @ b.double().cpu().numpy()
    d = data.double().cpu().numpy()
    ref = x * d + 0.5 * d[:, :, (np.arange(n) + 300) % n]
    _check(out, ref, torch.bfloat16, k)


def test_unaligned_data_runs_the_variant_without_staging():
    """A gate whose address is not 16-byte aligned cannot be copied by TMA: that execute falls back to a kernel that
    reads it from device memory, with the same results."""
    m, n, k = 384, 512, 128
    a, b = _operands(m, n, k, torch.bfloat16, seed=13)
    flat = torch.randn(m * n + 1, device="cuda").to(torch.bfloat16)
    shifted = flat[1:].view(m, n)  # 2 bytes past an aligned address
    aligned = shifted.clone()
    x = a.double().cpu().numpy() @ b.double().cpu().numpy()
    for gate in (shifted, aligned):
        out = mathpy.matmul(a, b, epilog=silu_gate, epilog_inputs={"data": gate})
        _check(out, _ref_silu(x, gate.double().cpu().numpy()), torch.bfloat16, k)


def test_cpu_and_gpu_agree():
    a, b = _operands(96, 64, 48, torch.float32, seed=7)
    gate = torch.randn(96, 64, device="cuda")
    gpu = mathpy.matmul(a, b, epilog=silu_gate, epilog_inputs={"data": gate})
    cpu = mathpy.matmul(a.cpu().numpy(), b.cpu().numpy(), epilog=silu_gate,
                        epilog_inputs={"data": gate.cpu().numpy()})
    np.testing.assert_allclose(gpu.cpu().numpy(), cpu, rtol=2e-5, atol=2e-5)
