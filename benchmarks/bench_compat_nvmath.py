"""The reasons to switch, measured through the compatibility namespace: the same nvmath-python program run with
``import nvmath`` and with ``import mathpy.compat.nvmath as nvmath``, side by side in one process.

1. Fused FFT callbacks, GPU ms per transform (CUDA events; the peers interleaved in rounds, medians): no callback,
   prolog ``x * 3``, epilog ``x * 2``, epilog ``x * filter[i]`` on batched 1-D C2C complex64 transforms of 268 MB
   (1024 x 32768, 256 x 131072, 16384 x 2048) and an R2C float32 one. Each namespace compiles the callbacks with its
   own ``compile_prolog`` / ``compile_epilog`` and the program passes them as ``{"ltoir": ..., "data": pointer}``;
   every result is checked against the unfused CuPy computation.
2. Host microseconds per asynchronous call on small problems (8 x 1024 complex64 FFT, 128^3 float16 matmul): the
   stateless ``fft()`` / ``matmul()``, the stateful ``FFT.execute()`` / ``Matmul.execute()``, and ``fft()`` with an
   epilog (nvmath-python plans and links the callback on every call; mathpy's plan cache keeps the plan), with torch
   and CuPy for scale.

Prints both tables as docs/benchmarks.md shows tables (ratios nvmath-python time / mathpy time: above 1 means mathpy is
faster) and saves benchmarks/results/bench_compat_nvmath.png ($OUT/bench_compat_nvmath.png when $OUT is set).

Run on the H200 from the repository root, with the nvmath-python 1.0 wheel carried in .whl/:
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site && python3 benchmarks/bench_compat_nvmath.py
(about 3 minutes; without nvmath-python installed it measures the compatibility namespace alone).
"""

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

sys.path.insert(0, HERE)
import _report  # noqa: E402  (the Markdown tables docs/benchmarks.md shows)
from _timing import gpu_ms_interleaved, host_us  # noqa: E402  (measured as bench_fft measures)
import mathpy  # noqa: E402  (before nvmath: it makes numba-cuda work on NumPy 2.5 before anything compiles)
import mathpy.compat.nvmath as compat  # noqa: E402

try:
    import nvmath
except ImportError:
    nvmath = None

THREE, TWO = np.float32(3), np.float32(2)


# --- the callbacks, as nvmath-python's users write them --------------------------------------------------------------

def prolog_x3(data_in, offset, user_info, unused):
    return data_in[offset] * THREE


def epilog_x2(data_out, offset, value, user_info, unused):
    data_out[offset] = value * TWO


