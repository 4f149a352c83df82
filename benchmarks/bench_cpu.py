"""mathpy's CPU execution space against the CPU libraries a user would call directly (issue 26), in one process, on
the same arrays, with the machine's thread count in the header.

FFT (complex64 unless said): NumPy (``numpy.fft``), SciPy (``scipy.fft`` with ``workers``), pyFFTW (``FFTW_MEASURE``
plans built once with ``threads``, executed on their own aligned arrays: its fastest use), mkl_fft (when installed)
and mathpy (``mathpy.fft`` with its default library choice). The issue's rows first, then a held-out set (prime and
odd lengths, 3-D, real transforms, axis 0, an inverse 2-D transform), then callbacks: a ``* filter[i]`` epilog and a
``* window[i]`` prolog fused by mathpy, against each peer's FFT followed by the same product in NumPy.

Matmul: NumPy (``a @ b``) against the stateless ``mathpy.matmul`` and a planned ``Matmul.execute()``: the issue's rows
and held-out ones (batched, odd sizes, a transposed operand); then epilogs: RELU_BIAS and GELU_BIAS against the NumPy
expression, and a Python epilog ``silu(x) * gate[row, col]`` against the NumPy expression.

Every time is the median of interleaved rounds (each peer once per round, several calls per sample for short ones),
after warm-up calls (mathpy measures its FFT libraries at a transform's first call). Every mathpy result is checked
against NumPy's first. Prints the tables of docs/benchmarks.md ("CPU execution space"), saves
benchmarks/results/bench_cpu.json and .png.

Usage: ``PYTHONPATH=. python benchmarks/bench_cpu.py [--threads N] [--quick] [--rounds R]``. ``--threads N`` runs every
library on N threads (SciPy's workers, pyFFTW's threads, the BLAS and MKL through threadpoolctl, mathpy's
``ExecutionCPU(num_threads=N)``); without it each uses every core (SciPy ``workers=-1``). ``--quick``: smaller large
products and fewer rounds. ``--clock cpu``: the process's CPU time instead of wall time (steadier on a shared
machine; with ``--threads 1`` only).
"""

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import scipy
import scipy.fft as sfft

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _report  # noqa: E402

import mathpy  # noqa: E402
import mathpy.fft as mfft  # noqa: E402
from mathpy import _threads  # noqa: E402

try:
    import pyfftw
    import pyfftw.builders
except ImportError:
    pyfftw = None
try:
    import mkl_fft
except ImportError:
    mkl_fft = None
try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SAMPLE_SECONDS = 0.002  # calls per sample: enough for one sample to take this long
SETTLE_SECONDS = 0.03  # a pause before each sample, for the previous peer's OpenMP workers to stop spinning
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


# --- timing ---------------------------------------------------------------------------------------------------------

