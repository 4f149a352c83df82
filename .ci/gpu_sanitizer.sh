#!/usr/bin/env bash
# A sample of the GPU tests under compute-sanitizer (memcheck, then racecheck), for a GPU machine:
#   bash .ci/gpu_sanitizer.sh [output folder]
# Each tool's log goes to the folder (default: sanitizer-logs/); the script fails if a tool reports an error.
# The sample: cuFFT C2C/R2C/C2R with and without callbacks (engine and API), C2R callbacks, cuBLASLt epilogs.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${1:-sanitizer-logs}"
mkdir -p "$out"
sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
select="(c2c_prolog or r2c_epilog or c2r or in_place_c2c or user_data or epilog_matches)"
select="$select and not benchmark_size and not ten_thousand and not torch"
sample=(tests/test_fft_cuda.py tests/test_fft_callback_semantics.py tests/test_matmul_epilog.py -m gpu -k "$select")
status=0
for tool in memcheck racecheck; do
    echo "=== compute-sanitizer --tool $tool ==="
    start=$SECONDS
    "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 50 --log-file "$out/$tool.log" \
        python3 -m pytest -q -p no:cacheprovider -x "${sample[@]}" > "$out/$tool.pytest.log" 2>&1
    rc=$?
    tail -3 "$out/$tool.pytest.log"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/$tool.log" | tail -2
    echo "$tool: exit $rc after $((SECONDS - start)) s"
    [ "$rc" -eq 0 ] || status=1
done
exit $status
