"""The stateful FFT, bad input, the plan cache, the scipy.fft backend and the frequency helpers, on the CPU (and on
every package the ``xp`` fixture offers)."""

import threading

import numpy as np
import pytest
import scipy.fft

import mathpy
import mathpy.fft as mfft
from mathpy import InvalidPlanStateError, UnsupportedLayoutError

from _fft_reference import rand
from _tolerance import assert_fft_close


def wide(x):
    """The reference's input: complex64 data in double precision (NumPy's own complex64 FFT is not the reference)."""
    return np.asarray(x).astype(np.complex128)


# --- stateful FFT ------------------------------------------------------------------------------------------------

def test_stateful_c2c_forward_inverse(xp):
    x = rand((8, 32))
    with mfft.FFT(xp.asarray(x), axes=[1]) as f:
        assert f.fft_type == "C2C"
        f.plan()
        y = f.execute()
        assert xp.is_native(y)
        assert_fft_close(xp.to_numpy(y), np.fft.fft(wide(x), axis=1), np.float32, 32, "forward")
        z = f.execute(direction="inverse")
        assert_fft_close(xp.to_numpy(z), np.fft.ifft(wide(x), axis=1) * 32, np.float32, 32, "inverse")  # unnormalised


def test_stateful_r2c_c2r(xp):
    x = rand((4, 6, 10), np.float64)
    with mfft.FFT(xp.asarray(x), axes=(1, 2)) as f:
        assert f.fft_type == "R2C"
        f.plan()
        spectrum = f.execute()
    assert_fft_close(xp.to_numpy(spectrum), np.fft.rfftn(x, axes=(1, 2)), np.float64, 60, "R2C")
    with mfft.FFT(spectrum, axes=(1, 2), options={"fft_type": "C2R"}) as g:
        assert g.output_layout[0] == (4, 6, 10)
        g.plan()
        back = g.execute()
    assert_fft_close(xp.to_numpy(back), x * 60, np.float64, 60, "C2R")
    with mfft.FFT(spectrum, axes=(1, 2), options=mfft.FFTOptions(fft_type="C2R", last_axis_parity="odd")) as g:
        assert g.output_layout[0] == (4, 6, 11)


def test_reset_operand(xp):
    x, x2 = rand((4, 16)), rand((4, 16), seed=1)
    f = mfft.FFT(xp.asarray(x))
    f.plan()
    assert_fft_close(xp.to_numpy(f.execute()), np.fft.fftn(wide(x)), np.float32, 64, "first operand")
    f.reset_operand(xp.asarray(x2))
    assert_fft_close(xp.to_numpy(f.execute()), np.fft.fftn(wide(x2)), np.float32, 64, "second operand")
    with pytest.raises(ValueError, match="shape"):
        f.reset_operand(xp.asarray(rand((4, 8))))
    with pytest.raises(ValueError, match="dtype"):
        f.reset_operand(xp.asarray(rand((4, 16), np.complex128)))
    assert_fft_close(xp.to_numpy(f.execute()), np.fft.fftn(wide(x2)), np.float32, 64, "unchanged")
    f.free()


def test_reset_operand_other_package():
    torch = pytest.importorskip("torch")
    f = mfft.FFT(rand((4, 16)))
    with pytest.raises(ValueError, match="package"):
        f.reset_operand(torch.from_numpy(rand((4, 16))))
    f.free()


def test_state_errors():
    f = mfft.FFT(rand((16,)))
    with pytest.raises(InvalidPlanStateError, match="plan"):
        f.execute()
    f.plan()
    f.free()
    f.free()  # idempotent
    with pytest.raises(InvalidPlanStateError, match="freed"):
        f.execute()
    with pytest.raises(InvalidPlanStateError):
        f.plan()
    with pytest.raises(InvalidPlanStateError):
        f.reset_operand(rand((16,)))


