"""Faults and threads on a real GPU (``pytest -m gpu tests/test_faults_gpu.py``; skipped without one):

- a real out-of-memory: the device is filled with raw allocations, then an FFT and a matmul are planned and a
  planned FFT is executed: each gives a MemoryError (or a CUDALibraryError naming an allocation status), leaves no
  cuFFT handle behind, and everything works again once memory is back;
- an operand the user drops while the stream that reads it still runs;
- 16 threads sharing the stateless plan caches and one FFT plan, each checking its own results.

The CPU side of the fault tests (every library status, KeyboardInterrupt) is tests/test_faults.py.
"""

import gc
import os
import threading

import numpy as np
import pytest

import mathpy.fft as mfft
from mathpy._errors import CUDALibraryError
from mathpy.host.fft import _cufft
from mathpy.host.matmul import matmul, matmul_plan_cache

from _fft_reference import rand
from _tolerance import assert_fft_close, assert_within, matmul_bound

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp():
    return pytest.importorskip("cupy")


def _fill_device(cp):
    """Take every free byte of the device with raw cudaMalloc calls (CuPy's pool emptied first); returns them."""
    cp.get_default_memory_pool().free_all_blocks()
    taken, size = [], 1 << 36
    while size >= 1 << 16:
        try:
            taken.append(cp.cuda.runtime.malloc(size))
        except cp.cuda.runtime.CUDARuntimeError:
            size //= 2
    return taken


def _release(cp, taken):
    for pointer in taken:
        cp.cuda.runtime.free(pointer)
    taken.clear()


def _is_out_of_memory(error):
    if isinstance(error, MemoryError):
        return True
    return isinstance(error, CUDALibraryError) and ("ALLOC_FAILED" in str(error) or "MemoryAllocation" in str(error))


@pytest.mark.skipif("PYTEST_XDIST_WORKER" in os.environ,
                    reason="fills the whole device: run alone (pytest -m gpu tests/test_faults_gpu.py), not under -n")
def test_out_of_memory_at_plan_and_execute(cp):
    x_host = rand((256, 4096), np.complex64)
    a_host, b_host = rand((512, 256), np.float32, seed=1), rand((256, 384), np.float32, seed=2)
    x, a, b = cp.asarray(x_host), cp.asarray(a_host), cp.asarray(b_host)
    mfft.fft(cp.asarray(x_host[:1, :8]))  # libraries loaded, cuBLASLt's handle made, before memory runs out
    matmul(a[:8, :8], b[:8, :8])
    mfft.plan_cache_clear()
    matmul_plan_cache.clear()
    planned = mfft.FFT(x)
    planned.plan()
    handles = _cufft.live_handles()
    taken = _fill_device(cp)
    try:
        failures = {}
        for what, call in (("FFT plan", lambda: mfft.FFT(x).plan()),
                           ("stateless fft", lambda: mfft.fft(x, axis=0)),
                           ("matmul", lambda: matmul(a, b)),
                           ("planned FFT execute", lambda: planned.execute())):
            try:
                call()
                failures[what] = None
            except Exception as e:  # noqa: BLE001 (the error's type is what is checked)
                # keep the verdict and the message, not the exception: its traceback would keep the failed
                # objects (and their handles) alive
                failures[what] = (_is_out_of_memory(e), f"{type(e).__name__}: {e}")
    finally:
        _release(cp, taken)
    for what, failure in failures.items():
        assert failure is None or failure[0], f"{what}: {failure[1]}"
    assert any(failure is not None for failure in failures.values()), "filling the device made nothing fail"
    gc.collect()
    mfft.plan_cache_clear()  # a stateless plan made before its execute ran out of memory is a valid cached plan
    cp.get_default_memory_pool().free_all_blocks()
    assert _cufft.live_handles() == handles  # the planned FFT's: nothing left by the failed plans
    # usable again: the planned FFT, new plans, the stateless calls
    # FFT(x) transforms every axis (a 2-D FFT of the 256 x 4096 operand)
    assert_fft_close(cp.asnumpy(planned.execute()), np.fft.fftn(x_host.astype(np.complex128)), np.float32,
                     256 * 4096)
    assert_fft_close(cp.asnumpy(mfft.fft(x, axis=0)), np.fft.fft(x_host.astype(np.complex128), axis=0), np.float32,
                     256)
    exact = a_host.astype(np.float64) @ b_host
    assert_within(cp.asnumpy(matmul(a, b)), exact, matmul_bound(a_host, b_host, np.float32, exact=exact), "matmul")
    planned.free()


def test_operand_dropped_while_its_stream_runs(cp):
    """The user drops the input right after an asynchronous FFT on a non-blocking stream, and the memory is handed
    out again at once (to an array written on the default stream): the FFT must still read the original data."""
    host = rand((1024, 16384), np.complex64, seed=3)
    expected = np.fft.fft(host[:4].astype(np.complex128))
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.asarray(host)
    cp.cuda.Device().synchronize()
    with stream:
        busy = mfft.fft(mfft.fft(mfft.fft(x)))  # queued work ahead, so the stream is busy when x is dropped
        y = mfft.fft(x)
    del x, busy
    junk = cp.full(host.shape, 7 + 7j, np.complex64)  # may reuse the dropped input's memory
    stream.synchronize()
    del junk
    assert_fft_close(cp.asnumpy(y[:4]), expected, np.float32, 16384, "FFT of a dropped operand")


