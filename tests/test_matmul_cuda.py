"""The cuBLASLt matmul engine and its bindings.

Three layers of tests:

1. Pure Python, everywhere: the column-major mapping of row-major / transposed / strided operands, the orientation
   (swap) rule, the self-autotune rule, the binding tables (struct sizes, enum values).
2. The real libcublasLt without a GPU (skipped when it is not installed): descriptor attribute sizes, and the engine's
   planning with a mocked handle and heuristic: every descriptor and layout attribute it sets, the hot path's argument
   list, epilog pointer updates, re-planning for misaligned pointers, candidate switching, free and failed plans.
3. ``@pytest.mark.gpu`` (run ``pytest -m gpu tests/test_matmul_cuda.py`` on a GPU machine with torch): numerics
   against NumPy for every dtype, layout, batch form and epilog, float8 with scales, autotune, alignment, free, and a
   10,000-plan loop that must not leak host or device memory. They drive the engine directly with problems built here,
   so they test the engine alone; a few at the end go through the public API when it is importable.
"""

import ctypes
import gc
import os
from unittest import mock

import ml_dtypes
import numpy as np
import pytest

from _fake_gpu import HostMemory
from _matmul_reference import rss_bytes
from mathpy._errors import InvalidPlanStateError, LibraryNotFoundError, UnsupportedLayoutError
from mathpy._execution import ExecutionCUDA
from mathpy.bindings import cublaslt as lt
from mathpy.host.matmul import _cublaslt as engine_module
from mathpy.host.matmul._cublaslt import CublasLtEngine, as_column_major, needs_autotune, orient
from mathpy.host.matmul._epilog import (MatmulEpilog, epilog_spec, gelu, gelu_aux_rows, gelu_grad, pack_bits,
                                        relu_aux_rows, unpack_bits)
from mathpy.host.matmul._epilog_operands import HANDLERS, output_layouts
from mathpy.host.matmul._problem import MatmulProblem, MatrixLayout, col_major, row_major

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E = MatmulEpilog


def make_problem(a, b, d, *, c=None, compute="32F", scale=np.float32, epilog=None, inputs=(), outputs=None,
                 **scales):
    m, k, n = a.rows, a.cols, b.cols
    if outputs is None:
        outputs = output_layouts(epilog_spec(epilog), m, n, d.batch, d.dtype)
    return MatmulProblem(m, n, k, d.batch, (d.batch,) if d.batch > 1 else (), a, b, c, d, compute, np.dtype(scale),
                         epilog, tuple(inputs), tuple(outputs), **scales)


# ---------------------------------------------------------------------------------------------------------------------
# 1. Pure Python


class TestColumnMajorMapping:
    def test_row_major_is_transposed_storage(self):
        assert as_column_major(row_major(3, 5, 1, np.float32)) == (lt.Operation.T, 5, 3, 5)

    def test_col_major_as_is(self):
        assert as_column_major(col_major(3, 5, 1, np.float32)) == (lt.Operation.N, 3, 5, 3)

    def test_strided_leading_dimension(self):
        # rows of a wider row-major array: x[:, :5] of a (3, 8) array
        layout = MatrixLayout(3, 5, 8, 1, 1, 0, np.dtype(np.float32))
        assert as_column_major(layout) == (lt.Operation.T, 5, 3, 8)
        # columns of a taller column-major array
        layout = MatrixLayout(3, 5, 1, 7, 1, 0, np.dtype(np.float32))
        assert as_column_major(layout) == (lt.Operation.N, 3, 5, 7)

    def test_transposed_view(self):
        # a.T of a C-contiguous (5, 3) array is a 3 x 5 matrix with strides (1, 3): column-major
        layout = MatrixLayout(3, 5, 1, 3, 1, 0, np.dtype(np.float16))
        assert as_column_major(layout) == (lt.Operation.N, 3, 5, 3)

    @pytest.mark.parametrize("rs, cs", [(1, 1), (1, 9), (4, 1), (4, 9)])
    def test_single_row_any_strides(self, rs, cs):
        op, rows, cols, ld = as_column_major(MatrixLayout(1, 6, rs, cs, 1, 0, np.dtype(np.float32)))
        if op is lt.Operation.N:
            assert (rows, cols) == (1, 6) and ld >= 1 and (ld == cs or cs == 1)
        else:
            assert (rows, cols) == (6, 1) and ld >= 6

    def test_single_column(self):
        assert as_column_major(MatrixLayout(6, 1, 1, 1, 1, 0, np.dtype(np.float32))) == (lt.Operation.N, 6, 1, 6)
        # a column of a row-major matrix: elements 4 apart
        assert as_column_major(MatrixLayout(6, 1, 4, 1, 1, 0, np.dtype(np.float32))) == (lt.Operation.T, 1, 6, 4)

    def test_every_mapping_addresses_the_same_elements(self):
        rng = np.random.default_rng(0)
        for _ in range(200):
            r, c = rng.integers(1, 6, size=2)
            if rng.random() < 0.5:
                rs, cs = 1, int(r + rng.integers(0, 3))
            else:
                rs, cs = int(c + rng.integers(0, 3)), 1
            op, rows, cols, ld = as_column_major(MatrixLayout(int(r), int(c), rs, cs, 1, 0, np.dtype(np.float32)))
            assert ld >= max(rows, 1)
            for i in range(r):
                for j in range(c):
                    # element (i, j) of op(storage), storage column-major rows x cols with ld
                    si, sj = (i, j) if op is lt.Operation.N else (j, i)
                    assert si < rows and sj < cols
                    if r > 1 and c > 1:
                        assert si + sj * ld == i * rs + j * cs

    def test_no_unit_stride_is_rejected(self):
        with pytest.raises(UnsupportedLayoutError, match="unit stride"):
            as_column_major(MatrixLayout(3, 5, 10, 2, 1, 0, np.dtype(np.float32)))
        with pytest.raises(UnsupportedLayoutError):
            as_column_major(MatrixLayout(3, 5, 1, 2, 1, 0, np.dtype(np.float32)))  # ld < rows: overlapping


class TestOrientation:
    def test_col_major_result_is_not_swapped(self):
        a, b, d = row_major(4, 3, 1, np.float32), row_major(3, 5, 1, np.float32), col_major(4, 5, 1, np.float32)
        swap, *layouts = orient(make_problem(a, b, d))
        assert not swap and layouts[0] is a and layouts[1] is b and layouts[3] is d

    def test_row_major_result_swaps_operands(self):
        a, b, d = row_major(4, 3, 1, np.float32), col_major(3, 5, 1, np.float32), row_major(4, 5, 1, np.float32)
        c = row_major(4, 5, 1, np.float32)
        swap, a2, b2, c2, d2 = orient(make_problem(a, b, d, c=c))
        assert swap
        assert (a2.rows, a2.cols) == (5, 3) and as_column_major(a2)[0] is lt.Operation.T  # B.T, B column-major
        assert (b2.rows, b2.cols) == (3, 4) and as_column_major(b2)[0] is lt.Operation.N  # A.T, A row-major
        assert as_column_major(d2) == (lt.Operation.N, 5, 4, 5)
        assert as_column_major(c2) == (lt.Operation.N, 5, 4, 5)

    def test_vector_results_never_swap(self):
        a, b = row_major(1, 3, 1, np.float32), row_major(3, 5, 1, np.float32)
        assert not orient(make_problem(a, b, row_major(1, 5, 1, np.float32)))[0]


