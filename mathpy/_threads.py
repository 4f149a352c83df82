"""CPU threads: how many a call runs on, a pool that runs the chunks of one pass on them, and the BLAS's thread count
for the duration of a call.

One pass (a fused FFT callback, a matmul epilog) is cut into chunks small enough to stay in cache; :func:`run_chunks`
hands them out to ``threads`` threads, the calling one included, which take the next chunk as they finish one. The
work functions release the GIL (numba ``nogil`` loops, pocketfft, FFTW), so the threads run in parallel. The pool is
mathpy's own: its size is what ``ExecutionCPU(num_threads=...)`` says, whatever numba's or the BLAS's settings are.

With four threads or more, a matmul's pass over its result and the CPU FFT's "parallel" strategy run as one numba
``parallel`` loop instead (:func:`parallel_numba`, :func:`numba_team`; on at most numba's ``NUMBA_NUM_THREADS``):
no Python and no GIL between the chunks, where the pool's hand-offs cost about as much as the work on 16 cores.
numba's threads, and FFTW's in pyFFTW's wheels, both on GNU OpenMP, are started by mathpy with a short spin
(:func:`short_omp_spin`), so that they leave the cores to the other libraries' threads right after a call.

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
import time
import warnings

import numpy as np

__all__ = ["usable_cores", "threads_for", "threads_for_bytes", "run_chunks", "parallel_sum", "blas_threads",
           "forget_libraries", "parallel_numba", "numba_team", "numba_spin_seconds", "spun", "wait_for_spinning",
           "short_omp_spin", "numba_team_size", "PARALLEL_MIN_THREADS"]

#: Below this many bytes of data per thread a pass runs on fewer threads: waking a thread costs about as much as
#: moving this much memory.
MIN_BYTES_PER_THREAD = 1 << 18
#: A reduction (a read with no write) is bound by memory bandwidth sooner: on 16 cores, summing 8 MB on 16 threads
#: took 0.59 ms and on one 0.41 ms (the pool's wake-ups dominate), 32 MB 0.98 ms against 2.9 ms.
MIN_BYTES_PER_REDUCING_THREAD = 1 << 21

#: A pass runs as a numba parallel loop from this many threads on (with fewer, the pool's GIL costs little: on 2
#: cores both ran alike).
PARALLEL_MIN_THREADS = 4
#: The GOMP_SPINCOUNT mathpy starts numba's and FFTW's OpenMP threads with, when the environment sets neither it nor
#: OMP_WAIT_POLICY: about 0.1 ms of spinning (a ``pause`` is up to 140 cycles) before a thread sleeps. GNU OpenMP's
#: default, 300000, keeps 16 threads spinning for about 20 ms after each loop: a BLAS product right after a pass then
#: ran at half speed (2 cores: 24 ms for a 12 ms product and a 0.04 ms pass; 11.6 ms with this count).
OMP_SPIN_COUNT = 2000
#: How long GNU OpenMP's threads spin after a loop at its default wait policy, and at OMP_SPIN_COUNT.
DEFAULT_OMP_SPIN_SECONDS, SHORT_SPIN_SECONDS = 0.02, 1e-4

_NULL = contextlib.nullcontext()
_lock = threading.Lock()
_pool = {"executor": None, "size": 0}
_blas = {}  # "controller": threadpoolctl's controller of the BLAS libraries (None: threadpoolctl is missing)
_numba = {}  # "module": numba with its threads started, or None; "spin": seconds its threads spin after a loop
_environment = threading.Lock()  # held while the environment holds mathpy's spin count (short_omp_spin)
# Until when (time.perf_counter) some library's threads may still spin after its last multi-threaded call (OpenMP's
# workers do, for milliseconds): the CPU FFT's library choice times no library before then.
_spinning = {"until": 0.0}
#: One numba parallel loop at a time from mathpy: numba's workqueue layer aborts the process when entered from two
#: threads at once, and the callers' per-thread buffers are shared.
numba_lock = threading.Lock()


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


def spun(seconds):
    """Note a multi-threaded call of a library whose threads spin for about ``seconds`` after it."""
    _spinning["until"] = max(_spinning["until"], time.perf_counter() + seconds)


def wait_for_spinning():
    """Sleep until no library's threads noted by :func:`spun` may still spin."""
    pause = _spinning["until"] - time.perf_counter()
    if pause > 0:
        time.sleep(pause)


