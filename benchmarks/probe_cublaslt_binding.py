"""Where the host time of ``Matmul.execute`` and ``FFT.execute`` goes, and what a compiled binding saves (issue 21):
the library calls through mathpy's ctypes binding against NVIDIA's compiled (Cython) binding, ``nvmath.bindings``,
which mathpy uses for its hot calls when nvmath-python is installed (:mod:`mathpy.bindings._compiled`).

    python benchmarks/probe_cublaslt_binding.py     # GPU; nvmath-python installed (carried as a wheel)

Planned objects, each executed once (128^3 float16 Matmul, 8 x 1024 complex64 FFT over axis 1, torch tensors): one
pair made with ``MATHPY_COMPILED_BINDINGS=0`` (ctypes), one with the compiled entries. Then, in interleaved rounds
of 200 calls each (no synchronisation inside a round), per call:

- ``Matmul.execute`` and ``FFT.execute`` both ways (the result's allocation included), with ``torch.matmul`` and
  ``torch.fft.fft`` for scale;
- ``cublasLtMatmul`` alone through mathpy's ctypes function on the ctypes engine's argument list, and the same 16
  integers through ``nvmath.bindings.cublasLt.matmul``;
- an empty Python function of 16 arguments (the interpreter's share of any call).

Medians in microseconds; the GPU work (about 3 us per call) runs behind the host, so these are host costs.
"""

import statistics
import sys
import os
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

CALLS = 200


def per_call(fn, rounds, sync):
    samples = []
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - start) / CALLS * 1e6)
    return samples


def planned(make, compiled):
    """``make()`` (a planned mathpy object) with the compiled entries on or off (read when its engine is made)."""
    os.environ["MATHPY_COMPILED_BINDINGS"] = "1" if compiled else "0"
    try:
        return make()
    finally:
        del os.environ["MATHPY_COMPILED_BINDINGS"]


def main():
    import torch

    import mathpy
    import mathpy.fft as mfft
    from mathpy.bindings import _compiled
    if not mathpy.cuda_is_available():
        sys.exit("probe_cublaslt_binding needs a CUDA GPU (and torch with CUDA)")
    try:
        from nvmath.bindings import cublasLt as compiled
    except ImportError:
        compiled = None
        print("nvmath-python is not installed: the compiled binding's rows are left out")

    a = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    b = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    x = torch.randn(8, 1024, dtype=torch.complex64, device="cuda")

    def make_matmul():
        mm = mathpy.Matmul(a, b)
        mm.plan()
        mm.execute()
        return mm

    def make_fft():
        f = mfft.FFT(x, axes=[1])
        f.plan()
        f.execute()
        return f

    mm_ctypes, fft_ctypes = planned(make_matmul, False), planned(make_fft, False)
    mm_compiled, fft_compiled = planned(make_matmul, True), planned(make_fft, True)
    torch.cuda.synchronize()
    engine = mm_ctypes.prepared_call.engine
    args = tuple(engine._args)  # handle, desc, alpha, A, layout, B, layout, beta, C, layout, D, layout, algo, ws, ws size,
    ctypes_call = engine._matmul  # stream: all ints, as the engine passes them
    uses = getattr(mm_compiled.prepared_call.engine._matmul, "compiled", None) is not None
    print(f"compiled entries enabled: {_compiled.enabled()}; the compiled Matmul's engine uses one: {uses}")

    def empty(*values):
        return None

    rows = {"Matmul.execute (ctypes)": mm_ctypes.execute, "Matmul.execute (compiled entry)": mm_compiled.execute,
            "torch.matmul": lambda: torch.matmul(a, b),
            "FFT.execute 8x1024 c64 (ctypes)": fft_ctypes.execute,
            "FFT.execute 8x1024 c64 (compiled entries)": fft_compiled.execute,
            "torch.fft.fft 8x1024 c64": lambda: torch.fft.fft(x),
            "cublasLtMatmul via ctypes (mathpy's binding)": lambda: ctypes_call(*args),
            "empty Python call, 16 int arguments": lambda: empty(*args)}
    if compiled is not None:
        rows["cublasLtMatmul via nvmath.bindings (Cython)"] = lambda: compiled.matmul(*args)
    for fn in rows.values():  # warm
        for _ in range(50):
            fn()
    samples = {name: [] for name in rows}
    names = list(rows)
    for r in range(15):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name] += per_call(rows[name], 1, torch.cuda.synchronize)
    for plan in (mm_ctypes, mm_compiled, fft_ctypes, fft_compiled):
        plan.free()
    print(f"# Host overhead of the library calls, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"mathpy {mathpy.__version__}; 128^3 float16 and 8 x 1024 complex64; us per call, medians of 15 rounds of "
          f"{CALLS} calls\n")
    print("| call | host us per call |")
    print("|---|---|")
    for name in names:
        print(f"| {name} | {statistics.median(samples[name]):.2f} |")


if __name__ == "__main__":
    main()