def test_needs_autotune_rule():
    assert needs_autotune(64, 8192, 8192, 1, 8)            # small M
    assert needs_autotune(16384, 16384, 256, 1, 8)         # small K
    assert not needs_autotune(8192, 8192, 8192, 1, 8)      # large square: the heuristic is good
    assert not needs_autotune(128, 128, 128, 1, 8)         # tiny: overhead matters, not the kernel
    assert not needs_autotune(64, 8192, 8192, 1, 1)        # nothing to choose from


class TestBindingTables:
    def test_struct_layouts(self):
        assert ctypes.sizeof(lt.MatmulAlgo) == 64
        assert ctypes.sizeof(lt.HeuristicResult) == 96
        assert (lt.HeuristicResult.algo.offset, lt.HeuristicResult.workspaceSize.offset,
                lt.HeuristicResult.state.offset, lt.HeuristicResult.wavesCount.offset) == (0, 64, 72, 76)

    def test_epilog_values_match_the_api_enum(self):
        for epilog in MatmulEpilog:
            assert lt.MatmulEpilog[epilog.name] == epilog.value
        assert MatmulEpilog is lt.MatmulEpilog  # one enum: the binding's

    def test_values(self):
        assert (lt.MatmulDesc.EPILOGUE, lt.MatmulDesc.BIAS_POINTER, lt.MatmulDesc.EPILOGUE_AUX_POINTER,
                lt.MatmulDesc.A_SCALE_POINTER, lt.MatmulDesc.FAST_ACCUM, lt.MatmulDesc.BIAS_DATA_TYPE) == \
            (7, 8, 11, 17, 25, 26)
        assert (lt.MatrixLayout.BATCH_COUNT, lt.MatrixLayout.STRIDED_BATCH_OFFSET) == (5, 6)
        assert lt.Preference.MAX_WORKSPACE_BYTES == 1
        assert (lt.ComputeType.COMPUTE_32F, lt.ComputeType.COMPUTE_32F_FAST_TF32, lt.ComputeType.COMPUTE_64F) == \
            (68, 77, 70)
        assert lt.STATUS_NAMES[15] == "CUBLAS_STATUS_NOT_SUPPORTED"

    def test_data_types(self):
        expected = {np.float16: 2, BF16: 14, np.float32: 0, np.float64: 1, np.complex64: 4, np.complex128: 5,
                    E4M3: 28, E5M2: 29}
        for dtype, value in expected.items():
            assert lt.cuda_data_type(dtype) == value
        with pytest.raises(ValueError, match="no CUDA data type"):
            lt.cuda_data_type(np.int64)

    def test_every_api_compute_type_is_a_cublas_one(self):
        from mathpy.host.matmul._options import COMPUTE_TYPES, SUPPORTED_DTYPES
        for name in COMPUTE_TYPES:
            assert lt.ComputeType["COMPUTE_" + name]
        for dtype in SUPPORTED_DTYPES:
            lt.cuda_data_type(dtype)

    def test_heuristics_keeps_successful_results(self):
        from mathpy._errors import CUDALibraryError

        def fake(handle, desc, a, b, c, d, preference, count, results, returned):
            for i in range(3):
                results[i].algo.data[0] = i + 1
                results[i].workspaceSize = 100 * i
                results[i].state = 15 if i == 1 else 0
            ctypes.cast(returned, ctypes.POINTER(ctypes.c_int))[0] = 3

        with mock.patch.dict(lt.library._resolved, {"cublasLtMatmulAlgoGetHeuristic": fake}):
            found = lt.heuristics(0, 0, 0, 0, 0, 0, 0, 8)
        assert [(r.algo.data[0], r.workspaceSize) for r in found] == [(1, 0), (3, 200)]

        def unsupported(*args):
            raise CUDALibraryError("cublasLt", "cublasLtMatmulAlgoGetHeuristic", 15, "CUBLAS_STATUS_NOT_SUPPORTED")

        with mock.patch.dict(lt.library._resolved, {"cublasLtMatmulAlgoGetHeuristic": unsupported}):
            assert lt.heuristics(0, 0, 0, 0, 0, 0, 0, 8) == []

    def test_every_attribute_has_a_c_type(self):
        for kind in (lt.MatmulDesc, lt.MatrixLayout, lt.Preference, lt.AlgoConfig):
            for attribute in kind:
                assert lt.attribute_type(attribute) is not None


# ---------------------------------------------------------------------------------------------------------------------
# 2. The real library without a GPU: descriptors, and the engine with a mocked handle and heuristic


def _library_or_skip():
    try:
        lt.version()
    except (LibraryNotFoundError, OSError) as e:
        pytest.skip(f"libcublasLt is not installed here ({e.__class__.__name__})")


class TestDescriptors:
    def test_every_attribute_round_trips_with_its_size(self):
        _library_or_skip()
        desc = lt.create_matmul_desc(lt.ComputeType.COMPUTE_32F, lt.DataType.R_32F)
        layout = lt.create_matrix_layout(lt.DataType.R_16F, 10, 20, 16)
        preference = lt.create_preference()
        try:
            for handle, kind in ((desc, lt.MatmulDesc), (layout, lt.MatrixLayout), (preference, lt.Preference)):
                for attribute in kind:
                    value = lt.get_attribute(handle, attribute)  # fails with INVALID_VALUE on a wrong size
                    lt.set_attribute(handle, attribute, 0 if value is None else value)
            lt.set_attribute(desc, lt.MatmulDesc.BIAS_POINTER, 0x12300)
            assert lt.get_attribute(desc, lt.MatmulDesc.BIAS_POINTER) == 0x12300
            lt.set_attribute(layout, lt.MatrixLayout.STRIDED_BATCH_OFFSET, 1 << 40)
            assert lt.get_attribute(layout, lt.MatrixLayout.STRIDED_BATCH_OFFSET) == 1 << 40
            assert (lt.get_attribute(layout, lt.MatrixLayout.ROWS), lt.get_attribute(layout, lt.MatrixLayout.LD)) == \
                (10, 16)
        finally:
            lt.destroy_matmul_desc(desc)
            lt.destroy_matrix_layout(layout)
            lt.destroy_preference(preference)


def _fake_heuristics(workspaces=(0, 0, 0), calls=None):
    def heuristics(handle, desc, la, lb, lc, ld, preference, count):
        if calls is not None:
            calls.append(preference)
        results = []
        for i, workspace in enumerate(workspaces[:count]):
            result = lt.HeuristicResult()
            result.algo.data[0] = i + 1
            result.workspaceSize = workspace
            result.wavesCount = 1.0
            results.append(result)
        return results
    return heuristics


