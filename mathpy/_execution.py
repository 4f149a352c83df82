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
    """Run on the CPU with NumPy/SciPy. ``num_threads``: worker threads for SciPy's FFT (None: all cores); the CPU
    matmul runs on NumPy's BLAS with the BLAS library's own threads."""

    num_threads: int | None = None
    name = "cpu"

    def __post_init__(self):
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise ValueError(f"ExecutionCPU.num_threads must be None or a positive int, not {self.num_threads!r}")


@dataclasses.dataclass(frozen=True)
class ExecutionCUDA:
    """Run on a CUDA device. ``device_id`` None means the operands' device (or device 0 for host operands)."""

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
    """The default set by the innermost :func:`execution_space` block, or None (the operands decide)."""
    return _default.get()


#: :func:`get_execution_space` as the ContextVar's own (C) accessor, for the stateless calls' per-call keys.
scoped_execution = _default.get


@contextlib.contextmanager
def execution_space(execution):
    """Run calls that pass no ``execution=`` on ``execution`` ("cpu", "cuda", or an options object) within the block.

    The setting is per thread and per asyncio task (a ``contextvars`` variable) and is restored on exit."""
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
