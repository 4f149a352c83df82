"""``python -m mathpy``: report what this machine offers, then run an FFT with a Python epilog and a matmul with a
fused epilog on the best execution space available (the GPU when there is one, else the CPU), checked against NumPy."""

import importlib
import importlib.metadata
import platform
import sys
import time

import numpy as np

import mathpy
from mathpy import _cuda
from mathpy.bindings import compiled_entries_enabled


def _version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _library_version(name):
    """(version string, path) of a CUDA library as cuda-pathfinder finds it, or (None, reason)."""
    import ctypes
    try:
        import cuda.pathfinder as pathfinder
        path = pathfinder.load_nvidia_dynamic_lib(name).abs_path
    except Exception as e:  # noqa: BLE001 - any failure to find it is what the report says
        return None, type(e).__name__
    lib = ctypes.CDLL(path)
    try:
        if name == "cufft":
            v = ctypes.c_int()
            lib.cufftGetVersion(ctypes.byref(v))
            return f"{v.value // 1000}.{v.value % 1000 // 100}.{v.value % 100}", path
        if name == "cublasLt":
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            v = lib.cublasLtGetVersion()
            return f"{v // 10000}.{v % 10000 // 100}.{v % 100}", path
        if name == "nvJitLink":
            major, minor = ctypes.c_uint(), ctypes.c_uint()
            lib.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor))
            return f"{major.value}.{minor.value}", path
        if name == "nvvm":
            major, minor = ctypes.c_int(), ctypes.c_int()
            lib.nvvmVersion(ctypes.byref(major), ctypes.byref(minor))
            return f"{major.value}.{minor.value}", path
    except Exception as e:  # noqa: BLE001
        return f"found ({type(e).__name__} reading its version)", path
    return "found", path


def report():
    """The facts about this machine that decide what mathpy can do, as (section, [(name, value)]) pairs."""
    gpu = []
    if _cuda.is_available():
        for device in range(_cuda.device_count()):
            major, minor = _cuda.compute_capability(device)
            gpu.append((f"cuda:{device}", f"{_cuda.device_name(device)}, compute capability {major}.{minor}"))
        gpu.append(("driver CUDA version", "%d.%d" % _cuda.driver_version()))
    else:
        gpu.append(("GPU", "none found: everything runs on the CPU (NumPy/SciPy, numba)"))
    libraries = []
    for name, label in (("cufft", "cuFFT"), ("cublasLt", "cuBLASLt"), ("nvJitLink", "nvJitLink"), ("nvvm", "NVVM")):
        version, where = _library_version(name)
        libraries.append((label, f"{version}  ({where})" if version else f"not found ({where}); "
                                                                         "pip install -e '.[cu13]' (or cu12)"))
    packages = []
    for module, distribution in (("numpy", "numpy"), ("scipy", "scipy"), ("numba", "numba"),
                                 ("numba_cuda", "numba-cuda"), ("cuda.bindings", "cuda-bindings"),
                                 ("cupy", None), ("torch", "torch")):
        names = [distribution] if distribution else ["cupy-cuda13x", "cupy-cuda12x", "cupy"]
        version = next((v for v in map(_version, names) if v), None)
        packages.append((module, version or "not installed"))
    nvmath = _version("nvmath-python")
    packages.append(("nvmath-python", f"{nvmath}: its compiled bindings run the hot cuBLASLt/cuFFT calls"
                     + ("" if compiled_entries_enabled() else " (off: MATHPY_COMPILED_BINDINGS=0)") if nvmath else
                     "not installed (pip install -e '.[fast]': compiled bindings for the hot library calls)"))
    return [("mathpy", [("version", mathpy.__version__), ("python", platform.python_version())]),
            ("GPU", gpu), ("CUDA libraries", libraries), ("packages", packages)]


def _best_space():
    """(execution name, package name, to_space, to_numpy, synchronize) for the demo: device arrays of CuPy or torch on
    a GPU (NumPy arrays moved by mathpy when neither is installed), else NumPy on the CPU."""
    if _cuda.is_available():
        for package in ("cupy", "torch"):
            try:
                module = importlib.import_module(package)
            except ImportError:
                continue
            if package == "cupy":
                return "cuda", package, module.asarray, module.asnumpy, module.cuda.Device().synchronize
            return "cuda", package, lambda a: module.from_numpy(a).cuda(), lambda t: t.cpu().numpy(), \
                module.cuda.synchronize
        return "cuda", "numpy", lambda a: a, lambda a: a, lambda: None
    return "cpu", "numpy", lambda a: a, lambda a: a, lambda: None


def _timed(fn, sync, repeats=20):
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def demo():
    import mathpy.fft
    space, package, to_space, to_numpy, sync = _best_space()
    print(f"\n== Demonstration on {space.upper()} with {package} arrays")
    rng = np.random.default_rng(0)

    batch, n = (256, 4096) if space == "cuda" else (64, 1024)
    x = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(np.complex64)
    filt = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)

    def apply_filter(data_out, offset, value, user_info, unused):
        data_out[offset] = value * user_info[offset % user_info_size]

    user_info_size = n  # read by the callback as a compile-time constant
    epilog = mathpy.fft.Callback(apply_filter, data=to_space(filt))
    xs = to_space(x)
    start = time.perf_counter()
    y = mathpy.fft.fft(xs, epilog=epilog, execution=space)
    sync()
    first = time.perf_counter() - start
    expected = np.fft.fft(x) * filt
    error = np.abs(to_numpy(y) - expected).max() / np.abs(expected).max()
    steady = _timed(lambda: mathpy.fft.fft(xs, epilog=epilog, execution=space), sync)
    print(f"FFT {batch} x {n} complex64 with a Python epilog (x * filter), fused: "
          f"first call {first * 1e3:.1f} ms (compile + plan), then {steady * 1e3:.3f} ms; "
          f"max rel. error vs NumPy {error:.1e}")

    m, k, nn = (2048, 2048, 2048) if space == "cuda" else (256, 256, 256)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, nn)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    args = to_space(a), to_space(b)
    inputs = {"bias": to_space(bias)}
    run = lambda: mathpy.matmul(*args, epilog=mathpy.MatmulEpilog.RELU_BIAS, epilog_inputs=inputs,  # noqa: E731
                                execution=space)
    d = run()
    expected = np.maximum(a.astype(np.float64) @ b + bias[:, None], 0)
    error = np.abs(to_numpy(d) - expected).max() / np.abs(expected).max()
    seconds = _timed(run, sync)
    rate = 2 * m * nn * k / seconds  # the CPU's rate would read "0.00 TFLOP/s"
    rate = f"{rate / 1e12:.2f} TFLOP/s" if rate >= 1e12 else f"{rate / 1e9:.2f} GFLOP/s"
    print(f"matmul {m} x {nn} x {k} float32 with the RELU_BIAS epilog: {seconds * 1e3:.3f} ms ({rate}); "
          f"max rel. error vs NumPy {error:.1e}")


def main():
    for section, rows in report():
        print(f"== {section}")
        for name, value in rows:
            print(f"  {name:22s} {value}")
    demo()


if __name__ == "__main__":
    sys.exit(main())
