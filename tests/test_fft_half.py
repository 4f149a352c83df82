"""Half-precision FFTs (float16 / torch's complex32) on the CPU: the dtype mapping, the refusals (exact messages),
and the GPU code path of mathpy.fft.FFT and compat nvmath run against the emulated cuFFT (tests/_cufft_emulator.py)
with torch CPU tensors posing as device tensors. cuFFT's own half-precision arithmetic is checked on a GPU by
tests/test_fft_half_gpu.py."""

import ctypes
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mathpy.compat.nvmath as nvmath  # noqa: E402
import mathpy.fft as mfft  # noqa: E402
from _cufft_emulator import emulated_cufft  # noqa: E402,F401  (the fixture)
from _fake_gpu import pretend_a_gpu  # noqa: E402
from _tolerance import assert_fft_close  # noqa: E402
from mathpy import _operands, _packages  # noqa: E402
from mathpy._dtypes import COMPLEX32, dtype_name  # noqa: E402
from mathpy._packages._torch import TO_NUMPY, TO_TORCH  # noqa: E402
from mathpy.bindings._types import DataType  # noqa: E402
from mathpy.host.fft import _stateless  # noqa: E402
from mathpy.host.fft._fft import plan_cache  # noqa: E402
from test_matmul_orchestration import PosingTorch  # noqa: E402

warnings.filterwarnings("ignore", "ComplexHalf support is experimental")  # torch's, at the first chalf tensor
RNG = np.random.default_rng(11)


def chalf(values):
    """A complex32 tensor of complex ``values`` (rounded to float16 parts)."""
    values = np.asarray(values)
    pairs = np.stack([values.real, values.imag], -1).astype(np.float16)
    return torch.view_as_complex(torch.from_numpy(pairs).float()).to(torch.complex32)


def wide(tensor):
    """A tensor's exact values in double precision (complex128 for complex32)."""
    if tensor.dtype == torch.complex32:
        parts = torch.view_as_real(tensor).numpy().astype(np.float64)
        return parts[..., 0] + 1j * parts[..., 1]
    return tensor.numpy().astype(np.float64)


# --- the dtype ---------------------------------------------------------------------------------------------------

def test_complex32_is_one_structured_dtype_exchanged_with_torch():
    assert TO_NUMPY[torch.complex32] == COMPLEX32 and TO_TORCH[COMPLEX32] == torch.complex32
    assert COMPLEX32.itemsize == 4 and dtype_name(COMPLEX32) == "complex32"
    x = chalf(RNG.standard_normal((4, 6)) + 1j * RNG.standard_normal((4, 6)))[:, ::2]
    op = _operands.wrap_operand(x)
    assert op.dtype == COMPLEX32 and op.strides == (6, 2) and op.package == "torch"
    host = op.numpy()  # a view of the tensor's memory as (float16, float16) pairs
    np.testing.assert_array_equal(host["real"].astype(np.float64) + 1j * host["imag"], wide(x))
    back = _packages.get("torch").from_host(np.ascontiguousarray(host))
    assert back.dtype == torch.complex32 and torch.equal(torch.view_as_real(back), torch.view_as_real(x))


def test_the_stateless_functions_keep_numpys_rule():
    """float16 in single precision (NumPy 2), and complex32, which NumPy lacks, in complex64 likewise."""
    x = RNG.standard_normal((4, 16))
    got = mfft.fft(torch.from_numpy(x).half())
    assert got.dtype == torch.complex64
    c = chalf(x + 1j * x[::-1])
    got = mfft.fft(c)
    assert got.dtype == torch.complex64
    np.testing.assert_allclose(got.numpy(), np.fft.fft(wide(c)), rtol=1e-5, atol=1e-4)
    assert mfft.irfft(c).dtype == torch.float32


# --- refusals ----------------------------------------------------------------------------------------------------

