"""Every GPU-only example in examples/ behaves on a machine without a GPU: run plainly it says so in one line and how
to run it instead; run that way (the command its docstring gives after "Run without one", e.g. on numba's CUDA
simulator at a small size) it finishes and checks its own result. On a GPU machine tests/test_device_gpu.py runs them
at full size.

An example is GPU-only when its docstring has a "Run without one" line. Examples that run on the CPU as they are (the
host APIs' CPU execution space) have no such line and are run by the tests of what they demonstrate."""

import ast
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from mathpy import _cuda

ROOT = pathlib.Path(__file__).resolve().parents[1]
_RUN_WITHOUT_ONE = re.compile(r"^Run without one[^:]*:\s*(.+)$", flags=re.M)


def _docstring(path):
    return ast.get_docstring(ast.parse(path.read_text())) or ""


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py")
                  if not p.name.startswith("_") and _RUN_WITHOUT_ONE.search(_docstring(p)))


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def no_gpu_route(example):
    """(environment variables, arguments) of the docstring's "Run without one ...: [VAR=1 ...] python examples/x.py
    [args]" line."""
    match = _RUN_WITHOUT_ONE.search(_docstring(ROOT / "examples" / example))
    assert match, f"examples/{example}'s docstring must say how to run it without a GPU (a 'Run without one: ...' line)"
    words = shlex.split(match.group(1))
    env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=\S*", w))
    command = [w for w in words if not re.fullmatch(r"[A-Z_]+=\S*", w)]
    assert command[:2] == ["python", f"examples/{example}"], f"unexpected no-GPU command {match.group(1)!r}"
    return env, command[2:]


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_without_a_gpu_says_so_in_one_line(example):
    if _cuda.is_available():
        pytest.skip("this machine has a GPU: the example runs")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / example)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode != 0, "an example that did no work must not exit 0"
    assert len(lines) == 1, "expected one line, got:\n" + "\n".join(lines)
    env, args = no_gpu_route(example)
    route = " ".join([*(f"{k}={v}" for k, v in env.items()), "python", f"examples/{example}", *args])
    assert "no CUDA GPU" in lines[0] and route in lines[0], lines[0]


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs_the_no_gpu_way(example):
    env, args = no_gpu_route(example)
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / example), *args], cwd=ROOT, env=_env(**env),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "OK" in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
