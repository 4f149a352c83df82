"""Joining the job: :func:`initialize` from the launcher users already have, and the :class:`Context` that every
distributed call runs in.

- Under ``torchrun`` (or any launcher that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``):
  ``initialize()`` makes torch.distributed's process group from those variables; on a GPU machine with NCCL for
  device memory and gloo for host memory (``"cpu:gloo,cuda:nccl"``), and picks the GPU ``LOCAL_RANK``.
- Under ``mpirun`` with mpi4py (or given ``comm=``, an mpi4py communicator): the ranks and a rendezvous address come
  from MPI; the collectives still run through torch.distributed.
- Without a launcher: a job of one process (everything runs locally), so the same script runs unchanged.
- If torch.distributed is already initialised, its default group is used as it is.
- ``transport=``: any :class:`~mathpy.distributed.Transport` (the seam for other engines).

Every collective completes within ``timeout`` seconds or raises
:class:`~mathpy.distributed.DistributedTimeoutError`.
"""

import datetime
import os
import socket

from .._errors import LibraryNotFoundError
from ._errors import DistributedError, NotInitializedError
from ._transport import Transport, TorchTransport

__all__ = ["Context", "initialize", "finalize", "get_context", "is_initialized"]

_MPI_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
_MPI_LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK")

_current = None


class Context:
    """The job as mathpy.distributed sees it: ``transport`` (rank, size, collectives) and ``device_id`` (the GPU this
    process uses, or None on the CPU)."""

    def __init__(self, transport, device_id=None, owns_group=False):
        self.transport, self.device_id, self._owns_group = transport, device_id, owns_group

    rank = property(lambda self: self.transport.rank)
    size = property(lambda self: self.transport.size)

    def close(self):
        self.transport.close()
        if self._owns_group:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
        self._owns_group = False

    def __repr__(self):
        where = "cpu" if self.device_id is None else f"cuda:{self.device_id}"
        return f"Context(rank {self.rank} of {self.size}, {where}, {self.transport!r})"


def is_initialized():
    return _current is not None


def get_context(context=None):
    """``context``, else the one :func:`initialize` made (NotInitializedError when there is none)."""
    if context is not None:
        if not isinstance(context, Context):
            raise TypeError(f"context must be a mathpy.distributed.Context, not {type(context).__name__}")
        return context
    if _current is None:
        raise NotInitializedError("mathpy.distributed is not initialised: call mathpy.distributed.initialize() first "
                                  "(under torchrun, mpirun, or alone for a job of one process)")
    return _current


def initialize(*, backend=None, device_id=None, timeout=300.0, comm=None, transport=None):
    """Join the job and return its :class:`Context` (also the default of every later call). Collective: every
    process calls it. Calling it again returns the current context.

    Parameters
    ----------
    backend
        torch.distributed backend for a new process group; default ``"cpu:gloo,cuda:nccl"`` when a GPU is usable,
        else ``"gloo"``.
    device_id
        The GPU of this process; default ``LOCAL_RANK`` modulo the number of GPUs (None on the CPU).
    timeout
        Seconds every collective may take before it raises DistributedTimeoutError.
    comm
        An mpi4py communicator to take ranks and the rendezvous from (default under mpirun: COMM_WORLD).
    transport
        A ready :class:`Transport`; nothing else is set up.
    """
    global _current
    if _current is not None:
        return _current
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if transport is not None:
        if not isinstance(transport, Transport):
            raise TypeError(f"transport must be a mathpy.distributed.Transport, not {type(transport).__name__}")
        _current = Context(transport, device_id)
        return _current
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise LibraryNotFoundError("mathpy.distributed runs its collectives through torch.distributed: install torch "
                                   "(pip install torch), or pass transport= a Transport of your own") from None
    if not dist.is_available():
        raise LibraryNotFoundError("this torch build has no torch.distributed")
    gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    created = False
    if not dist.is_initialized():
        rank, size, init_method, local_rank = _rendezvous(comm)
        if backend is None:
            backend = "cpu:gloo,cuda:nccl" if gpu else "gloo"
        if gpu and device_id is None:
            device_id = local_rank % torch.cuda.device_count()
        if device_id is not None:
            torch.cuda.set_device(device_id)
        dist.init_process_group(backend=backend, init_method=init_method, rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=timeout))
        created = True
    elif gpu and device_id is None and "nccl" in str(dist.get_backend()).lower():
        device_id = torch.cuda.current_device()
    try:
        _current = Context(TorchTransport(timeout=timeout), device_id, owns_group=created)
    except BaseException:
        if created:
            dist.destroy_process_group()
        raise
    return _current


def finalize():
    """Leave the job: free what :func:`initialize` made (the process group too, when it made it). Idempotent."""
    global _current
    context, _current = _current, None
    if context is not None:
        context.close()


def _rendezvous(comm):
    """(rank, size, init_method, local rank) from mpi4py, the launcher's environment, or a job of one."""
    env = os.environ
    if comm is None and "RANK" not in env and any(name in env for name in _MPI_SIZE_VARIABLES):
        try:
            from mpi4py import MPI
        except ImportError:
            raise LibraryNotFoundError("launched by MPI, but mpi4py is not installed: pip install mpi4py, or launch "
                                       "with torchrun") from None
        comm = MPI.COMM_WORLD
    if comm is not None:
        rank, size = comm.Get_rank(), comm.Get_size()
        hosts = comm.allgather(socket.gethostname())
        address = None
        if rank == 0:
            address = ("127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(hosts[0]), _free_port())
        host, port = comm.bcast(address, root=0)
        local_rank = next((int(env[name]) for name in _MPI_LOCAL_RANK_VARIABLES if name in env),
                          hosts[:rank].count(hosts[rank]))
        return rank, size, f"tcp://{host}:{port}", local_rank
    if "RANK" in env and "WORLD_SIZE" in env:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in env]
        if missing:
            raise DistributedError(f"RANK and WORLD_SIZE are set but {', '.join(missing)} not: launch with torchrun "
                                   f"or set them")
        return int(env["RANK"]), int(env["WORLD_SIZE"]), "env://", int(env.get("LOCAL_RANK", env["RANK"]))
    return 0, 1, f"tcp://127.0.0.1:{_free_port()}", 0


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
