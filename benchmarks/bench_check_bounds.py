"""What ``check_bounds`` costs: FFT callbacks and matmul Python epilogs compiled with bounds checks against the same
functions without, in the same process on the same data.

GPU (default; needs CuPy and a GPU), on the shapes of ``bench_fft_callbacks.py`` (C2C complex64, 268 MB in and out):
  kernel     ms per transform of the cuFFT plan alone (``FFT.prepared_call.engine.execute``: no record read), CUDA
             events over interleaved rounds: plain cuFFT, the unchecked callback, the checked one;
  per call   ms per ``FFT.execute()`` including what the API does after a checked transform (one stream
             synchronisation and a 64-byte copy of the record); the unchecked call is followed by a synchronisation
             too, so both wait for the GPU alike;
and the matmul epilog ``value * data[row, col]`` on each GPU route that runs it (4096^3 bfloat16: the fused Hopper
kernel with staged data; 2048^3 float32: cuBLASLt and the elementwise pass, and the generic kernel), ms per
synchronised ``Matmul.execute()``, checked and unchecked. Every checked result is compared with the unchecked one.

``--dry-run`` (no GPU): the CPU execution space, the same comparison per call, and the checked LTO-IR of each callback
compiled for sm_90 (its size against the unchecked one).

Run on a GPU machine:  python benchmarks/bench_check_bounds.py [--no-matmul]   (about 1-3 minutes; writes
benchmarks/results/bench_check_bounds.png). On a CPU machine:  python benchmarks/bench_check_bounds.py --dry-run
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import _report  # noqa: E402
from bench_fft_callbacks import epilog_filter, epilog_x2, prolog_x3  # noqa: E402  (the same callbacks)

SHAPES = [(1024, 32768), (256, 131072), (16384, 2048)]  # (n, batch), as bench_fft_callbacks.py
CPU_SHAPES = [(1024, 256), (256, 1024)]
CALLBACKS = {"prolog x3": ("prolog", prolog_x3, False), "epilog x2": ("epilog", epilog_x2, False),
             "epilog *filter[i]": ("epilog", epilog_filter, True)}


def gate(value, row, col, data):
    return value * data[row, col]


def _callback(mfft, name, filt):
    kind, fn, with_data = CALLBACKS[name]
    callback = mfft.Callback(fn, data=filt) if with_data else fn
    return {kind: callback}


def _median_ms(fn, reps, repeats=5):
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - start) / reps * 1e3)
    return statistics.median(samples)


def _relative(a, b):
    a, b = np.asarray(a).astype(np.complex128), np.asarray(b).astype(np.complex128)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


# --- CPU (--dry-run) -------------------------------------------------------------------------------------------------

def dry_run():
    import mathpy
    import mathpy.fft as mfft
    from mathpy import jit

    rows = []
    rng = np.random.default_rng(0)
    for n, batch in CPU_SHAPES:
        x = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(np.complex64)
        filt = rng.standard_normal((batch, n)).astype(np.complex64)
        for name in CALLBACKS:
            times, results = {}, {}
            for label, check in (("unchecked", False), ("checked", True)):
                with mfft.FFT(x, axes=[1], options={"check_bounds": check}) as f:
                    f.plan(**_callback(mfft, name, filt))
                    results[label] = f.execute()
                    times[label] = _median_ms(f.execute, 5)
            rows.append((f"CPU {n}x{batch} {name}", times["unchecked"], times["checked"],
                         _relative(results["checked"], results["unchecked"])))
    a = rng.standard_normal((512, 512)).astype(np.float32)
    data = rng.standard_normal((512, 512)).astype(np.float32)
    times, results = {}, {}
    for label, check in (("unchecked", False), ("checked", True)):
        with mathpy.Matmul(a, a, options={"check_bounds": check}) as mm:
            mm.plan(epilog=gate, epilog_inputs={"data": data})
            results[label] = mm.execute()
            times[label] = _median_ms(mm.execute, 3)
    rows.append(("CPU matmul 512^3 f32 data[row, col]", times["unchecked"], times["checked"],
                 _relative(results["checked"], results["unchecked"])))
    print("| case | unchecked ms | checked ms | checked / unchecked | max rel. difference |\n|---|---|---|---|---|")
    for case, plain, checked, diff in rows:
        print(f"| {case} | {plain:.3f} | {checked:.3f} | {checked / plain:.2f} | {diff:.1e} |")
    for name, (kind, fn, with_data) in CALLBACKS.items():
        info = "complex64" if with_data else None
        sizes = [len(jit.compile_callback(fn, kind, "complex64", info, (9, 0), check_bounds=check).ltoir)
                 for check in (False, True)]
        print(f"LTO-IR for sm_90, {name}: {sizes[0]} bytes unchecked, {sizes[1]} bytes checked")
    return rows


# --- GPU -------------------------------------------------------------------------------------------------------------

def gpu(with_matmul):
    import cupy as cp

    import mathpy
    import mathpy.fft as mfft
    from _timing import gpu_ms_interleaved

    device = cp.cuda.Device()
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(device.id)['name'].decode()}")
    rows, failures = [], []
    rng = cp.random.default_rng(1)
    for n, batch in SHAPES:
        x = (rng.standard_normal((batch, n), dtype=np.float32)
             + 1j * rng.standard_normal((batch, n), dtype=np.float32)).astype(np.complex64)
        y = cp.empty_like(x)
        filt = (rng.standard_normal((batch, n), dtype=np.float32) + 1j).astype(np.complex64)
        stream = cp.cuda.get_current_stream().ptr
        with mfft.FFT(x, axes=[1], execution="cuda") as plain:
            plain.plan()
            plain_engine = plain.prepared_call.engine
            plain_ms = gpu_ms_interleaved({"plain": lambda: plain_engine.execute(x.data.ptr, y.data.ptr, -1,
                                                                                  stream)})["plain"]
        for name in CALLBACKS:
            ffts, kernels, calls, results = {}, {}, {}, {}
            try:
                for label, check in (("unchecked", False), ("checked", True)):
                    f = ffts[label] = mfft.FFT(x, axes=[1], execution="cuda", options={"check_bounds": check})
                    f.plan(**_callback(mfft, name, filt))
                    engine = f.prepared_call.engine
                    kernels[label] = (lambda e: lambda: e.execute(x.data.ptr, y.data.ptr, -1, stream))(engine)
                    results[label] = cp.asnumpy(f.execute())
                kernel = gpu_ms_interleaved(kernels)
                for label, f in ffts.items():
                    calls[label] = _median_ms((lambda f: lambda: (f.execute(), device.synchronize()))(f), 20)
            finally:
                for f in ffts.values():
                    f.free()
            diff = _relative(results["checked"], results["unchecked"])
            if diff > 0:
                failures.append(f"{n}x{batch} {name}: checked result differs by {diff:.1e}")
            rows.append({"case": f"{n}x{batch} {name}", "plain": plain_ms, "kernel": kernel, "call": calls,
                         "diff": diff})
            print(f"  {n}x{batch} {name:18s} kernel {kernel['unchecked']:.3f} / {kernel['checked']:.3f} ms  "
                  f"per call {calls['unchecked']:.3f} / {calls['checked']:.3f} ms  diff {diff:.1e}")
        del x, y, filt
        cp.get_default_memory_pool().free_all_blocks()
    if with_matmul:
        import ml_dtypes

        for label, size, dtype, route in (("4096^3 bf16 (fused Hopper kernel, staged data)", 4096, ml_dtypes.bfloat16,
                                           "fused"),
                                          ("2048^3 f32 (cuBLASLt + elementwise pass)", 2048, np.float32, "elementwise"),
                                          ("2048^3 f32 (generic kernel)", 2048, np.float32, "generic")):
            a = cp.asarray(np.random.default_rng(2).standard_normal((size, size)).astype(dtype))
            data = cp.asarray(np.random.default_rng(3).standard_normal((size, size)).astype(dtype))
            calls, results = {}, {}
            for build, check in (("unchecked", False), ("checked", True)):
                with mathpy.Matmul(a, a, options={"check_bounds": check}) as mm:
                    start = time.perf_counter()
                    mm.plan(epilog=gate, epilog_inputs={"data": data}, preferences={"epilog_route": route})
                    results[build] = cp.asnumpy(mm.execute()).astype(np.float64)
                    print(f"  matmul {label} {build}: planned and run once in {time.perf_counter() - start:.1f} s")
                    calls[build] = _median_ms(lambda: (mm.execute(), device.synchronize()), 10)
            diff = _relative(results["checked"], results["unchecked"])
            rows.append({"case": f"matmul {label} data[row, col]", "call": calls, "diff": diff})
            print(f"  matmul {label}: per call {calls['unchecked']:.3f} / {calls['checked']:.3f} ms  diff {diff:.1e}")
    return rows, failures


def plot(rows):
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(rows)), 5))
    positions = np.arange(len(rows))
    kernel = [row["kernel"]["checked"] / row["kernel"]["unchecked"] if row.get("kernel") else 0 for row in rows]
    call = [row["call"]["checked"] / row["call"]["unchecked"] for row in rows]
    ax.bar(positions - 0.2, kernel, 0.4, label="kernel")
    ax.bar(positions + 0.2, call, 0.4, label="per call (with the record read)")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_xticks(positions)
    ax.set_xticklabels([row["case"] for row in rows], rotation=50, ha="right", fontsize=7)
    ax.set_ylabel("checked / unchecked time (1 = free)")
    ax.set_title("Cost of check_bounds: FFT callbacks and matmul epilogs")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", "bench_check_bounds.png")
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU only: no GPU needed")
    parser.add_argument("--no-matmul", action="store_true", help="skip the matmul epilogs (their first compile)")
    args = parser.parse_args()
    wall = time.perf_counter()
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    if args.dry_run:
        dry_run()
        print(f"total {time.perf_counter() - wall:.0f} s")
        return
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no GPU")
    except Exception as e:
        sys.exit(f"bench_check_bounds needs CuPy and a GPU ({e}); --dry-run runs the CPU part")
    rows, failures = gpu(not args.no_matmul)
    import cupy as cp

    gpu_name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    print("\n" + _report.environment(gpu_name) + "\n")
    print(_report.check_bounds_table(rows))
    plot(rows)
    print(f"total {time.perf_counter() - wall:.0f} s")
    return ("FAILURES:\n  " + "\n  ".join(failures)) if failures else None  # sys.exit prints it, status 1


if __name__ == "__main__":
    sys.exit(main())
