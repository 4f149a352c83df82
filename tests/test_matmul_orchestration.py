"""The GPU code path of the matmul API, run without a GPU: torch CPU tensors pose as device arrays and a stand-in engine
reads the raw pointers + layouts the API hands to cuBLASLt (as cuBLASLt would) and computes with the CPU engine.
This checks what the API owns on the GPU path (pointers, strides, copies, host<->device moves, output allocation,
the prebuilt fast path) on every CI run; tests/test_matmul_api_gpu.py checks the real thing on a GPU."""

import contextlib
import ctypes

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mathpy import _operands  # noqa: E402
from mathpy.host.matmul import Matmul, MatmulEpilog, matmul  # noqa: E402
from mathpy.host.matmul import _matmul  # noqa: E402
from mathpy.host.matmul._cpu import CPUEngine  # noqa: E402

RNG = np.random.default_rng(3)


def _array_at(pointer, dtype, shape, strides):
    """A NumPy view of raw memory, as a library would address it (element strides)."""
    dtype = np.dtype(dtype)
    if min(shape) == 0:
        return np.zeros(shape, dtype)
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    raw = np.frombuffer((ctypes.c_uint8 * (extent * dtype.itemsize)).from_address(pointer), np.uint8)
    return np.lib.stride_tricks.as_strided(raw.view(dtype), shape, tuple(s * dtype.itemsize for s in strides))


class PointerEngine:
    """Takes what CublasLtEngine takes (device pointers, raw stream) and computes it with the CPU engine."""

    instances = []

    def __init__(self, problem, *, execution=None, options=None, preferences=None, package=None, stream=None):
        self.problem, self.package, self.stream = problem, package, stream
        self.algorithms = ["fake-algorithm"]
        self.workspace_bytes = 1024
        self.calls, self.freed = 0, False
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
    """torch CPU tensors report device 0; device allocations and moves make torch CPU tensors."""
    real_wrap = _operands.wrap_operand

    def wrap(obj, name="operand"):
        op = real_wrap(obj, name)
        if op.package == "torch":
            op.device_id = 0
        return op

    def wrap_all(named):
        return {key: None if value is None else wrap(value, key) for key, value in named.items()}

    def to_device(op, device_id, stream):
        return wrap(_operands._Torch._from_numpy_host(np.ascontiguousarray(op.numpy())).clone())

    def to_host(op, stream):
        return real_wrap(op.tensor.numpy() if op.package == "torch" else op.tensor)

    def empty(package, shape, dtype, device_id, stream=None):
        return _operands.empty("torch" if device_id is not None else package, shape, dtype, None)

    def as_package(array, like, stream=None):
        if like.package == "numpy" and isinstance(array, torch.Tensor):
            return _operands._Torch.as_numpy(array).copy()
        return array

    monkeypatch.setattr(_matmul, "wrap_operand", wrap)
    monkeypatch.setattr(_matmul, "wrap_operands", wrap_all)
    monkeypatch.setattr(_matmul, "to_device", to_device)
    monkeypatch.setattr(_matmul, "to_host", to_host)
    monkeypatch.setattr(_matmul, "empty", empty)
    monkeypatch.setattr(_matmul, "_to_caller", as_package)
    monkeypatch.setattr(_matmul, "require_device", lambda device_id=0: None)
    monkeypatch.setattr(_matmul, "compute_capability", lambda device_id=0: (9, 0))
    monkeypatch.setattr(_matmul, "stream_pointer", lambda stream, package, device_id: 7)
    monkeypatch.setattr(_matmul, "gpu_array_package", lambda: "torch")
    monkeypatch.setattr(_matmul, "_cublaslt_engine", lambda: PointerEngine)
    real_allocator = _matmul._allocator
    monkeypatch.setattr(_matmul, "_allocator", lambda package, device_id, stream, explicit:
                        real_allocator("torch", None, stream, False))
    monkeypatch.setattr(_matmul, "_stream_scope", lambda *args: contextlib.nullcontext())
    PointerEngine.instances.clear()
    _matmul.matmul_plan_cache.clear()
    _matmul._fast_calls.clear()
    yield
    _matmul.matmul_plan_cache.clear()
    _matmul._fast_calls.clear()  # torch CPU tensors posed as device arrays: their fast calls must not outlive this


def t(x):
    return torch.from_numpy(np.asarray(x))


