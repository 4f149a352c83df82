"""What cuFFT does with C2R callbacks and non-Hermitian C2R input (a GPU probe; writes JSON and NPZ to --out).

1. Load/store callback offsets: a C2R plan with a CUDA C++ (NVRTC) load callback that counts, per offset, how often
   cuFFT loads it, and a store callback that counts the stores (1-D, 2-D, 3-D; even and odd lengths; float and
   double; batched).
2. The real-linear map of cuFFT's C2R on small shapes (batch = every basis vector, real and imaginary): compared
   with NumPy's irfftn, which drops the imaginary parts of self-conjugate bins, to see which non-Hermitian inputs
   cuFFT treats differently.
3. mathpy's irfft with a prolog indexing user data by offset, on the GPU and on the CPU.

Run on a GPU machine from the repository root: ``python benchmarks/probe_c2r_callbacks.py --out DIR``.
"""

import argparse
import ctypes
import json
import math
import pathlib
import time
import traceback

import numpy as np

LD_C, LD_Z, ST_R, ST_D = 0, 1, 6, 7

SOURCE = """
__device__ {elem2} cufftJITCallbackLoad{stem}(void* in, unsigned long long i, void* info, void* smem) {{
  unsigned int* counts = reinterpret_cast<unsigned int*>(info);
  unsigned long long last = counts[0];           // counts[0] holds the number of counted offsets
  atomicAdd(counts + 1 + (i < last ? i : last), 1u);
  return reinterpret_cast<const {elem2}*>(in)[i];
}}
__device__ void cufftJITCallbackStore{rstem}(void* out, unsigned long long i, {real} v, void* info, void* smem) {{
  unsigned int* counts = reinterpret_cast<unsigned int*>(info);
  unsigned long long last = counts[0];
  atomicAdd(counts + 1 + (i < last ? i : last), 1u);
  reinterpret_cast<{real}*>(out)[i] = v;
}}
"""


def ltoir(double):
    from cuda.core import Program, ProgramOptions
    source = SOURCE.format(elem2="double2" if double else "float2", stem="DoubleComplex" if double else "Complex",
                           rstem="DoubleReal" if double else "Real", real="double" if double else "float")
    options = ProgramOptions(arch="sm_90", link_time_optimization=True, relocatable_device_code=True)
    return bytes(Program(source, "c++", options).compile("ltoir").code)


