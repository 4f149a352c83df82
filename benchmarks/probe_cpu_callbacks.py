"""Where a CPU FFT's fused callback spends its time (issue 26): a probe, not a benchmark table.

1. **Strategies**: for several transforms with a ``* weights[i]`` epilog or prolog (the divisor a closure constant,
   as a user writes ``offset % 4096``), the plain transform, every strategy the CPU engine offers (``"passes"``,
   ``"blocks"``, ``"parallel"``, forced one after another), SciPy's transform followed by the NumPy product, and
   the first call's time (compiles and the strategy choice included).
2. **The store pass alone** (256 x 4096 complex64): on one thread, on mathpy's Python pool of 2 to 16 threads, as one
   numba ``prange`` loop, and the cost of waking each with no work.
3. **Alternation**: a fused forward transform then a plain inverse one (or a NumPy 512^3 product), in a loop, per
   strategy: the cost of two thread teams (FFTW's or the BLAS's workers, numba's) that spin after their calls.
4. **A matmul's Python epilog pass** (``silu(x) * gate[i, j]`` and ``max(x + bias[j], 0)`` over float32 products):
   the pass alone on mathpy's Python pool and as one numba ``parallel`` loop, each right after the BLAS's product,
   the public call (its first call's time too), and NumPy's unfused expression; the same for RELU_BIAS.
5. **The parallel strategy's block size**: 256 x 4096 complex64 with the epilog or the prolog, the "parallel"
   strategy forced, with blocks of 2 to 32 transforms per numba thread.

Medians of 30 calls after 3 warm-up calls, 50 ms apart between blocks. Run from the repository root, on the machine
to measure: ``python benchmarks/probe_cpu_callbacks.py [--threads N] [--part 1 2 3]``; with numba's threading layer
and OpenMP's wait policy as the environment sets them (``NUMBA_THREADING_LAYER``, ``OMP_WAIT_POLICY``).
"""

import argparse
import os
import statistics
import sys
import time
import types

import numpy as np
import scipy.fft as sfft

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mathpy import ExecutionCPU, _threads  # noqa: E402
from mathpy.host.fft._cpu import CPUEngine  # noqa: E402
from mathpy.host.fft._layout import Transform  # noqa: E402
from mathpy.jit import _cpu_passes as passes  # noqa: E402
from mathpy.jit._cpu import jit_callback  # noqa: E402


def ms(fn, calls=30):
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    time.sleep(0.05)  # (the next block starts after this one's spinning workers have slept)
    return statistics.median(times) * 1e3


def callbacks(n):
    """A ``* weights[i]`` epilog and prolog over rows of ``n`` (``n`` a constant of the compiled function)."""
    def epilog(data_out, offset, value, user_info, unused):
        data_out[offset] = value * user_info[offset % n]

    def prolog(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset % n]
    return epilog, prolog


