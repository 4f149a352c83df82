"""float8 operands of mixed formats in mathpy's own matmul API: ``a`` and ``b`` reach the engine each in its own format.

cuBLASLt on Hopper multiplies e4m3 x e4m3, e4m3 x e5m2 and e5m2 x e4m3 (FACTS.md); e5m2 x e5m2 has no algorithm. The
API once converted ``b`` to ``a``'s format (``a`` e5m2 and ``b`` e4m3 became e5m2 x e5m2, which found no algorithm;
``a`` e4m3 and ``b`` e5m2 rounded ``b`` to e4m3 silently). Checked here without a GPU: the problem the engines are
given (on the CPU, and on the GPU path with the real cuBLASLt's layouts under a mocked handle), and the CPU engine's
values against a float64 reference; ``@pytest.mark.gpu``: every pair and result type on cuBLASLt.
"""

from unittest import mock

import ml_dtypes
import numpy as np
import pytest

from _fake_gpu import HostMemory, pretend_a_gpu
from _tolerance import assert_within, matmul_bound
import mathpy
from mathpy import _engines
from mathpy._errors import LibraryNotFoundError
from mathpy.bindings import cublaslt as lt

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
PAIRS = [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)]
RESULTS = [None, E4M3, E5M2, BF16, np.dtype(np.float16), np.dtype(np.float32)]  # None: the default (a's format)
RNG = np.random.default_rng(8)


def operands(a_dtype, b_dtype, m=16, n=32, k=64, transposed_b=False):
    """Values within both formats' ranges (|x| <= 4), rounded to each operand's format; b transposed if asked."""
    a = RNG.uniform(-4, 4, (m, k)).astype(a_dtype)
    b = RNG.uniform(-4, 4, (n, k)).astype(b_dtype).T if transposed_b else RNG.uniform(-4, 4, (k, n)).astype(b_dtype)
    return a, b


def _name(dtype):
    return "default" if dtype is None else np.dtype(dtype).name


@pytest.mark.parametrize("transposed_b", [False, True], ids=["b", "b.T"])
@pytest.mark.parametrize("a_dtype, b_dtype", PAIRS, ids=lambda d: d.name)
def test_the_cpu_engine_is_given_each_operand_in_its_own_format(a_dtype, b_dtype, transposed_b):
    a, b = operands(a_dtype, b_dtype, transposed_b=transposed_b)
    with mathpy.Matmul(a, b) as mm:
        mm.plan()
        problem = mm.prepared_call.problem
        assert (problem.a.dtype, problem.b.dtype) == (a_dtype, b_dtype)
        assert problem.d.dtype == a_dtype  # the default result: a's format (nvmath-python's)


@pytest.mark.parametrize("result_type", RESULTS, ids=_name)
@pytest.mark.parametrize("a_dtype, b_dtype", PAIRS, ids=lambda d: d.name)
def test_cpu_values_against_float64(a_dtype, b_dtype, result_type):
    """One rounding of the float32 sum to the result's format: no operand is rounded to the other's format (e4m3's
    3-bit mantissa made from e5m2 values, or the reverse, would exceed the bound)."""
    a, b = operands(a_dtype, b_dtype)
    options = None if result_type is None else {"result_type": result_type}
    if a_dtype == b_dtype == E4M3 and result_type == E5M2:  # cuBLASLt has no such kernel: refused on every engine
        with pytest.raises(TypeError, match="result_type float8_e5m2 needs an e5m2 operand"):
            mathpy.matmul(a, b, options=options)
        return
    d = mathpy.matmul(a, b, options=options)
    out = a_dtype if result_type is None else result_type
    assert d.dtype == out
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert_within(d.astype(np.float64), exact, matmul_bound(a, b, out, exact=exact),
                  f"{a_dtype.name} @ {b_dtype.name} -> {np.dtype(out).name}")


def test_e5m2_times_e5m2_is_refused_by_name_before_any_work():
    a, b = operands(E5M2, E5M2)
    with pytest.raises(TypeError, match="a and b cannot both be float8_e5m2"):
        mathpy.Matmul(a, b)
    with pytest.raises(TypeError, match="a and b cannot both be float8_e5m2"):
        mathpy.matmul(a, b, execution="cpu")


# --- the GPU path: what the real cuBLASLt descriptors say (mocked handle and heuristic, no GPU) ----------------------