def test_layouts_strided_operand():
    base = rand((6, 20))
    x = base[:, ::2]  # istride 2, idist 20: addressed in place
    f = mfft.FFT(x, axes=[1])
    assert f.input_layout == ((6, 10), (20, 2))
    assert f.output_layout == ((6, 10), (10, 1))
    f.plan()
    assert_fft_close(f.execute(), np.fft.fft(wide(x), axis=1), np.float32, 10, "strided")
    f.free()
    reversed_view = base[:, ::-1]
    f = mfft.FFT(reversed_view, axes=[1])
    assert f.input_layout == ((6, 20), (20, 1))  # copied to a layout with positive strides
    f.plan()
    assert_fft_close(f.execute(), np.fft.fft(wide(reversed_view), axis=1), np.float32, 20, "reversed")
    f.free()


def test_inplace():
    x = rand((4, 8))
    expected = np.fft.fft(wide(x), axis=1)
    with mfft.FFT(x, axes=[1], options={"inplace": True}) as f:
        f.plan()
        assert f.execute() is x
    assert_fft_close(x, expected, np.float32, 8, "in place")
    with pytest.raises(ValueError, match="C2C"):
        mfft.FFT(rand((4, 8), np.float32), options={"inplace": True})
    with pytest.raises(UnsupportedLayoutError):
        mfft.FFT(rand((4, 8))[:, ::-1], axes=[1], options={"inplace": True})


def test_four_axes_need_the_stateless_function():
    with pytest.raises(ValueError, match="at most 3 axes"):
        mfft.FFT(rand((2, 2, 2, 2)))


def test_direction_checks():
    f = mfft.FFT(rand((8,), np.float32))
    f.plan()
    with pytest.raises(ValueError, match="forward"):
        f.execute(direction="inverse")
    with pytest.raises(ValueError, match="direction"):
        f.execute(direction="sideways")
    f.free()


def test_finalizer_frees_engine():
    f = mfft.FFT(rand((8,)))
    f.plan()
    engine = f._resources.engine
    del f
    import gc
    gc.collect()
    assert engine._freed


# --- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, match", [
    (lambda x: mfft.fft(x, axis=2), IndexError, "axis 2 is out of bounds for array of dimension 2"),
    (lambda x: mfft.fftn(x, axes=(0, -3)), ValueError, "axis -3 is out of bounds"),
    (lambda x: mfft.fft(x, n=0), ValueError, "Invalid number"),
    (lambda x: mfft.fft(x, n=-3), ValueError, "Invalid number"),
    (lambda x: mfft.fftn(x, s=(4, 0), axes=(0, 1)), ValueError, "Invalid number"),
    (lambda x: mfft.fftn(x, s=(4,), axes=(0, 1)), ValueError, "Shape and axes have different lengths"),
    (lambda x: mfft.fft(x, norm="sideways"), ValueError, "norm"),
    (lambda x: mfft.hfft(x, norm=""), ValueError, "Invalid norm value ;"),
    (lambda x: mfft.ihfft(x.real.copy(), norm="sideways"), ValueError, "Invalid norm value sideways"),
    (lambda x: mfft.fft(None), TypeError, "a: expected an array, got NoneType"),
    (lambda x: mfft.fft(np.array([["a"]])), TypeError, "not supported"),
    (lambda x: mfft.rfft(x), TypeError, "real"),
    (lambda x: mfft.fft(x, out=np.zeros((3, 3), np.complex64)), ValueError, "output array has wrong shape"),
    (lambda x: mfft.fft(x, out=np.zeros((4, 8), np.float32)), TypeError, "Cannot cast ufunc 'fft' output"),
    (lambda x: mfft.fft(x, out=[0] * 8), TypeError, "return arrays must be of ArrayType"),
    (lambda x: mfft.fft(x, execution="gpu"), ValueError, "not supported"),
    (lambda x: mfft.fft(x, options={"bogus": 1}), ValueError, "unknown field"),
    (lambda x: mfft.FFT(x, options={"fft_type": "R2C"}), ValueError, "real operand"),
    (lambda x: mfft.FFT(x.real.copy(), options={"fft_type": "C2C"}), ValueError, "complex operand"),
    (lambda x: mfft.FFT(x.real.astype(np.int32)), TypeError, "promote"),
    (lambda x: mfft.FFT(x.real.astype(np.float16)), TypeError, "half precision"),
    (lambda x: mfft.FFT(x, axes=(0, 0)), ValueError, "repeat"),
    (lambda x: mfft.FFT(np.array(1 + 0j)), ValueError, "0-d .* no axis to transform"),   # not IndexError
    (lambda x: mfft.FFT(np.array(1 + 0j), axes=[0]), ValueError, "0-d .* no axis to transform"),
    (lambda x: mfft.fftfreq(-1), ValueError, "negative dimensions"),
])
def test_bad_input(call, error, match):
    x = rand((4, 8))
    before = x.copy()
    with pytest.raises(error, match=match):
        call(x)
    np.testing.assert_array_equal(x, before)


