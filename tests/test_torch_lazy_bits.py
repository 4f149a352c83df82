"""torch tensors with a lazy conjugate bit (``x.conj()``) or negative bit (``x.conj().imag``): their memory holds the
values before the bit applies, and mathpy reads memory. Read operands must give what torch gives for the same tensors
(stateless and stateful calls, epilog inputs, callback user data, the stateless calls' remembered calls); write
targets (``out=``, in-place operands) are refused before any work. The same assertions run on CUDA with ``-m gpu``;
on the CPU, torch CPU tensors posing as device memory (test_matmul_orchestration's PosingTorch) with engines that read
raw pointers check the GPU's direct path, where a remembered call runs on the tensor's address."""

import threading

import numpy as np
import pytest

from _torch_helpers import DEVICES, device_of, torch

import mathpy
import mathpy.fft as mfft
from _fake_gpu import host_view, pretend_a_gpu
from _tolerance import assert_fft_close, assert_within, matmul_bound, unit_roundoff
from mathpy import _engines, _packages
from mathpy.host.fft import _cpu
from mathpy.host.fft import _stateless as fft_stateless
from mathpy.host.matmul import _stateless as matmul_stateless
from mathpy.host.matmul import matmul_plan_cache
from test_matmul_orchestration import PointerEngine, PosingTorch

C64, C128, F32, F64 = torch.complex64, torch.complex128, torch.float32, torch.float64
REAL = {C64: F32, C128: F64}


@pytest.fixture(params=DEVICES)
def device(request):
    return device_of(request)


def randn(*shape, dtype=C128, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g).to(device)


def lazy(bit, shape, dtype, device, seed=0):
    """A tensor of ``dtype`` with the lazy ``bit``: "conj" (complex ``x.conj()``) or "neg" (real ``x.conj().imag``)."""
    if bit == "conj":
        view = randn(*shape, dtype=dtype, device=device, seed=seed).conj()
        assert view.is_conj()
    else:
        complex_dtype = C64 if dtype == F32 else C128
        view = randn(*shape, dtype=complex_dtype, device=device, seed=seed).conj().imag
        assert view.is_neg() and view.dtype == dtype
    return view


def host(tensor):
    return tensor.resolve_conj().resolve_neg().cpu().numpy()


def precision(dtype):
    return np.float32 if dtype in (C64, F32) else np.float64


# --- read operands -------------------------------------------------------------------------------------------------

FFT_CASES = [("fft", "conj", C64), ("fft", "conj", C128), ("fft", "neg", F64), ("ifft", "conj", C128),
             ("rfft", "neg", F32), ("rfft", "neg", F64), ("irfft", "conj", C128), ("irfft", "conj", C64),
             ("fftn", "conj", C64), ("fftn", "neg", F64)]


@pytest.mark.parametrize("name, bit, dtype", FFT_CASES)
def test_fft_functions_read_the_resolved_values(device, name, bit, dtype):
    x = lazy(bit, (3, 16), dtype, device)
    got, want = getattr(mfft, name)(x), getattr(torch.fft, name)(x)
    assert got.shape == want.shape and got.dtype == want.dtype and not got.is_conj()
    n = 48 if name == "fftn" else 16
    assert_fft_close(host(got), host(want), precision(dtype), n, f"{name} of a {bit} view", sources=2)
    assert x.is_conj() or x.is_neg()  # the caller's view is left as it was


def test_remembered_calls_never_run_on_a_lazy_tensor(device):
    """A repeated stateless call runs the first call's prepared call on the new tensor's address: a lazy view of the
    same shape (whose address holds the unconjugated values), and then one of another shape, must not reuse it."""
    plain, other = randn(4, 32, device=device), randn(4, 32, device=device, seed=1)
    for x in (plain, plain, other.conj(), other.conj(), randn(2, 8, device=device, seed=2).conj(), plain):
        assert_fft_close(host(mfft.fft(x)), host(torch.fft.fft(x)), np.float64, x.shape[-1], "fft", sources=2)
    assert_fft_close(host(mfft.ifft(plain.conj())), host(torch.fft.ifft(plain.conj())), np.float64, 32, "ifft",
                     sources=2)


def window_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 32]


def test_callback_user_data_with_a_negative_bit(device):
    """User data is read as its values when given; a later call with the same lazy view after its base changed (same
    address, same facts), or with another lazy view, sees the new values: no remembered call keeps an old copy."""
    x = randn(4, 32, device=device, seed=3)
    base = randn(32, device=device, seed=4)
    for step in range(3):
        window = (base if step < 2 else randn(32, device=device, seed=5)).conj().imag
        assert window.is_neg()
        got = mfft.fft(x, prolog=mfft.Callback(window_prolog, data=window))
        assert_fft_close(host(got), host(torch.fft.fft(x * window)), np.float64, 32, f"call {step}", sources=2)
        base.mul_(-3)  # the next call's view of it has other values at the same address


