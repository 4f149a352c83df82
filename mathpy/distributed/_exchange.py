"""Moving a distributed array from one partition to another with one collective: the transposes of the distributed
FFT and the operand gathers of the distributed matmul.

An :class:`Exchange` is planned once from the source and target :class:`~._distribution.Partition` (identical on every
rank, so every rank makes the same decisions without talking): what this rank sends to each rank (the intersection of
its source part with that rank's target part), and where what it receives goes. Running it is

- nothing, when the partitions are equal;
- local copies, when no data crosses ranks;
- one ``all_gather`` when every rank needs every part whole (a replicated target, as matmul's gathered operand);
- else one ``all_to_all_v``.

Packing and unpacking are slicing copies in the operand's package. They are skipped when the pieces already lie in
rank order in memory: a slab transpose then packs on one side only (the side split along the outer axis needs no
copy), and the receive buffer is the result itself.

>>> from mathpy.distributed._distribution import Slab
>>> plan = Exchange(Slab(0).partition((4, 6), 2), Slab(1).partition((4, 6), 2), rank=0)
>>> plan.send_counts, plan.recv_counts, plan.mode, plan.direct_send, plan.direct_recv
([6, 6], [6, 6], 'all_to_all', False, True)
"""

import math

import numpy as np

from ._arrays import region_offset

__all__ = ["Exchange", "intersect"]


def intersect(mine, theirs):
    """``(positions in mine, positions in theirs, count)`` of the indices in both sorted index sets; positions are
    slices when contiguous, else int64 arrays."""
    if isinstance(mine, range) and isinstance(theirs, range):
        lo, hi = max(mine.start, theirs.start), min(mine.stop, theirs.stop)
        if hi <= lo:
            return None, None, 0
        return slice(lo - mine.start, hi - mine.start), slice(lo - theirs.start, hi - theirs.start), hi - lo
    a = np.arange(mine.start, mine.stop) if isinstance(mine, range) else mine
    b = np.arange(theirs.start, theirs.stop) if isinstance(theirs, range) else theirs
    _, in_a, in_b = np.intersect1d(a, b, assume_unique=True, return_indices=True)
    if in_a.size == 0:
        return None, None, 0
    return _as_selector(in_a), _as_selector(in_b), int(in_a.size)


def _as_selector(positions):
    if int(positions[-1]) - int(positions[0]) + 1 == positions.size:
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return positions.astype(np.int64)


def _pieces(sets_a, sets_b):
    """Per-axis intersections of two parts: (selectors into a, selectors into b, piece shape), or None if empty."""
    into_a, into_b, shape = [], [], []
    for a, b in zip(sets_a, sets_b):
        sa, sb, count = intersect(a, b)
        if count == 0:
            return None
        into_a.append(sa)
        into_b.append(sb)
        shape.append(count)
    return tuple(into_a), tuple(into_b), tuple(shape)


def _volume(sets_a, sets_b):
    total = 1
    for a, b in zip(sets_a, sets_b):
        if isinstance(a, range) and isinstance(b, range):
            total *= max(0, min(a.stop, b.stop) - max(a.start, b.start))
        else:
            total *= intersect(a, b)[2]
        if total == 0:
            return 0
    return total


def _direct(shape, pieces):
    """Whether ``pieces`` (selectors, in rank order, None for none) lie back to back in a C-contiguous array of
    ``shape`` from its start and cover it: then the array itself is the collective's buffer."""
    offset = 0
    for piece in pieces:
        if piece is None:
            continue
        selectors, size = piece
        if region_offset(shape, selectors) != offset:
            return False
        offset += size
    return offset == math.prod(shape)