def parallel_numba():
    """numba with its threading layer started, or None where its parallel loops cannot run. When mathpy starts the
    layer, it does so under :func:`short_omp_spin`; a layer started before keeps what it was started with."""
    if "module" not in _numba:
        with _lock:
            if "module" not in _numba:
                _numba.update(_start_numba())
    return _numba["module"]


def _start_numba():
    try:
        import numba
        from numba.np.ufunc import parallel
    except ImportError:  # pragma: no cover (numba is a dependency)
        return {"module": None, "spin": 0.0}
    if not hasattr(numba, "get_thread_id"):  # pragma: no cover (numba before 0.57)
        return {"module": None, "spin": 0.0}
    try:
        numba.threading_layer()
        spin = _spin_seconds(False)  # (started before: with what the environment said then, as far as we know)
    except ValueError:  # no parallel loop has run yet: start the layer here
        with short_omp_spin() as spin:
            try:
                parallel._launch_threads()
            except Exception:  # noqa: BLE001 - no threading layer loads here: the pool serves
                return {"module": None, "spin": 0.0}
    return {"module": numba, "spin": spin if numba.threading_layer() == "omp" else 0.0}


@contextlib.contextmanager
def short_omp_spin():
    """A block in which a GNU OpenMP runtime that loads reads :data:`OMP_SPIN_COUNT` as its spin count, unless the
    environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT (the user's choice stays); yields how long its threads will
    spin after a parallel region. (GNU OpenMP reads the environment once, as it loads: a runtime loaded before keeps
    what it read then.) One block at a time: another would take mathpy's setting for the user's."""
    with _environment:
        own = not any(name in os.environ for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
        if own:
            os.environ["GOMP_SPINCOUNT"] = str(OMP_SPIN_COUNT)
        try:
            yield _spin_seconds(own)
        finally:
            if own:
                os.environ.pop("GOMP_SPINCOUNT", None)


def _spin_seconds(own):
    """About how long GNU OpenMP's threads spin after a region: ``own``, started with :data:`OMP_SPIN_COUNT`; else as
    the environment says (a spin count wins over the wait policy; ACTIVE spins until the next region, which no wait
    helps: counted as the default)."""
    count = os.environ.get("GOMP_SPINCOUNT", "")
    if own or (count.isdigit() and int(count) <= OMP_SPIN_COUNT):
        return SHORT_SPIN_SECONDS
    if not count and os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        return 0.0
    return DEFAULT_OMP_SPIN_SECONDS


def numba_spin_seconds():
    """How long numba's threads may keep a core busy after a parallel loop (0: they sleep at once)."""
    parallel_numba()
    return _numba["spin"]


def numba_team_size(threads):
    """How many threads a numba parallel loop asked to run on ``threads`` gets: at most numba's pool
    (``NUMBA_NUM_THREADS``; its thread ids stay below it), 0 where its loops cannot run."""
    numba = parallel_numba()
    return 0 if numba is None else min(threads, numba.config.NUMBA_NUM_THREADS)


@contextlib.contextmanager
def numba_team(threads):
    """A block in which numba's parallel loops run on :func:`numba_team_size` of ``threads``, one loop at a time
    (:data:`numba_lock`); yields the team's size."""
    numba = parallel_numba()
    team = numba_team_size(threads)
    with numba_lock:
        previous = numba.get_num_threads()
        numba.set_num_threads(team)
        try:
            yield team
        finally:
            numba.set_num_threads(previous)
