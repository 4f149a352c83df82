"""The Fourier Neural Operator's spectral convolution, forward + backward: mathpy.torch.SpectralConv against
neuraloperator 2.0's SpectralConv and a plain torch ``rfftn -> einsum -> irfftn`` layer, in one process, on the same
input, gradient and weights (each layer's output is checked against mathpy's first).

    python benchmarks/bench_fno.py            # the table below (GPU), about 2 minutes on an H200
    python benchmarks/bench_fno.py --quick    # five rows, under a minute
    python benchmarks/bench_fno.py --cpu      # no GPU needed: tiny sizes on the CPU (checks the script, no more)

Rows: batch 32, width 64 (in = out channels); 2-D grids 128^2 and 512^2 with 16 and 64 modes per axis, a 3-D 64^3
grid with 16 modes (neuraloperator's count: the last axis keeps modes // 2 + 1 frequencies); each in float32
(complex64 spectra) and in bfloat16 where a layer takes it: mathpy takes bfloat16 in and out and transforms in
float32; neuraloperator's half precision (``fno_block_precision="half"``: float16 and complex32 FFTs) gets the same
bfloat16 input; the plain torch layer casts to float32 (torch.fft has no bfloat16).

- **mathpy**: pruned transform (the last axis first, cut to its kept bins, then each further axis only over the kept
  columns; back, each pass pads only its own axis), the channel mixing as one batched complex GEMM over the modes
  (mathpy.matmul), the bias in the DC mode. The last axis by its kept bins' DFT matrix (GEMMs) or by FFTs, as
  ``last_axis="auto"`` picks; both are timed too (the "GEMM / FFT" column).
- **neuraloperator**: its dense SpectralConv (full rfftn, fftshift, einsum on the kept block, a full zero spectrum,
  fftshift, full irfftn, bias add).
- **torch**: rfftn, index_select of the kept modes, einsum, index_put into a zero spectrum, irfftn, bias add.

GPU time per step (``y = layer(x); y.backward(g)``, x requiring grad): CUDA events around 3 steps, median of 5 rounds,
the three layers interleaved in each round; peak extra memory of one step. On a GPU, mathpy's and the torch layer's
steps are also timed captured in CUDA graphs (``torch.cuda.make_graphed_callables``, each checked against its eager
self first): the GPU's work without the host's launches, which decide the eager time of small grids. Prints an Environment line and the table
(ratios: peer time / mathpy time), and writes benchmarks/results/bench_fno.{md,json,png}.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

import torch  # noqa: E402

import _report  # noqa: E402
import mathpy  # noqa: E402
import mathpy.torch as mt  # noqa: E402

RESULTS = os.path.join(HERE, "results")
BATCH, WIDTH = 32, 64
# (grid, modes per axis, dtype name)
ROWS = [((128, 128), 16, "float32"), ((128, 128), 64, "float32"), ((512, 512), 16, "float32"),
        ((512, 512), 64, "float32"), ((64, 64, 64), 16, "float32"),
        ((128, 128), 16, "bfloat16"), ((128, 128), 64, "bfloat16"), ((512, 512), 16, "bfloat16"),
        ((512, 512), 64, "bfloat16"), ((64, 64, 64), 16, "bfloat16")]
QUICK_ROWS = [((128, 128), 16, "float32"), ((512, 512), 16, "float32"), ((512, 512), 64, "float32"),
              ((64, 64, 64), 16, "float32"), ((512, 512), 16, "bfloat16")]
CPU_ROWS = [((32, 32), 8, "float32"), ((16, 16, 16), 4, "float32"), ((32, 32), 8, "bfloat16")]
CPU_BATCH, CPU_WIDTH = 2, 8
_SHORT = {"float32": "f32", "bfloat16": "bf16"}


class TorchSpectralConv(torch.nn.Module):
    """The layer in plain torch ops, sharing ``layer``'s parameters (mathpy's weight layout: ``(*modes, in, out)``,
    non-last mode axes in FFT order)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        weight, bias, norm = self.layer.weight, self.layer.bias, self.layer.norm
        d = weight.dim() - 2
        dims, grid, modes = tuple(range(-d, 0)), x.shape[2:], weight.shape[:d]
        spectrum = torch.fft.rfftn(x.float() if x.dtype != torch.float32 else x, dim=dims, norm=norm)
        index = [_low(m, n, x.device) for m, n in zip(modes[:-1], grid[:-1])] + \
            [torch.arange(modes[-1], device=x.device)]
        where = (slice(None), slice(None)) + tuple(torch.meshgrid(*index, indexing="ij"))
        axes = "xyz"[:d]
        mixed = torch.einsum(f"bi{axes},{axes}io->bo{axes}", spectrum[where], weight)
        full = spectrum.new_zeros((x.shape[0], weight.shape[-1], *spectrum.shape[2:]))
        full[where] = mixed
        y = torch.fft.irfftn(full, s=tuple(grid), dim=dims, norm=norm) + bias.view(-1, *([1] * d))
        return y.to(x.dtype)


