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
        sends = [None if p is None else (p[0], p[2]) for p in self.sends]
        recvs = [None if p is None else (p[0], p[2]) for p in self.recvs]
        self.direct_send = self.mode == "all_to_all" and _direct(self.in_shape, sends)
        if self.mode == "all_gather":
            self.direct_recv = len(set(self.block_counts)) == 1 and _direct(self.out_shape, recvs)
        else:
            self.direct_recv = self.mode == "all_to_all" and _direct(self.out_shape, recvs)
        # The own piece is copied straight from x into the result while the others travel, unless the collective
        # works in place on x or on the result and the own piece sits between others there (a split cannot be
        # skipped in the middle of a buffer): then it travels with them.
        self._send_span = _span_without(self.send_counts, rank) if self.direct_send else None
        self._recv_span = _span_without(self.recv_counts, rank) if self.direct_recv else None
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
        """The rank's new part: ``out`` (an array of the target part's shape and x's dtype, any strides, which the
        plan owns) when given, else a new C-contiguous array (``x`` itself when the partitions are equal)."""
        if self.identity and out is None:
            return x
        return self.start(x, arrays, transport, stream, out=out).finish()

    def start(self, x, arrays, transport, stream=None, async_op=False, out=None, buffer=None):
        """Begin moving ``x``; the returned :class:`_Pending` gives the received pieces or the finished part.
        ``buffer``: a 1-D receive buffer the caller owns, reused across runs (when the pieces are not received in
        place)."""
        sends, recvs = self._selectors(arrays)
        dtype = arrays.dtype(x)
        me = self.rank
        result = arrays.empty(self.out_shape, dtype) if out is None else out
        pending = _Pending(self, arrays, result)
        if self.mode == "local":
            if sends[me] is not None:
                arrays.put(result, recvs[me], arrays.take(x, sends[me]))
            pending.done = True
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
            pending.in_place = buffer is None and self.direct_recv and arrays.is_c_contiguous(result)
            recv = arrays.flat(result) if pending.in_place else _receive_buffer(arrays, buffer, longest * self.size,
                                                                                 dtype)
            pending.segments_at = [(s * longest, self.block_counts[s], self.source.local_shape(s))
                                   for s in range(self.size)]
            pending.recv = recv
            pending.work = transport.all_gather(send, recv, stream=stream, async_op=True)
        else:
            send_direct = self.direct_send and contiguous
            pending.in_place = recv_direct = buffer is None and self.direct_recv and arrays.is_c_contiguous(result)
            own = self.send_counts[me] > 0
            apart = own and not (send_direct and self._send_span is None) and not (recv_direct and
                                                                                  self._recv_span is None)
            send_counts, recv_counts = list(self.send_counts), list(self.recv_counts)
            if apart:
                send_counts[me] = recv_counts[me] = 0
            if send_direct:
                send = arrays.flat(x)
                if apart:
                    send = send[self._send_span[0]:self._send_span[1]]
            else:
                send = arrays.empty((sum(send_counts),), dtype)
                offset = 0
                for q, piece in enumerate(self.sends):
                    if piece is not None and send_counts[q]:
                        arrays.copy(arrays.view(send, offset, piece[2], piece[1]), arrays.take(x, sends[q]))
                        offset += piece[2]
            if recv_direct:
                recv = arrays.flat(result)
                if apart:
                    recv = recv[self._recv_span[0]:self._recv_span[1]]
            else:
                recv = _receive_buffer(arrays, buffer, sum(recv_counts), dtype)
            offset, segments = 0, []
            for s, piece in enumerate(self.recvs):
                count = recv_counts[s]
                segments.append(None if piece is None or not count else (offset, count, piece[1]))
                offset += count
            pending.segments_at, pending.recv = segments, recv
            pending.work = transport.all_to_all_v(send, send_counts, recv, recv_counts, stream=stream,
                                                  async_op=True)
            if apart:  # while the other pieces travel
                arrays.put(result, recvs[me], arrays.take(x, sends[me]))
        if not async_op:
            pending.wait()
        return pending


def _span_without(counts, rank):
    """The flat range of a buffer holding ``counts`` back to back in rank order that excludes ``rank``'s part, or
    None when that part lies between others."""
    total, before = sum(counts), sum(counts[:rank])
    if counts[rank] == 0:
        return 0, total
    if before == 0:
        return counts[rank], total
    if before + counts[rank] == total:
        return 0, before
    return None


def _receive_buffer(arrays, buffer, count, dtype):
    return buffer[:count] if buffer is not None else arrays.empty((count,), dtype)


class _Pending:
    """A started exchange: ``wait()`` completes the collective, ``segments()`` are the received pieces (views of the
    receive buffer, None where nothing came), ``finish()`` the rank's new part."""

    def __init__(self, plan, arrays, result):
        self.plan, self.arrays, self.result = plan, arrays, result
        self.work = self.recv = self.segments_at = None
        self.in_place = self.done = False

    def wait(self):
        if self.work is not None:
            self.work.wait()
            self.work = None

    def segments(self):
        self.wait()
        return [None if at is None or not at[1] else self.arrays.view(self.recv, *at) for at in self.segments_at]

    def finish(self):
        self.wait()
        if not self.done:
            self.done = True
            if not self.in_place:
                _, recvs = self.plan._selectors(self.arrays)
                for s, segment in enumerate(self.segments()):
                    if segment is not None:
                        self.arrays.put(self.result, recvs[s], segment)
        return self.result
