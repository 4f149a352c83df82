"""Train a Fourier Neural Operator on 2-D Navier-Stokes data that this script makes itself.

The data: the vorticity form of the incompressible Navier-Stokes equations on the periodic unit square,
``dw/dt + u . grad w = nu lap w + f``, ``u = curl psi``, ``-lap psi = w``, with the forcing
``f = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y))`` and viscosity ``nu = 1e-3`` (the FNO paper's problem), solved
pseudo-spectrally on mathpy's FFT: Crank-Nicolson for the viscous term, explicit advection computed on the grid with
2/3 dealiasing. Initial vorticities are Gaussian random fields (spectrum ``(4 pi^2 |k|^2 + 49)^-1.25``). The operator
learnt: ``w(0) -> w(T)``.

The model: lift (w, x, y) to ``width`` channels, four Fourier layers (``mathpy.torch.SpectralConv``, or
neuraloperator's with ``--layer neuraloperator``, plus a pointwise 1x1 convolution and GELU), project back to one
channel; Adam on the mean relative L2 error, a fixed number of steps.

    python examples/train_fno.py                              # the GPU run (128^2 grid, 2000 steps)
    python examples/train_fno.py --layer neuraloperator       # the same with neuraloperator's SpectralConv
    python examples/train_fno.py --small                      # a 32^2 run on the CPU in well under a minute
    python examples/train_fno.py --tiny                       # seconds: what the tests run

Prints the test error before training, a progress bar (tqdm when installed), the time per training step and last
"final relative L2 test error: X".
"""

import argparse
import math
import sys
import time

import torch

import mathpy.fft
import mathpy.torch as mt

SIZES = {  # grid, train / test samples, T, dt, width, modes, steps, batch
    "full": dict(grid=128, train=1000, test=100, T=2.0, dt=1.25e-3, width=48, modes=16, steps=2000, batch=32),
    "small": dict(grid=32, train=200, test=50, T=1.0, dt=5e-3, width=16, modes=8, steps=150, batch=10),
    "tiny": dict(grid=16, train=48, test=16, T=0.5, dt=1e-2, width=8, modes=4, steps=60, batch=8),
}


# --- the data: a pseudo-spectral Navier-Stokes solver on mathpy.fft ------------------------------------------------