class LastAxis(torch.nn.Module):
    """``layer`` (sharing its parameters) with its last grid axis transformed one way: "gemm" or "fft"."""

    def __init__(self, layer, how):
        super().__init__()
        self.layer, self.how = layer, how

    def forward(self, x):
        return mt.spectral_conv(x, self.layer.weight, self.layer.bias, self.layer.norm, self.how)


def _low(keep, n, device):
    positive, negative = keep - keep // 2, keep // 2
    return torch.cat((torch.arange(positive, device=device), torch.arange(n - negative, n, device=device)))


def neuraloperator_layer(ours, dtype_name, device):
    """neuraloperator's SpectralConv with ``ours``'s weights, or None when neuraloperator is not installed."""
    try:
        from neuralop.layers.spectral_convolution import SpectralConv
    except ImportError:
        return None
    d = len(ours.n_modes)
    theirs = SpectralConv(ours.in_channels, ours.out_channels, n_modes=ours.n_modes, fft_norm=ours.norm,
                          fno_block_precision="half" if dtype_name != "float32" else "full").to(device)
    with torch.no_grad():  # theirs = ours's weights, centred (fftshift) along the non-last mode axes
        weight = ours.weight.permute(d, d + 1, *range(d))
        weight = torch.fft.fftshift(weight, dim=tuple(range(2, d + 1))) if d > 1 else weight
        target = theirs.weight.tensor if hasattr(theirs.weight, "tensor") else theirs.weight
        target.copy_(weight)
        theirs.bias.copy_(ours.bias.view(theirs.bias.shape))
    return theirs


