"""Shared by the mathpy.torch tests: the device parameter, gradcheck settings per device, and a rounding-error bound for
products computed in low precision."""

import pytest

torch = pytest.importorskip("torch")

#: Every test runs on the CPU (CI) and, on a GPU machine, the same assertions on CUDA.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

#: Unit roundoff of each dtype torch trains in (half the spacing of 1.0).
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}


#: Relative error of cuBLASLt's GELU / DGELU epilogs on the GPU, where it exceeds the dtype's rounding: float64 ~5e-9
#: (mathpy.host.matmul._epilog), float32 and below (evaluated in float32) up to 1e-4 at |value| ~ 7, i.e. ~2e-5
#: (test_matmul_epilog, measured on an H200). The CPU engine evaluates GELU exactly in its compute type.
CUBLASLT_GELU_ERROR = {torch.float64: 5e-9, torch.float32: 2e-5, torch.float16: 2e-5, torch.bfloat16: 2e-5}


def gelu_error(device, dtype, gelu=True):
    """The relative error a GELU epilog adds on ``device`` (0 on the CPU, or without GELU)."""
    return CUBLASLT_GELU_ERROR[dtype] if (gelu and device == "cuda") else 0.0


def device_of(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch has no CUDA on this machine")
    return request.param


@pytest.fixture(params=DEVICES)
def device(request):
    """The device a test runs on: "cpu", and "cuda" on a GPU machine (a test module imports this fixture)."""
    return device_of(request)


def randn(*shape, dtype=torch.float64, device="cpu", seed=0):
    """A leaf tensor that requires grad, the same values on every device (drawn on the CPU from ``seed``)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g).to(device).requires_grad_()


def gradcheck_options(device, gelu):
    """torch.autograd.gradcheck's keywords. A GELU epilog on the GPU is evaluated by cuBLASLt to about 2.6e-10
    absolute in float64 (mathpy.host.matmul._epilog), so a central difference with gradcheck's eps = 1e-6 carries
    ~2.6e-4 of noise, far above its atol 1e-5; at eps = 1e-3 the noise is ~2.6e-7 and the truncation error
    eps^2 / 6 * max|gelu'''| (< 2e-7) stays below atol too. Everything else uses gradcheck's defaults."""
    return {"eps": 1e-3} if (gelu and device == "cuda") else {}


def product_bound(a_abs, b_abs, eps, terms=1.0):
    """Elementwise bound on the rounding error of ``a @ b`` with ``terms`` roundings of ``eps`` each along the way:
    ``terms * eps * |a| @ |b|``."""
    return terms * eps * (a_abs @ b_abs)