def wavenumbers(n, device):
    """(k_y, k_x) of an (n, n // 2 + 1) half spectrum: k_y in FFT order along axis 0, k_x = 0 .. n // 2."""
    k_y = torch.fft.fftfreq(n, 1.0 / n, device=device, dtype=torch.float64)
    k_x = torch.arange(n // 2 + 1, device=device, dtype=torch.float64)
    return k_y[:, None].expand(n, n // 2 + 1), k_x[None, :].expand(n, n // 2 + 1)


def random_vorticity(count, n, generator, device):
    """Gaussian random fields with spectrum sigma^2 (4 pi^2 |k|^2 + tau^2)^-alpha, zero mean (alpha 2.5, tau 7)."""
    k_y, k_x = wavenumbers(n, device)
    alpha, tau = 2.5, 7.0
    sigma = tau ** (0.5 * (2 * alpha - 2))
    amplitude = sigma * (4 * math.pi ** 2 * (k_x ** 2 + k_y ** 2) + tau ** 2) ** (-alpha / 2)
    amplitude[0, 0] = 0.0
    noise = torch.complex(torch.randn(count, n, n // 2 + 1, generator=generator, dtype=torch.float64),
                          torch.randn(count, n, n // 2 + 1, generator=generator, dtype=torch.float64)).to(device)
    return mathpy.fft.irfft2(amplitude * noise, s=(n, n)) * (n * n)  # (irfft2 divides by n^2)


def navier_stokes(w0, T, dt, viscosity=1e-3):
    """The vorticity at time ``T`` from ``w0`` (count, n, n) on the periodic unit square (module docstring)."""
    n = w0.shape[-1]
    k_y, k_x = wavenumbers(n, w0.device)
    laplacian = 4 * math.pi ** 2 * (k_x ** 2 + k_y ** 2)
    inverse_laplacian = torch.where(laplacian > 0, 1.0 / laplacian.clamp(min=1e-30), torch.zeros_like(laplacian))
    dealias = ((k_y.abs() <= n / 3) & (k_x <= n / 3)).to(torch.float64)
    x = torch.arange(n, device=w0.device, dtype=torch.float64) / n
    forcing = 0.1 * (torch.sin(2 * math.pi * (x[:, None] + x[None, :])) +
                     torch.cos(2 * math.pi * (x[:, None] + x[None, :])))
    forcing_h = mathpy.fft.rfft2(forcing)
    w_h = mathpy.fft.rfft2(w0)
    i2pi = 2j * math.pi
    implicit = 1 + 0.5 * dt * viscosity * laplacian
    explicit = 1 - 0.5 * dt * viscosity * laplacian
    for _ in range(round(T / dt)):
        psi_h = w_h * inverse_laplacian
        u = mathpy.fft.irfft2(i2pi * k_y * psi_h, s=(n, n))  # u = d psi / dy
        v = mathpy.fft.irfft2(-i2pi * k_x * psi_h, s=(n, n))  # v = -d psi / dx
        w_x = mathpy.fft.irfft2(i2pi * k_x * w_h, s=(n, n))
        w_y = mathpy.fft.irfft2(i2pi * k_y * w_h, s=(n, n))
        advection_h = mathpy.fft.rfft2(u * w_x + v * w_y) * dealias
        w_h = (explicit * w_h + dt * (forcing_h - advection_h)) / implicit
    return mathpy.fft.irfft2(w_h, s=(n, n))


def make_data(size, device, seed=0):
    generator = torch.Generator().manual_seed(seed)
    w0 = random_vorticity(size["train"] + size["test"], size["grid"], generator, device)
    wT = navier_stokes(w0, size["T"], size["dt"])
    w0, wT = w0.float(), wT.float()
    return (w0[:size["train"]], wT[:size["train"]]), (w0[size["train"]:], wT[size["train"]:])


# --- the model -----------------------------------------------------------------------------------------------------

def spectral_layer(kind):
    if kind == "mathpy":
        return lambda width, modes: mt.SpectralConv(width, width, (modes, modes))
    try:
        from neuralop.layers.spectral_convolution import SpectralConv
    except ImportError:
        sys.exit("--layer neuraloperator needs neuraloperator (pip install neuraloperator)")
    return lambda width, modes: SpectralConv(width, width, n_modes=(modes, modes))


class FNO2d(torch.nn.Module):
    def __init__(self, width, modes, layer, depth=4):
        super().__init__()
        self.lift = torch.nn.Linear(3, width)
        self.spectral = torch.nn.ModuleList(layer(width, modes) for _ in range(depth))
        self.pointwise = torch.nn.ModuleList(torch.nn.Conv2d(width, width, 1) for _ in range(depth))
        self.project = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                           torch.nn.Linear(4 * width, 1))

    def forward(self, w):
        n = w.shape[-1]
        x = torch.arange(n, device=w.device, dtype=w.dtype) / n
        grid = torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).expand(w.shape[0], n, n, 2)
        h = self.lift(torch.cat((w[..., None], grid), -1)).permute(0, 3, 1, 2)
        for i, (spectral, pointwise) in enumerate(zip(self.spectral, self.pointwise)):
            h = spectral(h) + pointwise(h)
            if i < len(self.spectral) - 1:
                h = torch.nn.functional.gelu(h)
        return self.project(h.permute(0, 2, 3, 1))[..., 0]


def relative_l2(prediction, target):
    """Mean over samples of |prediction - target| / |target| (2-norms over the grid)."""
    difference = (prediction - target).flatten(1).norm(dim=1)
    return (difference / target.flatten(1).norm(dim=1)).mean()


@torch.no_grad()
def test_error(model, data, batch=50):
    w0, wT = data
    errors = [relative_l2(model(w0[i:i + batch]), wT[i:i + batch]) * len(w0[i:i + batch])
              for i in range(0, len(w0), batch)]
    return float(sum(errors) / len(w0))


def progress(total):
    """tqdm when installed, else a plain counter on one line."""
    try:
        from tqdm import tqdm
        return tqdm(total=total, unit="step", file=sys.stdout, dynamic_ncols=True)
    except ImportError:
        return _Bar(total)


class _Bar:
    def __init__(self, total):
        self.total, self.count, self.text = total, 0, ""

    def update(self, n=1):
        self.count += n
        if self.count == self.total or self.count % max(1, self.total // 20) == 0:
            print(f"\r[{'#' * (20 * self.count // self.total):<20}] {self.count}/{self.total} {self.text}",
                  end="", flush=True)

    def set_postfix_str(self, text):
        self.text = text

    def close(self):
        print()


def train(args):
    size = dict(SIZES["tiny" if args.tiny else "small" if args.small else "full"])
    if args.steps:
        size["steps"] = args.steps
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    if device.type == "cpu" and size["grid"] <= 32:
        # tensors this small gain nothing from torch's intra-op threads, and on a loaded machine (CI) their
        # synchronisation costs up to 100x a single thread's time
        torch.set_num_threads(1)
    started = time.perf_counter()
    train_data, test_data = make_data(size, device)
    print(f"data: {size['train']} + {size['test']} Navier-Stokes solutions on a {size['grid']}^2 grid, T = "
          f"{size['T']}, made in {time.perf_counter() - started:.1f} s on {device}")
    torch.manual_seed(1)
    model = FNO2d(size["width"], size["modes"], spectral_layer(args.layer)).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, size["steps"])
    print(f"initial relative L2 test error: {test_error(model, test_data):.4f}")
    generator = torch.Generator().manual_seed(2)
    bar = progress(size["steps"])
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for step in range(size["steps"]):
        index = torch.randint(0, size["train"], (size["batch"],), generator=generator).to(device)
        loss = relative_l2(model(train_data[0][index]), train_data[1][index])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 10 == 0 or step == size["steps"] - 1:
            bar.set_postfix_str(f"loss {loss.item():.4f}")
        bar.update()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    bar.close()
    print(f"{args.layer} layer: {1e3 * seconds / size['steps']:.2f} ms per training step ({size['steps']} steps, "
          f"batch {size['batch']}, width {size['width']}, {size['modes']} modes)")
    error = test_error(model, test_data)
    print(f"final relative L2 test error: {error:.4f}")
    return error


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", choices=["mathpy", "neuraloperator"], default="mathpy",
                        help="the spectral convolution: mathpy.torch.SpectralConv or neuraloperator's")
    parser.add_argument("--small", action="store_true", help="a 32^2 problem that trains on a CPU in under a minute")
    parser.add_argument("--tiny", action="store_true", help="a 16^2 problem for the tests (seconds)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is present")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the size's)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's initial learning rate (cosine decay)")
    return train(parser.parse_args(argv))


if __name__ == "__main__":
    main()