def test_cpu_execution_is_refused():
    for x in (torch.ones(8, dtype=torch.float16), chalf(np.ones(8))):
        with pytest.raises(TypeError, match=r"half precision FFTs \(float16 / complex32\) run only on the GPU "
                                            r"\(execution='cuda'\); use float32 on the CPU"):
            mfft.FFT(x)
    with pytest.raises(TypeError, match="run only on the GPU"):
        nvmath.fft.rfft(np.ones(8, np.float16))  # nvmath-python's CPU FFT takes no half precision either


def test_numpy_and_cupy_operands_are_refused_on_the_gpu(monkeypatch):
    """NumPy and CuPy have no complex32 for the result (nvmath-python 1.0 has none for them either)."""
    pretend_a_gpu(monkeypatch)
    with pytest.raises(TypeError, match=r"take torch tensors: numpy has no complex32 dtype for the complex result of "
                                        r"a R2C transform; pass a torch tensor"):
        mfft.FFT(np.ones(8, np.float16), execution="cuda")
    with pytest.raises(TypeError, match=r"take torch tensors: numpy has no complex32 dtype for the complex data of a "
                                        r"C2C transform"):
        mfft.FFT(np.zeros(8, COMPLEX32), execution="cuda")


@pytest.fixture
def torch_gpu(emulated_cufft, monkeypatch):  # noqa: F811
    """One "GPU": torch CPU tensors pose as its tensors, the emulated cuFFT (real CUFFTEngine) transforms them; every
    tensor the API allocates is registered with the emulator, which checks each address it is handed."""
    class Registered(PosingTorch):
        def _record(self, tensor):
            storage = tensor.untyped_storage()
            emulated_cufft.buffers.append(np.frombuffer((ctypes.c_uint8 * storage.nbytes()).from_address(
                storage.data_ptr()), np.uint8))
            return tensor

        def _empty(self, *args):
            return self._record(super()._empty(*args))

        def _empty_ordered(self, *args):
            return self._record(super()._empty_ordered(*args))

        def _maker(self, *args):
            make = super()._maker(*args)
            return lambda: self._record(make())

    package = Registered()
    plan_cache.clear()
    _stateless.forget()
    with _packages.use(package, device_package_name="torch"):
        yield package, emulated_cufft
    plan_cache.clear()
    _stateless.forget()


def operand(gpu, tensor):
    """``tensor`` as the caller's device tensor (registered with the emulator)."""
    return gpu[0]._record(tensor)


@pytest.mark.parametrize("make, options, match", [
    (lambda: torch.ones(4, 100, dtype=torch.float16), None, "axis 1 has length 100"),
    (lambda: chalf(np.ones((6, 8))), None, "axis 0 has length 6"),
    (lambda: chalf(np.ones((4, 9))), {"fft_type": "C2R", "last_axis_parity": "odd"}, "axis 1 has length 17"),
])
def test_non_power_of_two_lengths_are_refused_before_any_work(torch_gpu, make, options, match):
    gpu, emulator = torch_gpu, torch_gpu[1]
    with pytest.raises(ValueError, match=r"half precision \(float16 / complex32\) FFTs need power-of-two lengths \(cuFFT "
                                         r"has no other half-precision sizes\): " + match +
                                         r"; allowed are 1, 2, 4, 8, 16, \.\.\. Use float32, or pad to a power of two"):
        mfft.FFT(operand(gpu, make()), options=options)
    assert not emulator.plans


def test_the_even_c2r_of_the_same_operand_is_a_power_of_two_and_runs(torch_gpu):
    """complex32 (4, 9) as C2R with even parity: 2 * (9 - 1) = 16 real points, allowed (odd parity: 17, above)."""
    spectrum = chalf(np.fft.rfftn(RNG.standard_normal((4, 16))) / 8)
    with mfft.FFT(operand(torch_gpu, spectrum), options={"fft_type": "C2R"}) as f:
        f.plan()
        real = f.execute()
        kind, *_, in_dtype, _, _, out_dtype, _ = torch_gpu[1].plans[max(torch_gpu[1].plans)]
    assert (kind, in_dtype, out_dtype) == ("C2R", COMPLEX32, np.float16)
    assert real.dtype == torch.float16 and tuple(real.shape) == (4, 16)
    assert_fft_close(wide(real), np.fft.irfftn(wide(spectrum), s=(4, 16)) * 64, np.float16, 64, "C2R of 4 x 16")


