"""SFFT 1.7.3 itself against mathpy's backend for it (examples/sfft_mathpy), end to end per image pair, side by side
in one process, at the configuration the Roman supernova pipeline uses.

The configuration: kernel half-width 9 (a 19 x 19 kernel), kernel polynomial order 2, background order 0, constant
photometric ratio, the reference convolved (``ForceConv="REF"``). Source: the Roman Supernova PIT's pipeline
phrosty (github.com/Roman-Supernova-PIT/phrosty): ``phrosty/SpaceSFFTPurePack/SpaceSFFTCupyFlow.py`` calls
``PureCupy_Customized_Packet.PCCP(..., ForceConv='REF', GKerHW=9, KerPolyOrder=2, BGPolyOrder=0,
ConstPhotRatio=True)``; its current ``pipeline.py`` goes through SFFT's ``SpaceSFFT_Flow``, whose defaults are the same
(GKerHW=9, KerPolyOrder=2, BGPolyOrder=0, ConstPhotRatio=True) with ``kerpolyorder: 2`` in its configuration files.
That is 2167 unknowns (2162 solved).

The image pair: the project's sky generator (``examples/diffim/sky.py``: stars and galaxies through spatially varying
PSFs, different backgrounds and photometric scales, transients in the science image), float64, each less its median
(the pipeline subtracts sky-subtracted images); the masked pair keeps the sources both images show (above 3 sigma of
the sky, grown by 2 pixels) and zeroes the rest, as the pipeline zeroes its background mask.

Runs (all on the same pair, the results compared with SFFT's):

- ``sfft-cupy``:   SFFT's ``PureCupy_Customized_Packet.PCCP``, as the pipeline calls it (it builds SFFT's CuPy
                   configuration, ``SingleSFFTConfigure.SSC``, at every call);
- ``sfft-cupy-gss``: SFFT's ``GeneralSFFTSubtract_PureCupy.GSS`` with the configuration built once: the subtraction
                   alone;
- ``mathpy``:      ``sfft_mathpy.PCCP`` on the GPU (plans made on the first pair and reused);
- ``sfft-numpy``:  SFFT's ``GeneralSFFTSubtract.GSS`` with its NumPy backend on all CPU threads
                   (``NUM_CPU_THREADS_4SUBTRACT = os.cpu_count()``; numba uses every thread too);
- ``mathpy-cpu``:  ``sfft_mathpy.GSS`` on NumPy arrays (mathpy's CPU execution space; by default only up to 1024^2).

Each GPU run: its setup (SFFT's configuration; the inputs to the device), a first pair (compilation, planning), then
``--repeats`` pairs, each timed from a synchronised device to the difference image and solution ready on the device;
medians. CPU runs: ``--numpy-repeats`` pairs after the first (with 0, the first pair's time is reported; SFFT's NumPy
backend has compiled its numba kernels in the setup by then).
Targets (the issue): mathpy >= 2x ``sfft-cupy`` and >= 39x ``sfft-numpy``.

Run on the GPU machine, from the repository root (SFFT and its dependencies installed from carried wheels):
    python benchmarks/bench_sfft.py                    (4096^2: SFFT's NumPy backend takes minutes; see --runs)
    python benchmarks/bench_sfft.py --size 1024 --quick
Without a GPU only the CPU runs take place (``--size 128`` takes about a minute here, most of it SFFT compiling its
numba kernels). ``--replot JSON`` redraws the plot and reprints the tables of a saved run.
"""

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (HERE, ROOT, os.path.join(ROOT, "examples")):
    if path not in sys.path:
        sys.path.insert(0, path)

import diffim  # noqa: E402
import sfft_mathpy  # noqa: E402
from _report import environment, table  # noqa: E402

#: The Roman supernova pipeline's SFFT configuration (see the module docstring for the source).
ROMAN = {"GKerHW": 9, "KerPolyOrder": 2, "BGPolyOrder": 0, "ConstPhotRatio": True}
RUNS = ("sfft-cupy", "sfft-cupy-gss", "mathpy", "sfft-numpy", "mathpy-cpu")
GPU_RUNS = {"sfft-cupy", "sfft-cupy-gss", "mathpy"}


def image_pair(n, seed=0):
    """(REF, SCI, mREF, mSCI) float64 NumPy arrays of one generated field."""
    from scipy import ndimage
    scene = diffim.make_scene(n, seed=seed)
    ref = scene.reference.image.astype(np.float64)
    sci = scene.science.image.astype(np.float64)
    ref, sci = ref - np.median(ref), sci - np.median(sci)   # the pipeline subtracts sky-subtracted images
    fitted = np.ones(ref.shape, bool)
    for image, exposure in ((ref, scene.reference), (sci, scene.science)):
        fitted &= ndimage.binary_dilation(image > 3 * exposure.sky_sigma, iterations=2)
    return ref, sci, np.where(fitted, ref, 0.0), np.where(fitted, sci, 0.0)


