"""mathpy.torch.SpectralConv (the FNO layer) and its pruned transforms: values against a plain torch
``rfftn -> einsum -> irfftn`` reference (float64, and float32 / bfloat16 at tolerances derived from their unit
roundoff, the transform lengths and the channel count), exact gradients (gradcheck in float64 on every op and the
layer), torch.compile without graph breaks, neuraloperator's layer given the same weights, and proof that the later
FFT passes see only the kept modes. The same tests run on CUDA tensors on a GPU machine (``-m gpu``)."""

import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from _tolerance import FFT_CONSTANT
from _torch_helpers import EPS, device, randn, torch  # noqa: F401  (device: the fixture)

import mathpy.torch as mt
from mathpy.torch import _pruned

F64, C128 = torch.float64, torch.complex128


def low_indices(keep, n):
    """The ``keep`` lowest frequencies of a length-``n`` axis in FFT order (0, 1, ..., then -keep // 2 .. -1)."""
    positive, negative = keep - keep // 2, keep // 2
    return torch.cat((torch.arange(positive), torch.arange(n - negative, n)))


def reference(x, weight, bias, norm):
    """The layer written out with torch.fft over the full grid, in float64: rfftn, the kept modes times the weight
    (einsum over channels), zeros elsewhere, irfftn, plus the bias."""
    d = weight.dim() - 2
    modes, grid = weight.shape[:d], x.shape[2:]
    spectrum = torch.fft.rfftn(x.double(), dim=tuple(range(2, 2 + d)), norm=norm)
    index = [low_indices(m, n) for m, n in zip(modes[:-1], grid[:-1])] + [torch.arange(modes[-1])]
    where = (slice(None), slice(None)) + tuple(torch.meshgrid(*[i.to(x.device) for i in index], indexing="ij"))
    axes = "xyzw"[:d]
    mixed = torch.einsum(f"bi{axes},{axes}io->bo{axes}", spectrum[where], weight.to(C128))
    full = spectrum.new_zeros((x.shape[0], weight.shape[-1], *spectrum.shape[2:]))
    full[where] = mixed
    out = torch.fft.irfftn(full, s=tuple(grid), dim=tuple(range(2, 2 + d)), norm=norm)
    return out if bias is None else out + bias.double().view(-1, *([1] * d))


CASES = [((2, 3, 16), (6,)), ((2, 3, 12, 10), (6, 4)), ((2, 3, 9, 7), (5, 7)), ((2, 3, 8, 6, 10), (4, 3, 6)),
         ((1, 2, 6, 8), (6, 8))]  # the last keeps every mode (no pruning at all)
IDS = ["1d", "2d", "2d-odd", "3d", "2d-all-modes"]


def _gemm_refused_on_cuda(device, last_axis, call):
    """The GEMM form of the last axis is refused on CUDA (wrong results seen on the H200 at 128^2): True when it was
    (and the test has nothing more to check), with the error checked."""
    if device != "cuda" or last_axis != "gemm":
        return False
    with pytest.raises(ValueError, match="last_axis='gemm' is not available on CUDA"):
        call()
    return True


@pytest.mark.parametrize("shape, modes", CASES, ids=IDS)
@pytest.mark.parametrize("norm", ["forward", "backward", "ortho"])
@pytest.mark.parametrize("last_axis", ["fft", "gemm"])
def test_layer_matches_the_full_transform_and_its_gradient_is_exact(device, shape, modes, norm, last_axis):
    torch.manual_seed(0)
    layer = mt.SpectralConv(shape[1], 4, modes, norm=norm, dtype=F64, device=device, last_axis=last_axis)
    x = randn(*shape, device=device)
    if _gemm_refused_on_cuda(device, last_axis, lambda: layer(x)):
        return
    y = layer(x)
    want = reference(x, layer.weight, layer.bias, norm)
    assert y.shape == want.shape and y.dtype == F64
    torch.testing.assert_close(y, want, rtol=0, atol=1e-12 * float(want.detach().abs().max()))
    cotangent = torch.randn_like(want)
    params = [x, layer.weight, layer.bias]
    for got, expected in zip(torch.autograd.grad(y, params, cotangent), torch.autograd.grad(want, params, cotangent)):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12 * max(1.0, float(expected.abs().max())))


