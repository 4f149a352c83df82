"""Where work runs: the CPU (NumPy/SciPy) or a CUDA device.

By default the operands decide: host memory runs on the CPU, device memory on its device. ``execution=`` overrides that
for one call, and :func:`execution_space` changes the default for a block of code (for example to run an unchanged NumPy
program on the GPU). Data is moved as needed and results come back where the operands live.

>>> import mathpy
>>> mathpy.ExecutionCPU(num_threads=2)
ExecutionCPU(num_threads=2)
>>> with mathpy.execution_space("cpu"):
...     mathpy.get_execution_space()
ExecutionCPU(num_threads=None)
>>> mathpy.ExecutionCUDA(device_id=-1)
Traceback (most recent call last):
...
ValueError: ExecutionCUDA.device_id must be None or a non-negative int, not -1
"""

import contextlib
import contextvars
import dataclasses

__all__ = ["ExecutionCPU", "ExecutionCUDA", "execution_space", "get_execution_space"]


@dataclasses.dataclass(frozen=True)
class ExecutionCPU:
    """Run on the CPU: FFTs on SciPy's pocketfft, matrix products on NumPy (its BLAS for floating point).

    Parameters
    ----------
    num_threads : int, optional
        Worker threads for SciPy's FFT (default: all cores). The matmul uses the BLAS library's own threads.

    Raises
    ------
    ValueError
        ``num_threads`` that is not a positive int.

    Notes
    -----
    Pass it as ``execution=`` to any host API call, or to :func:`execution_space` for a block; ``"cpu"`` and
    ``{"name": "cpu", "num_threads": 4}`` mean the same. It runs on every machine; GPU operands are copied to the
    CPU and results copied back to their device.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy, mathpy.fft
    >>> mathpy.fft.fft(np.ones(4), execution=mathpy.ExecutionCPU(num_threads=2))
    array([4.+0.j, 0.+0.j, 0.+0.j, 0.+0.j])
    """

    num_threads: int | None = None
    name = "cpu"

    def __post_init__(self):
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise ValueError(f"ExecutionCPU.num_threads must be None or a positive int, not {self.num_threads!r}")


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
    ...     space, mathpy.get_execution_space()
    (ExecutionCPU(num_threads=None), ExecutionCPU(num_threads=None))
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
