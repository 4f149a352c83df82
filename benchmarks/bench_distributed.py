"""mathpy.distributed on the GPUs of one machine, against one GPU and against NCCL's own collectives.

    torchrun --standalone --nproc-per-node 2 benchmarks/bench_distributed.py            # a few minutes on 2 H200s
    torchrun --standalone --nproc-per-node 2 benchmarks/bench_distributed.py --quick    # smaller problems

Keep NVLink multicast off where the machine asks for it (NCCL_NVLS_ENABLE=0 ...): torchrun passes the environment on.

What it measures (random data, warm-up first, medians; a distributed time is the slowest rank's, between two barriers,
each rank synchronising its GPU; a one-GPU time is CUDA-event time on each rank's GPU, rank 0's reported):

1. The machine: ``nvidia-smi topo -m``; NCCL's own all-to-all and all-gather through torch.distributed at 256 MB,
   1 GB and 4 GB per rank. Bandwidth = bytes each rank sends to (all-to-all) or receives from (all-gather) the other
   ranks, over the time: ``S * (P - 1) / P / t`` for a buffer of S bytes per rank.
2. Matmul 32768^3 bf16 (``--quick``: 16384^3): one GPU (mathpy.Matmul, and torch.matmul for reference) vs the
   distributed ``row`` product (A, B, D row-distributed; B's all-gather overlaps the own K block's product), without
   the overlap, and the ``reduce`` algorithm (A by columns, B by rows). Speedup = one-GPU time / distributed time
   (target >= 1.8 on two GPUs). Every distributed result is checked against the one-GPU one.
3. FFT C2C complex64, 3-D 1024^3 and 2-D 32768^2 (``--quick``: 512^3, 16384^2), Slab.X -> Slab.Y: the distributed
   transform's time; its parts (``FFT.execute(profile=...)``: each local FFT, the exchange with its packing, and
   separately NCCL's all-to-all of the same buffers); for 2-D also with ``local_layout="c"``;
   the exchange's bandwidth vs NCCL's (target >= 80%); the total vs the bound ``local FFTs + NCCL all-to-all of the same
   bytes`` (target <= 1.2x); strong scaling (the same problem on one GPU) and weak scaling (half the problem, one
   slab, on one GPU).

Writes benchmarks/results/bench_distributed.{md,json,png} (and to $BENCH_OUT when set).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

import numpy as np  # noqa: E402

try:
    import torch
    import torch.distributed as dist
except ImportError:
    sys.exit("bench_distributed needs torch with CUDA")
DRY = "--dry-run" in sys.argv  # tiny problems on the CPU over gloo: checks the script itself without GPUs
if not DRY and not torch.cuda.is_available():
    sys.exit("bench_distributed needs CUDA GPUs (torch.cuda.is_available() is False); --dry-run checks it on the CPU")

import mathpy  # noqa: E402
import mathpy.distributed as md  # noqa: E402
import mathpy.fft  # noqa: E402
from mathpy.distributed._exchange import Exchange  # noqa: E402
from mathpy.distributed._fft_plan import plan_steps  # noqa: E402

RESULTS = os.path.join(HERE, "results")
MB = 1 << 20


class Job:
    def __init__(self):
        self.context = md.initialize(timeout=600)
        self.rank, self.size, self.device = self.context.rank, self.context.size, self.context.device_id
        self.cuda = torch.device("cpu") if DRY else torch.device("cuda", self.device)
        self.lines = []

    def barrier(self):
        self.context.transport.agree(None)

    def slowest(self, seconds):
        return max(self.context.transport.agree(seconds))

    def timed(self, fn, reps, warmup=1):
        """Median over ``reps`` of the slowest rank's wall time of ``fn`` (GPU synchronised on every rank)."""
        for _ in range(warmup):
            fn()
        synchronize()
        times = []
        for _ in range(reps):
            self.barrier()
            start = time.perf_counter()
            fn()
            synchronize()
            times.append(self.slowest(time.perf_counter() - start))
        return statistics.median(times)

    def say(self, *text):
        if self.rank == 0:
            line = " ".join(str(t) for t in text)
            self.lines.append(line)
            print(line, flush=True)


def synchronize():
    if not DRY:
        torch.cuda.synchronize()


