"""The seam between mathpy.distributed and a communication library, and its torch.distributed implementation.

A :class:`Transport` moves flat, C-contiguous 1-D arrays of one package (NumPy on the host; CuPy or torch on the GPU)
between the ranks of a job. Counts are in elements of the array's dtype. Data collectives move bytes, except
``reduce_scatter``, which sums. ``agree`` all-gathers a small picklable object on every rank: the checked agreement
step that every distributed call makes before moving data (see ``_agreement``). Every collective completes within
``timeout`` seconds or raises :class:`~mathpy.distributed.DistributedTimeoutError`.

:class:`TorchTransport` runs the collectives through torch.distributed: NCCL for GPU memory, gloo for host memory and
for the agreement step (a gloo group of its own when the job's group has no gloo, so that agreement never needs the
GPU). Another engine (NVSHMEM, cuFFTMp's or cuBLASMp's own) plugs in by implementing the same six methods.
"""

import abc
import contextlib
import datetime
import pickle

import numpy as np

from .._operands import wrap_operand
from .. import _packages
from ._arrays import arrays_for
from ._errors import DistributedError, DistributedTimeoutError

__all__ = ["Transport", "TorchTransport", "LocalTransport"]


class Transport(abc.ABC):
    """One communicator: ``rank`` of ``size`` ranks, collectives that complete within ``timeout`` seconds."""

    rank: int
    size: int
    timeout: float
    name = "transport"

    @abc.abstractmethod
    def agree(self, value):
        """Every rank's ``value`` (a small picklable object), as a list in rank order, on every rank."""

    @abc.abstractmethod
    def all_to_all_v(self, send, send_counts, recv, recv_counts, *, stream=None, async_op=False):
        """Send ``send_counts[q]`` elements of ``send`` (consecutive, in rank order) to rank ``q`` and receive
        ``recv_counts[q]`` elements from rank ``q`` into ``recv`` (consecutive, in rank order). With ``async_op``,
        return a handle whose ``wait()`` orders later work on ``stream`` after the transfer."""

    @abc.abstractmethod
    def all_gather(self, send, recv, *, stream=None, async_op=False):
        """``recv`` (``size * len(send)`` elements) receives every rank's ``send`` in rank order."""

    @abc.abstractmethod
    def reduce_scatter(self, send, recv, *, stream=None, async_op=False):
        """``recv`` receives the sum over ranks of their ``send[rank * n:(rank + 1) * n]`` (``n = len(recv)``)."""

    @abc.abstractmethod
    def broadcast(self, buffer, root, *, stream=None):
        """Copy rank ``root``'s ``buffer`` into every rank's ``buffer``."""

    def close(self):
        """Release what the transport created (not the job's own communicator)."""


class LocalTransport(Transport):
    """A job of one process: every collective is a local copy. It runs distributed code without torch (doctests, a
    laptop) and is the smallest example of the seam."""

    rank, size, name = 0, 1, "local"

    def __init__(self, timeout=300.0):
        self.timeout = float(timeout)

    @staticmethod
    def _copy(send, recv):
        op = wrap_operand(send)
        if op.size:
            arrays_for(op.package, op.device_id).copy(recv[:op.size], send)

    def agree(self, value):
        return [pickle.loads(pickle.dumps(value))]

    def all_to_all_v(self, send, send_counts, recv, recv_counts, *, stream=None, async_op=False):
        if list(send_counts) != list(recv_counts):
            raise ValueError(f"a job of one rank sends what it receives: {send_counts} != {recv_counts}")
        self._copy(send[:send_counts[0]], recv)
        return _Completed() if async_op else None

    def all_gather(self, send, recv, *, stream=None, async_op=False):
        self._copy(send, recv)
        return _Completed() if async_op else None

    def reduce_scatter(self, send, recv, *, stream=None, async_op=False):
        self._copy(send, recv)
        return _Completed() if async_op else None

    def broadcast(self, buffer, root, *, stream=None):
        if root != 0:
            raise ValueError(f"root {root} is not a rank of a job of one")

    def __repr__(self):
        return "LocalTransport()"


class _Completed:
    def wait(self):
        return None


class _TorchWork:
    """The handle of an asynchronous torch.distributed collective, with mathpy's error translation."""

    def __init__(self, transport, work, what):
        self._transport, self._work, self._what = transport, work, what

    def wait(self):
        with self._transport._errors(self._what):
            self._work.wait()


