"""Autograd through mathpy.fft and mathpy.matmul (mathpy.torch): torch.autograd.gradcheck in double precision on every
function, norm, padding/cropping, real and complex input, every matmul shape rule, scalar and epilog; results and
gradients equal to torch's own; lower precisions within their rounding bounds; arguments without a backward refused
by name. The same tests run on CUDA tensors on a GPU machine (``-m gpu``)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

from _torch_helpers import EPS, device, gelu_error, gradcheck_options, product_bound, randn, torch  # noqa: F401

import mathpy
import mathpy.fft as mfft

gradcheck, gradgradcheck = torch.autograd.gradcheck, torch.autograd.gradgradcheck
F64, C128 = torch.float64, torch.complex128


# --- FFT ---------------------------------------------------------------------------------------------------------

ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"]
REAL_INPUT_ONLY = {"rfft", "ihfft", "rfftn", "rfft2"}
HALF_SPECTRUM_INPUT = {"irfft", "hfft", "irfftn", "irfft2"}  # n / s give the output length: 2 * (m - 1) by default


def fft_cases():
    """Each function with every norm, with its transform cropped and padded, and with real and complex input (the
    three are independent code paths: norms pick the ops' scale, n/s the differentiable resize, the dtype the cast)."""
    for name in ONE_D + N_D:
        dtype = F64 if name in REAL_INPUT_ONLY else C128
        variants = [(norm, "default", dtype) for norm in (None, "ortho", "forward")]
        variants += [(None, size, dtype) for size in ("crop", "pad")]
        if name not in REAL_INPUT_ONLY:
            variants.append(("ortho", "pad", F64))  # a real operand promoted to complex
        for norm, size, dt in variants:
            yield pytest.param(name, norm, size, dt, id=f"{name}-{norm}-{size}-{str(dt)[6:]}")


def fft_arguments(name, size):
    """(input shape, mathpy keywords, torch.fft keywords) for one case: 1-D functions over the last axis of (3, 7),
    n-D ones over the default axes or (0, 2) of (3, 4, 5); ``crop``/``pad`` shorten/lengthen the transform."""
    if name in ONE_D:
        shape, m = (3, 7), 7
        n = {"default": None, "crop": m - 3, "pad": m + 4}[size]
        if name in HALF_SPECTRUM_INPUT and n is not None:
            n = 2 * (m - 1) + (n - m)  # around the default output length: odd when cropped, even when padded
        kwargs = {} if n is None else {"n": n}
        return shape, kwargs, kwargs
    shape = (3, 4, 5)
    axes = None if name.endswith("2") else (0, 2)
    s = {"default": None, "crop": (2, 3), "pad": (5, 7)}[size]
    kwargs, torch_kwargs = {}, {}
    if axes is not None and not name.endswith("2"):
        kwargs["axes"], torch_kwargs["dim"] = axes, axes
    if s is not None:
        kwargs["s"] = torch_kwargs["s"] = s
    return shape, kwargs, torch_kwargs


@pytest.mark.parametrize("name, norm, size, dtype", list(fft_cases()))
def test_fft_gradcheck(device, name, norm, size, dtype):
    shape, kwargs, torch_kwargs = fft_arguments(name, size)
    x = randn(*shape, dtype=dtype, device=device)
    mathpy_fn, torch_fn = getattr(mfft, name), getattr(torch.fft, name)

    def f(t):
        return mathpy_fn(t, norm=norm, **kwargs)

    y = f(x)
    assert y.grad_fn is not None and y.device == x.device
    expected = torch_fn(x, norm=norm, **torch_kwargs)
    assert y.dtype == expected.dtype and y.shape == expected.shape
    scale = max(1.0, float(expected.detach().abs().max()))
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12 * scale)
    cotangent = torch.randn_like(expected)
    got, = torch.autograd.grad(y, x, cotangent)
    want, = torch.autograd.grad(expected, x, cotangent)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * max(1.0, float(want.abs().max())))
    assert gradcheck(f, (x,))


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "ifftn", "rfft2", "irfftn"])
def test_fft_second_derivatives(device, name):
    """The backward is built from the same differentiable ops, so higher derivatives work too."""
    dtype = F64 if name in REAL_INPUT_ONLY else C128
    x = randn(3, 4, 6, dtype=dtype, device=device)
    assert gradgradcheck(lambda t: getattr(mfft, name)(t, norm="ortho"), (x,))


