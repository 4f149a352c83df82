"""docs/benchmarks.md shows the tables exactly as the benchmark scripts print them (so a GPU run's output can be pasted
whole), every ratio is peer time / mathpy time, and the page says which numpy ran where."""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("_report", ROOT / "benchmarks" / "_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables(text):
    """Each Markdown table of ``text`` as (header cells, rows of cells)."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            found.append((current[0], [row for row in current[2:]]))
            current = []
    return found


def number(cell):
    match = re.search(r"-?\d+(\.\d+)?", cell.replace("**", ""))
    return float(match.group()) if match else None


def script_headers(report):
    """The header rows the scripts print, every optional peer present."""
    callbacks = report.callbacks_table([{"case": "c", "plain": 1, "C++": 1, "numba": 1, "mathpy": 1, "nvmath": 1,
                                         "cupy": 1}], ["plain", "C++", "numba", "mathpy", "nvmath", "cupy"])
    fft = report.fft_tables([("1-D c64", (2, 4), {"mathpy": 1, "torch": 1, "cupy": 1, "nvmath": 1}, {"torch": 0})],
                            {"cupy.fft.fft": 1.0})
    row = {"shape": "1x1x1", "dtype": "float16", "mathpy_ms": 1, "mathpy_tflops": 1, "mathpy_relu_bias_ms": 1}
    matmul = report.matmul_tables([row], {"torch.matmul": 1.0})
    epilog = report.epilog_table([{"epilog": "e", "shape": "1x1x1", "mathpy_ms": 1, "tflops": 1, "gemm_ms": 1,
                                   "torch_ms": 1, "cupy_ms": 1, "stateless_ms": 1}])
    sweep = _script("_epilog_sweep").sweep_table([{"index": 0, "batch": 1, "m": 1, "n": 1, "k": 1, "dtype": "float16",
                                                   "epilog": "e", "route": "library", "unfused_ms": 1.0,
                                                   "mathpy_ms": 1.0, "planned_ms": 1.0, "speedup": 1.0,
                                                   "speedup_planned": 1.0, "error": 0.0, "correct": True}])
    compile_times = _script("bench_epilog_compile").table([("fused", "cold", dict.fromkeys(
        ("first", "skeleton", "epilog", "link", "second", "plan", "import"), 1.0))])
    device = report.device_table([("FFT c64", "n=64", 1.0, {"cuFFT (cupy)": 1.0}, 1.0, ">= 0.80", "")])
    autograd = report.autograd_tables(
        [{"tokens": 1, "d": 1, "step_ms": {"mathpy MLP": 1}, "forward_ms": {"mathpy MLP": 1}, "extra_gb": {}}],
        [{"layer": "l", "dtype": "d", "forward_ms": {"mathpy": 1, "torch": 1}, "step_ms": {"mathpy": 1, "torch": 1},
          "extra_gb": {"mathpy": 1, "torch": 1}}]) + "\n\n" + report.autograd_host_table(
        {"call": {"grad": 1.0, "no grad": 1.0, "torch": 1.0}})
    fno = report.fno_table([{"grid": [2, 2], "modes": 1, "dtype": "float32", "batch": 1, "width": 1,
                             "step_ms": {"mathpy": 1.0}, "extra_gb": {}}])
    compat = report.compat_tables([("t", "c", {"mathpy.compat.nvmath": 1.0, "nvmath-python": 1.0})], {})
    fft_row = ("c", dict.fromkeys(("NumPy", "SciPy", "pyFFTW", "mkl_fft", "mathpy"), 1.0), "fftw")
    cpu = report.cpu_tables([fft_row], [fft_row], [("c", dict.fromkeys(("plain", "NumPy", "SciPy", "pyFFTW", "mathpy"),
                                                                       1.0))],
                            [("c", {"NumPy": 1.0, "mathpy": 1.0, "execute": 1.0})],
                            [("c", {"NumPy": 1.0, "product": 1.0, "mathpy": 1.0})])
    check_bounds = report.check_bounds_table([{"case": "c", "plain": 1, "kernel": {"unchecked": 1, "checked": 1},
                                               "call": {"unchecked": 1, "checked": 1}}])
    return [tuple(header) for text in (callbacks, fft, matmul, epilog, sweep, compile_times, device,
                                       difference_imaging_tables(), sfft_tables(), autograd, fno, compat, check_bounds,
                                       cpu, cpu)  # the CPU section: two runs (16 cores, 2 cores)
            for header, _ in tables(text)]


def _script(name):
    """A benchmark module loaded without running it (its tables' code)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sfft_tables():
    """bench_sfft's table for a run with every implementation."""
    bench = _script("bench_sfft")
    entry = {"device": "GPU", "ms_per_pair": 1.0, "solution_error": 0.0, "difference_error": 0.0}
    return bench.tables({"config": {"n": 64, **bench.ROMAN}, "reference": "sfft-cupy-gss", "environment": "",
                         "implementations": {name: entry for name in bench.RUNS}})


def difference_imaging_tables():
    """bench_difference_imaging's tables for a run with every implementation and all its measurements."""
    spec = importlib.util.spec_from_file_location("bench_difference_imaging",
                                                  ROOT / "benchmarks" / "bench_difference_imaging.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    stages = dict.fromkeys(bench.STAGES, 1.0)
    entry = {"device": "GPU", "ms_per_pair": 1.0, "recovered": 1, "injected": 1, "spurious": 0,
             "relative_error": 0.0, "within_tolerance": True, "stages_ms": stages, "host_stages_ms": stages}
    results = {"config": {"n": 64, "stamps": 1, "stamp": 32}, "environment": {},
               "floors": dict.fromkeys(bench.STAGES, (1, 2)),
               "implementations": {"numpy": dict(entry, device="CPU"), "cupy": entry, "mathpy": entry,
                                   "mathpy-lu": entry}}
    return bench.tables(results)


def test_page_tables_are_the_scripts_tables(report):
    page = [tuple(header) for header, _ in tables(PAGE.read_text())]
    assert page == script_headers(report)


def half_unit(cell):
    """Half a unit of the last digit a cell shows: how far the time it shows may be from the one measured."""
    match = re.search(r"-?\d+(\.(\d+))?", cell.replace("**", ""))
    return 0.5 * 10.0 ** -len(match.group(2) or "")


def _check(rows, pairs, where):
    """Each ratio is the peer's time over mathpy's, to the ratio's own rounding (0.005) plus what rounding the two
    times to the digits shown can change (the scripts divide the measured times)."""
    checked = 0
    for row in rows:
        for ratio_index, peer_index, mathpy_index in pairs:
            r, peer, mathpy = (number(row[i]) for i in (ratio_index, peer_index, mathpy_index))
            if None in (r, peer, mathpy) or row[0] == "geometric mean":
                continue
            shown = peer / mathpy
            slack = shown * (half_unit(row[peer_index]) / peer + half_unit(row[mathpy_index]) / mathpy)
            assert abs(r - shown) <= 0.006 + slack, f"{where} row {row[0]}: ratio {r} is not {peer} / {mathpy}"
            checked += 1
    return checked


def test_every_ratio_is_peer_time_over_mathpy_time():
    found = tables(PAGE.read_text())
    checked = 0
    for header, rows in found:
        if header[0] == "case":  # callbacks
            mathpy = header.index("**mathpy**")
            names = {"CuPy": "unfused CuPy"}
            pairs = [(i, header.index(names.get(h[:-len(" / mathpy")], h[:-len(" / mathpy")])), mathpy)
                     for i, h in enumerate(header) if h.endswith(" / mathpy")]
        elif header[0].startswith("problem"):  # bench_fft
            mathpy = header.index("**mathpy** ms")
            names = {"CuPy": "CuPy ms", "torch": "torch ms", "nvmath": "nvmath ms"}
            pairs = [(i, header.index(names[h.split(" /")[0]]), mathpy) for i, h in enumerate(header)
                     if h.endswith(" / mathpy")]
        elif header[0] == "M x N x K":  # bench_matmul: plain GEMM, then RELU_BIAS
            plain, fused = header.index("**mathpy** ms (TFLOP/s)"), header.index("RELU_BIAS: **mathpy** ms")
            f_order = header.index("**mathpy** F order ms (TFLOP/s)")
            pairs = [(5, 3, plain), (6, 4, plain), (10, 8, fused), (11, 9, fused), (13, 3, f_order)]
            assert [header[i] for i in (5, 6, 10, 11, 13)] == ["torch / mathpy", "nvmath / mathpy", "nvmath / mathpy",
                                                                "torch / mathpy", "torch / mathpy F order"]
        elif header[0] == "epilog":  # bench_matmul_epilog: the unfused reference is the faster of torch and CuPy
            for row in rows:
                mathpy = number(row[2])
                assert abs(number(row[6]) - min(number(row[4]), number(row[5])) / mathpy) <= 0.011, row
                assert abs(number(row[7]) - number(row[3]) / mathpy) <= 0.011, row
                checked += 2
            continue
        elif header[0] == "stage" and header[-1] == "CuPy / mathpy":  # bench_difference_imaging's stages
            pairs = [(len(header) - 1, header.index("cupy"), header.index("mathpy"))]
        elif header[0] == "implementation" and "vs CuPy" in header:  # bench_difference_imaging, end to end
            ms, vs = header.index("ms per pair"), header.index("vs CuPy")
            cupy = next(number(row[ms]) for row in rows if row[0] == "cupy")
            for row in rows:
                assert abs(number(row[vs]) - cupy / number(row[ms])) <= 0.011, row
                checked += 1
            continue
        elif header[0] == "run" and "time / mathpy" in header:  # bench_sfft: mathpy is a row
            ms, vs = header.index("ms per pair"), header.index("time / mathpy")
            mathpy = next((number(row[ms]) for row in rows if row[0] == "mathpy"), None)
            for row in rows:
                if mathpy is not None and number(row[vs]) is not None:
                    assert abs(number(row[vs]) - number(row[ms]) / mathpy) <= 0.011, row
                    checked += 1
            continue
        elif header[0] == "tokens x d":  # bench_autograd: eager, compile and two Linears against the fused MLP
            pairs = [(5, 3, 1), (6, 4, 1), (7, 2, 1)]
        elif header[0] == "layer, dtype":  # bench_autograd: torch.nn.Linear + activation against mathpy's Linear
            pairs = [(5, 2, 1), (6, 4, 3)]
        elif header[0].startswith("call (small operands"):  # bench_autograd: host us per call
            pairs = [(4, 3, 1)]
        elif header[0] == "grid, modes, dtype":  # bench_fno: neuraloperator and plain torch against mathpy
            pairs = [(4, 2, 1), (5, 3, 1), (10, 9, 8)]
        elif header[0] == "transform":  # bench_compat_nvmath: nvmath-python against the compat namespace
            pairs = [(4, 3, 2)]
        elif header[0] in ("CPU FFT", "CPU FFT with an epilog"):  # bench_cpu: the reference is the fastest peer
            mathpy = header.index("**mathpy** ms" if header[0] == "CPU FFT" else "**mathpy** fused ms")
            peers = [i for i, h in enumerate(header) if h.endswith(" ms") and i not in (0, mathpy) and
                     not h.startswith(("plain", "mathpy"))]
            best = header.index("best / mathpy") if header[0] == "CPU FFT" else len(header) - 1
            for row in rows:
                times = [(number(row[i]), i) for i in peers if number(row[i]) is not None]
                if not times:  # a placeholder row
                    continue
                fastest = min(times)[1]
                checked += _check([row], [(best, fastest, mathpy)], header[0])
                if header[0] == "CPU FFT":  # pyFFTW / mathpy writing into out=
                    checked += _check([row], [(len(header) - 1, header.index("pyFFTW ms"),
                                               header.index("mathpy out= ms"))], header[0])
            continue
        elif header[0] in ("CPU matmul", "CPU matmul epilog"):  # bench_cpu: NumPy against mathpy
            pairs = [(4, 1, 2), (5, 1, 3)] if header[0] == "CPU matmul" else [(4, 1, 3)]
        elif header[0] == "section":  # bench_device: the reference is the fastest peer
            for row in rows:
                peers = [float(v) for v in re.findall(r"\d+\.\d+", row[3])]
                r = number(row[4])
                assert abs(r - min(peers) / number(row[2])) <= 0.011, row
                checked += 1
            continue
        else:
            continue
        checked += _check(rows, pairs, header[0])
    assert checked > 50


def test_ratio_direction_of_the_scripts(report):
    """mathpy twice as fast gives 2.00 in every script's table."""
    text = report.callbacks_table([{"case": "c", "C++": 2.0, "mathpy": 1.0}], ["C++", "mathpy"])
    assert tables(text)[0][1][0][-1] == "2.00"
    assert report.ratio(2.0, 1.0) == "2.00" and report.ratio(None, 1.0) == "-"
    assert "above 1 means mathpy is faster" in text


def test_page_says_which_numpy_ran_where():
    text = PAGE.read_text()
    assert "numpy 2.5.2" in text and "numpy<2.5" in text and "numpy 2.4" in text
    pin = re.search(r'"numpy[^"]*"', (ROOT / "pyproject.toml").read_text()).group()
    assert "<2.5" in pin, "the page explains a pin of numpy<2.5; update it with the pin"
