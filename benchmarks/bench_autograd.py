"""Training through mathpy: what a differentiable call costs the host, Linear layers against torch.nn.Linear plus
their activation, and a transformer MLP block against torch eager and torch.compile, in one run.

    python benchmarks/bench_autograd.py            # about 3 minutes on an H200, torch.compile's compiles included
    python benchmarks/bench_autograd.py --quick    # fewer sizes and repetitions, about a minute
    python benchmarks/bench_autograd.py --host     # the host table only: on a machine without a GPU, a dry run

1. **Host microseconds per call** of each public differentiable entry point (mathpy.fft's functions, mathpy.matmul
   with and without an epilog, mathpy.torch.linear / mlp / spectral_conv) on small operands that require grad, next
   to mathpy's own call without grad and the same torch op with grad: the wall time to issue 300 asynchronous calls,
   per call, median of rounds (the rows interleaved in each round). Without a GPU (or with ``--host``), a dry run:
   mathpy's GPU code paths on stub CUDA libraries with torch CPU tensors posing as device tensors
   (``benchmarks/_dry_run.py``), thread CPU time, minimum of rounds; torch's peers compute on the CPU for real (on
   operands this small, mostly dispatch). Target: mathpy with grad at most 1.3x torch with grad.
2. **Linear + activation**: ``mathpy.torch.Linear(activation=...)`` against ``torch.nn.Linear`` followed by the same
   activation (GELU tanh / none), forward alone and forward + backward, in bfloat16, float16 and float32 (TF32 as
   torch's default leaves it: off), with the peak extra memory of a step. The layer shapes of the MLP block below
   (tokens x d -> 4d with GELU, tokens x 4d -> d without).
3. **The MLP block** ``Linear(d, 4d) + bias -> GELU (tanh) -> Linear(4d, d) + bias`` in bfloat16 on x (tokens, d)
   that requires grad: ``mathpy.torch.MLP`` (one fused node: forward GELU_AUX_BIAS + BIAS; backward BGRADB (dW2,
   db2), DGELU (dZ1) and one sum of dZ1 (db1), dW1, dx: four GEMMs, no elementwise activation kernel), two
   ``mathpy.torch.Linear``, torch eager and torch.compile of the torch block (inductor, static shapes; compile time reported, not timed). Next to
   the times: the bytes each side moves over the hidden activation (tokens x 4d elements, the block's largest
   tensors), counted per kernel each side runs (every read or write of a hidden-sized tensor once; GEMMs read their
   operands once):

   - mathpy: forward GELU_AUX_BIAS writes h and z (2), the second GEMM reads h (1); backward dW2 reads h (1),
     DGELU reads z and writes dZ (2), db1's sum reads dZ (1), dW1 and dx read dZ (2): **9 passes**;
   - torch eager: addmm writes z (1), gelu reads z, writes h (2), addmm reads h (1); backward dW2 reads h (1), dh is
     written (1), gelu_backward reads dh and z and writes dZ (3), db1 reads dZ (1), dW1 and dx read dZ (2): **12**;
   - torch.compile: as eager, but inductor fuses the bias and GELU into one pointwise kernel after the GEMM (z
     written, read, h written: 3, then 1) and db1's reduction into gelu_backward's kernel (backward 1 + 1 + 3 + 2):
     **11**.

GPU time per step: CUDA events around ``reps`` steps, median of ``rounds``; each step sets the gradients to None
first. Every mathpy result and gradient is checked against torch eager before timing. Prints, last, an Environment
line and the tables in the form docs/benchmarks.md shows (ratios: peer time / mathpy time); writes them to
benchmarks/results/bench_autograd.md, with .json and a .png plot.
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
    sys.exit("bench_autograd needs torch")

import _report  # noqa: E402  (the Markdown tables docs/benchmarks.md shows)
import mathpy  # noqa: E402
import mathpy.fft  # noqa: E402
import mathpy.torch as mt  # noqa: E402

SIZES = [(4096, 2048), (8192, 4096), (16384, 8192)]
QUICK_SIZES = [(4096, 2048), (8192, 4096)]
LINEAR_SIZE = (8192, 4096)
RESULTS = os.path.join(HERE, "results")
DEVICE = "cuda"  # (a smoke test may run the GPU sections' code on "cpu")
DTYPE = torch.bfloat16
GELU = torch.nn.GELU(approximate="tanh")
HIDDEN_PASSES = {"mathpy MLP": 9, "torch eager": 12, "torch.compile": 11}  # see the module docstring


# --- 1. host cost per call -------------------------------------------------------------------------------------------

def host_calls(device, dry):
    """``[(call, mathpy with grad, mathpy without grad, torch with grad)]``: functions of no arguments on small
    operands (each a few microseconds of GPU work; in a dry run, tiny ones, so that torch's CPU peers cost mostly
    their dispatch, as on a GPU). Without grad: the same call on detached operands."""
    def leaf(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=device).to(dtype).requires_grad_()

    n, m, f16 = (16, 8, torch.float32) if dry else (1024, 128, torch.float16)  # CPUs are slow at float16 products
    z, r = leaf(8, n, dtype=torch.complex64), leaf(8, n)
    half, z2 = leaf(8, n // 2 + 1, dtype=torch.complex64), leaf(m // 2, m // 2, dtype=torch.complex64)
    a, b, bias = leaf(m, m, dtype=f16), leaf(m, m, dtype=f16), leaf(m, dtype=f16)
    x, w, w2, b1, b2 = leaf(m // 2, m, dtype=f16), leaf(2 * m, m, dtype=f16), leaf(m, 2 * m, dtype=f16), \
        leaf(2 * m, dtype=f16), leaf(m, dtype=f16)
    batch, channels, side, modes = (1, 2, 8, 4) if dry else (4, 8, 32, 8)
    layer = mt.SpectralConv(channels, channels, (modes, modes), device=device)
    grid = leaf(batch, channels, side, side)
    torch_layer = _torch_spectral(layer)
    size = {"fft": f"8 x {n} complex64", "rfft": f"8 x {n} float32", "irfft": f"8 x {n // 2 + 1} complex64",
            "fft2": f"{m // 2} x {m // 2} complex64", "matmul": f"{m}^3 {str(f16)[6:]}",
            "linear": f"{m // 2} x {m} -> {2 * m} {str(f16)[6:]}", "mlp": f"{m // 2} x {m} -> {2 * m} -> {m}",
            "spectral": " x ".join(map(str, grid.shape)) + f", {modes} modes"}
    fft, F = mathpy.fft, torch.nn.functional
    rows = [
        (f"fft, {size['fft']}", fft.fft, (z,), lambda: torch.fft.fft(z)),
        ("ifft", fft.ifft, (z,), lambda: torch.fft.ifft(z)),
        (f"rfft, {size['rfft']}", fft.rfft, (r,), lambda: torch.fft.rfft(r)),
        (f"irfft, {size['irfft']}", fft.irfft, (half,), lambda: torch.fft.irfft(half)),
        (f"fft2, {size['fft2']}", fft.fft2, (z2,), lambda: torch.fft.fft2(z2)),
        (f"rfftn, {size['rfft']}", fft.rfftn, (r,), lambda: torch.fft.rfftn(r)),
        (f"matmul, {size['matmul']}", mathpy.matmul, (a, b), lambda: torch.matmul(a, b)),
        ("matmul, GELU_BIAS epilog", lambda a, b, bias: mathpy.matmul(a, b, epilog="gelu_bias",
                                                                     epilog_inputs={"bias": bias}),
         (a, b, bias), lambda: GELU(torch.addmm(bias[:, None], a, b))),
        (f"torch.linear, {size['linear']}", mt.linear, (x, w, b1), lambda: F.linear(x, w, b1)),
        ("torch.linear, GELU", lambda x, w, b: mt.linear(x, w, b, "gelu"), (x, w, b1),
         lambda: GELU(F.linear(x, w, b1))),
        (f"torch.mlp, {size['mlp']}", mt.mlp, (x, w, b1, w2, b2),
         lambda: F.linear(GELU(F.linear(x, w, b1)), w2, b2)),
        (f"torch.spectral_conv, {size['spectral']}", mt.spectral_conv, (grid, layer.weight, layer.bias),
         lambda: torch_layer(grid)),
    ]
    calls = []
    for name, f, tensors, peer in rows:
        detached = tuple(t.detach() for t in tensors)
        calls.append((name, (lambda f=f, t=tensors: f(*t)), (lambda f=f, t=detached: f(*t)), peer))
    return calls


def _torch_spectral(layer):
    sys.path.insert(0, HERE)
    from bench_fno import TorchSpectralConv
    return TorchSpectralConv(layer)


class Clock:
    """Host microseconds per asynchronous call: wall time of ``reps`` calls (a GPU: synchronised before, not after,
    so the launch queue never fills at these sizes) or, in a dry run, thread CPU time."""

    def __init__(self, dry):
        self.dry = dry

    def us(self, fn, reps):
        if self.dry:
            start = time.thread_time_ns()
            for _ in range(reps):
                fn()
            return (time.thread_time_ns() - start) / reps / 1e3
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        elapsed = time.perf_counter_ns() - start
        torch.cuda.synchronize()
        return elapsed / reps / 1e3


def bench_host(dry, rounds, reps=300):
    """``{call: {"grad": us, "no grad": us, "torch": us}}``; interleaved rounds, medians (minima in a dry run)."""
    device = "cpu" if dry else "cuda"
    clock = Clock(dry)
    calls = host_calls(device, dry)
    columns = [(f"{name}|{kind}", fn) for name, *fns in calls for kind, fn in zip(("grad", "no grad", "torch"), fns)]
    for _, fn in columns:  # warm: plans, memos, allocator pools
        for _ in range(20):
            fn()
    samples = {key: [] for key, _ in columns}
    for r in range(rounds):
        for key, fn in columns[r % len(columns):] + columns[:r % len(columns)]:
            samples[key].append(clock.us(fn, reps))
    pick = min if dry else statistics.median
    result = {}
    for key, values in samples.items():
        name, kind = key.split("|")
        result.setdefault(name, {})[kind] = pick(values)
    return result


# --- 2. Linear + activation ------------------------------------------------------------------------------------------

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


def extra_gb(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 1e9


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


def check(name, block, reference, x, g):
    """``block``'s output and gradients against ``reference``'s, same dtype: within a few roundings of the dtype
    relative to the largest element (both round; neither is exact)."""
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
        worst = max(worst, float((got.float() - want.float()).abs().max() / want.float().abs().max()))
    unit = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}[x.dtype]
    if worst > max(16 * unit, 1e-4):
        raise AssertionError(f"{name}: differs from torch eager by {worst:.3g} (relative to the largest element)")
    return worst


def bench_linear(tokens, d, dtype, activation, reps, rounds):
    """One layer: tokens x d -> 4d with ``activation``, or tokens x 4d -> d without."""
    torch.manual_seed(0)
    n_in, n_out = (d, 4 * d) if activation else (4 * d, d)
    kw = dict(device=DEVICE, dtype=dtype)
    ours = mt.Linear(n_in, n_out, activation=activation, **kw)
    theirs = torch.nn.Sequential(torch.nn.Linear(n_in, n_out, **kw), GELU if activation else torch.nn.Identity())
    theirs[0].load_state_dict(ours.state_dict())
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    x = torch.randn(tokens, n_in, device=DEVICE, generator=gen).to(dtype).requires_grad_()
    g = (torch.randn(tokens, n_out, device=DEVICE, generator=gen) / 8).to(dtype)
    check(f"Linear {dtype}", ours, theirs, x, g)
    row = {"layer": f"{tokens} x {n_in} -> {n_out}{' ' + activation if activation else ''}",
           "dtype": str(dtype).replace("torch.", ""), "forward_ms": {}, "step_ms": {}, "extra_gb": {}}
    for name, block in (("mathpy", ours), ("torch", theirs)):
        step, forward = stepper(block, x, g)
        step()
        step()
        with torch.no_grad():
            row["forward_ms"][name] = gpu_ms(forward, reps, rounds)
        row["step_ms"][name] = gpu_ms(step, reps, rounds)
        row["extra_gb"][name] = extra_gb(step)
    f, s, gb = row["forward_ms"], row["step_ms"], row["extra_gb"]
    print(f"  {row['layer']:<28} {row['dtype']:<9} forward {f['mathpy']:.3f} / {f['torch']:.3f} ms, step "
          f"{s['mathpy']:.3f} / {s['torch']:.3f} ms (mathpy / torch), +{gb['mathpy']:.2f} / +{gb['torch']:.2f} GB",
          flush=True)
    return row


# --- 3. the MLP block ------------------------------------------------------------------------------------------------

def blocks(d):
    """The implementations, sharing one set of parameters (torch.nn.Linear's initialisation)."""
    torch.manual_seed(0)
    kw = dict(device=DEVICE, dtype=DTYPE)
    fused = mt.MLP(d, 4 * d, activation="gelu", **kw)
    pair = torch.nn.Sequential(mt.Linear(d, 4 * d, activation="gelu", **kw), mt.Linear(4 * d, d, **kw))
    eager = torch.nn.Sequential(torch.nn.Linear(d, 4 * d, **kw), GELU, torch.nn.Linear(4 * d, d, **kw))
    for target in (pair, eager):
        target[0].load_state_dict(fused.fc1.state_dict())
        target[-1].load_state_dict(fused.fc2.state_dict())
    return {"mathpy MLP": fused, "mathpy Linear x2": pair, "torch eager": eager}


def bench_size(tokens, d, reps, rounds):
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    x = torch.randn(tokens, d, device=DEVICE, dtype=DTYPE, generator=gen).requires_grad_()
    g = torch.randn(tokens, d, device=DEVICE, dtype=DTYPE, generator=gen) / 8
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
    hidden_gb = tokens * 4 * d * DTYPE.itemsize / 1e9
    row = {"tokens": tokens, "d": d, "step_ms": {}, "forward_ms": {}, "extra_gb": {}, "compile_s": compile_s,
           "error_vs_eager": errors, "hidden_gb": {k: n * hidden_gb for k, n in HIDDEN_PASSES.items()}}
    for name, block in impls.items():
        step, forward = stepper(block, x, g)
        for _ in range(2):  # warm-up: plans, allocator, autotuned kernels
            step()
        row["extra_gb"][name] = extra_gb(step)
        row["step_ms"][name] = gpu_ms(step, reps, rounds)
        row["forward_ms"][name] = gpu_ms(forward, reps, rounds)
        print(f"  {tokens:>6} x {d:<5} {name:<17} forward {row['forward_ms'][name]:8.3f} ms  forward+backward "
              f"{row['step_ms'][name]:8.3f} ms ({flop / row['step_ms'][name] / 1e9:5.0f} TFLOP/s, "
              f"+{row['extra_gb'][name]:.2f} GB)", flush=True)
    del impls, x, g
    torch.cuda.empty_cache()
    return row


# --- report ----------------------------------------------------------------------------------------------------------

def write(rows, linear_rows, host, device):
    """The report (Environment line, tables) into benchmarks/results/, and a plot; returns the text."""
    os.makedirs(RESULTS, exist_ok=True)
    parts = [_report.environment(device), ""]
    if rows:
        parts += [_report.autograd_tables(rows, linear_rows), "", "torch.compile's compile time per size (s): " +
                  ", ".join(f"{r['tokens']} x {r['d']}: {r['compile_s']:.1f}" for r in rows), ""]
    parts.append(_report.autograd_host_table(host, dry="dry run" in device))
    text = "\n".join(parts) + "\n"
    with open(os.path.join(RESULTS, "bench_autograd.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "bench_autograd.json"), "w") as f:
        json.dump({"device": device, "rows": rows, "linear": linear_rows, "host_us": host}, f, indent=1)
    if rows:
        _plot(rows, device)
    return text


def _plot(rows, device):
    _report.grouped_bars(os.path.join(RESULTS, "bench_autograd.png"), [f"{r['tokens']} x {r['d']}" for r in rows],
                         {name: [48.0 * r["tokens"] * r["d"] ** 2 / r["step_ms"][name] / 1e9 for r in rows]
                          for name in _report.AUTOGRAD_IMPLS},
                         "TFLOP/s, forward + backward", f"bf16 MLP block (d -> 4d -> d) training step, {device}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--host", action="store_true", help="the host table only (a dry run without a GPU)")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    started = time.perf_counter()
    rows, linear_rows = [], []
    if gpu:
        device = torch.cuda.get_device_name()
        print(f"== {device}; torch {torch.__version__}; mathpy {mathpy.__version__}")
        if not args.host:
            print("== Linear + activation")
            for dtype in (torch.bfloat16, torch.float16, torch.float32):
                for activation in ("gelu", None):
                    linear_rows.append(bench_linear(*LINEAR_SIZE, dtype, activation, 5, 3 if args.quick else 5))
            print("== MLP block")
            for tokens, d in (QUICK_SIZES if args.quick else SIZES):
                reps = 3 if tokens * d * d > 2 ** 40 else 5
                rows.append(bench_size(tokens, d, reps, 3 if args.quick else 5))
        print("== host cost per call")
        host = bench_host(False, 5 if args.quick else 11)
    else:
        device = "CPU, dry run of mathpy's GPU paths (torch's peers on CPU tensors)"
        print(f"== no GPU: {device}")
        from _dry_run import fake_device
        with fake_device():
            host = bench_host(True, 5 if args.quick else 11)
    text = write(rows, linear_rows, host, device)
    print(f"(took {time.perf_counter() - started:.0f} s; results in {RESULTS})")
    print()
    print(text)


if __name__ == "__main__":
    main()
