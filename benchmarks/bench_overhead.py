"""Host overhead of mathpy's calls, the plan caches under many streams, and the shape of one call, in one process.

    python benchmarks/bench_overhead.py                          # everything (GPU: about 1-2 minutes)
    python benchmarks/bench_overhead.py --mathpy-path /tmp/old   # the same against another mathpy tree
    python benchmarks/bench_overhead.py --hops --sizes           # CPU-only parts: call hops and module sizes

``--mathpy-path DIR`` puts DIR first on ``sys.path`` before mathpy is imported, so one GPU session can measure two
trees (before/after) with the same script; only mathpy's public API is used. Tables are printed as Markdown;
``--json PATH`` also writes them.

What it measures (GPU; torch and CuPy as peers):

1. Host microseconds per asynchronous call: ``reps`` calls in a row with no synchronisation per call, then one
   synchronisation; the median of ``rounds`` rounds (the GPU work of these problems is a few microseconds, so the
   figure is the host's cost per call). Rows: ``FFT.execute`` and stateless ``fft`` (8 x 1024 complex64) against
   ``torch.fft.fft``; stateless ``fft(x, epilog=Callback(f, data=filt))`` (64 x 1024 complex64) against the plain
   stateless call and CuPy's unfused ``fft(x) * filt``; ``Matmul.execute`` and stateless ``matmul`` (128^3 float16)
   against ``torch.matmul`` and CuPy's ``@``.
2. Time per call of a 64 x 8192 x 8192 bfloat16 product (stateless, planned, torch), measured the same way (the
   product takes about 35 us of GPU time, so a host slower than that shows).
3. The multi-stream cache program: 16 threads, each on its own torch stream, call stateless ``fft`` on 4 sizes with
   and without a callback with user data; the FFT plan cache's hits, misses and evictions over those calls, and
   whether every result matched torch's.
4. ``--hops``: the mathpy functions (module:function) one warm stateless ``fft`` and one warm ``matmul`` call go
   through, recorded with ``sys.setprofile`` (device arrays on a GPU, NumPy arrays on the CPU).
5. ``--sizes``: lines per module of the imported mathpy, with the 600-line limit (800 for device code generators).
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
    parser.add_argument("--hops", action="store_true", help="print the hops of one stateless fft and matmul call")
    parser.add_argument("--sizes", action="store_true", help="print the module size table")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", help="also write the tables to this file")
    return parser.parse_args()


ARGS = parse()
if ARGS.mathpy_path:
    sys.path.insert(0, os.path.abspath(ARGS.mathpy_path))
else:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 on NumPy >= 2.5 (see FACTS)
    np.row_stack = np.vstack

import mathpy  # noqa: E402
import mathpy.fft as mfft  # noqa: E402

TABLES = {}


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    TABLES[title] = {"header": header, "rows": [[str(c) for c in row] for row in rows]}


# ---------------------------------------------------------------------------------------------------------------------
# timing


def per_call_us(fn, sync, reps, rounds):
    """Median over ``rounds`` of (wall time of ``reps`` asynchronous calls, then one sync) / reps, in us."""
    for _ in range(max(reps // 10, 20)):
        fn()
    sync()
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        results.append((time.perf_counter() - start) / reps * 1e6)
    return statistics.median(results)


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def overheads(reps, rounds):
    import cupy as cp
    import torch

    sync = torch.cuda.synchronize
    rows = []
    x = torch.randn(8, 1024, dtype=torch.complex64, device="cuda")
    plan = mfft.FFT(x, axes=[1])
    plan.plan()
    rows.append(("FFT.execute, 8x1024 c64", per_call_us(plan.execute, sync, reps, rounds)))
    rows.append(("fft stateless, 8x1024 c64", per_call_us(lambda: mfft.fft(x), sync, reps, rounds)))
    rows.append(("torch.fft.fft, 8x1024 c64", per_call_us(lambda: torch.fft.fft(x), sync, reps, rounds)))
    plan.free()

    y = torch.randn(64, 1024, dtype=torch.complex64, device="cuda")
    filt = torch.randn(64, 1024, dtype=torch.complex64, device="cuda")
    got = mfft.fft(y, epilog=mfft.Callback(filter_epilog, data=filt))  # compiles the callback once
    assert torch.allclose(got, torch.fft.fft(y) * filt, rtol=1e-3, atol=1e-3 * 64), "the fused callback is wrong"
    cb = per_call_us(lambda: mfft.fft(y, epilog=mfft.Callback(filter_epilog, data=filt)), sync, reps, rounds)
    plain = per_call_us(lambda: mfft.fft(y), sync, reps, rounds)
    yc, fc = cp.asarray(y), cp.asarray(filt)
    rows.append(("fft stateless + Callback(data=filt), 64x1024 c64", cb))
    rows.append(("fft stateless, 64x1024 c64", plain))
    rows.append(("CuPy fft(x) * filt, 64x1024 c64", per_call_us(lambda: cp.fft.fft(yc) * fc, sync, reps, rounds)))
    rows.append(("ratio callback / plain stateless", cb / plain))

    a = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    b = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    mm = mathpy.Matmul(a, b)
    mm.plan()
    rows.append(("Matmul.execute, 128^3 fp16", per_call_us(mm.execute, sync, reps, rounds)))
    rows.append(("matmul stateless, 128^3 fp16", per_call_us(lambda: mathpy.matmul(a, b), sync, reps, rounds)))
    rows.append(("torch.matmul, 128^3 fp16", per_call_us(lambda: torch.matmul(a, b), sync, reps, rounds)))
    ac, bc = cp.asarray(a), cp.asarray(b)
    rows.append(("CuPy a @ b, 128^3 fp16", per_call_us(lambda: ac @ bc, sync, reps, rounds)))
    mm.free()
    table("Host us per asynchronous call (median of rounds)", ["call", "us"],
          [(name, f"{value:.2f}") for name, value in rows])

    big_a = torch.randn(64, 8192, dtype=torch.bfloat16, device="cuda")
    big_b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    planned = mathpy.Matmul(big_a, big_b)
    planned.plan()
    ref = torch.matmul(big_a, big_b).float()
    for result in (planned.execute(), mathpy.matmul(big_a, big_b)):
        error = float((result.float() - ref).abs().max() / ref.abs().max())
        assert error < 2e-2, f"64x8192x8192 bf16 relative error {error}"
    big = [("matmul stateless", lambda: mathpy.matmul(big_a, big_b)), ("Matmul.execute", planned.execute),
           ("torch.matmul", lambda: torch.matmul(big_a, big_b))]
    table("64 x 8192 x 8192 bf16, ms per call (asynchronous calls, median of rounds)", ["call", "ms"],
          [(name, f"{per_call_us(fn, sync, max(reps // 10, 50), rounds) / 1e3:.4f}") for name, fn in big])
    planned.free()


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
# hops and sizes (CPU or GPU)


def hops():
    package_dir = os.path.dirname(os.path.abspath(mathpy.__file__))
    root = os.path.dirname(package_dir)
    gpu = mathpy.cuda_is_available()
    if gpu:
        import torch
        x = torch.randn(8, 1024, dtype=torch.complex64, device="cuda")
        a = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    else:
        x = (np.random.default_rng(0).standard_normal((8, 1024)) + 0j).astype(np.complex64)
        a = np.random.default_rng(1).standard_normal((128, 128)).astype(np.float32)

    def trace(fn):
        fn()
        fn()  # warm: the cached path is what repeats
        seen = []

        def profile(frame, event, arg):
            if event == "call":
                path = os.path.abspath(frame.f_code.co_filename)
                if path.startswith(package_dir + os.sep):
                    module = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    seen.append(f"{module}:{frame.f_code.co_name}")
        sys.setprofile(profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return seen

    where = "device arrays" if gpu else "NumPy arrays (no GPU here)"
    for title, fn in ((f"stateless fft, 8x1024 c64, {where}", lambda: mfft.fft(x)),
                      (f"stateless matmul, 128^3, {where}", lambda: mathpy.matmul(a, a))):
        seen = trace(fn)
        table(f"Hops of one warm {title}: {len(seen)} mathpy calls", ["#", "module:function"],
              list(enumerate(seen, 1)))


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
    if ARGS.sizes:
        sizes()
    if ARGS.hops:
        hops()
    if not (ARGS.sizes or ARGS.hops):
        if not mathpy.cuda_is_available():
            sys.exit("bench_overhead needs a CUDA GPU for the timings (use --hops / --sizes on the CPU)")
        reps, rounds = (500, 3) if ARGS.quick else (2000, 5)
        overheads(reps, rounds)
        many_streams(3 if ARGS.quick else 13)
        hops()
        sizes()
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(TABLES, f, indent=1)


if __name__ == "__main__":
    main()
