"""Compiling a Python matmul epilog without a GPU: the keys of the compiled pieces (a changed function, a rebound
global, a changed closure, other operand dtypes, another GPU architecture or mathpy version never reuse stale code),
the disk cache across processes (a new process loads the linked kernel without importing numba-cuda), and the code
the link produces for the elementwise pass (the epilog inlined, 16-byte accesses of D, operands read through the
read-only cache). nvJitLink and NVVM run on the CPU; only loading the cubin needs a GPU."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mathpy
from mathpy.jit import _epilog_wrapper as W
from mathpy.jit import _matmul_epilog as E

ROOT = Path(__file__).resolve().parents[1]
KINDS = (("float32", 2),)


def _epilog(source, name="f", namespace=None):
    namespace = dict(namespace or {}, np=np)
    exec(compile(source, f"<epilog {name}>", "exec"), namespace)
    return namespace[name]


def _key(fn, kinds=KINDS, compute="float32", staged=None, cc=(9, 0)):
    return W.wrapper_key(E.as_matmul_epilog(fn, ("data",)), kinds, compute, staged, cc)


SOURCE = "def f(value, row, col, data):\n    return value * data[row, col] + SHIFT\n"


def test_the_key_covers_code_globals_closures_types_architecture_and_version(monkeypatch):
    base = _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}))
    assert base is not None and base == _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}))  # same content
    others = {
        "code": _key(_epilog(SOURCE.replace("+ SHIFT", "- SHIFT"), namespace={"SHIFT": np.float32(1)})),
        "global": _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(2)})),
        "global dtype": _key(_epilog(SOURCE, namespace={"SHIFT": np.float64(1)})),
        "operand dtype": _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}), (("bfloat16", 2),)),
        "operand ndim": _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}), (("float32", 3),)),
        "compute": _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}), compute="float64"),
        "staged": _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}), (("bfloat16", 2),), staged=(128, 256)),
        "architecture": _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}), cc=(10, 0)),
    }
    monkeypatch.setattr(mathpy, "__version__", mathpy.__version__ + ".post1")
    others["mathpy version"] = _key(_epilog(SOURCE, namespace={"SHIFT": np.float32(1)}))
    monkeypatch.undo()
    assert len(set(others.values()) | {base}) == len(others) + 1, others


def test_a_rebound_global_or_a_changed_closure_changes_the_key_of_the_same_function():
    fn = _epilog(SOURCE, namespace={"SHIFT": np.float32(1)})
    first = E.as_matmul_epilog(fn, ("data",))
    fn.__globals__["SHIFT"] = np.float32(3)
    second = E.as_matmul_epilog(fn, ("data",))
    assert not first.current() and second.current() and first != second and first.key != second.key

    def make(shift):
        def g(value, row, col, data):
            return value + shift
        return g

    g = make(np.float32(1))
    before = E.as_matmul_epilog(g, None)
    g.__closure__[0].cell_contents = np.float32(2)
    assert not before.current() and E.as_matmul_epilog(g, None).key != before.key


def test_a_function_that_cannot_be_fingerprinted_is_compiled_once_per_process():
    opaque = object()
    fn = _epilog("def f(value, row, col, data):\n    return value if THING is None else value\n",
                 namespace={"THING": opaque})
    assert E.as_matmul_epilog(fn, ("data",)).key is None and _key(fn) is None


_PROCESS = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    sys.path.insert(0, {tests!r})
    from epilog_module import gated
    from mathpy.device._epilog_pass import PassConfig
    from mathpy.host.matmul import _fused_kernels as K
    from mathpy.jit._matmul_epilog import as_matmul_epilog
    epilog = as_matmul_epilog(gated, ("bias", "gate"))
    build = K.Build("pass", PassConfig("bfloat16", 2), (9, 0))
    kinds = (("float32", 1), ("bfloat16", 2))
    start = time.perf_counter()
    key = K.cubin_key(build, epilog, kinds, None)
    cubin, header, where = K.linked(build, epilog, kinds, None, key)
    print(json.dumps({{"where": where, "seconds": time.perf_counter() - start, "bytes": len(cubin),
                      "numba": any(m.split(".")[0] in ("numba", "numba_cuda") for m in sys.modules),
                      "name": header["name"], "params": header["params"]}}))
""")