@pytest.fixture
def mocked_engine():
    """CublasLtEngine planning against the real libcublasLt with no GPU: device checks, the handle and the heuristic
    are mocked (the heuristic returns three fake algorithms); cublasLtMatmul is replaced per engine by a recorder."""
    _library_or_skip()
    calls = []
    memory = HostMemory()
    with mock.patch.object(engine_module._cuda, "require_device"), \
            mock.patch.object(engine_module._cuda, "device_count", return_value=1), \
            mock.patch.object(engine_module._cuda, "compute_capability", return_value=(9, 0)), \
            mock.patch.object(engine_module, "get_handle", return_value=0), \
            mock.patch.object(engine_module.lt, "heuristics", side_effect=_fake_heuristics(calls=calls)):
        def build(problem, stream=0, **kwargs):
            engine = CublasLtEngine(problem, execution=ExecutionCUDA(0), allocator=memory.on(0, stream), **kwargs)
            engine.recorded = []
            engine._matmul = lambda *args: engine.recorded.append(args)
            return engine
        build.heuristic_calls, build.memory = calls, memory
        yield build


def _desc(engine, attribute):
    return lt.get_attribute(engine._resources.desc, attribute)


def _layout(engine, index, attribute):
    """An attribute of the engine's A (0), B (1), C (2) or D (3) layout."""
    return lt.get_attribute(engine._layouts[index], attribute)


