"""nvmath-python FFT programs run unchanged through ``import mathpy.compat.nvmath as nvmath``.

Each test is written as an nvmath-python user writes it (the examples of nvmath's documentation are the model) and
compares with NumPy. ``xp`` runs it on every array package present: NumPy and torch on the CPU here; CuPy and torch on
CUDA on a GPU machine (those are gpu-marked). Callbacks compiled to LTO-IR and the other GPU-only forms are in
``test_compat_nvmath_gpu.py``.
"""

import logging
import math

import numpy as np
import pytest

import mathpy
import mathpy.compat.nvmath as nvmath
from _tolerance import assert_fft_close


def _rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _close(actual, expected, n):
    """|actual - expected| within the FFT's error bound: a few ulps of the dtype times log2 of the transform size,
    relative to the largest magnitude (a transform's rounding error scales with its norm)."""
    expected = np.asarray(expected)
    eps = np.finfo(np.result_type(expected.dtype, np.float32)).eps
    scale = max(float(np.max(np.abs(expected))), 1.0)
    tolerance = 8 * eps * max(math.log2(max(n, 2)), 1) * scale
    error = float(np.max(np.abs(np.asarray(actual) - expected)))
    assert error <= tolerance, f"max error {error:.3g} > {tolerance:.3g}"


# --- stateless functions ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_fft_ifft_roundtrip_over_all_axes_is_unnormalised(xp, dtype):
    x = _rand((4, 6, 8), dtype)
    a = xp.asarray(x)
    r = nvmath.fft.fft(a)
    assert xp.is_native(r)
    _close(xp.to_numpy(r), np.fft.fftn(x), 4 * 6 * 8)
    back = nvmath.fft.ifft(r)
    _close(xp.to_numpy(back), x * (4 * 6 * 8), 4 * 6 * 8)  # nvmath's inverse is unnormalised
    assert xp.to_numpy(back).dtype == dtype


def test_fft_over_chosen_axes_batches_the_others(xp):
    x = _rand((6, 5, 3), np.complex64)
    r = nvmath.fft.fft(xp.asarray(x), axes=(0, 1))
    _close(xp.to_numpy(r), np.fft.fftn(x, axes=(0, 1)), 30)
    r = nvmath.fft.fft(xp.asarray(x), axes=[-1])
    _close(xp.to_numpy(r), np.fft.fft(x, axis=-1), 3)


@pytest.mark.parametrize("direction", ["inverse", "INVERSE", nvmath.fft.FFTDirection.INVERSE, 1])
def test_direction_argument_of_the_functions(xp, direction):
    x = _rand((8, 16), np.complex64)
    r = nvmath.fft.fft(xp.asarray(x), direction=direction)
    _close(xp.to_numpy(r), np.fft.ifftn(x) * x.size, x.size)
    r = nvmath.fft.ifft(xp.asarray(x), direction=nvmath.fft.FFTDirection.FORWARD)
    _close(xp.to_numpy(r), np.fft.fftn(x), x.size)


def test_direction_none_is_the_types_own_direction(xp):
    """nvmath-python's examples 15-18 pass ``direction=None`` through: the transform type's default (forward for C2C,
    also for ifft, whose own default None replaces), as nvmath's FFT.execute(direction=None)."""
    x = _rand((8, 16), np.complex64)
    for function in (nvmath.fft.fft, nvmath.fft.ifft):
        r = function(xp.asarray(x), axes=[1], direction=None)
        assert_fft_close(xp.to_numpy(r), np.fft.fft(x.astype(np.complex128), axis=1), np.float32, 16, "C2C")
    with nvmath.fft.FFT(xp.asarray(x)) as f:
        f.plan(direction=None)
        assert_fft_close(xp.to_numpy(f.execute(direction=None)), np.fft.fftn(x.astype(np.complex128)), np.float32,
                         x.size, "stateful")


def test_bad_direction_is_a_value_error(xp):
    with pytest.raises(ValueError):
        nvmath.fft.fft(xp.asarray(_rand((8,), np.complex64)), direction="sideways")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parity, n", [("even", 10), ("odd", 11)])
