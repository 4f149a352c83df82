"""Python epilogs fused into matmul (issue 14) against cuBLASLt's GEMM followed by the same epilog as a separate
elementwise pass, on one GPU, bf16, row-major operands.

Epilogs: "silu*gate" = ``silu(x) * gate[row, col]`` (a full-size bf16 gate matrix) and "scale+clamp" =
``clamp(x * scale[row], -4, 4)`` (a float32 per-row scale). Peers, timed on the same operands and stream:

- cuBLASLt GEMM alone (``torch.matmul``), the floor for any fused version;
- cuBLASLt GEMM + torch eager epilog (``F.silu(d) * gate``; ``(d * scale[:, None]).clamp_(-4, 4)``);
- cuBLASLt GEMM + one CuPy ``ElementwiseKernel`` pass (the fastest unfused form: one read of D, one of the data,
  one write);
- mathpy: ``Matmul.plan(epilog=f, epilog_inputs={"data": x})`` once, then ``execute()`` (timed), and the stateless
  ``mathpy.matmul(...)``.

Targets: mathpy faster than the best unfused peer on every shape; on 8192^3 at least 0.85x the rate of cuBLASLt's
GEMM with no epilog (ratio = cuBLASLt time / mathpy time). Every mathpy result is checked against the unfused torch
result (relative Frobenius error, bf16 tolerance) before it is timed, with the output poisoned first.

``--sweep`` (issue 24) instead times the Python epilogs on 46 products drawn at random (seeded; ``--list`` prints
them, no GPU needed) in float16, bfloat16, float32, float64 and complex64 with six epilogs, against cuBLAS followed by
the same epilog as torch operations, on whatever route mathpy chooses (``benchmarks/_epilog_sweep.py`` says how the
products are drawn and capped): the table, the geometric means per dtype, the route of each product, a plot
(benchmarks/results/bench_matmul_epilog_sweep.png). About 3 minutes on an H200 the first time (kernel compiles), about
1 minute after.

Usage: ``PYTHONPATH=. python benchmarks/bench_matmul_epilog.py [--quick] [--variants] [--warm N] [--sweep] [--list]``
(``--variants`` also times the wgmma kernel without its staged data / tile stores; ``--warm N`` first compiles every
kernel the run needs in N processes at once into mathpy's disk cache, so that the timed process only loads them;
``--compile-only``: stop after that; ``--epilogs silu*gate``: that epilog only). Prints a table; saves
benchmarks/results/bench_matmul_epilog.json and .png.
"""

import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _epilog_sweep  # noqa: E402
import _report  # noqa: E402

if "--list" in sys.argv:  # the sweep's products, without a GPU
    for i, case in enumerate(_epilog_sweep.products()):
        print(i, *case)
    sys.exit(0)

import mathpy  # noqa: E402

QUICK = "--quick" in sys.argv
VARIANTS_ON = "--variants" in sys.argv
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    sys.exit("bench_matmul_epilog: torch is needed")
if not torch.cuda.is_available():
    sys.exit("bench_matmul_epilog: no CUDA GPU")
try:
    import cupy
except ImportError:  # pragma: no cover
    cupy = None

SHAPES = [(16384, 16384, 256), (8192, 8192, 1024), (8192, 8192, 8192)]
if QUICK:
    SHAPES = [(4096, 4096, 256), (4096, 4096, 4096)]
CLAMP = 4.0
# wgmma kernel variants timed by --variants (CONFIG_OVERRIDE settings; the engine's own choice for these operands:
# 128 x 256 tiles, 3 stages, the gate staged in shared memory, D stored in tiles)
VARIANTS = {
    "silu*gate": (("tile stores, gate from device memory", {"stage_data": False}),
                  ("direct stores, 4 stages", {"stage_data": False, "store_tile": False})),
    "scale+clamp": (("direct stores, 4 stages", {"store_tile": False}),),
}
# --epilogs silu*gate: that epilog only
EPILOGS = sys.argv[sys.argv.index("--epilogs") + 1].split(",") if "--epilogs" in sys.argv else list(VARIANTS)