class TestEnginePlanning:
    def test_transposes_layouts_and_batches(self, mocked_engine):
        m, n, k, batch = 5, 7, 3, 4
        a = row_major(m, k, batch, np.float16)                                   # op T, storage k x m
        b = MatrixLayout(k, n, 1, k + 2, batch, 0, np.dtype(np.float16))        # column-major, ld k+2, broadcast
        engine = mocked_engine(make_problem(a, b, col_major(m, n, batch, np.float16)))
        assert (_desc(engine, lt.MatmulDesc.TRANSA), _desc(engine, lt.MatmulDesc.TRANSB)) == (1, 0)
        assert _desc(engine, lt.MatmulDesc.COMPUTE_TYPE) == lt.ComputeType.COMPUTE_32F
        assert _desc(engine, lt.MatmulDesc.SCALE_TYPE) == lt.DataType.R_32F
        A, B, D = 0, 1, 3
        assert [_layout(engine, A, x) for x in (lt.MatrixLayout.ROWS, lt.MatrixLayout.COLS, lt.MatrixLayout.LD)] == \
            [k, m, k]
        assert [_layout(engine, B, x) for x in (lt.MatrixLayout.ROWS, lt.MatrixLayout.COLS, lt.MatrixLayout.LD)] == \
            [k, n, k + 2]
        assert [_layout(engine, D, x) for x in (lt.MatrixLayout.ROWS, lt.MatrixLayout.COLS, lt.MatrixLayout.LD)] == \
            [m, n, m]
        for index, stride in ((A, m * k), (B, 0), (D, m * n)):
            assert _layout(engine, index, lt.MatrixLayout.BATCH_COUNT) == batch
            assert _layout(engine, index, lt.MatrixLayout.STRIDED_BATCH_OFFSET) == stride
        assert _layout(engine, A, lt.MatrixLayout.TYPE) == lt.DataType.R_16F
        assert len(engine.algorithms) == 3 and engine.workspace_bytes == 0

    def test_execute_argument_list(self, mocked_engine):
        problem = make_problem(row_major(8, 8, 1, np.float32), row_major(8, 8, 1, np.float32),
                               col_major(8, 8, 1, np.float32), c=col_major(8, 8, 1, np.float32))
        engine = mocked_engine(problem)
        engine.execute(0x1000, 0x2000, 0x3000, 0x4000, {}, {}, 2.0, 0.5, 99)
        args = engine.recorded[-1]
        assert len(args) == 16
        assert (args[3], args[5], args[8], args[10], args[15]) == (0x1000, 0x2000, 0x3000, 0x4000, 99)
        assert args[1] == engine._resources.desc
        assert (args[4], args[6], args[9], args[11]) == engine._layouts
        alpha = ctypes.c_float.from_address(args[2]).value
        beta = ctypes.c_float.from_address(args[7]).value
        assert (alpha, beta) == (2.0, 0.5)
        assert bytes(lt.MatmulAlgo.from_address(args[12])) == bytes(engine.algorithms[0].algo)
        assert all(isinstance(x, int) for x in args)  # the hot path converts nothing

    def test_no_c_passes_d_and_zero_beta(self, mocked_engine):
        engine = mocked_engine(make_problem(row_major(8, 8, 1, np.float64), row_major(8, 8, 1, np.float64),
                                            col_major(8, 8, 1, np.float64), compute="64F", scale=np.float64))
        engine.execute(0x1000, 0x2000, None, 0x4000, {}, {}, 1.0, 0.0, 0)
        args = engine.recorded[-1]
        assert args[8] == 0x4000 and args[9] == args[11]
        assert ctypes.c_double.from_address(args[7]).value == 0.0

    def test_row_major_result_swaps(self, mocked_engine):
        a, b = row_major(4, 3, 1, np.float32), row_major(3, 5, 1, np.float32)
        c, d = row_major(4, 5, 1, np.float32), row_major(4, 5, 1, np.float32)
        engine = mocked_engine(make_problem(a, b, d, c=c))
        engine.execute(0x1000, 0x2000, 0x3000, 0x4000, {}, {}, 1.0, 1.0, 0)
        args = engine.recorded[-1]
        assert (args[3], args[5]) == (0x2000, 0x1000)  # B.T @ A.T
        assert (_desc(engine, lt.MatmulDesc.TRANSA), _desc(engine, lt.MatmulDesc.TRANSB)) == (0, 0)
        assert [_layout(engine, 3, x) for x in (lt.MatrixLayout.ROWS, lt.MatrixLayout.COLS)] == [5, 4]  # D.T

    @pytest.mark.parametrize("k, n", [(1, 10), (6, 1)])
    def test_bgradb_takes_a_vector_b_transposed(self, mocked_engine, k, n):
        """A one-row or one-column B fits op(B) = N and T alike; BGRADB has kernels only for T (cuBLASLt 13.1: an
        op(B) = N plan found no algorithm on the H200 for 6 x 10 x 1 and 16 x 1 x 6 products)."""
        m = 16 if n == 1 else 6
        problem = make_problem(col_major(m, k, 1, np.float64), row_major(k, n, 1, np.float64),
                               col_major(m, n, 1, np.float64), compute="64F", scale=np.float64,
                               epilog=MatmulEpilog.BGRADB)
        engine = mocked_engine(problem)
        assert _desc(engine, lt.MatmulDesc.TRANSB) == 1
        assert [_layout(engine, 1, x) for x in (lt.MatrixLayout.ROWS, lt.MatrixLayout.COLS)] == [n, k]

    def test_complex_scalars(self, mocked_engine):
        dtype = np.complex64
        engine = mocked_engine(make_problem(row_major(4, 4, 1, dtype), row_major(4, 4, 1, dtype),
                                            col_major(4, 4, 1, dtype), scale=dtype))
        engine.execute(0x1000, 0x2000, None, 0x4000, {}, {}, 1 + 2j, 0, 0)
        alpha = (ctypes.c_float * 2).from_address(engine.recorded[-1][2])
        assert list(alpha) == [1.0, 2.0]
        assert _desc(engine, lt.MatmulDesc.SCALE_TYPE) == lt.DataType.C_32F

    @pytest.mark.parametrize("epilog", list(MatmulEpilog)[1:], ids=lambda e: e.name)
    def test_every_epilog_sets_its_attributes(self, mocked_engine, epilog):
        m, n, k, batch = 20, 6, 4, 3
        dtype = np.dtype(np.float16)
        spec = epilog_spec(epilog)
        inputs = []
        for name in spec.inputs:
            if name == "bias":
                inputs.append((name, MatrixLayout(m, 1, 1, m, batch, m, dtype)))
            elif name == "relu_aux":
                rows = relu_aux_rows(m)
                inputs.append((name, MatrixLayout(m, n, 1, 8 * rows, batch, 8 * rows * n, np.dtype(np.uint8))))
            else:
                rows = gelu_aux_rows(m)
                inputs.append((name, MatrixLayout(m, n, 1, rows, batch, rows * n, dtype)))
        problem = make_problem(row_major(m, k, batch, dtype), row_major(k, n, batch, dtype),
                               col_major(m, n, batch, dtype), epilog=epilog, inputs=inputs)
        engine = mocked_engine(problem)
        assert _desc(engine, lt.MatmulDesc.EPILOGUE) == epilog.value
        aux = dict(problem.epilog_inputs) | dict(problem.epilog_outputs)
        if "relu_aux" in aux or "gelu_aux" in aux:
            layout = aux.get("relu_aux") or aux.get("gelu_aux")
            assert _desc(engine, lt.MatmulDesc.EPILOGUE_AUX_LD) == layout.col_stride
            assert _desc(engine, lt.MatmulDesc.EPILOGUE_AUX_BATCH_STRIDE) == layout.batch_stride
            if "relu_aux" in aux:
                assert layout.col_stride % 128 == 0 and layout.col_stride >= m  # bits
            else:
                assert layout.col_stride % 8 == 0 and layout.col_stride >= m
        bias_like = [name for name in aux if name == "bias" or name.endswith("bgrad") or name.startswith("bgrad")]
        if bias_like:
            assert _desc(engine, lt.MatmulDesc.BIAS_BATCH_STRIDE) == aux[bias_like[0]].batch_stride
        # pointers: set at execute, and again only when they change
        pointers = {name: 0x10000 * (i + 1) for i, name in enumerate(aux)}
        ins = {name: pointers[name] for name, _ in problem.epilog_inputs}
        outs = {name: pointers[name] for name, _ in problem.epilog_outputs}
        with mock.patch.object(engine, "_set_desc_attribute", wraps=engine._set_desc_attribute) as setter:
            engine.execute(0x1000, 0x2000, None, 0x3000, ins, outs, 1.0, 0.0, 0)
            assert setter.call_count == len(aux)
            engine.execute(0x1000, 0x2000, None, 0x3000, ins, outs, 1.0, 0.0, 0)
            assert setter.call_count == len(aux)
        if bias_like:
            assert _desc(engine, lt.MatmulDesc.BIAS_POINTER) == pointers[bias_like[0]]
        if "relu_aux" in aux or "gelu_aux" in aux:
            assert _desc(engine, lt.MatmulDesc.EPILOGUE_AUX_POINTER) == pointers.get("relu_aux",
                                                                                      pointers.get("gelu_aux"))

    def test_bias_dtype_differs_from_result(self, mocked_engine):
        m, n, k = 16, 16, 16
        bias = MatrixLayout(m, 1, 1, m, 1, m, BF16)
        problem = make_problem(row_major(m, k, 1, E4M3), col_major(k, n, 1, E4M3), col_major(m, n, 1, E4M3),
                               epilog=E.BIAS, inputs=[("bias", bias)], a_scale=1.0, b_scale=1.0, d_scale=1.0)
        engine = mocked_engine(problem)
        scales = engine._resources.scales  # on the "device", from the engine's allocator
        base = scales.__array_interface__["data"][0]
        assert _desc(engine, lt.MatmulDesc.BIAS_DATA_TYPE) == lt.DataType.R_16BF
        assert _desc(engine, lt.MatmulDesc.A_SCALE_POINTER) == base
        # each scale 256 bytes apart (packed 4 bytes apart, cuBLASLt 13.1 answered CUBLAS_STATUS_NOT_SUPPORTED)
        assert _desc(engine, lt.MatmulDesc.B_SCALE_POINTER) == base + 0x100
        assert _desc(engine, lt.MatmulDesc.D_SCALE_POINTER) == base + 0x200
        assert list(scales[::64][:3]) == [1.0, 1.0, 1.0]
        # a float8 result takes C as bfloat16 (never read without c)
        assert _layout(engine, 2, lt.MatrixLayout.TYPE) == lt.DataType.R_16BF

    def test_scale_tensors_follow_their_operands_when_the_product_is_swapped(self, mocked_engine):
        """A row-major float32 D is computed as D.T = B.T @ A.T: the scale given for a must then scale cuBLASLt's B
        (a scale tensor set A's pointer unswapped on the H200, and the result came out scaled by a_scale / b_scale)."""
        m, n, k = 64, 32, 128
        scale = MatrixLayout(1, 1, 1, 1, 1, 0, np.dtype(np.float32))
        problem = make_problem(row_major(m, k, 1, E4M3), col_major(k, n, 1, E4M3), row_major(m, n, 1, np.float32),
                               inputs=[("a_scale", scale)], b_scale=0.5)
        engine = mocked_engine(problem)
        base = engine._resources.scales.__array_interface__["data"][0]
        assert _desc(engine, lt.MatmulDesc.A_SCALE_POINTER) == base  # b's number, at cuBLASLt's A
        assert [attribute for _, name, attribute in engine._slots if name == "a_scale"] == \
            [lt.MatmulDesc.B_SCALE_POINTER]

    def test_misaligned_pointer_replans(self, mocked_engine):
        engine = mocked_engine(make_problem(row_major(8, 8, 1, np.float16), row_major(8, 8, 1, np.float16),
                                            col_major(8, 8, 1, np.float16)))
        calls = mocked_engine.heuristic_calls
        before = len(calls)
        engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)
        assert len(calls) == before
        engine.execute(0x1002, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)  # 2-byte aligned A
        assert len(calls) == before + 1
        preference = calls[-1]
        assert lt.get_attribute(preference, lt.Preference.MIN_ALIGNMENT_A_BYTES) == 2
        assert engine._alignment_mask == 1
        engine.execute(0x1002, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)
        assert len(calls) == before + 1  # planned once for that alignment

    def test_switching_candidates(self, mocked_engine):
        engine = mocked_engine(make_problem(row_major(8, 8, 1, np.float32), row_major(8, 8, 1, np.float32),
                                            col_major(8, 8, 1, np.float32)))
        third = engine.algorithms[2]
        engine.algorithms[:] = [third]
        assert bytes(engine._algo) == bytes(third.algo)
        assert engine.algorithms == [third] and third in engine.algorithms

    def test_workspace_of_the_chosen_algorithm(self, mocked_engine):
        with mock.patch.object(engine_module.lt, "heuristics", side_effect=_fake_heuristics((256, 1024, 0))):
            engine = mocked_engine(make_problem(row_major(8, 8, 1, np.float32), row_major(8, 8, 1, np.float32),
                                                col_major(8, 8, 1, np.float32)))
            workspace = engine._resources.workspace
            assert engine.workspace_bytes == 256 and workspace.nbytes == 256
            assert engine._args[13:15] == [workspace.pointer, 256]  # a mathpy._workspace.Workspace
            engine.algorithms[:] = [engine.algorithms[2]]
            assert engine.workspace_bytes == 0 and engine._args[13:15] == [0, 0]

    def test_self_autotune_holds_the_largest_workspace_until_it_chose(self, mocked_engine):
        with mock.patch.object(engine_module.lt, "heuristics", side_effect=_fake_heuristics((256, 4096, 0))):
            big = make_problem(row_major(64, 8192, 1, BF16), row_major(8192, 8192, 1, BF16),
                               col_major(64, 8192, 1, BF16))
            engine = mocked_engine(big)
            assert engine._autotune_pending and engine.workspace_bytes == 4096  # what a plan cache will account
            engine._self_autotune = lambda stream: engine._chosen_by_caller(engine.algorithms[2])
            engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)
            assert engine.workspace_bytes == 0

    def test_free_is_idempotent_and_final(self, mocked_engine):
        engine = mocked_engine(make_problem(row_major(8, 8, 1, np.float32), row_major(8, 8, 1, np.float32),
                                            col_major(8, 8, 1, np.float32)))
        resources = engine._resources
        assert resources.desc is not None and len(resources.layouts) == 3
        engine.free()
        assert resources.desc is None and resources.preference is None and resources.layouts == []
        engine.free()
        with pytest.raises(InvalidPlanStateError):
            engine.execute(1, 2, None, 3, {}, {}, 1.0, 0.0, 0)
        with pytest.raises(InvalidPlanStateError):
            engine.autotune({})

    def test_other_streams_take_a_workspace_of_their_own(self, mocked_engine):
        """One plan serves every stream: on a stream other than its home one, an execute takes a workspace from the
        pool in that stream's order; the plan's own workspace stays on the home stream (freed without waiting)."""
        with mock.patch.object(engine_module.lt, "heuristics", side_effect=_fake_heuristics((512, 0, 0))):
            engine = mocked_engine(make_problem(row_major(8, 8, 1, np.float32), row_major(8, 8, 1, np.float32),
                                                col_major(8, 8, 1, np.float32)), stream=0)
        memory = mocked_engine.memory
        home = engine._args[13]
        engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)     # the home stream
        assert engine.recorded[-1][13] == home and memory.allocations[-1][3] == 0
        allocated = len(memory.allocations)
        engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 1234)  # another one
        assert len(memory.allocations) == allocated + 1 and memory.allocations[-1] == ((512,), np.dtype(np.uint8), 0,
                                                                                        1234)
        assert engine.recorded[-1][13] != home and engine.recorded[-1][15] == 1234
        assert engine._args[13] == home  # back to the plan's own for the next call
        assert engine._resources.foreign_streams == set()  # no float8 scales: nothing to wait for at free
        from cuda.bindings import runtime
        with mock.patch.object(runtime, "cudaStreamSynchronize") as synchronize:
            engine.free()
        synchronize.assert_not_called()
        assert engine._resources.workspace is None

    def test_failed_plan_releases_everything(self, mocked_engine):
        created = []
        real_release = engine_module._Resources.release

        def release(self):
            created.append((self.desc, list(self.layouts)))
            real_release(self)
            created.append((self.desc, list(self.layouts)))

        with mock.patch.object(engine_module.lt, "heuristics", return_value=[]), \
                mock.patch.object(engine_module._Resources, "release", release):
            with pytest.raises(ValueError, match="no algorithm"):
                mocked_engine(make_problem(row_major(8, 8, 1, np.float32), row_major(8, 8, 1, np.float32),
                                           col_major(8, 8, 1, np.float32)))
        assert created[0][0] is not None and len(created[0][1]) == 3  # it had built them
        assert created[1] == (None, [])                               # and released them

    def test_float8_hint_in_the_error(self, mocked_engine):
        with mock.patch.object(engine_module.lt, "heuristics", return_value=[]):
            with pytest.raises(ValueError, match="TN"):
                mocked_engine(make_problem(row_major(16, 16, 1, E4M3), row_major(16, 16, 1, E4M3),
                                           col_major(16, 16, 1, BF16), a_scale=1.0, b_scale=1.0, d_scale=1.0))

    def test_self_autotune_times_a_wider_pool_and_keeps_limit(self, mocked_engine):
        from mathpy.host.matmul._options import MatmulPlanPreferences

        def heuristics(handle, desc, la, lb, lc, ld, preference, count):
            return _fake_heuristics((0,) * 5)(handle, desc, la, lb, lc, ld, preference, count)

        class Events:  # "times" each algorithm by its id: id 4 is the fastest
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                pass

            def start(self, stream):
                pass

            def elapsed(self, stream):
                return {4: 1.0}.get(engine._algo.data[0], 2.0 + engine._algo.data[0])

        big = make_problem(row_major(64, 8192, 1, BF16), row_major(8192, 8192, 1, BF16), col_major(64, 8192, 1, BF16))
        with mock.patch.object(engine_module.lt, "heuristics", side_effect=heuristics), \
                mock.patch.object(engine_module._runtime, "EventTimer", Events):
            engine = mocked_engine(big, preferences=MatmulPlanPreferences(limit=2))
            assert [alg.algo.data[0] for alg in engine.algorithms] == [1, 2]
            assert len(engine._pool) == 5 and engine._autotune_pending
            engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)
        assert [alg.algo.data[0] for alg in engine.algorithms] == [4, 1]  # the winner, and still `limit` long
        assert engine._algo.data[0] == 4 and not engine._autotune_pending
        # a calibration pair, then each: warm-up + 2 rounds of 3 (a timed call "takes" >= 1 s: the minimum 3);
        # then the call itself
        assert len(engine.recorded) == 2 + 5 * (1 + 2 * 3) + 1

    def test_self_autotune_flag(self, mocked_engine):
        big = make_problem(row_major(64, 8192, 1, BF16), row_major(8192, 8192, 1, BF16), col_major(64, 8192, 1, BF16))
        assert mocked_engine(big)._autotune_pending
        assert not mocked_engine(big, autotune_first_execute=False)._autotune_pending
        chosen = mocked_engine(big)
        chosen.algorithms[:] = [chosen.algorithms[1]]  # plan(algorithms=...) in the API: the caller's choice stands
        assert not chosen._autotune_pending and chosen._algo.data[0] == 2
        small = make_problem(row_major(8, 8, 1, BF16), row_major(8, 8, 1, BF16), col_major(8, 8, 1, BF16))
        assert not mocked_engine(small)._autotune_pending