def matmul_expected(a, b, c, alpha, beta, dtype):
    """(exact value, elementwise bound) of ``alpha * a @ b + beta * c`` (+ bias) computed in ``dtype``."""
    a, b, c = host(a), host(b), host(c)
    exact = alpha * (a.astype(np.complex128) @ b.astype(np.complex128)) + beta * c.astype(np.complex128)
    out = np.dtype(str(dtype).split(".")[-1])
    bound = matmul_bound(a, b, out, alpha=alpha, roundings=2, exact=exact) + \
        2 * unit_roundoff(out) * np.abs(beta * c)
    return (exact if out.kind == "c" else exact.real), bound


@pytest.mark.parametrize("bits, dtype, alpha, beta", [
    (("conj", "plain", "plain"), C128, 2 - 1j, 0.5), (("plain", "conj", "conj"), C64, 1.5, 1j),
    (("neg", "neg", "neg"), F64, 2.0, 0.5), (("neg", "plain", "neg"), F32, -1.0, 3.0)])
def test_matmul_reads_the_resolved_values(device, bits, dtype, alpha, beta):
    shapes = [(5, 7), (7, 3), (5, 3)]
    a, b, c = (randn(*shape, dtype=dtype, device=device, seed=i) if bit == "plain" else
               lazy(bit, shape, dtype, device, seed=i) for i, (bit, shape) in enumerate(zip(bits, shapes)))
    want, bound = matmul_expected(a, b, c, alpha, beta, dtype)
    for _ in range(2):  # the second call: the stateless call's remembered-call path
        got = mathpy.matmul(a, b, c, alpha=alpha, beta=beta)
        assert_within(host(got), want, bound, f"matmul {bits}")
        assert_within(host(alpha * a @ b + beta * c), want, bound, "torch itself")  # the bound holds torch too


def test_matmul_epilog_input_with_a_negative_bit(device):
    a, b = randn(6, 4, dtype=F64, device=device), randn(4, 5, dtype=F64, device=device, seed=1)
    bias = lazy("neg", (6,), F64, device, seed=2)
    want, bound = matmul_expected(a, b, bias[:, None].expand(6, 5), 1.0, 1.0, F64)
    for _ in range(2):
        got = mathpy.matmul(a, b, epilog="bias", epilog_inputs={"bias": bias})
        assert_within(host(got), want, bound, "bias epilog")


def test_stateful_fft_and_matmul_keep_the_copy_taken_when_given(device):
    x = randn(3, 16, device=device)
    view = x.conj()
    want = host(torch.fft.fft(view))
    with mfft.FFT(view, axes=[1]) as f:
        f.plan()
        assert_fft_close(host(f.execute()), want, np.float64, 16, "FFT", sources=2)
        x.mul_(2)  # not seen: the FFT reads the resolved copy taken at construction (documented)
        assert_fft_close(host(f.execute()), want, np.float64, 16, "FFT after a write", sources=2)
        f.reset_operand(view)  # a new copy: now it is seen
        assert_fft_close(host(f.execute()), host(torch.fft.fft(view)), np.float64, 16, "FFT reset", sources=2)
    a, b, c = randn(4, 6, device=device), randn(6, 2, device=device, seed=1), randn(4, 2, device=device, seed=2)
    with mathpy.Matmul(a.conj(), b, c.conj(), alpha=2, beta=-1) as mm:
        mm.plan()
        want, bound = matmul_expected(a.conj(), b, c.conj(), 2, -1, C128)
        assert_within(host(mm.execute()), want, bound, "Matmul")
        a2 = randn(4, 6, device=device, seed=3)
        mm.reset_operands(a=a2.conj())
        want, bound = matmul_expected(a2.conj(), b, c.conj(), 2, -1, C128)
        assert_within(host(mm.execute()), want, bound, "Matmul reset")


# --- write targets -------------------------------------------------------------------------------------------------

def written(bit, device):
    """A write target with ``bit`` and the untouched memory behind it (to check nothing was written)."""
    base = torch.zeros(3, 16, dtype=C128, device=device)
    return (base.conj() if bit == "conj" else base.conj().imag), base


@pytest.mark.parametrize("bit, fix", [("conj", "resolve_conj"), ("neg", "resolve_neg")])
def test_out_with_a_lazy_bit_is_refused(device, bit, fix):
    out, base = written(bit, device)
    x = randn(3, 16, device=device) if bit == "conj" else randn(3, 16, dtype=C128, device=device)
    function = mfft.fft if bit == "conj" else (lambda a, out: mfft.irfft(a[:, :9], out=out))
    word = "conjugate" if bit == "conj" else "negative"
    with pytest.raises(ValueError, match=rf"^out: a torch tensor with its {word} bit set .*; pass a resolved tensor \(\.{fix}\(\)\)$"):
        function(x, out=out)
    assert not base.any()