@pytest.fixture
def cublaslt_layouts(monkeypatch):
    """Plan through the public API on a pretended Hopper GPU; the engine is the real CublasLtEngine planning against
    the real libcublasLt (no handle, a heuristic that returns one fake algorithm). Yields the engines made."""
    try:
        lt.version()
    except (LibraryNotFoundError, OSError) as e:
        pytest.skip(f"libcublasLt is not installed here ({e.__class__.__name__})")
    from mathpy import _packages
    from mathpy.host.matmul import _cublaslt as engine_module

    def one_algorithm(handle, desc, la, lb, lc, ld, preference, count):
        result = lt.HeuristicResult()
        result.algo.data[0], result.wavesCount = 1, 1.0
        return [result]

    made = []

    def build(problem, **kwargs):
        made.append(engine_module.CublasLtEngine(problem, **kwargs))
        return made[-1]

    pretend_a_gpu(monkeypatch)
    mathpy.matmul_plan_cache.clear()
    with mock.patch.object(engine_module, "get_handle", return_value=0), \
            mock.patch.object(engine_module.lt, "heuristics", side_effect=one_algorithm), \
            _packages.use(HostMemory(), device_package_name="hostmemory"), _engines.use("matmul", "cuda", build):
        yield made
    for engine in made:
        engine.free()
    mathpy.matmul_plan_cache.clear()


LT_TYPES = {E4M3: lt.DataType.R_8F_E4M3, E5M2: lt.DataType.R_8F_E5M2}


@pytest.mark.parametrize("transposed_b", [False, True], ids=["b", "b.T"])
@pytest.mark.parametrize("a_dtype, b_dtype", PAIRS, ids=lambda d: d.name)
def test_cublaslt_is_given_each_operand_in_its_own_format(cublaslt_layouts, a_dtype, b_dtype, transposed_b):
    """cuBLASLt computes the row-major product as D^T = B^T A^T: its A layout is mathpy's b, its B layout is a."""
    a, b = operands(a_dtype, b_dtype, transposed_b=transposed_b)
    with mathpy.Matmul(a, b, execution="cuda") as mm:
        mm.plan()
        engine = cublaslt_layouts[-1]
        types = {lt.get_attribute(layout, lt.MatrixLayout.TYPE) for layout in engine._layouts[:2]}
        assert types == {LT_TYPES[a_dtype], LT_TYPES[b_dtype]}
        problem = mm.prepared_call.problem
        assert (problem.a.dtype, problem.b.dtype) == (a_dtype, b_dtype)


# --- on cuBLASLt ------------------------------------------------------------------------------------------------------

def _on_gpu(torch, array):
    """A float8 NumPy (ml_dtypes) array as a torch CUDA tensor of the same format and layout (torch holds float8;
    CuPy does not)."""
    kind = {E4M3: torch.float8_e4m3fn, E5M2: torch.float8_e5m2}[array.dtype]
    if array.flags.c_contiguous:
        return torch.from_numpy(array.view(np.uint8)).view(kind).cuda()
    return _on_gpu(torch, np.ascontiguousarray(array.T)).T  # a transposed b stays transposed


@pytest.mark.gpu
@pytest.mark.parametrize("result_type", RESULTS, ids=_name)
@pytest.mark.parametrize("transposed_b", [False, True], ids=["b", "b.T"])
@pytest.mark.parametrize("a_dtype, b_dtype", PAIRS, ids=lambda d: d.name)
def test_every_float8_pair_and_result_on_cublaslt(a_dtype, b_dtype, transposed_b, result_type):
    """Every operand pair cuBLASLt takes on Hopper, with every result type mathpy offers for float8 products (an e5m2
    result of e4m3 x e5m2 operands is nvmath-python's example 20), against float64 at the derived bound."""
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 needs compute capability 8.9")
    a, b = operands(a_dtype, b_dtype, m=64, n=48, k=96, transposed_b=transposed_b)
    options = None if result_type is None else {"result_type": result_type}
    if a_dtype == b_dtype == E4M3 and result_type == E5M2:  # no cuBLASLt kernel: refused by name, as everywhere
        with pytest.raises(TypeError, match="result_type float8_e5m2 needs an e5m2 operand"):
            mathpy.matmul(_on_gpu(torch, a), _on_gpu(torch, b), options=options)
        return
    d = mathpy.matmul(_on_gpu(torch, a), _on_gpu(torch, b), options=options)
    out = a_dtype if result_type is None else np.dtype(result_type)
    assert d.is_cuda and str(d.dtype).replace("torch.", "") == (out.name if out != BF16 else "bfloat16")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert_within(d.float().cpu().numpy(), exact, matmul_bound(a, b, out, exact=exact),
                  f"cuBLASLt {a_dtype.name} @ {b_dtype.name} -> {out.name}")


@pytest.mark.gpu
def test_e5m2_times_e5m2_is_refused_on_the_gpu_before_any_work():
    torch = pytest.importorskip("torch")
    a, b = operands(E5M2, E5M2)
    with pytest.raises(TypeError, match="a and b cannot both be float8_e5m2"):
        mathpy.matmul(_on_gpu(torch, a), _on_gpu(torch, b))