# ---------------------------------------------------------------------------------------------------------------------
# 3. On a GPU (torch holds the device arrays)

TORCH_DTYPES = {}


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    if not TORCH_DTYPES:
        TORCH_DTYPES.update({np.dtype(np.float16): torch.float16, BF16: torch.bfloat16,
                             np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                             np.dtype(np.complex64): torch.complex64, np.dtype(np.complex128): torch.complex128,
                             E4M3: torch.float8_e4m3fn, E5M2: torch.float8_e5m2, np.dtype(np.uint8): torch.uint8})
    return torch


def _to_numpy(t):
    """float64 / complex128 / uint8 NumPy copy of a torch tensor (any dtype)."""
    torch = _torch()
    t = t.detach()
    if t.dtype == torch.uint8:
        return t.cpu().numpy()
    if t.is_complex():
        return t.to(torch.complex128).cpu().numpy()
    return t.to(torch.float32).to(torch.float64).cpu().numpy()  # float8 converts through float32


def _random(shape, dtype, seed, scale=1.0):
    """A torch CUDA tensor of ``dtype`` with small random non-zero values (exact in low precision)."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    values = (torch.randint(-4, 5, shape, generator=g).to(torch.float64) / 4) * scale
    values[values == 0] = 0.5
    if np.dtype(dtype).kind == "c":
        imag = torch.randint(-4, 5, shape, generator=g).to(torch.float64) / 4
        values = torch.complex(values, imag)
    if np.dtype(dtype).kind != "c":
        values = values.to(torch.float32)  # float8 converts from float32
    return values.to(TORCH_DTYPES[np.dtype(dtype)]).cuda()


def _layout_of(t, rows, cols, dtype):
    """MatrixLayout of a torch tensor (rows, cols) or (batch, rows, cols) (stride 0 batches broadcast)."""
    if t.ndim == 2:
        return MatrixLayout(rows, cols, t.stride(0), t.stride(1), 1, 0, np.dtype(dtype))
    return MatrixLayout(rows, cols, t.stride(1), t.stride(2), t.shape[0], t.stride(0), np.dtype(dtype))


def _col_major_empty(batch, rows, cols, dtype):
    torch = _torch()
    return torch.empty((batch, cols, rows), dtype=TORCH_DTYPES[np.dtype(dtype)], device="cuda").transpose(1, 2)


def _operand(kind, batch, rows, cols, dtype, seed):
    """A (batch, rows, cols) operand stored as ``kind``: "row" (C order), "col" (transposed storage), "strided"
    (rows of a wider row-major array), "broadcast" (one matrix, batch stride 0)."""
    if kind == "row":
        return _random((batch, rows, cols), dtype, seed)
    if kind == "col":
        return _random((batch, cols, rows), dtype, seed).transpose(1, 2)
    if kind == "strided":
        return _random((batch, rows, cols + 8), dtype, seed)[:, :, :cols]
    if kind == "broadcast":
        return _random((1, rows, cols), dtype, seed).expand(batch, rows, cols)
    raise ValueError(kind)


def _torch_memory():
    """torch's stream-ordered pool on device 0, as the engines take it."""
    from mathpy import _packages
    return _packages.get("torch").on(0)


