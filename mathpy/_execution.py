"""Where work runs: the CPU (SciPy, pyFFTW or MKL FFTs, NumPy's BLAS, numba passes) or a CUDA device.

By default the operands decide: host memory runs on the CPU, device memory on its device. ``execution=`` overrides that
for one call, and :func:`execution_space` changes the default for a block of code (for example to run an unchanged NumPy
program on the GPU). Data is moved as needed and results come back where the operands live.

>>> import mathpy
>>> mathpy.ExecutionCPU(num_threads=2)
ExecutionCPU(num_threads=2, fft_library=None, fp_reports=False)
>>> with mathpy.execution_space("cpu"):
...     mathpy.get_execution_space()
ExecutionCPU(num_threads=None, fft_library=None, fp_reports=False)
>>> mathpy.ExecutionCUDA(device_id=-1)
Traceback (most recent call last):
...
ValueError: ExecutionCUDA.device_id must be None or a non-negative int, not -1
"""

import contextlib
import contextvars
import dataclasses

__all__ = ["ExecutionCPU", "ExecutionCUDA", "execution_space", "get_execution_space", "resolve_execution"]

#: The CPU FFT libraries ``ExecutionCPU(fft_library=...)`` may name (their adapters: mathpy.host.fft._cpu_libraries).
CPU_FFT_LIBRARIES = ("pocketfft", "fftw", "mkl")


@dataclasses.dataclass(frozen=True)
class ExecutionCPU:
    """Run on the CPU: FFTs on the fastest CPU FFT library installed, matrix products on NumPy's BLAS, callbacks and
    epilogs as numba-compiled passes, all on every core by default.

    Parameters
    ----------
    num_threads : int, optional
        Threads for everything the call runs (default: every core the process may use): the FFT library's, the
        callback and epilog passes', and the BLAS's for matrix products.
    fft_library : str, optional
        The CPU FFT library: ``"pocketfft"`` (SciPy's, always installed), ``"fftw"`` (FFTW through pyFFTW) or
        ``"mkl"`` (Intel MKL through mkl_fft). Default: every installed one is a candidate and the fastest is
        measured per transform (see Notes).
    fp_reports : bool, optional
        Look for NumPy's floating-point reports in each FFT's result, as ``numpy.fft`` does: "overflow encountered
        in fft" or "invalid value encountered in fft" (a RuntimeWarning, or what :func:`numpy.errstate` says)
        when the transform made an infinity or a NaN. It costs one more pass over the result. Default False: no
        pass and no report, as on the GPU and in scipy.fft, pyFFTW, CuPy and torch (see Notes).

    Raises
    ------
    ValueError
        ``num_threads`` that is not a positive int, ``fft_library`` that is not one of the names above,
        ``fp_reports`` that is not a bool.

    Notes
    -----
    Pass it as ``execution=`` to any host API call, or to :func:`execution_space` for a block; ``"cpu"`` and
    ``{"name": "cpu", "num_threads": 4}`` mean the same. It runs on every machine; GPU operands are copied to the
    CPU and results copied back to their device.

    **FFT libraries.** pyFFTW and mkl_fft are optional (``pip install "mathpy[cpu]"`` adds pyFFTW and
    threadpoolctl). With ``fft_library=None``, a transform's first call plans it in every installed library (FFTW
    with ``FFTW_MEASURE``, at most two seconds per plan), times each on copies of that call's arrays and keeps the
    fastest; every call then runs that plan, so a transform gives the same bits at every call and on every thread.
    Naming a library skips the timing (``"pocketfft"``: nothing to plan at all). Naming a library that is not
    installed raises ImportError when the FFT is planned; a transform the named library cannot take (long double
    on MKL) runs on pocketfft. Plans are kept in the plan cache with the GPU's (:func:`mathpy.fft.plan_cache_info`).
    FFTW's measurements are pyFFTW's process-wide wisdom: a second plan of a measured layout is made from it at once,
    and ``pyfftw.export_wisdom()`` / ``pyfftw.import_wisdom()`` carry them to another process.

    **Threads.** ``num_threads`` is passed to pocketfft (``workers``) and FFTW (``threads``), sizes mathpy's own
    pool for the fused callback and epilog passes, and limits MKL's and the BLAS's threads (through threadpoolctl,
    for the duration of the call: they are process-wide settings, so concurrent calls asking for different counts
    share the last one set). Small transforms and passes use fewer threads than asked (waking a thread costs more
    than a small share of the work). Without ``num_threads`` the BLAS keeps its own setting (OpenBLAS and MKL use
    every core, or ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS``, or a ``threadpoolctl.threadpool_limits`` block
    around the call): a product then runs exactly as ``numpy.matmul`` would. Without threadpoolctl installed a
    ``num_threads`` cannot reach the BLAS: mathpy warns once and the BLAS keeps its own count. See the CPU guide
    (``docs/guides/cpu.md``) for what runs where and the measured speeds.

    **Floating-point reports.** ``numpy.fft`` reports an overflow or an invalid value its transform made; finding
    one takes a pass over the result, which on 16 cores cost 2-5x the transform itself (256 x 4096 complex64: the
    FFTW transform 0.2 ms, the pass 0.6 ms). mathpy's FFTs therefore report nothing by default, as its GPU
    transforms and the other FFT libraries do; ``fp_reports=True`` runs the pass and reports as NumPy does (once per
    plan; ``numpy.errstate(over="ignore", invalid="ignore")`` skips the pass again).

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy, mathpy.fft
    >>> mathpy.fft.fft(np.ones(4), execution=mathpy.ExecutionCPU(num_threads=2, fft_library="pocketfft"))
    array([4.+0.j, 0.+0.j, 0.+0.j, 0.+0.j])
    """

    num_threads: int | None = None
    fft_library: str | None = None
    fp_reports: bool = False
    name = "cpu"

    def __post_init__(self):
        if self.num_threads is not None and (isinstance(self.num_threads, bool) or not isinstance(self.num_threads, int)
                                             or self.num_threads < 1):
            raise ValueError(f"ExecutionCPU.num_threads must be None or a positive int, not {self.num_threads!r}")
        if self.fft_library is not None and self.fft_library not in CPU_FFT_LIBRARIES:
            raise ValueError(f"ExecutionCPU.fft_library must be None or one of {list(CPU_FFT_LIBRARIES)}, not "
                             f"{self.fft_library!r}")
        if not isinstance(self.fp_reports, bool):
            raise ValueError(f"ExecutionCPU.fp_reports must be True or False, not {self.fp_reports!r}")


