"""Issue 11's features on a GPU (cuFFT and cuBLASLt): workspaces from a caller's memory manager and their release,
streams on plan / reset, the optimized result layout, in-place products, the float8 result's amax and scale tensors,
the float8 GELU aux's dtype, scale and amax, algorithm capabilities and hand-configured algorithms, SM count and
preference masks. Each compared with NumPy or with mathpy's CPU engine.
Run: ``PYTHONPATH=. python -m pytest -m gpu tests/test_parity_gpu.py -q``."""

import numpy as np
import pytest

import mathpy
import mathpy.compat.nvmath as nvmath
from mathpy import CupyMemoryManager, Matmul, TorchMemoryManager, matmul
from mathpy.fft import FFT

from _tolerance import assert_fft_close

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy") if mathpy.cuda_is_available() else None
torch = pytest.importorskip("torch") if mathpy.cuda_is_available() else None


class Counting:
    """A memory manager of one's own (the protocol: memalloc_async), counting what is live."""

    def __init__(self, inner):
        self.inner, self.live, self.allocations = inner, 0, []

    def memalloc_async(self, size, stream):
        owner = self.inner.memalloc_async(size, stream)
        self.live += size
        self.allocations.append(size)
        counting = self

        class Owner:
            device_ptr = owner.device_ptr

            def free(self):
                counting.live -= size
                owner.free()
        return Owner()


def crand(shape, dtype=np.complex64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


# --- FFT ------------------------------------------------------------------------------------------------------------

# cuFFT decides which plans need a workspace: on the H200 (cuFFT 12.0, CUDA 13) a 97 x 1021 C2C needed none, so
# the test takes the first of these shapes whose plan does
WORKSPACE_CANDIDATES = [(97, 1021), (8, 1 << 20), (2, 999983)]


def _operand_needing_a_workspace(package):
    for shape in WORKSPACE_CANDIDATES:
        x = crand(shape)
        a = cp.asarray(x) if package == "cupy" else torch.from_numpy(x).cuda()
        with FFT(a) as f:
            f.plan()
            if f.workspace_bytes:
                return x, a
    pytest.fail(f"none of {WORKSPACE_CANDIDATES} needed a cuFFT workspace: add a shape that does")


@pytest.mark.parametrize("package", ["cupy", "torch"])
def test_fft_workspace_from_a_memory_manager_and_its_release(package):
    x, a = _operand_needing_a_workspace(package)
    manager = Counting(CupyMemoryManager(0) if package == "cupy" else TorchMemoryManager(0))
    with FFT(a, options={"allocator": manager}) as f:
        f.plan()
        assert f.workspace_bytes > 0 and manager.allocations == [f.workspace_bytes]
        r = f.execute(release_workspace=True)
        assert manager.live == 0  # given back (after the transform: the stream was synchronised)
        r2 = f.execute()
        assert manager.live == f.workspace_bytes and len(manager.allocations) == 2
        got = [cp.asnumpy(v) if package == "cupy" else v.cpu().numpy() for v in (r, r2)]
    assert manager.live == 0
    expected = np.fft.fftn(x.astype(np.complex128))
    for g in got:
        assert_fft_close(g, expected, np.float32, x.size, "FFT with a manager's workspace")
    key = nvmath.fft.FFT.create_key(a)
    assert nvmath.fft.estimate_workspace_size(key) > 0


def test_fft_streams_on_plan_and_reset_operand():
    s1, s2 = cp.cuda.Stream(), cp.cuda.Stream()
    x, y = crand((8, 256), seed=1), crand((8, 256), seed=2)
    with s1:
        a = cp.asarray(x)
    with FFT(a, axes=[1]) as f:
        f.plan(stream=s1)
        with s1:
            r1 = f.execute()  # the current stream at the call (issue 20)
        with s2:
            b = cp.asarray(y)
            f.reset_operand(b, stream=s2)
            r2 = f.execute()
        s2.synchronize()
        s1.synchronize()
    np.testing.assert_allclose(cp.asnumpy(r1), np.fft.fft(x, axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(cp.asnumpy(r2), np.fft.fft(y, axis=1), rtol=1e-4, atol=1e-3)


def test_fft_optimized_result_layout_and_odd_parity_on_the_gpu():
    x = crand((512, 64))
    with FFT(cp.asarray(x), axes=[0], options={"result_layout": "optimized"}) as f:
        assert f.output_layout[1] == (1, 512)
        f.plan()
        r = f.execute()
    assert r.strides == (8, 512 * 8)
    np.testing.assert_allclose(cp.asnumpy(r), np.fft.fft(x, axis=0), rtol=1e-4, atol=1e-2)
    real = np.random.default_rng(3).standard_normal((4, 6, 13))
    back = mathpy.fft.irfftn(cp.asarray(np.fft.rfftn(real)), options={"last_axis_parity": "odd"})
    np.testing.assert_allclose(cp.asnumpy(back), real, rtol=1e-10, atol=1e-10)


# --- matmul ---------------------------------------------------------------------------------------------------------

def test_matmul_in_place_on_the_gpu():
    rng = np.random.default_rng(4)
    a, b, c, bias = (rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32, 48), (64, 48), (64,)))
    ct = torch.from_numpy(np.asfortranarray(c)).cuda().T.contiguous().T  # column-major, for the bias epilog
    r = matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), ct, beta=1.0, epilog="bias",
               epilog_inputs={"bias": torch.from_numpy(bias).cuda()}, options={"inplace": True})
    assert r is ct
    np.testing.assert_allclose(ct.cpu().numpy(), a.astype(np.float64) @ b + c + bias[:, None], rtol=1e-4, atol=1e-4)
    cc = cp.asarray(c)
    assert matmul(cp.asarray(a), cp.asarray(b), cc, alpha=2.0, beta=0.5, options={"inplace": True}) is cc
    np.testing.assert_allclose(cp.asnumpy(cc), 2 * a.astype(np.float64) @ b + 0.5 * c, rtol=1e-4, atol=1e-4)