class TorchTransport(Transport):
    """Collectives through torch.distributed on ``group`` (None: the default group, which must be initialised).

    ``timeout`` (seconds) bounds the agreement step; the data collectives use the timeout the process group was made
    with (:func:`mathpy.distributed.initialize` makes both the same)."""

    name = "torch.distributed"

    def __init__(self, group=None, timeout=300.0):
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise DistributedError("torch.distributed is not initialised: call mathpy.distributed.initialize() (or "
                                   "torch.distributed.init_process_group) first")
        self._dist, self._group, self.timeout = dist, group, float(timeout)
        # torch 2.13 renamed the tensor forms (the old names warn); 2.11 (the GPU image) has only the old ones
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        backend = str(dist.get_backend(group)).lower()
        self.backend = backend
        self._device_ok = "nccl" in backend
        self._own_host_group = "gloo" not in backend
        if self._own_host_group:  # collective: every rank makes the same call in initialize()
            ranks = None if group is None else dist.get_process_group_ranks(group)
            self._host_group = dist.new_group(ranks=ranks, backend="gloo",
                                              timeout=datetime.timedelta(seconds=self.timeout))
        else:
            self._host_group = group

    # --- errors --------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, what):
        try:
            yield
        except DistributedError:
            raise
        except RuntimeError as error:  # torch's DistBackendError / DistNetworkError / gloo's errors
            text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            if "timed out" in text.lower() or "timeout" in text.lower():
                raise DistributedTimeoutError(f"{what} on rank {self.rank}: not every rank answered within "
                                              f"{self.timeout:g} s (a rank failed or made another call); {text}") \
                    from error
            raise DistributedError(f"{what} failed on rank {self.rank}: {text}") from error

    # --- arrays as torch tensors -------------------------------------------------------------------------------------
    def _tensor(self, array, typed=False):
        """A 1-D torch tensor sharing ``array``'s memory: bytes (uint8), or of its own dtype when ``typed``."""
        import torch
        op = wrap_operand(array)
        if op.ndim != 1 or (op.size and not op.is_c_contiguous):
            raise ValueError(f"transport buffers must be 1-D and contiguous, not {op!r}")
        if op.package == "torch":
            tensor = array
        elif op.package == "numpy":
            try:
                tensor = torch.from_numpy(array if typed else array.view(np.uint8))
            except TypeError:  # NumPy dtypes torch lacks (ml_dtypes'): reductions need a torch dtype
                raise TypeError(f"the transport cannot reduce {array.dtype} arrays") from None
        else:
            tensor = torch.from_dlpack(array)
        if typed:
            return torch.view_as_real(tensor).reshape(-1) if tensor.is_complex() else tensor
        return tensor.view(torch.uint8) if tensor.dtype != torch.uint8 else tensor

    def _group_for(self, tensor, what):
        if tensor.is_cuda:
            if not self._device_ok:
                raise DistributedError(f"{what}: the process group's backend {self.backend!r} cannot move GPU memory; "
                                       f"initialise with NCCL (mathpy.distributed.initialize() does on GPU machines) "
                                       f"or pass host arrays")
            return self._group
        return self._host_group

    def _stream(self, tensor, stream):
        if stream is None or not tensor.is_cuda:
            return contextlib.nullcontext()
        return _packages.get("torch").stream_scope(tensor.device.index, stream)

    def _finish(self, work, what, async_op):
        if async_op:
            return _TorchWork(self, work, what)
        return None

    # --- the collectives ---------------------------------------------------------------------------------------------
    def agree(self, value):
        import torch
        payload = np.frombuffer(pickle.dumps(value), dtype=np.uint8)
        with self._errors("agreement (the metadata all-gather)"):
            sizes = torch.zeros(self.size, dtype=torch.int64)
            self._all_gather(sizes, torch.tensor([payload.size], dtype=torch.int64),
                                        group=self._host_group)
            longest = int(sizes.max())
            padded = torch.zeros(longest, dtype=torch.uint8)
            padded[:payload.size] = torch.from_numpy(payload.copy())
            gathered = torch.empty(longest * self.size, dtype=torch.uint8)
            self._all_gather(gathered, padded, group=self._host_group)
        data = gathered.numpy()
        return [pickle.loads(data[r * longest:r * longest + int(sizes[r])].tobytes()) for r in range(self.size)]

    def all_to_all_v(self, send, send_counts, recv, recv_counts, *, stream=None, async_op=False):
        send_t, recv_t = self._tensor(send), self._tensor(recv)
        send_item, recv_item = wrap_operand(send).itemsize, wrap_operand(recv).itemsize
        group = self._group_for(send_t, "all_to_all_v")
        with self._stream(send_t, stream), self._errors("all_to_all_v"):
            work = self._dist.all_to_all_single(recv_t, send_t, output_split_sizes=[c * recv_item for c in recv_counts],
                                                input_split_sizes=[c * send_item for c in send_counts], group=group,
                                                async_op=async_op)
        return self._finish(work, "all_to_all_v", async_op)

    def all_gather(self, send, recv, *, stream=None, async_op=False):
        send_t, recv_t = self._tensor(send), self._tensor(recv)
        group = self._group_for(send_t, "all_gather")
        with self._stream(send_t, stream), self._errors("all_gather"):
            work = self._all_gather(recv_t, send_t, group=group, async_op=async_op)
        return self._finish(work, "all_gather", async_op)

    def reduce_scatter(self, send, recv, *, stream=None, async_op=False):
        send_t, recv_t = self._tensor(send, typed=True), self._tensor(recv, typed=True)
        group = self._group_for(send_t, "reduce_scatter")
        with self._stream(send_t, stream), self._errors("reduce_scatter"):
            work = self._reduce_scatter(recv_t, send_t, op=self._dist.ReduceOp.SUM, group=group,
                                                    async_op=async_op)
        return self._finish(work, "reduce_scatter", async_op)

    def broadcast(self, buffer, root, *, stream=None):
        tensor = self._tensor(buffer)
        group = self._group_for(tensor, "broadcast")
        source = root if self._group is None else self._dist.get_global_rank(self._group, root)
        with self._stream(tensor, stream), self._errors("broadcast"):
            self._dist.broadcast(tensor, src=source, group=group)

    def close(self):
        if self._own_host_group and self._host_group is not None and self._dist.is_initialized():
            self._dist.destroy_process_group(self._host_group)
        self._host_group = None

    def __repr__(self):
        return f"TorchTransport(rank {self.rank} of {self.size}, backend {self.backend!r}, timeout {self.timeout:g} s)"
