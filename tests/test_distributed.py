"""mathpy.distributed.

In one process (no torch needed): partitions of every distribution cover the global array exactly; the FFT planner's
steps; exchanges planned for several ranks and run with a simulated all-to-all; the public API on a job of one
(:class:`~mathpy.distributed.LocalTransport`).

Across processes (torch needed, skipped without it): ``tests/_distributed_worker.py`` started as 2 and 4 ranks over
gloo, with the environment torchrun sets; every rank compares its part with the single-process reference and prints
one line per check. ``-m gpu``: the same on two GPUs over NCCL with torch and CuPy arrays.
"""

import itertools
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mathpy
import mathpy.distributed as md
from mathpy.distributed import BlockCyclic, Box, Pencil, Slab
from mathpy.distributed._arrays import arrays_for
from mathpy.distributed._exchange import Exchange
from mathpy.distributed._fft_plan import output_shape, plan_steps

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "_distributed_worker.py"


# --- partitions ------------------------------------------------------------------------------------------------------

def _distributions(ndim, size):
    found = [Slab(axis) for axis in range(ndim)]
    for p0 in range(1, size + 1):
        if size % p0 == 0 and ndim >= 2:
            found.append(Pencil((p0, size // p0), (0, ndim - 1)))
            if ndim == 2:
                found.append(BlockCyclic((p0, size // p0), (2, 3)))
    return found


def _owners(partition):
    """How many ranks hold each global index."""
    count = np.zeros(partition.shape, int)
    for sets in partition.sets:
        count[np.ix_(*[np.arange(s.start, s.stop) if isinstance(s, range) else s for s in sets])] += 1
    return count


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("shape", [(7, 5), (4, 9, 3), (1, 6)])
def test_partitions_tile_the_array_and_infer_back(size, shape):
    for dist in _distributions(len(shape), size):
        partition = dist.partition(shape, size)
        assert (_owners(partition) == 1).all(), dist
        locals_ = [partition.local_shape(r) for r in range(size)]
        assert dist.global_shape(locals_, None) == shape, dist


def test_slab_split_is_cufftmp_s():
    sets = Slab.Y.partition((2, 10), 4).sets
    assert [s[1] for s in sets] == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]


def test_block_cyclic_is_scalapack_s():
    partition = BlockCyclic((2, 3), (2, 1)).partition((7, 5), 6)
    assert partition.sets[1][0].tolist() == [0, 1, 4, 5]          # rank 1 = (0, 1): row blocks 0 and 2
    assert partition.sets[1][1].tolist() == [1, 4]                # column blocks 1 and 4
    assert partition.sets[5][0].tolist() == [2, 3, 6]             # rank 5 = (1, 2): row blocks 1 and 3
    assert partition.sets[5][1] == range(2, 3)


def test_box_partition_checks_the_tiling():
    boxes = [Box((0, 0), (2, 4)), Box((2, 0), (5, 4))]
    assert Box((0, 0), (2, 4)).partition((5, 4), 2, boxes).local_shape(1) == (3, 4)
    with pytest.raises(ValueError, match="overlap"):
        Box((0, 0), (3, 4)).partition((5, 4), 2, [Box((0, 0), (3, 4)), Box((2, 0), (4, 4))])
    with pytest.raises(ValueError, match="tile"):
        Box((0, 0), (2, 4)).partition((5, 4), 2, [Box((0, 0), (2, 4)), Box((2, 0), (4, 4))])


@pytest.mark.parametrize("bad, message", [
    (lambda: Slab(-1), "non-negative"),
    (lambda: Pencil((2, 0)), "positive"),
    (lambda: Pencil((2, 2), (1, 1)), "different"),
    (lambda: Box((0, 1), (2, 0)), "lower <= upper"),
    (lambda: BlockCyclic((2, 2), (0, 4)), "positive"),
])
def test_distributions_refuse_bad_arguments(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


def test_distribution_checks_name_the_problem():
    with pytest.raises(ValueError, match="needs 4 ranks, the job has 3"):
        Pencil((2, 2)).check(3, 3)
    with pytest.raises(ValueError, match="splits axis 2"):
        Slab(2).check(2, 2)
    assert Slab.X.global_shape([(2, 4), (2, 4), (1, 4)], None) == (5, 4)  # 5 over 3 ranks: 2, 2, 1
    with pytest.raises(ValueError, match="rank 0 holds 1 indices along axis 0"):
        Slab.X.global_shape([(1, 4), (2, 4), (2, 4)], None)


# --- the FFT's steps -------------------------------------------------------------------------------------------------

def _simulate(steps, global_input, fft_type, parity, size):
    """Run the steps for all ranks at once in one process (numpy.fft for the local transforms) and return the
    global result assembled from the ranks' parts, checking that each step's axes are whole on every rank."""
    parts = {r: _part(global_input, steps[0].before, r) for r in range(size)}
    for step in steps:
        if step.kind == "exchange":
            parts = _exchange_all(step.before, step.after, parts, size)
            continue
        for r in range(size):
            if step.before.is_empty(r):
                parts[r] = np.empty(step.after.local_shape(r), complex)
                continue
            x = parts[r]
            for axis in step.axes:
                assert x.shape[axis] == step.before.shape[axis], "transform axis not whole on a rank"
            if step.fft_type == "R2C":
                x = np.fft.rfftn(x, axes=step.axes)
            elif step.fft_type == "C2R":
                s = [step.after.shape[a] for a in step.axes]
                x = np.fft.irfftn(x, s=s, axes=step.axes) * math.prod(s)
            elif fft_type == "C2R":  # the C2C steps of an inverse transform, unnormalised
                x = np.fft.ifftn(x, axes=step.axes) * math.prod(x.shape[a] for a in step.axes)
            else:
                x = np.fft.fftn(x, axes=step.axes)
            parts[r] = x
    final = steps[-1].after
    result = np.zeros(final.shape, parts[0].dtype)
    for r in range(size):
        index = [np.arange(s.start, s.stop) if isinstance(s, range) else s for s in final.sets[r]]
        result[np.ix_(*index)] = parts[r]
    return result


def _part(g, partition, rank):
    index = [np.arange(s.start, s.stop) if isinstance(s, range) else s for s in partition.sets[rank]]
    return g[np.ix_(*index)]


class _Recorder:
    """A stand-in transport: records what each rank hands to the collective; :func:`_exchange_all` moves it."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size
        self.call = None

    def all_to_all_v(self, send, send_counts, recv, recv_counts, stream=None, async_op=False):
        self.call = ("a2a", send, list(send_counts), recv, list(recv_counts))
        return _NoWait()

    def all_gather(self, send, recv, stream=None, async_op=False):
        self.call = ("ag", send, [send.size] * self.size, recv, [send.size] * self.size)
        return _NoWait()


class _NoWait:
    def wait(self):
        pass


def _exchange_all(source, target, parts, size):
    arrays = arrays_for("numpy", None)
    plans = [Exchange(source, target, r) for r in range(size)]
    recorders = [_Recorder(r, size) for r in range(size)]
    pending = [plans[r].start(parts[r], arrays, recorders[r], async_op=True) for r in range(size)]
    calls = [rec.call for rec in recorders]
    if any(c is not None for c in calls):
        assert all(c is not None and c[0] == calls[0][0] for c in calls), "ranks disagree on the collective"
        for d in range(size):
            _, _, _, recv, recv_counts = calls[d]
            offset = 0
            for s in range(size):
                _, send, send_counts, _, _ = calls[s]
                start = sum(send_counts[:d]) if calls[s][0] == "a2a" else 0
                count = recv_counts[s]
                assert send_counts[d] == count
                recv[offset:offset + count] = send[start:start + count]
                offset += count
    return {r: pending[r].finish() for r in range(size)}


_FFT_CASES = [
    ("C2C", (6, 5), Slab.X, None), ("C2C", (6, 5), Slab.Y, Slab.Y), ("C2C", (5, 4, 6), Slab.X, None),
    ("C2C", (5, 4, 6), Slab.Y, Slab.Z), ("C2C", (4, 6, 5), Pencil((2, 2)), None),
    ("C2C", (4, 6, 5), Pencil((2, 2)), Pencil((2, 2))), ("R2C", (6, 8), Slab.X, None), ("R2C", (6, 8), Slab.Y, None),
    ("R2C", (5, 6, 4), Pencil((2, 2)), None), ("C2R", (6, 5), Slab.X, None), ("C2R", (6, 5), Slab.Y, None),
    ("C2R", (4, 5, 3), Slab.Y, None), ("C2R", (4, 6, 4), Pencil((2, 2), (1, 2)), Slab.X),
]


@pytest.mark.parametrize("fft_type, shape, dist, out", _FFT_CASES)
@pytest.mark.parametrize("parity", ["even", "odd"])
def test_fft_steps_compute_the_transform(fft_type, shape, dist, out, parity):
    if parity == "odd" and fft_type != "C2R":
        pytest.skip("parity applies to C2R")
    size = 4
    rng = np.random.default_rng(0)
    g = rng.standard_normal(shape)
    if fft_type != "R2C":
        g = g + 1j * rng.standard_normal(shape)
    final = output_shape(fft_type, shape, parity)
    out_partition = None if out is None else out.partition(final, size)
    steps = plan_steps(fft_type, shape, dist, dist.partition(shape, size), out, out_partition, size, parity)
    result = _simulate(steps, g, fft_type, parity, size)
    if fft_type == "C2R":
        want = np.fft.irfftn(g, s=final, axes=range(len(final))) * math.prod(final)
    elif fft_type == "R2C":
        want = np.fft.rfftn(g)
    else:
        want = np.fft.fftn(g)
    np.testing.assert_allclose(result, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    if out_partition is not None:
        assert steps[-1].after == out_partition
    exchanges = sum(s.kind == "exchange" for s in steps)
    assert exchanges <= (3 if fft_type == "C2R" or out is not None else 2)


def test_slab_fft_takes_one_exchange_and_ends_in_the_other_slab():
    steps = plan_steps("C2C", (8, 8, 8), Slab.X, Slab.X.partition((8, 8, 8), 2), None, None, 2)
    assert [s.kind for s in steps] == ["fft", "exchange", "fft"]
    assert steps[-1].after == Slab.Y.partition((8, 8, 8), 2)


@pytest.mark.parametrize("size", [2, 3, 5])
def test_exchanges_between_any_partitions(size):
    """Every pair of distributions, including replicated targets (matmul's gathers) and block-cyclic ones."""
    rng = np.random.default_rng(size)
    shape = (7, 9)
    g = rng.standard_normal(shape)
    dists = [Slab(0), Slab(1), BlockCyclic((1, size), (2, 2)), BlockCyclic((size, 1), (1, 3))]
    for src, dst in itertools.product(dists, dists):
        source, target = src.partition(shape, size), dst.partition(shape, size)
        parts = _exchange_all(source, target, {r: _part(g, source, r) for r in range(size)}, size)
        for r in range(size):
            np.testing.assert_array_equal(parts[r], _part(g, target, r), err_msg=f"{src} -> {dst}, rank {r}")
    replicated = md.Partition(shape, [(range(7), range(9))] * size)
    plan = Exchange(Slab(0).partition(shape, size), replicated, 0)
    assert plan.mode == "all_gather"
    parts = _exchange_all(Slab(0).partition(shape, size), replicated,
                          {r: _part(g, Slab(0).partition(shape, size), r) for r in range(size)}, size)
    assert all(np.array_equal(parts[r], g) for r in range(size))


def test_slab_transpose_packs_on_one_side_only():
    forward = Exchange(Slab.X.partition((4, 6, 2), 2), Slab.Y.partition((4, 6, 2), 2), 1)
    backward = Exchange(Slab.Y.partition((4, 6, 2), 2), Slab.X.partition((4, 6, 2), 2), 1)
    assert (forward.direct_send, forward.direct_recv) == (False, True)
    assert (backward.direct_send, backward.direct_recv) == (True, False)


# --- the API on a job of one process ---------------------------------------------------------------------------------

@pytest.fixture
def alone():
    context = md.initialize(transport=md.LocalTransport())
    yield context
    md.finalize()


def test_not_initialised_is_a_clear_error():
    md.finalize()
    with pytest.raises(md.NotInitializedError, match="initialize"):
        md.fftn(np.ones((2, 2), complex), Slab.X)


def test_job_of_one(alone, xp):
    if xp.on_gpu:
        pytest.skip("a LocalTransport job holds host arrays in this test")
    rng = np.random.default_rng(1)
    g = rng.standard_normal((6, 4, 5)) + 1j * rng.standard_normal((6, 4, 5))
    y = md.fftn(xp.asarray(g), Slab.X, norm="ortho")
    assert xp.is_native(y)
    np.testing.assert_allclose(xp.to_numpy(y), np.fft.fftn(g, norm="ortho"), rtol=1e-10, atol=1e-12)
    real = g.real.copy()
    half = md.rfftn(xp.asarray(real), Slab.Y)
    np.testing.assert_allclose(xp.to_numpy(md.irfftn(half, Slab.Y, last_axis_parity="odd")), real, atol=1e-12)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    d = md.matmul(xp.asarray(a), xp.asarray(b), distributions="row", epilog="relu")
    np.testing.assert_allclose(xp.to_numpy(d), np.maximum(a @ b, 0), rtol=1e-12)
    assert md.initialize() is alone  # initialising again returns the job's context


def test_plan_layouts_and_state(alone):
    x = np.ones((4, 6), np.complex64)
    with md.FFT(x, Slab.X) as plan:
        assert plan.prolog_layout[0] == (4, 6) and plan.epilog_box == ((0, 0), (4, 6))
        with pytest.raises(mathpy.InvalidPlanStateError, match="plan"):
            plan.execute()
        plan.plan()
        assert plan.steps == ["C2C FFT of axes (0, 1)"]
        with pytest.raises(ValueError, match="direction"):
            plan.execute(direction="sideways")
    with pytest.raises(mathpy.InvalidPlanStateError, match="freed"):
        plan.execute()


# --- across processes (gloo) -----------------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nprocs, groups, *extra, timeout=300, env=None):
    """Start ``nprocs`` ranks of the worker as torchrun would; returns every rank's check lines."""
    pytest.importorskip("torch")
    port = _free_port()
    processes = []
    for rank in range(nprocs):
        environment = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_RANK=str(rank),
                           LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                           PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                           OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
        processes.append(subprocess.Popen([sys.executable, str(WORKER), groups, *extra], env=environment, cwd=ROOT,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for rank, process in enumerate(processes):
            out, err = process.communicate(timeout=timeout)
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            assert process.returncode == 0 and lines and lines[-1].get("done"), \
                f"rank {rank} failed (exit {process.returncode}):\n{out[-3000:]}\n{err[-3000:]}"
            results.append([line for line in lines if "check" in line])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return results


def assert_all_passed(results, at_least):
    failures = [f"rank {rank}: {line['check']}: {line['detail']}" for rank, lines in enumerate(results)
                for line in lines if not line["ok"]]
    assert not failures, "\n".join(failures[:20])
    for lines in results:
        assert len(lines) >= at_least


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 4])
def test_fft_across_processes(nprocs):
    assert_all_passed(launch(nprocs, "fft"), at_least=200)


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 4])
def test_matmul_across_processes(nprocs):
    assert_all_passed(launch(nprocs, "matmul"), at_least=200)


@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [2, 4])
def test_bad_input_raises_on_every_rank(nprocs):
    results = launch(nprocs, "errors")
    assert_all_passed(results, at_least=10)
    messages = [{line["check"]: line["detail"] for line in lines} for lines in results]
    for check in messages[0]:  # every rank raised, with the same message
        assert len({m[check] for m in messages}) == 1, check


@pytest.mark.slow
def test_a_missing_rank_times_out_instead_of_hanging():
    results = launch(2, "timeout", env={"MATHPY_TEST_TIMEOUT": "3"}, timeout=120)
    assert_all_passed(results, at_least=1)
    assert any("DistributedTimeoutError" in line["detail"] for line in results[1])


def test_torch_job_of_one_and_mpi_bootstrap():
    """initialize() without a launcher makes a gloo job of one; with an (mpi4py-like) communicator it takes the
    rank, size and rendezvous from it."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    class OneRankComm:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1

        def allgather(self, value):
            return [value]

        def bcast(self, value, root=0):
            return value

    for comm in (None, OneRankComm()):
        environment = {name: os.environ.pop(name) for name in ("RANK", "WORLD_SIZE") if name in os.environ}
        try:
            context = md.initialize(comm=comm, timeout=30)
            assert (context.rank, context.size) == (0, 1) and isinstance(context.transport, md.TorchTransport)
            x = np.arange(12.0).reshape(3, 4)
            np.testing.assert_allclose(md.rfftn(x, Slab.X), np.fft.rfftn(x), atol=1e-12)
        finally:
            md.finalize()
            os.environ.update(environment)
        assert not dist.is_initialized()


@pytest.mark.gpu
def test_two_gpus_over_nccl():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    assert_all_passed(launch(2, "fft,matmul,errors", "cuda"), at_least=200)