def _in_threads(work, count=16):
    """Run ``work(index)`` in ``count`` threads started together; returns [(index, exception)]."""
    errors, barrier = [], threading.Barrier(count)

    def run(index):
        try:
            barrier.wait()
            work(index)
        except BaseException as e:  # noqa: BLE001 (reported by the caller)
            errors.append((index, e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_sixteen_threads_share_the_stateless_caches(cp):
    shapes = [(8, 256), (4, 1000), (16, 64), (2, 4096)]
    inputs = {shape: rand(shape, np.complex64, seed=i) for i, shape in enumerate(shapes)}
    expected = {shape: np.fft.fft(x.astype(np.complex128)) for shape, x in inputs.items()}
    mats = [(rand((64, 32), np.float32, seed=20 + i), rand((32, 48), np.float32, seed=30 + i)) for i in range(4)]

    def work(index):
        cp.cuda.Device(0).use()
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for repeat in range(25):
                shape = shapes[(index + repeat) % len(shapes)]
                y = mfft.fft(cp.asarray(inputs[shape]))
                a, b = mats[(index + repeat) % len(mats)]
                d = matmul(cp.asarray(a), cp.asarray(b))
                stream.synchronize()
                assert_fft_close(cp.asnumpy(y), expected[shape], np.float32, shape[-1], f"thread {index} fft")
                exact = a.astype(np.float64) @ b
                assert_within(cp.asnumpy(d), exact, matmul_bound(a, b, np.float32, exact=exact),
                              f"thread {index} matmul")

    errors = _in_threads(work)
    assert not errors, errors[:3]


def test_sixteen_threads_share_one_fft_plan(cp):
    host = rand((32, 512), np.complex64, seed=9)
    expected = np.fft.fft(host.astype(np.complex128))
    operand = cp.asarray(host)
    cp.cuda.Device().synchronize()
    shared = mfft.FFT(operand, axes=[1])  # (the first GPU run planned all axes against a 1-D reference: fixed)
    shared.plan()

    def work(index):
        cp.cuda.Device(0).use()
        stream = cp.cuda.Stream(non_blocking=True)
        for repeat in range(25):
            z = shared.execute(stream=stream)
            stream.synchronize()
            assert_fft_close(cp.asnumpy(z), expected, np.float32, 512, f"thread {index} FFT plan")

    errors = _in_threads(work)
    shared.free()
    assert not errors, errors[:3]


@pytest.mark.parametrize("package", ["torch", "cupy"])
def test_a_thread_without_a_cuda_context(package):
    """A thread that has made no CUDA runtime call has no current context (torch's autograd threads are such). A plan
    made on the main thread runs there: the first H200 run of mathpy.torch's backward gave CUFFT_EXEC_FAILED when the
    C2C plan of the forward was executed by torch's autograd thread."""
    xp = pytest.importorskip(package)
    from cuda.bindings import driver
    as_array = (lambda h: xp.asarray(h, device="cuda")) if package == "torch" else xp.asarray
    to_host = (lambda t: t.cpu().numpy()) if package == "torch" else xp.asnumpy
    host_x = rand((3, 7), np.complex128, seed=11)
    host_a, host_b = rand((24, 16), np.float64, seed=12), rand((16, 8), np.float64, seed=13)
    x, a, b = as_array(host_x), as_array(host_a), as_array(host_b)
    mfft.fft(x), matmul(a, b)  # planned (and the calls remembered) on this thread
    outcome = {}

    def work():
        status, context = driver.cuCtxGetCurrent()
        outcome["context"] = int(context)  # the premise: no context before mathpy's calls
        try:
            outcome["fft"], outcome["matmul"] = to_host(mfft.fft(x)), to_host(matmul(a, b))
            outcome["ifft"] = to_host(mfft.ifft(x))  # the same plan, the other direction (the backward's pattern)
        except BaseException as error:  # noqa: BLE001 (reported by the main thread)
            outcome["error"] = error

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert outcome["context"] == 0, "the new thread already had a current context: this test would prove nothing"
    assert "error" not in outcome, outcome["error"]
    reference = host_x.astype(np.clongdouble)
    assert_fft_close(outcome["fft"], np.fft.fft(reference), np.float64, 7, "fft on a thread without a context")
    assert_fft_close(outcome["ifft"], np.fft.ifft(reference), np.float64, 7, "ifft on a thread without a context")
    exact = host_a.astype(np.longdouble) @ host_b
    assert_within(outcome["matmul"], exact, matmul_bound(host_a, host_b, np.float64, exact=exact),
                  "matmul on a thread without a context")
