"""Fused cuFFT callbacks: mathpy.jit against hand-written CUDA C++, numba's plain C-ABI compile, nvmath-python and
an unfused CuPy pipeline, in the same cuFFT plans on the same data.

For each transform and callback this times (ms per transform, CUDA events, median of a few repetitions):
  plain      cuFFT without a callback (the floor)
  C++        the callback in CUDA C++ (float2 access, user data through __ldg), NVRTC -> LTO-IR (cuda.core Program)
  numba      the same Python function through numba-cuda's abi="c" LTO-IR, the way nvmath-python compiles it
  mathpy     mathpy.jit.compile_callback (cuFFT-typed wrapper, vector loads/stores, ld.global.nc user data)
  nvmath     nvmath.fft.compile_prolog / compile_epilog, when nvmath-python is installed
  cupy       the unfused equivalent (cupy.fft + elementwise)
Every fused result is checked against CuPy. Targets: mathpy <= 1.10x C++, numba >= 1.5x mathpy (the latter is
where numba's call overhead shows; an epilog that only scales is bandwidth-bound either way).
Also reports mathpy's cold compile time and its warm (disk cache, new process) compile time.

Run on a GPU machine:  python benchmarks/bench_fft_callbacks.py   (needs cupy, numba-cuda, cuda-core,
cuda-pathfinder, matplotlib for the plot). Writes benchmarks/results/bench_fft_callbacks.png.
"""

import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import _report  # noqa: E402

# --- the callbacks (module level: the warm-compile measurement imports them in a new process) ----------------------
THREE, TWO = np.float32(3), np.float32(2)


def prolog_x3(data_in, offset, user_info, unused):
    return data_in[offset] * THREE


def prolog_filter(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset]


def epilog_x2(data_out, offset, value, user_info, unused):
    data_out[offset] = value * TWO