def test_a_halved_axis_of_length_one_is_refused(torch_gpu):
    with pytest.raises(ValueError, match=r"a half-precision R2C transform needs its halved axis 1 longer than 1"):
        mfft.FFT(operand(torch_gpu, torch.ones(8, 1, dtype=torch.float16)), axes=(0, 1))


def test_callbacks_are_refused_at_plan_before_anything_compiles(torch_gpu):
    def epilog(data_out, offset, value, user_info, unused):
        data_out[offset] = value

    def prolog(data_in, offset, user_info, unused):
        return data_in[offset]

    with mfft.FFT(operand(torch_gpu, chalf(np.ones((4, 8))))) as f:
        with pytest.raises(ValueError, match=r"half-precision \(float16 / complex32\) FFTs take no epilog: cuFFT has no "
                                             r"half-precision callback types; use float32 / complex64 operands"):
            f.plan(epilog=epilog)
        with pytest.raises(ValueError, match="take no prolog"):
            f.plan(prolog=mfft.Callback(prolog, data=np.ones(1, np.float32)))
    assert not torch_gpu[1].plans


# --- the GPU path against the emulated cuFFT ---------------------------------------------------------------------

def _n(shape, axes):
    return math.prod(shape[a] for a in axes)


@pytest.mark.parametrize("shape, axes", [((8, 64), (1,)), ((16, 32), (0, 1)), ((64, 8), (0,)), ((4, 8, 16), (1, 2))])
def test_r2c_c2c_c2r_in_half_precision(torch_gpu, shape, axes):
    emulator = torch_gpu[1]
    x = torch.from_numpy(RNG.standard_normal(shape)).half()
    with mfft.FFT(operand(torch_gpu, x), axes=axes) as f:
        f.plan()
        y = f.execute()
        kind, *_, in_dtype, _, _, out_dtype, _ = emulator.plans[max(emulator.plans)]
    assert y.dtype == torch.complex32 and f.output_dtype == COMPLEX32
    assert (kind, in_dtype, out_dtype) == ("R2C", np.float16, COMPLEX32)
    n = _n(shape, axes)
    assert_fft_close(wide(y), np.fft.rfftn(wide(x), axes=axes), np.float16, n, "R2C")

    c = chalf(RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape))
    with mfft.FFT(operand(torch_gpu, c), axes=axes) as f:
        f.plan()
        forward, inverse = f.execute(), f.execute(direction="inverse")
    assert forward.dtype == inverse.dtype == torch.complex32
    assert_fft_close(wide(forward), np.fft.fftn(wide(c), axes=axes), np.float16, n, "C2C forward")
    assert_fft_close(wide(inverse), np.fft.ifftn(wide(c), axes=axes) * n, np.float16, n, "C2C inverse")

    spectrum = chalf(np.fft.rfftn(RNG.standard_normal(shape), axes=axes) / math.sqrt(n))
    with mfft.FFT(operand(torch_gpu, spectrum), axes=axes, options={"fft_type": "C2R"}) as f:
        f.plan()
        real = f.execute()
        kind, *_, in_dtype, _, _, out_dtype, _ = emulator.plans[max(emulator.plans)]
    assert (kind, in_dtype, out_dtype) == ("C2R", COMPLEX32, np.float16)
    assert real.dtype == torch.float16 and tuple(real.shape) == shape
    want = np.fft.irfftn(wide(spectrum), s=[shape[a] for a in axes], axes=axes) * n
    assert_fft_close(wide(real), want, np.float16, n, "C2R")


def test_the_real_side_reaches_cufft_at_unit_stride(torch_gpu):
    """cuFFT's half-precision R2C reads (C2R writes) its real side only at unit stride: a transform along a strided
    axis is staged with that axis innermost instead of being refused by the engine."""
    x = torch.from_numpy(RNG.standard_normal((64, 8))).half()
    f = mfft.FFT(operand(torch_gpu, x), axes=(0,))
    assert f.input_layout == ((64, 8), (1, 64)) and f.prepared_call is None
    f.plan()
    assert f.prepared_call.engine.params.istride == 1
    assert_fft_close(wide(f.execute()), np.fft.rfft(wide(x), axis=0), np.float16, 64, "R2C along axis 0")
    f.free()


