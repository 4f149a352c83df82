"""Issue 11's matmul features in mathpy's own API: in-place products, the result's amax, choosing and pruning
algorithms, released operands and new scalars, compute and scale types as enums, the refusal of MXFP8 block scaling,
the per-object logger. On the CPU engine (NumPy and torch operands) and on the GPU path run without a GPU (torch CPU
tensors posing as device arrays, as in test_matmul_orchestration). GPU-only parts: test_matmul_parity_gpu.py."""

import contextlib
import logging
import threading

import ml_dtypes
import numpy as np
import pytest

from _fake_gpu import host_view, pretend_a_gpu
import mathpy
from mathpy import CudaDataType, InvalidPlanStateError, Matmul, MatmulComputeType, MatmulOptions, matmul
from mathpy.host.matmul._cpu import CPUEngine

RNG = np.random.default_rng(17)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def _np(x):
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


# --- in place -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["C", "F"])
def test_inplace_writes_into_c_and_returns_it(xp, layout):
    a, b, c = rand(6, 5), rand(5, 4), rand(6, 4)
    c_in = xp.asarray(np.asfortranarray(c) if layout == "F" else c.copy())
    if layout == "F" and xp.name == "torch":
        c_in = c_in.T.contiguous().T
    r = matmul(xp.asarray(a), xp.asarray(b), c_in, alpha=2.0, beta=0.5, options={"inplace": True})
    assert r is c_in
    np.testing.assert_allclose(xp.to_numpy(c_in), 2.0 * a @ b + 0.5 * c, rtol=1e-12)


def test_inplace_stateful_batched_with_an_epilog(xp):
    a, b, c = rand(3, 6, 5), rand(3, 5, 4), rand(3, 6, 4)
    bias = rand(6)
    # column-major matrices, what BIAS needs: the package's own transposed view of a contiguous c.T (CuPy's asarray
    # of a NumPy array that is neither C- nor F-contiguous as a whole makes it C-contiguous)
    c_t = xp.asarray(np.ascontiguousarray(np.swapaxes(c, -1, -2)))
    c_in = c_t.transpose(-1, -2) if xp.name == "torch" else c_t.swapaxes(-1, -2)
    with Matmul(xp.asarray(a), xp.asarray(b), c_in, beta=1.0, options=MatmulOptions(inplace=True)) as mm:
        mm.plan(epilog="relu_bias", epilog_inputs={"bias": xp.asarray(bias)})
        assert mm.execute() is c_in
    np.testing.assert_allclose(xp.to_numpy(c_in), np.maximum(a @ b + c + bias[:, None], 0), rtol=1e-12)


def test_inplace_refusals():
    a, b = rand(6, 5), rand(5, 4)
    with pytest.raises(ValueError, match="pass c"):
        matmul(a, b, options={"inplace": True})
    with pytest.raises(ValueError, match="cannot be broadcast"):
        matmul(a, b, rand(6, 1), options={"inplace": True})
    with pytest.raises(TypeError, match="c has dtype float32"):
        matmul(a, b, rand(6, 4, dtype=np.float32), options={"inplace": True})
    frozen = rand(6, 4)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        matmul(a, b, frozen, options={"inplace": True})
    with pytest.raises(ValueError, match="column-major"):
        matmul(a, b, rand(6, 4), epilog="bias", epilog_inputs={"bias": rand(6)}, options={"inplace": True})


# --- the result's amax (float8) -------------------------------------------------------------------------------------

def test_result_amax_is_taken_before_d_scale():
    a = (RNG.integers(-4, 5, (16, 32)) / 4).astype(E4M3)
    b = (RNG.integers(-4, 5, (32, 8)) / 4).astype(E4M3)
    d, aux = matmul(a, b, options={"a_scale": 2.0, "d_scale": 0.5, "result_amax": True})
    x = 2.0 * (a.astype(np.float64) @ b.astype(np.float64))
    assert d.dtype == E4M3 and aux["result_amax"].dtype == np.float32 and aux["result_amax"].shape == (1,)
    np.testing.assert_allclose(aux["result_amax"], [np.max(np.abs(x))], rtol=1e-6)
    np.testing.assert_allclose(d.astype(np.float64), np.clip(0.5 * x, -448, 448).astype(E4M3).astype(np.float64))
    with pytest.raises(ValueError, match="float8 results only"):
        matmul(a, b, options={"result_type": "float32", "result_amax": True})


