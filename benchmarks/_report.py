"""How every benchmark script reports: Markdown tables exactly as docs/benchmarks.md shows them, and one line saying
what produced them, so that a run's output can be pasted into the page whole.

Ratio convention, everywhere: ``peer time / mathpy time``; above 1 means mathpy is faster.
"""

import datetime
import platform
import sys
from importlib import metadata

RATIO_NOTE = "Ratios are peer time / mathpy time: above 1 means mathpy is faster."


def ratio(peer, mathpy):
    """``peer / mathpy`` as text, or "-" when either is missing."""
    if peer is None or mathpy is None or peer != peer or mathpy != mathpy or not mathpy:
        return "-"
    return f"{peer / mathpy:.2f}"


def ms(value, digits=3):
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def table(headers, rows):
    """A Markdown table: ``headers`` a list of str, ``rows`` lists of cells (str or numbers)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row} has {len(row)} cells for {len(headers)} columns")
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


def _version(distribution):
    for name in ([distribution] if isinstance(distribution, str) else distribution):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def environment(gpu_name, extra=()):
    """One Markdown line naming the GPU, the date and the versions this run used (numpy included: the GPU machine's
    numpy may be newer than the pin in pyproject.toml, which covers fresh installs)."""
    packages = [("numpy", "numpy"), ("numba-cuda", "numba-cuda"), ("CuPy", ("cupy-cuda13x", "cupy-cuda12x", "cupy")),
                ("torch", "torch"), ("nvmath-python", ("nvmath-python", "nvmath_python"))]
    versions = [f"{label} {_version(dist) or 'absent'}" for label, dist in packages]
    parts = [f"{gpu_name}", *extra, f"Python {platform.python_version()}", *versions,
             f"run {datetime.date.today().isoformat()}", f"`{' '.join(['python', *sys.argv])}`"]
    return "Environment: " + ", ".join(parts) + "."


def _geomean(values):
    import math
    values = [v for v in values if v == v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# --- bench_fft_callbacks.py ----------------------------------------------------------------------------------------

CALLBACK_LABELS = {"plain": "plain cuFFT", "C++": "C++", "numba": "numba", "mathpy": "**mathpy**", "nvmath": "nvmath",
                   "cupy": "unfused CuPy"}
CALLBACK_PEERS = {"C++": "C++", "numba": "numba", "nvmath": "nvmath", "cupy": "CuPy"}


def callbacks_table(rows, variants):
    """``rows``: dicts with "case" and ms per variant ("plain", "C++", "numba", "mathpy", "nvmath", "cupy");
    ``variants``: the columns present in this run, in order."""
    peers = [v for v in CALLBACK_PEERS if v in variants]
    headers = (["case"] + [CALLBACK_LABELS[v] for v in variants]
               + [f"{CALLBACK_PEERS[p]} / mathpy" for p in peers])
    cells, slow = [], []
    for row in rows:
        times = [f"**{ms(row.get(v))}**" if v == "mathpy" else ms(row.get(v)) for v in variants]
        cells.append([row["case"]] + times + [ratio(row.get(p), row.get("mathpy")) for p in peers])
        if "mathpy" in row and "C++" in row and row["C++"] / row["mathpy"] < 1 / 1.10:
            slow.append(row["case"])
    means = [_geomean([row[p] / row["mathpy"] for row in rows if p in row and "mathpy" in row]) for p in peers]
    cells.append(["geometric mean"] + [""] * len(variants) + [f"{m:.2f}" for m in means])
    return "\n".join([
        table(headers, cells), "",
        "Time per transform (ms), medians. " + RATIO_NOTE,
        "Targets: C++ / mathpy >= 0.91 (mathpy within 1.10x of hand-written C++): "
        + (f"missed by {', '.join(slow)}" if slow else "met by every row")
        + "; numba / mathpy >= 1.5 where numba's call overhead shows (prologs, filter epilogs)."])


# --- bench_fft.py -------------------------------------------------------------------------------------------------

FFT_PEERS = {"torch": "torch", "cupy": "CuPy", "nvmath": "nvmath"}


def fft_tables(transforms, overhead):
    """``transforms``: (label, shape, {library: ms}, {library: relative error vs CuPy}); ``overhead``: {call: us}."""
    peers = [p for p in FFT_PEERS if any(p in times for _, _, times, _ in transforms)]
    headers = (["problem (256 MB in)", "shape", "**mathpy** ms"] + [f"{FFT_PEERS[p]} ms" for p in peers]
               + [f"{FFT_PEERS[p]} / mathpy" for p in peers] + ["max rel. err vs CuPy"])
    cells = []
    for label, shape, times, errors in transforms:
        error = f"{max(errors.values()):.1e}" if errors else "-"
        cells.append([label, "x".join(map(str, shape)), f"**{ms(times['mathpy'])}**"]
                     + [ms(times.get(p)) for p in peers] + [ratio(times.get(p), times["mathpy"]) for p in peers]
                     + [error])
    cells.append(["geometric mean", "", ""] + [""] * len(peers)
                 + [f"{_geomean([t[p] / t['mathpy'] for _, _, t, _ in transforms if p in t]):.2f}" for p in peers]
                 + [""])
    overhead_rows = [[name, f"{us:.1f}"] for name, us in overhead.items()]
    return "\n".join([
        table(headers, cells), "",
        "GPU time per transform (ms), medians of interleaved rounds. " + RATIO_NOTE, "",
        table(["call, 8 x 1024 complex64, async", "us per call"], overhead_rows), "",
        "Host time per asynchronous call (2000 calls, one synchronisation)."])


# --- bench_matmul.py ----------------------------------------------------------------------------------------------

def matmul_tables(gemm, overhead):
    """``gemm``: row dicts of bench_matmul.bench_gemm; ``overhead``: {call: us}."""
    headers = ["M x N x K", "dtype", "**mathpy** ms (TFLOP/s)", "torch ms (TFLOP/s)", "nvmath ms (TFLOP/s)",
               "torch / mathpy", "nvmath / mathpy", "RELU_BIAS: **mathpy** ms", "nvmath ms", "torch relu(addmm) ms",
               "nvmath / mathpy", "torch / mathpy", "**mathpy** F order ms (TFLOP/s)", "torch / mathpy F order"]

    def with_tflops(r, lib):
        return f"{r[f'{lib}_ms']:.3f} ({r[f'{lib}_tflops']:.0f})" if f"{lib}_ms" in r else "-"

    cells = []
    for r in gemm:
        cells.append([r["shape"], r["dtype"], f"**{with_tflops(r, 'mathpy')}**", with_tflops(r, "torch"),
                      with_tflops(r, "nvmath"), ratio(r.get("torch_ms"), r["mathpy_ms"]),
                      ratio(r.get("nvmath_ms"), r["mathpy_ms"]), f"**{ms(r['mathpy_relu_bias_ms'])}**",
                      ms(r.get("nvmath_relu_bias_ms")), ms(r.get("torch_relu_bias_ms")),
                      ratio(r.get("nvmath_relu_bias_ms"), r["mathpy_relu_bias_ms"]),
                      ratio(r.get("torch_relu_bias_ms"), r["mathpy_relu_bias_ms"]),
                      f"**{with_tflops(r, 'mathpy_f')}**" if "mathpy_f_ms" in r else "-",
                      ratio(r.get("torch_ms"), r.get("mathpy_f_ms"))])
    return "\n".join([
        table(headers, cells), "",
        "GPU time per call (ms), medians. The plain GEMM columns compare like for like: every result is C-ordered "
        "(row-major), torch's and NumPy's layout and mathpy's default; the F order column is mathpy with "
        "MatmulOptions(result_order=\"F\") (column-major, cuBLASLt's own order). RELU_BIAS is fused in cuBLASLt "
        "for mathpy and nvmath (column-major results: the per-row bias convention), torch runs relu(addmm). "
        + RATIO_NOTE + " Target: >= 0.98 against the faster of torch and nvmath.", "",
        table(["call, 128^3 fp16, async", "us per call"], [[name, f"{us:.1f}"] for name, us in overhead.items()]),
        "", "Host time per asynchronous call (median of 3 rounds of 2000 calls)."])


# --- bench_device.py ----------------------------------------------------------------------------------------------

def device_table(rows):
    """``rows``: (section, problem, mathpy ms, {peer: ms}, ratio, target, note) as bench_device.py collects them;
    ratio = the vendor reference's time / mathpy's."""
    def digits(value):  # four decimals under 0.1 ms, so that the ratio can be recomputed from the table
        return 4 if value == value and value < 0.1 else 3

    cells = [[section, problem, f"**{ms(t, digits(t))}**",
              ", ".join(f"{k} {v:.{digits(v)}f}" for k, v in peers.items()), f"{r:.2f}", target, note]
             for section, problem, t, peers, r, target, note in rows]
    return "\n".join([
        table(["section", "problem", "**mathpy** ms", "peers (ms)", "reference / mathpy", "target", "note"], cells),
        "",
        "The reference is cuFFT for the block FFT, cuFFT with the filter fused as an LTO epilog plus an inverse cuFFT "
        "(through mathpy.fft) for the fused convolution, and the faster cuBLAS call (torch.bmm, cupy.matmul) for the "
        "block GEMM; best of three rounds. " + RATIO_NOTE])


# --- bench_autograd.py --------------------------------------------------------------------------------------------

AUTOGRAD_IMPLS = ("mathpy MLP", "mathpy Linear x2", "torch eager", "torch.compile")


def autograd_tables(rows, linear_rows):
    """``rows``: one dict per MLP size: "tokens", "d", per implementation (AUTOGRAD_IMPLS) "step_ms", "forward_ms",
    "extra_gb", and "hidden_gb" (bytes moved over the hidden activation) for the fused MLP, eager and compile;
    ``linear_rows``: one dict per layer and dtype: "layer", "dtype", "forward_ms", "step_ms", "extra_gb" for "mathpy"
    and "torch"."""
    headers = ["tokens x d", "**mathpy MLP** ms (TFLOP/s)", "mathpy Linear x2 ms", "torch eager ms",
               "torch.compile ms", "eager / mathpy", "compile / mathpy", "Linear x2 / mathpy",
               "forward ms: **mathpy** / eager / compile", "extra GB: mathpy / eager / compile",
               "hidden-activation GB moved: mathpy / eager / compile"]
    cells, missed = [], []
    for r in rows:
        step, forward, gb, hidden = r["step_ms"], r["forward_ms"], r["extra_gb"], r.get("hidden_gb", {})
        mp = step["mathpy MLP"]
        tflops = 48.0 * r["tokens"] * r["d"] ** 2 / mp / 1e9
        names = ("mathpy MLP", "torch eager", "torch.compile")
        cells.append([f"{r['tokens']} x {r['d']}", f"**{mp:.3f} ({tflops:.0f})**", ms(step.get("mathpy Linear x2")),
                      ms(step.get("torch eager")), ms(step.get("torch.compile")), ratio(step.get("torch eager"), mp),
                      ratio(step.get("torch.compile"), mp), ratio(step.get("mathpy Linear x2"), mp),
                      " / ".join([f"**{ms(forward['mathpy MLP'])}**", ms(forward.get("torch eager")),
                                  ms(forward.get("torch.compile"))]),
                      " / ".join(f"{gb[k]:.2f}" if k in gb else "-" for k in names),
                      " / ".join(f"{hidden[k]:.2f}" if k in hidden else "-" for k in names)])
        if not (step.get("torch.compile", 0) >= 1.05 * mp and step.get("torch eager", 0) >= 1.05 * mp):
            missed.append(f"{r['tokens']} x {r['d']}")
    linear_headers = ["layer, dtype", "**mathpy** forward ms", "torch forward ms", "**mathpy** forward+backward ms",
                      "torch forward+backward ms", "forward torch / mathpy", "forward+backward torch / mathpy",
                      "extra GB: mathpy / torch"]
    linear_cells, linear_missed = [], []
    for r in linear_rows:
        f, s, gb = r["forward_ms"], r["step_ms"], r["extra_gb"]
        linear_cells.append([f"{r['layer']}, {r['dtype']}", f"**{ms(f['mathpy'])}**", ms(f.get("torch")),
                             f"**{ms(s['mathpy'])}**", ms(s.get("torch")), ratio(f.get("torch"), f["mathpy"]),
                             ratio(s.get("torch"), s["mathpy"]), f"{gb['mathpy']:.2f} / {gb['torch']:.2f}"])
        if not (f.get("torch", 0) >= f["mathpy"] and s.get("torch", 0) >= s["mathpy"]
                and gb["mathpy"] <= 1.1 * gb["torch"]):
            linear_missed.append(linear_cells[-1][0])
    return "\n".join([
        table(headers, cells), "",
        "bf16 MLP block (d -> 4d -> d, GELU tanh, biases), forward + backward per step (ms), medians; TFLOP/s counts "
        "the six GEMMs (48 tokens d^2); hidden-activation GB: passes over the tokens x 4d tensors counted per kernel "
        "(bench_autograd's docstring). " + RATIO_NOTE + " Target: eager / mathpy and compile / mathpy >= 1.05: "
        + (f"missed at {', '.join(missed)}" if missed else "met at every size") + ".", "",
        table(linear_headers, linear_cells), "",
        "mathpy.torch.Linear (bias and activation in the GEMM's epilog) against torch.nn.Linear plus the same "
        "activation, medians. Target: torch / mathpy >= 1 forward and forward+backward, extra memory at most 1.1x "
        "torch's: " + (f"missed at {'; '.join(linear_missed)}" if linear_missed else "met on every row") + "."])


def autograd_host_table(host, dry=False):
    """``host``: {call: {"grad": us, "no grad": us, "torch": us}} (mathpy with and without grad, torch with)."""
    headers = ["call (small operands that require grad)", "**mathpy** us", "mathpy without grad us", "torch us",
               "torch / mathpy"]
    cells, missed = [], []
    for name, us in host.items():
        cells.append([name, f"**{us['grad']:.2f}**", f"{us['no grad']:.2f}", f"{us['torch']:.2f}",
                      ratio(us["torch"], us["grad"])])
        if us["grad"] > 1.3 * us["torch"]:
            missed.append(name)
    how = ("dry run: mathpy's GPU paths on stub CUDA libraries, thread CPU time, minimum of rounds; torch on CPU "
           "tensors" if dry else "wall time to issue 300 asynchronous calls, median of rounds")
    return "\n".join([table(headers, cells), "",
                      f"Host microseconds per call ({how}). " + RATIO_NOTE + " Target: torch / mathpy >= 0.77 (mathpy "
                      "with grad at most 1.3x torch with grad): "
                      + (f"missed at {'; '.join(missed)}" if missed else "met on every row") + "."])


def fno_table(rows):
    """``rows``: one dict per problem: "grid", "modes", "dtype", "batch", "width", and per layer ("mathpy",
    "neuraloperator", "torch", and mathpy's two last-axis paths "mathpy gemm", "mathpy fft") "step_ms" and
    "extra_gb"."""
    headers = ["grid, modes, dtype", "**mathpy** ms", "neuraloperator ms", "torch ms", "neuraloperator / mathpy",
               "torch / mathpy", "extra GB: mathpy / neuraloperator / torch", "mathpy, last axis by GEMM / FFT ms",
               "CUDA graphs: **mathpy** ms", "CUDA graphs: torch ms", "CUDA graphs: torch / mathpy"]
    cells, missed = [], []
    for r in rows:
        step, gb = r["step_ms"], r["extra_gb"]
        mp = step["mathpy"]
        cells.append([f"{'x'.join(map(str, r['grid']))}, {r['modes']}, {r['dtype']}", f"**{ms(mp)}**",
                      ms(step.get("neuraloperator")), ms(step.get("torch")), ratio(step.get("neuraloperator"), mp),
                      ratio(step.get("torch"), mp),
                      " / ".join(f"{gb[k]:.2f}" if gb.get(k) == gb.get(k) and k in gb else "-"
                                 for k in ("mathpy", "neuraloperator", "torch")),
                      f"{ms(step.get('mathpy gemm'))} / {ms(step.get('mathpy fft'))}",
                      ms(step.get("mathpy graphed")), ms(step.get("torch graphed")),
                      ratio(step.get("torch graphed"), step.get("mathpy graphed"))])
        peers = [v for k, v in step.items() if not k.startswith("mathpy") and not k.endswith("graphed")]
        if peers and min(peers) < 1.5 * mp:
            missed.append(cells[-1][0])
    note = (f"SpectralConv forward + backward per step (ms), batch {rows[0]['batch']}, width {rows[0]['width']}, "
            "medians; CUDA graphs: the same steps captured with torch.cuda.make_graphed_callables. " + RATIO_NOTE
            + " Target: the faster peer / mathpy >= 1.5 (eager): "
            + (f"missed at {'; '.join(missed)}" if missed else "met on every row") + ".")
    return table(headers, cells) + "\n\n" + note


# --- bench_matmul_epilog.py ---------------------------------------------------------------------------------------

def epilog_table(rows):
    """``rows``: dicts with "epilog", "shape", "mathpy_ms", "tflops", "gemm_ms", "torch_ms", "cupy_ms" (or None),
    "stateless_ms" as bench_matmul_epilog.py collects them; the unfused reference is the faster of torch and CuPy."""
    headers = ["epilog", "M x N x K", "**mathpy** ms (TFLOP/s)", "cuBLASLt GEMM alone ms", "GEMM + torch ms",
               "GEMM + CuPy 1-pass ms", "best unfused / mathpy", "GEMM alone / mathpy", "mathpy stateless ms"]
    cells = []
    for r in rows:
        unfused = min(t for t in (r["torch_ms"], r.get("cupy_ms")) if t is not None)
        cells.append([r["epilog"], r["shape"], f"**{ms(r['mathpy_ms'])} ({r['tflops']:.0f})**", ms(r["gemm_ms"]),
                      ms(r["torch_ms"]), ms(r.get("cupy_ms")), ratio(unfused, r["mathpy_ms"]),
                      ratio(r["gemm_ms"], r["mathpy_ms"]), ms(r.get("stateless_ms"))])
    return "\n".join([
        table(headers, cells), "",
        "GPU time per call (ms), medians, bf16, row-major operands; mathpy = Matmul.plan(epilog=f) once, execute() "
        "timed. " + RATIO_NOTE + " Targets: best unfused / mathpy above 1 on every shape; GEMM alone / mathpy >= 0.85 "
        "on 8192^3."])


# --- bench_compat_nvmath.py ---------------------------------------------------------------------------------------

COMPAT = "mathpy.compat.nvmath"
COMPAT_CALLS = ("fft() stateless", "FFT.execute()", "fft(epilog=) stateless", "matmul() stateless",
                "Matmul.execute()")


def compat_tables(fused, overhead):
    """``fused``: (case, callback, {namespace: ms}) with namespaces "mathpy.compat.nvmath" and (when installed)
    "nvmath-python"; ``overhead``: {(library, call): us}, libraries those two, "torch" and "cupy"."""
    nv = any("nvmath-python" in times for _, _, times in fused)
    headers = ["transform", "callback", f"**{COMPAT}** ms"] + (["nvmath-python ms", "nvmath / mathpy"] if nv else [])
    cells = []
    for case, callback, times in fused:
        row = [case, callback, f"**{ms(times[COMPAT])}**"]
        if nv:
            row += [ms(times.get("nvmath-python")), ratio(times.get("nvmath-python"), times[COMPAT])]
        cells.append(row)
    if nv:
        cells.append(["geometric mean", "", "", "",
                      f"{_geomean([t['nvmath-python'] / t[COMPAT] for _, _, t in fused if 'nvmath-python' in t]):.2f}"])
    libraries = [COMPAT] + (["nvmath-python"] if nv else []) + ["torch", "cupy"]
    call_headers = ["host us per async call", f"**{COMPAT}**"] + libraries[1:] + (["nvmath / mathpy"] if nv else [])
    call_rows = []
    for call in COMPAT_CALLS:
        mine = overhead.get((COMPAT, call))
        row = [call, f"**{mine:.1f}**" if mine is not None else "-"]
        row += [f"{overhead[(lib, call)]:.1f}" if (lib, call) in overhead else "-" for lib in libraries[1:]]
        if nv:
            row.append(ratio(overhead.get(("nvmath-python", call)), mine))
        call_rows.append(row)
    return "\n".join([
        table(headers, cells), "",
        "GPU time per transform (ms), medians of interleaved rounds; the same nvmath-python program, callbacks "
        "compiled by each namespace's compile_prolog / compile_epilog. " + RATIO_NOTE, "",
        table(call_headers, call_rows), "",
        "Host time per asynchronous call (2000 calls, one synchronisation; nvmath-python's stateless calls 200, with "
        "an epilog 10). 8 x 1024 complex64 FFT over the last axis, 128^3 float16 matmul."])


# --- bench_check_bounds.py -----------------------------------------------------------------------------------------

def check_bounds_table(rows):
    """``rows``: dicts with "case", "call" ({"unchecked": ms, "checked": ms}), optionally "plain" (cuFFT alone) and
    "kernel" (the same dict for the library call alone). The ratios are checked / unchecked time: the cost of the
    checks (1.00: free)."""
    headers = ["callback or epilog", "plain cuFFT", "kernel unchecked", "kernel checked", "kernel checked / unchecked",
               "per call unchecked", "per call checked", "per call checked / unchecked"]
    cells = []
    for row in rows:
        kernel, call = row.get("kernel") or {}, row["call"]
        cells.append([row["case"], ms(row.get("plain")), ms(kernel.get("unchecked")), ms(kernel.get("checked")),
                      ratio(kernel.get("checked"), kernel.get("unchecked")), ms(call.get("unchecked")),
                      ms(call.get("checked")), ratio(call.get("checked"), call.get("unchecked"))])
    return "\n".join([
        table(headers, cells), "",
        "ms, medians. Kernel: the library's call alone (cuFFT plan; no record read), CUDA events over interleaved "
        "rounds; per call: FFT.execute() / Matmul.execute() and a synchronisation (a checked call synchronises itself "
        "to read its record). Ratios here are checked / unchecked time: the cost of check_bounds (1.00: free)."])


# --- plots -----------------------------------------------------------------------------------------------------------

def grouped_bars(path, labels, series, ylabel, title, log=False):
    """A bar chart, one group per label and one bar per series ({name: values}), saved to ``path`` (matplotlib,
    Agg); a failure is printed, not raised: the table is what matters."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(12, 4.5))
        width = 0.8 / len(series)
        for i, (name, values) in enumerate(series.items()):
            ax.bar([j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))], values, width, label=name)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    except Exception as e:
        print(f"(no plot: {e})")