def test_plan_types_are_cuda_half_types(torch_gpu, monkeypatch):
    """cufftXtMakePlanMany gets CUDA_R_16F (2) for the real side, CUDA_C_16F (6) for the complex side and as the
    execution type."""
    calls = []
    emulator = torch_gpu[1]
    make = emulator.lib.cufftXtMakePlanMany
    monkeypatch.setattr(emulator.lib, "cufftXtMakePlanMany", lambda *a: (calls.append(a), make(*a))[1])
    with mfft.FFT(operand(torch_gpu, torch.ones(4, 16, dtype=torch.float16))) as f:
        f.plan()
    (args,) = calls
    assert (args[6], args[10], args[13]) == (DataType.R_16F, DataType.C_16F, DataType.C_16F) == (2, 6, 6)


def test_reset_operand_and_execute_loop(torch_gpu):
    shape = (8, 32)
    first = chalf(RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape))
    with mfft.FFT(operand(torch_gpu, first), axes=(1,)) as f:
        f.plan()
        for seed in range(3):
            rng = np.random.default_rng(seed)
            c = operand(torch_gpu, chalf(rng.standard_normal(shape) + 1j * rng.standard_normal(shape)))
            f.reset_operand(c)
            assert_fft_close(wide(f.execute()), np.fft.fft(wide(c), axis=1), np.float16, 32, f"loop {seed}")
        with pytest.raises(ValueError, match="dtype"):
            f.reset_operand(operand(torch_gpu, torch.zeros(shape, dtype=torch.complex64)))


def test_compat_nvmath_half_precision_goes_through_the_stateful_fft(torch_gpu):
    """nvmath.fft.rfft / fft / ifft / irfft of torch half tensors compute in half precision (complex32 results), as
    nvmath-python does on the GPU; mathpy's own stateless functions would promote."""
    x = operand(torch_gpu, torch.from_numpy(RNG.standard_normal((4, 16))).half())
    y = nvmath.fft.rfft(x, axes=[1])
    assert y.dtype == torch.complex32
    assert_fft_close(wide(y), np.fft.rfft(wide(x), axis=1), np.float16, 16, "rfft")
    c = operand(torch_gpu, chalf(RNG.standard_normal((4, 16)) + 1j * RNG.standard_normal((4, 16))))
    assert_fft_close(wide(nvmath.fft.fft(c)), np.fft.fft2(wide(c)), np.float16, 64, "fft")
    assert_fft_close(wide(nvmath.fft.ifft(c, axes=[1])), np.fft.ifft(wide(c), axis=1) * 16, np.float16, 16, "ifft")
    spectrum = operand(torch_gpu, chalf(np.fft.rfft(RNG.standard_normal((4, 16)), axis=1) / 4))
    real = nvmath.fft.irfft(spectrum, axes=[1])
    assert real.dtype == torch.float16 and tuple(real.shape) == (4, 16)
    assert_fft_close(wide(real), np.fft.irfft(wide(spectrum), n=16, axis=1) * 16, np.float16, 16, "irfft")
    with nvmath.fft.FFT(c, axes=[1]) as f:
        assert f.result_data_type == "complex32"
    with pytest.raises(ValueError, match="power-of-two lengths"):
        nvmath.fft.fft(operand(torch_gpu, chalf(np.ones((4, 12)))), axes=[1])


def test_matmul_names_complex32_in_its_refusal():
    """complex32 tensors now wrap (as COMPLEX32); matmul refuses them under their own name, not NumPy's "void32"."""
    import mathpy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "ComplexHalf support is experimental"
        a = torch.zeros(4, 4, dtype=torch.complex32)
    with pytest.raises(TypeError, match="operand a has dtype complex32, which matmul does not support"):
        mathpy.matmul(a, a)
