"""A distributed 3-D FFT with mathpy.distributed: a Gaussian low-pass filter applied in Fourier space, fused into the
last local transform as an epilog callback, then the inverse transform back to the input's distribution.

    torchrun --standalone --nproc-per-node N examples/distributed_fft.py [--small]
    python examples/distributed_fft.py [--small]            # a job of one process

On a machine with GPUs each rank takes its own GPU (torch CUDA tensors, NCCL); without GPUs the ranks hold NumPy
arrays and talk through gloo. Every rank builds the same global field from one seed, keeps its slab, and the last line
printed is the largest relative error of the result against the same computation in one process.
"""

import argparse
import statistics
import time

import numpy as np

import mathpy.distributed as md
from mathpy.fft import Callback


def lowpass(data_out, offset, value, user_info, unused):
    """Multiply each Fourier coefficient by the filter value at the same place (the filter is laid out as the local
    result: user_info[offset] is this element's)."""
    data_out[offset] = value * user_info[offset]


def gaussian(shape, box, sigma, dtype):
    """The filter exp(-|k|^2 / (2 sigma^2)) on the box [lower, upper) of the global frequency grid."""
    lower, upper = box
    axes = [np.fft.fftfreq(n)[lo:hi] for n, lo, hi in zip(shape, lower, upper)]
    k2 = sum(np.meshgrid(*[a * a for a in axes], indexing="ij"))
    return np.exp(-k2 / (2 * sigma * sigma)).astype(dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small problem (seconds on a laptop)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    context = md.initialize()
    rank, size, device = context.rank, context.size, context.device_id
    on_gpu = device is not None
    n = (64 if args.small else 512) if on_gpu else (32 if args.small else 128)
    shape, dtype = (n, n, n), np.complex64 if on_gpu else np.complex128

    # the global field, the same on every rank (one seed), and this rank's slab of it
    field = np.random.default_rng(2024).standard_normal(shape).astype(dtype)
    lower, upper = md.Slab.X.partition(shape, size).box(rank)
    part = field[lower[0]:upper[0]]
    if on_gpu:
        import torch
        part = torch.from_numpy(part.copy()).to(f"cuda:{device}")

    forward = md.FFT(part, md.Slab.X)                 # ends in Slab.Y: one all-to-all
    filt = gaussian(shape, forward.epilog_box, sigma=0.1, dtype=dtype)
    if on_gpu:
        filt = torch.from_numpy(filt).to(f"cuda:{device}")
    forward.plan(epilog=Callback(lowpass, data=filt))
    spectrum = forward.execute()
    inverse = md.FFT(spectrum, forward.result_distribution, out_distribution=md.Slab.X)
    inverse.plan()
    inverse.execute(direction="inverse")  # warm-up

    times = []
    for _ in range(args.repeat):
        context.transport.agree(None)  # start together
        if on_gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        forward.reset_operand(part)
        spectrum = forward.execute()
        inverse.reset_operand(spectrum)
        result = inverse.execute(direction="inverse")
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)

    # the single-process computation, in double precision, in the same package (torch on the GPU, NumPy on the CPU)
    whole_filter = gaussian(shape, ((0, 0, 0), shape), 0.1, np.float64)
    if on_gpu:
        whole = torch.from_numpy(field).to(f"cuda:{device}", torch.complex128)
        want = torch.fft.ifftn(torch.fft.fftn(whole) * torch.from_numpy(whole_filter).to(whole.device))
        want = want[lower[0]:upper[0]]
        got = result.to(torch.complex128) / field.size     # FFT plans are unnormalised
        error = float((got - want).abs().max() / want.abs().max())
    else:
        want = np.fft.ifftn(np.fft.fftn(field.astype(np.complex128)) * whole_filter)[lower[0]:upper[0]]
        got = np.asarray(result) / field.size
        error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    errors = context.transport.agree(error)
    if rank == 0:
        where = f"{size} GPU(s), NCCL" if on_gpu else f"{size} process(es), gloo"
        print(f"distributed FFT on {where}: global {'x'.join(map(str, shape))} {np.dtype(dtype).name}")
        print(f"forward steps: {'; '.join(forward.steps)}")
        print(f"inverse steps: {'; '.join(inverse.steps)}")
        print(f"forward FFT + fused low-pass epilog + inverse FFT: {statistics.median(times) * 1e3:.2f} ms "
              f"(median of {len(times)}, whole job)")
        print(f"max relative error vs single-process: {max(errors):.3g}")
    forward.free()
    inverse.free()
    md.finalize()


if __name__ == "__main__":
    main()