class Timer:
    """GPU ms per call from CUDA events (or wall time on the CPU), and peak extra memory."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, fn, reps):
        if not self.cuda:
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - start) / reps * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / reps

    def extra_gb(self, fn):
        if not self.cuda:
            return float("nan")
        self.sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        self.sync()
        return (torch.cuda.max_memory_allocated() - base) / 1e9


def bench_row(grid, modes, dtype_name, batch, width, device, rounds, reps):
    torch.manual_seed(0)
    dtype = getattr(torch, dtype_name)
    ours = mt.SpectralConv(width, width, (modes,) * len(grid), device=device)
    layers = {"mathpy": ours, "neuraloperator": neuraloperator_layer(ours, dtype_name, device),
              "torch": TorchSpectralConv(ours),  # (the GEMM form is refused on CUDA: see mathpy.torch._spectral)
              "mathpy gemm": LastAxis(ours, "gemm") if device.type == "cpu" else None,
              "mathpy fft": LastAxis(ours, "fft")}
    layers = {name: layer for name, layer in layers.items() if layer is not None}
    generator = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, width, *grid, device=device, generator=generator).to(dtype).requires_grad_()
    g = (torch.randn(batch, width, *grid, device=device, generator=generator) / math.sqrt(x[0].numel())).to(dtype)
    errors = _check(layers, x)
    timer = Timer(device)
    steps = {name: _stepper(layer, x, g) for name, layer in layers.items()}
    if device.type == "cuda":  # both layers captured in CUDA graphs: the GPU work without the host's launches
        for name in ("mathpy", "torch"):
            graphed = _graphed(layers[name], x, name)
            if graphed is not None:
                steps[f"{name} graphed"] = _stepper(graphed, x, g)
    for name, step in list(steps.items()):  # warm-up: plans, allocator
        try:
            step()
            step()
        except RuntimeError as e:  # a peer whose backward does not take this dtype here: left out, with a note
            if name.startswith("mathpy"):
                raise
            print(f"  ({name}'s forward + backward fails for {x.dtype}: {str(e).splitlines()[0][:200]})")
            del steps[name]
    samples = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            timer.sync()
            samples[name].append(timer.ms(step, reps))
    row = {"grid": list(grid), "modes": modes, "dtype": dtype_name, "batch": batch, "width": width,
           "step_ms": {name: statistics.median(values) for name, values in samples.items()},
           "extra_gb": {name: timer.extra_gb(step) for name, step in steps.items() if not name.endswith("graphed")},
           "error_vs_mathpy": errors}
    label = f"{'x'.join(map(str, grid))} m{modes} {dtype_name}"
    print(f"  {label:<24} " + "  ".join(f"{name} {ms:8.3f} ms" for name, ms in row["step_ms"].items()), flush=True)
    return row


def _graphed(layer, x, name):
    """``layer``'s forward and backward captured in CUDA graphs (``torch.cuda.make_graphed_callables``, on a wrapper
    that shares its parameters, so the layer itself stays eager), checked against the eager layer; None, with a
    note, when the capture fails."""
    with torch.no_grad():
        want = layer(x).float()
    try:
        graphed = torch.cuda.make_graphed_callables(torch.nn.Sequential(layer), (x,))
        got = graphed(x).detach().float()
    except Exception as e:  # noqa: BLE001 - reported, and the column left empty
        print(f"  ({name} could not be captured in a CUDA graph: {type(e).__name__}: {str(e).splitlines()[0][:200]})")
        return None
    error = float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))
    if error > 1e-5:
        raise AssertionError(f"{name} in a CUDA graph differs from its eager self by {error:.3g} (relative)")
    return graphed


def _stepper(layer, x, g):
    params = [p for p in layer.parameters() if p.requires_grad]

    def step():
        for p in params:
            p.grad = None
        x.grad = None
        layer(x).backward(g)
    return step


def _check(layers, x):
    """Each layer's output against mathpy's (relative 2-norm): the same weights must give the same function (a
    half-precision layer within its rounding). A peer that does not take ``x``'s dtype on this device (torch's CPU
    FFT has no float16) is dropped from ``layers``, with a note."""
    outputs = {}
    with torch.no_grad():
        for name, layer in list(layers.items()):
            try:
                outputs[name] = layer(x).float()
            except RuntimeError as e:
                if name == "mathpy" or "Unsupported dtype" not in str(e):
                    raise
                print(f"  ({name} does not run {x.dtype} on {x.device.type}: {str(e).splitlines()[0]})")
                del layers[name]
    # the plain torch layer (rfftn -> einsum -> irfftn on the same weights) is the independent reference
    reference = outputs["torch"] if "torch" in outputs else outputs["mathpy"]
    allowed = 1e-4 if x.dtype == torch.float32 else 3e-2
    errors = {name: float(torch.linalg.vector_norm(out - reference) / torch.linalg.vector_norm(reference))
              for name, out in outputs.items()}
    print("  relative error against the plain torch layer: " + ", ".join(f"{n} {e:.2g}" for n, e in errors.items()))
    wrong = sorted(name for name, error in errors.items() if error > allowed)
    if any(name.startswith("mathpy") for name in wrong):
        raise AssertionError(f"{wrong} differ from the plain torch layer by more than {allowed} (relative): {errors}")
    for name in wrong:  # a peer that computes another function: timed, but its row is marked
        print(f"  WARNING: {name} differs from the plain torch layer by {errors[name]:.3g}, more than {allowed}")
    return errors


def write(rows, device_name):
    os.makedirs(RESULTS, exist_ok=True)
    text = _report.environment(device_name, [f"neuraloperator {_report._version('neuraloperator') or 'absent'}"]) + \
        "\n\n" + _report.fno_table(rows) + "\n"
    with open(os.path.join(RESULTS, "bench_fno.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "bench_fno.json"), "w") as f:
        json.dump({"device": device_name, "rows": rows}, f, indent=1)
    names = ["mathpy", "neuraloperator", "torch"]
    _report.grouped_bars(os.path.join(RESULTS, "bench_fno.png"),
                         [f"{'x'.join(map(str, r['grid']))}\nm{r['modes']} {_SHORT[r['dtype']]}" for r in rows],
                         {name: [r["step_ms"].get(name, float("nan")) for r in rows] for name in names},
                         "ms per forward + backward (log)",
                         f"FNO SpectralConv, batch {rows[0]['batch']}, width {rows[0]['width']}, {device_name}",
                         log=True)
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="five rows")
    parser.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (no GPU needed)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        sys.exit("bench_fno needs a CUDA GPU (torch.cuda.is_available() is False); --cpu runs tiny sizes on the CPU")
    device = torch.device("cuda" if cuda else "cpu")
    device_name = torch.cuda.get_device_name() if cuda else "CPU (tiny sizes: a check of the script)"
    print(f"== {device_name}; torch {torch.__version__}; mathpy {mathpy.__version__}")
    started = time.perf_counter()
    rows = []
    plan = (QUICK_ROWS if args.quick else ROWS) if cuda else CPU_ROWS
    for grid, modes, dtype_name in plan:
        batch, width = (BATCH, WIDTH) if cuda else (CPU_BATCH, CPU_WIDTH)
        rows.append(bench_row(grid, modes, dtype_name, batch, width, device, rounds=5 if cuda else 2,
                              reps=3 if cuda else 1))
        if cuda:
            torch.cuda.empty_cache()
    text = write(rows, device_name)
    print(f"(took {time.perf_counter() - started:.0f} s; results in {RESULTS})\n")
    print(text)


if __name__ == "__main__":
    main()