def test_fft_more_than_three_axes_and_integer_promotion(device):
    x = randn(2, 3, 2, 3, 4, dtype=C128, device=device)
    assert gradcheck(lambda t: mfft.fftn(t, s=(2, 3, 3, 2, 5)), (x,))
    y = mfft.rfftn(torch.arange(12, device=device).reshape(3, 4))  # integers: no gradient, NumPy's dtype
    assert y.dtype == torch.complex128 and y.grad_fn is None


def test_fft_float32_keeps_single_precision(device):
    x = randn(4, 16, dtype=torch.float32, device=device)
    y = mfft.rfft(x)
    assert y.dtype == torch.complex64
    got, = torch.autograd.grad(y.abs().sum(), x)
    x64 = x.detach().double().requires_grad_()
    want, = torch.autograd.grad(torch.fft.rfft(x64).abs().sum(), x64)
    # each gradient element sums 16 terms of size <= 1 from one rounded forward and one rounded backward transform
    torch.testing.assert_close(got.double(), want, rtol=0, atol=64 * EPS[torch.float32] * 16)


# Calls in which NumPy's rules decide lengths and axes in their less common ways; with a grad-requiring operand each
# must give what it gives without one (shape, values, warning, error), as mathpy.fft documents
NUMPY_RULE_CASES = {
    "irfftn s=-1 keeps the input's length": lambda f, t: f.irfftn(t, s=(3, -1), axes=(0, 1)),
    "repeated axis, each time its own length": lambda f, t: f.fftn(t, s=(3, 6), axes=(0, 0)),
    "repeated real axis": lambda f, t: f.rfftn(t.real, s=(5, 3), axes=(1, 1)),
    "irfft odd parity": lambda f, t: f.irfft(t, options={"last_axis_parity": "odd"}),
    "irfftn odd parity": lambda f, t: f.irfftn(t, options={"last_axis_parity": "odd"}),
    "None in s (warns)": lambda f, t: f.fftn(t, s=(None, 5), axes=(0, 1)),
    "s without axes (warns)": lambda f, t: f.ifftn(t, s=(3, 5)),
    "no axes: the input": lambda f, t: f.ifftn(t, axes=()),
    "no axes, real transform": lambda f, t: f.rfftn(t.real, axes=()),
    "axis out of range": lambda f, t: f.fft(t, axis=2),
    "bad norm": lambda f, t: f.hfft(t, norm="unitary"),
    "zero length": lambda f, t: f.ifft2(t, s=(0, 3)),
}


@pytest.mark.parametrize("case", NUMPY_RULE_CASES)
def test_fft_with_grad_follows_numpys_rules_as_without(device, case):
    call = NUMPY_RULE_CASES[case]
    x = randn(4, 6, dtype=C128, device=device)

    def outcome(t):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = call(mfft, t)
            except Exception as e:  # noqa: BLE001 (the error itself is compared)
                result = e
        return result, [(w.category, str(w.message), w.filename) for w in caught]

    (want, want_warnings), (got, got_warnings) = outcome(x.detach()), outcome(x)
    assert got_warnings == want_warnings  # the same warnings, pointing at the same caller (this file)
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
        return
    assert isinstance(got, torch.Tensor), got
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * max(1.0, float(want.abs().max())))
    if got.requires_grad:  # the rules' gradients too
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # compared above; gradcheck calls many times
            assert gradcheck(lambda t: call(mfft, t), (x,))


# --- matmul ------------------------------------------------------------------------------------------------------