def test_mixed_packages():
    torch = pytest.importorskip("torch")
    x = rand((4, 8))
    with pytest.raises(ValueError, match="one package"):
        mfft.fft(x, out=torch.zeros((4, 8), dtype=torch.complex64))


def test_no_gpu_cuda_execution_is_clear():
    if mathpy.cuda_is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(mathpy.NoDeviceError):
        mfft.fft(rand((8,)), execution="cuda")


def test_cpu_inputs_are_not_modified():
    x = rand((4, 9))
    before = x.copy()
    mfft.irfft(x)
    mfft.hfft(x)
    mfft.irfftn(x)
    np.testing.assert_array_equal(x, before)


# --- plan cache --------------------------------------------------------------------------------------------------

def test_plan_cache_hits_and_bounds():
    mfft.plan_cache_clear()
    before = mfft.plan_cache_info()
    x = rand((4, 16))
    mfft.fft(x)
    mfft.fft(x)
    info = mfft.plan_cache_info()
    assert info.hits >= before.hits + 1
    try:
        mfft.set_plan_cache_size(max_plans=2)
        for n in range(3, 12):
            mfft.fft(rand((n,)))
            assert mfft.plan_cache_info().plans <= 2
        mfft.set_plan_cache_size(max_plans=0)
        mfft.fft(x)
        assert mfft.plan_cache_info().plans == 0
    finally:
        mfft.set_plan_cache_size(max_plans=64)
    mfft.plan_cache_clear()
    assert mfft.plan_cache_info().plans == 0


def test_plan_cache_threads():
    mfft.set_plan_cache_size(max_plans=3)
    errors = []
    inputs = [rand((4, n), seed=n) for n in range(4, 12)]

    def work(k):
        try:
            for i in range(30):
                x = inputs[(k + i) % len(inputs)]
                assert_fft_close(mfft.fft(x), np.fft.fft(wide(x)), np.float32, x.shape[-1], "threads")
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)

    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        mfft.set_plan_cache_size(max_plans=64)
    assert not errors, errors[0]
    assert mfft.plan_cache_info().plans <= 64


# --- scipy.fft backend -------------------------------------------------------------------------------------------

