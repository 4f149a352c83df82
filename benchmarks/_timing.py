"""How the CuPy-timed benchmark scripts (``bench_fft.py``, ``bench_compat_nvmath.py``) measure: the GPU time of peers
interleaved in rounds, from CUDA events, and the host time of asynchronous calls. One copy, so that their tables
measure alike. CuPy is imported at the first measurement."""

import statistics
import time

WARMUP, RUNS = 3, 9
CALLS_PER_SAMPLE = 5  # calls timed between one pair of events (event and launch jitter spread over them)


def gpu_ms_interleaved(functions):
    """Median GPU ms of one call of each of ``functions`` ({name: fn}), sampled in rounds (every function once per
    round, CALLS_PER_SAMPLE calls per sample, after WARMUP calls each) so that clock and thermal drift reach all
    peers alike. CUDA events on CuPy's current stream, which torch shares: the legacy default stream."""
    import cupy as cp
    for fn in functions.values():
        for _ in range(WARMUP):
            fn()
    cp.cuda.Device().synchronize()
    samples = {name: [] for name in functions}
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(RUNS):
        for name, fn in functions.items():
            start.record()
            for _ in range(CALLS_PER_SAMPLE):
                fn()
            stop.record()
            stop.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, stop) / CALLS_PER_SAMPLE)
    return {name: statistics.median(values) for name, values in samples.items()}


def host_us(fn, reps=2000, warmup=100):
    """Host microseconds per call over ``reps`` asynchronous calls (after ``warmup`` calls), with one device
    synchronisation before and one after."""
    import cupy as cp
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / reps * 1e6
