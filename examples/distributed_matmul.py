"""A distributed dense layer with mathpy.distributed: ``relu(A @ B + bias)`` with the bias and the ReLU fused into the
local products (cuBLASLt's RELU_BIAS epilog on GPUs), for row-, column- or block-cyclic-distributed matrices.

    torchrun --standalone --nproc-per-node N examples/distributed_matmul.py [--small] [--distribution row]
    python examples/distributed_matmul.py [--small]             # a job of one process

On a machine with GPUs each rank takes its own GPU (bfloat16 torch CUDA tensors, NCCL); without GPUs float32 NumPy
arrays over gloo. Every rank builds the same global matrices from one seed and keeps its part; the last line printed
is the largest relative error of the result against the same product computed in one process.
"""

import argparse
import statistics
import time

import ml_dtypes
import numpy as np

import mathpy
import mathpy.distributed as md


def distribution(name, size):
    if name == "block-cyclic":
        rows = max(p for p in range(1, int(size ** 0.5) + 1) if size % p == 0)
        return md.BlockCyclic((rows, size // rows), (64, 64))
    return name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small problem (seconds on a laptop)")
    parser.add_argument("--distribution", choices=["row", "column", "block-cyclic"], default="row")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    context = md.initialize()
    rank, size, device = context.rank, context.size, context.device_id
    on_gpu = device is not None
    n = (1024 if args.small else 8192) if on_gpu else (128 if args.small else 1024)
    dtype = np.dtype(ml_dtypes.bfloat16) if on_gpu else np.dtype(np.float32)
    dist = distribution(args.distribution, size)

    rng = np.random.default_rng(7)
    a, b = ((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(2))
    bias = rng.standard_normal(n).astype(np.float32)
    # A, B and D are n x n and distributed alike: this rank holds the same rows and columns of each
    partition = (md.Slab(0) if dist == "row" else md.Slab(1) if dist == "column" else dist).partition((n, n), size)
    rows, cols = (np.arange(s.start, s.stop) if isinstance(s, range) else s for s in partition.sets[rank])

    def mine(g):
        """This rank's part of the global n x n matrix ``g``."""
        return g[np.ix_(rows, cols)]

    def to_device(x):
        if not on_gpu:
            return x
        import torch
        return torch.from_numpy(np.ascontiguousarray(x)).to(f"cuda:{device}", torch.bfloat16)

    a_part, b_part, bias_part = (to_device(x) for x in (mine(a), mine(b), bias[rows]))  # a bias entry per row of D
    with md.Matmul(a_part, b_part, distributions=dist) as mm:
        mm.plan(epilog="relu_bias", epilog_inputs={"bias": bias_part})
        mm.execute()  # warm-up: the first call compiles and allocates
        times = []
        for _ in range(args.repeat):
            context.transport.agree(None)  # start together
            if on_gpu:
                import torch
                torch.cuda.synchronize()
            start = time.perf_counter()
            d = mm.execute()
            if on_gpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        algorithm = mm.algorithm

    # the single-process computation: the same product of the global operands, in the same dtype and package
    whole = mathpy.matmul(to_device(a), to_device(b), epilog="relu_bias", epilog_inputs={"bias": to_device(bias)})
    if on_gpu:
        d, whole = d.float().cpu().numpy(), whole.float().cpu().numpy()
    want = mine(whole)
    error = float(np.max(np.abs(np.asarray(d, np.float64) - want)) / np.max(np.abs(want)))
    errors = context.transport.agree(error)
    if rank == 0:
        where = f"{size} GPU(s), NCCL" if on_gpu else f"{size} process(es), gloo"
        flops = 2.0 * n ** 3
        seconds = statistics.median(times)
        print(f"distributed matmul on {where}: {n} x {n} x {n} {dtype.name}, {args.distribution} distribution, "
              f"algorithm {algorithm}, RELU_BIAS epilog")
        print(f"time {seconds * 1e3:.3g} ms (median of {len(times)}): {flops / seconds / 1e12:.3g} TFLOP/s for the "
              f"whole job")
        print(f"max relative error vs single-process: {max(errors):.3g}")
    md.finalize()


if __name__ == "__main__":
    main()