@dataclasses.dataclass(frozen=True)
class ExecutionCUDA:
    """Run on a CUDA device: FFTs on cuFFT, matrix products on cuBLASLt.

    Parameters
    ----------
    device_id : int, optional
        The GPU. Default: the operands' device (device 0 for host operands).

    Raises
    ------
    ValueError
        ``device_id`` that is not a non-negative int.

    Notes
    -----
    Host operands (NumPy arrays, CPU tensors) are copied to the device (into CuPy or torch memory, whichever is
    installed) and results come back to the host. A call that runs on a GPU on a machine without one raises
    :class:`~mathpy.NoDeviceError`.

    Examples
    --------
    >>> import mathpy
    >>> mathpy.ExecutionCUDA(device_id=1)
    ExecutionCUDA(device_id=1)
    """

    device_id: int | None = None
    name = "cuda"

    def __post_init__(self):
        if self.device_id is not None and (not isinstance(self.device_id, int) or self.device_id < 0):
            raise ValueError(f"ExecutionCUDA.device_id must be None or a non-negative int, not {self.device_id!r}")


_SPACES = {"cpu": ExecutionCPU, "cuda": ExecutionCUDA}
_default = contextvars.ContextVar("mathpy_execution", default=None)


def as_execution(value, name="execution"):
    """Normalise ``None | "cpu" | "cuda" | dict | ExecutionCPU | ExecutionCUDA``; None stays None (operands decide)."""
    if value is None or isinstance(value, (ExecutionCPU, ExecutionCUDA)):
        return value
    if isinstance(value, str):
        if value not in _SPACES:
            raise ValueError(f"{name} {value!r} is not supported; allowed are {sorted(_SPACES)}")
        return _SPACES[value]()
    if isinstance(value, dict):
        fields = dict(value)
        space = fields.pop("name", None)
        if space not in _SPACES:
            raise ValueError(f"{name}['name'] must be one of {sorted(_SPACES)}, not {space!r}")
        return _SPACES[space](**fields)
    raise TypeError(f"{name} must be None, 'cpu', 'cuda', a dict or an ExecutionCPU/ExecutionCUDA, "
                    f"not {type(value).__name__}")


def get_execution_space():
    """Return the default execution space set by the innermost :func:`execution_space` block.

    Returns
    -------
    ExecutionCPU, ExecutionCUDA or None
        None outside any block: the operands decide where each call runs.

    Examples
    --------
    >>> import mathpy
    >>> mathpy.get_execution_space() is None
    True
    """
    return _default.get()


#: :func:`get_execution_space` as the ContextVar's own (C) accessor, for the stateless calls' per-call keys.
scoped_execution = _default.get


@contextlib.contextmanager
def execution_space(execution):
    """Run the calls of a block that pass no ``execution=`` on ``execution``: an unchanged NumPy program can run
    on the GPU.

    Parameters
    ----------
    execution : str, ExecutionCPU, ExecutionCUDA or dict
        ``"cpu"``, ``"cuda"``, an execution object, or a dict of one's fields with ``"name"``.

    Yields
    ------
    ExecutionCPU or ExecutionCUDA
        The space in effect in the block.

    Raises
    ------
    ValueError, TypeError
        ``execution`` is not one of the above.

    Notes
    -----
    The setting is per thread and per asyncio task (a ``contextvars`` variable) and is restored on exit; blocks
    nest. Results still come back where the operands live: with ``"cuda"``, NumPy operands are copied to the GPU
    and their results back to the CPU as NumPy arrays.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> with mathpy.execution_space("cpu") as space:
    ...     space == mathpy.get_execution_space(), space
    (True, ExecutionCPU(num_threads=None, fft_library=None, fp_reports=False))
    """
    token = _default.set(as_execution(execution))
    try:
        yield _default.get()
    finally:
        _default.reset(token)


def resolve_execution(execution, device_id):
    """The execution space for one call on operands living on ``device_id`` (None = host memory)."""
    chosen = as_execution(execution)
    if chosen is None:
        chosen = _default.get()
    if chosen is None:
        return ExecutionCPU() if device_id is None else ExecutionCUDA(device_id)
    if isinstance(chosen, ExecutionCUDA) and chosen.device_id is None:
        return ExecutionCUDA(0 if device_id is None else device_id)
    return chosen
