"""What CUDA graphs give mathpy's calls: time per call eager against a captured graph's replay, beside torch's own.

    python benchmarks/bench_graphs.py            # GPU: about half a minute
    python benchmarks/bench_graphs.py --quick    # fewer rounds

Each row issues ``CALLS`` calls of one small problem (host-bound: a few microseconds of GPU work each) eagerly, then
captures the same ``CALLS`` calls in one ``torch.cuda.graph`` and replays it; microseconds per call, medians of
interleaved rounds, with one synchronisation per round on both sides. Every captured graph is checked first: its
inputs are overwritten in place, it is replayed, and its last output must be the new inputs' result (a graph that
recorded nothing, or the wrong buffers, fails there, before any timing). Rows: mathpy's ``FFT.execute``, stateless
``fft``, ``fft`` with a fused ``Callback``, ``Matmul.execute`` and stateless ``matmul`` with a RELU_BIAS epilog, next
to ``torch.fft.fft`` and ``torch.relu(torch.addmm(...))`` on the same tensors. Prints a Markdown table and saves
``benchmarks/results/graphs.png``.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
if not hasattr(np, "row_stack"):  # numba-cuda 0.30 on NumPy >= 2.5 (see FACTS)
    np.row_stack = np.vstack

CALLS = 100


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset % 1024]


def problems(torch, mathpy, mfft):
    """name -> (inputs to refill, make() -> call, reference(inputs) -> expected, the peer's call or None)."""
    x = torch.randn(8, 1024, dtype=torch.complex64, device="cuda")
    x64 = torch.randn(64, 1024, dtype=torch.complex64, device="cuda")
    filt = torch.randn(1024, dtype=torch.complex64, device="cuda")
    a = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    b = torch.randn(128, 128, dtype=torch.float16, device="cuda")
    bias = torch.randn(128, dtype=torch.float16, device="cuda")
    planned_fft = mfft.FFT(x, axes=[1])
    planned_fft.plan()
    planned_mm = mathpy.Matmul(a, b)
    planned_mm.plan(epilog="relu_bias", epilog_inputs={"bias": bias})
    relu_bias = {"epilog": "relu_bias", "epilog_inputs": {"bias": bias}}
    return {
        "FFT.execute, 8 x 1024 c64": ([x], planned_fft.execute, lambda: torch.fft.fft(x),
                                      lambda: torch.fft.fft(x)),
        "fft stateless, 8 x 1024 c64": ([x], lambda: mfft.fft(x), lambda: torch.fft.fft(x), None),
        "fft + Callback(filter), 64 x 1024 c64": (
            [x64], lambda: mfft.fft(x64, epilog=mfft.Callback(filter_epilog, data=filt)),
            lambda: torch.fft.fft(x64) * filt, lambda: torch.fft.fft(x64) * filt),
        "Matmul.execute RELU_BIAS, 128^3 fp16": (
            [a, b], planned_mm.execute, lambda: torch.relu(a.float() @ b.float() + bias.float()[:, None]),
            lambda: torch.relu(torch.addmm(bias[:, None], a, b))),
        "matmul stateless RELU_BIAS, 128^3 fp16": (
            [a, b], lambda: mathpy.matmul(a, b, **relu_bias),
            lambda: torch.relu(a.float() @ b.float() + bias.float()[:, None]), None),
    }


def capture(torch, call):
    """A graph of CALLS calls (after a warm-up on a side stream) and the last call's output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            out = call()
    return graph, out


def check(torch, graph, out, inputs, reference, name):
    for tensor in inputs:
        tensor.copy_(torch.randn_like(tensor))
    graph.replay()
    torch.cuda.synchronize()
    got, expected = out.to(torch.complex128 if out.is_complex() else torch.float64), reference()
    error = float((got - expected.to(got.dtype)).abs().max()) / max(float(expected.abs().max()), 1e-30)
    if error > 2e-2:
        raise AssertionError(f"{name}: the replay's output is {error:.2g} off (relative): the graph did not "
                             f"record the calls on their inputs")
    return error


def per_call(torch, run, rounds):
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("bench_graphs needs a CUDA GPU (torch.cuda.is_available() is False)")
        return
    import mathpy
    import mathpy.fft as mfft

    rounds = 7 if args.quick else 21
    print(f"# CUDA graphs: {torch.cuda.get_device_name()}, torch {torch.__version__}, mathpy {mathpy.__version__}; "
          f"us per call, {CALLS} calls per round, medians of {rounds} interleaved rounds\n")
    rows, runs = [], {}
    for name, (inputs, call, reference, peer) in problems(torch, mathpy, mfft).items():
        graph, out = capture(torch, call)
        error = check(torch, graph, out, inputs, reference, name)
        runs[name, "mathpy eager"] = lambda call=call: [call() for _ in range(CALLS)]
        runs[name, "mathpy graph"] = graph.replay
        if peer is not None:
            peer_graph, _ = capture(torch, peer)
            runs[name, "torch eager"] = lambda peer=peer: [peer() for _ in range(CALLS)]
            runs[name, "torch graph"] = peer_graph.replay
        rows.append((name, error))
    samples = {key: [] for key in runs}
    keys = list(runs)
    for r in range(rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            samples[key] += per_call(torch, runs[key], 1)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    print("| problem | mathpy eager | mathpy graph | eager / graph | torch eager | torch graph | replay error |")
    print("|---|---|---|---|---|---|---|")
    for name, error in rows:
        eager, graph = medians[name, "mathpy eager"], medians[name, "mathpy graph"]
        peer = [f"{medians[name, k]:.2f}" if (name, k) in medians else "-" for k in ("torch eager", "torch graph")]
        print(f"| {name} | {eager:.2f} | {graph:.2f} | {eager / graph:.1f}x | {peer[0]} | {peer[1]} | {error:.1e} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = [name for name, _ in rows]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.2
    for i, kind in enumerate(("mathpy eager", "mathpy graph", "torch eager", "torch graph")):
        ax.bar(np.arange(len(names)) + (i - 1.5) * width, [medians.get((n, kind), 0) for n in names], width,
               label=kind)
    ax.set_xticks(np.arange(len(names)), [n.split(",")[0] for n in names], rotation=15, fontsize=8)
    ax.set_ylabel("us per call")
    ax.set_title("Eager calls against a replayed CUDA graph (H200)")
    ax.legend(fontsize=8)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "results", "graphs.png"), dpi=120)


if __name__ == "__main__":
    main()