def test_a_float8_result_with_c_reads_c_unrounded():
    # 1 + c lies just above the midpoint 1.0625 of e4m3's 1 and 1.125; c rounded to e4m3 first would give 1.0625,
    # which ties to the even 1.0 (before, C was converted to the result's float8 dtype: on the GPU a CType cuBLASLt
    # does not take with a float8 D, on the CPU a second rounding)
    a, b = np.ones((2, 1), E4M3), np.ones((1, 2), E4M3)
    c = np.full((2, 2), 0.0634765625, ml_dtypes.bfloat16)
    assert float(c[0, 0]) == 0.0634765625 and float(c.astype(E4M3)[0, 0]) == 0.0625
    np.testing.assert_array_equal(matmul(a, b, c).astype(np.float32), np.full((2, 2), 1.125, np.float32))
    with Matmul(a, b, c) as mm:
        mm.plan()
        assert mm.prepared_call.problem.c.dtype == ml_dtypes.bfloat16
        mm.reset_operands(c=c.copy())
        np.testing.assert_array_equal(mm.execute().astype(np.float32), np.full((2, 2), 1.125, np.float32))


def test_quantization_scales_as_tensors_are_read_at_every_execution():
    a = (RNG.integers(-4, 5, (16, 32)) / 4).astype(E4M3)
    b = (RNG.integers(-4, 5, (32, 8)) / 4).astype(E4M3)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    sa, sb = np.array([2.0], np.float32), np.array(0.5, np.float32)
    with Matmul(a, b, options={"result_type": "float32"}, quantization_scales={"a": sa, "b": sb}) as mm:
        mm.plan()
        np.testing.assert_allclose(mm.execute(), exact, rtol=1e-6)
        sa[0] = 8.0  # changed in place: the next execution reads it
        np.testing.assert_allclose(mm.execute(), 4.0 * exact, rtol=1e-6)
        mm.reset_operands(quantization_scales={"b": np.array(0.25, np.float32)})
        np.testing.assert_allclose(mm.execute(), 2.0 * exact, rtol=1e-6)
        with pytest.raises(ValueError, match=r"scales \['a_scale'\] were planned as the other kind"):
            mm.reset_operands(quantization_scales={"a": 1.0})


def test_quantization_scales_as_numbers_are_reset_by_planning_again():
    """nvmath-python's example 19: scales given as numbers are reset with numbers (the plan is made again with
    them); a scale not named keeps its value; a number for a scale planned as a tensor is refused."""
    a = (RNG.integers(-4, 5, (16, 32)) / 4).astype(E4M3)
    b = (RNG.integers(-4, 5, (32, 8)) / 4).astype(E4M3)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    with Matmul(a, b, options={"result_type": "float32"}, quantization_scales={"a": 3.0, "b": 2.0, "d": 1.0}) as mm:
        mm.plan()
        np.testing.assert_allclose(mm.execute(), 6.0 * exact, rtol=1e-6)
        a2 = (RNG.integers(-4, 5, (16, 32)) / 4).astype(E4M3)
        mm.reset_operands(a=a2, quantization_scales={"a": 1.0, "d": 0.5})
        np.testing.assert_allclose(mm.execute(), 0.5 * 2.0 * (a2.astype(np.float64) @ b.astype(np.float64)),
                                   rtol=1e-6)
    with Matmul(a, b, options={"result_type": "float32"},
                quantization_scales={"a": np.array([2.0], np.float32), "b": 1.0}) as mm:
        mm.plan()
        with pytest.raises(ValueError, match=r"scales \['a_scale'\] were planned as the other kind"):
            mm.reset_operands(quantization_scales={"a": 1.0})
    d = matmul(a, b, quantization_scales={"a": 1.0, "b": np.array([1.0], np.float32), "d": np.array([0.5], np.float32)})
    assert d.dtype == E4M3
    np.testing.assert_allclose(d.astype(np.float64), np.clip(0.5 * exact, -448, 448).astype(E4M3).astype(np.float64))