def test_rfft_irfft_with_last_axis_parity(xp, dtype, parity, n):
    x = _rand((3, 4, n), dtype)
    spectrum = nvmath.fft.rfft(xp.asarray(x), axes=(1, 2))
    assert tuple(spectrum.shape) == (3, 4, n // 2 + 1)
    _close(xp.to_numpy(spectrum), np.fft.rfftn(x, axes=(1, 2)), 4 * n)
    options = nvmath.fft.FFTOptions(last_axis_parity=parity)
    back = nvmath.fft.irfft(spectrum, axes=(1, 2), options=options)
    assert tuple(back.shape) == x.shape and xp.to_numpy(back).dtype == dtype
    _close(xp.to_numpy(back), x * (4 * n), 4 * n)


def test_irfft_odd_parity_of_a_4_6_7_half_spectrum(xp):
    """The case issue 11 quotes: a (4, 6, 7) half-spectrum with parity "odd" is a (4, 6, 13) real signal."""
    x = _rand((4, 6, 13), np.float64)
    spectrum = np.fft.rfftn(x)
    assert spectrum.shape == (4, 6, 7)
    back = nvmath.fft.irfft(xp.asarray(spectrum), options={"last_axis_parity": "odd"})
    assert tuple(back.shape) == (4, 6, 13)
    _close(xp.to_numpy(back), x * x.size, x.size)
    even = nvmath.fft.irfft(xp.asarray(spectrum))
    assert tuple(even.shape) == (4, 6, 12)


def test_inplace_fft_returns_the_operand(xp):
    x = _rand((4, 8), np.complex128)
    a = xp.asarray(x.copy())
    r = nvmath.fft.fft(a, options=nvmath.fft.FFTOptions(inplace=True))
    assert r is a
    _close(xp.to_numpy(a), np.fft.fftn(x), 32)


def test_options_as_dict_and_blocking(xp):
    x = _rand((16,), np.complex64)
    r = nvmath.fft.fft(xp.asarray(x), options={"blocking": True})
    _close(xp.to_numpy(r), np.fft.fft(x), 16)


@pytest.mark.parametrize("execution", ["cpu", {"name": "cpu", "num_threads": 1}, nvmath.fft.ExecutionCPU(),
                                       nvmath.fft.ExecutionCPU(num_threads=2)])
def test_cpu_execution_spellings(execution):
    x = _rand((8, 8), np.complex64)
    r = nvmath.fft.fft(x, execution=execution)
    assert isinstance(r, np.ndarray)
    _close(r, np.fft.fftn(x), 64)


def test_python_callbacks_run_on_the_cpu(xp):
    """mathpy's extension of nvmath's callbacks: the Python function itself, with user data, on any execution
    space (nvmath-python runs callbacks only on the GPU, from LTO-IR)."""
    def scale_prolog(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset]

    def double_epilog(data_out, offset, value, user_info, unused):
        data_out[offset] = value * np.float32(2)

    x = _rand((4, 8), np.complex64)
    window = np.hanning(8).astype(np.float32)
    r = nvmath.fft.fft(xp.asarray(x), axes=[1], prolog=mathpy.fft.Callback(scale_prolog, data=np.tile(window, (4, 1))),
                       epilog=double_epilog)
    _close(xp.to_numpy(r), 2 * np.fft.fft(x * window, axis=1), 8)


# --- the stateful FFT ---------------------------------------------------------------------------------------------

def test_stateful_fft_plan_execute_both_directions_reset_operand(xp):
    x, y = _rand((4, 8, 8), np.complex64, 1), _rand((4, 8, 8), np.complex64, 2)
    a, b = xp.asarray(x), xp.asarray(y)
    with nvmath.fft.FFT(a, axes=(1, 2)) as f:
        f.plan()
        r1 = f.execute()
        _close(xp.to_numpy(r1), np.fft.fftn(x, axes=(1, 2)), 64)
        r2 = f.execute(direction=nvmath.fft.FFTDirection.INVERSE)
        _close(xp.to_numpy(r2), np.fft.ifftn(x, axes=(1, 2)) * 64, 64)
        f.reset_operand(b)
        r3 = f.execute(direction="forward")
        _close(xp.to_numpy(r3), np.fft.fftn(y, axes=(1, 2)), 64)
        assert f.fft_abstract_type == "C2C" and f.axes == (1, 2)


def test_stateful_r2c_and_c2r_with_odd_parity(xp):
    x = _rand((5, 9), np.float64)
    with nvmath.fft.FFT(xp.asarray(x), axes=[1]) as f:
        f.plan()
        spectrum = f.execute()
    assert tuple(spectrum.shape) == (5, 5)
    options = {"fft_type": "C2R", "last_axis_parity": "odd"}
    with nvmath.fft.FFT(spectrum, axes=[1], options=options) as f:
        f.plan()
        back = f.execute()
        assert f.get_output_layout()[0] == (5, 9)
        f.reset_operand(spectrum)  # nvmath needs a reset before executing a C2R again
        again = f.execute()
    _close(xp.to_numpy(back), x * 9, 9)
    _close(xp.to_numpy(again), x * 9, 9)


def test_plan_twice_is_a_no_op_and_layouts(xp):
    x = _rand((3, 16), np.complex128)
    f = nvmath.fft.FFT(xp.asarray(x), axes=[1])
    f.plan()
    f.plan()
    assert f.get_input_layout() == ((3, 16), (16, 1))
    shape, strides = f.get_output_layout()
    assert shape == (3, 16)
    _close(xp.to_numpy(f.execute()), np.fft.fft(x, axis=1), 16)
    f.free()
    f.free()  # idempotent


def test_in_place_stateful_writes_into_the_operand(xp):
    x = _rand((2, 16), np.complex64)
    a = xp.asarray(x.copy())
    with nvmath.fft.FFT(a, axes=[1], options=nvmath.fft.FFTOptions(inplace=True)) as f:
        f.plan()
        assert f.execute() is a
    _close(xp.to_numpy(a), np.fft.fft(x, axis=1), 16)


def test_per_object_logger_receives_the_messages():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("test_compat_nvmath_fft")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Keep())
    logger.propagate = False
    x = _rand((8,), np.complex64)
    with nvmath.fft.FFT(x, options={"logger": logger}) as f:
        f.plan()
        f.execute()
    assert any("C2C" in message for message in records)