def silu_gate(value, row, col, data):
    return value / (np.float32(1) + math.exp(-value)) * data[row, col]


def scale_clamp(value, row, col, data):
    return min(max(value * data[row], np.float32(-CLAMP)), np.float32(CLAMP))


def gpu_ms(fn, rounds=5, min_ms=30.0):
    """Median over ``rounds`` of the mean time per call (CUDA events) of enough back-to-back calls for ~min_ms."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    iters = int(min(200, max(3, min_ms / once)))
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def rel_err(x, ref):
    x, ref = x.float(), ref.float()
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


def cupy_passes():
    """One-pass CuPy elementwise kernels for the two epilogs on bf16 data (CuPy has no bfloat16 dtype: the bits travel
    as int16 and are converted exactly, rounding to nearest even on the way out)."""
    if cupy is None:
        return None
    head = ("float v = __uint_as_float(((unsigned int)(unsigned short)x) << 16);",
            "unsigned int u = __float_as_uint(r); u += 0x7FFFu + ((u >> 16) & 1u); y = (short)(u >> 16);")
    silu = cupy.ElementwiseKernel(
        "int16 x, int16 g", "int16 y",
        head[0] + "float gv = __uint_as_float(((unsigned int)(unsigned short)g) << 16);"
        "float r = v / (1.0f + expf(-v)) * gv;" + head[1], "mathpy_bench_silu_gate")
    clamp = cupy.ElementwiseKernel(
        "int16 x, float32 s", "int16 y",
        head[0] + f"float r = fminf(fmaxf(v * s, -{CLAMP}f), {CLAMP}f);" + head[1], "mathpy_bench_scale_clamp")
    return silu, clamp


def _bits(t):
    """A bf16 torch tensor's bits as a CuPy int16 array (no copy)."""
    return cupy.from_dlpack(t.view(torch.int16))


def bench_shape(m, n, k, rows, passes, summary):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(k)).bfloat16()
    b = torch.randn(k, n, device="cuda", generator=g).bfloat16()
    gate = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    scale = torch.rand(m, device="cuda", generator=g) * 4
    flops = 2.0 * m * n * k
    t_gemm = gpu_ms(lambda: torch.matmul(a, b))
    rows.append({"shape": f"{m}x{n}x{k}", "epilog": "none", "impl": "cuBLASLt (torch.matmul)", "ms": t_gemm,
                 "tflops": flops / t_gemm / 1e9})
    for name, fn, data, torch_epilog, cupy_pass in (
            ("silu*gate", silu_gate, gate, lambda d: F.silu(d) * gate, passes and passes[0]),
            ("scale+clamp", scale_clamp, scale, lambda d: (d * scale[:, None]).clamp_(-CLAMP, CLAMP),
             passes and passes[1])):
        if name not in EPILOGS:
            continue
        ref = torch_epilog(torch.matmul(a, b))
        peers = {"cuBLASLt + torch eager": gpu_ms(lambda: torch_epilog(torch.matmul(a, b)))}
        if cupy_pass is not None:
            cd = _bits(data) if data.dtype == torch.bfloat16 else cupy.from_dlpack(data)
            cd = cd if data.ndim == 2 else cd[:, None]

            def unfused_cupy():
                return cupy_pass(_bits(torch.matmul(a, b)), cd)
            got = torch.from_dlpack(unfused_cupy()).view(torch.bfloat16)
            if rel_err(got, ref) < 1e-2:
                peers["cuBLASLt + CuPy 1-pass"] = gpu_ms(unfused_cupy)
            else:
                print(f"  CuPy epilog pass disagrees with torch ({rel_err(got, ref):.2e}): not timed", flush=True)
        mm = mathpy.Matmul(a, b)
        mm.plan(epilog=fn, epilog_inputs={"data": data})
        first = mm.execute()
        first.fill_(float("nan"))
        del first
        out = mm.execute()
        err = rel_err(out, ref)
        ok = bool(torch.isfinite(out).all()) and err < 2e-2
        t_fused = gpu_ms(mm.execute) if ok else float("nan")
        t_stateless = gpu_ms(lambda: mathpy.matmul(a, b, epilog=fn, epilog_inputs={"data": data})) if ok else \
            float("nan")
        algorithm = mm.algorithms[0]
        mm.free()
        best = min(peers.values())
        for impl, t in peers.items():
            rows.append({"shape": f"{m}x{n}x{k}", "epilog": name, "impl": impl, "ms": t, "tflops": flops / t / 1e9})
        rows.append({"shape": f"{m}x{n}x{k}", "epilog": name, "impl": f"mathpy fused ({algorithm}) execute",
                     "ms": t_fused, "tflops": flops / t_fused / 1e9, "error": err, "correct": ok,
                     "vs_best_unfused": best / t_fused, "vs_gemm_alone": t_gemm / t_fused})
        rows.append({"shape": f"{m}x{n}x{k}", "epilog": name, "impl": "mathpy fused stateless", "ms": t_stateless,
                     "tflops": flops / t_stateless / 1e9})
        summary.append({"epilog": name, "shape": f"{m}x{n}x{k}", "mathpy_ms": t_fused, "tflops": flops / t_fused / 1e9,
                        "gemm_ms": t_gemm, "torch_ms": peers["cuBLASLt + torch eager"],
                        "cupy_ms": peers.get("cuBLASLt + CuPy 1-pass"), "stateless_ms": t_stateless})
        print(f"  {m}x{n}x{k} {name}: fused {t_fused:.3f} ms (err {err:.2e}, {algorithm}), best unfused {best:.3f}, "
              f"GEMM alone {t_gemm:.3f}", flush=True)


