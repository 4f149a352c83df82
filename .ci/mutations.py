"""Mutation check: apply each mutation that issues 12 and 22 name, run the tests meant to catch it, and print a table
(mutation, tests, unmutated, mutated). Run from the repository root with the `.[test]` extras installed:

    python .ci/mutations.py            # CPU tests (what CI runs)
    python .ci/mutations.py --gpu      # also the GPU tests listed for each mutation (on a GPU machine)
    python .ci/mutations.py -k scipy   # only the mutations whose name contains "scipy"

Each mutation is a one-line text substitution; the file is restored afterwards (also on Ctrl-C). A mutation counts as
caught only when a test that ran failed: tests that were not collected, all skipped, or that could not start (a
usage or collection error) catch nothing, and a test list that runs no test unmutated is reported as such.
"""

import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (name, file, original text, mutated text, CPU tests, GPU tests)
MUTATIONS = [
    ("cuBLASLt TRANSA/TRANSB swapped", "mathpy/host/matmul/_cublaslt.py",
     "lt.set_attribute(desc, lt.MatmulDesc.TRANSA, op_a)\n        lt.set_attribute(desc, lt.MatmulDesc.TRANSB, op_b)",
     "lt.set_attribute(desc, lt.MatmulDesc.TRANSA, op_b)\n        lt.set_attribute(desc, lt.MatmulDesc.TRANSB, op_a)",
     ["tests/test_matmul_cuda.py::TestEnginePlanning"],
     ["tests/test_matmul_cuda.py -m gpu -k 'layout or transpose'"]),
    ("cuBLASLt EPILOGUE_AUX_LD = rows instead of the aux leading dimension", "mathpy/host/matmul/_epilog_operands.py",
     "lt.MatmulDesc.EPILOGUE_AUX_LD, layout.col_stride)",
     "lt.MatmulDesc.EPILOGUE_AUX_LD, layout.rows)",
     ["tests/test_matmul_cuda.py::TestEnginePlanning"],
     ["tests/test_matmul_epilog.py -m gpu"]),
    ("cuFFT idist/odist swapped in cufftXtMakePlanMany", "mathpy/host/fft/_cufft.py",
     "inembed, params.istride, params.idist,\n                                  in_type, onembed, params.ostride, "
     "params.odist,",
     "inembed, params.istride, params.odist,\n                                  in_type, onembed, params.ostride, "
     "params.idist,",
     ["tests/test_cufft_emulated.py"],
     ["tests/test_fft_cuda.py -m gpu"]),
    ("callback wrapper stores real and imaginary parts swapped", "mathpy/jit/_device.py",
     "call_args.append(builder.extract_value(arg, 0))\n                call_args.append(builder.extract_value(arg, 1))",
     "call_args.append(builder.extract_value(arg, 1))\n                call_args.append(builder.extract_value(arg, 0))",
     ["tests/test_jit_wrapper_cpu.py"],
     ["tests/test_jit_gpu.py -m gpu", "tests/test_fft_callback_semantics.py -m gpu"]),
    # issue 22
    ("numpy.fft rules: normalize_axis returns the axis unreduced", "mathpy/host/fft/_numpy_rules.py",
     "    return axis % ndim\n", "    return axis\n",
     ["tests/test_fft_numpy.py -k negatively"], []),
    ("ifftshift is fftshift", "mathpy/host/fft/_freq.py",
     "    return _shift(x, axes, inverse=True)", "    return _shift(x, axes, inverse=False)",
     ["tests/test_fft_freq.py"], []),
    ("SciPy backend: s without axes sizes the first axes", "mathpy/host/fft/_scipy_backend.py",
     "tuple(range(-(1 if isinstance(s, int) else len(s)), 0))", "tuple(range(1 if isinstance(s, int) else len(s)))",
     ["tests/test_scipy_backend.py -k s_without_axes"], []),
    ("SciPy backend: workers=None is mathpy's default, not SciPy's", "mathpy/host/fft/_scipy_backend.py",
     "        return scipy.fft.get_workers()", "        return None",
     ["tests/test_scipy_backend.py -k workers"], []),
    ("float8: b converted to a's format", "mathpy/host/matmul/_layouts.py",
     "    if op.dtype in _FLOAT8 or product.operand is None:", "    if product.operand is None:",
     ["tests/test_matmul_float8_operands.py"], ["tests/test_matmul_float8_operands.py -m gpu"]),
    ("matmul out=: the result is not copied into out", "mathpy/host/matmul/_stateless.py",
     "    copy_into(out_op, d, handle)\n", "\n",
     ["tests/test_matmul_out.py"], ["tests/test_matmul_out.py -m gpu"]),
    ("matmul out=: the batch of out is not checked", "mathpy/host/matmul/_stateless.py",
     "    if broadcast != loop:", "    if False:",
     ["tests/test_matmul_out.py -k bad_out"], []),
    ("FFT on the CPU: no floating-point reports", "mathpy/host/fft/_call.py",
     "        check_floating_point(x, result, ufunc_name(t.fft_type, direction, t.n[-1]))\n", "\n",
     ["tests/test_fft_numpy.py -k floating_point"], []),
    ("FFT on the CPU: the norm factor as a complex multiply", "mathpy/host/fft/_call.py",
     "            scale_parts(result, self._scale_type(scale))", "            result *= self._scale_type(scale)",
     ["tests/test_fft_numpy.py -k floating_point"], []),
    ("numpy.fft rules: n=True taken as 1", "mathpy/host/fft/_numpy_rules.py",
     "    if isinstance(n, (bool, np.bool_)):", "    if False:",
     ["tests/test_fft_numpy.py -k 'bool_lengths or bad_arguments'"], []),
    ("compat nvmath: direction=None refused", "mathpy/compat/nvmath/fft.py",
     "    if direction is None:  # nvmath-python: the operand type's own direction",
     "    if False:",
     ["tests/test_compat_nvmath_fft.py -k direction_none"], []),
]