# --- errors, as nvmath raises them --------------------------------------------------------------------------------

def test_wrong_dtypes_for_each_function(xp):
    real, complex_ = xp.asarray(_rand((8,), np.float32)), xp.asarray(_rand((8,), np.complex64))
    with pytest.raises(ValueError, match="complex"):
        nvmath.fft.fft(real)
    with pytest.raises(ValueError, match="complex"):
        nvmath.fft.ifft(real)
    with pytest.raises(RuntimeError, match="real input"):
        nvmath.fft.rfft(complex_)
    with pytest.raises(ValueError, match="complex"):
        nvmath.fft.irfft(real)
    with pytest.raises(ValueError, match="int"):
        nvmath.fft.FFT(xp.asarray(np.arange(8)))


def test_axes_rules():
    x = _rand((2, 2, 2, 2), np.complex64)
    with pytest.raises(ValueError, match="> 3"):
        nvmath.fft.fft(x)
    with pytest.raises(ValueError, match="up to 3D"):
        nvmath.fft.fft(x, axes=(0, 1, 2, 3))
    with pytest.raises(ValueError, match="out of bounds"):
        nvmath.fft.fft(x, axes=(4,))
    with pytest.raises(ValueError, match="scalar"):
        nvmath.fft.FFT(np.complex64(1))
    r = nvmath.fft.fft(x, axes=(1, 2, 3))  # four dimensions are fine with three axes
    _close(r, np.fft.fftn(x, axes=(1, 2, 3)), 8)


def test_options_are_checked():
    with pytest.raises(ValueError, match="fft_type"):
        nvmath.fft.FFTOptions(fft_type="R2R")
    with pytest.raises(ValueError, match="result_layout"):
        nvmath.fft.FFTOptions(result_layout="dense")
    with pytest.raises(ValueError, match="blocking"):
        nvmath.fft.FFTOptions(blocking=False)
    with pytest.raises(TypeError):
        nvmath.fft.fft(_rand((4,), np.complex64), options={"inplce": True})
    with pytest.raises(TypeError):
        nvmath.fft.fft(_rand((4,), np.complex64), options=3)