def _stream():
    return _torch().cuda.current_stream().cuda_stream


def _run(problem, tensors, inputs=None, outputs=None, alpha=1.0, beta=0.0, engine=None, **kwargs):
    own = engine is None
    engine = engine or CublasLtEngine(problem, execution=ExecutionCUDA(0), allocator=_torch_memory(), **kwargs)
    try:
        a, b, c, d = tensors
        engine.execute(a.data_ptr(), b.data_ptr(), None if c is None else c.data_ptr(), d.data_ptr(),
                       {name: t.data_ptr() for name, t in (inputs or {}).items()},
                       {name: t.data_ptr() for name, t in (outputs or {}).items()}, alpha, beta, _stream())
        _torch().cuda.synchronize()
    finally:
        if own:
            engine.free()
    return engine


TOLERANCE = {np.dtype(np.float16): 2e-3, BF16: 1e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12,
             np.dtype(np.complex64): 1e-5, np.dtype(np.complex128): 1e-12, E4M3: 0.07, E5M2: 0.13}


def _assert_close(got, ref, dtype, what="result", tol=None):
    tol = TOLERANCE[np.dtype(dtype)] if tol is None else tol
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    error = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    assert error <= tol * scale, f"{what}: max error {error:.3g} > {tol:.1g} x {scale:.3g}"


GPU_DTYPES = [(np.float16, "32F", np.float32), (np.float16, "16F", np.float16), (BF16, "32F", np.float32),
              (np.float32, "32F", np.float32), (np.float32, "32F_FAST_TF32", np.float32),
              (np.float64, "64F", np.float64), (np.complex64, "32F", np.complex64),
              (np.complex128, "64F", np.complex128)]


