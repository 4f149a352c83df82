"""The GPU code path of the matmul API, run without a GPU: torch CPU tensors pose as device arrays (an array package
plugged in through mathpy's package interface) and a stand-in engine (plugged in through the engine table) reads the
raw pointers + layouts the API hands to cuBLASLt (as cuBLASLt would) and computes with the CPU engine. This checks
what the API owns on the GPU path (pointers, strides, copies, host<->device moves, output allocation, streams, the
prepared calls) on every CI run; tests/test_matmul_api_gpu.py checks the real thing on a GPU."""

import contextlib
import threading

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _fake_gpu import host_view, pretend_a_gpu  # noqa: E402
from mathpy import _engines, _packages  # noqa: E402
from mathpy._packages._torch import TorchPackage  # noqa: E402
from mathpy.host.matmul import Matmul, MatmulEpilog, matmul, matmul_plan_cache  # noqa: E402
from mathpy.host.matmul import _stateless  # noqa: E402
from mathpy.host.matmul._cpu import CPUEngine  # noqa: E402

RNG = np.random.default_rng(3)


class PosingTorch(TorchPackage):
    """torch, with CPU tensors posing as tensors on cuda:0: "device" allocations, uploads and downloads are CPU
    tensors and copies; the current stream is per thread (7 unless a test sets another) and synchronisations are
    recorded."""

    def __init__(self):
        super().__init__()
        self._local, self.synchronized = threading.local(), []
        self.capturing = set()  # streams that pose as capturing a CUDA graph

    current = property(lambda self: getattr(self._local, "stream", 7),
                       lambda self, stream: setattr(self._local, "stream", stream))

    def is_capturing(self, device_id, stream):
        return (self.current if stream is None else stream) in self.capturing

    def describe(self, tensor):
        shape, strides, dtype, _, pointer = super().describe(tensor)
        return shape, strides, dtype, 0, pointer

    def device(self, device_id):
        return torch.device("cpu")

    def current_stream(self, device_id):
        return self.current

    @contextlib.contextmanager
    def stream_scope(self, device_id, stream):
        previous = self.current
        self.current = previous if stream is None else stream
        try:
            yield
        finally:
            self.current = previous

    def _to_numpy(self, tensor, stream):
        return self.as_numpy(tensor).copy()

    def _from_numpy(self, host, device_id):
        return self.from_host(np.array(host))

    def _synchronize(self, stream):
        self.synchronized.append(stream)


def _array_at(pointer, dtype, shape, strides):
    return host_view(pointer, dtype, shape, strides)