def test_quantization_scales_refusals():
    a = np.zeros((16, 16), E4M3)
    with pytest.raises(ValueError, match="c is never float8"):
        matmul(a, a, quantization_scales={"c": 1.0})
    with pytest.raises(ValueError, match="one float32 value"):
        matmul(a, a, quantization_scales={"a": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match="given twice"):
        matmul(a, a, options={"a_scale": 2.0}, quantization_scales={"a": 1.0})
    with pytest.raises(ValueError, match="float8 results only"):
        matmul(a, a, options={"result_type": "float32"}, quantization_scales={"d": np.ones(1, np.float32)})
    with pytest.raises(ValueError, match="float8 operands only"):
        matmul(rand(4, 4), rand(4, 4), quantization_scales={"a": np.ones(1, np.float32)})
    with pytest.raises(ValueError, match="unknown keys"):
        matmul(a, a, quantization_scales={"e": 1.0})


# --- algorithms, operands, scalars ----------------------------------------------------------------------------------

def test_execute_with_a_chosen_algorithm_and_autotune_prune(xp):
    a, b = rand(8, 8), rand(8, 8)
    with Matmul(xp.asarray(a), xp.asarray(b)) as mm:
        (first, *_) = mm.plan()
        np.testing.assert_allclose(xp.to_numpy(mm.execute(algorithm=first)), a @ b, rtol=1e-12)
        with pytest.raises(ValueError, match="not one of this plan's candidates"):
            mm.execute(algorithm="something else")
        timings = mm.autotune(iterations=1, prune=1)
        assert len(mm.algorithms) == 1 and mm.algorithms[0] is timings[0][0]
        with pytest.raises(ValueError, match="prune"):
            mm.autotune(prune=0)
        np.testing.assert_allclose(xp.to_numpy(mm.execute(release_workspace=True)), a @ b, rtol=1e-12)


def test_release_operands_then_reset_them_all(xp):
    a, b, c = rand(4, 3), rand(3, 5), rand(4, 5)
    with Matmul(xp.asarray(a), xp.asarray(b), xp.asarray(c), beta=1.0) as mm:
        mm.plan()
        mm.release_operands()
        with pytest.raises(InvalidPlanStateError, match="released"):
            mm.execute()
        with pytest.raises(ValueError, match=r"missing \['c'\]"):
            mm.reset_operands(a=xp.asarray(a), b=xp.asarray(b))
        a2 = rand(4, 3)
        mm.reset_operands(a=xp.asarray(a2), b=xp.asarray(b), c=xp.asarray(c), alpha=3.0, beta=0.0)
        np.testing.assert_allclose(xp.to_numpy(mm.execute()), 3.0 * a2 @ b, rtol=1e-12)
        mm.reset_operands(beta=2.0)
        np.testing.assert_allclose(xp.to_numpy(mm.execute()), 3.0 * a2 @ b + 2.0 * c, rtol=1e-12)


def test_new_scalars_are_checked():
    a, b = rand(4, 3), rand(3, 5)
    with Matmul(a, b) as mm:
        mm.plan()
        with pytest.raises(ValueError, match="needs an operand c"):
            mm.reset_operands(beta=1.0)
        with pytest.raises(TypeError, match="complex"):
            mm.reset_operands(alpha=1j)
        mm.reset_operands(alpha=-1.0)
        np.testing.assert_allclose(mm.execute(), -(a @ b), rtol=1e-12)


# --- enums, block scaling, logger ----------------------------------------------------------------------------------

def test_compute_and_scale_types_as_enums():
    o = MatmulOptions(compute_type=MatmulComputeType.COMPUTE_32F_FAST_TF32, scale_type=CudaDataType.CUDA_R_32F,
                      result_type=CudaDataType.CUDA_R_32F)
    assert o == MatmulOptions(compute_type="32F_FAST_TF32", scale_type="float32", result_type=np.float32)
    assert MatmulOptions(result_type=CudaDataType.CUDA_R_16BF).result_type == np.dtype(ml_dtypes.bfloat16)
    assert MatmulOptions(compute_type=MatmulComputeType.COMPUTE_32I).compute_type == "32I"  # int8 products
    with pytest.raises(ValueError, match="COMPUTE_32I_PEDANTIC"):
        MatmulOptions(compute_type=MatmulComputeType.COMPUTE_32I_PEDANTIC)
    with pytest.raises(ValueError, match="no NumPy dtype"):
        MatmulOptions(scale_type=CudaDataType.CUDA_R_4I)
    h = rand(8, 8, dtype=np.float16)
    with Matmul(h, h, options={"scale_type": CudaDataType.CUDA_R_16F}) as mm:  # a float16 scale: 16F compute
        mm.plan()
        assert mm.prepared_call.problem.compute_type == "16F"


def test_block_scaling_is_refused_with_the_reason(monkeypatch):
    a = np.zeros((128, 128), E4M3)
    with pytest.raises(NotImplementedError, match="Blackwell"):
        matmul(a, a, options={"block_scaling": True})
    with pytest.raises(ValueError, match="float8"):
        matmul(rand(4, 4), rand(4, 4), options={"block_scaling": True})
    pretend_a_gpu(monkeypatch, (9, 0))
    with pytest.raises(ValueError, match=r"Blackwell GPU \(compute capability >= 10.0\); device 0 has compute "
                                         r"capability 9.0"):
        Matmul(a, a, options={"block_scaling": True}, execution="cuda")
    pretend_a_gpu(monkeypatch, (10, 0))
    with pytest.raises(NotImplementedError, match="does not implement"):
        Matmul(a, a, options={"block_scaling": True}, execution="cuda")


def test_per_object_logger():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    mine = logging.getLogger("test_matmul_parity.mine")
    mine.setLevel(logging.DEBUG)
    mine.addHandler(Keep())
    mine.propagate = False
    with Matmul(rand(4, 3), rand(3, 5), options={"logger": mine}) as mm:
        mm.plan()
        mm.execute()
    assert any("Matmul" in r and "planned" in r for r in records)
    with pytest.raises(TypeError, match="logging.Logger"):
        MatmulOptions(logger="mathpy")


# --- the GPU path without a GPU (torch CPU tensors pose as device arrays: these tests need torch, the ones above
# do not) --------------------------------------------------------------------------------------------------------------

@pytest.fixture
def torch():
    return pytest.importorskip("torch")


class _Engine:
    """Takes what CublasLtEngine takes (device pointers, raw stream) and computes with the CPU engine; records the
    algorithm choices and workspace releases the API asks for."""

    def __init__(self, problem, *, execution=None, options=None, preferences=None, allocator=None):
        self.problem, self.algorithms, self.workspace_bytes = problem, ["alg-0", "alg-1"], 64
        self.lock, self.events, self._cpu = threading.Lock(), [], CPUEngine(problem)

    def _view(self, pointer, layout):
        return host_view(pointer, layout.dtype, (layout.batch, layout.rows, layout.cols),
                         (layout.batch_stride, layout.row_stride, layout.col_stride))

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream):
        p = self.problem
        self.events.append(("execute", d == c))
        self._cpu.execute(self._view(a, p.a), self._view(b, p.b), None if c is None else self._view(c, p.c),
                          self._view(d, p.d), {}, {}, alpha, beta)

    @contextlib.contextmanager
    def using(self, algorithm):
        self.events.append(("using", algorithm))
        yield

    def adopt(self, algorithms):
        return list(algorithms)

    def release_workspace(self):
        self.events.append(("release",))

    def autotune(self, operands, stream=None, iterations=3):
        return [(alg, 1e-6 * (i + 1)) for i, alg in enumerate(self.algorithms)]

    def free(self):
        pass