def _epilog_operands(name, m, n, k, generator=None):
    a = (torch.randn(m, k, device="cuda", generator=generator) / math.sqrt(k)).bfloat16()
    b = torch.randn(k, n, device="cuda", generator=generator).bfloat16()
    if name == "silu*gate":
        data = torch.randn(m, n, device="cuda", generator=generator).bfloat16()
        return a, b, silu_gate, data, lambda d: F.silu(d) * data
    data = torch.rand(m, device="cuda", generator=generator) * 4
    return a, b, scale_clamp, data, lambda d: (d * data[:, None]).clamp_(-CLAMP, CLAMP)


def bench_variants(rows):
    """The wgmma kernel without its staged data / tile stores, on the three shapes (checked, then timed)."""
    from mathpy.host.matmul import _fused_cuda

    for name, variants in VARIANTS.items():
        if name not in EPILOGS:
            continue
        for label, override in variants:
            _fused_cuda.CONFIG_OVERRIDE.clear()
            _fused_cuda.CONFIG_OVERRIDE.update(override)
            for m, n, k in SHAPES:
                a, b, fn, data, torch_epilog = _epilog_operands(name, m, n, k)
                ref = torch_epilog(torch.matmul(a, b))
                with mathpy.Matmul(a, b) as mm:
                    mm.plan(epilog=fn, epilog_inputs={"data": data})
                    out = mm.execute()
                    err = rel_err(out, ref)
                    ok = bool(torch.isfinite(out).all()) and err < 2e-2
                    t = gpu_ms(mm.execute) if ok else float("nan")
                rows.append({"shape": f"{m}x{n}x{k}", "epilog": name, "impl": f"variant: {label}", "ms": t,
                             "tflops": 2.0 * m * n * k / t / 1e9, "error": err, "correct": ok})
                print(f"  variant {name} {label} {m}x{n}x{k}: {t:.3f} ms err {err:.2e}", flush=True)
                del a, b, data, ref, out
    _fused_cuda.CONFIG_OVERRIDE.clear()


def _compile_one(job):
    """One kernel of the run, built by a small problem of the same kind (the kernel depends on the epilog, the dtypes
    and layouts and N > 128, not on the sizes) into mathpy's disk cache."""
    from mathpy.host.matmul import _fused_cuda

    name, override = job
    _fused_cuda.CONFIG_OVERRIDE.update(override)
    t0 = time.perf_counter()
    a, b, fn, data, _ = _epilog_operands(name, 256, 512, 128)
    mathpy.matmul(a, b, epilog=fn, epilog_inputs={"data": data})
    torch.cuda.synchronize()
    return f"{name} {override}: {time.perf_counter() - t0:.1f} s"