# (id, a shape, b shape, c shape or None, alpha, beta)
MATMUL_SHAPES = [
    ("2d", (3, 4), (4, 5), None, 1, None),
    ("batched", (2, 3, 4), (2, 4, 5), None, 1, None),
    ("broadcast-a", (3, 4), (2, 4, 5), None, 1, None),
    ("broadcast-both", (2, 1, 3, 4), (3, 4, 5), None, 1, None),
    ("vector-a", (4,), (2, 4, 5), None, 1, None),
    ("vector-b", (2, 3, 4), (4,), None, 1, None),
    ("vectors", (4,), (4,), None, 1, None),
    ("alpha-beta-c", (3, 4), (4, 5), (3, 5), 0.7, -1.3),
    ("c-row-broadcast", (2, 3, 4), (4, 5), (5,), 1.5, 0.5),
    ("c-column-broadcast", (2, 3, 4), (4, 5), (2, 3, 1), 1, 2),
    ("c-vector-b", (3, 4), (4,), (3,), -1, 1),
    ("numpy-scalars", (3, 4), (4, 5), (3, 5), np.float32(0.5), np.float64(2)),
]


@pytest.mark.parametrize("case", MATMUL_SHAPES, ids=[c[0] for c in MATMUL_SHAPES])
@pytest.mark.parametrize("dtype", [F64, C128], ids=["float64", "complex128"])
def test_matmul_gradcheck(device, case, dtype):
    _, a_shape, b_shape, c_shape, alpha, beta = case
    if dtype.is_complex:
        alpha, beta = alpha * (0.6 - 0.8j), (None if beta is None else beta * 1j)
    a, b = randn(*a_shape, dtype=dtype, device=device, seed=1), randn(*b_shape, dtype=dtype, device=device, seed=2)
    inputs = (a, b) if c_shape is None else (a, b, randn(*c_shape, dtype=dtype, device=device, seed=3))

    def f(a, b, c=None):
        return mathpy.matmul(a, b, c, alpha=alpha, beta=beta)

    d = f(*inputs)
    scalar_alpha, scalar_beta = (v.item() if isinstance(v, np.generic) else v for v in (alpha, beta))
    expected = scalar_alpha * torch.matmul(a, b) + (0 if c_shape is None else
                                                    (1 if beta is None else scalar_beta) * inputs[2])
    torch.testing.assert_close(d, expected, rtol=1e-12, atol=1e-12)
    # the plain product records the lean two-argument op (mathpy::mm), everything else the general one
    lean = c_shape is None and alpha == 1
    assert type(d.grad_fn).__name__ == ("mm_directBackward" if lean else "matmul_directBackward")
    assert gradcheck(f, inputs)


@pytest.mark.parametrize("kwargs, error, match", [({"beta": 0.5}, ValueError, "beta = 0.5 needs an operand c"),
                                                    ({"alpha": None}, TypeError, "alpha must be a number")])
def test_matmul_with_grad_refuses_what_it_refuses_without(device, kwargs, error, match):
    """The plain product's lean op is taken only for a plain product: a beta without c or a missing alpha is refused
    with grad as without."""
    a, b = randn(3, 4, device=device), randn(4, 2, device=device)
    for x in (a, a.detach()):
        with pytest.raises(error, match=match):
            mathpy.matmul(x, b, **kwargs)


def test_matmul_transposed_operands(device):
    """Strided (transposed) views are read in place; their gradients come back in their own shape."""
    a, b = randn(4, 3, device=device), randn(5, 4, device=device)
    assert gradcheck(lambda a, b: mathpy.matmul(a.mT, b.mT), (a, b))


def bias_shapes(batched):
    return [(5,), (5, 1)] + ([(2, 5, 1)] if batched else [])


