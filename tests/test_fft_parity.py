"""Issue 11's FFT features in mathpy's own API: FFTDirection, result_layout ("natural" / "optimized"), a per-object
logger, reset_operand() without an operand, stream= on plan and reset_operand, FFT.create_key / FFT.key, the stateless
irfft / irfftn honouring last_axis_parity, release_workspace. Every test runs on NumPy and torch on the CPU (and on
CuPy / CUDA torch on a GPU machine); GPU-only parts (allocator, workspace release) are in test_fft_parity_gpu.py."""

import logging

import numpy as np
import pytest

import mathpy
from mathpy import InvalidPlanStateError
from mathpy.fft import FFT, FFTDirection, FFTOptions
from mathpy.host.fft._layout import cufft_params


def rand(shape, dtype=np.complex128, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def test_fft_direction_everywhere_a_direction_goes(xp):
    x = rand((4, 8))
    with FFT(xp.asarray(x), axes=[1]) as f:
        f.plan()
        np.testing.assert_allclose(xp.to_numpy(f.execute(direction=FFTDirection.INVERSE)),
                                   np.fft.ifft(x, axis=1) * 8, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xp.to_numpy(f.execute(FFTDirection.FORWARD)), np.fft.fft(x, axis=1), rtol=1e-12,
                                   atol=1e-12)
        with pytest.raises(ValueError, match="FFTDirection"):
            f.execute(direction=0)
    with FFT(xp.asarray(x.real.copy())) as f:
        f.plan()
        with pytest.raises(ValueError, match="runs only forward"):
            f.execute(direction=FFTDirection.INVERSE)


@pytest.mark.parametrize("case, axes, natural, optimized", [
    ("c2c axis 0 of C order", [0], (6, 1), (1, 8)),
    ("c2c axes 0, 1 of a 3-D array", [0, 1], (15, 3, 1), (5, 1, 40)),
    ("c2c last axis (no interleaving)", [1], (6, 1), (6, 1)),
])
def test_result_layout(xp, case, axes, natural, optimized):
    shape = (8, 6) if len(natural) == 2 else (8, 5, 3)
    x = rand(shape)
    for layout, strides in (("natural", natural), ("optimized", optimized)):
        with FFT(xp.asarray(x), axes=axes, options={"result_layout": layout}) as f:
            assert f.output_layout == (shape, strides)
            cufft_params(f.transform, allow_loops=False)  # one cuFFT plan addresses it, no loops
            f.plan()
            r = f.execute()
        np.testing.assert_allclose(xp.to_numpy(r), np.fft.fftn(x, axes=axes), rtol=1e-12, atol=1e-12)


def test_optimized_r2c_keeps_the_halved_axis_innermost(xp):
    x = rand((8, 6), np.float64)
    with FFT(xp.asarray(x), axes=[1, 0], options=FFTOptions(result_layout="optimized")) as f:
        shape, strides = f.output_layout
        assert shape == (5, 6) and strides == (1, 5)  # axis 0, halved, innermost
        f.plan()
        np.testing.assert_allclose(xp.to_numpy(f.execute()), np.fft.rfftn(x, axes=[1, 0]), rtol=1e-12, atol=1e-12)


def test_optimized_through_the_stateless_functions(xp):
    x = rand((16, 4))
    r = mathpy.fft.fft(xp.asarray(x), axis=0, options={"result_layout": "optimized"})
    np.testing.assert_allclose(xp.to_numpy(r), np.fft.fft(x, axis=0), rtol=1e-12, atol=1e-12)


def test_reset_operand_without_an_operand_drops_it(xp):
    x, y = rand((4, 8), seed=1), rand((4, 8), seed=2)
    with FFT(xp.asarray(x)) as f:
        f.plan()
        f.reset_operand()
        with pytest.raises(InvalidPlanStateError, match="released"):
            f.execute()
        f.reset_operand(xp.asarray(y), stream=None)
        np.testing.assert_allclose(xp.to_numpy(f.execute()), np.fft.fftn(y), rtol=1e-12, atol=1e-12)
        with pytest.raises(ValueError, match="shape"):
            f.reset_operand(xp.asarray(rand((4, 9))))


def test_keys(xp):
    a, b = xp.asarray(rand((4, 8), seed=1)), xp.asarray(rand((4, 8), seed=2))
    key = FFT.create_key(a, axes=[1])
    assert key == FFT.create_key(b, axes=[1]) and hash(key) == hash(FFT.create_key(b, axes=[1]))
    assert key != FFT.create_key(a, axes=[0])
    assert key == FFT.create_key(a, axes=[1], options={"result_layout": "optimized"})  # the same plan: equal keys
    assert FFT.create_key(a, axes=[0]) != FFT.create_key(a, axes=[0], options={"result_layout": "optimized"})
    assert key != FFT.create_key(xp.asarray(rand((4, 8), np.complex64)), axes=[1])

    def double(data_out, offset, value, user_info, unused):
        data_out[offset] = value * 2

    with_epilog = FFT.create_key(a, axes=[1], epilog=double)
    assert with_epilog != key and with_epilog == FFT.create_key(b, axes=[1], epilog=double)
    with FFT(a, axes=[1]) as f:
        assert f.get_key() == key
        f.plan(epilog=double)
        assert f.get_key(epilog=double) == with_epilog
    cache = {key: "my plan"}  # what the key is for: a cache of one's own
    assert cache[FFT.create_key(b, axes=[1])] == "my plan"


@pytest.mark.parametrize("n_last", [12, 13])
def test_irfftn_honours_last_axis_parity(xp, n_last):
    x = rand((4, 6, n_last), np.float64)
    spectrum = np.fft.rfftn(x)
    assert spectrum.shape == (4, 6, 7)
    parity = "odd" if n_last % 2 else "even"
    r = mathpy.fft.irfftn(xp.asarray(spectrum), options={"last_axis_parity": parity})
    assert tuple(r.shape) == x.shape
    np.testing.assert_allclose(xp.to_numpy(r), x, rtol=1e-12, atol=1e-12)
    r1 = mathpy.fft.irfft(xp.asarray(np.fft.rfft(x[0, 0])), options=FFTOptions(last_axis_parity=parity))
    np.testing.assert_allclose(xp.to_numpy(r1), x[0, 0], rtol=1e-12, atol=1e-12)
    explicit = mathpy.fft.irfftn(xp.asarray(spectrum), s=(6, 12), axes=(1, 2), options={"last_axis_parity": "odd"})
    assert tuple(explicit.shape) == (4, 6, 12)  # an explicit length wins


def test_per_object_logger_and_workspace_control(xp):
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    mine = logging.getLogger("test_fft_parity.mine")
    mine.setLevel(logging.DEBUG)
    mine.addHandler(Keep())
    mine.propagate = False
    x = rand((8, 8))
    with FFT(xp.asarray(x), options={"logger": mine}) as f:
        f.plan(stream=None)
        assert f.workspace_bytes >= 0
        r = f.execute(release_workspace=True)
        np.testing.assert_allclose(xp.to_numpy(f.execute()), xp.to_numpy(r), rtol=0)
    assert any("FFT planned" in m for m in records) and any("FFT C2C" in m for m in records)
    with pytest.raises(TypeError, match="logging.Logger"):
        FFTOptions(logger="mathpy")
    with pytest.raises(ValueError, match="result_layout"):
        FFTOptions(result_layout="dense")
    with pytest.raises(TypeError, match="memalloc"):
        FFTOptions(allocator=object())


def test_float16_is_computed_in_single_precision_as_numpy_does(xp):
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float16)
    for name in ("fft", "rfft", "fftn", "rfftn"):
        got, want = getattr(mathpy.fft, name)(xp.asarray(x)), getattr(np.fft, name)(x)
        assert xp.to_numpy(got).dtype == want.dtype == np.complex64
        np.testing.assert_allclose(xp.to_numpy(got), want, rtol=1e-5, atol=1e-4)
    spectrum = np.fft.rfft(x.astype(np.float32)).astype(np.complex64)
    assert xp.to_numpy(mathpy.fft.irfft(xp.asarray(spectrum))).dtype == np.float32