@pytest.fixture
def fake_gpu(monkeypatch, torch):
    from mathpy import _engines, _packages
    from test_matmul_orchestration import PosingTorch
    pretend_a_gpu(monkeypatch)
    mathpy.matmul_plan_cache.clear()
    with _packages.use(PosingTorch(), device_package_name="torch"), _engines.use("matmul", "cuda", _Engine):
        yield
    mathpy.matmul_plan_cache.clear()


def test_gpu_path_inplace_algorithm_release_workspace(fake_gpu, torch):
    a, b, c = rand(6, 5), rand(5, 4), rand(6, 4)
    tc = torch.from_numpy(c.copy())
    with Matmul(torch.from_numpy(a), torch.from_numpy(b), tc, beta=1.0, options={"inplace": True}) as mm:
        mm.plan()
        assert mm.execute(algorithm="alg-1", release_workspace=True) is tc
        engine = mm.prepared_call.engine
        assert engine.events == [("using", "alg-1"), ("execute", True), ("release",)]
    np.testing.assert_allclose(tc.numpy(), a @ b + c, rtol=1e-12)


def test_gpu_path_inplace_numpy_c_moved_and_written_back(fake_gpu):
    a, b, c = rand(6, 5), rand(5, 4), rand(6, 4)
    c_in = c.copy()
    r = matmul(a, b, c_in, beta=2.0, options={"inplace": True}, execution="cuda")
    assert r is c_in
    np.testing.assert_allclose(c_in, a @ b + 2.0 * c, rtol=1e-12)


def test_gpu_path_autotune_prune(fake_gpu, torch):
    with Matmul(torch.from_numpy(rand(4, 4)), torch.from_numpy(rand(4, 4))) as mm:
        mm.plan()
        mm.autotune(prune=1)
        assert mm.algorithms == ["alg-0"]