class PointerEngine:
    """Takes what CublasLtEngine takes (device pointers, raw stream) and computes it with the CPU engine."""

    instances = []

    def __init__(self, problem, *, execution=None, options=None, preferences=None, allocator=None):
        self.problem, self.allocator = problem, allocator
        self.algorithms = ["fake-algorithm"]
        self.workspace_bytes = 1024
        self.calls, self.streams, self.freed = 0, [], False
        self.lock = threading.Lock()
        self._cpu = CPUEngine(problem)
        PointerEngine.instances.append(self)

    def _matrix(self, pointer, layout):
        return _array_at(pointer, layout.dtype, (layout.batch, layout.rows, layout.cols),
                         (layout.batch_stride, layout.row_stride, layout.col_stride))

    def _epilog_array(self, name, pointer, layout):
        if name in ("relu_aux", "gelu_aux"):
            unit = 8 if name == "relu_aux" else 1
            rows = layout.col_stride // unit
            return _array_at(pointer, layout.dtype, (layout.batch, rows, layout.cols),
                             (layout.batch_stride // unit, 1, rows))
        return _array_at(pointer, layout.dtype, (layout.batch, layout.rows), (layout.batch_stride, 1))

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream):
        assert not self.freed
        for value in (a, b, d, *epilog_inputs.values(), *epilog_outputs.values()):
            assert isinstance(value, int) and value > 0
        p = self.problem
        self.calls += 1
        self.streams.append(stream)
        self._cpu.execute(self._matrix(a, p.a), self._matrix(b, p.b), None if c is None else self._matrix(c, p.c),
                          self._matrix(d, p.d),
                          {n: self._epilog_array(n, epilog_inputs[n], lay) for n, lay in p.epilog_inputs},
                          {n: self._epilog_array(n, epilog_outputs[n], lay) for n, lay in p.epilog_outputs},
                          alpha, beta)

    def autotune(self, operands, stream=None, iterations=3):
        self.execute(**operands, stream=stream)
        return [(self.algorithms[0], 1e-6)]

    def free(self):
        self.freed = True


@pytest.fixture
def fake_gpu(monkeypatch):
    """One "GPU": torch CPU tensors pose as its arrays, PointerEngine as cuBLASLt."""
    pretend_a_gpu(monkeypatch)
    package = PosingTorch()
    PointerEngine.instances.clear()
    matmul_plan_cache.clear()
    _stateless.forget()
    with _packages.use(package, device_package_name="torch"), _engines.use("matmul", "cuda", PointerEngine):
        yield package
    matmul_plan_cache.clear()
    _stateless.forget()  # torch CPU tensors posed as device arrays: their prepared calls must not outlive this


def t(x):
    return torch.from_numpy(np.asarray(x))


def test_fast_path_uses_the_callers_memory(fake_gpu):
    a, b, bias = RNG.standard_normal((3, 6, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal(6)
    ta, tb = t(a), t(np.swapaxes(RNG.standard_normal((4, 5)), 0, 1).copy()).T.contiguous().T  # column-major b
    b = tb.numpy()
    with Matmul(ta, tb) as mm:
        mm.plan(epilog="relu_aux_bias", epilog_inputs={"bias": t(bias)})
        assert mm.prepared_call.direct  # nothing to copy: the operands' own addresses
        engine = PointerEngine.instances[-1]
        assert engine.allocator.package.name == "torch" and engine.allocator.stream == 7  # workspaces' home
        assert mm.prepared_call.problem.b.row_stride == 1  # transposed storage reaches the engine as strides
        d, aux = mm.execute()
        assert isinstance(d, torch.Tensor) and engine.calls == 1
        np.testing.assert_allclose(d.numpy(), np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
        assert aux["relu_aux"].shape == (3, 16, 4) and aux["relu_aux"].stride()[-2:] == (1, 16)
        a[...] = 1.0  # in-place updates are seen (the caller's memory is used)
        d, aux = mm.execute()
        np.testing.assert_allclose(d.numpy(), np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
    assert engine.freed


@pytest.mark.parametrize("name", [e.name for e in MatmulEpilog if e is not MatmulEpilog.DEFAULT])
def test_every_epilog_through_pointers(fake_gpu, name):
    m, n, k = 13, 7, 9
    dtype = np.float32 if "GELU" in name else np.float64  # keeps the GELU cases on float32 tolerances
    a, b = RNG.standard_normal((2, m, k)).astype(dtype), RNG.standard_normal((k, n)).astype(dtype)
    inputs = {}
    if "BIAS" in name and "BGRAD" not in name:
        inputs["bias"] = RNG.standard_normal(m).astype(dtype)
    if name.startswith("DRELU"):
        inputs["relu_aux"] = matmul(RNG.standard_normal((2, m, k)), b, epilog="relu_aux", execution="cpu")[1]["relu_aux"]
    if name.startswith("DGELU"):
        inputs["gelu_aux"] = matmul(RNG.standard_normal((2, m, k)).astype(dtype), b, epilog="gelu_aux",
                                    execution="cpu")[1]["gelu_aux"]
    want = matmul(a, b, epilog=name, epilog_inputs=inputs or None, execution="cpu")
    for operands in ("torch", "numpy"):  # fast path, and numpy operands moved to the "device" and back
        if operands == "torch":
            got = matmul(t(a), t(b), epilog=name, epilog_inputs={k: t(v) for k, v in inputs.items()} or None)
        else:
            got = matmul(a, b, epilog=name, epilog_inputs=inputs or None, execution="cuda")
        want_d, want_aux = want if isinstance(want, tuple) else (want, {})
        got_d, got_aux = got if isinstance(got, tuple) else (got, {})
        np.testing.assert_allclose(np.asarray(got_d), want_d, rtol=1e-12)
        for key in want_aux:
            np.testing.assert_allclose(np.asarray(got_aux[key]), want_aux[key], rtol=1e-12)


@pytest.mark.parametrize("case", ["stepped", "negative", "partial-broadcast", "row-major-c-epilog", "broadcast-c",
                                  "vector-a", "vector-b"])
def test_copies_and_moves(fake_gpu, case):
    a, b, c = RNG.standard_normal((2, 5, 6)), RNG.standard_normal((6, 4)), None
    kwargs = {}
    if case == "stepped":
        a = RNG.standard_normal((2, 5, 12))[:, :, ::2]
    if case == "negative":
        a = a[:, ::-1, :]
    if case == "partial-broadcast":
        a, b = RNG.standard_normal((3, 1, 5, 6)), RNG.standard_normal((2, 6, 4))
    if case == "row-major-c-epilog":
        c = RNG.standard_normal((2, 5, 4))
        kwargs = {"epilog": "relu", "beta": 0.5}
    if case == "broadcast-c":
        c = RNG.standard_normal(4)
        kwargs = {"beta": 1.0}
    if case == "vector-a":
        a = RNG.standard_normal(6)
    if case == "vector-b":
        b = RNG.standard_normal(6)
    want = matmul(a, b, c, execution="cpu", **kwargs)
    got_numpy = matmul(a, b, c, execution="cuda", **kwargs)
    assert isinstance(got_numpy, np.ndarray)
    np.testing.assert_allclose(got_numpy, want, rtol=1e-12)
    if case != "negative":  # torch has no negative strides
        tc = None if c is None else t(c)
        base = a.base if a.base is not None else a  # the same strides on a torch tensor
        ta = torch.as_strided(t(base), a.shape, tuple(st // a.itemsize for st in a.strides)) if a.base is not None \
            else t(a)
        got = matmul(ta, t(b), tc, **kwargs)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_autotune_and_reset_on_the_gpu_path(fake_gpu):
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 5))
    with Matmul(t(a), t(b)) as mm:
        mm.plan()
        assert mm.autotune(iterations=2)[0][0] == "fake-algorithm"
        a2 = RNG.standard_normal((4, 3))
        mm.reset_operands(a=t(a2))
        np.testing.assert_allclose(mm.execute().numpy(), a2 @ b, rtol=1e-12)
        with pytest.raises(ValueError):
            mm.reset_operands(a=a2)  # a NumPy array is not on the device the plan was built for


def test_stateful_calls_take_the_current_stream_when_they_are_made(fake_gpu):
    """issue 20: Matmul resolves stream=None at every call. The constructor's stream is not remembered; plan()
    allocates the workspace on the stream current then; execute (the direct path and the copying one) and autotune
    run on the stream current at their call; reset_operands changes nothing about it; an explicit stream wins."""
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    for step, direct in ((1, True), (2, False)):  # read in place; strided rows: copied at every execute
        with Matmul(t(a)[:, ::step], t(b)[::step], stream=77) as mm:
            with fake_gpu.stream_scope(0, 11):
                mm.plan()
            assert mm.prepared_call.direct == direct
            engine = PointerEngine.instances[-1]
            assert engine.allocator.stream == 11
            for stream in (22, 23):
                with fake_gpu.stream_scope(0, stream):
                    d = mm.execute()
                assert engine.streams[-1] == stream
                np.testing.assert_allclose(d.numpy(), a[:, ::step] @ b[::step], rtol=1e-12)
            with fake_gpu.stream_scope(0, 22):
                mm.execute(stream=5)
                assert engine.streams[-1] == 5
                mm.autotune(iterations=1)
                assert engine.streams[-1] == 22
            mm.reset_operands(b=t(b)[::step], stream=55)
            mm.execute()
            assert engine.streams[-1] == 7  # the current stream (55 was only the operands')
    with pytest.raises(TypeError, match="stream must be"):
        Matmul(t(a), t(b), stream=1.5)
    for out in (None, torch.empty(6, 4, dtype=torch.float64)):  # a stateless first call (and out=) on its stream=
        matmul(t(a), t(b), epilog="relu", stream=13, out=out)
        assert PointerEngine.instances[-1].allocator.stream == 13 and PointerEngine.instances[-1].streams[-1] == 13
        matmul_plan_cache.clear()


def test_capture_refuses_what_a_graph_cannot_record_before_any_work(fake_gpu):
    """issue 20: on a capturing stream, Matmul.plan, a stateless first call, autotune, host operands with GPU
    execution, blocking=True and release_workspace=True raise StreamCaptureError before any work; planned calls are
    recorded on the capture stream."""
    import mathpy
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    ta, tb = t(a), t(b)
    fake_gpu.capturing.add(40)
    with fake_gpu.stream_scope(0, 40):
        with Matmul(ta, tb) as mm, pytest.raises(mathpy.StreamCaptureError, match="Matmul.plan cannot be captured"):
            mm.plan()
        with pytest.raises(mathpy.StreamCaptureError, match="call it once with the same arguments"):
            matmul(ta, tb, epilog="relu")
    assert not PointerEngine.instances
    matmul(ta, tb, epilog="relu")  # the warm-up plans and caches it
    with Matmul(ta, tb) as mm, Matmul(a, b, execution="cuda") as host, \
            Matmul(ta, tb, options={"blocking": True}) as blocking:
        for plan in (mm, host, blocking):
            plan.plan()
        calls = sum(e.calls for e in PointerEngine.instances)
        with fake_gpu.stream_scope(0, 40):
            for call, match in ((mm.autotune, "autotune"), (host.execute, "host"), (blocking.execute, "blocking"),
                                (lambda: mm.execute(release_workspace=True), "release_workspace")):
                with pytest.raises(mathpy.StreamCaptureError, match=match):
                    call()
            assert sum(e.calls for e in PointerEngine.instances) == calls and not fake_gpu.synchronized
            recorded = [mm.execute(), matmul(ta, tb, epilog="relu")]
        assert {e.streams[-1] for e in PointerEngine.instances if e.streams} == {40}
    np.testing.assert_allclose(recorded[0].numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(recorded[1].numpy(), np.maximum(a @ b, 0), rtol=1e-12)


def test_float8_b_is_given_column_major(fake_gpu):
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-3, 4, (8, 16)) / 2).astype(e4m3)
    b = (RNG.integers(-3, 4, (16, 4)) / 2).astype(e4m3)
    ta, tb = _packages.get("torch").from_host(a), _packages.get("torch").from_host(b)
    with Matmul(ta, tb, options={"result_type": "float32"}) as mm:
        mm.plan()
        problem = mm.prepared_call.problem
        assert problem.a.col_stride == 1 and problem.b.row_stride == 1  # cuBLASLt's "TN"
        np.testing.assert_allclose(mm.execute().numpy(), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-6)


def test_stateless_prepared_calls(fake_gpu, monkeypatch):
    """A repeated stateless call with the same operand facts runs the first call's prepared call (no Matmul is
    planned), reads the new operands' memory, runs on the current stream with the same plan, and plans again when a
    fact changes or the engine was evicted."""
    a, b, bias = RNG.standard_normal((3, 6, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal(6)
    first = matmul(t(a), t(b), epilog="relu_bias", epilog_inputs={"bias": t(bias)})
    assert _stateless.remembered() == 1
    planned = []
    real_plan = _stateless.plan_problem  # the first call's planning (no Matmul object)
    monkeypatch.setattr(_stateless, "plan_problem", lambda *args, **kw: (planned.append(1), real_plan(*args, **kw))[1])
    a2, b2, bias2 = RNG.standard_normal((3, 6, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal(6)
    got = matmul(t(a2), t(b2), epilog="relu_bias", epilog_inputs={"bias": t(bias2)})
    assert not planned  # the prepared call
    np.testing.assert_allclose(first.numpy(), np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
    np.testing.assert_allclose(got.numpy(), np.maximum(a2 @ b2 + bias2[:, None], 0), rtol=1e-12)
    got = matmul(t(a2), t(b2).T.contiguous().T, epilog="relu_bias", epilog_inputs={"bias": t(bias2)})
    assert planned  # other strides: the full path
    np.testing.assert_allclose(got.numpy(), np.maximum(a2 @ b2 + bias2[:, None], 0), rtol=1e-12)
    planned.clear()
    engine = PointerEngine.instances[0]
    with fake_gpu.stream_scope(0, 8):  # another current stream: the same plan, run on that stream
        matmul(t(a2), t(b2), epilog="relu_bias", epilog_inputs={"bias": t(bias2)})
    assert not planned and engine.streams[-1] == 8 and len(PointerEngine.instances) == 2
    matmul(t(a2), t(b2), epilog="relu_bias", epilog_inputs={"bias": t(bias2)}, stream=9)
    assert not planned and engine.streams[-1] == 9
    matmul_plan_cache.clear()  # plans evicted: planned again through the cache
    got = matmul(t(a), t(b), epilog="relu_bias", epilog_inputs={"bias": t(bias)})
    assert planned and engine.freed
    np.testing.assert_allclose(got.numpy(), np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
    vec = matmul(t(a[0, 0]), t(b))  # 1-D a: the prepared call drops the same axes
    vec2 = matmul(t(a2[0, 0]), t(b))
    np.testing.assert_allclose(vec2.numpy(), a2[0, 0] @ b, rtol=1e-12)
    assert vec.shape == vec2.shape == (4,)


def test_one_plan_serves_many_threads_and_streams(fake_gpu):
    """16 threads, each on its own stream, multiply 4 shapes: one plan per shape, cache hits on all but the first
    calls, every result right."""
    shapes = [(8, 5, 4), (6, 3, 7), (16, 16, 16), (2, 9, 3)]
    operands = {s: (RNG.standard_normal(s[:2]), RNG.standard_normal(s[1:])) for s in shapes}
    before, errors = matmul_plan_cache.info(), []

    def work(stream):
        try:
            with fake_gpu.stream_scope(0, stream):
                for _ in range(5):
                    for s in shapes:
                        a, b = operands[s]
                        np.testing.assert_allclose(matmul(t(a), t(b)).numpy(), a @ b, rtol=1e-12)
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(100 + i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    info = matmul_plan_cache.info()
    assert info.misses - before.misses == len(shapes) and info.evictions == before.evictions
    assert info.hits - before.hits == 16 * 5 * len(shapes) - len(shapes)
    assert len(PointerEngine.instances) == len(shapes)
    assert {s for e in PointerEngine.instances for s in e.streams} == set(range(100, 116))


def test_blocking_synchronizes_the_stream(fake_gpu):
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 5))
    matmul(t(a), t(b), options={"blocking": True})
    assert fake_gpu.synchronized == [7]


def test_stateful_direct_call(fake_gpu):
    """A stateful plan with nothing to copy and no epilog output executes through one prebuilt closure: a fresh
    result each call, reading the caller's current memory."""
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    ta, tb = t(a), t(b)
    with Matmul(ta, tb) as mm:
        mm.plan(epilog="relu")
        assert mm.prepared_call.direct
        d1 = mm.execute()
        np.testing.assert_allclose(d1.numpy(), np.maximum(a @ b, 0), rtol=1e-12)
        a[...] = -a
        d2 = mm.execute()
        assert d2 is not d1
        np.testing.assert_allclose(d2.numpy(), np.maximum(a @ b, 0), rtol=1e-12)
    with Matmul(ta, tb) as mm:  # an epilog output: allocated too, still no copy
        mm.plan(epilog="relu_aux")
        assert mm.prepared_call.direct
        d, aux = mm.execute()
        np.testing.assert_allclose(d.numpy(), np.maximum(a @ b, 0), rtol=1e-12)
    with Matmul(t(a)[:, ::2], tb[::2]) as mm:  # strided rows: copied at every execute
        mm.plan()
        assert not mm.prepared_call.direct
        np.testing.assert_allclose(mm.execute().numpy(), a[:, ::2] @ b[::2], rtol=1e-12)


class AllocationsByStream(PosingTorch):
    """PosingTorch that records the stream each result allocation is ordered on."""

    def __init__(self):
        super().__init__()
        self.allocated_on = []

    def _maker(self, device_id, stream, shape, dtype, order, zero):
        make = super()._maker(device_id, stream, shape, dtype, order, zero)

        def recorded():
            self.allocated_on.append(self.current if stream is None else stream)
            return make()
        return recorded


def test_remembered_call_follows_the_current_stream(fake_gpu):
    """A remembered stateless call reads the current stream at each call: its result is allocated in that stream's
    order and the engine runs on it (an epilog output too), without planning again; stream= wins over it."""
    package = AllocationsByStream()
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    with _packages.use(package, device_package_name="torch"):
        ta, tb = t(a), t(b)
        matmul(ta, tb, epilog="relu_aux")
        engine = PointerEngine.instances[-1]
        for stream in (8, 9, 8):
            with package.stream_scope(0, stream):
                d, aux = matmul(ta, tb, epilog="relu_aux")
            assert package.allocated_on[-2:] == [stream, stream] and engine.streams[-1] == stream
            np.testing.assert_allclose(d.numpy(), np.maximum(a @ b, 0), rtol=1e-12)
        with package.stream_scope(0, 8):
            matmul(ta, tb, epilog="relu_aux", stream=11)
        assert package.allocated_on[-2:] == [11, 11] and engine.streams[-1] == 11
        assert len(PointerEngine.instances) == 1 and _stateless.remembered() == 1


# --- integer products on the GPU path: cuBLASLt's int8 kernels, their TN form, int32 results cast back -------------

def test_int8_goes_to_cuBLASLt_as_TN_with_an_int32_result_wrapped_back(fake_gpu):
    a = RNG.integers(-128, 128, (2, 8, 12)).astype(np.int8)
    b = np.asfortranarray(RNG.integers(-128, 128, (12, 4)).astype(np.int8))  # already column-major: no copy
    c = RNG.integers(-128, 128, (2, 8, 4)).astype(np.int8)
    with Matmul(t(a), t(b).T.contiguous().T, t(c), alpha=3, beta=-1) as mm:
        mm.plan()
        problem = mm.prepared_call.problem
        assert problem.compute_type == "32I" and problem.scale_type == np.int32
        assert problem.a.col_stride == 1 and problem.b.row_stride == 1  # cuBLASLt's "TN"
        assert problem.a.dtype == problem.b.dtype == np.int8 and problem.d.dtype == problem.c.dtype == np.int32
        assert problem.d.is_row_major  # C order for C-ordered a
        got = mm.execute()
    assert got.dtype == torch.int8 and got.is_contiguous()
    expected = (3 * (a.astype(np.int32) @ b) - c.astype(np.int32)).astype(np.int8)  # NumPy's wrap-around
    np.testing.assert_array_equal(got.numpy(), expected)


def test_int8_with_an_int32_result_and_column_major_a(fake_gpu):
    a = RNG.integers(-128, 128, (8, 12)).astype(np.int8)
    ta = t(np.asfortranarray(a)).T.contiguous().T  # column-major: copied into the row-major A cuBLASLt takes
    with Matmul(ta, t(RNG.integers(-5, 5, (12, 4)).astype(np.int8)), options={"result_type": "int32"}) as mm:
        mm.plan()
        problem = mm.prepared_call.problem
        assert problem.a.col_stride == 1 and problem.d.dtype == np.int32
        b = mm._r.staged["b"].op.tensor.numpy()
        got = mm.execute()
    assert got.dtype == torch.int32 and not got.is_contiguous()  # a's order (column-major)
    np.testing.assert_array_equal(got.numpy(), a.astype(np.int32) @ b)


def test_bool_goes_through_int8_and_comes_back_as_count_not_zero(fake_gpu):
    a, b = RNG.integers(0, 2, (6, 8)).astype(bool), RNG.integers(0, 2, (8, 5)).astype(bool)
    with Matmul(t(a), t(b)) as mm:
        mm.plan()
        problem = mm.prepared_call.problem
        assert problem.a.dtype == np.int8 and problem.d.dtype == np.int32 and problem.compute_type == "32I"
        got = mm.execute()
    assert got.dtype == torch.bool
    np.testing.assert_array_equal(got.numpy(), np.matmul(a, b))


def test_mixed_dtypes_are_promoted_on_the_gpu_path(fake_gpu):
    a, b = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6, 3))
    first = matmul(t(a), t(b))
    again = matmul(t(a), t(b))  # not remembered (a copy is made): the full path again, same answer
    assert first.dtype == torch.float64 and first.is_contiguous()
    np.testing.assert_allclose(first.numpy(), a.astype(np.float64) @ b, rtol=1e-12)
    np.testing.assert_array_equal(first.numpy(), again.numpy())


def test_integers_other_than_int8_are_refused_before_any_work(fake_gpu):
    before = matmul_plan_cache.info().misses
    for dtype in (np.int16, np.int32, np.int64, np.uint8):
        x = t(np.ones((4, 4), dtype))
        with pytest.raises(TypeError, match="no exact GPU kernel"):
            matmul(x, x)
    assert matmul_plan_cache.info().misses == before


def test_sixteen_bit_results_are_c_ordered_unless_asked(fake_gpu):
    a, b = RNG.standard_normal((3, 8, 6)).astype(np.float16), RNG.standard_normal((6, 5)).astype(np.float16)
    assert matmul(t(a), t(b)).is_contiguous()
    f = matmul(t(a), t(b), options={"result_order": "F"})
    assert f.stride() == (40, 1, 8)
    np.testing.assert_array_equal(f.numpy(), matmul(t(a), t(b)).numpy())


def test_float8_gelu_aux_scale_and_amax_through_pointers(fake_gpu):
    """The GPU path hands the aux scale array and the aux amax output to the engine by pointer (an epilog input
    and output like the others) and returns ``gelu_aux_amax`` in the caller's package."""
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-4, 5, (12, 16)) / 4).astype(e4m3)
    b = (RNG.integers(-4, 5, (16, 8)) / 4).astype(e4m3)
    x = a.astype(np.float64) @ b.astype(np.float64)
    torch_package = _packages.get("torch")
    scale = torch_package.from_host(np.array([0.5], np.float32))
    d, aux = matmul(torch_package.from_host(a), torch_package.from_host(b), epilog="gelu_aux",
                    epilog_inputs={"aux_scale": scale}, preferences={"aux_type": "float8_e4m3fn", "aux_amax": True})
    problem = PointerEngine.instances[-1].problem
    assert dict(problem.epilog_inputs)["aux_scale"].dtype == np.float32 and problem.aux_scale is None
    assert [name for name, _ in problem.epilog_outputs] == ["gelu_aux", "gelu_aux_amax"]
    assert isinstance(aux["gelu_aux_amax"], torch.Tensor) and aux["gelu_aux_amax"].item() == np.max(np.abs(x))
    np.testing.assert_allclose(aux["gelu_aux"][:12].float().numpy(), 0.5 * x, rtol=2.0 ** -4, atol=2.0 ** -10)
