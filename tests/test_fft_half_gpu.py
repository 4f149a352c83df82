"""Half-precision FFTs on cuFFT through mathpy.fft.FFT and compat nvmath (GPU only): torch float16 R2C, complex32
C2C forward/inverse and C2R, batched 1-D and 2-D power-of-two shapes, compared with torch.fft on the same values in
complex64/float32 within the FFT error bound of float16 (tests/_tolerance.py). The CPU side (refusals, layouts,
plan types) is tests/test_fft_half.py."""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mathpy.compat.nvmath as nvmath  # noqa: E402
import mathpy.fft as mfft  # noqa: E402
from _tolerance import assert_fft_close  # noqa: E402

pytestmark = pytest.mark.gpu
warnings.filterwarnings("ignore", "ComplexHalf support is experimental")

CASES = [((16, 256), (1,)), ((3, 1024), (1,)), ((64, 32), (0, 1)), ((2, 32, 64), (1, 2)), ((128, 4), (0,))]


def _rand(shape, seed, complex_=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, device="cuda", generator=g)
    if complex_:
        x = torch.complex(x, torch.randn(shape, device="cuda", generator=g))
    return x.to(torch.complex32 if complex_ else torch.float16)


def _np(t):
    """Exact double-precision values of a CUDA tensor (complex32 through complex64, exactly)."""
    if t.dtype == torch.complex32:
        return t.to(torch.complex64).cpu().numpy().astype(np.complex128)
    return t.float().cpu().numpy().astype(np.float64)


@pytest.mark.parametrize("shape, axes", CASES)
def test_r2c(shape, axes):
    x = _rand(shape, 1)
    with mfft.FFT(x, axes=axes) as f:
        f.plan()
        y = f.execute()
    assert y.dtype == torch.complex32 and y.is_cuda
    want = torch.fft.rfftn(x.float(), dim=axes)
    assert_fft_close(_np(y), want.cpu().numpy(), np.float16, math.prod(shape[a] for a in axes), "R2C")


@pytest.mark.parametrize("shape, axes", CASES)
def test_c2c_forward_and_inverse(shape, axes):
    x = _rand(shape, 2, complex_=True)
    n = math.prod(shape[a] for a in axes)
    with mfft.FFT(x, axes=axes) as f:
        f.plan()
        forward = f.execute()
        inverse = f.execute(direction="inverse")
    assert forward.dtype == inverse.dtype == torch.complex32
    wide = x.to(torch.complex64)
    assert_fft_close(_np(forward), torch.fft.fftn(wide, dim=axes).cpu().numpy(), np.float16, n, "C2C forward")
    assert_fft_close(_np(inverse), (torch.fft.ifftn(wide, dim=axes) * n).cpu().numpy(), np.float16, n,
                     "C2C inverse (unnormalised)")


@pytest.mark.parametrize("shape, axes", CASES)
def test_c2r(shape, axes):
    n = math.prod(shape[a] for a in axes)
    spectrum = (torch.fft.rfftn(torch.randn(shape, device="cuda"), dim=axes) / math.sqrt(n)).to(torch.complex32)
    with mfft.FFT(spectrum, axes=axes, options={"fft_type": "C2R"}) as f:
        f.plan()
        before = _np(spectrum)
        real = f.execute()
    assert real.dtype == torch.float16 and tuple(real.shape) == shape
    np.testing.assert_array_equal(_np(spectrum), before)  # cuFFT's C2R overwrites its input: a copy was transformed
    want = torch.fft.irfftn(spectrum.to(torch.complex64), s=[shape[a] for a in axes], dim=axes) * n
    assert_fft_close(_np(real), want.cpu().numpy(), np.float16, n, "C2R")


def test_reset_operand_and_execute_loop():
    shape = (8, 512)
    with mfft.FFT(_rand(shape, 0, complex_=True), axes=(1,)) as f:
        f.plan()
        for seed in range(5):
            x = _rand(shape, 10 + seed, complex_=True)
            f.reset_operand(x)
            y = f.execute()
            want = torch.fft.fft(x.to(torch.complex64), dim=1)
            assert_fft_close(_np(y), want.cpu().numpy(), np.float16, 512, f"execution {seed}")
        torch.cuda.synchronize()


def test_host_torch_tensor_runs_on_the_gpu():
    """A CPU torch float16 tensor with execution='cuda' is staged through torch and comes back as a CPU complex32."""
    x = _rand((4, 64), 5).cpu()
    with mfft.FFT(x, axes=(1,), execution="cuda") as f:
        f.plan()
        y = f.execute()
    assert y.dtype == torch.complex32 and not y.is_cuda
    assert_fft_close(_np(y), torch.fft.rfft(x.float(), dim=1).numpy(), np.float16, 64, "host R2C")


def test_cupy_float16_is_refused():
    cupy = pytest.importorskip("cupy")
    with pytest.raises(TypeError, match="take torch tensors: cupy has no complex32"):
        mfft.FFT(cupy.ones((4, 8), cupy.float16))


def test_compat_nvmath_functions_in_half_precision():
    x = _rand((4, 128), 7)
    y = nvmath.fft.rfft(x, axes=[1])
    assert y.dtype == torch.complex32
    assert_fft_close(_np(y), torch.fft.rfft(x.float(), dim=1).cpu().numpy(), np.float16, 128, "nvmath rfft")
    back = nvmath.fft.irfft(y, axes=[1])
    assert back.dtype == torch.float16
    want = torch.fft.irfft(y.to(torch.complex64), n=128, dim=1) * 128
    assert_fft_close(_np(back), want.cpu().numpy(), np.float16, 128, "nvmath irfft")
    c = _rand((16, 64), 8, complex_=True)
    assert_fft_close(_np(nvmath.fft.fft(c)), torch.fft.fft2(c.to(torch.complex64)).cpu().numpy(), np.float16,
                     1024, "nvmath fft")