_COUNTS = re.compile(r"(\d+) (passed|failed|error|errors)\b")


def run(tests):
    """pytest over ``tests`` (each a node id, or a path followed by options, quoted as in a shell): "passed", "failed"
    (a test that ran failed), or "no test ran" (nothing collected, all skipped, or pytest could not start)."""
    import shlex
    outcome = "passed"
    for spec in tests:
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                 "-o", "addopts=", *shlex.split(spec)], cwd=ROOT, capture_output=True, text=True)
        lines = result.stdout.strip().splitlines()
        counts = {kind: int(number) for number, kind in _COUNTS.findall(lines[-1] if lines else "")}
        if result.returncode == 1 and (counts.get("failed") or counts.get("error") or counts.get("errors")):
            return "failed"  # a test (or its setup) that ran failed
        if result.returncode != 0 or not counts.get("passed"):
            outcome = "no test ran"
    return outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="also run the GPU tests of each mutation")
    parser.add_argument("-k", dest="select", default="", help="only the mutations whose name contains this")
    options = parser.parse_args()
    rows = [("mutation", "tests", "unmutated", "mutated")]
    for name, path, original, mutated, cpu_tests, gpu_tests in MUTATIONS:
        if options.select.lower() not in name.lower():
            continue
        tests = cpu_tests + (gpu_tests if options.gpu else [])
        file = ROOT / path
        text = file.read_text()
        if text.count(original) != 1:
            rows.append((name, "; ".join(tests), "mutation site not found", "-"))
            continue
        clean = run(tests)
        if clean != "passed":
            rows.append((name, "; ".join(tests), clean.upper(), "-"))
            continue
        try:
            file.write_text(text.replace(original, mutated))
            mutated_outcome = run(tests)
        finally:
            file.write_text(text)
        caught = {"failed": "caught (tests fail)", "passed": "NOT CAUGHT"}.get(mutated_outcome, mutated_outcome.upper())
        rows.append((name, "; ".join(tests), "pass", caught))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    return 0 if all(row[3].startswith("caught") for row in rows[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
