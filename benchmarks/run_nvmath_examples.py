"""Run nvmath-python's own example programs unchanged through mathpy.compat.nvmath, and tabulate what happens.

    python benchmarks/run_nvmath_examples.py EXAMPLES [--only fft|matmul] [-k TEXT ...] [--jobs N] [--timeout S]
                                             [--cpu-only]

``EXAMPLES`` is a folder holding nvmath-python's ``examples/fft`` and ``examples/linalg/advanced/matmul`` (a checkout
of NVIDIA/nvmath-python's ``examples`` folder, or a copy of those two folders as ``EXAMPLES/fft`` and
``EXAMPLES/matmul``); nothing of nvmath-python is copied into this repository. Each ``example*.py`` file runs in its
own process (``python example.py``), in its own folder (some import helper modules next to them, as ``caching.py``),
with ``import nvmath`` (and its submodules) resolved to ``mathpy.compat.nvmath`` by a module ``nvmath`` of this script's
own put first on ``PYTHONPATH`` (so process pools that spawn workers see it too): the program is not edited.
nvmath-python itself need not be installed (and is not used if it is).

Each file is reported as ``pass``, ``needs Blackwell`` (it stopped on mathpy's error naming Blackwell / compute
capability 10.0: MXFP8 block scaling), ``needs <module>`` (a package it imports is missing here, e.g. CuPy on a CPU
machine), ``needs GPU`` (no GPU, or not the one it names: mathpy's NoDeviceError, torch's CUDA errors), ``timeout``
or ``FAIL`` with the last line of its error. The exit
status is 1 when any file failed or timed out. ``--jobs N`` runs N files at a time (they share the GPU);
``--cpu-only`` runs only the examples whose name says CPU (``*cpu*.py``): what a machine without a GPU can check.
"""

import argparse
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

# ``import nvmath`` in an example (and in its worker processes): nvmath's module names bound to mathpy.compat.nvmath's
_ALIAS = """
import sys
import mathpy.compat.nvmath
import mathpy.compat.nvmath.linalg.advanced.helpers.matmul
for _name, _module in list(sys.modules.items()):
    if _name == "mathpy.compat.nvmath" or _name.startswith("mathpy.compat.nvmath."):
        sys.modules["nvmath" + _name[len("mathpy.compat.nvmath"):]] = _module
"""

_BLACKWELL = re.compile(r"Blackwell|compute capability (>= )?10\.0", re.I)
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_NO_DEVICE = re.compile(r"NoDeviceError|no CUDA-capable device|CUDA driver version is insufficient|Torch not compiled "
                        r"with CUDA|Cannot access accelerator device|invalid device ordinal|"
                        r"device_id \d+ is out of range: this machine has")  # (mathpy's: a second GPU named)


def find_examples(folder, only):
    """(group, path) of every example file under ``folder`` (nvmath's layout, or fft/ and matmul/ side by side)."""
    groups = {"fft": ["fft"], "matmul": ["linalg/advanced/matmul", "matmul"]}
    found = []
    for group, subfolders in groups.items():
        if only and group != only:
            continue
        for sub in subfolders:
            directory = folder / sub
            if directory.is_dir():
                found += [(group, path) for path in sorted(directory.glob("example*.py"))]
                break
    return found


def run_one(path, timeout, alias):
    """(status, seconds, detail) of one example file; ``alias``: the folder holding the ``nvmath`` alias module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([alias, str(ROOT), str(path.parent), env.get("PYTHONPATH", "")])
    env.setdefault("MPLBACKEND", "Agg")
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, str(path)], cwd=path.parent, env=env, capture_output=True,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, f"over {timeout} s"
    seconds = time.perf_counter() - start
    if result.returncode == 0:
        return "pass", seconds, ""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {result.returncode}"
    missing = _MISSING.search(result.stderr)
    if missing and not missing.group(1).startswith(("nvmath", "mathpy")):
        return f"needs {missing.group(1).split('.')[0]}", seconds, last
    if _BLACKWELL.search(last):
        return "needs Blackwell", seconds, last
    if _NO_DEVICE.search(last):
        return "needs GPU", seconds, last
    return "FAIL", seconds, last


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", type=pathlib.Path, help="nvmath-python's examples folder (see above)")
    parser.add_argument("--only", choices=["fft", "matmul"], help="one API's examples")
    parser.add_argument("-k", dest="select", action="append", default=[],
                        help="only the files whose name contains this (repeat for several)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per example (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="examples run at a time (default 1)")
    parser.add_argument("--cpu-only", action="store_true", help="only the examples that run on the CPU (*cpu*.py)")
    args = parser.parse_args()
    examples = [(g, p) for g, p in find_examples(args.examples.resolve(), args.only)
                if (not args.select or any(text in p.name for text in args.select))
                and (not args.cpu_only or "cpu" in p.name)]
    if not examples:
        parser.error(f"no example*.py files under {args.examples} (expected fft/ and linalg/advanced/matmul/)")
    rows, counts = [], {}
    alias = tempfile.mkdtemp(prefix="mathpy-nvmath-alias-")
    pathlib.Path(alias, "nvmath.py").write_text(_ALIAS)
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        outcomes = pool.map(lambda example: run_one(example[1], args.timeout, alias), examples)
        for (group, path), (status, seconds, detail) in zip(examples, outcomes):
            counts[status] = counts.get(status, 0) + 1
            rows.append((group, path.name, status, f"{seconds:.1f}", detail[:150]))
            print(f"{group:6s} {path.name:48s} {status:16s} {seconds:6.1f} s  {detail[:150]}", flush=True)
    total = len(rows)
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    print(f"\n{total} examples: {summary}")
    return 1 if any(status in ("FAIL", "timeout") for _, _, status, _, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