class Exchange:
    """The plan that moves rank ``rank``'s part from partition ``source`` to partition ``target``.

    ``run(x, arrays, transport)`` returns the rank's new part (a new C-contiguous array of ``arrays``' package; ``x``
    itself when nothing moves). ``start`` begins the collective asynchronously for work that overlaps it."""

    def __init__(self, source, target, rank):
        if source.shape != target.shape or source.nranks != target.nranks:
            raise ValueError(f"an exchange keeps the global shape and the ranks: {source} -> {target}")
        size = source.nranks
        self.source, self.target, self.rank, self.size = source, target, rank, size
        self.in_shape, self.out_shape = source.local_shape(rank), target.local_shape(rank)
        self.identity = source == target
        counts = [[_volume(source.sets[s], target.sets[d]) for d in range(size)] for s in range(size)]
        self.total_crossing = sum(counts[s][d] for s in range(size) for d in range(size) if s != d)
        self.crosses = self.total_crossing > 0
        self.send_counts = list(counts[rank])
        self.recv_counts = [counts[s][rank] for s in range(size)]
        self.sends = [self._piece(source.sets[rank], target.sets[d], 0) for d in range(size)]
        self.recvs = [self._piece(source.sets[s], target.sets[rank], 1) for s in range(size)]
        if self.identity or not self.crosses:
            self.mode = "local"
        elif target.is_replicated():
            self.mode = "all_gather"
        else:
            self.mode = "all_to_all"
        self.block_counts = [math.prod(source.local_shape(s)) for s in range(size)]
        self.direct_send = self.mode == "all_to_all" and _direct(
            self.in_shape, [None if p is None else (p[0], p[2]) for p in self.sends])
        if self.mode == "all_gather":
            equal = len(set(self.block_counts)) == 1
            self.direct_recv = equal and _direct(self.out_shape, [None if p is None else (p[0], p[2])
                                                                  for p in self.recvs])
        else:
            self.direct_recv = self.mode == "all_to_all" and _direct(
                self.out_shape, [None if p is None else (p[0], p[2]) for p in self.recvs])
        # The own piece goes through the collective only when a buffer is the array itself (a split must not be
        # skipped in the middle of it); otherwise it is copied straight from x into the result.
        self.self_in_collective = self.direct_send or self.direct_recv
        self._converted = {}

    @staticmethod
    def _piece(sets_a, sets_b, side):
        """(selectors into the part on ``side`` (0: a, 1: b), None, piece shape, count) or None."""
        found = _pieces(sets_a, sets_b)
        if found is None:
            return None
        selectors, shape = found[side], found[2]
        return selectors, shape, math.prod(shape)

    @property
    def receive_count(self):
        """Elements of the receive buffer of :meth:`start`."""
        if self.mode == "all_gather":
            return max(self.block_counts) * self.size
        return sum(c for q, c in enumerate(self.recv_counts) if q != self.rank or self.self_in_collective)

    @property
    def bytes_crossing(self):
        """Elements this rank sends to other ranks (multiply by the itemsize for bytes)."""
        return sum(c for q, c in enumerate(self.send_counts) if q != self.rank)

    def _selectors(self, arrays):
        key = (arrays.package, arrays.device_id)
        found = self._converted.get(key)
        if found is None:
            found = ([None if p is None else arrays.selectors(p[0]) for p in self.sends],
                     [None if p is None else arrays.selectors(p[0]) for p in self.recvs])
            self._converted[key] = found
        return found

    # --- running -----------------------------------------------------------------------------------------------------
    def run(self, x, arrays, transport, stream=None, out=None):
        """The rank's new part: ``out`` (a C-contiguous array of the target part's shape and x's dtype, which the
        plan owns) when given, else a new array (``x`` itself when the partitions are equal)."""
        if self.identity and out is None:
            return x
        return self.start(x, arrays, transport, stream, out=out).finish()

    def start(self, x, arrays, transport, stream=None, async_op=False, out=None, buffer=None):
        """Begin moving ``x``; the returned :class:`_Pending` gives the received pieces or the finished part.
        ``buffer``: a 1-D receive buffer the caller owns (of :attr:`receive_count` elements), reused across runs."""
        sends, recvs = self._selectors(arrays)
        dtype = arrays.dtype(x)
        me = self.rank
        pending = _Pending(self, arrays, dtype, out, buffer)
        if self.mode == "local":
            pending.result = arrays.empty(self.out_shape, dtype) if out is None else out
            if sends[me] is not None:
                arrays.put(pending.result, recvs[me], arrays.take(x, sends[me]))
            return pending
        contiguous = arrays.is_c_contiguous(x)
        if self.mode == "all_gather":
            longest = max(self.block_counts)
            if contiguous and self.block_counts[me] == longest:
                send = arrays.flat(x)
            else:
                send = arrays.empty((longest,), dtype)
                if self.block_counts[me]:
                    arrays.copy(arrays.view(send, 0, self.block_counts[me], self.in_shape), x)
            recv = pending.receive_buffer(longest * self.size)
            pending.segments_at = [(s * longest, self.block_counts[s], self.source.local_shape(s))
                                   for s in range(self.size)]
            pending.work = transport.all_gather(send, recv, stream=stream, async_op=async_op)
            pending.recv = recv
            return pending
        send_counts, recv_counts = list(self.send_counts), list(self.recv_counts)
        if not self.self_in_collective:
            send_counts[me] = recv_counts[me] = 0
        if self.direct_send and contiguous:
            send = arrays.flat(x)
        else:  # (a strided x where a direct send was planned: packed, its own piece included as planned)
            send = arrays.empty((sum(send_counts),), dtype)
            offset = 0
            for q, piece in enumerate(self.sends):
                if piece is not None and send_counts[q]:
                    arrays.copy(arrays.view(send, offset, piece[2], piece[1]), arrays.take(x, sends[q]))
                    offset += piece[2]
        pending.in_collective = recv_counts[me] > 0 or self.recv_counts[me] == 0
        recv = pending.receive_buffer(sum(recv_counts))
        offset, segments = 0, []
        for s, piece in enumerate(self.recvs):
            count = recv_counts[s]
            segments.append(None if piece is None or not count else (offset, count, piece[1]))
            offset += count
        pending.segments_at = segments
        if not pending.in_collective:  # the own piece, straight from x
            pending.own = arrays.take(x, sends[me])
        pending.work = transport.all_to_all_v(send, send_counts, recv, recv_counts, stream=stream, async_op=async_op)
        pending.recv = recv
        return pending