EPILOG_CASES = [(epilog, batched, bias) for epilog in ("BIAS", "RELU_BIAS", "GELU_BIAS", "RELU_AUX_BIAS",
                                                        "GELU_AUX_BIAS")
                for batched in (False, True) for bias in bias_shapes(batched)] + \
               [(epilog, batched, None) for epilog in ("RELU", "GELU", "RELU_AUX", "GELU_AUX") for batched in (False,
                                                                                                             True)]


@pytest.mark.parametrize("epilog, batched, bias_shape", EPILOG_CASES)
def test_matmul_epilog_gradcheck(device, epilog, batched, bias_shape):
    """D = act(alpha a @ b + bias), bias one value per row; the AUX forms' outputs come back as well."""
    a = randn(*((2, 5, 4) if batched else (5, 4)), device=device, seed=1)
    b = randn(4, 3, device=device, seed=2)
    inputs = (a, b) if bias_shape is None else (a, b, randn(*bias_shape, device=device, seed=3))

    def f(a, b, bias=None):
        result = mathpy.matmul(a, b, alpha=0.75, epilog=epilog,
                               epilog_inputs=None if bias is None else {"bias": bias})
        if "AUX" in epilog:
            d, aux = result
            assert list(aux) == [epilog.split("_")[0].lower() + "_aux"]
            if "GELU" in epilog:  # the pre-activation is an output too: differentiate through it as well
                return d, aux["gelu_aux"][..., :5, :]
            return d
        return result

    bias_column = 0 if bias_shape is None else (inputs[2][:, None] if len(bias_shape) == 1 else inputs[2])
    x = 0.75 * torch.matmul(a, b) + bias_column
    act = {"R": torch.relu, "G": lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "B": lambda t: t}
    result = f(*inputs)
    d = result[0] if isinstance(result, tuple) else result
    want = act[epilog[0]](x)
    tol = max(1e-12, 4 * gelu_error(device, F64, "GELU" in epilog))  # cuBLASLt's float64 GELU on a GPU
    torch.testing.assert_close(d, want, rtol=tol, atol=tol)
    cotangent = torch.randn_like(want)
    got = torch.autograd.grad(d, inputs, cotangent)
    expected = torch.autograd.grad(want, inputs, cotangent)
    for g, e in zip(got, expected):  # the backward reads the exact pre-activation (aux), not cuBLASLt's GELU
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)
    assert gradcheck(f, inputs, **gradcheck_options(device, "GELU" in epilog))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("epilog", ["DEFAULT", "RELU_BIAS", "GELU_BIAS"])