def _float8_operands():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 needs compute capability 8.9")
    rng = np.random.default_rng(5)
    a = torch.tensor(rng.integers(-4, 5, (64, 128)) / 4, dtype=torch.float32).to(torch.float8_e4m3fn)
    bt = torch.tensor(rng.integers(-4, 5, (32, 128)) / 4, dtype=torch.float32).to(torch.float8_e4m3fn)
    return a, bt.T  # b column-major: cuBLASLt's float8 "TN" form


def test_float8_amax_and_scale_tensors_match_the_cpu_engine():
    a, b = _float8_operands()
    sa, sd = torch.tensor([2.0]).cuda(), torch.tensor([0.25]).cuda()
    options = {"result_amax": True}
    with Matmul(a.cuda(), b.cuda(), options=options, quantization_scales={"a": sa, "b": 0.5, "d": sd}) as mm:
        mm.plan()
        d, aux = mm.execute()
        sa.fill_(4.0)  # read at the next execution
        d2, aux2 = mm.execute()
    ref_d, ref_aux = matmul(a, b, options=options, quantization_scales={"a": 2.0, "b": 0.5, "d": 0.25})
    np.testing.assert_array_equal(d.cpu().float().numpy(), ref_d.float().numpy())
    np.testing.assert_allclose(aux["result_amax"].cpu().numpy(), ref_aux["result_amax"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(aux2["result_amax"].cpu().numpy(), 2 * ref_aux["result_amax"].numpy(), rtol=1e-6)


# One e4m3 unit in the last place, relative (3 mantissa bits) and absolute (subnormals): the GPU's GELU and the CPU's
# differ in float32's last bits, which can move a value across a float8 rounding boundary, never further.
E4M3_ULP = {"rtol": 2.0 ** -3, "atol": 2.0 ** -9}


def test_float8_gelu_aux_scale_and_amax_match_the_cpu_engine():
    """GELU_AUX with an e4m3 result and an e4m3 aux: the aux holds aux_scale * X (the scale a tensor read at every
    execution), gelu_aux_amax is max |X| before the scale (exact: X is exact in float32), as the CPU engine gives."""
    a, b = _float8_operands()
    scale = torch.tensor([0.375]).cuda()
    prefs, options = {"aux_type": "float8_e4m3fn", "aux_amax": True}, {"d_scale": 0.5, "result_amax": True}
    with Matmul(a.cuda(), b.cuda(), options=options) as mm:
        mm.plan(epilog="gelu_aux", epilog_inputs={"aux_scale": scale}, preferences=prefs)
        d, aux = mm.execute()
        scale.fill_(2.0)  # read at the next execution
        _, aux2 = mm.execute()
    assert aux["gelu_aux"].dtype == torch.float8_e4m3fn and list(aux) == ["gelu_aux", "gelu_aux_amax", "result_amax"]
    for s, got in ((0.375, aux), (2.0, aux2)):
        ref_d, ref = matmul(a, b, epilog="gelu_aux", epilog_inputs={"aux_scale": s}, preferences=prefs,
                            options=options)
        torch.testing.assert_close(got["gelu_aux"].cpu().float(), ref["gelu_aux"].float(), **E4M3_ULP)
        assert got["gelu_aux_amax"].cpu().item() == ref["gelu_aux_amax"].item()
    torch.testing.assert_close(d.cpu().float(), ref_d.float(), **E4M3_ULP)
    torch.testing.assert_close(aux["result_amax"].cpu(), ref["result_amax"], rtol=1e-4, atol=0)


@pytest.mark.parametrize("case", ["no c", "bfloat16 c and bias"])
def test_float8_result_gelu_aux_in_cs_dtype_matches_the_cpu_engine(case):
    """A float8 result's GELU aux takes C's 16-bit dtype (float16 without C, as nvmath-python chooses; cuBLASLt is
    then given a float16 C stand-in)."""
    a, b = _float8_operands()
    rng = np.random.default_rng(8)
    args, epilog, inputs = (), "gelu_aux", {}
    if case != "no c":
        c = torch.tensor(rng.integers(-4, 5, (32, 64)) / 8, dtype=torch.bfloat16).T  # column-major, as D
        args, epilog = (c,), "gelu_aux_bias"
        inputs = {"bias": torch.tensor(rng.integers(-4, 5, 64) / 8, dtype=torch.bfloat16)}
    d, aux = matmul(a.cuda(), b.cuda(), *(x.cuda() for x in args), epilog=epilog,
                    epilog_inputs={k: v.cuda() for k, v in inputs.items()})
    ref_d, ref = matmul(a, b, *args, epilog=epilog, epilog_inputs=inputs)
    dtype = torch.float16 if case == "no c" else torch.bfloat16
    assert aux["gelu_aux"].dtype == ref["gelu_aux"].dtype == dtype
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    torch.testing.assert_close(aux["gelu_aux"].cpu().float(), ref["gelu_aux"].float(), rtol=ulp, atol=0)
    torch.testing.assert_close(d.cpu().float(), ref_d.float(), **E4M3_ULP)


def test_nvmath_float8_aux_program_runs_on_the_gpu():
    """nvmath-python's float8 GELU aux example, through mathpy.compat.nvmath, against the CPU engine."""
    a, b = _float8_operands()
    kw = {"epilog": nvmath.linalg.advanced.MatmulEpilog.GELU_AUX, "quantization_scales": {"a": 1, "b": 1, "d": 1},
          "epilog_inputs": {"aux_quantization_scale": 0.1},
          "preferences": {"epilog": {"aux_type": nvmath.CudaDataType.CUDA_R_8F_E4M3, "aux_amax": True}}}
    result, aux = nvmath.linalg.advanced.matmul(a.cuda(), b.cuda(), **kw)
    assert set(aux) == {"gelu_aux", "gelu_aux_amax"} and aux["gelu_aux"].dtype == torch.float8_e4m3fn
    ref_d, ref = matmul(a, b, epilog="gelu_aux", epilog_inputs={"aux_scale": 0.1},
                        preferences={"aux_type": "float8_e4m3fn", "aux_amax": True})
    torch.testing.assert_close(aux["gelu_aux"].cpu().float(), ref["gelu_aux"].float(), **E4M3_ULP)
    assert aux["gelu_aux_amax"].cpu().item() == ref["gelu_aux_amax"].item()
    torch.testing.assert_close(result.cpu().float(), ref_d.float(), **E4M3_ULP)


def test_algorithm_capabilities_and_a_hand_configured_tile():
    rng = np.random.default_rng(6)
    a, b = (torch.from_numpy(rng.standard_normal((512, 512)).astype(np.float16)).cuda() for _ in range(2))
    exact = a.double() @ b.double()
    with Matmul(a, b) as mm:
        first, *rest = mm.plan(preferences={"limit": 4})
        assert first.capabilities and first.tiles and first.algorithm_id is not None
        for tile in [t for t in first.tiles if t != first.tile and t != "UNDEFINED"]:
            try:
                (adopted,) = mm.plan(algorithms=[first.configured(tile=tile)])
                break
            except ValueError as e:  # cuBLASLt may refuse a tile for this problem: it says so, by name
                assert "rejects" in str(e)
        else:
            pytest.skip(f"cuBLASLt accepts no other tile than {first.tile} for {first!r}")
        assert adopted.tile == tile
        torch.testing.assert_close(mm.execute().double(), exact, rtol=2e-2, atol=1.0)
        if rest:
            mm.plan(preferences={"limit": 4})
            torch.testing.assert_close(mm.execute(algorithm=mm.algorithms[1]).double(), exact, rtol=2e-2, atol=1.0)
    saved = nvmath.linalg.advanced.Algorithm(first).as_numpy()
    restored = nvmath.linalg.advanced.Algorithm.from_numpy(saved)
    assert restored.native == first


def test_matmul_workspace_allocator_sm_count_and_masks():
    rng = np.random.default_rng(7)
    a, b = (cp.asarray(rng.standard_normal((2048, 2048)).astype(np.float32)) for _ in range(2))
    manager = Counting(CupyMemoryManager(0))
    with Matmul(a, b, options={"allocator": manager, "sm_count_target": 8}) as mm:
        mm.plan(preferences={"max_waves_count": 64.0})
        r = mm.execute(release_workspace=True)
        assert manager.live == 0
        r2 = mm.execute()
    np.testing.assert_allclose(cp.asnumpy(r), cp.asnumpy(r2), rtol=0)
    np.testing.assert_allclose(cp.asnumpy(r)[:4, :4], (cp.asnumpy(a)[:4].astype(np.float64) @ cp.asnumpy(b))[:, :4],
                               rtol=1e-3, atol=1e-2)
