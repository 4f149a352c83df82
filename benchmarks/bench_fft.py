"""mathpy FFTs on cuFFT side by side with torch.fft, cupy.fft (and nvmath-python when installed), in one process.

1. Transform time (GPU time from CUDA events, median of several runs after warm-up) on batched 1-D, 2-D and 3-D
   problems of 256 MB input: c64, c128 and r2c (float32 in); results are checked to agree.
2. Host overhead per call on 8 x 1024 complex64, asynchronous: 2000 calls timed with perf_counter, then one sync.

Prints two Markdown tables as docs/benchmarks.md shows them (ratios: peer time / mathpy time) and saves
benchmarks/results/bench_fft.png.
Run on a GPU machine:  python benchmarks/bench_fft.py     (needs cupy; torch and nvmath-python are optional)
Uses the public mathpy.fft API; when it cannot be imported it falls back to the cuFFT engine directly and says so.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _report  # noqa: E402  (the Markdown tables docs/benchmarks.md shows)
import _timing  # noqa: E402  (measured as bench_compat_nvmath measures)
from _timing import gpu_ms_interleaved  # noqa: E402
from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda  # noqa: E402

patch_numpy_for_numba_cuda()  # numba-cuda 0.30 with NumPy 2.5 (only matters if something imports numba-cuda)

try:
    import cupy as cp
    cp.cuda.runtime.getDeviceCount()
except Exception as e:  # fail loudly: this script is meaningless without a GPU
    sys.exit(f"bench_fft.py needs CuPy and an NVIDIA GPU: {type(e).__name__}: {e}")

try:
    import torch
    if not torch.cuda.is_available():
        torch = None
except Exception:
    torch = None
try:
    import nvmath
    import nvmath.fft  # noqa: F401
except Exception:
    nvmath = None

API_ERROR = None
try:
    import mathpy.fft as mfft
    assert callable(mfft.fft) and callable(mfft.FFT)
except Exception as e:  # noqa: BLE001 - report and fall back to the engine
    mfft, API_ERROR = None, f"{type(e).__name__}: {e}"
from mathpy.host.fft._layout import Transform, c_strides  # noqa: E402

MB = 1 << 20
REPS = 2000


# --- timing helpers ------------------------------------------------------------------------------------------------

def host_us(fn, reps=REPS):
    """Host time per call over ``reps`` asynchronous calls, with one sync at the end (as the overhead anchors)."""
    return _timing.host_us(fn, reps, warmup=200)


def relative_error(a, b):
    a, b = cp.asarray(a), cp.asarray(b)
    return float(cp.max(cp.abs(a - b)) / cp.max(cp.abs(b)))


# --- mathpy, through the public API or (fallback) the engine --------------------------------------------------------

class EnginePlan:
    """The cuFFT engine on a C-contiguous CuPy array: the overhead table's floor row (one cufftXtExec), and the
    stand-in for the API when mathpy.fft cannot be imported."""

    def __init__(self, x, axes, fft_type):
        from mathpy import _packages
        from mathpy._execution import ExecutionCUDA
        from mathpy.host.fft._cufft import CUFFTEngine
        precision = np.float32 if x.dtype in (np.complex64, np.float32) else np.float64
        out_shape = list(x.shape)
        if fft_type == "R2C":
            out_shape[axes[-1]] = x.shape[axes[-1]] // 2 + 1
        self.x = x
        self.out = cp.empty(out_shape, np.complex64 if precision == np.float32 else np.complex128)
        t = Transform(fft_type, precision, x.shape, c_strides(x.shape), out_shape, c_strides(out_shape), axes)
        self.engine = CUFFTEngine(t, execution=ExecutionCUDA(0), allocator=_packages.get("cupy").on(0))

    def execute(self):
        self.engine.execute(self.x.data.ptr, self.out.data.ptr, -1, cp.cuda.get_current_stream().ptr)
        return self.out

    def free(self):
        self.engine.free()


def mathpy_stateful(x, axes, fft_type):
    if mfft is None:
        return EnginePlan(x, axes, fft_type)
    plan = mfft.FFT(x, axes=axes)
    plan.plan()
    return plan


# --- 1. transform time ------------------------------------------------------------------------------------------

def problems():
    """(label, shape, dtype, axes, fft_type): 256 MB inputs."""
    rows = []
    for dtype, label, fft_type in ((np.complex64, "c64", "C2C"), (np.complex128, "c128", "C2C"),
                                   (np.float32, "r2c", "R2C")):
        count = 256 * MB // np.dtype(dtype).itemsize
        rows.append((f"1-D {label}", (count // 1024, 1024), dtype, (1,), fft_type))
        rows.append((f"2-D {label}", (count // 512 ** 2, 512, 512), dtype, (1, 2), fft_type))
        rows.append((f"3-D {label}", (count // 128 ** 3, 128, 128, 128), dtype, (1, 2, 3), fft_type))
    return rows


def random_array(shape, dtype):
    rng = cp.random.default_rng(0)
    real = np.dtype(dtype).kind == "f"
    precision = np.float32 if np.dtype(dtype) in (np.dtype(np.complex64), np.dtype(np.float32)) else np.float64
    x = rng.standard_normal(shape, dtype=precision)
    if not real:
        x = x + 1j * rng.standard_normal(shape, dtype=precision)
    return x.astype(dtype)


def transform_times():
    results = []
    for label, shape, dtype, axes, fft_type in problems():
        x = random_array(shape, dtype)
        outputs = {}
        plan = mathpy_stateful(x, axes, fft_type)
        functions = {"mathpy": plan.execute}
        cupy_fn = (lambda: cp.fft.rfftn(x, axes=axes)) if fft_type == "R2C" else (lambda: cp.fft.fftn(x, axes=axes))
        functions["cupy"] = cupy_fn
        if torch is not None:
            tx = torch.from_dlpack(x)
            torch_fn = (lambda: torch.fft.rfftn(tx, dim=axes)) if fft_type == "R2C" else \
                (lambda: torch.fft.fftn(tx, dim=axes))
            functions["torch"] = torch_fn
        nv = None
        if nvmath is not None:
            nv = nvmath.fft.FFT(x, axes=list(axes))
            nv.plan()
            functions["nvmath"] = nv.execute
        try:
            times = gpu_ms_interleaved(functions)
            outputs["mathpy"] = plan.execute()
            outputs["cupy"] = cupy_fn()
            if torch is not None:
                outputs["torch"] = cp.from_dlpack(torch_fn())
            if nv is not None:
                outputs["nvmath"] = nv.execute()
        finally:
            plan.free()
            if nv is not None:
                nv.free()
        tolerance = 1e-4 if np.dtype(dtype) in (np.dtype(np.complex64), np.dtype(np.float32)) else 1e-10
        errors = {name: relative_error(out, outputs["cupy"]) for name, out in outputs.items() if name != "cupy"}
        bad = {k: v for k, v in errors.items() if not v < tolerance}
        if bad:
            raise SystemExit(f"results disagree on {label} {shape}: relative errors vs cupy {bad}")
        results.append((label, shape, times, errors))
        print(f"  {label:9s} {str(shape):24s} " + "  ".join(f"{k} {v:.3f} ms" for k, v in times.items()), flush=True)
        del x, outputs
        cp.get_default_memory_pool().free_all_blocks()
        if torch is not None:
            torch.cuda.empty_cache()
    return results


# --- 2. host overhead ----------------------------------------------------------------------------------------------

def overheads():
    shape = (8, 1024)
    x = random_array(shape, np.complex64)
    rows = {}
    plan = mathpy_stateful(x, (1,), "C2C")
    rows["mathpy FFT.execute (cupy)" if mfft else "mathpy engine execute (API unavailable)"] = host_us(plan.execute)
    plan.free()
    if mfft is not None:
        rows["mathpy fft() stateless, cached (cupy)"] = host_us(lambda: mfft.fft(x, axis=-1))
        if torch is not None:
            tx = torch.from_dlpack(x)
            tplan = mfft.FFT(tx, axes=(1,))
            tplan.plan()
            rows["mathpy FFT.execute (torch)"] = host_us(tplan.execute)
            tplan.free()
            rows["mathpy fft() stateless, cached (torch)"] = host_us(lambda: mfft.fft(tx, axis=-1))
    engine = EnginePlan(x, (1,), "C2C")
    rows["mathpy engine execute (floor: one cufftXtExec)"] = host_us(engine.execute)
    engine.free()
    if torch is not None:
        tx = torch.from_dlpack(x)
        rows["torch.fft.fft"] = host_us(lambda: torch.fft.fft(tx))
    rows["cupy.fft.fft"] = host_us(lambda: cp.fft.fft(x))
    if nvmath is not None:
        nv = nvmath.fft.FFT(x, axes=[-1])
        nv.plan()
        rows["nvmath FFT.execute"] = host_us(nv.execute)
        nv.free()
        rows["nvmath fft() stateless"] = host_us(lambda: nvmath.fft.fft(x, axes=[-1]), reps=200)
    return rows


# --- report ----------------------------------------------------------------------------------------------------------

def print_tables(transforms, overhead, gpu_name, cufft_version):
    print("\n" + _report.environment(gpu_name, (f"cuFFT {cufft_version}",)) + "\n")
    print(_report.fft_tables(transforms, overhead))


def plot(transforms, overhead, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"(no plot: matplotlib unavailable: {e})")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    libraries = [p for p in ("mathpy", "torch", "cupy", "nvmath") if any(p in t for _, _, t, _ in transforms)]
    width = 0.8 / len(libraries)
    positions = np.arange(len(transforms))
    for k, library in enumerate(libraries):
        left.bar(positions + k * width, [t.get(library, 0) for _, _, t, _ in transforms], width, label=library)
    left.set_xticks(positions + 0.4 - width / 2, [label for label, *_ in transforms], rotation=30)
    left.set_ylabel("GPU time per transform (ms, lower is better)")
    left.set_title("256 MB batched transforms")
    left.legend()
    names = list(overhead)
    right.barh(range(len(names)), [overhead[n] for n in names], color="tab:gray")
    right.set_yticks(range(len(names)), names, fontsize=8)
    right.invert_yaxis()
    right.set_xscale("log")
    right.set_xlabel("host us per call, 8 x 1024 c64 (log, lower is better)")
    right.set_title("per-call overhead")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


def main():
    start = time.perf_counter()
    gpu_name = cp.cuda.runtime.getDeviceProperties(0)['name'].decode()
    print(f"GPU: {gpu_name}; cupy {cp.__version__}; "
          f"torch {torch.__version__ if torch else 'absent'}; nvmath {nvmath.__version__ if nvmath else 'absent'}")
    from mathpy.bindings import cufft
    print(f"cuFFT version {cufft.version()}")
    if API_ERROR:
        print(f"NOTE: mathpy.fft could not be imported ({API_ERROR}); timing the cuFFT engine directly")
    print("transform time (median of %d runs after %d warm-up):" % (_timing.RUNS, _timing.WARMUP))
    transforms = transform_times()
    print("host overhead...", flush=True)
    overhead = overheads()
    print_tables(transforms, overhead, gpu_name, cufft.version())
    plot(transforms, overhead, os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_fft.png"))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