def plan(cufft, n, batch, double, callbacks=()):
    """A C2R plan (basic layout); callbacks [(ltoir, type, device pointer)]."""
    handle, alive = ctypes.c_int(), []
    cufft.lib.cufftCreate(ctypes.byref(handle))
    for code, kind, pointer in callbacks:
        buffer, info = ctypes.create_string_buffer(code, len(code)), (ctypes.c_void_p * 1)(pointer)
        alive += [buffer, info]
        cufft.set_jit_callback(handle.value, None, buffer, len(code), kind, info)
    dims = (ctypes.c_longlong * len(n))(*n)
    work = ctypes.c_size_t()
    c_type = cufft.CUDA_C_64F if double else cufft.CUDA_C_32F
    r_type = cufft.CUDA_R_64F if double else cufft.CUDA_R_32F
    halved = n[:-1] + (n[-1] // 2 + 1,)
    cufft.lib.cufftXtMakePlanMany(handle.value, len(n), dims, None, 1, math.prod(halved), c_type, None, 1,
                                  math.prod(n), r_type, batch, ctypes.byref(work), c_type)
    return handle.value


def offsets_probe(cp, cufft, results, arrays):
    for double in (False, True):
        code = ltoir(double)
        cdt, rdt = (np.complex128, np.float64) if double else (np.complex64, np.float32)
        for n, batch in [((8,), 3), ((9,), 3), ((16,), 3), ((15,), 3), ((1000,), 3), ((1024,), 3), ((4096,), 2),
                         ((4095,), 2), ((8, 8), 2), ((6, 9), 2), ((5, 7), 2), ((16, 16), 2), ((64, 64), 2),
                         ((63, 65), 2), ((4, 6, 8), 2), ((5, 5, 5), 2), ((1, 8), 2), ((8, 1), 2)]:
            name = f"{'z2d' if double else 'c2r'} n={n} batch={batch}"
            try:
                halved = n[:-1] + (n[-1] // 2 + 1,)
                n_in, n_out = batch * math.prod(halved), batch * math.prod(n)
                counts_in = cp.zeros(n_in + 2, cp.uint32)
                counts_in[0] = n_in
                counts_out = cp.zeros(n_out + 2, cp.uint32)
                counts_out[0] = n_out
                handle = plan(cufft, n, batch, double, [(code, LD_Z if double else LD_C, counts_in.data.ptr),
                                                        (code, ST_D if double else ST_R, counts_out.data.ptr)])
                rng = np.random.default_rng(0)
                x = (rng.standard_normal((batch, *halved)) + 1j * rng.standard_normal((batch, *halved))).astype(cdt)
                xd, y = cp.asarray(x), cp.zeros((batch, *n), rdt)
                cufft.lib.cufftXtExec(handle, xd.data.ptr, y.data.ptr, cufft.INVERSE)
                cp.cuda.runtime.deviceSynchronize()
                cufft.lib.cufftDestroy(handle)
                ci, co = cp.asnumpy(counts_in[1:]), cp.asnumpy(counts_out[1:])
                ref = np.fft.irfftn(x, s=n, axes=tuple(range(1, len(n) + 1))) * math.prod(n)
                herm = ref  # numpy's answer for this (non-Hermitian) input
                results[name] = {
                    "loads_per_offset": {str(k): int(v) for k, v in zip(*np.unique(ci[:n_in], return_counts=True))},
                    "loads_beyond_input": int(ci[n_in]),
                    "offsets_never_loaded": int((ci[:n_in] == 0).sum()),
                    "first_unloaded": [int(i) for i in np.flatnonzero(ci[:n_in] == 0)[:12]],
                    "stores_per_offset": {str(k): int(v) for k, v in zip(*np.unique(co[:n_out], return_counts=True))},
                    "stores_beyond_output": int(co[n_out]),
                    "max_abs_diff_vs_numpy_irfftn": float(np.abs(cp.asnumpy(y) - herm).max()),
                    "scale": float(np.abs(herm).max()),
                }
                if math.prod(n) <= 4096:
                    arrays[name.replace(" ", "_") + "_loads"] = ci[:n_in]
            except Exception:
                results[name] = {"error": traceback.format_exc()[-800:]}


def linear_map_probe(cp, cufft, results, arrays):
    shapes = [(1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (9,), (10,), (16,), (17,), (2, 4), (3, 5), (4, 6),
              (5, 6), (4, 7), (6, 1), (2, 3, 4), (3, 3, 3), (4, 4, 4)]
    for double in (True, False):
        cdt = np.complex128 if double else np.complex64
        for n in shapes:
            name = f"map {'z2d' if double else 'c2r'} n={n}"
            try:
                halved = n[:-1] + (n[-1] // 2 + 1,)
                size = math.prod(halved)
                basis = np.zeros((2 * size, size), cdt)
                basis[np.arange(size), np.arange(size)] = 1
                basis[size + np.arange(size), np.arange(size)] = 1j
                basis = basis.reshape((2 * size, *halved))
                handle = plan(cufft, n, 2 * size, double)
                xd = cp.asarray(basis)
                y = cp.zeros((2 * size, *n), np.float64 if double else np.float32)
                cufft.lib.cufftXtExec(handle, xd.data.ptr, y.data.ptr, cufft.INVERSE)
                cp.cuda.runtime.deviceSynchronize()
                cufft.lib.cufftDestroy(handle)
                gpu = cp.asnumpy(y).reshape(2 * size, -1)
                ref = (np.fft.irfftn(basis, s=n, axes=tuple(range(1, len(n) + 1))) * math.prod(n)).reshape(
                    2 * size, -1)
                differs = np.abs(gpu - ref).max(axis=1) > (1e-9 if double else 1e-4)
                results[name] = {"basis_inputs_that_differ_from_numpy": [
                    ("re" if b < size else "im") + str(np.unravel_index(b % size, halved)) for b in
                    np.flatnonzero(differs)]}
                arrays[name.replace(" ", "_")] = gpu
            except Exception:
                results[name] = {"error": traceback.format_exc()[-800:]}


def mathpy_probe(results):
    import cupy as cp

    import mathpy.fft as mfft

    def prolog(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset]

    rng = np.random.default_rng(1)
    for n, batch in [(1024, 8), (1000, 8), (15, 4)]:
        m = n // 2 + 1
        x = (rng.standard_normal((batch, m)) + 1j * rng.standard_normal((batch, m))).astype(np.complex64)
        filt = (rng.standard_normal((batch, m)) + 1j * rng.standard_normal((batch, m))).astype(np.complex64)
        hermitian = filt.copy()
        hermitian[:, 0] = hermitian[:, 0].real
        if n % 2 == 0:
            hermitian[:, -1] = hermitian[:, -1].real
        for label, f in (("complex DC/Nyquist filter", filt), ("real DC/Nyquist filter", hermitian)):
            name = f"mathpy irfft prolog n={n} batch={batch} {label}"
            try:
                gpu = cp.asnumpy(mfft.irfft(cp.asarray(x), n=n, prolog=mfft.Callback(prolog, data=cp.asarray(f))))
                cpu = mfft.irfft(x, n=n, prolog=mfft.Callback(prolog, data=f), execution="cpu")
                ref = np.fft.irfft(x.astype(np.complex128) * f, n=n)
                results[name] = {"gpu_vs_cpu": float(np.abs(gpu - cpu).max()), "gpu_vs_numpy": float(
                    np.abs(gpu - ref).max()), "cpu_vs_numpy": float(np.abs(cpu - ref).max()),
                    "scale": float(np.abs(ref).max())}
            except Exception:
                results[name] = {"error": traceback.format_exc()[-800:]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    out = pathlib.Path(parser.parse_args().out)
    import cupy as cp

    from mathpy.bindings import cufft
    results, arrays = {"cufft_version": cufft.version()}, {}
    start = time.perf_counter()
    for probe in (offsets_probe, linear_map_probe):
        probe(cp, cufft, results, arrays)
    mathpy_probe(results)
    results["seconds"] = time.perf_counter() - start
    (out / "c2r_probe.json").write_text(json.dumps(results, indent=1))
    np.savez_compressed(out / "c2r_probe.npz", **arrays)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