def warm(workers):
    """Compile the run's kernels in ``workers`` processes at once (numba-cuda compiles one kernel per process at a
    time, ~10 s each)."""
    import concurrent.futures
    import multiprocessing

    jobs = [(name, {}) for name in EPILOGS]
    if VARIANTS_ON:
        jobs += [(name, override) for name in EPILOGS for _, override in VARIANTS[name]]
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for line in pool.map(_compile_one, jobs):
            print(f"  compiled {line}", flush=True)
    print(f"  ({len(jobs)} kernels in {time.perf_counter() - t0:.1f} s)", flush=True)


def table(rows):
    out = [f"{'shape':>18} {'epilog':>12} {'implementation':>38} {'ms':>8} {'TFLOP/s':>8} {'vs unfused':>10} "
           f"{'vs GEMM':>8}"]
    for r in rows:
        extra = (f"{r['vs_best_unfused']:10.2f} {r['vs_gemm_alone']:8.2f}" if "vs_best_unfused" in r else
                 f"{'':>10} {'':>8}")
        out.append(f"{r['shape']:>18} {r['epilog']:>12} {r['impl']:>38} {r['ms']:8.3f} {r['tflops']:8.1f} {extra}")
    return "\n".join(out)


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    fused = [r for r in rows if "vs_best_unfused" in r]
    labels = [f"{r['shape']}\n{r['epilog']}" for r in fused]
    x = np.arange(len(fused))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(fused)), 4))
    ax.bar(x - 0.2, [r["vs_best_unfused"] for r in fused], 0.4, label="speed-up vs best unfused")
    ax.bar(x + 0.2, [r["vs_gemm_alone"] for r in fused], 0.4, label="rate vs cuBLASLt GEMM alone")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.85, color="r", lw=0.8, ls="--")
    ax.set_xticks(x, labels, fontsize=7)
    ax.legend(fontsize=8)
    ax.set_title(f"mathpy fused Python epilogs, bf16, {torch.cuda.get_device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def sweep():
    rows = []
    cases = _epilog_sweep.products()
    t0 = time.perf_counter()
    for i, case in enumerate(cases):
        row = _epilog_sweep.run_product(case, i, torch, mathpy, gpu_ms, rel_err)
        rows.append(row)
        print(f"  {i:2d} {case}: {row['route']}, unfused {row['unfused_ms']:.4f} ms, mathpy {row['mathpy_ms']:.4f} "
              f"({row['speedup']:.2f}x), planned {row['planned_ms']:.4f} ({row['speedup_planned']:.2f}x), error "
              f"{row['error']:.1e}{'' if row['correct'] else ' WRONG'} [{time.perf_counter() - t0:.0f} s]", flush=True)
    print("\n" + _report.environment(torch.cuda.get_device_name()) + "\n")
    print(_epilog_sweep.sweep_table(rows))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bench_matmul_epilog_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    _epilog_sweep.sweep_plot(rows, os.path.join(RESULTS, "bench_matmul_epilog_sweep.png"),
                             f"Python epilogs vs torch.matmul + torch ops, {torch.cuda.get_device_name()}")
    return 1 if any(not r["correct"] for r in rows) else 0


def main():
    if "--sweep" in sys.argv:
        return sweep()
    rows, summary = [], []
    print(f"bench_matmul_epilog on {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if "--warm" in sys.argv:
        warm(int(sys.argv[sys.argv.index("--warm") + 1]))
        if "--compile-only" in sys.argv:
            return 0
    passes = cupy_passes()
    for m, n, k in SHAPES:
        t0 = time.perf_counter()
        bench_shape(m, n, k, rows, passes, summary)
        print(f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    if VARIANTS_ON:
        bench_variants(rows)
    print(table(rows))
    print("\n" + _report.environment(torch.cuda.get_device_name()) + "\n")
    print(_report.epilog_table(summary))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bench_matmul_epilog.json"), "w") as f:
        json.dump(rows, f, indent=1)
    plot(rows, os.path.join(RESULTS, "bench_matmul_epilog.png"))
    failed = [r for r in rows if r.get("correct") is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