class _Pending:
    """A started exchange: ``wait()`` completes the collective, ``segments()`` are the received pieces (views of the
    receive buffer, None where nothing came), ``finish()`` the rank's new part."""

    def __init__(self, plan, arrays, dtype, out, buffer):
        self.plan, self.arrays, self.dtype, self.out, self.buffer = plan, arrays, dtype, out, buffer
        self.work = self.recv = self.result = self.own = None
        self.segments_at = None
        self.in_collective = True

    def receive_buffer(self, count):
        """The collective's receive buffer: ``out`` itself when the pieces arrive in place, else a new one."""
        plan = self.plan
        if self.out is not None and plan.direct_recv and count == math.prod(plan.out_shape):
            return self.arrays.flat(self.out)
        if self.buffer is not None:
            return self.buffer[:count]
        return self.arrays.empty((count,), self.dtype)

    def wait(self):
        if self.work is not None:
            self.work.wait()
            self.work = None

    def segments(self):
        self.wait()
        return [None if at is None or not at[1] else self.arrays.view(self.recv, *at) for at in self.segments_at]

    def finish(self):
        if self.result is not None:
            return self.result
        self.wait()
        plan, arrays = self.plan, self.arrays
        if plan.direct_recv and (plan.mode == "all_gather" or self.in_collective):
            self.result = self.recv.reshape(plan.out_shape) if self.out is None else self.out
            return self.result
        result = arrays.empty(plan.out_shape, self.dtype) if self.out is None else self.out
        _, recvs = plan._selectors(arrays)
        for s, segment in enumerate(self.segments()):
            if segment is not None:
                arrays.put(result, recvs[s], segment)
        if self.own is not None and recvs[plan.rank] is not None:
            arrays.put(result, recvs[plan.rank], self.own)
        self.result = result
        return result