@pytest.mark.parametrize("shape, modes", [((1, 2, 8), (3,)), ((1, 2, 6, 5), (3, 4)), ((1, 1, 4, 3, 6), (3, 2, 4))],
                         ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("last_axis", ["fft", "gemm"])
def test_layer_gradcheck(device, shape, modes, last_axis):
    """Small grids: gradcheck perturbs every element of x, the weight and the bias."""
    torch.manual_seed(0)
    layer = mt.SpectralConv(shape[1], 2, modes, norm="ortho", dtype=F64, device=device)
    x = randn(*shape, device=device)
    if _gemm_refused_on_cuda(device, last_axis, lambda: mt.spectral_conv(x, layer.weight, layer.bias,
                                                                          last_axis=last_axis)):
        return
    assert torch.autograd.gradcheck(lambda *t: mt.spectral_conv(*t, norm="ortho", last_axis=last_axis),
                                    (x, layer.weight, layer.bias))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("last_axis", ["fft", "gemm"])
def test_lower_precisions_are_within_their_rounding(device, dtype, last_axis):
    """float32 computes in float32. 16-bit input: the FFT path transforms it in float32 and rounds once at the end;
    the GEMM path multiplies it by the DFT matrix rounded to its dtype (tensor cores, float32 accumulation) and rounds
    the output to it. Normwise bound: two float32 transforms of relative error FFT_CONSTANT u (log2 n + 1) and the
    channel GEMM (C u), plus, for 16-bit data, the output's rounding and (GEMM path) each DFT matrix's, one unit
    roundoff of the dtype each."""
    torch.manual_seed(0)
    layer = mt.SpectralConv(8, 8, (8, 6), device=device, last_axis=last_axis)  # float32 weights
    x = torch.randn(4, 8, 32, 24, device=device).to(dtype)
    if _gemm_refused_on_cuda(device, last_axis, lambda: layer(x)):
        return
    y = layer(x)
    assert y.dtype == dtype
    want = reference(x, layer.weight.detach(), layer.bias.detach(), "forward")
    u, n = EPS[torch.float32], 32 * 24
    roundings = 0 if dtype == torch.float32 else (3 if last_axis == "gemm" else 1)
    bound = 2 * FFT_CONSTANT * u * (math.log2(n) + 1) + 8 * u + roundings * EPS[dtype]
    error = float(torch.linalg.vector_norm(y.double() - want) / torch.linalg.vector_norm(want))
    assert error <= bound, (error, bound)


@pytest.mark.parametrize("keep, n", [(1, 8), (3, 8), (5, 8), (4, 7), (7, 7), (8, 8)])
def test_pruned_ops_are_the_full_transform_cut_and_pad_and_their_gradients_exact(device, keep, n):
    """Each op against torch.fft on the full axis, and gradcheck (which also checks the partner op used as the
    backward), for even and odd lengths and every kept count from one bin to all."""
    x = randn(3, n, device=device)
    z = randn(3, n, dtype=C128, device=device, seed=1)
    index = low_indices(keep, n).to(device)
    cases = [
        (lambda t: _pruned.c2c_low(t, keep, "ortho", True), torch.fft.fft(z, norm="ortho")[:, index], z),
        (lambda t: _pruned.c2c_low(t, keep, "backward", False), torch.fft.ifft(z)[:, index], z),
        (lambda t: _pruned.c2c_pad(t, n, "forward", False),
         torch.fft.ifft(torch.zeros(3, n, dtype=C128, device=device).index_copy(1, index, z[:, :keep]),
                        norm="forward"), z[:, :keep]),
    ]
    half = n // 2 + 1
    if keep <= half:
        padded = torch.zeros(3, half, dtype=C128, device=device)
        padded[:, :keep] = z[:, :keep]
        cases += [(lambda t: _pruned.r2c_low(t, keep, "backward"), torch.fft.rfft(x)[:, :keep], x),
                  (lambda t: _pruned.c2r_low(t, n, "ortho"), torch.fft.irfft(padded, n, norm="ortho"), z[:, :keep])]
    for fn, want, operand in cases:
        operand = operand.detach().requires_grad_()
        torch.testing.assert_close(fn(operand), want.detach(), rtol=0, atol=1e-13)
        assert torch.autograd.gradcheck(fn, (operand,))
        assert torch.autograd.gradgradcheck(fn, (operand,))


def test_later_passes_transform_only_the_kept_modes(device):
    """What runs, seen through torch's dispatcher (the ops' public seam): one R2C over the full grid, every later
    forward pass on arrays already cut to the kept modes of the axes done before, one C2R back to the full grid, and
    the channel mixing as one batched GEMM over the modes. No op ever sees the full half spectrum
    (batch x channels x 64 x 33) or larger complex data."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.name().startswith("mathpy::"):
                self.calls.append((func.name().split("::")[1].split(".")[0], tuple(args[0].shape),
                                   args[0].is_complex()))
            return func(*args, **(kwargs or {}))

    x = randn(2, 4, 64, 64, device=device)
    fft_layer = mt.SpectralConv(4, 5, (16, 16), dtype=F64, device=device, last_axis="fft")
    with Recorder() as forward:
        y = fft_layer(x)
    assert [call[:2] for call in forward.calls] == [
        ("fft_r2c_low", (2, 4, 64, 64)), ("fft_c2c_low", (2, 4, 9, 64)), ("mm", (16 * 9, 2, 4)),
        ("fft_c2c_pad", (2, 5, 9, 16)), ("fft_c2r_low", (2, 5, 64, 9))]
    with Recorder() as backward:
        y.sum().backward()
    assert sorted(name for name, _, _ in backward.calls) == sorted(["fft_r2c_low", "fft_c2c_low", "matmul", "matmul",
                                                                    "fft_c2c_pad", "fft_c2r_low"])
    half_spectrum = 2 * 5 * 64 * 33
    assert all(math.prod(shape) <= half_spectrum // 3 for _, shape, is_complex in backward.calls if is_complex)
    # the GEMM form of the last axis: the grid times the kept bins' DFT matrix (64 x 18), and back (18 x 64)
    gemm_layer = mt.SpectralConv(4, 5, (16, 16), dtype=F64, device=device, last_axis="gemm")
    if _gemm_refused_on_cuda(device, "gemm", lambda: gemm_layer(x)):
        return
    with Recorder() as forward:
        gemm_layer(x)
    assert [call[:2] for call in forward.calls] == [
        ("mm", (2 * 4 * 64, 64)), ("fft_c2c_low", (2, 4, 9, 64)), ("mm", (16 * 9, 2, 4)),
        ("fft_c2c_pad", (2, 5, 9, 16)), ("mm", (2 * 5 * 64, 18))]


def test_layer_compiles_without_graph_breaks(device):
    torch.manual_seed(0)
    layer = mt.SpectralConv(3, 4, (6, 4), dtype=F64, device=device)
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    x = randn(2, 3, 12, 10, device=device)
    y, want = compiled(x), layer(x)
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-12)
    params = [x, layer.weight, layer.bias]
    for got, expected in zip(torch.autograd.grad(y.square().sum(), params),
                             torch.autograd.grad(want.square().sum(), params)):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op, args", [
    ("fft_r2c_low", lambda d: (randn(3, 10, device=d), 4, "forward")),
    ("fft_c2r_low", lambda d: (randn(3, 4, dtype=C128, device=d), 9, "backward")),
    ("fft_c2c_low", lambda d: (randn(2, 3, 8, dtype=C128, device=d), 5, "ortho", True)),
    ("fft_c2c_pad", lambda d: (randn(2, 3, 5, dtype=C128, device=d), 8, "forward", False)),
])
def test_pruned_ops_pass_opcheck(device, op, args):
    torch.library.opcheck(getattr(torch.ops.mathpy, op).default, args(device))


def test_matches_neuraloperator_given_the_same_weights():
    """neuraloperator 2.0's dense SpectralConv (fftshift-ed weights, full-grid transforms) and this layer, loaded
    from it: the same outputs within float32 rounding of the two paths."""
    pytest.importorskip("neuralop")
    from neuralop.layers.spectral_convolution import SpectralConv
    torch.manual_seed(0)
    for shape, modes in [((2, 3, 16), (6,)), ((2, 3, 12, 10), (6, 4)), ((2, 3, 8, 6, 10), (4, 3, 6))]:
        theirs = SpectralConv(shape[1], 5, n_modes=modes)
        ours = mt.SpectralConv(shape[1], 5, modes)
        ours.load_neuraloperator(theirs)
        x = torch.randn(*shape)
        want = theirs(x)
        bound = 2 * FFT_CONSTANT * EPS[torch.float32] * (math.log2(math.prod(shape[2:])) + 1) + 8 * EPS[torch.float32]
        error = float(torch.linalg.vector_norm(ours(x) - want) / torch.linalg.vector_norm(want))
        assert error <= 2 * bound, (shape, error)


def test_bad_arguments_are_refused_by_name(device):
    layer = mt.SpectralConv(3, 4, (6, 4), device=device)
    with pytest.raises(ValueError, match="grid \\(4, 10\\) is too small for the modes"):
        layer(torch.randn(2, 3, 4, 10, device=device))
    with pytest.raises(ValueError, match="x must be \\(batch, 3 channels, 2 grid axes\\)"):
        layer(torch.randn(2, 5, 8, 8, device=device))
    with pytest.raises(TypeError, match="x must be real"):
        layer(torch.randn(2, 3, 8, 8, dtype=torch.complex64, device=device))
    with pytest.raises(ValueError, match="n_modes must be positive integers"):
        mt.SpectralConv(3, 4, (0, 4))
    with pytest.raises(TypeError, match="dtype must be torch.float32 or torch.float64"):
        mt.SpectralConv(3, 4, (4, 4), dtype=torch.float16)
    with pytest.raises(ValueError, match="last_axis must be 'auto', 'fft' or 'gemm', not 'dft'"):
        mt.SpectralConv(3, 4, (4, 4), last_axis="dft")


def test_train_fno_example_learns():
    """examples/train_fno.py --tiny: data from its Navier-Stokes solver on mathpy.fft, a few dozen Adam steps of an FNO
    built on SpectralConv; the test error must fall well below where it started (an untrained model's error is about
    1; a model that learnt nothing, or a wrong gradient, stays there)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "examples" / "train_fno.py"), "--tiny", "--cpu"], cwd=root,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    initial = float(re.search(r"initial relative L2 test error: ([0-9.]+)", proc.stdout).group(1))
    final = float(re.search(r"final relative L2 test error: ([0-9.]+)", proc.stdout).group(1))
    assert final < 0.6 * initial, (initial, final)


def test_layer_runs_captured_in_cuda_graphs(device):
    """A training step of the layer captured with torch.cuda.make_graphed_callables (its forward and backward replayed
    as CUDA graphs: mathpy's FFTs and GEMMs allocate from torch's graph pool) gives the eager step's output and
    gradients, on fresh inputs at every replay."""
    if device != "cuda":
        pytest.skip("CUDA graphs need a GPU")
    torch.manual_seed(0)
    layer = mt.SpectralConv(4, 5, (8, 6), device=device)
    x = randn(3, 4, 32, 24, dtype=torch.float32, device=device).requires_grad_()
    graphed = torch.cuda.make_graphed_callables(torch.nn.Sequential(layer), (x,))
    params = [layer.weight, layer.bias]
    for seed in (1, 2):  # replays read the new values of the same input tensor
        with torch.no_grad():
            x.copy_(randn(3, 4, 32, 24, dtype=torch.float32, device=device, seed=seed))
        g = randn(3, 5, 32, 24, dtype=torch.float32, device=device, seed=10 + seed)
        want = layer(x)
        want_grads = torch.autograd.grad(want, [x] + params, g)
        got = graphed(x)
        got_grads = torch.autograd.grad(got, [x] + params, g)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
