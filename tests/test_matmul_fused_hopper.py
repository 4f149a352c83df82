"""The Hopper (TMA + wgmma) fused-epilog kernel without a GPU: its generated source run under numba's CUDA simulator
with the Hopper instructions emulated (persistent tiles, barrier protocol, staged data, bulk stores, edge tiles,
batches) against NumPy; the PTX and register report of the compiled kernel; the shared-memory layout the staged data
view computes against the one the kernel writes; and which kernel variant the engine picks for which operands.
The GPU runs are tests/test_matmul_fused_gpu.py."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from mathpy.device import _gemm_hopper as HK
from mathpy.host.matmul import _fused_cuda
from mathpy.host.matmul._problem import MatrixLayout

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("cases", ["quick", pytest.param("all", marks=pytest.mark.long)])
def test_hopper_kernel_matches_numpy_in_the_simulator(cases):
    """The generated kernel source runs under numba's simulator with the Hopper instructions emulated and matches
    NumPy: "all" runs every case of SIM_HOPPER_CASES (staged data read in and outside the tile, bulk tile stores,
    direct stores with C, edge tiles in M, N and K, batches with a 3-D data map, A M-major, B K-major, fewer blocks
    than tiles; about 6 minutes on 2 cores, --run-long), "quick" the one of SIM_HOPPER_QUICK (one tile with edges in
    M, N and K, C, direct stores)."""
    from _hopper_sim import SIM_HOPPER_CASES, SIM_HOPPER_QUICK, TOLERANCE

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, str(ROOT / "tests" / "_hopper_sim.py")] + (["--quick"] if cases == "quick" else [])
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(SIM_HOPPER_QUICK if cases == "quick" else SIM_HOPPER_CASES)
    for r in results:
        assert r["error"] < TOLERANCE[r["case"][5]], r


def test_simulated_barriers_catch_a_missing_arrival(monkeypatch):
    """The emulated mbarrier reports a wait that can never end instead of hanging (how a protocol bug shows)."""
    import _hopper_sim

    monkeypatch.setattr(_hopper_sim, "_DEADLINE_S", 0.2)
    machine = _hopper_sim._Machine()
    machine.mbars[64] = _hopper_sim._MBarrier(2)
    machine.arrive(64)
    assert machine.try_wait(64, 1)  # the phase before the first counts as complete
    with pytest.raises(RuntimeError, match="deadlock"):
        machine.try_wait(64, 0)
    machine.arrive(64, tx=256)  # the last arrival, but 256 bytes still outstanding
    with pytest.raises(RuntimeError, match="256 bytes missing"):
        machine.try_wait(64, 0)
    machine.complete_tx(64, 256)
    assert machine.try_wait(64, 0) and machine.mbars[64].phase == 1


def test_tile_layout_of_the_staged_view_matches_the_kernel():
    """The staged data view's address arithmetic (LLVM IR, run here through llvmlite's JIT) equals the layout the
    kernel writes and TMA's 128-byte swizzle produces (tile_offset), for every element of both tile shapes; each
    element gets its own two bytes."""
    import ctypes

    import llvmlite.binding as llvm
    from llvmlite import ir

    from mathpy.jit._epilog_data import tile_offset_ir

    for bm, bn in ((128, 256), (128, 128)):
        module = ir.Module(name="tile")
        i64 = ir.IntType(64)
        fn = ir.Function(module, ir.FunctionType(i64, [i64, i64]), name="offset")
        builder = ir.IRBuilder(fn.append_basic_block())
        builder.ret(tile_offset_ir(builder, *fn.args, bm))
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple().create_target_machine()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), target)
        engine.finalize_object()
        offset = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(engine.get_function_address("offset"))
        rows, cols = np.meshgrid(np.arange(bm), np.arange(bn), indexing="ij")
        python = HK.tile_offset(rows, cols, bm)
        jitted = np.array([[offset(r, c) for c in range(bn)] for r in range(bm)])
        np.testing.assert_array_equal(jitted, python)
        assert sorted(python.ravel()) == list(range(0, 2 * bm * bn, 2))
        # a warp's 4-byte accesses of one 8-column chunk (8 rows x 4 lanes) hit 32 different banks
        lanes = np.arange(32)
        banks = (HK.tile_offset(lanes // 4, 8 * 5 + 2 * (lanes % 4), bm) // 4) % 32
        assert len(set(banks)) == 32


def test_stage_counts_fit_shared_memory():
    for bn, buffer, expected in ((256, False, 4), (256, True, 3), (128, False, 6), (128, True, 6)):
        stages = HK.max_stages(bn, buffer)
        assert stages == expected
        config = HK.HopperConfig("bfloat16", "bfloat16", bn=bn, stages=stages, operands=1, stage_data=buffer,
                                 epilog=True)
        assert config.shared_memory_size <= HK.MAX_SHARED_MEMORY
    with pytest.raises(ValueError, match="at most 3"):
        HK.HopperConfig("bfloat16", "bfloat16", bn=256, stages=4, store_tile=True)
    with pytest.raises(ValueError, match="16-bit result"):
        HK.HopperConfig("bfloat16", "float32", bn=256, stages=3, store_tile=True)


def _layout(rows, cols, row_stride, col_stride, batch=1, batch_stride=0, dtype="bfloat16"):
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    return MatrixLayout(rows, cols, row_stride, col_stride, batch, batch_stride, dt)


def _problem(m, n, k, batch=1, out="bfloat16", ldd=None):
    ldd = n if ldd is None else ldd
    return types.SimpleNamespace(
        m=m, n=n, k=k, batch=batch, c=None, a=_layout(m, k, k, 1, batch, m * k), b=_layout(k, n, n, 1, batch, k * n),
        d=_layout(m, n, ldd, 1, batch, m * ldd, out), fused=types.SimpleNamespace(operands=(("data", None),)))


def test_engine_stages_full_size_16_bit_data_and_stores_16_bit_results_in_tiles():
    from mathpy.host.matmul._fused import DataLayout

    p = _problem(512, 1024, 256)
    gate = DataLayout((512, 1024), (1024, 1), "bfloat16")
    assert _fused_cuda._stage_data_ok(gate, p) and _fused_cuda._store_tile_ok(p)
    config = _fused_cuda.hopper_config(p, gate, True, True)
    assert (config.bn, config.stages, config.stage_data, config.store_tile) == (256, 3, True, True)
    specs = HK.tensor_map_specs(config, 512, 1024, 256, 1, (0, 256, 0), (0, 1024, 0), (4096, 1024, 0), (8192, 1024, 0))
    assert [s[1] for s in specs] == [[256, 512], [1024, 256], [1024, 512], [1024, 512]]
    assert [s[3] for s in specs] == [(64, 128), (64, 64), (64, 128), (64, 128)]
    # not staged: a per-row vector, float32 data, a transposed view, another shape, rows 8 bytes apart
    for data in (DataLayout((512,), (1,), "bfloat16"), DataLayout((512, 1024), (1024, 1), "float32"),
                 DataLayout((512, 1024), (1, 512), "bfloat16"), DataLayout((512, 512), (512, 1), "bfloat16"),
                 DataLayout((512, 1024), (1028, 1), "bfloat16")):
        assert not _fused_cuda._stage_data_ok(data, p), data
    batched = _problem(128, 256, 64, batch=3)
    assert _fused_cuda._stage_data_ok(DataLayout((3, 128, 256), (128 * 256, 256, 1), "float16"), batched)
    assert _fused_cuda._stage_data_ok(DataLayout((128, 256), (256, 1), "float16"), batched)  # one for every batch
    # results: float32, rows 2 bytes apart from a 16-byte multiple
    assert not _fused_cuda._store_tile_ok(_problem(512, 1024, 256, out="float32"))
    assert not _fused_cuda._store_tile_ok(_problem(512, 1027, 256, ldd=1027))
    no_buffer = _fused_cuda.hopper_config(_problem(512, 1024, 256, out="float32"), None, False, False)
    assert (no_buffer.stages, no_buffer.tile_buffer) == (4, False)


def silu_gate(value, row, col, data):
    return value / (np.float32(1) + math.exp(-value)) * data[row, col]


def scale_clamp(value, row, col, data):
    return min(max(value * data[row], np.float32(-4)), np.float32(4))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["staged", "direct"])
def test_hopper_kernel_ptx(variant):
    """The sm_90a kernel, compiled once without the epilog and linked with it (nvJitLink, LTO): TMA copies on
    mbarriers, four wgmma per k-slice, setmaxnreg, no local memory, no call left. Staged (whole tiles): the gate is
    read from shared memory only (the view's range checks fold away after the link inlines the epilog: no
    device-memory load is left), D leaves in bulk tensor stores after a barrier among the consumers, float32 divisions
    are div.full, and ptxas spills nothing (the tile offsets are not hoisted out of the tile loop). Direct (128-wide
    tiles with edge tiles, B K-major): the per-row scale is read through the read-only cache, D stored in 32-bit
    pairs."""
    from mathpy.device import _gemm_build
    from mathpy.device._gemm_kernel import EPILOG_SYMBOL
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _link
    from mathpy.jit import _matmul_epilog as E

    staged = variant == "staged"
    bn = 256 if staged else 128
    config = HK.HopperConfig("bfloat16", "bfloat16", bn=bn, stages=HK.max_stages(bn, staged), b_mn_major=staged,
                             epilog=True, operands=1, edges=not staged, stage_data=staged, store_tile=staged)
    epilog = E.as_matmul_epilog(silu_gate if staged else scale_clamp, ("data",))
    kinds = (("bfloat16", 2),) if staged else (("float32", 1),)
    skeleton, params, _ = _gemm_build.hopper_ltoir(config, (9, 0))
    wrapper, _ = W.wrapper_ltoir(epilog, kinds, "bfloat16", (128, bn) if staged else None, (9, 0))
    _, ptx = _link.link({"kernel": skeleton, "epilog": wrapper}, "sm_90a", ("-Xnvvm=-prec-div=0",),
                        inlined=EPILOG_SYMBOL)
    assert re.search(r"^\.target sm_90a", ptx, re.M) and ".maxntid 384, 1, 1" in ptx
    assert len(re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k16\.f32\.bf16\.bf16", ptx)) == 4
    loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global", ptx))
    stores = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx))
    assert "mbarrier.try_wait.parity" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert not re.search(r"\b(ld|st)\.local", ptx) and not re.search(r"\bcall", ptx)
    assert params[:4] == ["tmap_a", "tmap_b", "tmap_data", "tmap_d"] and params[-1] == "o0_t2"
    if staged:
        assert loads == 1 + bn // 64 + bn // 64 and stores == 2 * (bn // 64)  # A, B boxes, data boxes; 2 store sites
        # whole tiles (the shapes the route rule sends this kernel): the gate is read from shared memory only, one
        # ld.shared per value of the thread (bn / 2), no device-memory fallback left
        assert "ld.global.nc" not in ptx and len(re.findall(r"ld\.shared\.u16", ptx)) == bn // 2
        assert "bar.sync 1, 256" in ptx and "cp.async.bulk.wait_group.read 0" in ptx
        assert len(re.findall(r"st\.shared\.u32", ptx)) == bn // 4 and "cvt.rn.bf16x2.f32" in ptx
        # bf16 result: the epilog's divisions are div.full.f32 (no branch to a slow path per division)
        assert "div.full.f32" in ptx and "div.rn.f32" not in ptx
    else:
        assert loads == 2 and stores == 0 and "ld.global.nc.f32" in ptx and "st.global.u32" in ptx
    if shutil.which("ptxas"):  # where the toolkit is installed: no spills (NVVM may be newer than ptxas: patch)
        report = _gemm_build.ptxas_report(ptx)
        spilled = re.search(r"(\d+) bytes spill stores", report)
        if staged:
            assert spilled is None or spilled.group(1) == "0", report
