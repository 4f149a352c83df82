"""Training through mathpy: a transformer MLP block, forward and backward in bfloat16, against torch eager and
torch.compile of the same block, in one run.

    python benchmarks/bench_autograd.py            # about 2-3 minutes on an H200, torch.compile's compiles included
    python benchmarks/bench_autograd.py --quick    # two sizes, fewer repetitions

The block: ``Linear(d, 4d) + bias -> GELU (tanh) -> Linear(4d, d) + bias`` on ``x`` of shape (tokens, d) that requires
grad (as inside a network); tokens 8192-32768, d 4096-8192. Each step is ``y = block(x); y.backward(g)`` with the
parameter gradients set to None first (no accumulation anywhere).

- **mathpy MLP**: ``mathpy.torch.MLP``, one fused node: forward GELU_AUX_BIAS + BIAS; backward BGRADB (dW2, db2),
  DGELU_BGRAD (dZ1, db1), dW1, dx: four GEMMs, no elementwise kernel.
- **mathpy Linear x2**: two ``mathpy.torch.Linear`` (bias and GELU in the epilog, bias gradients from BGRADB; the GELU
  derivative elementwise, since it belongs to the next layer's GEMM).
- **torch eager**: ``nn.Linear``, ``nn.GELU(approximate="tanh")``, ``nn.Linear``.
- **torch.compile**: that torch block compiled by inductor (default mode, static shapes: compiled again per size after
  ``torch._dynamo.reset()``; compile time is reported, not timed).

GPU time per step: CUDA events around ``reps`` steps, median of ``rounds``; TFLOP/s counts the six GEMMs
(48 tokens d^2 flop). Every mathpy result and gradient is checked against torch eager first. A last section times the
entry hook that routes grad-requiring tensors (``mathpy._torch_route.wanted``) against a whole stateless FFT call.

Prints, last, an Environment line and the tables in the form docs/benchmarks.md shows (ratios: peer time / mathpy
time); writes them to benchmarks/results/bench_autograd.md, with .json and a .png plot.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

try:
    import torch
except ImportError:
    sys.exit("bench_autograd needs torch with CUDA")
if not torch.cuda.is_available():
    sys.exit("bench_autograd needs a CUDA GPU (torch.cuda.is_available() is False)")

import _report  # noqa: E402  (the Markdown tables docs/benchmarks.md shows)
import mathpy  # noqa: E402
import mathpy.fft  # noqa: E402
import mathpy.torch as mt  # noqa: E402
from mathpy import _torch_route  # noqa: E402

SIZES = [(8192, 4096), (16384, 4096), (32768, 4096), (8192, 8192), (16384, 8192), (32768, 8192)]
QUICK_SIZES = [(8192, 4096), (16384, 8192)]
RESULTS = os.path.join(HERE, "results")
DTYPE = torch.bfloat16


def blocks(d):
    """The four implementations, sharing one set of parameters (torch.nn.Linear's initialisation)."""
    torch.manual_seed(0)
    kw = dict(device="cuda", dtype=DTYPE)
    fused = mt.MLP(d, 4 * d, activation="gelu", **kw)
    pair = torch.nn.Sequential(mt.Linear(d, 4 * d, activation="gelu", **kw), mt.Linear(4 * d, d, **kw))
    eager = torch.nn.Sequential(torch.nn.Linear(d, 4 * d, **kw), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(4 * d, d, **kw))
    for target in (pair, eager):
        target[0].load_state_dict(fused.fc1.state_dict())
        target[-1].load_state_dict(fused.fc2.state_dict())
    return {"mathpy MLP": fused, "mathpy Linear x2": pair, "torch eager": eager}


def stepper(block, x, g):
    params = list(block.parameters())

    def step():
        for p in params:
            p.grad = None
        x.grad = None
        block(x).backward(g)

    def forward():
        return block(x)
    return step, forward


def gpu_ms(fn, reps, rounds):
    """Median over ``rounds`` of GPU ms per call: CUDA events around ``reps`` calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / reps)
    return statistics.median(per_call)


def check(name, block, reference, x, g):
    """``block``'s output and gradients against ``reference``'s (torch eager), bf16 vs bf16: within a few bf16
    roundings of the largest element (both round; neither is exact)."""
    results = []
    for b in (block, reference):
        x.grad = None
        for p in b.parameters():
            p.grad = None
        y = b(x)
        y.backward(g)
        results.append([y.detach()] + [x.grad] + [p.grad for p in b.parameters()])
    worst = 0.0
    for got, want in zip(*results):
        error = float((got.float() - want.float()).abs().max() / want.float().abs().max())
        worst = max(worst, error)
    if worst > 16 * 2.0 ** -8:
        raise AssertionError(f"{name}: differs from torch eager by {worst:.3g} (relative to the largest element)")
    return worst


def bench_size(tokens, d, reps, rounds):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(tokens, d, device="cuda", dtype=DTYPE, generator=gen).requires_grad_()
    g = torch.randn(tokens, d, device="cuda", dtype=DTYPE, generator=gen) / 8
    impls = blocks(d)
    eager = impls["torch eager"]
    errors = {name: check(name, impls[name], eager, x, g) for name in ("mathpy MLP", "mathpy Linear x2")}
    torch._dynamo.reset()
    impls["torch.compile"] = torch.compile(eager)
    t0 = time.perf_counter()
    step, _ = stepper(impls["torch.compile"], x, g)
    step()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    flop = 48.0 * tokens * d * d
    row = {"tokens": tokens, "d": d, "step_ms": {}, "forward_ms": {}, "extra_gb": {}, "compile_s": compile_s,
           "error_vs_eager": errors}
    for name, block in impls.items():
        step, forward = stepper(block, x, g)
        for _ in range(2):  # warm-up: plans, allocator, autotuned kernels
            step()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step_ms = gpu_ms(step, reps, rounds)
        row["extra_gb"][name] = (torch.cuda.max_memory_allocated() - base) / 1e9
        row["step_ms"][name] = step_ms
        row["forward_ms"][name] = gpu_ms(forward, reps, rounds)
        print(f"  {tokens:>6} x {d:<5} {name:<17} forward {row['forward_ms'][name]:8.3f} ms  forward+backward "
              f"{step_ms:8.3f} ms ({flop / step_ms / 1e9:5.0f} TFLOP/s, +{row['extra_gb'][name]:.2f} GB)", flush=True)
    del impls, x, g
    torch.cuda.empty_cache()
    return row


def bench_hook():
    """Host cost of the routing check at the top of every public function, next to the stateless call it guards."""
    x = torch.randn(8, 1024, device="cuda", dtype=torch.complex64)
    xg = x.clone().requires_grad_()

    def host_us(fn, reps=3000):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / reps * 1e6)
        return statistics.median(times)

    return {
        "wanted(x), the check alone (CUDA tensor, no grad)": host_us(lambda: _torch_route.wanted(x, None, None, None)),
        "mathpy.fft.fft(x), stateless": host_us(lambda: mathpy.fft.fft(x)),
        "mathpy.fft.fft(x) with x.requires_grad (the autograd op)": host_us(lambda: mathpy.fft.fft(xg)),
        "torch.fft.fft(x)": host_us(lambda: torch.fft.fft(x)),
    }


def write(rows, hook, device):
    """The report (Environment line, tables) into benchmarks/results/, and a plot; returns the text."""
    os.makedirs(RESULTS, exist_ok=True)
    compile_line = "torch.compile's compile time per size (s): " + ", ".join(
        f"{r['tokens']} x {r['d']}: {r['compile_s']:.1f}" for r in rows)
    text = "\n".join([_report.environment(device), "", _report.autograd_tables(rows, hook), "", compile_line]) + "\n"
    with open(os.path.join(RESULTS, "bench_autograd.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "bench_autograd.json"), "w") as f:
        json.dump({"device": device, "rows": rows, "hook_us": hook}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(_report.AUTOGRAD_IMPLS)
        fig, ax = plt.subplots(figsize=(11, 4.5))
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            values = [48.0 * r["tokens"] * r["d"] ** 2 / r["step_ms"][name] / 1e9 for r in rows]
            ax.bar([j + (i - (len(names) - 1) / 2) * width for j in range(len(rows))], values, width, label=name)
        ax.set_xticks(range(len(rows)), [f"{r['tokens']} x {r['d']}" for r in rows])
        ax.set_xlabel("tokens x d (MLP d -> 4d -> d)")
        ax.set_ylabel("TFLOP/s, forward + backward")
        ax.set_title(f"bf16 MLP block training step, {device}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "bench_autograd.png"), dpi=120)
    except Exception as e:  # the table is what matters
        print(f"(no plot: {e})")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two sizes, fewer repetitions")
    args = parser.parse_args()
    device = torch.cuda.get_device_name()
    started = time.perf_counter()
    print(f"== {device}; torch {torch.__version__}; mathpy {mathpy.__version__}")
    rows = []
    for tokens, d in (QUICK_SIZES if args.quick else SIZES):
        reps = 3 if tokens * d * d > 2 ** 40 else 5
        rows.append(bench_size(tokens, d, reps, 3 if args.quick else 5))
    print("== entry hook")
    hook = bench_hook()
    text = write(rows, hook, device)
    print(f"(took {time.perf_counter() - started:.0f} s; results in {RESULTS})")
    print()
    print(text)


if __name__ == "__main__":
    main()