def gpu_time(fn, reps, warmup=1):
    """Median CUDA-event time of ``fn`` on this rank's GPU (seconds)."""
    for _ in range(warmup):
        fn()
    times = []
    if DRY:
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def free():
    if not DRY:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def randn(shape, dtype, device, seed):
    """The same random array on every rank (one seed), generated on the GPU."""
    generator = torch.Generator(device=device).manual_seed(seed)
    if dtype.is_complex:
        real = torch.randn((*shape, 2), generator=generator, device=device, dtype=torch.float32)
        return torch.view_as_complex(real)
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)


def relative_error(got, want):
    return float((got.to(torch.float64 if not got.is_complex() else torch.complex128)
                  - want.to(torch.float64 if not want.is_complex() else torch.complex128)).abs().max()
                 / want.abs().max().to(torch.float64))


# --- 1. the machine -------------------------------------------------------------------------------------------------

def machine(job, quick):
    topology = ""
    if job.rank == 0:
        try:
            found = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
            topology = found.stdout or found.stderr
        except Exception as e:  # noqa: BLE001
            topology = f"(nvidia-smi topo -m failed: {e})"
    job.say("## Topology (nvidia-smi topo -m)\n\n```\n" + topology.strip() + "\n```\n")
    rows = []
    sizes = [MB] if DRY else [256 * MB, 1024 * MB] if quick else [256 * MB, 1024 * MB, 4096 * MB]
    p = job.size
    for size in sizes:
        send = torch.empty(size, dtype=torch.uint8, device=job.cuda)
        recv = torch.empty_like(send)
        t_a2a = job.timed(lambda: dist.all_to_all_single(recv, send), reps=5)
        piece = send[:size // p]
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # 2.13 renamed it
        t_ag = job.timed(lambda: gather(recv[:piece.numel() * p], piece), reps=5)
        rows.append({"bytes_per_rank": size, "all_to_all_s": t_a2a, "all_gather_s": t_ag,
                     "all_to_all_GBps": size * (p - 1) / p / t_a2a / 1e9,
                     "all_gather_GBps": size * (p - 1) / p / t_ag / 1e9})
        send, recv, piece = None, None, None  # release the memory
        free()
    job.say("## NCCL through torch.distributed (bandwidth: bytes each rank sends / receives to / from the others)\n")
    job.say("| bytes per rank | all-to-all ms | all-to-all GB/s | all-gather ms | all-gather GB/s |")
    job.say("|---|---|---|---|---|")
    for r in rows:
        job.say(f"| {r['bytes_per_rank'] // MB} MB | {r['all_to_all_s'] * 1e3:.2f} | {r['all_to_all_GBps']:.0f} | "
                f"{r['all_gather_s'] * 1e3:.2f} | {r['all_gather_GBps']:.0f} |")
    job.say()
    return {"topology": topology, "nccl": rows}


def nccl_all_to_all(job, nbytes):
    """NCCL's own all-to-all of a buffer of ``nbytes`` per rank (seconds)."""
    send = torch.empty(nbytes, dtype=torch.uint8, device=job.cuda)
    recv = torch.empty_like(send)
    seconds = job.timed(lambda: dist.all_to_all_single(recv, send), reps=5)
    send, recv = None, None  # release the memory
    free()
    return seconds


# --- 2. matmul -------------------------------------------------------------------------------------------------------

def bench_matmul(job, quick):
    n = 256 if DRY else 16384 if quick else 32768
    p, rank = job.size, job.rank
    a = randn((n, n), torch.bfloat16, job.cuda, 1)
    b = randn((n, n), torch.bfloat16, job.cuda, 2)
    flops = 2.0 * n ** 3
    with mathpy.Matmul(a, b) as mm:
        mm.plan()
        t_one = gpu_time(mm.execute, reps=5)
        d_one = mm.execute()
    t_torch = gpu_time(lambda: torch.matmul(a, b), reps=5)
    rows = md.Slab(0).partition((n, n), p).sets[rank][0]
    cols = md.Slab(1).partition((n, n), p).sets[rank][1]
    want_rows = d_one[rows.start:rows.stop].clone()
    a_rows, b_rows = a[rows.start:rows.stop].clone(), b[rows.start:rows.stop].clone()
    a_cols = a[:, cols.start:cols.stop].contiguous()
    a, b, d_one = None, None, None  # release the memory
    free()
    results = {"n": n, "one_gpu_s": t_one, "torch_one_gpu_s": t_torch, "variants": []}

    def variant(name, a_part, b_part, dists, want, **kwargs):
        with md.Matmul(a_part, b_part, distributions=dists, **kwargs) as mm:
            mm.plan()
            seconds = job.timed(mm.execute, reps=5)
            error = max(job.context.transport.agree(relative_error(mm.execute(), want)))
            algorithm = mm.algorithm
        free()
        results["variants"].append({"name": name, "algorithm": algorithm, "seconds": seconds, "error": error,
                                    "speedup": t_one / seconds})

    variant("row (overlapped)", a_rows, b_rows, "row", want_rows)
    variant("row, no overlap", a_rows, b_rows, "row", want_rows, overlap=False)
    variant("reduce (A by columns, B by rows)", a_cols, b_rows, (md.Slab(1), md.Slab(0), md.Slab(0)), want_rows,
            algorithm="reduce")
    a_rows, b_rows, a_cols, want_rows = None, None, None, None  # release the memory
    free()
    job.say(f"## Matmul {n}^3 bf16 on {p} GPU(s) vs one\n")
    job.say(f"one GPU: mathpy {t_one * 1e3:.1f} ms ({flops / t_one / 1e12:.0f} TFLOP/s), torch.matmul "
            f"{t_torch * 1e3:.1f} ms ({flops / t_torch / 1e12:.0f} TFLOP/s)\n")
    job.say("| distributed | algorithm | ms | TFLOP/s (job) | speedup vs one GPU | max rel. error vs one GPU |")
    job.say("|---|---|---|---|---|---|")
    for v in results["variants"]:
        job.say(f"| {v['name']} | {v['algorithm']} | {v['seconds'] * 1e3:.1f} | {flops / v['seconds'] / 1e12:.0f} | "
                f"**{v['speedup']:.2f}x** | {v['error']:.2g} |")
    job.say()
    return results


# --- 3. FFT ----------------------------------------------------------------------------------------------------------

def bench_fft(job, shape):
    p, rank = job.size, job.rank
    g = randn(shape, torch.complex64, job.cuda, 3)
    axes = tuple(range(len(shape)))
    with mathpy.fft.FFT(g, axes=axes) as f:
        f.plan()
        t_one = gpu_time(f.execute, reps=5)
        whole = f.execute()
    half = g[:shape[0] // 2]
    with mathpy.fft.FFT(half, axes=axes) as f:
        f.plan()
        t_half = gpu_time(f.execute, reps=5)
    x_part = md.Slab.X.partition(shape, p).sets[rank][0]
    part = g[x_part.start:x_part.stop].clone()
    y_part = md.Slab.Y.partition(shape, p).sets[rank][1]
    want = whole[:, y_part.start:y_part.stop].clone()
    g, half, whole = None, None, None  # release the memory
    free()

    def distributed(layout):
        """(median total, error, per-step seconds (slowest rank, median of 3 profiled runs), steps)."""
        with md.FFT(part, md.Slab.X, options={"local_layout": layout}) as plan:
            plan.plan()
            total = job.timed(plan.execute, reps=5)
            error = max(job.context.transport.agree(relative_error(plan.execute(), want)))
            runs = []
            for _ in range(3):
                profile = []
                plan.execute(profile=profile)
                runs.append([max(job.context.transport.agree(seconds)) for _, seconds in profile])
            steps = [name for name, _ in profile]
        free()
        return total, error, [statistics.median(column) for column in zip(*runs)], steps

    t_total, error, step_times, steps_text = distributed("auto")
    alternative = None
    if len(shape) == 2:  # "auto" lays the axis-0 transform's input out transposed here; time C order too
        alternative = distributed("c")[0]
    want = None  # release the memory
    free()
    partition = md.Slab.X.partition(shape, p)
    steps = plan_steps("C2C", shape, md.Slab.X, partition, None, None, p)
    crossing = sum(Exchange(s.before, s.after, rank).bytes_crossing * 8 for s in steps if s.kind == "exchange")
    local_times = [t for t, s in zip(step_times, steps) if s.kind == "fft"]
    exchange_time = sum(t for t, s in zip(step_times, steps) if s.kind == "exchange")
    part = None  # release the memory
    free()
    local_bytes = int(np.prod(partition.local_shape(rank))) * 8
    t_nccl = nccl_all_to_all(job, local_bytes)
    bound = sum(local_times) + t_nccl
    return {"shape": shape, "one_gpu_s": t_one, "half_one_gpu_s": t_half, "total_s": t_total, "error": error,
            "c_layout_total_s": alternative,
            "steps": steps_text, "local_s": local_times, "exchange_s": exchange_time, "nccl_s": t_nccl,
            "crossing_bytes": crossing, "exchange_GBps": crossing / exchange_time / 1e9,
            "nccl_GBps": crossing / t_nccl / 1e9, "bound_s": bound}


def report_fft(job, rows):
    p = job.size
    job.say(f"## FFT C2C complex64 on {p} GPU(s), Slab.X -> Slab.Y\n")
    job.say("| global shape | one GPU ms | distributed ms | local FFTs ms | exchange ms (incl. packing) | "
            "NCCL all-to-all ms (same bytes) | exchange / NCCL bandwidth | bound ms | total / bound | "
            "strong scaling (speedup) | weak scaling (efficiency) | max rel. error vs one GPU |")
    job.say("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        job.say(f"| {shape} | {r['one_gpu_s'] * 1e3:.2f} | {r['total_s'] * 1e3:.2f} | "
                f"{' + '.join(f'{t * 1e3:.2f}' for t in r['local_s'])} | {r['exchange_s'] * 1e3:.2f} "
                f"({r['exchange_GBps']:.0f} GB/s) | {r['nccl_s'] * 1e3:.2f} ({r['nccl_GBps']:.0f} GB/s) | "
                f"**{r['exchange_GBps'] / r['nccl_GBps'] * 100:.0f}%** | {r['bound_s'] * 1e3:.2f} | "
                f"**{r['total_s'] / r['bound_s']:.2f}x** | {r['one_gpu_s'] / r['total_s']:.2f}x | "
                f"{r['half_one_gpu_s'] / r['total_s'] * 100:.0f}% | {r['error']:.2g} |")
    for r in rows:
        job.say(f"\n{'x'.join(map(str, r['shape']))} steps: {'; '.join(r['steps'])}")
        if r["c_layout_total_s"]:
            job.say(f"  (with local_layout='c', the axis-0 transform strided: {r['c_layout_total_s'] * 1e3:.2f} ms)")
    job.say("weak scaling: one GPU transforms half the global array (its slab) / the distributed time of the whole.\n")


# --- nvmath-python's distributed matmul (cuBLASMp), side by side, when it can be made to run ------------------------

def bench_nvmath(job, quick):
    """nvmath-python 1.0's distributed matmul on the same problem (A by columns = nvmath's transposed Slab.X, B by
    rows, D by columns), against mathpy's "reduce" algorithm on the same distributions; or why it did not run."""
    n = 256 if DRY else 16384 if quick else 32768
    p, rank = job.size, job.rank
    report = {"n": n}
    try:
        import nvmath
        import nvmath.distributed as nd
        from nvmath.distributed.distribution import Slab as NvSlab
        from nvmath.distributed.linalg.advanced import Matmul as NvMatmul
        from nvmath.distributed.linalg.advanced import matrix_qualifiers_dtype
        from nvmath.distributed.process_group import TorchProcessGroup
        report["version"] = nvmath.__version__
        nd.initialize(job.device, TorchProcessGroup(device_id=job.device), backends=["nccl"])
    except Exception as e:  # noqa: BLE001
        report["error"] = f"setup: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        job.say(f"## nvmath-python distributed matmul\n\ndid not run: {report['error']}\n")
        return report
    try:
        a = randn((n, n), torch.bfloat16, job.cuda, 1)
        b = randn((n, n), torch.bfloat16, job.cuda, 2)
        want = torch.matmul(a, b)
        k_part = md.Slab(0).partition((n, n), p).sets[rank][0]
        n_part = md.Slab(1).partition((n, n), p).sets[rank][1]
        want = want[:, n_part.start:n_part.stop].clone()
        a_t = a[:, k_part.start:k_part.stop].contiguous().T       # (k_r, M), column-major: A^T split along K
        b_f = b[k_part.start:k_part.stop].T.contiguous().T         # (k_r, N), column-major
        a_cols, b_rows = a[:, k_part.start:k_part.stop].contiguous(), b[k_part.start:k_part.stop].clone()
        a, b = None, None  # release the memory
        free()
        qualifiers = np.zeros((3,), dtype=matrix_qualifiers_dtype)
        qualifiers[0]["is_transpose"] = True
        with NvMatmul(a_t, b_f, distributions=[NvSlab.X, NvSlab.X, NvSlab.Y], qualifiers=qualifiers) as mm:
            mm.plan()
            report["seconds"] = job.timed(mm.execute, reps=5)
            report["error_vs_one_gpu"] = max(job.context.transport.agree(relative_error(mm.execute(), want)))
        with md.Matmul(a_cols, b_rows, distributions=(md.Slab(1), md.Slab(0), md.Slab(1)), algorithm="reduce") as mm:
            mm.plan()
            report["mathpy_seconds"] = job.timed(mm.execute, reps=5)
        job.say(f"## nvmath-python {report['version']} distributed matmul (cuBLASMp), {n}^3 bf16\n")
        job.say(f"nvmath: {report['seconds'] * 1e3:.1f} ms (max rel. error vs one GPU "
                f"{report['error_vs_one_gpu']:.2g}); mathpy reduce, same distributions: "
                f"{report['mathpy_seconds'] * 1e3:.1f} ms\n")
    except Exception as e:  # noqa: BLE001
        report["error"] = f"run: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        job.say(f"## nvmath-python distributed matmul\n\ndid not run: {report['error']}\n")
    return report


def plot(results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    mm = results["matmul"]
    names = ["one GPU"] + [v["name"] for v in mm["variants"]]
    times = [mm["one_gpu_s"] * 1e3] + [v["seconds"] * 1e3 for v in mm["variants"]]
    left.barh(names, times, color=["grey"] + ["tab:blue"] * len(mm["variants"]))
    left.set_xlabel("ms")
    left.set_title(f"matmul {mm['n']}^3 bf16")
    labels, bottoms = [], []
    for r in results["fft"]:
        labels.append("x".join(map(str, r["shape"])))
        bottoms.append((sum(r["local_s"]) * 1e3, r["exchange_s"] * 1e3, r["total_s"] * 1e3, r["one_gpu_s"] * 1e3))
    x = np.arange(len(labels))
    local, exchange, total, one = (np.array(v) for v in zip(*bottoms))
    right.bar(x - 0.2, local, 0.4, label="local FFTs")
    right.bar(x - 0.2, exchange, 0.4, bottom=local, label="exchange")
    right.bar(x + 0.2, one, 0.4, label="one GPU", color="grey")
    right.plot(x - 0.2, total, "k_", markersize=30, label="distributed total")
    right.set_xticks(x, labels)
    right.set_ylabel("ms")
    right.set_title("C2C complex64 FFT")
    right.legend()
    fig.tight_layout()
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="tiny problems on the CPU (gloo), to check the script")
    parser.add_argument("--nvmath", action="store_true", help="only nvmath-python's distributed matmul, side by side")
    args = parser.parse_args()
    started = time.perf_counter()
    job = Job()
    device = "CPU (dry run)" if DRY else torch.cuda.get_device_name(job.device)
    job.say(f"# mathpy.distributed on {job.size} x {device}\n")
    results = {"gpus": job.size, "device": device}
    if args.nvmath:
        results = {"nvmath": bench_nvmath(job, args.quick)}
        if job.rank == 0 and os.environ.get("BENCH_OUT"):
            with open(os.path.join(os.environ["BENCH_OUT"], "bench_distributed_nvmath.json"), "w") as f:
                json.dump(results, f, indent=1, default=str)
        md.finalize()
        return
    results.update(machine(job, args.quick))
    results["matmul"] = bench_matmul(job, args.quick)
    shapes = [(512, 512, 512), (16384, 16384)] if args.quick else [(1024, 1024, 1024), (32768, 32768)]
    if DRY:
        shapes = [(32, 32, 32), (128, 128)]
    results["fft"] = [bench_fft(job, shape) for shape in shapes]
    report_fft(job, results["fft"])
    if job.rank == 0:
        outputs = [RESULTS] + ([os.environ["BENCH_OUT"]] if os.environ.get("BENCH_OUT") else [])
        fig = plot(results)
        for folder in outputs:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "bench_distributed.json"), "w") as f:
                json.dump(results, f, indent=1, default=str)
            with open(os.path.join(folder, "bench_distributed.md"), "w") as f:
                f.write("\n".join(job.lines) + "\n")
            if fig is not None:
                fig.savefig(os.path.join(folder, "bench_distributed.png"), dpi=110)
        print(f"(took {time.perf_counter() - started:.0f} s)")
    md.finalize()


if __name__ == "__main__":
    main()