def test_stateful_errors(xp):
    x = _rand((4, 8), np.complex64)
    f = nvmath.fft.FFT(xp.asarray(x))
    with pytest.raises(RuntimeError):
        f.execute()  # before plan()
    f.plan()
    with pytest.raises(ValueError):
        f.reset_operand(xp.asarray(_rand((4, 9), np.complex64)))
    other = np.asarray(x) if xp.name != "numpy" else __import__("pytest").importorskip("torch").from_numpy(x)
    with pytest.raises(TypeError, match="package"):
        f.reset_operand(other)
    f.free()
    with pytest.raises(nvmath.fft.InvalidFFTState):
        f.execute()
    with pytest.raises(nvmath.fft.InvalidFFTState):
        f.plan()


def test_direction_must_suit_the_fft_type(xp):
    x = _rand((8,), np.float32)
    with nvmath.fft.FFT(xp.asarray(x)) as f:
        with pytest.raises(ValueError, match="INVERSE"):
            f.plan(direction="inverse")
        f.plan()
        with pytest.raises(ValueError, match="INVERSE"):
            f.execute(direction=nvmath.fft.FFTDirection.INVERSE)


def test_lto_ir_callbacks_are_refused_on_the_cpu():
    x = _rand((8,), np.complex64)
    with pytest.raises(ValueError, match="GPU"):
        nvmath.fft.fft(x, epilog={"ltoir": b"\x00" * 16, "data": 0})
    with pytest.raises(ValueError, match="size"):
        nvmath.fft.DeviceCallable(ltoir=1234)


def test_unsupported_layout_error_is_mathpys_with_nvmaths_attributes():
    assert nvmath.fft.UnsupportedLayoutError is mathpy.UnsupportedLayoutError
    x = np.zeros((8, 6, 4), np.complex64)[::2]
    with pytest.raises(nvmath.fft.UnsupportedLayoutError) as info:
        with nvmath.fft.FFT(x, axes=[1], options={"inplace": True}) as f:
            f.plan()
    assert hasattr(info.value, "permutation") and hasattr(info.value, "axes") and info.value.message


def test_compile_prolog_takes_nvmaths_compute_capability_string():
    pytest.importorskip("numba.cuda")

    def prolog(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset]

    ltoir = nvmath.fft.compile_prolog(prolog, "complex64", "float32", compute_capability="90")
    assert isinstance(ltoir, bytes) and len(ltoir) > 100
    with pytest.raises(ValueError, match="compute capability"):
        nvmath.fft.compile_epilog(prolog, "complex64", "float32", compute_capability=90)


# --- the features issue 11 added to mathpy's FFT, through nvmath's names ----------------------------------------------

def test_release_operand_then_reset(xp):
    x = _rand((4, 8), np.complex64)
    with nvmath.fft.FFT(xp.asarray(x)) as f:
        f.plan()
        f.release_operand()
        with pytest.raises(RuntimeError, match="released"):
            f.execute()
        f.reset_operand(xp.asarray(x))
        _close(xp.to_numpy(f.execute()), np.fft.fftn(x), 32)


@pytest.mark.parametrize("how", ["no argument", "None"])
def test_reset_operand_without_an_operand_releases_it(xp, how):
    """nvmath-python's example 14 (its FFT cache) calls ``reset_operand(stream=...)`` after each execute: the operand
    is released, and the next use gives a new one."""
    x, x2 = _rand((4, 8), np.complex64), _rand((4, 8), np.complex64)
    with nvmath.fft.FFT(xp.asarray(x)) as f:
        f.plan()
        f.execute()
        f.reset_operand() if how == "no argument" else f.reset_operand(None, stream=None)
        with pytest.raises(RuntimeError, match="released"):
            f.execute()
        f.reset_operand(xp.asarray(x2))
        assert_fft_close(xp.to_numpy(f.execute()), np.fft.fftn(x2.astype(np.complex128)), np.float32, 32, "reset")