_MODULE = textwrap.dedent("""
    import math
    import numpy as np

    SCALE = np.float32({scale})

    def gated(value, row, col, bias, gate):
        x = value + bias[col]
        return x / (np.float32(1) + math.exp(-x)) * gate[row, col] * SCALE
""")


def _process(tmp_path, scale):
    (tmp_path / "epilog_module.py").write_text(_MODULE.format(scale=scale))
    env = dict(os.environ, MATHPY_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _PROCESS.format(tests=str(tmp_path))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_new_process_loads_the_linked_kernel_from_disk_without_numba(tmp_path):
    """First process: the pass compiled (numba-cuda), the epilog compiled, the two linked by nvJitLink. Second
    process, same function and dtypes: the cubin from disk, without importing numba-cuda, in well under 0.5 s. A
    changed module constant is another function: built again."""
    first = _process(tmp_path, 2)
    assert first["where"] == "built" and first["numba"] and first["bytes"] > 1000
    second = _process(tmp_path, 2)
    assert second["where"] == "disk" and not second["numba"] and second["seconds"] < 0.5, second
    assert (second["name"], second["params"]) == (first["name"], first["params"])
    changed = _process(tmp_path, 3)
    assert changed["where"] == "built"


@pytest.mark.slow
@pytest.mark.parametrize("out, vector", [("bfloat16", "v4.u32"), ("float32", "v4.f32"), ("complex64", "v4.f32"),
                                         ("float64", "v2.f64")])
def test_the_linked_pass_inlines_the_epilog_and_moves_16_bytes(out, vector):
    from mathpy.device import _epilog_pass as P
    from mathpy.device import _gemm_build
    from mathpy.device._gemm_kernel import EPILOG_SYMBOL
    from mathpy.jit import _link

    def scaled(value, row, col, scale):
        return value * scale[row] if row > 0 else -value

    skeleton, params, _ = _gemm_build.pass_ltoir(P.PassConfig(out, 1), (9, 0))
    wrapper, _ = W.wrapper_ltoir(E.as_matmul_epilog(scaled, ("scale",)), (("float32", 1),), out, None, (9, 0))
    cubin, ptx = _link.link({"pass": skeleton, "epilog": wrapper}, "sm_90", inlined=EPILOG_SYMBOL)
    assert cubin and not re.search(r"\bcall", ptx) and not re.search(r"\b(ld|st)\.local", ptx)
    assert re.search(rf"ld\.global\.{re.escape(vector)}", ptx) and re.search(rf"st\.global\.{re.escape(vector)}", ptx)
    assert "ld.global.nc.f32" in ptx
    assert params == ["d_ptr", "m", "n", "ldd", "d_batch", "batches", "row_shift", "o0_ptr", "o0_t0", "o0_t1", "o0_t2"]
    if shutil.which("ptxas"):  # at most 64 registers (4 blocks of 256 threads per SM: a memory-bound pass), no spills
        report = _gemm_build.ptxas_report(ptx, "sm_90")
        used = int(re.search(r"Used (\d+) registers", report).group(1))
        assert used <= 64 and not re.search(r"[1-9]\d* bytes spill stores", report), report


def test_an_epilog_numba_cannot_compile_names_its_file_and_line():
    from mathpy import CallbackCompileError

    def broken(value, row, col, data):
        return value * data[row, col, col]

    with pytest.raises(CallbackCompileError) as info:
        W.wrapper_ltoir(E.as_matmul_epilog(broken, ("data",)), KINDS, "float32", None, (9, 0))
    line = broken.__code__.co_firstlineno
    assert f"test_matmul_epilog_compile.py:{line}" in str(info.value) and "compute capability 9.0" in str(info.value)