def epilog_filter(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


CALLBACKS = {"plain": None, "prolog x3": ("prolog", prolog_x3), "epilog x2": ("epilog", epilog_x2),
             "epilog *filter[i]": ("epilog", epilog_filter)}
CASES = [("C2C c64", "complex64", 1024, 32768), ("C2C c64", "complex64", 256, 131072),
         ("C2C c64", "complex64", 16384, 2048), ("R2C f32", "float32", 1024, 32768)]


# --- the nvmath-python program, parameterised by the namespace it runs through --------------------------------------

class FusedFFT:
    """``ns.fft.FFT(x, axes=[-1])`` planned with one callback compiled by ``ns.fft.compile_*``."""

    def __init__(self, ns, x, callback, user):
        self.f = ns.fft.FFT(x, axes=[-1])
        kwargs = {}
        if callback is not None:
            kind, fn = callback
            element = self._element(x, kind)
            compile_ = ns.fft.compile_prolog if kind == "prolog" else ns.fft.compile_epilog
            ltoir = compile_(fn, element, "complex64" if user is not None and user.dtype.kind == "c" else "float32")
            kwargs[kind] = {"ltoir": ltoir, "data": 0 if user is None else user.data.ptr}
        self.f.plan(**kwargs)

    @staticmethod
    def _element(x, kind):
        if x.dtype.kind == "c":
            return x.dtype.name
        return x.dtype.name if kind == "prolog" else "complex64"  # R2C: real loads, complex stores

    def execute(self):
        return self.f.execute()

    def free(self):
        self.f.free()


def namespaces():
    found = {"mathpy.compat.nvmath": compat}
    if nvmath is not None:
        found["nvmath-python"] = nvmath
    return found


def reference(x, name, user):
    import cupy as cp
    if name == "prolog x3":
        x = x * THREE
    y = cp.fft.fft(x, axis=-1) if x.dtype.kind == "c" else cp.fft.rfft(x, axis=-1)
    if name == "epilog x2":
        y = y * TWO
    elif name == "epilog *filter[i]":
        y = y * user
    return y


def callback_times():
    import cupy as cp
    rows = []
    for label, dtype, n, batch in CASES:
        rng = np.random.default_rng(0)
        x = cp.asarray(rng.standard_normal((batch, n)).astype(np.float32))
        if dtype == "complex64":
            x = x + 1j * cp.asarray(rng.standard_normal((batch, n)).astype(np.float32))
            x = x.astype(cp.complex64)
        out_n = n if dtype == "complex64" else n // 2 + 1
        user = cp.asarray(rng.standard_normal((batch, out_n)) + 1j * rng.standard_normal((batch, out_n))).astype(
            cp.complex64)
        for name, callback in CALLBACKS.items():
            plans = {ns_name: FusedFFT(ns, x, callback, user if "filter" in name else None)
                     for ns_name, ns in namespaces().items()}
            expected = reference(x, name, user)
            errors = {}
            for ns_name, plan in plans.items():
                got = plan.execute()
                errors[ns_name] = float(cp.max(cp.abs(got - expected)) / cp.max(cp.abs(expected)))
            times = gpu_ms_interleaved({ns_name: plan.execute for ns_name, plan in plans.items()})
            for plan in plans.values():
                plan.free()
            bad = {k: e for k, e in errors.items() if e > 1e-5}
            if bad:
                raise SystemExit(f"{label} {batch}x{n} {name}: results disagree with CuPy: {bad}")
            rows.append((f"{label} {n}x{batch}", name, times, errors))
            print(f"  {label} {n} x {batch} {name}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()),
                  flush=True)
        del x, user
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def overheads():
    import cupy as cp
    import torch
    x = cp.asarray((np.random.default_rng(1).standard_normal((8, 1024)) + 0j).astype(np.complex64))
    a = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    user = cp.ones((8, 1024), cp.complex64)
    rows = {}
    for ns_name, ns in namespaces().items():
        slow = ns is not compat  # nvmath-python plans on every stateless call: fewer repetitions
        f = ns.fft.FFT(x, axes=[-1])
        f.plan()
        rows[(ns_name, "FFT.execute()")] = host_us(f.execute)
        f.free()
        rows[(ns_name, "fft() stateless")] = host_us(lambda: ns.fft.fft(x, axes=[-1]), reps=200 if slow else 2000,
                                                     warmup=10 if slow else 100)
        epilog = {"ltoir": ns.fft.compile_epilog(epilog_filter, "complex64", "complex64"), "data": user.data.ptr}
        rows[(ns_name, "fft(epilog=) stateless")] = host_us(lambda: ns.fft.fft(x, axes=[-1], epilog=epilog),
                                                           reps=10 if slow else 2000, warmup=2 if slow else 100)
        mm = ns.linalg.advanced.Matmul(a, b)
        mm.plan()
        rows[(ns_name, "Matmul.execute()")] = host_us(mm.execute)
        mm.free()
        rows[(ns_name, "matmul() stateless")] = host_us(lambda: ns.linalg.advanced.matmul(a, b),
                                                        reps=200 if slow else 2000, warmup=10 if slow else 100)
    tx = torch.from_dlpack(x)
    rows[("torch", "fft() stateless")] = host_us(lambda: torch.fft.fft(tx))
    rows[("torch", "matmul() stateless")] = host_us(lambda: torch.matmul(a, b))
    rows[("cupy", "fft() stateless")] = host_us(lambda: cp.fft.fft(x))
    return rows


# --- report --------------------------------------------------------------------------------------------------------

def print_tables(fused, overhead, gpu_name):
    print("\n" + _report.environment(gpu_name) + "\n")
    print(_report.compat_tables([(case, name, times) for case, name, times, _ in fused], overhead))


def plot(fused, overhead, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"(no plot: matplotlib unavailable: {e})")
        return
    names = list(namespaces())  # the compatibility namespace first
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 6), gridspec_kw={"width_ratios": [3, 2]})
    positions = np.arange(len(fused))
    width = 0.8 / len(names)
    for k, n in enumerate(names):
        left.bar(positions + k * width, [t[n] for _, _, t, _ in fused], width, label=n)
    left.set_xticks(positions + 0.4 - width / 2, [f"{c}\n{name}" for c, name, _, _ in fused], rotation=90, fontsize=7)
    left.set_ylabel("GPU ms per transform (lower is better)")
    left.set_title("fused FFT callbacks, same program")
    left.legend()
    keys = list(overhead)
    right.barh(range(len(keys)), [overhead[k] for k in keys], color="tab:gray")
    right.set_yticks(range(len(keys)), [f"{p}: {c}" for p, c in keys], fontsize=7)
    right.invert_yaxis()
    right.set_xscale("log")
    right.set_xlabel("host us per call (log, lower is better)")
    right.set_title("per-call overhead, small problems")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


def main():
    start = time.perf_counter()
    try:
        import cupy as cp
    except ImportError as e:
        sys.exit(f"bench_compat_nvmath needs CuPy and a GPU: {e}")
    if not mathpy.cuda_is_available():
        sys.exit("bench_compat_nvmath needs an NVIDIA GPU")
    gpu_name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"GPU: {gpu_name}; mathpy {mathpy.__version__}; "
          f"nvmath-python {nvmath.__version__ if nvmath else 'absent (compat measured alone)'}")
    print("fused callbacks...", flush=True)
    fused = callback_times()
    print("host overhead...", flush=True)
    overhead = overheads()
    print_tables(fused, overhead, gpu_name)
    out = os.environ.get("OUT")
    plot(fused, overhead, os.path.join(out or os.path.join(HERE, "results"), "bench_compat_nvmath.png"))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