def measure(peers, rounds):
    """Median ms per call of each of ``peers`` ({name: fn}), in interleaved rounds after three warm-up calls each.
    Each sample starts after a pause of SETTLE_SECONDS and one untimed call: the previous peer's OpenMP workers
    (FFTW's in pyFFTW's wheels, MKL's, numba's) keep spinning for milliseconds after its last call, and would
    otherwise be timed inside the next peer's first calls (each peer is timed as a loop of its own calls runs)."""
    reps = {}
    for name, fn in peers.items():
        for _ in range(2):
            fn()
        start = clock()
        fn()
        reps[name] = max(1, min(500, int(SAMPLE_SECONDS / max(clock() - start, 1e-7))))
    samples = {name: [] for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            time.sleep(SETTLE_SECONDS)
            fn()
            start = clock()
            for _ in range(reps[name]):
                fn()
            samples[name].append((clock() - start) / reps[name] * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def check(label, got, expected, dtype):
    """Stop the run when mathpy's result is not NumPy's to a few units of the precision times log2 of the size."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        sys.exit(f"{label}: mathpy's shape {got.shape} is not NumPy's {expected.shape}")
    eps = np.finfo(np.dtype(dtype).char.lower() if np.dtype(dtype).kind == "c" else dtype).eps
    scale = float(np.max(np.abs(expected))) or 1.0
    error = float(np.max(np.abs(got.astype(np.complex128) - expected.astype(np.complex128)))) / scale
    bound = 16 * eps * max(1.0, math.log2(max(expected.size, 2)))
    if error > bound:
        sys.exit(f"{label}: mathpy differs from NumPy by {error:.2e} (relative to the largest value; bound "
                 f"{bound:.1e})")


# --- FFT ------------------------------------------------------------------------------------------------------------

FFT_CASES = [  # (label, kind, shape, dtype, axes)
    ("8 x 1024", "fft", (8, 1024), np.complex64, (-1,)),
    ("256 x 4096", "fft", (256, 4096), np.complex64, (-1,)),
    ("2048 x 2048", "fft", (2048, 2048), np.complex64, (-1,)),
    ("16 x 256 x 256 (2-D)", "fft", (16, 256, 256), np.complex64, (-2, -1)),
]
HELD_OUT = [
    ("64 x 4099 (prime n)", "fft", (64, 4099), np.complex64, (-1,)),
    ("128 x 3375 c128 (odd n)", "fft", (128, 3375), np.complex128, (-1,)),
    ("64 x 64 x 64 (3-D)", "fft", (64, 64, 64), np.complex64, (0, 1, 2)),
    ("256 x 4096 rfft float32", "rfft", (256, 4096), np.float32, (-1,)),
    ("256 x 2049 irfft to 4096", "irfft", (256, 2049), np.complex64, (-1,)),
    ("4096 x 256 axis 0", "fft", (4096, 256), np.complex64, (0,)),
    ("1024 x 1024 c128 ifft2", "ifft", (1024, 1024), np.complex128, (-2, -1)),
]


def operand(shape, dtype, rng):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def fft_peers(kind, x, axes, threads, workers, execution):
    """{peer: fn} computing the same transform of ``x``, and NumPy's result."""
    s = None
    if kind == "irfft":
        s = [x.shape[a] for a in axes[:-1]] + [2 * (x.shape[axes[-1]] - 1)]
    names = {"fft": "fftn", "ifft": "ifftn", "rfft": "rfftn", "irfft": "irfftn"}
    name = names[kind]
    extra = {"s": s} if s is not None else {}
    peers = {"NumPy": lambda: getattr(np.fft, name)(x, axes=axes, **extra),
             "SciPy": lambda: getattr(sfft, name)(x, axes=axes, workers=workers, **extra)}
    if pyfftw is not None:
        aligned = pyfftw.empty_aligned(x.shape, x.dtype)
        aligned[...] = x
        built = getattr(pyfftw.builders, name)(aligned, axes=axes, threads=threads, planner_effort="FFTW_MEASURE",
                                               **extra)
        built.input_array[...] = x  # planning may have written over it
        peers["pyFFTW"] = built
    if mkl_fft is not None:
        peers["mkl_fft"] = lambda: getattr(mkl_fft, name)(x, axes=axes, **extra)
    peers["mathpy"] = lambda: getattr(mfft, name)(x, axes=axes, execution=execution, **extra)
    # Like for like with pyFFTW's reused arrays: mathpy writing into one result array given with out=
    out = np.empty_like(peers["mathpy"]())
    peers["mathpy out="] = lambda: getattr(mfft, name)(x, axes=axes, execution=execution, out=out, **extra)

    # NumPy's floating-point reports asked for: one more pass over the result (the default has none)
    reporting = dataclasses.replace(execution, fp_reports=True)
    peers["mathpy fp_reports"] = lambda: getattr(mfft, name)(x, axes=axes, execution=reporting, **extra)
    return peers


def bench_fft(cases, threads, workers, execution, rounds, rng):
    rows = []
    for label, kind, shape, dtype, axes in cases:
        x = operand(shape, dtype, rng)
        peers = fft_peers(kind, x, axes, threads, workers, execution)
        check(label, peers["mathpy"](), peers["NumPy"](), x.dtype)
        times = measure(peers, rounds)
        rows.append((label, times, _library(kind, x, axes, execution)))
        print(f"  {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()), flush=True)
    return rows


def _library(kind, x, axes, execution):
    """The CPU FFT library mathpy chose for this transform: its cached engine's, the most recent plan of the shape."""
    engine = _engine(kind, x)
    return None if engine is None else engine.library


def _engine(kind, x):
    """mathpy's CPU engine of this transform in the plan cache: the most recent plan of the shape (None: none)."""
    from mathpy.host.fft._fft import plan_cache
    for key in reversed(plan_cache.keys()):
        entry = plan_cache.acquire(key)
        if entry is None:
            continue
        try:
            t = getattr(entry.plan, "transform", None)
            if t is not None and hasattr(entry.plan, "library") and (kind == "irfft" or t.input_shape == x.shape):
                return entry.plan
        finally:
            plan_cache.release(entry)
    return None


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset % 4096]


def window_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 4096]


def bench_callbacks(threads, workers, execution, rounds, rng):
    x = operand((256, 4096), np.complex64, rng)
    filt = rng.standard_normal(4096).astype(np.float32)
    rows = []
    for label, make in (("256 x 4096, epilog * filter[i]", lambda y: y * filt),
                        ("256 x 4096, prolog * window[i]", None)):
        epilog = make is not None
        peers = {"plain": lambda: mfft.fft(x, execution=execution)}
        if epilog:
            peers["NumPy"] = lambda: np.fft.fft(x) * filt
            peers["SciPy"] = lambda: sfft.fft(x, workers=workers) * filt
            fused = {"epilog": mfft.Callback(filter_epilog, filt)}
        else:
            peers["NumPy"] = lambda: np.fft.fft(x * filt)
            peers["SciPy"] = lambda: sfft.fft(x * filt, workers=workers)
            fused = {"prolog": mfft.Callback(window_prolog, filt)}
        if pyfftw is not None:
            aligned = pyfftw.empty_aligned(x.shape, x.dtype)
            built = pyfftw.builders.fft(aligned, threads=threads, planner_effort="FFTW_MEASURE")
            built.input_array[...] = x
            peers["pyFFTW"] = (lambda: built() * filt) if epilog else (lambda: built(x * filt))
        peers["mathpy"] = lambda: mfft.fft(x, execution=execution, **fused)
        start = clock()
        got = peers["mathpy"]()  # (the callback's compile and the choice of strategy included)
        first = clock() - start
        check(label, got, peers["NumPy"](), x.dtype)
        times = measure(peers, rounds)
        rows.append((label, times))
        engine = _engine("fft", x)
        print(f"  {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items())
              + f" (mathpy: first call {first:.2f} s, strategy {getattr(engine, 'strategy', None)}, "
              f"{getattr(engine, 'library', None)})", flush=True)
    return rows


# --- matmul ---------------------------------------------------------------------------------------------------------

def matmul_cases(quick):
    big = 1024 if quick else 2048
    return [
        (f"64^3 float32", (64, 64, 64), np.float32, None),
        (f"{big}^3 float32", (big, big, big), np.float32, None),
        ("1024^3 float64", (1024, 1024, 1024), np.float64, None),
        ("256^3 complex64", (256, 256, 256), np.complex64, None),
    ], [
        ("8 x 256^3 float32 (batched)", (256, 256, 256), np.float32, 8),
        ("1000 x 999 x 1001 float64 (odd)", (1000, 999, 1001), np.float64, None),
        ("a.T @ b, 1024^3 float32", (1024, 1024, 1024), np.float32, "transposed"),
    ]


def bench_matmul(cases, execution, rounds, rng):
    rows = []
    for label, (m, n, k), dtype, variant in cases:
        batch = (variant,) if isinstance(variant, int) else ()
        a = operand((*batch, m, k), dtype, rng)
        if variant == "transposed":
            a = operand((k, m), dtype, rng).T
        b = operand((*batch, k, n), dtype, rng)
        plan = mathpy.Matmul(a, b, execution=execution)
        plan.plan()
        expected = a @ b
        _check_product(label, mathpy.matmul(a, b, execution=execution), expected, a, b)
        _check_product(label, plan.execute(), expected, a, b)
        times = measure({"NumPy": lambda: a @ b, "mathpy": lambda: mathpy.matmul(a, b, execution=execution),
                         "execute": plan.execute}, rounds)
        plan.free()
        rows.append((label, times))
        print(f"  {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()), flush=True)
    return rows


def _check_product(label, got, expected, a, b):
    scale = float(np.max(np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))) or 1.0
    eps = np.finfo(np.dtype(a.dtype).char.lower() if a.dtype.kind == "c" else a.dtype).eps
    error = float(np.max(np.abs(np.asarray(got) - expected))) / scale
    if error > 4 * a.shape[-1] * eps:
        sys.exit(f"{label}: mathpy differs from NumPy by {error:.2e} of |A| @ |B|")


def silu_gate(value, row, col, data):
    return value / (np.float32(1) + np.exp(-value)) * data[row, col]


def gelu(x):
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(np.float32(math.sqrt(2 / math.pi))
                                                           * (x + np.float32(0.044715) * x * x * x)))