def operand(kind, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    return x if kind == "R2C" else (x + 1j * rng.standard_normal(shape)).astype(np.complex64)


def strategies(threads, rng):
    for kind, (rows, n), which in [("C2C", (256, 4096), "epilog"), ("C2C", (256, 4096), "prolog"),
                                   ("C2C", (2048, 2048), "epilog"), ("R2C", (512, 4096), "epilog"),
                                   ("C2C", (64, 1000), "epilog"), ("C2C", (4096, 256), "epilog")]:
        out_n = n // 2 + 1 if kind == "R2C" else n
        t = Transform(kind, "float32", (rows, n), (n, 1), (rows, out_n), (out_n, 1), (1,))
        x, out = operand(kind, (rows, n), rng), np.empty((rows, out_n), np.complex64)
        weights = rng.standard_normal(n if which == "prolog" else out_n).astype(np.float32)
        epilog, prolog = callbacks(len(weights))
        bound = types.SimpleNamespace(function=epilog if which == "epilog" else prolog, user_info=weights,
                                      check_bounds=False)
        execution = ExecutionCPU(num_threads=threads)
        plain = CPUEngine(t, execution=execution)
        result = {"plain": ms(lambda: plain.execute(x, out, -1))}
        fused = CPUEngine(t, execution=execution, **{which: bound})
        start = time.perf_counter()
        fused.execute(x, out, -1)
        first, chosen = time.perf_counter() - start, fused.strategy
        for name in fused.strategies:
            fused.strategy = name
            result[name] = ms(lambda: fused.execute(x, out, -1))
        transform = sfft.rfft if kind == "R2C" else sfft.fft
        workers = threads or -1
        result["SciPy unfused"] = ms((lambda: transform(x, workers=workers) * weights) if which == "epilog" else
                                     (lambda: transform(x * weights, workers=workers)))
        print(f"{kind} {rows} x {n}, {which} (plain: {plain.library}; chosen: {chosen}; first call {first:.2f} s): "
              + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)


def store_pass(threads, rng):
    import numba
    x = operand("C2C", (256, 4096), rng)
    out, weights = np.empty_like(x), rng.standard_normal(4096).astype(np.float32)
    epilog, _ = callbacks(4096)
    store, span = passes.storer(epilog), out.reshape(-1)
    rows, inner = np.arange(256, dtype=np.int64) * 4096, np.arange(4096, dtype=np.int64)
    info = passes.prepare_user_info(weights)
    result = {"one thread": ms(lambda: store(span, rows, inner, 1, x, info))}

    def pool(count):
        step = -(-256 // count)
        _threads.run_chunks(lambda i: store(span, rows[i * step:(i + 1) * step], inner, 1,
                                            x[i * step:(i + 1) * step], info), -(-256 // step), count)
    for count in sorted({2, 4, 8, threads}):
        result[f"pool of {count}"] = ms(lambda: pool(count))
    result[f"pool of {threads}, no work"] = ms(lambda: _threads.run_chunks(lambda i: None, threads, threads))
    f = jit_callback(epilog, "epilog")

    @numba.njit(parallel=True, nogil=True)
    def loop(span, rows, src, info):
        for r in numba.prange(rows.size):
            for j in range(src.shape[1]):
                f(span, np.uint64(rows[r] + j), src[r, j], info, None)
    loop(span, rows, x, info)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    result[f"prange ({numba.threading_layer()})"] = ms(lambda: loop(span, rows, x, info))
    result["prange, no work"] = ms(lambda: loop(span, rows[:0], x[:0], info))
    print("store pass, 256 x 4096 complex64: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)


def alternation(threads, rng):
    x = operand("C2C", (256, 4096), rng)
    y, z, weights = np.empty_like(x), np.empty_like(x), rng.standard_normal(4096).astype(np.float32)
    epilog, _ = callbacks(4096)
    t = Transform("C2C", "float32", (256, 4096), (4096, 1), (256, 4096), (4096, 1), (1,))
    execution = ExecutionCPU(num_threads=threads)
    plain = CPUEngine(t, execution=execution)
    fused = CPUEngine(t, execution=execution,
                      epilog=types.SimpleNamespace(function=epilog, user_info=weights, check_bounds=False))
    fused.execute(x, y, -1)
    plain.execute(y, z, 1)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    result = {"plain forward + inverse": ms(lambda: (plain.execute(x, y, -1), plain.execute(y, z, 1))),
              "NumPy 512^3 product alone": ms(lambda: a @ a)}
    for name in fused.strategies:
        fused.strategy = name
        result[f"{name} alone"] = ms(lambda: fused.execute(x, y, -1))
        result[f"{name} + plain inverse"] = ms(lambda: (fused.execute(x, y, -1), plain.execute(y, z, 1)))
        result[f"{name} + NumPy product"] = ms(lambda: (fused.execute(x, y, -1), a @ a))
    print(f"alternation (plain: {plain.library}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}): "
          + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)


def silu_gate(value, row, col, data):
    return value / (np.float32(1) + np.exp(-value)) * data[row, col]


def relu_bias(value, row, col, data):
    return max(value + data[col], np.float32(0))


def epilog_pass(threads, rng):
    import mathpy
    from mathpy.host.matmul._cpu_epilog import python_epilog_pass
    from mathpy.jit._cpu_passes import matmul_epilog_pass
    from mathpy.jit._matmul_epilog import as_matmul_epilog
    execution = ExecutionCPU(num_threads=threads)
    for n in (1024, 2048):
        a = (rng.standard_normal((n, n)) / 8).astype(np.float32)
        b = (rng.standard_normal((n, n)) / 8).astype(np.float32)
        gate, bias = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        for fn, data, numpy_fn in [(silu_gate, gate, lambda x: x / (1 + np.exp(-x)) * gate),
                                   (relu_bias, bias, lambda x: np.maximum(x + bias, np.float32(0)))]:
            epilog = as_matmul_epilog(fn, {"data": data})
            serial, parallel = matmul_epilog_pass(epilog, 1), matmul_epilog_pass(epilog, 1, parallel=True)
            x, operands = (a @ b)[None], (data,)
            start = time.perf_counter()
            mathpy.matmul(a, b, epilog=fn, epilog_inputs={"data": data}, execution=execution)
            first = time.perf_counter() - start
            python_epilog_pass(serial, x, operands, threads, parallel)  # compiled
            result = {
                "product": ms(lambda: a @ b),
                "NumPy unfused": ms(lambda: numpy_fn(a @ b)),
                "mathpy.matmul": ms(lambda: mathpy.matmul(a, b, epilog=fn, epilog_inputs={"data": data},
                                                          execution=execution)),
                "pass, pool": ms(lambda: python_epilog_pass(serial, x, operands, threads)),
                "pass, parallel loop": ms(lambda: python_epilog_pass(serial, x, operands, threads, parallel)),
                "product + pool pass": ms(lambda: python_epilog_pass(serial, (a @ b)[None], operands, threads)),
                "product + parallel pass": ms(lambda: python_epilog_pass(serial, (a @ b)[None], operands, threads,
                                                                         parallel)),
            }
            print(f"matmul epilog {fn.__name__}, {n}^3 float32 (first call {first:.2f} s): "
                  + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)
        result = {"NumPy unfused": ms(lambda: np.maximum(a @ b + bias[:, None], np.float32(0))),
                  "mathpy.matmul RELU_BIAS": ms(lambda: mathpy.matmul(a, b, epilog="relu_bias",
                                                                      epilog_inputs={"bias": bias},
                                                                      execution=execution))}
        print(f"matmul RELU_BIAS, {n}^3 float32: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()),
              flush=True)
    import numba
    spin = _threads.numba_spin_seconds()  # (starts numba's threads, if no loop did)
    print(f"numba threading layer {numba.threading_layer()}, spin {spin} s", flush=True)


def block_rows(threads, rng):
    t = Transform("C2C", "float32", (256, 4096), (4096, 1), (256, 4096), (4096, 1), (1,))
    x, out = operand("C2C", (256, 4096), rng), np.empty((256, 4096), np.complex64)
    weights = rng.standard_normal(4096).astype(np.float32)
    epilog, prolog = callbacks(4096)
    execution = ExecutionCPU(num_threads=threads)
    plain = CPUEngine(t, execution=execution)
    result = {"plain": ms(lambda: plain.execute(x, out, -1))}
    for which, fn in (("epilog", epilog), ("prolog", prolog)):
        for rows in (2, 4, 8, 16, 32):
            bound = types.SimpleNamespace(function=fn, user_info=weights, check_bounds=False)
            engine = CPUEngine(t, execution=execution, **{which: bound})
            if "parallel" not in engine.strategies:
                print("no parallel strategy here", flush=True)
                return
            engine.strategy = "parallel"
            engine._fused._rows = rows  # (before the first call: its buffers and FFTW plans are made then)
            result[f"{which} {rows} rows"] = ms(lambda: engine.execute(x, out, -1))
    print("parallel strategy, 256 x 4096 complex64, by rows per block: "
          + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="threads of every call (default: all cores)")
    parser.add_argument("--part", type=int, nargs="+", default=[1, 2, 3], help="which parts to run (1 2 3 4 5)")
    args = parser.parse_args()
    threads = args.threads or _threads.usable_cores()
    print(f"== {threads} threads of {_threads.usable_cores()} usable cores", flush=True)
    rng = np.random.default_rng(0)
    for part in args.part:
        (strategies, store_pass, alternation, epilog_pass, block_rows)[part - 1](threads, rng)


if __name__ == "__main__":
    main()