def test_matmul_gradients_in_training_dtypes(device, dtype, epilog):
    """Gradients in float32 / float16 / bfloat16 against float64 autograd on the same rounded inputs, within the
    rounding bound of each product: G is rounded once to the operands' dtype (and through GELU's rounded
    pre-activation), the product once more."""
    m, k, n = 24, 40, 16
    a = (randn(m, k, seed=1) / 2).to(dtype).to(device).detach().requires_grad_()
    b = (randn(k, n, seed=2) / 2).to(dtype).to(device).detach().requires_grad_()
    bias = randn(m, seed=3).to(dtype).to(device).detach().requires_grad_()
    gd = randn(m, n, seed=4).to(dtype).to(device)
    kwargs = {} if epilog == "DEFAULT" else {"epilog": epilog, "epilog_inputs": {"bias": bias}}
    d = mathpy.matmul(a, b, **kwargs)
    grads = torch.autograd.grad(d, (a, b) + ((bias,) if kwargs else ()), gd)

    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    x64 = a64 @ b64 + (bias64[:, None] if kwargs else 0)
    act = {"DEFAULT": lambda t: t, "RELU_BIAS": torch.relu,
           "GELU_BIAS": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[epilog]
    want = torch.autograd.grad(act(x64), (a64, b64) + ((bias64,) if kwargs else ()), gd.double())
    eps = EPS[dtype]
    g = torch.autograd.grad(act(x64), x64, gd.double(), retain_graph=True)[0].abs()
    # |G| grows by the rounding of the pre-activation through GELU'' (|GELU''| <= 1): |dD| |X| eps
    g_err = g + (gd.double().abs() * x64.detach().abs() if epilog == "GELU_BIAS" else 0)
    # a few roundings to the dtype, plus float32 accumulation over the reduction (n for da, m for db)
    terms_a, terms_b = 4 + n * EPS[torch.float32] / eps, 4 + m * EPS[torch.float32] / eps
    bounds = [product_bound(g_err, b64.detach().abs().mT, eps, terms_a) + eps * want[0].abs(),
              product_bound(a64.detach().abs().mT, g_err, eps, terms_b) + eps * want[1].abs()]
    if kwargs:
        bounds.append(terms_a * eps * g_err.sum(-1) + eps * want[2].abs())
    for got, expected, bound in zip(grads, want, bounds):
        assert got.dtype == dtype
        error = (got.double() - expected).abs()
        assert bool((error <= bound + 1e-30).all()), float((error / (bound + 1e-30)).max())


def test_matmul_result_type_other_than_the_operands(device):
    """float16 operands, float32 result: the gradients come back in the operands' dtype."""
    a, b = randn(3, 4, dtype=torch.float16, device=device), randn(4, 5, dtype=torch.float16, device=device)
    d = mathpy.matmul(a, b, options={"result_type": "float32"})
    assert d.dtype == torch.float32
    ga, gb = torch.autograd.grad(d, (a, b), torch.ones_like(d))
    assert ga.dtype == gb.dtype == torch.float16
    torch.testing.assert_close(ga, (torch.ones(3, 5, device=device) @ b.detach().float().mT).half())


def test_matmul_second_derivatives(device):
    a, b = randn(3, 4, device=device), randn(4, 2, device=device)
    assert gradgradcheck(lambda a, b: mathpy.matmul(a, b, alpha=0.5), (a, b))
    assert gradgradcheck(lambda a, b: mathpy.matmul(a, b), (a, b))  # (the lean op's backward)


def test_matmul_bias_gradient_alone(device):
    """Only the bias requires grad: it is still routed and differentiated."""
    a, b = randn(3, 4, device=device).detach(), randn(4, 2, device=device).detach()
    bias = randn(3, device=device)
    d = mathpy.matmul(a, b, epilog="relu_bias", epilog_inputs={"bias": bias})
    assert d.grad_fn is not None
    assert gradcheck(lambda t: mathpy.matmul(a, b, epilog="relu_bias", epilog_inputs={"bias": t}), (bias,))


# --- what has no backward is refused, by name --------------------------------------------------------------------

def scale_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * 2


def test_fft_refuses_arguments_without_backward(device):
    x = randn(4, 8, dtype=torch.complex64, device=device)
    plain = x.detach()
    cases = {
        "epilog=": lambda: mfft.fft(x, epilog=scale_epilog),
        "prolog=": lambda: mfft.ifft(x, prolog=scale_epilog),
        "out=": lambda: mfft.fft(x, out=torch.empty_like(plain)),
        "options.inplace=True": lambda: mfft.fft(x, options={"inplace": True}),
        "execution=": lambda: mfft.fftn(x, execution="cpu"),
        "stream=": lambda: mfft.fft2(x, stream=0),
    }
    for argument, call in cases.items():
        with pytest.raises(TypeError, match=f"{argument.replace('.', '[.]')}.*a requires grad"):
            call()
    # a tensor that requires grad anywhere in the call is enough: the user data of a callback, or out
    data = torch.ones(8, dtype=torch.complex64, device=device, requires_grad=True)
    with pytest.raises(TypeError, match="epilog=.*the user data of epilog= requires grad"):
        mfft.fft(plain, epilog=mfft.Callback(scale_epilog, data=data))
    with pytest.raises(TypeError, match="out=.*out requires grad"):
        mfft.fft(plain, out=torch.empty_like(plain).requires_grad_())


def test_matmul_refuses_arguments_without_backward(device):
    a, b = randn(3, 4, device=device), randn(4, 5, device=device)
    with pytest.raises(TypeError, match="epilog=DRELU_BGRAD is a backward epilog.*a requires grad"):
        aux = torch.zeros(16, 5, dtype=torch.uint8, device=device)
        mathpy.matmul(a, b, epilog="drelu_bgrad", epilog_inputs={"relu_aux": aux})
    with pytest.raises(TypeError, match="epilog=BGRADB is a backward epilog"):
        mathpy.matmul(a, b, epilog="bgradb")
    with pytest.raises(TypeError, match="execution="):
        mathpy.matmul(a, b, execution="cpu")
    with pytest.raises(TypeError, match="stream="):
        mathpy.matmul(a, b, stream=0)
    with pytest.raises(TypeError, match="b is a numpy.ndarray"):
        mathpy.matmul(a, np.ones((4, 5)))
    with pytest.raises(TypeError, match="alpha must be a number"):
        mathpy.matmul(a, b, alpha="2")

    def custom(value, row, col, data):  # a custom Python epilog (issue 14's form): compiled, never differentiated
        return value * data[row, col]
    gate = torch.ones(3, 5, dtype=F64, device=device, requires_grad=True)
    with pytest.raises(TypeError, match=r"epilog= \(a Python function\) is a custom epilog.*a requires grad"):
        mathpy.matmul(a, b, epilog=custom)
    with pytest.raises(TypeError, match=r"custom epilog.*epilog_inputs\['data'\] requires grad"):
        mathpy.matmul(a.detach(), b.detach(), epilog=custom, epilog_inputs={"data": gate})


def test_stateful_objects_refuse_grad_requiring_operands(device):
    x = randn(4, 8, dtype=torch.complex128, device=device)
    with mfft.FFT(x) as f:
        f.plan()
        with pytest.raises(TypeError, match="FFT.execute: 'operand' requires grad.*silently detached"):
            f.execute()
        with torch.no_grad():  # nothing to record: allowed
            torch.testing.assert_close(f.execute(), torch.fft.fftn(x.detach()))
        f.reset_operand(x.detach())
        assert f.execute().grad_fn is None
    a, b = randn(3, 4, device=device).detach(), randn(4, 5, device=device).detach()
    bias = randn(3, device=device)
    with mathpy.Matmul(a, b) as mm:
        mm.plan(epilog="bias", epilog_inputs={"bias": bias})
        with pytest.raises(TypeError, match="Matmul.execute: 'epilog_inputs' requires grad"):
            mm.execute()
        mm.reset_operands(epilog_inputs={"bias": bias.detach()})
        torch.testing.assert_close(mm.execute(), a @ b + bias.detach()[:, None])
        mm.reset_operands(a=a.clone().requires_grad_())
        with pytest.raises(TypeError, match="'a' requires grad"):
            mm.execute()


def test_no_grad_mode_takes_mathpys_own_path(device):
    """Under torch.no_grad() nothing is recorded and nothing is refused: callbacks work on grad-requiring tensors."""
    x = randn(4, 8, dtype=torch.complex64, device=device)
    with torch.no_grad():
        y = mfft.fft(x, epilog=scale_epilog)
    assert y.grad_fn is None
    torch.testing.assert_close(y, 2 * torch.fft.fft(x.detach()), rtol=1e-5, atol=1e-5 * 8)


def test_import_mathpy_does_not_import_torch_and_routing_needs_no_import():
    code = ("import sys, numpy as np, mathpy, mathpy.fft\n"
            "mathpy.fft.fft(np.ones(4)); mathpy.matmul(np.ones((2, 2)), np.ones((2, 2)))\n"
            "assert 'torch' not in sys.modules, 'import mathpy imported torch'\n"
            "import torch\n"
            "x = torch.ones(4, dtype=torch.float64, requires_grad=True)\n"
            "assert mathpy.fft.rfft(x).grad_fn is not None and 'mathpy.torch' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