def test_fast_path_uses_the_callers_memory(fake_gpu):
    a, b, bias = RNG.standard_normal((3, 6, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal(6)
    ta, tb = t(a), t(np.swapaxes(RNG.standard_normal((4, 5)), 0, 1).copy()).T.contiguous().T  # column-major b
    b = tb.numpy()
    with Matmul(ta, tb) as mm:
        mm.plan(epilog="relu_aux_bias", epilog_inputs={"bias": t(bias)})
        assert mm._fast is not None  # nothing to copy: pointers prebuilt
        engine = PointerEngine.instances[-1]
        assert engine.package == "torch" and engine.stream == 7
        assert mm._problem.b.row_stride == 1  # transposed storage reaches the engine as strides
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


def test_float8_b_is_given_column_major(fake_gpu):
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    a = (RNG.integers(-3, 4, (8, 16)) / 2).astype(e4m3)
    b = (RNG.integers(-3, 4, (16, 4)) / 2).astype(e4m3)
    ta, tb = _operands._Torch._from_numpy_host(a), _operands._Torch._from_numpy_host(b)
    with Matmul(ta, tb, options={"result_type": "float32"}) as mm:
        mm.plan()
        assert mm._problem.a.col_stride == 1 and mm._problem.b.row_stride == 1  # cuBLASLt's "TN"
        np.testing.assert_allclose(mm.execute().numpy(), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-6)


def test_stateless_fast_path(fake_gpu, monkeypatch):
    """A repeated stateless call with the same operand facts skips validation and planning (no new Matmul), reads the
    new operands' memory, and falls back to the full path when a fact or the current stream changes."""
    a, b, bias = RNG.standard_normal((3, 6, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal(6)
    _matmul._fast_calls.clear()
    first = matmul(t(a), t(b), epilog="relu_bias", epilog_inputs={"bias": t(bias)})
    assert len(_matmul._fast_calls) == 1
    built = []
    real_init = _matmul.Matmul.__init__
    monkeypatch.setattr(_matmul.Matmul, "__init__", lambda self, *args, **kw: (built.append(1),
                                                                                real_init(self, *args, **kw))[1])
    a2, b2, bias2 = RNG.standard_normal((3, 6, 5)), RNG.standard_normal((5, 4)), RNG.standard_normal(6)
    got = matmul(t(a2), t(b2), epilog="relu_bias", epilog_inputs={"bias": t(bias2)})
    assert not built  # fast path
    np.testing.assert_allclose(first.numpy(), np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
    np.testing.assert_allclose(got.numpy(), np.maximum(a2 @ b2 + bias2[:, None], 0), rtol=1e-12)
    got = matmul(t(a2), t(b2).T.contiguous().T, epilog="relu_bias", epilog_inputs={"bias": t(bias2)})
    assert built  # other strides: the full path
    np.testing.assert_allclose(got.numpy(), np.maximum(a2 @ b2 + bias2[:, None], 0), rtol=1e-12)
    built.clear()
    monkeypatch.setattr(_matmul, "stream_pointer", lambda stream, package, device_id: 8)
    matmul(t(a2), t(b2), epilog="relu_bias", epilog_inputs={"bias": t(bias2)})
    assert built  # another current stream: planned for it
    _matmul.matmul_plan_cache.clear()  # plans evicted: the fast path rebuilds the engine through the cache
    built.clear()
    got = matmul(t(a), t(b), epilog="relu_bias", epilog_inputs={"bias": t(bias)})
    assert not built
    np.testing.assert_allclose(got.numpy(), np.maximum(a @ b + bias[:, None], 0), rtol=1e-12)
    vec = matmul(t(a[0, 0]), t(b))  # 1-D a: the fast path drops the same axes
    vec2 = matmul(t(a2[0, 0]), t(b))
    np.testing.assert_allclose(vec2.numpy(), a2[0, 0] @ b, rtol=1e-12)
    assert vec.shape == vec2.shape == (4,)


def test_stateful_plain_run(fake_gpu):
    """A stateful plan with nothing to copy and no epilog output executes through one prebuilt closure: a fresh
    result each call, reading the caller's current memory."""
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    ta, tb = t(a), t(b)
    with Matmul(ta, tb) as mm:
        mm.plan(epilog="relu")
        assert mm._fast_run is not None
        d1 = mm.execute()
        np.testing.assert_allclose(d1.numpy(), np.maximum(a @ b, 0), rtol=1e-12)
        a[...] = -a
        d2 = mm.execute()
        assert d2 is not d1
        np.testing.assert_allclose(d2.numpy(), np.maximum(a @ b, 0), rtol=1e-12)
    with Matmul(ta, tb) as mm:  # an epilog output: the general fast path
        mm.plan(epilog="relu_aux")
        assert mm._fast is not None and mm._fast_run is None