@pytest.mark.gpu
class TestEngineOnGPU:
    @pytest.mark.parametrize("dtype, compute, scale", GPU_DTYPES, ids=lambda x: str(x))
    @pytest.mark.parametrize("a_kind, b_kind", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")],
                             ids=["TT", "TN", "NT", "NN"])
    def test_dtypes_and_transposes(self, dtype, compute, scale, a_kind, b_kind):
        m, n, k = 40, 24, 56
        a = _operand(a_kind, 1, m, k, dtype, 1)[0]
        b = _operand(b_kind, 1, k, n, dtype, 2)[0]
        c = _random((n, m), dtype, 3).T  # column-major, like D
        d = _col_major_empty(1, m, n, dtype)[0]
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype),
                               c=_layout_of(c, m, n, dtype), compute=compute, scale=scale)
        _run(problem, (a, b, c, d), alpha=1.5, beta=-0.5)
        ref = 1.5 * _to_numpy(a) @ _to_numpy(b) - 0.5 * _to_numpy(c)
        tol = 5e-3 if compute == "32F_FAST_TF32" else (1e-2 if compute == "16F" else None)
        _assert_close(_to_numpy(d), ref, dtype, tol=tol)

    @pytest.mark.parametrize("a_kind, b_kind", [("strided", "row"), ("broadcast", "col"), ("row", "broadcast"),
                                                ("col", "strided")])
    def test_batched_strided_broadcast(self, a_kind, b_kind):
        batch, m, n, k = 5, 33, 17, 24
        dtype = np.float32
        a = _operand(a_kind, batch, m, k, dtype, 4)
        b = _operand(b_kind, batch, k, n, dtype, 5)
        d = _col_major_empty(batch, m, n, dtype)
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype))
        _run(problem, (a, b, None, d))
        _assert_close(_to_numpy(d), _to_numpy(a) @ _to_numpy(b), dtype)

    def test_row_major_result_with_c(self):
        batch, m, n, k = 3, 20, 12, 16
        dtype = np.float16
        a, b = _operand("row", batch, m, k, dtype, 6), _operand("col", batch, k, n, dtype, 7)
        c = _random((batch, m, n), dtype, 8)
        d = _torch().empty_like(c)
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype),
                               c=_layout_of(c, m, n, dtype))
        _run(problem, (a, b, c, d), alpha=1.0, beta=1.0)
        _assert_close(_to_numpy(d), _to_numpy(a) @ _to_numpy(b) + _to_numpy(c), dtype)

    @pytest.mark.parametrize("epilog", list(MatmulEpilog)[1:], ids=lambda e: e.name)
    @pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32], ids=str)
    @pytest.mark.parametrize("batch", [1, 3])
    def test_every_epilog(self, epilog, dtype, batch):
        torch = _torch()
        m, n, k = 72, 40, 64
        dtype = np.dtype(dtype)
        spec = epilog_spec(epilog)
        # BGRADA has kernels only for op(A) = N (column-major A), BGRADB only for op(B) = T (row-major B)
        a = _operand("col" if epilog is E.BGRADA else "row", batch, m, k, dtype, 10)
        b = _operand("row" if epilog is E.BGRADB else "col", batch, k, n, dtype, 11)
        d = _col_major_empty(batch, m, n, dtype)
        inputs, input_layouts = {}, []
        rng = np.random.default_rng(12)
        mask = rng.random((batch, m, n)) < 0.5
        pre = rng.standard_normal((batch, m, n))
        if "bias" in spec.inputs:
            inputs["bias"] = _random((batch, m), dtype, 13)
            input_layouts.append(("bias", MatrixLayout(m, 1, 1, m, batch, m, dtype)))
        if "relu_aux" in spec.inputs:
            rows = relu_aux_rows(m)
            packed = pack_bits(mask, rows)  # (batch, rows, n) column-major
            aux = torch.empty((batch, n, rows), dtype=torch.uint8, device="cuda").transpose(1, 2)
            aux.copy_(torch.from_numpy(np.ascontiguousarray(packed)))
            inputs["relu_aux"] = aux
            input_layouts.append(("relu_aux", MatrixLayout(m, n, 1, 8 * rows, batch, 8 * rows * n,
                                                           np.dtype(np.uint8))))
        if "gelu_aux" in spec.inputs:
            rows = gelu_aux_rows(m)
            aux = _col_major_empty(batch, rows, n, dtype)
            aux.zero_()
            aux[:, :m, :] = torch.from_numpy(pre).to(TORCH_DTYPES[dtype]).cuda()
            pre = _to_numpy(aux)[:, :m, :]  # what the GPU sees, rounded to dtype
            inputs["gelu_aux"] = aux
            input_layouts.append(("gelu_aux", MatrixLayout(m, n, 1, rows, batch, rows * n, dtype)))
        out_layouts = output_layouts(spec, m, n, batch, dtype)
        outputs = {}
        for name, layout in out_layouts:
            shape = HANDLERS[name].shape(layout, (batch,))
            if name in ("relu_aux", "gelu_aux"):
                outputs[name] = _col_major_empty(batch, shape[-2], shape[-1], layout.dtype)
            else:
                outputs[name] = torch.empty((batch, layout.rows), dtype=TORCH_DTYPES[layout.dtype], device="cuda")
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype),
                               epilog=epilog, inputs=input_layouts, outputs=out_layouts)
        _run(problem, (a, b, None, d), inputs, outputs)

        A, B = _to_numpy(a), _to_numpy(b)
        x = A @ B
        if spec.bias:
            x = x + _to_numpy(inputs["bias"])[:, :, None]
        activation = spec.activation
        if activation == "relu":
            ref = np.maximum(x, 0)
        elif activation == "gelu":
            ref = gelu(x)
        elif activation == "drelu":
            ref = x * mask
        elif activation == "dgelu":
            ref = x * gelu_grad(pre)
        else:
            ref = x
        tol = TOLERANCE[dtype]
        if activation in ("gelu", "dgelu"):  # cuBLASLt may evaluate tanh with a fast approximation
            tol = max(4 * tol, 2e-3)
        _assert_close(_to_numpy(d), ref, dtype, "D", tol)
        if "relu_aux" in outputs:
            got = unpack_bits(_to_numpy(outputs["relu_aux"]), m)
            clear = np.abs(x) > 1e-2 * max(1.0, np.max(np.abs(x)))
            assert np.array_equal(got[clear], (x > 0)[clear]), "relu_aux bitmask"
        if "gelu_aux" in outputs:
            _assert_close(_to_numpy(outputs["gelu_aux"])[:, :m, :], x, dtype, "gelu_aux")
        for name in ("drelu_bgrad", "dgelu_bgrad"):
            if name in outputs:
                _assert_close(_to_numpy(outputs[name]), ref.sum(axis=2), dtype, name, tol=tol * 4)
        if "bgrada" in outputs:
            _assert_close(_to_numpy(outputs["bgrada"]), A.sum(axis=2), dtype, "bgrada")
        if "bgradb" in outputs:
            _assert_close(_to_numpy(outputs["bgradb"]), B.sum(axis=1), dtype, "bgradb")

    @pytest.mark.parametrize("a_dtype, b_dtype, d_dtype", [(E4M3, E4M3, BF16), (E4M3, E5M2, np.float16),
                                                           (E4M3, E4M3, E4M3), (E5M2, E4M3, np.float32)],
                             ids=str)
    def test_float8_with_scales(self, a_dtype, b_dtype, d_dtype):
        torch = _torch()
        from mathpy import _cuda
        if _cuda.compute_capability(0) < (8, 9):
            pytest.skip("float8 needs compute capability >= 8.9")
        m, n, k = 64, 48, 96
        a = _operand("row", 1, m, k, a_dtype, 20)[0]   # row-major A, column-major B: cuBLASLt's TN
        b = _operand("col", 1, k, n, b_dtype, 21)[0]
        d = _col_major_empty(1, m, n, d_dtype)[0]
        scales = {"a_scale": 0.5, "b_scale": 2.0, "d_scale": 0.25 if np.dtype(d_dtype) in (E4M3, E5M2) else 1.0}
        problem = make_problem(_layout_of(a, m, k, a_dtype), _layout_of(b, k, n, b_dtype),
                               _layout_of(d, m, n, d_dtype), **scales)
        _run(problem, (a, b, None, d), alpha=1.0)
        ref = scales["d_scale"] * scales["a_scale"] * scales["b_scale"] * (_to_numpy(a) @ _to_numpy(b))
        _assert_close(_to_numpy(d), ref, d_dtype, tol=TOLERANCE.get(np.dtype(d_dtype), 1e-2))
        assert torch.isfinite(d.to(torch.float32)).all()

    def test_float8_bias_epilog(self):
        from mathpy import _cuda
        if _cuda.compute_capability(0) < (8, 9):
            pytest.skip("float8 needs compute capability >= 8.9")
        m, n, k = 64, 32, 64
        a = _operand("row", 1, m, k, E4M3, 22)[0]
        b = _operand("col", 1, k, n, E4M3, 23)[0]
        d = _col_major_empty(1, m, n, BF16)[0]
        bias = _random((m,), BF16, 24)
        problem = make_problem(_layout_of(a, m, k, E4M3), _layout_of(b, k, n, E4M3), _layout_of(d, m, n, BF16),
                               epilog=E.RELU_BIAS, inputs=[("bias", MatrixLayout(m, 1, 1, m, 1, m, BF16))],
                               a_scale=1.0, b_scale=1.0, d_scale=1.0)
        _run(problem, (a, b, None, d), {"bias": bias})
        ref = np.maximum(_to_numpy(a) @ _to_numpy(b) + _to_numpy(bias)[:, None], 0)
        _assert_close(_to_numpy(d), ref, BF16)

    def test_autotune_keeps_the_fastest_and_stays_correct(self):
        m, n, k = 256, 512, 1024
        dtype = BF16
        a, b = _operand("row", 1, m, k, dtype, 30)[0], _operand("row", 1, k, n, dtype, 31)[0]
        d = _col_major_empty(1, m, n, dtype)[0]
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype))
        engine = CublasLtEngine(problem, execution=ExecutionCUDA(0), allocator=_torch_memory())
        try:
            operands = {"a": a.data_ptr(), "b": b.data_ptr(), "c": None, "d": d.data_ptr(), "epilog_inputs": {},
                        "epilog_outputs": {}, "alpha": 1.0, "beta": 0.0}
            timings = engine.autotune(operands, _stream(), iterations=3)
            assert timings and all(seconds > 0 for _, seconds in timings)
            assert [t for _, t in timings] == sorted(t for _, t in timings)
            assert engine.algorithms[0] == timings[0][0]
            assert engine.workspace_bytes == timings[0][0].workspace_bytes
            d.zero_()
            _run(problem, (a, b, None, d), engine=engine)
            _assert_close(_to_numpy(d), _to_numpy(a) @ _to_numpy(b), dtype)
        finally:
            engine.free()

    def test_self_autotune_on_first_execute(self):
        m, n, k = 64, 8192, 4096
        dtype = BF16
        a, b = _operand("row", 1, m, k, dtype, 32)[0], _operand("row", 1, k, n, dtype, 33)[0]
        d = _col_major_empty(1, m, n, dtype)[0]
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype))
        engine = CublasLtEngine(problem, execution=ExecutionCUDA(0), allocator=_torch_memory())
        try:
            assert engine._autotune_pending == (len(engine.algorithms) > 1)
            _run(problem, (a, b, None, d), engine=engine)
            assert not engine._autotune_pending
            _assert_close(_to_numpy(d), _to_numpy(a) @ _to_numpy(b), dtype)
        finally:
            engine.free()

    def test_misaligned_operand(self):
        m, n, k = 30, 18, 22
        dtype = np.float16
        storage = _random((m * k + 1,), dtype, 40)
        a = storage[1:].view(m, k)  # 2 bytes past a 256-byte boundary
        b = _random((k, n), dtype, 41)
        d = _col_major_empty(1, m, n, dtype)[0]
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype))
        engine = _run(problem, (a, b, None, d), engine=CublasLtEngine(problem, execution=ExecutionCUDA(0),
                                                                       allocator=_torch_memory()))
        try:
            assert engine._alignment_mask == 1
            _assert_close(_to_numpy(d), _to_numpy(a) @ _to_numpy(b), dtype)
        finally:
            engine.free()

    def test_free_releases_workspace(self):
        torch = _torch()
        m = n = k = 512
        dtype = np.float32
        problem = make_problem(row_major(m, k, 1, dtype), row_major(k, n, 1, dtype), col_major(m, n, 1, dtype))
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        engine = CublasLtEngine(problem, execution=ExecutionCUDA(0), allocator=_torch_memory())
        assert torch.cuda.memory_allocated() - before >= engine.workspace_bytes
        engine.free()
        engine.free()
        assert torch.cuda.memory_allocated() == before

    def test_ten_thousand_plans_do_not_leak(self):
        torch = _torch()
        m, n, k = 64, 64, 64
        dtype = np.float16
        a, b = _random((m, k), dtype, 50), _random((k, n), dtype, 51)
        d = _col_major_empty(1, m, n, dtype)[0]
        problem = make_problem(_layout_of(a, m, k, dtype), _layout_of(b, k, n, dtype), _layout_of(d, m, n, dtype))

        def cycle(count):
            for _ in range(count):
                engine = CublasLtEngine(problem, execution=ExecutionCUDA(0), allocator=_torch_memory())
                engine.execute(a.data_ptr(), b.data_ptr(), None, d.data_ptr(), {}, {}, 1.0, 0.0, _stream())
                engine.free()
            torch.cuda.synchronize()
            gc.collect()

        cycle(500)  # warm up caches (heuristic cache, allocator pools)
        rss_before, torch_before = rss_bytes(), torch.cuda.memory_allocated()
        free_before = torch.cuda.mem_get_info()[0]
        cycle(10_000)
        assert torch.cuda.memory_allocated() == torch_before
        if not os.environ.get("PYTEST_XDIST_WORKER"):  # device-wide free memory: meaningless beside other workers
            assert free_before - torch.cuda.mem_get_info()[0] < 16 << 20, "device memory outside torch's pool grew"
        growth = rss_bytes() - rss_before
        assert growth < 16 << 20, f"host memory grew by {growth / 2**20:.1f} MiB over 10,000 plans"
        _assert_close(_to_numpy(d), _to_numpy(a) @ _to_numpy(b), dtype)


