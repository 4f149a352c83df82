"""Block-level device APIs (mathpy.device) against the vendor libraries, on one GPU.

1. Batched block FFT (complex64, sizes 64..4096) vs cuFFT (cupy.fft with a cached plan) and torch.fft.
   Target: mathpy >= 0.8x cuFFT's throughput.
2. Fused FFT convolution (load, FFT, * filter, inverse FFT, store in one kernel) vs the issue's baseline: cuFFT with
   the filter multiply fused as an LTO epilog followed by an inverse cuFFT (mathpy.fft.FFT, planned once, only the
   executes timed). Target: >= 1.5x. Unfused cupy/torch ``ifft(fft(x) * filter)`` are shown too.
3. Block GEMM on many small batched GEMMs (64^3, 128^3; fp32, fp16, bf16, fp64) vs cuBLAS batched GEMM
   (torch.bmm, cupy.matmul); targets >= 0.7x for fp16/bf16, >= 0.6x for fp32/fp64. fp16/bf16 run on the tensor
   cores (mma.sync.m16n8k16 as inline PTX), fp64 on the fp64 tensor cores (mma.sync.m8n8k4.f64), fp32 on the CUDA
   cores; each with the one-buffer kernel, the double-buffered one (cp.async of the next k-slice) and, for 128^3, the
   multistage one (a ring of k-slice buffers, all of a block's slices in flight at once, over 48 KiB of shared memory
   through mathpy.device.allow_shared_memory).

Every result is checked against the reference library before it is timed. Prints a table and saves
benchmarks/results/bench_device.png (and .json).
Usage:  python benchmarks/bench_device.py [--quick]      (--sweep: time other FFT block configurations instead;
        --smoke: tiny sizes, to check the script itself; --gemm: the block GEMM section only; --size 128: that GEMM
        size only; --prec float16,float64: those precisions only; --lean: one kernel variant per GEMM case)
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the device kernels' harness

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda  # noqa: E402

patch_numpy_for_numba_cuda()
import numba  # noqa: E402
from numba import cuda  # noqa: E402

import _report  # noqa: E402  (the Markdown table docs/benchmarks.md shows)
import mathpy.device  # noqa: E402
from _device_checks import (  # noqa: E402
    bf16_bits, bf16_to_float32, convolution_kernel, fft_kernel, matmul_kernel, matmul_multistage_kernel,
    matmul_persistent_kernel, matmul_pipelined_kernel, persistent_grid,
)

QUICK = "--quick" in sys.argv
SMOKE = "--smoke" in sys.argv  # tiny sizes: checks the script itself (e.g. under the simulator), not the GPU
LEAN = "--lean" in sys.argv  # block GEMM: one kernel variant per case (less compile time)
SIZES = (int(sys.argv[sys.argv.index("--size") + 1]),) if "--size" in sys.argv else (64, 128)
MULTISTAGE_SHARED = 232448  # sm_90's opt-in limit of dynamic shared memory per block (227 KiB)
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def fail(msg):
    print(f"bench_device: FAILED: {msg}", file=sys.stderr)
    raise SystemExit(1)


try:
    import cupy as cp
except Exception as e:  # pragma: no cover - GPU machine only
    fail(f"cupy is needed for the reference timings ({e!r})")
try:
    import torch

    if not torch.cuda.is_available():
        torch = None
except Exception:
    torch = None
try:
    import importlib

    importlib.import_module("nvmath.device")
    HAVE_NVMATH = True
except Exception:
    HAVE_NVMATH = False

if not cuda.is_available():
    fail("no CUDA device visible to numba-cuda")


def gpu_time(fn, min_seconds=0.03, max_iters=200):
    """ms per call: warm up, then the best of three rounds of CUDA events around enough launches to last
    ~min_seconds."""
    fn()
    cp.cuda.runtime.deviceSynchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
    iters = int(min(max_iters, max(3, min_seconds * 1e3 / one)))
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, end) / iters)
    return best


def as_numba(x):
    if numba.config.ENABLE_CUDASIM:  # --smoke under the simulator: host arrays go straight in
        return x
    return cuda.as_cuda_array(x, sync=False)


def rel_err(a, b):
    a, b = cp.asarray(a), cp.asarray(b)
    return float(cp.abs(a - b).max() / cp.abs(b).max())


rows = []  # (section, problem, mathpy_ms, {peer: ms}, ratio, target)


# ------------------------------------------------------------------ 1. batched FFT
def bench_fft():
    total = 1 << (23 if QUICK else 25)  # complex64 elements per call (268 MB in + 268 MB out at 2^25)
    sizes = [64, 256, 1024, 4096] if QUICK else [64, 128, 256, 512, 1024, 2048, 4096]
    if SMOKE:
        total, sizes = 1 << 9, [64, 256]
    for n in sizes:
        batch = total // n
        FFT = mathpy.device.fft(size=n, precision=np.float32, direction="forward")
        kern = fft_kernel(FFT)
        x = (cp.random.standard_normal((batch, n), dtype=cp.float32)
             + 1j * cp.random.standard_normal((batch, n), dtype=cp.float32)).astype(cp.complex64)
        y = cp.empty_like(x)
        xn, yn = as_numba(x), as_numba(y)
        launch = kern[FFT.grid_dim(batch), FFT.block_dim, 0, FFT.shared_memory_size]
        t0 = time.perf_counter()
        launch(xn, yn)
        cuda.synchronize()
        compile_s = time.perf_counter() - t0
        ref = cp.fft.fft(x, axis=-1)
        err = rel_err(y, ref)
        if err > 1e-5:
            fail(f"block FFT size {n}: relative error {err:.2e}")
        t_m = gpu_time(lambda: launch(xn, yn))
        t_c = gpu_time(lambda: cp.fft.fft(x, axis=-1))
        peers = {"cuFFT (cupy)": t_c}
        if torch is not None:
            xt = torch.as_tensor(x, device="cuda")
            tref = torch.fft.fft(xt)
            if rel_err(cp.asarray(tref), ref) > 1e-5:
                fail("torch.fft disagrees with cupy")
            peers["torch.fft"] = gpu_time(lambda: torch.fft.fft(xt))
        rows.append(("FFT c64", f"n={n} x {batch} (ept={FFT.elements_per_thread}, fpb={FFT.ffts_per_block})",
                     t_m, peers, t_c / t_m, ">= 0.80", f"compile {compile_s:.1f}s, err {err:.1e}"))


# ------------------------------------------------------------------ 2. fused convolution
def bench_convolution():
    total = 1 << (23 if QUICK else 25)
    sizes = [256, 1024, 4096] if QUICK else [64, 256, 1024, 2048, 4096]
    if SMOKE:
        total, sizes = 1 << 9, [64, 256]
    for n in sizes:
        batch = total // n
        FWD = mathpy.device.fft(size=n, precision=np.float32, direction="forward")
        INV = mathpy.device.fft(size=n, precision=np.float32, direction="inverse",
                                elements_per_thread=FWD.elements_per_thread, ffts_per_block=FWD.ffts_per_block)
        x = (cp.random.standard_normal((batch, n), dtype=cp.float32)
             + 1j * cp.random.standard_normal((batch, n), dtype=cp.float32)).astype(cp.complex64)
        filt = (cp.random.standard_normal(n, dtype=cp.float32) / n).astype(cp.complex64)
        y = cp.empty_like(x)
        xn, fn_, yn = as_numba(x), as_numba(filt), as_numba(y)
        launch = convolution_kernel(FWD, INV)[FWD.grid_dim(batch), FWD.block_dim, 0, FWD.shared_memory_size]
        launch(xn, fn_, yn)
        cuda.synchronize()
        ref = cp.fft.ifft(cp.fft.fft(x, axis=-1) * (filt * n), axis=-1)
        err = rel_err(y, ref)
        if err > 1e-5:
            fail(f"fused convolution size {n}: relative error {err:.2e}")
        t_m = gpu_time(lambda: launch(xn, fn_, yn))
        filt_n = filt * n
        run_fused = fused_cufft_convolution(x, filt, n)
        err_f = rel_err(run_fused(), ref)
        if err_f > 1e-5:
            fail(f"cuFFT epilog + inverse cuFFT (mathpy.fft) size {n}: relative error {err_f:.2e}")
        t_f = gpu_time(run_fused)
        t_c = gpu_time(lambda: cp.fft.ifft(cp.fft.fft(x, axis=-1) * filt_n, axis=-1))
        peers = {"cuFFT+epilog, cuFFT": t_f, "cupy ifft(fft*f)": t_c}
        if torch is not None:
            xt, ft = torch.as_tensor(x, device="cuda"), torch.as_tensor(filt_n, device="cuda")
            peers["torch ifft(fft*f)"] = gpu_time(lambda: torch.fft.ifft(torch.fft.fft(xt) * ft))
        rows.append(("FFT conv c64", f"n={n} x {batch}", t_m, peers, t_f / t_m, ">= 1.5",
                     f"err {err:.1e}; vs unfused cupy {t_c / t_m:.2f}x"))


def fused_cufft_convolution(x, filt, n):
    """The issue's baseline: cuFFT with the filter multiply fused as an LTO epilog (mathpy.fft.FFT with
    ``epilog=Callback(fn, data=filter)``), then an in-place inverse cuFFT of that result; planned once here, the
    returned function runs only the two executes (unnormalised, like the fused kernel)."""
    import mathpy.fft

    if SMOKE and numba.config.ENABLE_CUDASIM:
        return lambda: cp.fft.ifft(cp.fft.fft(x, axis=-1) * (filt * n), axis=-1)
    length = np.uint64(n)  # offset is uint64: an unsigned constant keeps `%` an integer AND (no float promotion)

    def multiply_filter(data_out, offset, value, user_info, unused):
        data_out[offset] = value * user_info[offset % length]

    fwd = mathpy.fft.FFT(x, axes=[1])
    fwd.plan(epilog=mathpy.fft.Callback(multiply_filter, data=filt))  # filter (n,) broadcast over the batch
    y = fwd.execute()
    inv = mathpy.fft.FFT(y, axes=[1], options={"inplace": True})
    inv.plan()

    def run():
        out = fwd.execute()
        inv.reset_operand(out)
        return inv.execute(direction="inverse")

    run()
    cp.cuda.runtime.deviceSynchronize()
    return run


# ------------------------------------------------------------------ 3. batched GEMM
# multistage kernel: (k-slice, buffers) per precision for 128^3, every slice of K = 128 in flight at once: 4 x 32 for
# 16-bit types (76 KiB: two blocks per SM), 8 x 16 for fp64 in 6 buffers (222 KiB, one block per SM)
MULTISTAGE = {"float16": (32, 4), "bfloat16": (32, 4), "float32": (32, 4), "float64": (16, 6)}
# the persistent kernel (a ring of k-slices across batch entries, a few blocks per SM): (k-slice, stages) per size
PERSISTENT = {64: {"float16": (32, 4), "bfloat16": (32, 4), "float32": (16, 4), "float64": (16, 4)},
              128: {"float16": (32, 4), "bfloat16": (32, 4), "float32": (16, 4), "float64": (16, 4)}}


def _gemm_variants(size, prec):
    """(kernel, description, buffers) to time for one size and precision: the one-buffer kernel with the largest
    k-slice that fits 48 KiB, the double-buffered kernel (the next slice copied during the mma) and, for 128^3, the
    multistage kernel (MULTISTAGE)."""
    # fp32: the row-major arrangement takes the vector tiles (16-byte shared loads), the col-major one the strided
    # 1-element tiles; both are timed
    arrangements = ["row_major"] if prec in ("float16", "bfloat16", "float64") else ["row_major", "col_major"]
    out = []
    kernels = ("registers", "pipelined")
    if LEAN:  # one kernel per case, the fastest measured on the H200 (docs/benchmarks.md): the one-buffer kernel for
        # 64^3; for 128^3 the double-buffered one, or the multistage one for fp64
        arrangements = arrangements[:1]
        kernels = ("registers",) if size <= 64 else (() if prec == "float64" else ("pipelined",))
    for arrangement in arrangements:
        for kernel in kernels:
            for kb in (size, size // 2, size // 4, size // 8, size // 16):
                try:
                    G = mathpy.device.matmul(size, size, kb, prec, a_arrangement=arrangement)
                except ValueError:
                    continue
                if kernel == "pipelined" and (2 * G.shared_memory_size_ab > 48 * 1024 or size // kb < 2):
                    continue
                out.append((kernel, G, 2 if kernel == "pipelined" else 1))
                break
    if size == 128 and not (LEAN and prec != "float64"):
        kb, stages = MULTISTAGE[prec]
        G = mathpy.device.matmul(size, size, kb, prec, a_arrangement="row_major")
        if stages * G.shared_memory_size_ab <= MULTISTAGE_SHARED:
            out.append(("multistage", G, stages))
    if size in PERSISTENT:  # timed in --lean too: the variant issue 24 expects to be the fastest
        kb, stages = PERSISTENT[size][prec]
        G = mathpy.device.matmul(size, size, kb, prec, a_arrangement="row_major")
        if stages * G.shared_memory_size_ab <= MULTISTAGE_SHARED:
            out.append(("persistent", G, stages))
    return out


def bench_gemm():
    cases = [case for case in ((64, 4096), (128, 2048)) if case[0] in SIZES]
    precisions = ["float16", "bfloat16", "float32", "float64"]
    if "--prec" in sys.argv:  # e.g. --prec float16,float64
        precisions = sys.argv[sys.argv.index("--prec") + 1].split(",")
    if QUICK:
        precisions = precisions[:2]
    if SMOKE:
        cases = [(16, 2), (32, 2)]
    for size, batch in cases:
        for prec in precisions:
            rng = cp.random.default_rng(0)
            a32 = rng.standard_normal((batch, size, size), dtype=cp.float32) / np.sqrt(size)
            b32 = rng.standard_normal((batch, size, size), dtype=cp.float32)
            if prec == "bfloat16":
                a = cp.asarray(bf16_bits(cp.asnumpy(a32)))
                b = cp.asarray(bf16_bits(cp.asnumpy(b32)))
                a_val = cp.asarray(bf16_to_float32(cp.asnumpy(a)))
                b_val = cp.asarray(bf16_to_float32(cp.asnumpy(b)))
            else:
                a, b = a32.astype(prec), b32.astype(prec)
                a_val, b_val = a.astype(cp.float64), b.astype(cp.float64)
            ref = cp.matmul(a_val.astype(cp.float64), b_val.astype(cp.float64))
            peers = {}
            if prec != "bfloat16":
                peers["cupy.matmul"] = gpu_time(lambda: cp.matmul(a, b))
            if torch is not None:
                if prec == "bfloat16":
                    at = torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)
                    bt = torch.as_tensor(b.view(cp.int16), device="cuda").view(torch.bfloat16)
                else:
                    at, bt = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
                peers["torch.bmm"] = gpu_time(lambda: torch.bmm(at, bt))
            best_peer = min(peers.values()) if peers else float("nan")
            flops = 2.0 * batch * size**3
            for kernel, G, buffers in _gemm_variants(size, prec):
                c = cp.full((batch, size, size), np.nan if prec != "bfloat16" else 0xFFFF, dtype=G.storage_dtype)
                an, bn, cn = as_numba(a), as_numba(b), as_numba(c)
                shared = buffers * G.shared_memory_size_ab
                grid = batch
                if kernel == "persistent":
                    k_fn = matmul_persistent_kernel(G, size, buffers)
                    mathpy.device.allow_shared_memory(k_fn, shared, an, bn, cn, 1.0, 0.0)
                    grid = persistent_grid(G, buffers, batch, cuda.get_current_device().MULTIPROCESSOR_COUNT)
                elif kernel == "multistage":
                    k_fn = matmul_multistage_kernel(G, size, buffers)
                    mathpy.device.allow_shared_memory(k_fn, shared, an, bn, cn, 1.0, 0.0)
                elif kernel == "pipelined":
                    k_fn = matmul_pipelined_kernel(G, size)
                else:
                    k_fn = matmul_kernel(G, size)
                launch = k_fn[grid, G.block_dim, 0, shared]
                launch(an, bn, cn, 1.0, 0.0)
                cuda.synchronize()
                out = cp.asarray(bf16_to_float32(cp.asnumpy(c))) if prec == "bfloat16" else c
                err = rel_err(out.astype(cp.float64), ref)
                tol = {"float32": 1e-5, "float64": 1e-12, "float16": 3e-3, "bfloat16": 2e-2}[prec]
                if not err <= tol:
                    print(f"bench_device: block GEMM {size}^3 {prec} ({kernel}, kb={G.k}) WRONG: relative error "
                          f"{err:.2e}", file=sys.stderr, flush=True)
                    rows.append((f"GEMM {prec}", f"{size}^3 x {batch} ({kernel}, kb={G.k}) WRONG", float("nan"),
                                 peers, float("nan"), "-", f"err {err:.1e}"))
                    continue
                if kernel in ("multistage", "persistent"):
                    kernel = f"{kernel} x{buffers}" + (f", {grid} blocks" if grid != batch else "")
                t_m = gpu_time(lambda: launch(an, bn, cn, 1.0, 0.0))
                engine = (f"{'mma' if prec != 'float64' else 'dmma'}, {G.block_size} thr, warp "
                          f"{G.warp_tile_m}x{G.warp_tile_n}" if G.tensor_cores
                          else f"CUDA cores, {'vector ' if G.vector_tiles else ''}tile {G.tile_m}x{G.tile_n}")
                rows.append((f"GEMM {prec}", f"{size}^3 x {batch} ({kernel}, kb={G.k}, {engine})", t_m, peers,
                             best_peer / t_m, ">= 0.7" if prec in ("float16", "bfloat16") else ">= 0.6",
                             f"{flops / t_m / 1e9:.1f} TFLOP/s, err {err:.1e}"))
                print(f"  GEMM {prec} {size}^3 x {batch} {kernel} kb={G.k}: {t_m:.4f} ms, best cuBLAS "
                      f"{best_peer:.4f} ({best_peer / t_m:.2f}x)", flush=True)


def sweep_fft():
    """--sweep: time other elements_per_thread / ffts_per_block choices, to tune the defaults."""
    total = 1 << 25
    print("\nFFT configuration sweep (complex64, ms per call of 2^25 elements; * = default)")
    for n in (64, 128, 256, 512, 1024, 2048, 4096):
        batch = total // n
        x = (cp.random.standard_normal((batch, n), dtype=cp.float32)
             + 1j * cp.random.standard_normal((batch, n), dtype=cp.float32)).astype(cp.complex64)
        y = cp.empty_like(x)
        xn, yn = as_numba(x), as_numba(y)
        ref = cp.fft.fft(x, axis=-1)
        default = mathpy.device.fft(size=n)
        results = []
        for ept in (4, 8, 16):
            threads = n // ept
            if threads > 1024 or threads < 1:
                continue
            for fpb in sorted({1, 2, 4, 8, 16, max(1, 128 // threads), max(1, 256 // threads), max(1, 512 // threads)}):
                try:
                    FFT = mathpy.device.fft(size=n, elements_per_thread=ept, ffts_per_block=fpb)
                except ValueError:
                    continue
                launch = fft_kernel(FFT)[FFT.grid_dim(batch), FFT.block_dim, 0, FFT.shared_memory_size]
                launch(xn, yn)
                cuda.synchronize()
                if rel_err(y, ref) > 1e-5:
                    fail(f"sweep n={n} ept={ept} fpb={fpb}: wrong result")
                t = gpu_time(lambda: launch(xn, yn), min_seconds=0.01)
                mark = "*" if FFT is default else " "
                results.append((t, f"{mark}ept={ept:<2} fpb={fpb:<3} {t:.4f} ms"))
        results.sort()
        print(f"n={n:<5} " + " | ".join(r[1] for r in results[:6]))


def print_table(gpu_name):
    print("\n" + _report.environment(gpu_name) + "\n")
    print(_report.device_table(rows))
    print("nvmath-python device API:", "importable (not benchmarked here)" if HAVE_NVMATH else "not installed")


def _plot_label(row, prefix):
    label = row[1].split(" (")[0]
    if prefix == "GEMM":
        label = label.split(" x ")[0] + " " + row[0].split()[1]
        label += " mma" + row[1].split("mma,")[1].split(" thr")[0] if "mma," in row[1] else " CUDA cores"
    return label


def plot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"(no plot: matplotlib unavailable: {e!r})")
        return
    os.makedirs(RESULTS, exist_ok=True)
    groups = [("FFT c64", "block FFT / cuFFT throughput", 0.8),
              ("FFT conv c64", "fused conv vs cuFFT+epilog, cuFFT", 1.5),
              ("GEMM", "block GEMM / cuBLAS speed", None)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for ax, (prefix, title, target) in zip(axes, groups):
        sel = [r for r in rows if r[0] == prefix or (prefix == "GEMM" and r[0].startswith("GEMM"))]
        labels = [_plot_label(r, prefix) for r in sel]
        ax.bar(range(len(sel)), [r[4] for r in sel], color="tab:green")
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        if target:
            ax.axhline(target, color="red", linestyle="--", label=f"target {target}")
            ax.legend()
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_title(title)
        ax.set_ylabel("ratio (higher is better)")
    fig.tight_layout()
    path = os.path.join(RESULTS, "bench_device.png")
    fig.savefig(path, dpi=110)
    print(f"plot saved to {path}")


def main():
    t0 = time.perf_counter()
    dev = cp.cuda.runtime.getDeviceProperties(0)
    from importlib.metadata import version

    print(f"device: {dev['name'].decode()}  numba-cuda {version('numba-cuda')}  cupy {cp.__version__}  "
          f"torch {torch.__version__ if torch else 'n/a'}  (cupy.fft caches its cuFFT plans after the first call)")
    if "--sweep" in sys.argv:
        sweep_fft()
        return
    if "--gemm" not in sys.argv:  # --gemm: the block GEMM section only
        bench_fft()
        bench_convolution()
    bench_gemm()
    print_table(dev['name'].decode())
    plot()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bench_device.json"), "w") as f:
        json.dump([{"section": r[0], "problem": r[1], "mathpy_ms": r[2], "peers_ms": r[3], "ratio": r[4],
                    "target": r[5], "note": r[6]} for r in rows], f, indent=1)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