def test_in_place_targets_with_a_lazy_bit_are_refused(device):
    x = randn(3, 16, device=device)
    view = x.conj()
    before = x.clone()
    with pytest.raises(ValueError, match=r"^a: a torch tensor with its conjugate bit set"):
        mfft.fft(view, options={"inplace": True})
    with pytest.raises(ValueError, match=r"^operand: a torch tensor with its conjugate bit set"):
        mfft.FFT(view, options=mfft.FFTOptions(inplace=True))
    with mfft.FFT(x.clone(), options={"inplace": True}) as f:
        with pytest.raises(ValueError, match=r"^reset_operand: operand: a torch tensor with its conjugate bit"):
            f.reset_operand(view)
    a, b = randn(3, 4, device=device), randn(4, 16, device=device, seed=1)
    with pytest.raises(ValueError, match=r"^c: a torch tensor with its conjugate bit set"):
        mathpy.Matmul(a, b, view, options={"inplace": True})
    with mathpy.Matmul(a, b, x.clone(), options={"inplace": True}) as mm:
        with pytest.raises(ValueError, match=r"^c: a torch tensor with its conjugate bit set"):
            mm.reset_operands(c=view)
    assert torch.equal(x, before)
    # read-only uses of the same view stay allowed
    assert_fft_close(host(mfft.fft(view)), host(torch.fft.fft(view)), np.float64, 16, "fft", sources=2)


# --- the package seam ----------------------------------------------------------------------------------------------

def test_torch_package_signals_lazy_tensors():
    package = _packages.get("torch")
    x = randn(4)
    assert package.facts(x)[0] is not None
    for view in (x.conj(), x.conj().imag):
        assert package.facts(view) == (None, 0)
        resolved = package.resolved(view)
        assert not (resolved.is_conj() or resolved.is_neg()) and torch.equal(resolved, view)
        with pytest.raises(ValueError, match="^out: "):
            package.resolved(view, "out")
    assert package.resolved(x, "out") is x
    numpy_array = np.ones(3)
    assert _packages.get("numpy").resolved(numpy_array, "out") is numpy_array


# --- the GPU's direct path, on the CPU -----------------------------------------------------------------------------

class PointerFFT:
    """A stand-in for cuFFT that transforms the memory at the addresses it is given (with the CPU engine)."""

    def __init__(self, transform, *, execution, prolog=None, epilog=None, allocator=None):
        assert prolog is None and epilog is None
        self.transform, self.stream, self.freed, self.calls = transform, allocator.stream, False, []
        self.lock = threading.RLock()
        self.workspace_bytes = 0
        self._cpu = _cpu.CPUEngine(transform, execution=mathpy.ExecutionCPU())

    def execute(self, input_ptr, output_ptr, direction, stream):
        t = self.transform
        self.calls.append(input_ptr)
        x = host_view(input_ptr, t.input_dtype, t.input_shape, t.input_strides)
        y = host_view(output_ptr, t.output_dtype, t.output_shape, t.output_strides)
        self._cpu.execute(x.copy() if input_ptr == output_ptr else x, y, direction, None)

    def free(self):
        self.freed = True


@pytest.fixture
def posing_gpu(monkeypatch):
    """torch CPU tensors posing as cuda:0 tensors, engines that read raw pointers as cuFFT and cuBLASLt would."""
    pretend_a_gpu(monkeypatch)
    mfft.plan_cache_clear()
    matmul_plan_cache.clear()
    fft_stateless.forget()
    matmul_stateless.forget()
    with _packages.use(PosingTorch(), device_package_name="torch"), _engines.use("fft", "cuda", PointerFFT), \
            _engines.use("matmul", "cuda", PointerEngine):
        yield
    mfft.plan_cache_clear()  # their prepared calls read host memory posing as device memory
    matmul_plan_cache.clear()
    fft_stateless.forget()
    matmul_stateless.forget()


def test_direct_path_declines_lazy_tensors(posing_gpu):
    x = randn(4, 32)
    for _ in range(2):
        got = mfft.fft(x)
        assert_fft_close(host(got), host(torch.fft.fft(x)), np.float64, 32, "fft", sources=2)
    assert fft_stateless.remembered() == 1  # the direct path is in use
    for view in (x.conj(), randn(4, 32, seed=1).conj()):
        assert_fft_close(host(mfft.fft(view)), host(torch.fft.fft(view)), np.float64, 32, "fft of a view", sources=2)
    assert fft_stateless.remembered() == 1
    a, b, c = randn(5, 7), randn(7, 3, seed=1), randn(5, 3, seed=2)
    for operands in [(a, b, c), (a, b, c), (a.conj(), b, c), (a, b.conj(), c), (a, b, c.conj()),
                     (a.conj(), b.conj(), c.conj())]:
        want, bound = matmul_expected(*operands, 2, 0.5, C128)
        assert_within(host(mathpy.matmul(*operands, alpha=2, beta=0.5)), want, bound, "matmul")
    assert matmul_stateless.remembered() == 1
    a, b = a.real.contiguous(), b.real.contiguous()
    for seed in (3, 3, 4, 5):  # a plain bias (remembered), then two lazy ones of other values
        bias = randn(5, dtype=F64, seed=seed) if seed == 3 else lazy("neg", (5,), F64, "cpu", seed=seed)
        want, bound = matmul_expected(a, b, bias[:, None].expand(5, 3), 1.0, 1.0, F64)
        assert_within(host(mathpy.matmul(a, b, epilog="bias", epilog_inputs={"bias": bias})), want, bound, "bias")
    assert matmul_stateless.remembered() == 2
