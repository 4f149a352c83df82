"""mathpy matmul vs torch and nvmath-python on one GPU, side by side in one process.

    python benchmarks/bench_matmul.py            # about 1-2 minutes on an H200
    python benchmarks/bench_matmul.py --quick    # fewer repetitions

What it measures (random non-zero data, warm-up first, medians of several rounds; every result checked against torch):

1. GEMM throughput: 8192^3 bf16 and fp16, 4096^3 fp32, 16384 x 16384 x 256 bf16, 64 x 8192 x 8192 bf16. Each
   library runs a stateful, planned product (mathpy ``Matmul``, nvmath ``Matmul``, torch ``matmul(out=)``). Time is
   GPU time: CUDA events around ``reps`` calls queued behind a long sleep kernel, so the host's per-call cost cannot
   hide in it. Ratios are peer time / mathpy time (target >= 0.98 against the faster of torch and nvmath). Like for
   like: every library returns the same result layout, C order (row-major) for the C-ordered operands, as torch and
   NumPy do and as mathpy does by default (checked for each result). A second mathpy column times the same product
   with ``MatmulOptions(result_order="F")``: a column-major result, cuBLASLt's own order (its TT form on row-major
   operands), with its ratio to torch's C-order result.
2. Fused RELU_BIAS (bias per row of the result): mathpy vs nvmath (both fused in cuBLASLt) vs torch ``relu(addmm)``.
3. Host overhead of the stateful execute on 128^3 fp16: wall time per call over 2000 asynchronous calls (GPU time is
   ~3 us, so this is the Python + launch cost): mathpy ``Matmul.execute``, mathpy's engine alone, mathpy ``matmul()``
   stateless, nvmath ``Matmul.execute``, ``torch.matmul``.

Writes benchmarks/results/bench_matmul.md (the table), .json and .png. Needs torch with CUDA; nvmath-python is used
when importable.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda (under nvmath) still references np.row_stack on NumPy >= 2.5
    np.row_stack = np.vstack

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing
sys.path.insert(0, HERE)
import _report  # noqa: E402  (the Markdown tables docs/benchmarks.md shows)

try:
    import torch
except ImportError:
    sys.exit("bench_matmul needs torch with CUDA")
if not torch.cuda.is_available():
    sys.exit("bench_matmul needs a CUDA GPU (torch.cuda.is_available() is False)")

import mathpy  # noqa: E402

try:
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda
    patch_numpy_for_numba_cuda()
except Exception:
    pass

try:
    import nvmath
    from nvmath.linalg.advanced import Matmul as NvMatmul
    from nvmath.linalg.advanced import MatmulEpilog as NvEpilog
except Exception as e:  # not installed or broken: compare with torch alone
    print(f"(nvmath-python not available: {e.__class__.__name__}: {e})")
    nvmath = None

SHAPES = [(8192, 8192, 8192, torch.bfloat16), (8192, 8192, 8192, torch.float16), (4096, 4096, 4096, torch.float32),
          (16384, 16384, 256, torch.bfloat16), (64, 8192, 8192, torch.bfloat16)]
RESULTS = os.path.join(HERE, "results")


# ---------------------------------------------------------------------------------------------------------------------
# mathpy, through the public API

MpMatmul, MpEpilog, mp_matmul = mathpy.Matmul, mathpy.MatmulEpilog, mathpy.matmul


def mathpy_matmul(a, b, order=None):
    return MpMatmul(a, b, options={"result_order": order})


# ---------------------------------------------------------------------------------------------------------------------
# Timing


def gpu_ms(fn, reps, rounds=5):
    """Median over ``rounds`` of GPU ms per call: ``reps`` calls queued behind a sleep kernel, timed by events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(rounds):
        torch.cuda._sleep(20_000_000)  # ~10 ms: the host queues every call before the GPU reaches them
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / reps)
    return statistics.median(per_call)


def host_us(fn, reps=2000, rounds=3):
    """Median wall microseconds per asynchronous call (the host's cost when the GPU work is tiny)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - t0) / reps * 1e6)
    return statistics.median(per_call)


def check(name, got, ref, tol, contiguous=True):
    """``got`` equals torch's ``ref`` to ``tol`` and has the layout asked: C order (``contiguous`` True, torch's),
    column-major (False), or any (None: the peers' results, whose layout is recorded instead)."""
    if contiguous is not None and (contiguous != got.is_contiguous() or
                                   (not contiguous and not got.T.is_contiguous())):
        raise AssertionError(f"{name}: result strides {got.stride()}, expected "
                             f"{'C order as torch' if contiguous else 'column-major'}")
    got, ref = got.float(), ref.float()
    error = (got - ref).abs().max().item()
    scale = max(1.0, ref.abs().max().item())
    if not error <= tol * scale:
        raise AssertionError(f"{name}: wrong result (max error {error:.3g}, scale {scale:.3g}, tolerance {tol})")


TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-3}