@contextlib.contextmanager
def quiet():
    """SFFT prints whatever its VERBOSE_LEVEL: keep it out of the tables."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def runners(pair, threads):
    """{run: (setup() -> call() -> (solution, difference) on the host when .get() is applied)}."""
    ref, sci, mref, msci = pair
    n0, n1 = ref.shape
    args = dict(ForceConv="REF", **ROMAN)

    def sfft_cupy():
        import cupy
        from sfft.PureCupyCustomizedPacket import PureCupy_Customized_Packet
        device = [cupy.asarray(a) for a in pair]
        return lambda: PureCupy_Customized_Packet.PCCP(*device, **args, VERBOSE_LEVEL=0)

    def sfft_cupy_gss():
        import cupy
        from sfft.sfftcore.SFFTConfigure import SingleSFFTConfigure
        from sfft.sfftcore.SFFTSubtract import GeneralSFFTSubtract_PureCupy
        config = SingleSFFTConfigure.SSC(NX=n0, NY=n1, KerHW=ROMAN["GKerHW"], KerPolyOrder=ROMAN["KerPolyOrder"],
                                         BGPolyOrder=ROMAN["BGPolyOrder"], ConstPhotRatio=ROMAN["ConstPhotRatio"],
                                         BACKEND_4SUBTRACT="Cupy", VERBOSE_LEVEL=0)
        device = [cupy.asarray(a) for a in pair]   # I = REF (convolved), J = SCI
        return lambda: GeneralSFFTSubtract_PureCupy.GSS(device[0], device[1], device[2], device[3], config,
                                                        VERBOSE_LEVEL=0)[:2]

    def mathpy_gpu():
        import cupy
        device = [cupy.asarray(a) for a in pair]
        return lambda: sfft_mathpy.PCCP(*device, **args)

    def sfft_numpy():
        from sfft.sfftcore.SFFTConfigure import SingleSFFTConfigure
        from sfft.sfftcore.SFFTSubtract import GeneralSFFTSubtract
        config = SingleSFFTConfigure.SSC(NX=n0, NY=n1, KerHW=ROMAN["GKerHW"], KerPolyOrder=ROMAN["KerPolyOrder"],
                                         BGPolyOrder=ROMAN["BGPolyOrder"], ConstPhotRatio=ROMAN["ConstPhotRatio"],
                                         BACKEND_4SUBTRACT="Numpy", NUM_CPU_THREADS_4SUBTRACT=threads,
                                         VERBOSE_LEVEL=0)
        return lambda: GeneralSFFTSubtract.GSS(ref, sci, mref, msci, config, BACKEND_4SUBTRACT="Numpy",
                                               NUM_CPU_THREADS_4SUBTRACT=threads, VERBOSE_LEVEL=0)[:2]

    def mathpy_cpu():
        return lambda: sfft_mathpy.GSS(ref, sci, mref, msci, sfft_mathpy.Params(n0, n1, 9, 9, 2, 0, True))[:2]

    return {"sfft-cupy": sfft_cupy, "sfft-cupy-gss": sfft_cupy_gss, "mathpy": mathpy_gpu, "sfft-numpy": sfft_numpy,
            "mathpy-cpu": mathpy_cpu}


def _host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def measure(name, setup, repeats):
    """A dict for the JSON and the (solution, difference) of the first pair, on the host."""
    on_gpu = name in GPU_RUNS
    if on_gpu:
        import cupy
        sync = cupy.cuda.Device().synchronize
    else:
        def sync():
            pass
    start = time.perf_counter()
    with quiet():
        call = setup()     # SFFT's configuration (its numba or CUDA kernels compile here); inputs to the device
        sync()
    prepared = time.perf_counter() - start
    start = time.perf_counter()
    with quiet():
        solution, difference = call()
        sync()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        with quiet():
            call()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    entry = {"device": "GPU" if on_gpu else "CPU", "setup_s": prepared, "first_pair_s": first, "repeats": repeats,
             "ms_per_pair_all": times, "ms_per_pair": statistics.median(times) if times else first * 1e3}
    return entry, (_host(solution), _host(difference))


def agreement(result, reference, sci):
    """(max |solution difference| / max |solution|, max |difference image difference| / max |SCI|)."""
    return (float(np.max(np.abs(result[0] - reference[0])) / np.max(np.abs(reference[0]))),
            float(np.max(np.abs(result[1] - reference[1])) / np.max(np.abs(sci))))


def tables(results):
    impl = results["implementations"]
    numpy_ms = impl.get("sfft-numpy", {}).get("ms_per_pair")
    mathpy_ms = impl.get("mathpy", {}).get("ms_per_pair") or impl.get("mathpy-cpu", {}).get("ms_per_pair")
    rows = []
    for name in RUNS:
        e = impl.get(name)
        if e is None:
            continue
        if "error" in e:
            rows.append([name, "-", f"failed: {e['error']}", "-", "-", "-", "-"])
            continue
        ms = e["ms_per_pair"]
        rows.append([name, e["device"], f"{ms:.2f}", f"{numpy_ms / ms:.1f}x" if numpy_ms else "-",
                     f"{ms / mathpy_ms:.2f}" if mathpy_ms and not name.startswith("mathpy") else "-",
                     f"{e['solution_error']:.1e}" if "solution_error" in e else "-",
                     f"{e['difference_error']:.1e}" if "difference_error" in e else "-"])
    c = results["config"]
    lines = [f"\nSFFT subtraction, {c['n']}x{c['n']} float64 pair, GKerHW {c['GKerHW']}, KerPolyOrder "
             f"{c['KerPolyOrder']}, BGPolyOrder {c['BGPolyOrder']}, ConstPhotRatio {c['ConstPhotRatio']} (the Roman "
             f"pipeline's); median ms per pair, end to end", "",
             table(["run", "device", "ms per pair", "speedup vs SFFT NumPy", "time / mathpy", "solution vs SFFT",
                    "difference vs SFFT"], rows), "",
             "solution vs SFFT: max |solution - SFFT's| / max |SFFT's|; difference vs SFFT: max |difference - SFFT's| "
             f"/ max |SCI|; SFFT's = {results['reference']}.", results["environment"]]
    gpu = impl.get("mathpy", {}).get("ms_per_pair")
    for peer, target in (("sfft-cupy", 2.0), ("sfft-numpy", 39.0)):
        peer_ms = impl.get(peer, {}).get("ms_per_pair")
        if gpu and peer_ms:
            ratio = peer_ms / gpu
            lines.append(f"mathpy vs {peer}: {ratio:.1f}x (target >= {target:g}x: "
                         f"{'met' if ratio >= target else 'NOT met'})")
    return "\n".join(lines)


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    impl = results["implementations"]
    names = [n for n in RUNS if "ms_per_pair" in impl.get(n, {})]
    values = [impl[n]["ms_per_pair"] for n in names]
    colours = ["#dd8452" if n.startswith("mathpy") else "#4c72b0" for n in names]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar(names, values, color=colours)
    ax.set_yscale("log")
    ax.set_ylabel("ms per image pair (log)")
    for bar, value in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.4g}", ha="center", va="bottom", fontsize=8)
    c = results["config"]
    ax.set_title(f"SFFT subtraction of a {c['n']}$^2$ pair (Roman configuration)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096, help="image size n (n x n)")
    parser.add_argument("--repeats", type=int, default=10, help="timed pairs per GPU run")
    parser.add_argument("--numpy-repeats", type=int, default=1, help="timed pairs per CPU run")
    parser.add_argument("--runs", default=None, help=f"comma-separated subset of {', '.join(RUNS)}")
    parser.add_argument("--quick", action="store_true", help="3 GPU repeats, no CPU repeats")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--replot", metavar="JSON")
    args = parser.parse_args(argv)
    if args.replot:
        with open(args.replot) as f:
            results = json.load(f)
        plot(results, os.path.splitext(args.replot)[0] + ".png")
        print(tables(results))
        return 0
    if args.quick:
        args.repeats, args.numpy_repeats = 3, 0
    runs = RUNS if args.runs is None else tuple(r.strip() for r in args.runs.split(","))
    unknown = set(runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown runs {sorted(unknown)}; choose from {', '.join(RUNS)}")
    gpu = diffim.gpu_available()
    if args.runs is None and args.size > 1024:
        runs = tuple(r for r in runs if r != "mathpy-cpu")
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    pair = image_pair(args.size)
    print(f"{args.size}^2 pair made in {time.perf_counter() - start:.1f} s; GPU: {gpu}", flush=True)
    threads = os.cpu_count()
    gpu_name = "no GPU"
    if gpu:
        import cupy
        gpu_name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    results = {"config": {"n": args.size, **ROMAN}, "implementations": {}, "date": time.strftime("%Y-%m-%d"),
               "environment": environment(gpu_name, [f"{threads} CPU threads"])}
    outputs = {}
    make = runners(pair, threads)
    for name in runs:
        if name in GPU_RUNS and not gpu:
            print(f"{name}: skipped (no GPU)")
            continue
        start = time.perf_counter()
        try:
            entry, outputs[name] = measure(name, make[name], args.repeats if name in GPU_RUNS else
                                           args.numpy_repeats)
        except Exception as e:  # report and go on: the run must reach the tables
            traceback.print_exc()
            results["implementations"][name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        results["implementations"][name] = entry
        print(f"{name}: {entry['ms_per_pair']:.2f} ms per pair (first pair {entry['first_pair_s']:.1f} s, "
              f"{time.perf_counter() - start:.1f} s in all)", flush=True)
    reference = next((r for r in ("sfft-cupy-gss", "sfft-cupy", "sfft-numpy") if r in outputs), None)
    results["reference"] = reference
    for name, output in outputs.items():
        if reference and name != reference:
            errors = agreement(output, outputs[reference], pair[1])
            results["implementations"][name]["solution_error"], \
                results["implementations"][name]["difference_error"] = errors
    json_path = os.path.join(args.out, "bench_sfft.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"results: {json_path}")
    plot(results, os.path.join(args.out, "bench_sfft.png"))
    print(tables(results))
    return 1 if any("error" in e for e in results["implementations"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