# ---------------------------------------------------------------------------------------------------------------------
# Through the public API (when the API is importable)


def _public_api():
    try:
        import mathpy
        return mathpy.matmul, mathpy.Matmul
    except (ImportError, AttributeError):
        try:
            from mathpy.host.matmul import Matmul, matmul
            return matmul, Matmul
        except ImportError:
            pytest.skip("the public matmul API is not importable")


@pytest.mark.gpu
class TestPublicAPIOnGPU:
    @pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True), (True, True)])
    def test_matmul_transposed_views(self, transpose_a, transpose_b):
        matmul, _ = _public_api()
        m, k, n = 32, 48, 40
        a = _random((k, m), np.float32, 60).T if transpose_a else _random((m, k), np.float32, 60)
        b = _random((n, k), np.float32, 61).T if transpose_b else _random((k, n), np.float32, 61)
        result = matmul(a, b)
        _assert_close(_to_numpy(result), _to_numpy(a) @ _to_numpy(b), np.float32)

    def test_stateful_relu_bias_autotune(self):
        _, Matmul = _public_api()
        a, b = _random((128, 256), BF16, 62), _random((256, 96), BF16, 63)
        bias = _random((128,), BF16, 64)
        with Matmul(a, b) as mm:
            mm.plan(epilog=E.RELU_BIAS, epilog_inputs={"bias": bias})
            mm.autotune(iterations=2)
            result = mm.execute()
        ref = np.maximum(_to_numpy(a) @ _to_numpy(b) + _to_numpy(bias)[:, None], 0)
        _assert_close(_to_numpy(result), ref, BF16)