def randn(shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)
    x[x == 0] = 0.5
    return x.to(dtype)


# ---------------------------------------------------------------------------------------------------------------------


def bench_gemm(quick):
    rows = []
    for m, n, k, dtype in SHAPES:
        a, b = randn((m, k), dtype, 1), randn((k, n), dtype, 2)
        bias = randn((m, 1), dtype, 3)
        flop = 2.0 * m * n * k
        reps = max(3, min(50, int(2e13 / flop))) // (2 if quick else 1) or 1
        row = {"shape": f"{m}x{n}x{k}", "dtype": str(dtype).replace("torch.", "")}

        ref = a @ b
        out = torch.empty_like(ref)
        row["torch_ms"] = gpu_ms(lambda: torch.matmul(a, b, out=out), reps)
        ref_relu = torch.relu(torch.addmm(bias, a, b))
        row["torch_relu_bias_ms"] = gpu_ms(lambda: torch.relu(torch.addmm(bias, a, b)), reps)

        mm = mathpy_matmul(a, b)  # the default: C order, as torch's result
        mm.plan()
        check(f"mathpy {row['shape']} {row['dtype']}", mm.execute(), ref, TOL[dtype])  # first call may self-autotune
        row["mathpy_ms"] = gpu_ms(mm.execute, reps)
        mm.free()
        mf = mathpy_matmul(a, b, "F")  # column-major: cuBLASLt's TT form on these row-major operands
        mf.plan()
        check(f"mathpy F-order {row['shape']}", mf.execute(), ref, TOL[dtype], contiguous=False)
        row["mathpy_f_ms"] = gpu_ms(mf.execute, reps)
        mf.free()
        mme = mathpy_matmul(a, b)
        mme.plan(epilog=MpEpilog.RELU_BIAS, epilog_inputs={"bias": bias})
        result = mme.execute()  # a per-row bias: column-major (cuBLASLt's convention), as nvmath's
        check(f"mathpy RELU_BIAS {row['shape']}", result[0] if isinstance(result, tuple) else result, ref_relu,
              TOL[dtype], contiguous=False)
        row["mathpy_relu_bias_ms"] = gpu_ms(mme.execute, reps)
        mme.free()

        if nvmath is not None:
            nv = NvMatmul(a, b)
            nv.plan()
            result = nv.execute()
            check(f"nvmath {row['shape']}", result, ref, TOL[dtype], contiguous=None)
            row["nvmath_c_order"] = bool(result.is_contiguous())  # nvmath's rule gives a's order: C here
            row["nvmath_ms"] = gpu_ms(nv.execute, reps)
            nv.free()
            nve = NvMatmul(a, b)
            nve.plan(epilog=NvEpilog.RELU_BIAS, epilog_inputs={"bias": bias})
            check(f"nvmath RELU_BIAS {row['shape']}", nve.execute(), ref_relu, TOL[dtype], contiguous=None)
            row["nvmath_relu_bias_ms"] = gpu_ms(nve.execute, reps)
            nve.free()

        for lib in ("mathpy", "mathpy_f", "torch", "nvmath"):
            if f"{lib}_ms" in row:
                row[f"{lib}_tflops"] = flop / row[f"{lib}_ms"] / 1e9
        best = min(row["torch_ms"], row.get("nvmath_ms", float("inf")))
        row["ratio"] = best / row["mathpy_ms"]
        best_fused = row.get("nvmath_relu_bias_ms", row["torch_relu_bias_ms"])
        row["relu_bias_ratio"] = best_fused / row["mathpy_relu_bias_ms"]
        rows.append(row)
        print(f"  {row['shape']:>17} {row['dtype']:9} mathpy {row['mathpy_ms']:.3f} ms "
              f"({row['mathpy_tflops']:.0f} TF)  torch {row['torch_ms']:.3f}  nvmath "
              f"{row.get('nvmath_ms', float('nan')):.3f}  ratio {row['ratio']:.3f} | RELU_BIAS mathpy "
              f"{row['mathpy_relu_bias_ms']:.3f} nvmath {row.get('nvmath_relu_bias_ms', float('nan')):.3f} "
              f"torch {row['torch_relu_bias_ms']:.3f} | mathpy F-order {row['mathpy_f_ms']:.3f} | nvmath result in C "
              f"order: {row.get('nvmath_c_order', '-')}", flush=True)
        torch.cuda.empty_cache()
    return rows


