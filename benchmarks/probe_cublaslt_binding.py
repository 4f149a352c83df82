"""Where Matmul.execute's host time goes: the cuBLASLt call through mathpy's ctypes binding against the same call
through NVIDIA's compiled (Cython) binding, nvmath.bindings.cublasLt (issue 21: does a compiled binding lower the
floor?).

    python benchmarks/probe_cublaslt_binding.py     # GPU; nvmath-python installed (carried as a wheel)

One planned ``mathpy.Matmul`` (128^3 float16, torch tensors) is executed once, so its engine's argument list holds
the operands' pointers and the stream; then, in interleaved rounds of 200 calls each (no synchronisation inside a
round), per call:

- ``Matmul.execute`` (allocation of D included) and ``torch.matmul``, for scale;
- ``cublasLtMatmul`` through mathpy's ctypes function on that argument list (what the engine's hot path calls);
- the same ``cublasLtMatmul`` with the same 16 integers through ``nvmath.bindings.cublasLt.matmul``;
- an empty Python function of 16 arguments (the interpreter's share of any call).

Medians in microseconds; the GPU work (about 3 us per product) runs behind the host, so these are host costs.
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


def main():
    import torch

    import mathpy
    try:
        from nvmath.bindings import cublasLt as compiled
    except ImportError:
        compiled = None
        print("nvmath-python is not installed: the compiled binding's row is left out")

    a = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    b = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    mm = mathpy.Matmul(a, b)
    mm.plan()
    mm.execute()
    torch.cuda.synchronize()
    engine = mm.prepared_call.engine
    args = tuple(engine._args)  # handle, desc, alpha, A, layout, B, layout, beta, C, layout, D, layout, algo, ws, ws size,
    ctypes_call = engine._matmul  # stream: all ints, as the engine passes them

    def empty(*values):
        return None

    rows = {"Matmul.execute": mm.execute, "torch.matmul": lambda: torch.matmul(a, b),
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
    mm.free()
    print(f"# cuBLASLt call overhead, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"mathpy {mathpy.__version__}; 128^3 float16; us per call, medians of 15 rounds of {CALLS} calls\n")
    print("| call | host us per call |")
    print("|---|---|")
    for name in names:
        print(f"| {name} | {statistics.median(samples[name]):.2f} |")


if __name__ == "__main__":
    main()