def test_create_key_is_hashable_and_equal_for_equal_problems(xp):
    a, b = xp.asarray(_rand((4, 8), np.complex64, 1)), xp.asarray(_rand((4, 8), np.complex64, 2))
    key = nvmath.fft.FFT.create_key(a, axes=[1])
    assert key == nvmath.fft.FFT.create_key(b, axes=[1]) and hash(key) == hash(nvmath.fft.FFT.create_key(b, axes=[1]))
    assert key != nvmath.fft.FFT.create_key(a, axes=[0])
    assert key != nvmath.fft.FFT.create_key(a, axes=[1], options={"fft_type": "C2R"})
    assert key == nvmath.fft.FFT.create_key(a, axes=[1], options={"inplace": True})  # one cuFFT plan serves both
    with nvmath.fft.FFT(a, axes=[1]) as f:
        with pytest.raises(RuntimeError, match="before plan"):
            f.get_key()
        f.plan()
        assert f.get_key() == key
    assert nvmath.fft.estimate_workspace_size(key) == (0 if xp.device == "cpu" else
                                                       nvmath.fft.estimate_workspace_size(key))
    with pytest.raises(ValueError, match="technique"):
        nvmath.fft.estimate_workspace_size(key, technique="guess")


@pytest.mark.parametrize("layout", ["natural", "optimized"])
def test_result_layout(xp, layout):
    """An FFT over axis 0 of a C-ordered (8, 6) operand: "natural" keeps the operand's axis order, "optimized" (the
    default, as in nvmath) makes the transformed axis the fastest-varying one."""
    x = _rand((8, 6), np.complex64)
    options = {"result_layout": layout} if layout == "natural" else None
    with nvmath.fft.FFT(xp.asarray(x), axes=[0], options=options) as f:
        f.plan()
        shape, strides = f.get_output_layout()
        r = f.execute()
    assert shape == (8, 6)
    assert strides == ((6, 1) if layout == "natural" else (1, 8))
    _close(xp.to_numpy(r), np.fft.fft(x, axis=0), 8)


def test_execute_release_workspace_and_streams_on_the_cpu():
    x = _rand((8, 8), np.complex64)
    with nvmath.fft.FFT(x, options={"result_layout": "natural"}) as f:
        f.plan(stream=None)
        f.reset_operand(x, stream=None)
        _close(f.execute(release_workspace=True), np.fft.fftn(x), 64)  # nothing to release on the CPU


# --- a host operand transformed in place on the GPU (nvmath-python's example 08), on the stand-in GPU ------------------

@pytest.mark.parametrize("layout", ["C", "F"])
def test_inplace_numpy_fft_with_cuda_execution_writes_back_into_the_array(layout, monkeypatch):
    """The operand is copied to the GPU, transformed there in place and copied back into the same array, which is
    returned: nvmath's ``b = fft(a, options={"inplace": True}, execution="cuda"); b is a``."""
    from test_fft_fake_gpu import FakeCUFFTEngine, FakeCuPy, pretend_a_gpu
    from mathpy import _engines, _packages
    import mathpy.fft as mfft

    pretend_a_gpu(monkeypatch)
    mfft.plan_cache_clear()
    a = _rand((8, 16, 4), np.complex64)
    a = np.asfortranarray(a) if layout == "F" else a
    original = a.astype(np.complex128)
    try:
        with _packages.use(FakeCuPy(), device_package_name="cupy"), _engines.use("fft", "cuda", FakeCUFFTEngine):
            b = nvmath.fft.fft(a, axes=(0, 1), options={"inplace": True}, execution="cuda")
            assert b is a and FakeCUFFTEngine.instances
            assert_fft_close(a, np.fft.fftn(original, axes=(0, 1)), np.float32, 128, "forward in place")
            c = nvmath.fft.ifft(b, axes=(0, 1), options={"inplace": True}, execution="cuda")
            assert c is a
            assert_fft_close(a, original * 128, np.float32, 128, "inverse in place", sources=2)  # unnormalised
    finally:
        mfft.plan_cache_clear()