def bench_overhead(quick):
    reps = 500 if quick else 2000
    a, b = randn((128, 128), torch.float16, 4), randn((128, 128), torch.float16, 5)
    ref = a @ b
    rows = {}
    mm = mathpy_matmul(a, b)
    mm.plan()
    check("mathpy 128^3", mm.execute(), ref, TOL[torch.float16])
    rows["mathpy Matmul.execute"] = host_us(mm.execute, reps)
    engine = mm.prepared_call.engine
    if engine is not None:  # the engine alone, with the operands' pointers precomputed
        d = torch.empty((128, 128), dtype=torch.float16, device="cuda")
        if mm.prepared_call.problem.d.is_col_major:
            d = d.T
        pa, pb, pd = a.data_ptr(), b.data_ptr(), d.data_ptr()
        stream = torch.cuda.current_stream().cuda_stream
        run = engine.execute
        rows["mathpy engine.execute"] = host_us(lambda: run(pa, pb, None, pd, {}, {}, 1.0, 0.0, stream), reps)
        check("mathpy engine 128^3", d, ref, TOL[torch.float16], contiguous=d.is_contiguous())
    mm.free()
    if mp_matmul is not None:
        check("mathpy matmul() 128^3", mp_matmul(a, b), ref, TOL[torch.float16])
        rows["mathpy matmul() stateless"] = host_us(lambda: mp_matmul(a, b), max(200, reps // 10))
    if nvmath is not None:
        nv = NvMatmul(a, b)
        nv.plan()
        rows["nvmath Matmul.execute"] = host_us(nv.execute, reps)
        nv.free()
    rows["torch.matmul"] = host_us(lambda: torch.matmul(a, b), reps)
    for name, us in rows.items():
        print(f"  {name:28} {us:7.1f} us/call", flush=True)
    return rows


def write(gemm, overhead, device):
    os.makedirs(RESULTS, exist_ok=True)
    lines = [_report.environment(device), "", _report.matmul_tables(gemm, overhead)]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(RESULTS, "bench_matmul.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "bench_matmul.json"), "w") as f:
        json.dump({"device": device, "gemm": gemm, "overhead_us": overhead}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [3, 2, 2]})
        labels = [f"{r['shape']}\n{r['dtype']}" for r in gemm]
        x = np.arange(len(gemm))
        names = {"mathpy": "mathpy (C order)", "mathpy_f": "mathpy (F order)"}
        libs = [lib for lib in ("mathpy", "mathpy_f", "torch", "nvmath") if f"{lib}_tflops" in gemm[0]]
        width = 0.8 / len(libs)
        for i, lib in enumerate(libs):
            ax1.bar(x + (i - (len(libs) - 1) / 2) * width, [r[f"{lib}_tflops"] for r in gemm], width,
                    label=names.get(lib, lib))
        ax1.set_xticks(x, labels, fontsize=7)
        ax1.set_ylabel("TFLOP/s")
        ax1.set_title("GEMM throughput (torch, nvmath: C order)")
        ax1.legend()
        fused = [("mathpy", "mathpy_relu_bias_ms"), ("nvmath", "nvmath_relu_bias_ms"),
                 ("torch relu(addmm)", "torch_relu_bias_ms")]
        fused = [(name, key) for name, key in fused if key in gemm[0]]
        for i, (name, key) in enumerate(fused):
            ax2.bar(x + (i - (len(fused) - 1) / 2) * 0.27, [r[key] / r["torch_relu_bias_ms"] for r in gemm], 0.27,
                    label=name)
        ax2.set_xticks(x, [r["shape"] for r in gemm], fontsize=6, rotation=20)
        ax2.set_ylabel("time / torch relu(addmm)")
        ax2.set_title("RELU_BIAS (lower is better)")
        ax2.legend(fontsize=7)
        names = list(overhead)
        ax3.barh(names, [overhead[n] for n in names])
        ax3.set_xlabel("us per call")
        ax3.set_title("host cost, 128^3 fp16")
        ax3.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "bench_matmul.png"), dpi=120)
    except Exception as e:  # the table is what matters
        print(f"(no plot: {e})")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    device = torch.cuda.get_device_name()
    print(f"== {device}; mathpy {mathpy.__version__}; torch {torch.__version__}; nvmath "
          f"{nvmath.__version__ if nvmath is not None else '-'}")
    started = time.perf_counter()
    print("== GEMM (GPU time per call)")
    gemm = bench_gemm(args.quick)
    print("== host cost per call, 128^3 fp16")
    overhead = bench_overhead(args.quick)
    print()
    print(write(gemm, overhead, device))
    print(f"(took {time.perf_counter() - started:.0f} s; results in {RESULTS})")
    worst = min(r["ratio"] for r in gemm)
    if worst < 0.98:
        print(f"NOTE: slowest ratio {worst:.3f} < 0.98 target")


if __name__ == "__main__":
    main()