def epilog_filter(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


CALLBACKS = {"prolog x3": ("prolog", prolog_x3, False), "prolog *filter[i]": ("prolog", prolog_filter, True),
             "epilog x2": ("epilog", epilog_x2, False), "epilog *filter[i]": ("epilog", epilog_filter, True)}

# --- CUDA C++ versions ----------------------------------------------------------------------------------------------
CPP_PREAMBLE = """
__device__ __forceinline__ float2 scale(float2 v, float s) { return make_float2(s * v.x, s * v.y); }
__device__ __forceinline__ double2 scale(double2 v, double s) { return make_double2(s * v.x, s * v.y); }
__device__ __forceinline__ float scale(float v, float s) { return s * v; }
__device__ __forceinline__ double scale(double v, double s) { return s * v; }
__device__ __forceinline__ float2 mul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
__device__ __forceinline__ double2 mul(double2 a, double2 b) {
  return make_double2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ double mul(double a, double b) { return a * b; }
"""
CTYPE = {"complex64": "float2", "complex128": "double2", "float32": "float", "float64": "double"}
STEM = {"complex64": "Complex", "complex128": "DoubleComplex", "float32": "Real", "float64": "DoubleReal"}


def cpp_source(name, element):
    t, stem = CTYPE[element], STEM[element]
    if name == "prolog x3":
        body = f"return scale(reinterpret_cast<const {t}*>(in)[i], 3);"
    elif name == "prolog *filter[i]":
        body = f"return mul(reinterpret_cast<const {t}*>(in)[i], __ldg(reinterpret_cast<const {t}*>(info) + i));"
    elif name == "epilog x2":
        body = f"reinterpret_cast<{t}*>(out)[i] = scale(e, 2);"
    else:
        body = f"reinterpret_cast<{t}*>(out)[i] = mul(e, __ldg(reinterpret_cast<const {t}*>(info) + i));"
    if name.startswith("prolog"):
        signature = f"{t} cufftJITCallbackLoad{stem}(void* in, unsigned long long i, void* info, void* smem)"
    else:
        signature = (f"void cufftJITCallbackStore{stem}(void* out, unsigned long long i, {t} e, void* info, "
                     f"void* smem)")
    return f"{CPP_PREAMBLE}\n__device__ {signature} {{ {body} }}\n"


# --- transforms -----------------------------------------------------------------------------------------------------
# (label, fft type, dtype, n, batch, callbacks); element types follow from the fft type, dtype and callback kind.
CASES = [
    ("C2C c64", "C2C", "complex64", 1024, 32768, ["prolog x3", "epilog x2", "epilog *filter[i]"]),
    ("C2C c64", "C2C", "complex64", 256, 131072, ["prolog x3", "epilog x2", "epilog *filter[i]"]),
    ("C2C c64", "C2C", "complex64", 16384, 2048, ["prolog x3", "epilog x2", "epilog *filter[i]"]),
    ("C2C c128", "C2C", "complex128", 1024, 16384, ["prolog x3", "epilog x2", "epilog *filter[i]"]),
    ("R2C f32", "R2C", "float32", 1024, 32768, ["prolog x3", "epilog *filter[i]"]),
    ("C2R f32", "C2R", "float32", 1024, 32768, ["prolog *filter[i]", "epilog x2"]),
]
CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F = 0, 1, 4, 5
CUDA_TYPE = {"float32": CUDA_R_32F, "float64": CUDA_R_64F, "complex64": CUDA_C_32F, "complex128": CUDA_C_64F}
COMPLEX_OF = {"float32": "complex64", "float64": "complex128", "complex64": "complex64", "complex128": "complex128"}
REAL_OF = {"complex64": "float32", "complex128": "float64", "float32": "float32", "float64": "float64"}
FORWARD, INVERSE = -1, 1


def io_dtypes(fft_type, dtype):
    """(input element, output element) dtype names."""
    if fft_type == "C2C":
        return dtype, dtype
    if fft_type == "R2C":
        return dtype, COMPLEX_OF[dtype]
    return COMPLEX_OF[dtype], REAL_OF[dtype]


class CuFFT:
    """The few cuFFT entry points the benchmark needs, through ctypes with full prototypes."""

    def __init__(self):
        import cuda.pathfinder as pathfinder

        # cuFFT dlopens libnvJitLink by name at plan time and the wheel has no RUNPATH: load it first.
        pathfinder.load_nvidia_dynamic_lib("nvJitLink")
        self.lib = lib = ctypes.CDLL(pathfinder.load_nvidia_dynamic_lib("cufft").abs_path)
        c_int, c_ll, c_size, c_void = ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t, ctypes.c_void_p
        ll_p = ctypes.POINTER(c_ll)
        table = {
            "cufftGetVersion": [ctypes.POINTER(c_int)],
            "cufftCreate": [ctypes.POINTER(c_int)],
            "cufftDestroy": [c_int],
            "cufftSetStream": [c_int, c_void],
            "cufftXtExec": [c_int, c_void, c_void, c_int],
            "cufftXtMakePlanMany": [c_int, c_int, ll_p, ll_p, c_ll, c_ll, c_int, ll_p, c_ll, c_ll, c_int, c_ll,
                                    ctypes.POINTER(c_size), c_int],
        }
        for name, argtypes in table.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, c_int
        set_cb = getattr(lib, "cufftXtSetJITCallback", None) or getattr(lib, "__cufftXtSetJITCallback_12_7")
        set_cb.argtypes = [c_int, ctypes.c_char_p, c_void, c_size, c_int, ctypes.POINTER(c_void)]
        set_cb.restype = c_int
        self.set_jit_callback = set_cb
        version = c_int()
        self.check(lib.cufftGetVersion(ctypes.byref(version)), "cufftGetVersion")
        self.version = version.value

    @staticmethod
    def check(status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed with cufftResult {status}")

    def plan(self, fft_type, dtype, n, batch, callbacks):
        """callbacks: [(ltoir bytes, cufft callback type, device pointer or 0)]. Returns (handle, planning s)."""
        handle = ctypes.c_int()
        self.check(self.lib.cufftCreate(ctypes.byref(handle)), "cufftCreate")
        alive = []  # cuFFT reads the LTO-IR and caller_info when planning: keep them alive until then
        try:
            for ltoir, cb_type, pointer in callbacks:
                buf = ctypes.create_string_buffer(ltoir, len(ltoir))
                info = (ctypes.c_void_p * 1)(pointer)
                alive += [buf, info]
                self.check(self.set_jit_callback(handle, None, ctypes.cast(buf, ctypes.c_void_p), len(ltoir), cb_type,
                                                 info), f"cufftXtSetJITCallback(type {cb_type})")
            in_dt, out_dt = io_dtypes(fft_type, dtype)
            exec_dt = COMPLEX_OF[dtype]
            dims, work = (ctypes.c_longlong * 1)(n), ctypes.c_size_t()
            start = time.perf_counter()
            self.check(self.lib.cufftXtMakePlanMany(handle, 1, dims, None, 1, 0, CUDA_TYPE[in_dt], None, 1, 0,
                                                    CUDA_TYPE[out_dt], batch, ctypes.byref(work),
                                                    CUDA_TYPE[exec_dt]), "cufftXtMakePlanMany")
            return handle.value, time.perf_counter() - start
        except BaseException:
            self.lib.cufftDestroy(handle)
            raise

    def execute(self, handle, x, y, stream_ptr):
        # cufftXtExec rejects a C2R plan executed FORWARD (CUFFT_INVALID_VALUE): the direction must match the type.
        direction = INVERSE if x.dtype.kind == "c" and y.dtype.kind == "f" else FORWARD
        self.check(self.lib.cufftSetStream(handle, ctypes.c_void_p(stream_ptr)), "cufftSetStream")
        self.check(self.lib.cufftXtExec(handle, ctypes.c_void_p(x.data.ptr), ctypes.c_void_p(y.data.ptr), direction),
                   "cufftXtExec")

    def destroy(self, handle):
        self.lib.cufftDestroy(handle)


def main():
    wall = time.perf_counter()
    try:
        import cupy as cp
    except ImportError as e:
        sys.exit(f"bench_fft_callbacks needs CuPy and a GPU: {e}")
    if cp.cuda.runtime.getDeviceCount() == 0:
        sys.exit("bench_fft_callbacks needs an NVIDIA GPU")
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    cache_dir = tempfile.mkdtemp(prefix="mathpy-bench-cache-")
    os.environ["MATHPY_CACHE_DIR"] = cache_dir  # cold compiles below, then a warm one in a new process

    start = time.perf_counter()
    from numba import cuda, types
    numba_import_s = time.perf_counter() - start
    from cuda.core import Program, ProgramOptions
    from mathpy import jit

    cc = tuple(int(c) for c in cp.cuda.Device().compute_capability)  # "90" -> (9, 0)
    cufft = CuFFT()
    gpu_name = cp.cuda.runtime.getDeviceProperties(0)['name'].decode()
    print(f"GPU {gpu_name} cc {cc}, cuFFT {cufft.version}, "
          f"numba-cuda import {numba_import_s:.2f} s")
    try:
        import nvmath.fft as nvmath_fft
    except Exception:  # not installed: the table and plot leave the nvmath column out
        nvmath_fft = None

    def cpp_ltoir(name, element):
        options = ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}", link_time_optimization=True,
                                 relocatable_device_code=True)
        return bytes(Program(cpp_source(name, element), "c++", options).compile("ltoir").code)

    def numba_ltoir(fn, kind, element, with_info):
        elem = getattr(types, element)
        ptr = types.CPointer(elem)
        info = ptr if with_info else types.voidptr
        sig = elem(ptr, types.uint64, info, types.voidptr) if kind == "prolog" else \
            types.void(ptr, types.uint64, elem, info, types.voidptr)
        name = jit._spec.make_spec(kind, element, None, cc).mangled_name
        ltoir, _ = cuda.compile(fn, sig, device=True, abi="c", abi_info={"abi_name": name}, output="ltoir", cc=cc,
                                opt=True)
        return bytes(ltoir)

    def nvmath_ltoir(fn, kind, element):
        compile_fn = nvmath_fft.compile_prolog if kind == "prolog" else nvmath_fft.compile_epilog
        return compile_fn(fn, element, element)

    compile_ms = {}

    def mathpy_ltoir(fn, kind, element, with_info):
        start = time.perf_counter()
        result = jit.compile_callback(fn, kind, element, element if with_info else None, cc)
        compile_ms.setdefault((fn.__name__, kind, element), (time.perf_counter() - start) * 1e3)
        return result.ltoir

    def gpu_ms(fn, reps=30, repeats=3):
        fn()
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(repeats):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(reps):
                fn()
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / reps)
        return sorted(times)[len(times) // 2]

    rng = cp.random.default_rng(1)
    rows, failures = [], []
    for label, fft_type, dtype, n, batch, names in CASES:
        in_dt, out_dt = io_dtypes(fft_type, dtype)
        n_out = n // 2 + 1 if fft_type == "R2C" else n
        n_in = n // 2 + 1 if fft_type == "C2R" else n
        real = rng.standard_normal((batch, n), dtype=REAL_OF[dtype])
        if fft_type == "C2C":
            x = (real + 1j * rng.standard_normal((batch, n), dtype=REAL_OF[dtype])).astype(in_dt)
        elif fft_type == "R2C":
            x = real.astype(in_dt)
        else:  # a valid Hermitian half-spectrum
            x = cp.fft.rfft(real, axis=-1).astype(in_dt)
        del real
        x_pristine = x.copy()
        y = cp.empty((batch, n_out if fft_type != "C2R" else n), dtype=out_dt)
        stream = cp.cuda.get_current_stream().ptr

        def reference(pre=None, post=None):
            v = x_pristine if pre is None else pre(x_pristine)
            if fft_type == "C2C":
                r = cp.fft.fft(v, axis=-1)
            elif fft_type == "R2C":
                r = cp.fft.rfft(v, axis=-1)
            else:
                r = cp.fft.irfft(v, n=n, axis=-1) * n  # cuFFT's C2R is unnormalised
            return r if post is None else post(r)

        handle, _ = cufft.plan(fft_type, dtype, n, batch, [])
        plain_ms = gpu_ms(lambda: cufft.execute(handle, x, y, stream))
        cufft.destroy(handle)
        shape = f"{label} {n}x{batch}"
        mbytes = (x.nbytes + y.nbytes) / 1e6
        print(f"\n{shape}: {mbytes:.0f} MB moved; plain cuFFT {plain_ms:.3f} ms")

        for name in names:
            kind, fn, with_info = CALLBACKS[name]
            element = in_dt if kind == "prolog" else out_dt
            filt = None
            if with_info:
                filt_shape = x.shape if kind == "prolog" else y.shape
                fr = rng.standard_normal(filt_shape, dtype=REAL_OF[element])
                filt = (fr + 1j).astype(element) if element.startswith("complex") else (fr + 1).astype(element)
                del fr
            if name == "prolog x3":
                pre, post = (lambda v: v * 3), None
            elif name == "prolog *filter[i]":
                pre, post = (lambda v, f=filt: v * f), None
            elif name == "epilog x2":
                pre, post = None, (lambda r: r * 2)
            else:
                pre, post = None, (lambda r, f=filt: r * f)
            expected = reference(pre, post)
            cb_type = jit.CALLBACK_TYPES[(kind, element)]
            pointer = filt.data.ptr if filt is not None else 0

            variants = {"C++": lambda: cpp_ltoir(name, element),
                        "numba": lambda: numba_ltoir(fn, kind, element, with_info),
                        "mathpy": lambda: mathpy_ltoir(fn, kind, element, with_info)}
            if nvmath_fft is not None:
                variants["nvmath"] = lambda: nvmath_ltoir(fn, kind, element)
            row = {"case": f"{shape} {name}", "plain": plain_ms}
            for variant, make in variants.items():
                try:
                    ltoir = make()
                    handle, plan_s = cufft.plan(fft_type, dtype, n, batch, [(ltoir, cb_type, pointer)])
                except Exception as e:
                    print(f"  {name:18s} {variant:7s} FAILED: {type(e).__name__}: {e}")
                    failures.append(f"{row['case']} {variant}: {e}")
                    continue
                try:
                    row[variant] = gpu_ms(lambda: cufft.execute(handle, x, y, stream))
                    x[...] = x_pristine  # C2R may overwrite its input
                    cufft.execute(handle, x, y, stream)
                    err = float(cp.max(cp.abs(y - expected)) / cp.max(cp.abs(expected)))
                finally:
                    cufft.destroy(handle)
                tol = 1e-4 if element in ("complex64", "float32") else 1e-10
                ok = err < tol
                if not ok:
                    failures.append(f"{row['case']} {variant}: relative error {err:.1e} (tolerance {tol:.0e})")
                print(f"  {name:18s} {variant:7s} {row[variant]:.3f} ms  plan {plan_s * 1e3:7.1f} ms  "
                      f"rel.err {err:.1e}{'' if ok else '  WRONG'}")
            if name == "prolog x3":
                unfused = {"C2C": lambda: cp.fft.fft(x * 3, axis=-1), "R2C": lambda: cp.fft.rfft(x * 3, axis=-1),
                           "C2R": lambda: cp.fft.irfft(x * 3, n=n, axis=-1)}[fft_type]
            elif name == "prolog *filter[i]":
                unfused = {"C2C": lambda: cp.fft.fft(x * filt, axis=-1),
                           "R2C": lambda: cp.fft.rfft(x * filt, axis=-1),
                           "C2R": lambda: cp.fft.irfft(x * filt, n=n, axis=-1)}[fft_type]
            else:
                scale = 2 if name == "epilog x2" else filt
                unfused = {"C2C": lambda: cp.fft.fft(x, axis=-1) * scale,
                           "R2C": lambda: cp.fft.rfft(x, axis=-1) * scale,
                           "C2R": lambda: cp.fft.irfft(x, n=n, axis=-1) * scale}[fft_type]
            row["cupy"] = gpu_ms(unfused)
            x[...] = x_pristine
            print(f"  {name:18s} {'cupy':7s} {row['cupy']:.3f} ms (unfused)")
            rows.append(row)
            del expected, filt
        del x, y, x_pristine
        cp.get_default_memory_pool().free_all_blocks()

    # --- compile times ---
    cold = compile_ms.get(("epilog_filter", "epilog", "complex64"))
    code = ("import sys, time; sys.path[:0] = [{root!r}, {here!r}]; from bench_fft_callbacks import epilog_filter; "
            "import mathpy.jit as jit; t = time.perf_counter(); "
            "jit.compile_callback(epilog_filter, 'epilog', 'complex64', 'complex64', {cc!r}); "
            "t = time.perf_counter() - t; print(t * 1e3, int('numba.cuda.compiler' in sys.modules))"
            ).format(root=ROOT, here=HERE, cc=cc)
    warm = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, MATHPY_CACHE_DIR=cache_dir))
        if out.returncode != 0:
            failures.append(f"warm compile subprocess failed: {out.stderr[-2000:]}")
            break
        ms, imported = out.stdout.split()
        warm.append(float(ms))
    print(f"\nmathpy compile, epilog *filter[i] complex64: cold {cold:.0f} ms in-process (numba-cuda import "
          f"{numba_import_s:.2f} s not included); warm (disk cache, new process) "
          f"{', '.join(f'{w:.2f}' for w in warm)} ms; numba-cuda imported on the warm path: {bool(int(imported))}"
          if warm and cold is not None else "compile-time measurement incomplete")
    if warm and min(warm) > 5:
        failures.append(f"warm compile {min(warm):.2f} ms > 5 ms")

    # --- table (Markdown, as docs/benchmarks.md shows it) ---
    variants = ["plain", "C++", "numba", "mathpy"] + (["nvmath"] if nvmath_fft is not None else []) + ["cupy"]
    print("\n" + _report.environment(gpu_name, (f"cuFFT {cufft.version}",)) + "\n")
    print(_report.callbacks_table(rows, variants))

    # --- plot ---
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        fig, ax = plt.subplots(figsize=(max(10, 1.1 * len(rows)), 5.5))
        width = 0.8 / len(variants)
        for k, v in enumerate(variants):
            ax.bar([i + k * width for i in range(len(rows))], [row.get(v, 0) for row in rows], width, label=v)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
        ax.set_xticklabels([row["case"] for row in rows], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("ms per transform (lower is better)")
        ax.set_title("cuFFT with fused callbacks: mathpy.jit vs CUDA C++, numba abi='c', unfused CuPy")
        ax.legend()
        fig.tight_layout()
        path = os.path.join(HERE, "results", "bench_fft_callbacks.png")
        fig.savefig(path, dpi=120)
        print(f"plot: {path}")
    except ImportError:
        print("matplotlib not installed: no plot")

    print(f"total {time.perf_counter() - wall:.0f} s")
    if failures:
        print("\nFAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