def test_scipy_backend():
    x = rand((4, 16), np.float64)

    def calls():
        info = mfft.plan_cache_info()
        return info.hits + info.misses

    before = calls()
    with scipy.fft.set_backend(mfft.scipy_backend, only=True):
        assert_fft_close(scipy.fft.fft(x), np.fft.fft(x), np.float64, 16, "fft", sources=2)
        assert_fft_close(scipy.fft.rfft2(x, workers=2), np.fft.rfft2(x), np.float64, 64, "rfft2", sources=2)
        assert_fft_close(scipy.fft.irfftn(x, s=(4, 10), axes=(0, 1)), np.fft.irfftn(x, s=(4, 10), axes=(0, 1)),
                         np.float64, 40, "irfftn", sources=2)
    assert calls() == before + 3  # all three ran through mathpy's plans
    with scipy.fft.set_backend(mfft.scipy_backend):  # dct: not in mathpy, SciPy's own backend answers
        got = scipy.fft.dct(x)
    n = x.shape[-1]  # DCT-II from its definition: y[k] = 2 sum_j x[j] cos(pi k (2j + 1) / (2n))
    basis = 2 * np.cos(np.pi * np.arange(n)[:, None] * (2 * np.arange(n)[None, :] + 1) / (2 * n))
    np.testing.assert_allclose(got, x @ basis.T, rtol=1e-12, atol=1e-12)
    assert calls() == before + 3
    assert mfft.scipy_backend.__ua_domain__ == "numpy.scipy.fft"


# --- frequencies and shifts --------------------------------------------------------------------------------------

def test_freq_and_shift(xp):
    np.testing.assert_allclose(mfft.fftfreq(8, 0.1), np.fft.fftfreq(8, 0.1))
    np.testing.assert_allclose(mfft.rfftfreq(9, 2.0), np.fft.rfftfreq(9, 2.0))
    x = np.arange(12.0).reshape(3, 4)
    shifted = mfft.fftshift(xp.asarray(x))
    assert xp.is_native(shifted)
    np.testing.assert_array_equal(xp.to_numpy(shifted), np.fft.fftshift(x))
    np.testing.assert_array_equal(xp.to_numpy(mfft.ifftshift(xp.asarray(x), axes=1)), np.fft.ifftshift(x, axes=1))
    like = mfft.fftfreq(4, like=xp.asarray(x))
    assert xp.is_native(like)


def test_scipy_backend_positional_arguments():
    x = rand((4, 16), np.float64)
    with scipy.fft.set_backend(mfft.scipy_backend, only=True):
        assert_fft_close(scipy.fft.fft(x, None, -1, None, False, 2), np.fft.fft(x), np.float64, 16, "fft", sources=2)


def test_fftfreq_device():
    np.testing.assert_allclose(mfft.fftfreq(4, device="cpu"), np.fft.fftfreq(4))
    with pytest.raises(ValueError, match='Device not understood. Only "cpu" is allowed'):
        mfft.fftfreq(4, device="cuda")


def test_plan_execute_free_loop_does_not_leak():
    """The CPU twin of the GPU test's 10,000 cycles: Python-side state (engines, finalizers, caches) is released."""
    import gc
    import tracemalloc

    x = rand((4, 64))

    def cycle():
        f = mfft.FFT(x, axes=[1])
        f.plan()
        f.execute()
        f.free()

    for _ in range(200):
        cycle()
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for _ in range(2000):
        cycle()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert grown < 256 * 1024, f"{grown} bytes still held after 2000 plan/execute/free cycles"


def test_the_stateless_call_plans_without_an_fft_object(monkeypatch):
    """The stateless functions ask _fft.borrow_call for a prepared call (issue 21's flat path): a first call with new
    facts works with the FFT class unable to be constructed, and leaves its engine in the plan cache."""
    from mathpy.host.fft import _fft

    def refuse(*args, **kwargs):
        raise AssertionError("the stateless path built an FFT object")

    monkeypatch.setattr(_fft.FFT, "__init__", refuse)
    mfft.plan_cache_clear()
    x = rand((3, 40), np.complex64, seed=5)
    assert_fft_close(mfft.fft(x), np.fft.fft(x.astype(np.complex128)), np.float32, 40)
    assert_fft_close(mfft.irfft2(x), np.fft.irfft2(x.astype(np.complex128)), np.float32, 3 * 78)  # two stages
    assert mfft.plan_cache_info().plans >= 2
    with pytest.raises(AssertionError, match="built an FFT object"):
        mfft.FFT(x)  # (the stateful API does construct one)
