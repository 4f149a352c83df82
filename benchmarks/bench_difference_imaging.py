"""Difference imaging in Fourier space (SFFT) end to end at Roman size: NumPy on the CPU, CuPy and mathpy on the GPU.

One image pair is a 4096 x 4096 science exposure and its reference (float32, already on the device for the GPU
implementations), cut into 256 stamps of 288^2 pixels (256^2 kept); per stamp a 9 x 9 delta-function kernel and a
background plane are fitted (SFFT's normal equations from Fourier-space correlations), and the pipeline delivers the
decorrelated difference and the score images and the detections on the host. The three implementations run the same
algorithm (``examples/diffim``); the GPU ones differ only in how they run the FFTs and the pointwise work:

- cupy:   array expressions (CuPy + cupyx.scipy.fft, plans cached by CuPy, ``out=`` buffers, inverse FFTs allowed
          to overwrite their temporary inputs, index tables kept on the device): every pointwise step is a pass over
          memory;
- mathpy: seven stateful ``mathpy.fft.FFT`` plans made once and reused for every pair, with prolog/epilog callbacks
          that do the stamp cutting, spectral products, correlation lags, background projections, kernel drawing,
          score normalisation, decorrelation, score filter and background removal inside cuFFT's kernels; one
          numba-cuda kernel gathers the normal equations and solves them in float64 (``diffim.gathered_solve``);
- mathpy, LU solve: the same with the systems gathered and solved by CuPy's batched LU, as the cupy version does
          (``solver="lu"``): what the solve kernel is worth.

Reported: median wall time per image pair (the GPU idle before, the detections on the host after), the speedups over
NumPy and of mathpy over CuPy (target: >= 2x), the time per stage (CUDA events between stages on the GPU,
``perf_counter`` on the CPU; medians), the host time per stage of the GPU implementations (how long Python took to
enqueue it: where it exceeds the CUDA-event time, the GPU waited for the host), and each stage's floor: the bytes any
implementation must move (read the inputs, write the outputs; the 2-D FFTs of 288^2 stamps need two passes over
memory, since a stamp's spectrum exceeds a multiprocessor's shared memory) at the H200's measured copy bandwidth.
NumPy runs the full image, a few times (it is the slowest); the GPU versions run ``--repeats`` times after two
warm-up pairs (planning, callback compilation, plan caches, memory pools). Every result is compared with NumPy's
before timing (a result over the single-precision tolerance ``diffim.tolerance`` is flagged in the table) and its
detections are matched to the injected transients. torch is not included: the array pipeline is written against the
NumPy API, which CuPy implements and torch does not.

Run on a GPU machine, from the repository root:
    python benchmarks/bench_difference_imaging.py [--out DIR]      (about a minute on an H200)
Writes DIR/bench_difference_imaging.json and .png (default benchmarks/results/; the committed copies live in
docs/images/) and prints the tables last. ``--size 1024`` makes a quick run; without a GPU only NumPy runs.
``--replot DIR/bench_difference_imaging.json`` redraws the plot and reprints the tables from a saved run.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, os.path.join(ROOT, "examples")):
    if path not in sys.path:
        sys.path.insert(0, path)

import diffim  # noqa: E402
from diffim import sfft  # noqa: E402

#: result name -> (implementation, pipeline options), in the order they run
RUNS = {"numpy": ("numpy", {}), "cupy": ("cupy", {}), "mathpy": ("mathpy", {}),
        "mathpy-lu": ("mathpy", {"solver": "lu"})}

STAGES = ("stamps + forward FFTs", "normal equations (correlations)", "solve", "kernel + PSF spectra",
          "difference, decorrelation, score", "stitch", "detection")


class CPUTimer:
    def __init__(self):
        self.marks = [("start", time.perf_counter())]

    def mark(self, stage):
        self.marks.append((stage, time.perf_counter()))

    def stages(self):
        return {stage: (t - self.marks[i][1]) * 1e3 for i, (stage, t) in enumerate(self.marks[1:])}


class CUDATimer:
    """CUDA events on the current stream between stages (no synchronisation until :meth:`stages`), and the host time
    at each mark (how long Python took to enqueue each stage)."""

    def __init__(self):
        import cupy
        self._cupy = cupy
        self.marks = [("start", self._record(), time.perf_counter())]

    def _record(self):
        event = self._cupy.cuda.Event()
        event.record()
        return event

    def mark(self, stage):
        self.marks.append((stage, self._record(), time.perf_counter()))

    def stages(self):
        self.marks[-1][1].synchronize()
        get = self._cupy.cuda.get_elapsed_time
        return {stage: get(self.marks[i][1], event) for i, (stage, event, _) in enumerate(self.marks[1:])}

    def host_stages(self):
        return {stage: (t - self.marks[i][2]) * 1e3 for i, (stage, _, t) in enumerate(self.marks[1:])}


#: The H200's measured copy bandwidth (docs: FACTS.md), bytes per second.
BANDWIDTH = 4.3e12


def floors(config):
    """Bytes each stage must move at least, whatever the implementation: {stage: (compulsory bytes, bytes when the
    2-D FFTs of the stamps take two passes over memory)}. A stamp stack of complex64 spectra (both images packed, or
    two half spectra) is S; the stamps are cut from and the results stitched into float32 images."""
    c = config
    image = 4 * c.n ** 2
    spectra = 8 * c.batch * c.stamp ** 2
    cores = spectra * (c.core / c.stamp) ** 2
    system = 4 * c.batch * (c.taps + 3) * (c.taps + 4)     # the normal equations, float32
    compulsory = {
        "stamps + forward FFTs": 2 * image + spectra,        # read both images, write both spectra
        "normal equations (correlations)": spectra + system,  # read the spectra, write the systems
        "solve": system,                                      # read it (the solutions are tiny)
        "kernel + PSF spectra": spectra,                      # write K^ and P^ (the coefficients are tiny)
        "difference, decorrelation, score": 2 * spectra + cores,  # read I^, J^, K^, P^; write the cores
        "stitch": cores + 2 * image,                          # read the cores, write difference and score
        "detection": image,                                   # read the score once
    }
    two_pass = {"stamps + forward FFTs", "kernel + PSF spectra", "difference, decorrelation, score"}
    return {stage: (b, b + (2 * spectra if stage in two_pass else 0)) for stage, b in compulsory.items()}


def measure(name, config, data, scene, reference, repeats, gpu):
    """Check one run (:data:`RUNS`) against the NumPy reference, then time it: a dict for the JSON."""
    implementation, options = RUNS[name]
    pipeline, xp = diffim.make_pipeline(implementation, config, gpu, **options)
    on_gpu = xp is not np
    device_data = data.to(xp)
    sync = (lambda: xp.cuda.Device().synchronize()) if on_gpu else (lambda: None)
    start = time.perf_counter()
    result = diffim.to_numpy(diffim.subtract(pipeline, xp, device_data))
    first = time.perf_counter() - start
    recovered, spurious = sfft.match(result.detections, scene.transients)
    error = 0.0 if reference is None else diffim.relative_error(result, reference, data)
    entry = {"device": "GPU" if on_gpu else "CPU", "first_pair_s": first, "recovered": int(len(recovered)),
             "injected": int(len(scene.transients)), "spurious": int(spurious), "relative_error": error,
             "within_tolerance": error <= diffim.tolerance(config)}
    if not entry["within_tolerance"]:  # reported in the table; the timing still runs
        print(f"WARNING: {name} differs from NumPy by {error:.2e} > tolerance {diffim.tolerance(config):.2e}")
    if on_gpu:
        diffim.subtract(pipeline, xp, device_data)  # second warm-up pair
    totals, stages, host = [], [], []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        diffim.subtract(pipeline, xp, device_data)  # ends with the detections on the host
        totals.append((time.perf_counter() - start) * 1e3)
    for _ in range(min(repeats, 10 if on_gpu else 2)):
        timer = CUDATimer() if on_gpu else CPUTimer()
        diffim.subtract(pipeline, xp, device_data, timer=timer)
        stages.append(timer.stages())
        if on_gpu:
            host.append(timer.host_stages())
    entry["ms_per_pair"] = statistics.median(totals)
    entry["ms_per_pair_all"] = totals
    entry["stages_ms"] = {s: statistics.median(run[s] for run in stages) for s in STAGES}
    if host:
        entry["host_stages_ms"] = {s: statistics.median(run[s] for run in host) for s in STAGES}
    entry["repeats"] = repeats
    if hasattr(pipeline, "free"):
        pipeline.free()
    del pipeline
    if on_gpu:
        xp.get_default_memory_pool().free_all_blocks()
    return entry, result


def environment(gpu):
    """Versions and devices, each probed on its own: a failed probe is recorded, not raised."""
    import scipy

    info = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine()}
    probes = {"mathpy": lambda: __import__("mathpy").__version__}
    if gpu:
        import cupy
        probes.update(
            gpu=lambda: cupy.cuda.runtime.getDeviceProperties(0)["name"],
            cupy=lambda: cupy.__version__,
            cuda_runtime=lambda: cupy.cuda.runtime.runtimeGetVersion(),
            cufft=lambda: cupy.cuda.cufft.getVersion())
    for key, probe in probes.items():
        try:
            value = probe()
            info[key] = value.decode() if isinstance(value, bytes) else value
        except Exception as e:
            info[key] = f"unknown ({type(e).__name__})"
    return info


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    impl = results["implementations"]
    names = [n for n in ("numpy", "cupy", "mathpy") if n in impl]
    base = impl["numpy"]["ms_per_pair"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [1, 1.7]})
    speed = [base / impl[n]["ms_per_pair"] for n in names]
    bars = ax1.bar(names, speed, color=["#888888", "#4c72b0", "#dd8452"][:len(names)])
    ax1.set_yscale("log")
    ax1.set_ylim(0.5, max(speed) * 3)
    ax1.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax1.set_ylabel("speedup over NumPy (per image pair)")
    for bar, s, n in zip(bars, speed, names):
        ax1.text(bar.get_x() + bar.get_width() / 2, s, f"{s:.3g}x\n{impl[n]['ms_per_pair']:.4g} ms",
                 ha="center", va="bottom", fontsize=8)
    ax1.set_title(f"{results['config']['n']}$^2$ image pair, end to end")
    gpu_names = [n for n in ("cupy", "mathpy") if n in impl and "stages_ms" in impl[n]]
    if gpu_names:
        left = np.zeros(len(gpu_names))
        for i, stage in enumerate(STAGES):
            values = np.array([impl[n]["stages_ms"][stage] for n in gpu_names])
            ax2.barh(gpu_names, values, left=left, label=stage, color=plt.cm.tab10(i))
            left += values
        ax2.set_xlabel("time per stage (ms; GPU: CUDA events)")
        ax2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4, frameon=False)
        ax2.set_title("where the time goes")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def tables(results):
    impl = results["implementations"]
    lines = []
    base = impl.get("numpy", {}).get("ms_per_pair")
    cupy = impl.get("cupy", {}).get("ms_per_pair")
    c = results["config"]
    lines.append(f"\nDifference imaging, {c['n']}x{c['n']} image pair, {c['stamps']} stamps of {c['stamp']}^2, "
                 f"{results['environment'].get('gpu', 'no GPU')}; median ms per image pair")
    lines.append("| implementation | device | ms per pair | speedup vs NumPy | vs CuPy | transients recovered | "
                 "spurious | error vs NumPy |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name in RUNS:
        e = impl.get(name)
        if e is None:
            continue
        if "error" in e:
            lines.append(f"| {name} | - | failed: {e['error']} | | | | | |")
            continue
        ms = e["ms_per_pair"]
        vs_numpy = f"{base / ms:.1f}x" if base else "-"
        vs_cupy = f"{cupy / ms:.2f}x" if cupy and "ms_per_pair" in impl.get("cupy", {}) else "-"
        flag = "" if e["within_tolerance"] else " (over tolerance!)"
        lines.append(f"| {name} | {e['device']} | {ms:.2f} | {vs_numpy} | {vs_cupy} | "
                     f"{e['recovered']}/{e['injected']} | {e['spurious']} | {e['relative_error']:.1e}{flag} |")
    lines.append("\nTime per stage (ms, medians; GPU: CUDA events between stages)")
    names = [n for n in RUNS if "stages_ms" in impl.get(n, {})]
    lines.append("| stage | " + " | ".join(names) + (" | CuPy / mathpy |" if {"cupy", "mathpy"} <= set(names)
                                                    else " |"))
    lines.append("|---" * (len(names) + 1 + ({"cupy", "mathpy"} <= set(names))) + "|")
    for stage in STAGES + ("total",):
        values = {n: (sum(impl[n]["stages_ms"].values()) if stage == "total" else impl[n]["stages_ms"][stage])
                  for n in names}
        row = f"| {stage} | " + " | ".join(f"{values[n]:.3f}" for n in names)
        if {"cupy", "mathpy"} <= set(names):
            row += f" | {values['cupy'] / values['mathpy']:.2f}x" if values["mathpy"] > 0 else " | -"
        lines.append(row + " |")
    gpu = [n for n in ("cupy", "mathpy") if "host_stages_ms" in impl.get(n, {})]
    if gpu:
        lines.append("\nHost time per stage (ms, medians: Python enqueueing the stage; where it exceeds the CUDA-event "
                     "time the GPU waited for the host; detection waits for the GPU)")
        lines.append("| stage | " + " | ".join(f"{n} host | {n} GPU" for n in gpu) + " |")
        lines.append("|---" * (2 * len(gpu) + 1) + "|")
        for stage in STAGES + ("total",):
            cells = []
            for n in gpu:
                host, device = impl[n]["host_stages_ms"], impl[n]["stages_ms"]
                pick = (lambda d: sum(d.values())) if stage == "total" else (lambda d: d[stage])  # noqa: E731
                cells.append(f"{pick(host):.3f} | {pick(device):.3f}")
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    measured = [n for n in ("cupy", "mathpy") if n in names]  # the floors of the two compared programs
    if measured and "floors" in results:
        lines.append(f"\nFloor per stage: bytes any implementation moves, at {BANDWIDTH / 1e12:.1f} TB/s (the H200's "
                     f"copy bandwidth); 2-pass: with two passes of each 2-D stamp FFT over memory")
        lines.append("| stage | MB | floor ms | 2-pass MB | 2-pass floor ms | " +
                     " | ".join(f"{n} / 2-pass floor" for n in measured) + " |")
        lines.append("|---" * (5 + len(measured)) + "|")
        for stage in STAGES + ("total",):
            if stage == "total":
                least = sum(b for b, _ in results["floors"].values())
                passes = sum(b for _, b in results["floors"].values())
            else:
                least, passes = results["floors"][stage]
            floor = passes / BANDWIDTH * 1e3
            cells = [f"{least / 1e6:.0f}", f"{least / BANDWIDTH * 1e3:.3f}", f"{passes / 1e6:.0f}", f"{floor:.3f}"]
            for n in measured:
                ms = sum(impl[n]["stages_ms"].values()) if stage == "total" else impl[n]["stages_ms"][stage]
                cells.append(f"{ms / floor:.1f}x")
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    if cupy and "ms_per_pair" in impl.get("mathpy", {}):
        ratio = cupy / impl["mathpy"]["ms_per_pair"]
        lines.append(f"\nmathpy vs CuPy end to end: {ratio:.2f}x (target >= 2x: {'met' if ratio >= 2 else 'NOT met'})")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096, help="image size n (n x n), a multiple of 256")
    parser.add_argument("--repeats", type=int, default=20, help="timed pairs per GPU implementation")
    parser.add_argument("--numpy-repeats", type=int, default=3, help="timed pairs for NumPy")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="directory for the JSON and the plot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replot", metavar="JSON", help="only redraw the plot (next to JSON) and print the tables "
                                                          "from a saved run, e.g. on a machine with matplotlib")
    args = parser.parse_args(argv)
    if args.replot:
        with open(args.replot) as f:
            results = json.load(f)
        plot(results, os.path.splitext(args.replot)[0] + ".png")
        print(tables(results))
        return 0
    os.makedirs(args.out, exist_ok=True)

    config = diffim.Config(n=args.size, core=256 if args.size >= 2048 else 128)
    gpu = diffim.gpu_available()
    start = time.perf_counter()
    scene = diffim.make_scene(config.n, seed=args.seed)
    data = diffim.inputs(scene, config)
    print(f"scene {config.n}^2 with {len(scene.transients)} transients made in {time.perf_counter() - start:.1f} s; "
          f"GPU: {gpu}", flush=True)
    results = {"config": {"n": config.n, "core": config.core, "stamp": config.stamp, "stamps": config.batch,
                          "kernel": 2 * config.kernel_radius + 1, "psf": 2 * config.psf_radius + 1},
               "environment": environment(gpu), "date": time.strftime("%Y-%m-%d"),
               "tolerance": diffim.tolerance(config), "floors": floors(config), "implementations": {}}
    reference = None
    for name in RUNS:
        if name != "numpy" and not gpu:
            print(f"{name}: skipped (no GPU)")
            continue
        start = time.perf_counter()
        try:
            repeats = args.numpy_repeats if name == "numpy" else args.repeats
            entry, result = measure(name, config, data, scene, reference, repeats, gpu)
        except Exception as e:  # report and go on: the run must reach the tables
            traceback.print_exc()
            results["implementations"][name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        if name == "numpy":
            reference = result
        results["implementations"][name] = entry
        print(f"{name}: {entry['ms_per_pair']:.2f} ms per pair (first pair {entry['first_pair_s']:.1f} s, "
              f"{time.perf_counter() - start:.1f} s in all); recovered {entry['recovered']}/{entry['injected']}, "
              f"spurious {entry['spurious']}, error vs NumPy {entry['relative_error']:.1e}", flush=True)
        if reference is None:
            print("NumPy failed: nothing to check the GPU implementations against")
            break

    json_path = os.path.join(args.out, "bench_difference_imaging.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"results: {json_path}")
    if "ms_per_pair" in results["implementations"].get("numpy", {}):
        plot(results, os.path.join(args.out, "bench_difference_imaging.png"))
    print(tables(results))
    failed = [n for n, e in results["implementations"].items() if "error" in e]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