# --- bench_cpu.py -------------------------------------------------------------------------------------------------

CPU_FFT_PEERS = ("NumPy", "SciPy", "pyFFTW", "mkl_fft")


def cpu_tables(fft_rows, held_out_rows, callback_rows, matmul_rows, epilog_rows):
    """bench_cpu's tables. ``fft_rows`` / ``held_out_rows``: (case, {peer or "mathpy": ms}, mathpy's library);
    ``callback_rows``: (case, {"plain", peer, "mathpy": ms}); ``matmul_rows``: (case, {"NumPy", "mathpy",
    "execute": ms}); ``epilog_rows``: (case, {"NumPy", "product", "mathpy": ms})."""
    fft_headers = (["CPU FFT"] + [f"{p} ms" for p in CPU_FFT_PEERS]
                   + ["**mathpy** ms", "mathpy out= ms", "mathpy fp_reports ms", "mathpy's library", "best / mathpy",
                      "pyFFTW / mathpy out="])

    def fft_cells(rows):
        cells = []
        for case, times, library in rows:
            best = min((times[p] for p in CPU_FFT_PEERS if times.get(p) is not None), default=None)
            cells.append([case] + [ms(times.get(p)) for p in CPU_FFT_PEERS]
                         + [f"**{ms(times['mathpy'])}**", ms(times.get("mathpy out=")),
                            ms(times.get("mathpy fp_reports")), library or "-",
                            ratio(best, times["mathpy"]), ratio(times.get("pyFFTW"), times.get("mathpy out="))])
        return cells

    unfused = CPU_FFT_PEERS[:3]
    callback_headers = (["CPU FFT with an epilog", "plain **mathpy** ms"] + [f"{p} unfused ms" for p in unfused]
                        + ["**mathpy** fused ms", "plain / fused", "best unfused / mathpy"])
    callback_cells = []
    for case, times in callback_rows:
        best = min((times[p] for p in unfused if times.get(p) is not None), default=None)
        callback_cells.append([case, ms(times.get("plain"))] + [ms(times.get(p)) for p in unfused]
                              + [f"**{ms(times['mathpy'])}**", ratio(times.get("plain"), times["mathpy"]),
                                 ratio(best, times["mathpy"])])
    matmul_headers = ["CPU matmul", "NumPy ms", "**mathpy** ms", "Matmul.execute ms", "NumPy / mathpy",
                      "NumPy / Matmul.execute"]
    matmul_cells = [[case, ms(t["NumPy"]), f"**{ms(t['mathpy'])}**", ms(t.get("execute")),
                     ratio(t["NumPy"], t["mathpy"]), ratio(t["NumPy"], t.get("execute"))]
                    for case, t in matmul_rows]
    epilog_headers = ["CPU matmul epilog", "NumPy expression ms", "NumPy product alone ms", "**mathpy** ms",
                      "NumPy / mathpy"]
    epilog_cells = [[case, ms(t["NumPy"]), ms(t.get("product")), f"**{ms(t['mathpy'])}**",
                     ratio(t["NumPy"], t["mathpy"])] for case, t in epilog_rows]
    return "\n".join([
        table(fft_headers, fft_cells(fft_rows)), "",
        table(fft_headers, fft_cells(held_out_rows)), "",
        "Time per call (ms), medians of interleaved rounds, same arrays. pyFFTW: FFTW_MEASURE plans made once, "
        "executed on their own aligned arrays (its fastest use); the others allocate their result; mathpy out=: "
        "mathpy writing into one result array given with out= (like for like with pyFFTW's reuse); mathpy "
        "fp_reports: with ExecutionCPU(fp_reports=True), which adds NumPy's floating-point reports (one more pass "
        "over the result; the default has none). mathpy's "
        "library: the one it measured fastest for the transform. best / mathpy: the fastest peer's time over "
        "mathpy's. " + RATIO_NOTE + " Target: >= 0.91 (mathpy within 1.1x of the best).", "",
        table(callback_headers, callback_cells), "",
        "Unfused: the peer's FFT, then the same elementwise product as a NumPy expression. Targets: plain / fused "
        ">= 0.83 (an epilog costs at most 1.2x the plain FFT) and best unfused / mathpy > 1.", "",
        table(matmul_headers, matmul_cells), "",
        table(epilog_headers, epilog_cells), "",
        "Time per call (ms), medians of interleaved rounds, same arrays. " + RATIO_NOTE + " Targets: NumPy / mathpy "
        ">= 0.5 for 64^3 (overhead at most 2x numpy.matmul's), >= 0.98 for large products, > 1 for epilogs."])