def bench_epilogs(execution, rounds, rng):
    n = 1024
    a, b = operand((n, n), np.float32, rng) / np.float32(8), operand((n, n), np.float32, rng) / np.float32(8)
    bias, gate = operand((n,), np.float32, rng), operand((n, n), np.float32, rng)
    cases = [
        ("RELU_BIAS 1024^3 float32", lambda: np.maximum(a @ b + bias[:, None], np.float32(0)),
         lambda: mathpy.matmul(a, b, epilog="relu_bias", epilog_inputs={"bias": bias}, execution=execution)),
        ("GELU_BIAS 1024^3 float32", lambda: gelu(a @ b + bias[:, None]),
         lambda: mathpy.matmul(a, b, epilog="gelu_bias", epilog_inputs={"bias": bias}, execution=execution)),
        ("Python epilog silu(x) * gate, 1024^3 float32", lambda: (lambda x: x / (1 + np.exp(-x)) * gate)(a @ b),
         lambda: mathpy.matmul(a, b, epilog=silu_gate, epilog_inputs={"data": gate}, execution=execution)),
    ]
    rows = []
    for label, numpy_fn, mathpy_fn in cases:
        _check_product(label, mathpy_fn(), numpy_fn(), a, b)
        times = measure({"NumPy": numpy_fn, "product": lambda: a @ b, "mathpy": mathpy_fn}, rounds)
        rows.append((label, times))
        print(f"  {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()), flush=True)
    return rows


# --- report ---------------------------------------------------------------------------------------------------------

def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def header(threads, explicit):
    blas = "unknown BLAS"
    if threadpoolctl is not None:
        found = [f"{i.get('internal_api')} {i.get('version')}" for i in threadpoolctl.threadpool_info()
                 if i.get("user_api") == "blas"]
        blas = ", ".join(sorted(set(found))) or blas
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "-"
    versions = (f"numpy {np.__version__}, scipy {scipy.__version__}, "
                f"pyFFTW {pyfftw.__version__ if pyfftw else 'absent'}, "
                f"mkl_fft {getattr(mkl_fft, '__version__', 'present') if mkl_fft else 'absent'}, BLAS {blas}")
    kind = "CPU" if clock is time.process_time else "wall"
    return (f"CPU: {cpu_name()}, {_threads.usable_cores()} usable cores; {kind} time; threads: {threads}"
            f"{' (--threads)' if explicit else ' (every core: SciPy workers=-1, mathpy default)'}; load average "
            f"{load}; Python {platform.python_version()}, {versions}; run {time.strftime('%Y-%m-%d')}, "
            f"`{' '.join(['python', *sys.argv])}`.")


def plot(fft_rows, held_out, callbacks, matmul_rows, epilog_rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib absent: no plot)")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 6))
    labels, values = [], []
    for case, times, _ in fft_rows + held_out:
        best = min(times[p] for p in _report.CPU_FFT_PEERS if times.get(p) is not None)
        labels.append(case)
        values.append(best / times["mathpy"])
    for case, times in callbacks:
        best = min(times[p] for p in ("NumPy", "SciPy", "pyFFTW") if times.get(p) is not None)
        labels.append(case)
        values.append(best / times["mathpy"])
    left.barh(labels, values, color="tab:blue")
    left.axvline(1 / 1.1, color="tab:red", linestyle="--", label="target 0.91")
    left.set_xlabel("best peer time / mathpy time (above 1: mathpy faster)")
    left.set_title("FFT")
    left.legend()
    labels = [case for case, _ in matmul_rows + epilog_rows]
    values = [t["NumPy"] / t["mathpy"] for _, t in matmul_rows + epilog_rows]
    right.barh(labels, values, color="tab:green")
    right.axvline(0.98, color="tab:red", linestyle="--", label="target 0.98 (64^3: 0.5)")
    right.set_xlabel("NumPy time / mathpy time")
    right.set_title("matmul")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"saved {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="threads for every library (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="smaller large products, fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of timing (default 7, --quick 5)")
    parser.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                        help="wall time (default), or the process's CPU time: steadier on a machine shared with other "
                             "work, meaningful with --threads 1 (with more threads it adds the threads' times up)")
    args = parser.parse_args()
    global clock
    clock = CLOCK[args.clock]
    threads = args.threads or _threads.usable_cores()
    workers = args.threads or -1
    execution = mathpy.ExecutionCPU(num_threads=args.threads)
    rounds = args.rounds or (5 if args.quick else 7)
    rng = np.random.default_rng(26)
    limits = threadpoolctl.threadpool_limits(args.threads) if (args.threads and threadpoolctl) else None
    print(header(threads, args.threads is not None), flush=True)
    try:
        print("FFT:")
        fft_rows = bench_fft(FFT_CASES, threads, workers, execution, rounds, rng)
        held_out = bench_fft(HELD_OUT, threads, workers, execution, rounds, rng)
        callbacks = bench_callbacks(threads, workers, execution, rounds, rng)
        print("matmul:")
        issue, extra = matmul_cases(args.quick)
        matmul_rows = bench_matmul(issue + extra, execution, rounds, rng)
        epilog_rows = bench_epilogs(execution, rounds, rng)
    finally:
        if limits is not None:
            limits.restore_original_limits()
    print()
    print(_report.cpu_tables(fft_rows, held_out, callbacks, matmul_rows, epilog_rows))
    print()
    print(header(threads, args.threads is not None))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bench_cpu.json"), "w") as f:
        json.dump({"header": header(threads, args.threads is not None), "fft": fft_rows, "held_out": held_out,
                   "callbacks": callbacks, "matmul": matmul_rows, "epilogs": epilog_rows}, f, indent=1, default=str)
    plot(fft_rows, held_out, callbacks, matmul_rows, epilog_rows, os.path.join(RESULTS, "bench_cpu.png"))


if __name__ == "__main__":
    main()
