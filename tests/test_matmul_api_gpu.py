"""The matmul API on the GPU (cuBLASLt): the same assertions as the CPU tests, GPU results checked against the CPU engine
for every epilog and dtype, data moved between host and device, the state machine, plan-cache bounds and a
10,000-plan loop that must not leak. Every test is marked ``gpu`` and skipped without a device."""

import gc

import ml_dtypes
import numpy as np
import pytest

from _matmul_reference import bits_ref, pack_ref, rss_bytes
from _tolerance import assert_within, epilog_bounds, gamma, matmul_bound, unit_roundoff
from mathpy import InvalidPlanStateError
from mathpy.host.matmul import Matmul, MatmulEpilog, matmul, matmul_plan_cache

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
RNG = np.random.default_rng(11)
M, N, K = 45, 38, 72  # M, N not multiples of 8/16: aux padding and unaligned shapes are exercised
EPILOGS = [e.name for e in MatmulEpilog if e is not MatmulEpilog.DEFAULT]


@pytest.fixture
def gxp(xp):
    if not xp.on_gpu:
        pytest.skip("GPU packages only")
    return xp


def as64(x):
    return np.asarray(x).astype(np.complex128 if np.asarray(x).dtype.kind == "c" else np.float64)


def epilog_inputs(name, dtype, batch):
    inputs = {}
    if "BIAS" in name and "BGRAD" not in name:
        inputs["bias"] = RNG.standard_normal((*batch, M, 1) if batch else (M,)).astype(dtype)
    if name.startswith("DRELU"):
        inputs["relu_aux"] = pack_ref(RNG.random((*batch, M, N)) > 0.5)
    if name.startswith("DGELU"):
        inputs["gelu_aux"] = RNG.standard_normal((*batch, -(-M // 8) * 8, N)).astype(dtype)
    return inputs


def split(result):
    return result if isinstance(result, tuple) else (result, {})


@pytest.mark.parametrize("batch", [(), (3,)], ids=["single", "batched"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", EPILOGS)
def test_every_epilog_matches_the_cpu_engine(gxp, name, dtype, batch):
    dtype = np.dtype(BF16 if dtype == "bfloat16" else dtype)
    a = RNG.standard_normal((*batch, M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)
    inputs = epilog_inputs(name, dtype, batch)
    want, want_aux = split(matmul(a, b, alpha=0.5, epilog=name, epilog_inputs=inputs or None, execution="cpu"))
    try:
        got, got_aux = split(matmul(gxp.asarray(a), gxp.asarray(b), alpha=0.5, epilog=name,
                                    epilog_inputs={k: gxp.asarray(v) for k, v in inputs.items()} or None))
    except ValueError as e:  # cuBLASLt has no kernel for a few (epilog, dtype) pairs: the error must say so
        assert "cuBLASLt" in str(e) or "no algorithm" in str(e), e
        pytest.skip(f"cuBLASLt: {e}")
    assert gxp.is_native(got) and sorted(got_aux) == sorted(want_aux)
    g = gxp.to_numpy(got)
    assert g.dtype == dtype and g.shape == want.shape
    pre = matmul(a, b, alpha=0.5, epilog="bias" if "bias" in inputs else None,
                 epilog_inputs={"bias": inputs["bias"]} if "bias" in inputs else None, execution="cpu")
    # both engines lie within the derived bound of the exact result (tests/_tolerance.py): within twice it of each
    # other
    bias = inputs.get("bias")
    if bias is not None:
        bias = bias.reshape(*bias.shape[:-2], M, 1) if bias.ndim > 1 else bias[:, None]
    x_bound, d_bound = epilog_bounds(name, a, b, dtype, 0.5, bias, as64(pre), as64(want))
    assert_within(g, as64(want), 2 * d_bound, f"{name} {dtype.name} result")
    for key, expected in want_aux.items():
        assert gxp.is_native(got_aux[key])
        out = gxp.to_numpy(got_aux[key])
        assert out.dtype == expected.dtype and out.shape == expected.shape, key
        if key == "relu_aux":
            clear = np.abs(as64(pre)) > 2 * x_bound
            assert np.array_equal(bits_ref(out, M)[clear], bits_ref(expected, M)[clear])
        elif key == "gelu_aux":
            assert_within(out[..., :M, :], as64(expected[..., :M, :]), 2 * x_bound, f"{name} gelu_aux")
        else:
            if key == "bgrada":
                bound = gamma(K, dtype) * np.abs(np.broadcast_to(as64(a), (*batch, M, K))).sum(-1, keepdims=True)
            elif key == "bgradb":
                bound = gamma(K, dtype) * np.abs(as64(b)).sum(-2)[..., None]
            else:
                bound = d_bound.sum(-1, keepdims=True) + gamma(N, dtype) * np.abs(as64(want)).sum(-1, keepdims=True)
            bound = np.broadcast_to(bound, (*batch, *bound.shape[-2:])).reshape(expected.shape)
            bound = bound + unit_roundoff(dtype) * np.abs(as64(expected))
            assert_within(out, as64(expected), 2 * bound, f"{name} {key}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"])
def test_dtypes_match_the_cpu_engine(gxp, dtype):
    dtype = np.dtype(BF16 if dtype == "bfloat16" else dtype)
    a = RNG.standard_normal((2, M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)
    c = RNG.standard_normal((M, N)).astype(dtype)
    if dtype.kind == "c":
        a = a + 1j * RNG.standard_normal(a.shape).astype(dtype)
    got = matmul(gxp.asarray(a), gxp.asarray(b), gxp.asarray(c), alpha=1.5, beta=-0.5)
    want = matmul(a, b, c, alpha=1.5, beta=-0.5, execution="cpu")
    assert gxp.is_native(got)
    # alpha A @ B + beta C: C enters the accumulation as one more term
    a_c = np.concatenate([as64(a), np.broadcast_to(as64(c), (2, M, N))], axis=-1)
    b_c = np.concatenate([as64(b) * 1.5, np.eye(N) * -0.5], axis=0)
    exact = a_c @ b_c
    assert_within(gxp.to_numpy(got), exact, matmul_bound(a_c, b_c, dtype, exact=exact), f"{dtype.name} matmul")


def test_tf32_option(gxp):
    a, b = RNG.standard_normal((256, 256)).astype(np.float32), RNG.standard_normal((256, 256)).astype(np.float32)
    exact = gxp.to_numpy(matmul(gxp.asarray(a), gxp.asarray(b)))
    np.testing.assert_allclose(exact, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    tf32 = gxp.to_numpy(matmul(gxp.asarray(a), gxp.asarray(b), options={"allow_tf32": True}))
    np.testing.assert_allclose(tf32, a.astype(np.float64) @ b, rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("a_dtype,b_dtype", [(E4M3, E4M3), (E4M3, E5M2)])
def test_float8(gxp, a_dtype, b_dtype):
    from mathpy import _cuda
    if gxp.name == "cupy":
        pytest.skip("CuPy arrays have no float8 dtypes (torch's float8 tensors are the GPU float8 operands)")
    a = (RNG.integers(-4, 5, (64, 32)) / 2).astype(a_dtype)
    b = (RNG.integers(-4, 5, (32, 48)) / 2).astype(b_dtype)
    options = {"result_type": np.float32, "a_scale": 0.5, "b_scale": 2.0}
    if tuple(_cuda.compute_capability(0)) < (8, 9):
        with pytest.raises(ValueError, match="compute capability >= 8.9"):
            matmul(gxp.asarray(a), gxp.asarray(b), options=options)
        return
    got = gxp.to_numpy(matmul(gxp.asarray(a), gxp.asarray(b), options=options))
    np.testing.assert_allclose(got, matmul(a, b, options=options, execution="cpu"), rtol=1e-6)
    bf = gxp.to_numpy(matmul(gxp.asarray(a), gxp.asarray(b), options={"result_type": "bfloat16"}))
    np.testing.assert_allclose(bf.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2)


@pytest.mark.parametrize("case", ["transposed-a", "transposed-b", "both", "stepped", "batch-broadcast", "vector"])
def test_layouts(gxp, case):
    a = RNG.standard_normal((3, 40, 24))
    b = RNG.standard_normal((24, 56))
    if case in ("transposed-a", "both"):
        a = np.swapaxes(RNG.standard_normal((3, 24, 40)), -1, -2)
    if case in ("transposed-b", "both"):
        b = RNG.standard_normal((56, 24)).T
    ga, gb = gxp.asarray(a), gxp.asarray(b)
    if case in ("transposed-a", "both"):
        ga = gxp.asarray(np.swapaxes(a, -1, -2)).transpose(-1, -2) if gxp.name == "torch" else \
            gxp.asarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if case in ("transposed-b", "both"):
        gb = gxp.asarray(b.T).T
    if case == "stepped":
        ga = gxp.asarray(RNG.standard_normal((3, 40, 48)))[:, :, ::2]
        a = gxp.to_numpy(ga)
    if case == "batch-broadcast":
        a, b = RNG.standard_normal((40, 24)), RNG.standard_normal((4, 1, 24, 56))
        ga, gb = gxp.asarray(a), gxp.asarray(b)
    if case == "vector":
        a = RNG.standard_normal(24)
        ga = gxp.asarray(a)
    got = matmul(ga, gb)
    np.testing.assert_allclose(gxp.to_numpy(got), np.matmul(gxp.to_numpy(ga), gxp.to_numpy(gb)), rtol=1e-11)


def test_execution_cuda_on_numpy_operands_and_back():
    a, b, bias = RNG.standard_normal((M, K)), RNG.standard_normal((K, N)), RNG.standard_normal(M)
    d, aux = matmul(a, b, epilog="relu_aux_bias", epilog_inputs={"bias": bias}, execution="cuda")
    assert isinstance(d, np.ndarray) and isinstance(aux["relu_aux"], np.ndarray)
    want, want_aux = matmul(a, b, epilog="relu_aux_bias", epilog_inputs={"bias": bias}, execution="cpu")
    np.testing.assert_allclose(d, want, rtol=1e-11)
    np.testing.assert_array_equal(bits_ref(aux["relu_aux"], M), bits_ref(want_aux["relu_aux"], M))
    back = matmul(a, b, epilog="drelu", epilog_inputs=aux, execution="cuda")
    np.testing.assert_allclose(back, (a @ b) * (a @ b + bias[:, None] > 0), rtol=1e-11)


def test_execution_cpu_on_gpu_operands(gxp):
    a, b = RNG.standard_normal((M, K)).astype(np.float32), RNG.standard_normal((K, N)).astype(np.float32)
    got = matmul(gxp.asarray(a), gxp.asarray(b), epilog="gelu", execution="cpu")
    assert gxp.is_native(got)
    np.testing.assert_allclose(gxp.to_numpy(got), matmul(a, b, epilog="gelu"), rtol=1e-6, atol=1e-7)  # CPU engine


def test_stateful_on_gpu(gxp):
    a, b, bias = (RNG.standard_normal(s).astype(np.float32) for s in ((256, 512), (512, 128), (256,)))
    mm = Matmul(gxp.asarray(a), gxp.asarray(b))
    with pytest.raises(InvalidPlanStateError):
        mm.execute()
    algorithms = mm.plan(epilog="relu_bias", epilog_inputs={"bias": gxp.asarray(bias)})
    assert algorithms and mm.algorithms[0] == algorithms[0]
    timings = mm.autotune(iterations=2)
    assert [t for _, t in timings] == sorted(t for _, t in timings)
    assert mm.algorithms[0] == timings[0][0]
    want = np.maximum(a.astype(np.float64) @ b + bias[:, None], 0)
    np.testing.assert_allclose(gxp.to_numpy(mm.execute()), want, rtol=1e-4, atol=1e-3)
    a2 = RNG.standard_normal((256, 512)).astype(np.float32)
    mm.reset_operands(a=gxp.asarray(a2))
    np.testing.assert_allclose(gxp.to_numpy(mm.execute()), np.maximum(a2.astype(np.float64) @ b + bias[:, None], 0),
                               rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError):
        mm.reset_operands(a=gxp.asarray(a2[:, :256]))
    with pytest.raises(ValueError):  # the operand must stay on the device it was planned for
        mm.reset_operands(a=a2)
    mm.free()
    mm.free()
    with pytest.raises(InvalidPlanStateError):
        mm.execute()


def test_explicit_stream(gxp):
    a, b = RNG.standard_normal((M, K)), RNG.standard_normal((K, N))
    if gxp.name == "cupy":
        import cupy
        stream = cupy.cuda.Stream(non_blocking=True)
    else:
        import torch
        stream = torch.cuda.Stream()
    ga, gb = gxp.asarray(a), gxp.asarray(b)  # synchronous copies: ready for any stream
    with Matmul(ga, gb) as mm:
        mm.plan(stream=stream)
        got = mm.execute(stream=stream)
        stream.synchronize()
        np.testing.assert_allclose(gxp.to_numpy(got), a @ b, rtol=1e-11)


def test_threads_on_their_own_streams_share_cached_plans(gxp):
    """8 threads, each on its own stream, run the stateless matmul on 3 shapes (a skinny one, which autotunes and
    uses a workspace): one cached plan per shape, hits on every later call, results right."""
    import threading
    shapes = [(64, 4096, 4096), (M, K, N), (256, 256, 256)]  # (m, k, n); the first is skinny and >= 2 GFLOP
    operands = {s: (RNG.standard_normal(s[:2]).astype(np.float32), RNG.standard_normal(s[1:]).astype(np.float32))
                for s in shapes}
    expected = {s: a.astype(np.float64) @ b for s, (a, b) in operands.items()}
    device = {s: (gxp.asarray(a), gxp.asarray(b)) for s, (a, b) in operands.items()}
    if gxp.name == "cupy":
        import cupy
        make_stream, scope = (lambda: cupy.cuda.Stream(non_blocking=True)), (lambda s: s)
    else:
        import torch
        make_stream, scope = torch.cuda.Stream, torch.cuda.stream
    matmul_plan_cache.clear()
    before, errors = matmul_plan_cache.info(), []

    def work():
        try:
            stream = make_stream()
            with scope(stream):
                for _ in range(4):
                    for s in shapes:
                        got = matmul(*device[s])
                        stream.synchronize()
                        np.testing.assert_allclose(gxp.to_numpy(got), expected[s], rtol=1e-4, atol=2e-3)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    info = matmul_plan_cache.info()
    assert info.misses - before.misses == len(shapes) and info.evictions == before.evictions
    assert info.hits - before.hits == 8 * 4 * len(shapes) - len(shapes)


def test_plan_cache_bounds_workspace(gxp):
    old = matmul_plan_cache.info()
    try:
        matmul_plan_cache.clear()
        matmul_plan_cache.resize(max_plans=4, max_bytes=8 << 20)
        for n in (64, 128, 256, 512, 1024, 2048):
            a = gxp.asarray(RNG.standard_normal((n, n)).astype(np.float32))
            matmul(a, a)
            info = matmul_plan_cache.info()
            assert info.plans <= 4 and info.bytes <= 8 << 20
    finally:
        matmul_plan_cache.resize(max_plans=old.max_plans, max_bytes=old.max_bytes)


def _device_bytes(package):
    if package == "cupy":
        import cupy
        return cupy.get_default_memory_pool().used_bytes()
    import torch
    return torch.cuda.memory_allocated()


def test_10000_plans_do_not_leak(gxp):
    a = gxp.asarray(RNG.standard_normal((64, 32)).astype(np.float32))
    b = gxp.asarray(RNG.standard_normal((32, 16)).astype(np.float32))
    bias = gxp.asarray(RNG.standard_normal(64).astype(np.float32))

    def once():
        mm = Matmul(a, b)
        mm.plan(epilog="relu_aux_bias", epilog_inputs={"bias": bias})
        d, aux = mm.execute()
        mm.free()
        del d, aux

    for _ in range(200):  # warm up allocators and caches
        once()
    gc.collect()
    device_before, host_before = _device_bytes(gxp.name), rss_bytes()
    for _ in range(10_000):
        once()
    gc.collect()
    device_growth = _device_bytes(gxp.name) - device_before
    host_growth = rss_bytes() - host_before
    assert device_growth <= 1 << 20, f"device memory grew by {device_growth} bytes"
    assert host_growth <= 32 << 20, f"host memory grew by {host_growth} bytes"
