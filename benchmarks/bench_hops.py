"""How far one stateless call travels inside mathpy: its mathpy-level Python calls, the modules they live in, the
switches between modules, and how often it resolves a stream or asks the torch route, cold and warm (issue 21).

    python benchmarks/bench_hops.py                      # NumPy operands, CPU execution
    python benchmarks/bench_hops.py --dry-run            # the GPU paths on stub CUDA libraries (benchmarks/_dry_run.py)
    python benchmarks/bench_hops.py --gpu                # on a GPU
    python benchmarks/bench_hops.py --mathpy-path DIR    # another tree, for before / after (the same cases)
    python benchmarks/bench_hops.py --list "fft warm"    # also print every hop of the cases whose name contains this

Cases: ``fft`` (8 x 1024 complex64), ``matmul`` (128^3), ``matmul + RELU_BIAS`` and, off the dry run, ``matmul +
Python epilog`` (``silu(x) * gate[row, col]``). "Cold" is the first call with these argument facts: imports done and
one call of another shape made first (so lazy imports and one-time set-up are not counted), every memo and plan
cache emptied, and the Python epilog a new function object (its compiled kernel may still come from numba's and
mathpy's on-disk caches). "Warm" is the third call with the same facts. Counts are deterministic but for the CPU
FFT's: its first call times the candidate libraries for as many rounds as a time budget allows, and the library it
keeps (FFTW or pocketfft) has its own number of calls.
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mathpy-path", help="import mathpy from this directory (put first on sys.path)")
    parser.add_argument("--dry-run", action="store_true", help="the GPU paths on stub CUDA libraries (no GPU)")
    parser.add_argument("--gpu", action="store_true", help="device arrays on a real GPU (torch tensors)")
    parser.add_argument("--list", metavar="CASE", help="print every hop of the cases whose name contains CASE")
    return parser.parse_args()


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None:
    sys.path.insert(0, ARGS.mathpy_path or os.path.dirname(HERE))

import numpy as np  # noqa: E402

import mathpy  # noqa: E402
import mathpy.fft as mfft  # noqa: E402


class Trace:
    """Every call into a function defined under mathpy's package directory while it is active."""

    def __init__(self):
        self.package_dir = os.path.dirname(os.path.abspath(mathpy.__file__))
        self.root = os.path.dirname(self.package_dir)
        self.seen = []

    def _profile(self, frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(self.package_dir):
                module = os.path.relpath(path, self.root)[:-3].replace(os.sep, ".")
                self.seen.append((module, frame.f_code.co_qualname))

    def run(self, fn):
        self.seen = []
        sys.setprofile(self._profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return self.seen


def summary(seen):
    modules = [m for m, _ in seen]
    switches = sum(1 for a, b in zip(modules, modules[1:]) if a != b)
    # a stream resolution: stream_pointer, or stream_handle called on its own (stream_pointer calls it too)
    streams = sum(1 for (m, f), (_, before) in zip(seen, [("", "")] + seen[:-1])
                  if m == "mathpy._streams" and (f == "stream_pointer" or (f == "stream_handle"
                                                                           and before != "stream_pointer")))
    route = sum(1 for m, _ in seen if m == "mathpy._torch_route")
    stateful = sum(1 for _, f in seen if f in ("FFT.__init__", "FFT._setup", "Matmul.__init__", "Matmul._setup"))
    return len(seen), len(set(modules)), switches, streams, route, stateful


def clear_memos():
    memo = getattr(mathpy, "_memo", None)
    if memo is not None and hasattr(memo, "clear"):
        memo.clear()
    else:  # an older tree
        mfft.plan_cache_clear()
        mathpy.matmul_plan_cache.clear()


def operands(device):
    """(x, a, bias, gate) of the cases, and another x and a to warm the imports with."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 1024)) + 1j * rng.standard_normal((8, 1024))).astype(np.complex64)
    dtype = np.float32 if device is None else np.float16
    a = rng.standard_normal((128, 128)).astype(dtype)
    bias = rng.standard_normal(128).astype(dtype)
    gate = rng.standard_normal((128, 128)).astype(dtype)
    other_x, other_a = x[:4, :512].copy(), a[:64, :64].copy()
    if device is not None:
        import torch
        x, a, bias, gate, other_x, other_a = (torch.as_tensor(v, device=device)
                                              for v in (x, a, bias, gate, other_x, other_a))
    return x, a, bias, gate, other_x, other_a


def cases(device, python_epilog):
    x, a, bias, gate, other_x, other_a = operands(device)
    relu_bias = mathpy.MatmulEpilog.RELU_BIAS

    def fresh_epilog():  # a new function object: no memo knows it
        def epilog(value, row, col, gate):
            return value / (1.0 + math.exp(-value)) * gate[row, col]
        return epilog

    warm_up = [lambda: mfft.fft(other_x), lambda: mathpy.matmul(other_a, other_a),
               lambda: mathpy.matmul(other_a, other_a, epilog=relu_bias, epilog_inputs={"bias": other_a[0]})]
    listed = [("fft", lambda e: mfft.fft(x)),
              ("matmul", lambda e: mathpy.matmul(a, a)),
              ("matmul + RELU_BIAS", lambda e: mathpy.matmul(a, a, epilog=relu_bias, epilog_inputs={"bias": bias}))]
    if python_epilog:
        warm_up.append(lambda: mathpy.matmul(other_a, other_a, epilog=fresh_epilog(),
                                             epilog_inputs={"gate": other_a}))
        listed.append(("matmul + Python epilog", lambda e: mathpy.matmul(a, a, epilog=e, epilog_inputs={"gate": gate})))
    return warm_up, listed, fresh_epilog


def measure(device, python_epilog):
    warm_up, listed, fresh_epilog = cases(device, python_epilog)
    for fn in warm_up:
        fn()
    trace, rows, hops = Trace(), [], {}
    for name, fn in listed:
        clear_memos()
        epilog = fresh_epilog()
        cold = trace.run(lambda: fn(epilog))
        fn(epilog)
        warm = trace.run(lambda: fn(epilog))
        for when, seen in (("cold", cold), ("warm", warm)):
            rows.append((name, when) + summary(seen))
            hops[f"{name} {when}"] = seen
    return rows, hops


def print_table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(v) for v in row) + " |")


def main():
    device = None
    where = "NumPy operands, CPU execution"
    if ARGS.gpu:
        device, where = "cuda", "torch tensors on the GPU"
    context = None
    if ARGS.dry_run:
        sys.path.insert(0, HERE)
        from _dry_run import fake_device
        context = fake_device()
        device, where = "cpu", "torch tensors posing as GPU tensors (dry run on stub CUDA libraries)"
    print(f"mathpy {getattr(mathpy, '__version__', '?')} from {os.path.dirname(mathpy.__file__)}")
    if context is not None:
        with context:
            rows, hops = measure(device, python_epilog=False)
    else:
        rows, hops = measure(device, python_epilog=True)
    print_table(f"mathpy-level Python calls per stateless call ({where})",
                ["call", "when", "calls", "modules", "module switches", "stream resolutions", "torch-route calls",
                 "stateful objects made"], rows)
    if ARGS.list:
        for name, seen in hops.items():
            if ARGS.list in name:
                print_table(f"Hops of {name}", ["#", "module:function"],
                            [(i, f"{m}:{f}") for i, (m, f) in enumerate(seen, 1)])


if __name__ == "__main__":
    main()
