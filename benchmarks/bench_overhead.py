"""Host overhead of mathpy's calls, the plan caches under many streams, and the shape of one call, in one process.

    python benchmarks/bench_overhead.py                          # everything (GPU: about one minute)
    python benchmarks/bench_overhead.py --mathpy-path /tmp/old   # the same against another mathpy tree
    python benchmarks/bench_overhead.py --dry-run                # no GPU: mathpy's GPU paths on stub libraries
    python benchmarks/bench_overhead.py --sizes                  # CPU-only: module sizes

``--mathpy-path DIR`` puts DIR first on ``sys.path`` before mathpy is imported, so one GPU session can measure two
trees (before/after) with the same script; only mathpy's public API is used. Tables are printed as Markdown;
``--json PATH`` also writes them.

What it measures (GPU; torch and CuPy as peers):

1. Per call, for small problems whose GPU work takes a few microseconds, three figures (medians over rounds; in each
   round every row of a table runs once, in turn, so that drift of the machine touches all rows alike):

   - **host**: the wall time to issue ``reps`` calls in a row, per call, without waiting for the GPU (``reps`` is
     small enough that CUDA's launch queue never fills and blocks the host);
   - **GPU**: the GPU time of the same calls run back to back: the stream is held by a spin kernel
     (``torch.cuda._sleep``) while the host queues them, then CUDA events time the queued calls alone;
   - **async**: issue ``reps`` calls, then one synchronisation, per call: the larger of the two above, which is what
     a program sees (the figure earlier runs of this script reported).

   Rows: ``FFT.execute`` and stateless ``fft`` (8 x 1024 complex64) against ``torch.fft.fft`` and CuPy; stateless
   ``fft(x, epilog=Callback(f, data=filt))`` (64 x 1024 complex64) against the plain stateless call and CuPy's
   unfused ``fft(x) * filt``; ``Matmul.execute`` and stateless ``matmul`` (128^3 float16) against ``torch.matmul``
   and CuPy's ``@``. Two floors per API show what no Python layer can remove: the engine alone (the planned cuFFT /
   cuBLASLt call of the same plan into a preallocated output: the library's own host time plus one ctypes call) and
   the result allocation alone (``torch.empty``).
2. Time per call of a 64 x 8192 x 8192 bfloat16 product (stateless, planned, torch): GPU-bound (about 35 us of GPU
   time), so a host slower than that would show.
3. The multi-stream cache program: 16 threads, each on its own torch stream, call stateless ``fft`` on 4 sizes with
   and without a callback with user data; the FFT plan cache's hits, misses and evictions over those calls, and
   whether every result matched torch's.
4. ``--sizes``: lines per module of the imported mathpy, with the 600-line limit (800 for device code generators).

``--dry-run`` (no GPU needed, a C compiler is): the mathpy rows and floors of table 1, host column only, measured as
thread CPU time (the minimum over rounds: robust on a shared machine), with mathpy's GPU code paths running on stub
CUDA libraries and torch CPU tensors posing as device arrays (``benchmarks/_dry_run.py``). Its figures rank code paths; they are not GPU predictions (no kernel launch, no CUDA allocator).

The calls each path makes (cold and warm, every hop) are ``benchmarks/bench_hops.py``'s.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mathpy-path", help="import mathpy from this directory (put first on sys.path)")
    parser.add_argument("--sizes", action="store_true", help="print the module size table")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: host cost of the GPU paths on stub libraries")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", help="also write the tables to this file")
    return parser.parse_args()


ARGS = parse()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(ARGS.mathpy_path) if ARGS.mathpy_path else os.path.dirname(HERE))

import numpy as np  # noqa: E402

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 on NumPy >= 2.5 (see FACTS)
    np.row_stack = np.vstack

import mathpy  # noqa: E402
import mathpy.fft as mfft  # noqa: E402

TABLES = {}
REPS = 100  # calls per timing: well below CUDA's launch queue depth (about a thousand launches)


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    TABLES[title] = {"header": header, "rows": [[str(c) for c in row] for row in rows]}


def us(value):
    return "-" if value is None else f"{value:.2f}"


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


# ---------------------------------------------------------------------------------------------------------------------
# timing


class GPUClock:
    """Host, GPU and async time per call on one CUDA stream (torch's current one, which mathpy and CuPy use too)."""

    def __init__(self):
        import torch
        self.torch, self.sync = torch, torch.cuda.synchronize
        self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        self.sleep = getattr(torch.cuda, "_sleep", None)
        if self.sleep is not None:  # calibrate the spin kernel: cycles per microsecond of GPU time
            begin, end = self.events
            self.sleep(1000)
            begin.record()
            self.sleep(10_000_000)
            end.record()
            end.synchronize()
            self.cycles_per_us = 10_000_000 / (begin.elapsed_time(end) * 1e3)

    def round(self, fn, reps):
        """``(host us, async us, GPU us)`` per call, one round each."""
        self.sync()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        issued = time.perf_counter()
        self.sync()
        done = time.perf_counter()
        host, sync = (issued - start) / reps * 1e6, (done - start) / reps * 1e6
        gpu = None
        if self.sleep is not None:
            begin, end = self.events
            # hold the stream for three times the host's issue time (at least 5 ms), so all calls queue behind it
            self.sleep(int(max(5e3, 3 * host * reps) * self.cycles_per_us))
            begin.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            gpu = begin.elapsed_time(end) * 1e3 / reps
        return host, sync, gpu


class CPUClock:
    """Thread CPU time per call (the dry run: no GPU to wait for; CPU time ignores the machine's other load)."""

    def round(self, fn, reps):
        start = time.thread_time_ns()
        for _ in range(reps):
            fn()
        return (time.thread_time_ns() - start) / reps / 1e3, None, None


def measure(clock, rows, rounds, reps=REPS):
    """``{name: (host, async, GPU)}`` for ``rows`` (name, fn), rounds interleaved in a rotating order; medians on a
    GPU, minima of thread CPU time in a dry run. A row whose function is None is left out."""
    rows = [(name, fn) for name, fn in rows if fn is not None]
    for _, fn in rows:  # warm: plans, caches, memos, allocator pools
        for _ in range(20):
            fn()
    samples = {name: [] for name, _ in rows}
    for r in range(rounds):
        for name, fn in rows[r % len(rows):] + rows[:r % len(rows)]:
            samples[name].append(clock.round(fn, reps))
    pick = min if isinstance(clock, CPUClock) else statistics.median
    result = {}
    for name, values in samples.items():
        columns = list(zip(*values))
        result[name] = tuple(None if column[0] is None else pick(column) for column in columns)
    return result


# ---------------------------------------------------------------------------------------------------------------------
# 1. small calls


def engine_floor_fft(plan, x, torch):
    """The FFT's own engine on a preallocated output (None for a tree without prepared calls)."""
    call = getattr(plan, "prepared_call", None)
    if call is None:
        return None
    out = torch.empty_like(x)
    x_ptr, out_ptr, execute = x.data_ptr(), out.data_ptr(), call.engine.execute
    stream = current_stream(torch)
    return lambda: execute(x_ptr, out_ptr, -1, stream)


def engine_floor_matmul(mm, a, b, torch):
    """The Matmul's own engine on a preallocated D (None for a tree without prepared calls)."""
    call = getattr(mm, "prepared_call", None)
    if call is None:
        return None
    d = torch.empty_like(a)  # any buffer of D's size: the engine takes its address
    args, execute = (a.data_ptr(), b.data_ptr(), None, d.data_ptr(), {}, {}), call.engine.execute
    stream, alpha, beta = current_stream(torch), call.alpha, call.beta
    return lambda: execute(*args, alpha, beta, stream)


def current_stream(torch):
    if not torch.cuda.is_available():
        return 0  # the dry run: the stub libraries take any stream
    return torch.cuda.current_stream().cuda_stream


def small_calls(clock, rounds, device, peers):
    """Table 1 (``peers``: whether torch and CuPy run too; not in a dry run)."""
    import torch
    cp = None
    if peers:
        try:
            import cupy as cp
        except ImportError:
            pass
    gpu = device == "cuda"
    results = []

    x = torch.randn(8, 1024, dtype=torch.complex64, device=device)
    plan = mfft.FFT(x, axes=[1])
    plan.plan()
    xc = cp.asarray(x) if cp is not None else None
    results.append(("8 x 1024 complex64 FFT", measure(clock, [
        ("FFT.execute", plan.execute),
        ("fft stateless", lambda: mfft.fft(x)),
        ("torch.fft.fft", (lambda: torch.fft.fft(x)) if peers else None),
        ("CuPy fft", (lambda: cp.fft.fft(xc)) if xc is not None else None),
        ("floor: cuFFT alone (the plan's engine, output preallocated)", engine_floor_fft(plan, x, torch)),
        ("floor: the allocation alone (torch.empty_like)", lambda: torch.empty_like(x)),
    ], rounds)))

    y = torch.randn(64, 1024, dtype=torch.complex64, device=device)
    filt = torch.randn(64, 1024, dtype=torch.complex64, device=device)
    if gpu:
        got = mfft.fft(y, epilog=mfft.Callback(filter_epilog, data=filt))  # compiles the callback once
        assert torch.allclose(got, torch.fft.fft(y) * filt, rtol=1e-3, atol=1e-3 * 64), "the fused callback is wrong"
    yc, fc = (cp.asarray(y), cp.asarray(filt)) if cp is not None else (None, None)
    callback = measure(clock, [
        ("fft stateless + Callback(data=filt)", lambda: mfft.fft(y, epilog=mfft.Callback(filter_epilog, data=filt))),
        ("fft stateless", lambda: mfft.fft(y)),
        ("CuPy fft(x) * filt", (lambda: cp.fft.fft(yc) * fc) if yc is not None else None),
    ], rounds)
    results.append(("64 x 1024 complex64 FFT with a fused filter", callback))

    a = torch.randn(128, 128, dtype=torch.float16, device=device)
    b = torch.randn(128, 128, dtype=torch.float16, device=device)
    mm = mathpy.Matmul(a, b)
    mm.plan()
    ac, bc = (cp.asarray(a), cp.asarray(b)) if cp is not None else (None, None)
    results.append(("128^3 float16 matmul", measure(clock, [
        ("Matmul.execute", mm.execute),
        ("matmul stateless", lambda: mathpy.matmul(a, b)),
        ("torch.matmul", (lambda: torch.matmul(a, b)) if peers else None),
        ("CuPy a @ b", (lambda: ac @ bc) if ac is not None else None),
        ("floor: cuBLASLt alone (the plan's engine, D preallocated)", engine_floor_matmul(mm, a, b, torch)),
        ("floor: the allocation alone (torch.empty_like)", lambda: torch.empty_like(a)),
    ], rounds)))
    plan.free()
    mm.free()

    if isinstance(clock, CPUClock):
        rows = [(group, name, us(host)) for group, found in results for name, (host, _, _) in found.items()]
        table("Host us per call of mathpy's GPU paths, dry run (thread CPU time, minimum of rounds)",
              ["problem", "call", "host us"], rows)
    else:
        rows = [(group, name, us(host), us(gpu), us(sync)) for group, found in results
                for name, (host, sync, gpu) in found.items()]
        table(f"Microseconds per call: host (issue {REPS} calls), GPU (the same calls queued), async (issue + one "
              f"synchronisation); medians of {rounds} interleaved rounds", ["problem", "call", "host", "GPU", "async"],
              rows)
    column, what = (0, "host us") if isinstance(clock, CPUClock) else (1, "async us")
    cb, plain = callback["fft stateless + Callback(data=filt)"][column], callback["fft stateless"][column]
    table(f"Stateless fft with a fused callback against the plain stateless call, 64 x 1024 ({what})",
          ["callback", "plain", "ratio"], [(us(cb), us(plain), f"{cb / plain:.2f}")])


# ---------------------------------------------------------------------------------------------------------------------
# 2. a GPU-bound product


def big_product(clock, rounds):
    import torch
    big_a = torch.randn(64, 8192, dtype=torch.bfloat16, device="cuda")
    big_b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    planned = mathpy.Matmul(big_a, big_b)
    planned.plan()
    ref = torch.matmul(big_a, big_b).float()
    for result in (planned.execute(), mathpy.matmul(big_a, big_b)):
        error = float((result.float() - ref).abs().max() / ref.abs().max())
        assert error < 2e-2, f"64x8192x8192 bf16 relative error {error}"
    found = measure(clock, [("matmul stateless", lambda: mathpy.matmul(big_a, big_b)),
                            ("Matmul.execute", planned.execute), ("torch.matmul", lambda: torch.matmul(big_a, big_b))],
                    rounds, reps=50)
    table("64 x 8192 x 8192 bf16, ms per call (medians of interleaved rounds)", ["call", "async ms", "GPU ms"],
          [(name, f"{sync / 1e3:.4f}", "-" if gpu is None else f"{gpu / 1e3:.4f}")
           for name, (_, sync, gpu) in found.items()])
    planned.free()


# ---------------------------------------------------------------------------------------------------------------------
# 3. many streams


def many_streams(iterations):
    """16 threads, each on its own torch stream, stateless fft on 4 sizes with and without a callback."""
    import torch

    sizes = [(32, 256), (16, 1024), (8, 4096), (4, 16384)]
    data = {s: torch.randn(*s, dtype=torch.complex64, device="cuda") for s in sizes}
    filters = {s: torch.randn(*s, dtype=torch.complex64, device="cuda") for s in sizes}
    expected = {s: torch.fft.fft(data[s]) for s in sizes}
    torch.cuda.synchronize()
    mfft.plan_cache_clear()
    before = mfft.plan_cache_info()
    wrong, calls = [], [0]
    lock = threading.Lock()

    def work():
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(iterations):
                for s in sizes:
                    plain = mfft.fft(data[s])
                    fused = mfft.fft(data[s], epilog=mfft.Callback(filter_epilog, data=filters[s]))
                    stream.synchronize()
                    ok = torch.allclose(plain, expected[s], rtol=1e-3, atol=1e-2) and \
                        torch.allclose(fused, expected[s] * filters[s], rtol=1e-3, atol=1e-1)
                    with lock:
                        calls[0] += 2
                        if not ok:
                            wrong.append(s)

    start = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    after = mfft.plan_cache_info()
    table("16 threads x 16 torch streams, stateless fft on 4 sizes with and without a callback",
          ["calls", "hits", "misses", "evictions", "plans cached", "all results right", "seconds"],
          [(calls[0], after.hits - before.hits, after.misses - before.misses, after.evictions - before.evictions,
            after.plans, not wrong, f"{seconds:.2f}")])


# ---------------------------------------------------------------------------------------------------------------------
# 4. sizes


def sizes():
    package_dir = os.path.dirname(os.path.abspath(mathpy.__file__))
    rows = []
    for folder, _, files in os.walk(package_dir):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    lines = sum(1 for _ in f)
                relative = os.path.relpath(path, os.path.dirname(package_dir))
                limit = 800 if relative.startswith(os.path.join("mathpy", "device")) else 600
                rows.append((relative, lines, limit))
    rows.sort(key=lambda row: -row[1])
    over = [r for r in rows if r[1] > r[2]]
    table(f"Module sizes of {package_dir} ({len(rows)} modules, {sum(r[1] for r in rows)} lines, "
          f"{len(over)} over the limit)", ["module", "lines", "limit", "over"],
          [(path, lines, limit, "OVER" if lines > limit else "") for path, lines, limit in rows])


def main():
    print(f"mathpy {getattr(mathpy, '__version__', '?')} from {os.path.dirname(mathpy.__file__)}")
    rounds = 11 if ARGS.quick else 41
    if ARGS.dry_run:
        sys.path.insert(0, HERE)
        from _dry_run import fake_device
        with fake_device():
            small_calls(CPUClock(), rounds, "cpu", peers=False)
    else:
        if ARGS.sizes:
            sizes()
        if not ARGS.sizes:
            if not mathpy.cuda_is_available():
                sys.exit("bench_overhead needs a CUDA GPU for the timings (use --dry-run or --sizes on the CPU, "
                         "and bench_hops.py for the calls each path makes)")
            clock = GPUClock()
            small_calls(clock, rounds, "cuda", peers=True)
            big_product(clock, 11 if ARGS.quick else 21)
            many_streams(3 if ARGS.quick else 13)
            sizes()
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(TABLES, f, indent=1)


if __name__ == "__main__":
    main()
