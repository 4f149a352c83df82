"""CPU threads: how many a call runs on, a pool that runs the chunks of one pass on them, and the BLAS's thread count
for the duration of a call.

One pass (a fused FFT callback, a matmul epilog) is cut into chunks small enough to stay in cache; :func:`run_chunks`
hands them out to ``threads`` threads, the calling one included, which take the next chunk as they finish one. The
work functions release the GIL (numba ``nogil`` loops, pocketfft, FFTW), so the threads run in parallel. The pool is
mathpy's own: its size is what ``ExecutionCPU(num_threads=...)`` says, whatever numba's or the BLAS's settings are.

The BLAS (OpenBLAS or MKL behind NumPy) keeps one process-wide thread count; :func:`blas_threads` sets it for a
block through threadpoolctl when a count is asked for (and warns once when threadpoolctl is not installed).

>>> threads_for(None) == usable_cores()
True
>>> out = [0] * 10
>>> run_chunks(lambda i: out.__setitem__(i, i * i), 10, threads=2)
>>> out
[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
"""

import concurrent.futures
import contextlib
import os
import threading
import warnings

import numpy as np

__all__ = ["usable_cores", "threads_for", "threads_for_bytes", "run_chunks", "parallel_sum", "blas_threads",
           "forget_libraries"]

#: Below this many bytes of data per thread a pass runs on fewer threads: waking a thread costs about as much as
#: moving this much memory.
MIN_BYTES_PER_THREAD = 1 << 18
#: A reduction (a read with no write) is bound by memory bandwidth sooner: on 16 cores, summing 8 MB on 16 threads
#: took 0.59 ms and on one 0.41 ms (the pool's wake-ups dominate), 32 MB 0.98 ms against 2.9 ms.
MIN_BYTES_PER_REDUCING_THREAD = 1 << 21

_NULL = contextlib.nullcontext()
_lock = threading.Lock()
_pool = {"executor": None, "size": 0}
_blas = {}  # "controller": threadpoolctl's controller of the BLAS libraries (None: threadpoolctl is missing)


def usable_cores():
    """The cores this process may run on (its affinity mask where the OS has one; SciPy's ``workers=-1`` counts
    ``os.cpu_count()``, which is the same unless the process is pinned)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def threads_for(execution):
    """The thread count of an :class:`~mathpy.ExecutionCPU` (None or ``num_threads=None``: every usable core)."""
    count = getattr(execution, "num_threads", None)
    return count if count is not None else usable_cores()


def threads_for_bytes(threads, nbytes, per_thread=MIN_BYTES_PER_THREAD):
    """At most ``threads``, and few enough that each moves at least ``per_thread`` of ``nbytes``."""
    return max(1, min(threads, nbytes // per_thread))


def _executor(workers):
    with _lock:
        if _pool["size"] < workers:
            old = _pool["executor"]
            _pool["executor"] = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="mathpy-cpu")
            _pool["size"] = workers
            if old is not None:
                old.shutdown(wait=False)  # its running tasks finish; new ones go to the larger pool
        return _pool["executor"]


def run_chunks(work, count, threads):
    """Call ``work(i)`` for ``i`` in ``range(count)`` on up to ``threads`` threads (the caller's included); the first
    exception raised by any chunk is raised here after every thread stopped."""
    threads = min(threads, count)
    if threads <= 1:
        for i in range(count):
            work(i)
        return
    taken = [0]
    take_lock = threading.Lock()
    failed = []

    def worker():
        while not failed:
            with take_lock:
                i = taken[0]
                taken[0] = i + 1
            if i >= count:
                return
            try:
                work(i)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                failed.append(e)
                return

    executor = _executor(threads - 1)
    futures = [executor.submit(worker) for _ in range(threads - 1)]
    worker()
    for future in futures:
        future.result()
    if failed:
        raise failed[0]


def parallel_sum(array, threads):
    """``numpy.add.reduce(array, axis=None)`` in pieces on up to ``threads`` threads (NumPy releases the GIL in its
    reductions); the pieces' sums are added in another order than NumPy's single pass."""
    threads = threads_for_bytes(threads, array.nbytes, MIN_BYTES_PER_REDUCING_THREAD)
    if threads <= 1:
        return np.add.reduce(array, axis=None)
    if array.flags.c_contiguous or array.flags.f_contiguous:
        array = array.ravel(order="A")  # a view
    if array.ndim == 0 or array.shape[0] < threads:
        return np.add.reduce(array, axis=None)
    step = -(-array.shape[0] // threads)
    count = -(-array.shape[0] // step)
    sums = [None] * count
    run_chunks(lambda i: sums.__setitem__(i, np.add.reduce(array[i * step:(i + 1) * step], axis=None)), count, threads)
    return sum(sums[1:], sums[0])


def _controller():
    if "controller" not in _blas:
        with _lock:
            if "controller" not in _blas:
                try:
                    import threadpoolctl
                except ImportError:
                    _blas["controller"] = None
                else:
                    _blas["controller"] = threadpoolctl.ThreadpoolController().select(user_api="blas")
    return _blas["controller"]


def forget_libraries():
    """Look for the thread-pooled libraries again at the next :func:`blas_threads` (one was loaded since)."""
    with _lock:
        _blas.pop("controller", None)


#: Products at most this many multiply-adds (64^3) run on one BLAS thread whatever the setting (OpenBLAS threads
#: only above 4 * 65536): setting the count would cost more than the product.
SMALL_PRODUCT = 64 ** 3


def blas_threads(count, work=None):
    """A context manager that runs its block with the BLAS limited to ``count`` threads (None: as it is), or does
    nothing for a product of ``work`` multiply-adds at most :data:`SMALL_PRODUCT`."""
    if count is None or (work is not None and work <= SMALL_PRODUCT):
        return _NULL
    controller = _controller()
    if controller is None:
        if not _blas.get("warned"):
            _blas["warned"] = True
            warnings.warn(f"ExecutionCPU(num_threads={count}): the BLAS's threads cannot be limited without "
                          f"threadpoolctl (pip install threadpoolctl, or mathpy[cpu]); matrix products run on the "
                          f"BLAS's own thread count", RuntimeWarning, stacklevel=3)
        return _NULL
    if all(lib.get_num_threads() == count for lib in controller.lib_controllers):
        return _NULL  # already so (one C call per library, against ~50 us to set and restore a count)
    return controller.limit(limits=count)
