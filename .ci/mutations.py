"""Mutation check: apply each mutation of the engines' logic that issue 12 names, run the tests meant to catch it, and
print a table (mutation, tests, caught or not). Run from the repository root with the `.[test]` extras installed:

    python .ci/mutations.py            # CPU tests (what CI runs)
    python .ci/mutations.py --gpu      # also the GPU tests listed for each mutation (on a GPU machine)

Each mutation is a one-line text substitution; the file is restored afterwards (also on Ctrl-C).
"""

import argparse
import pathlib
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
]


def run(tests):
    """pytest over ``tests`` (each a node id, or a path followed by options); True when it passed."""
    failed = False
    for spec in tests:
        args = spec.split()
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                 "-o", "addopts=", *args], cwd=ROOT, capture_output=True, text=True)
        if result.returncode not in (0, 5):
            failed = True
    return not failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="also run the GPU tests of each mutation")
    options = parser.parse_args()
    rows = [("mutation", "tests", "unmutated", "mutated")]
    for name, path, original, mutated, cpu_tests, gpu_tests in MUTATIONS:
        tests = cpu_tests + (gpu_tests if options.gpu else [])
        file = ROOT / path
        text = file.read_text()
        if text.count(original) != 1:
            rows.append((name, "; ".join(tests), "mutation site not found", "-"))
            continue
        clean = "pass" if run(tests) else "FAIL"
        try:
            file.write_text(text.replace(original, mutated))
            caught = "caught (tests fail)" if not run(tests) else "NOT CAUGHT"
        finally:
            file.write_text(text)
        rows.append((name, "; ".join(tests), clean, caught))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    return 0 if all(row[3].startswith("caught") for row in rows[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
