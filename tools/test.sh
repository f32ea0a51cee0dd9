#!/usr/bin/env bash
# The README's test command (and CI's, through .ci/run), in three timed sections:
#   suite  install what is missing, build into build/, run the whole criterion suite
#   asan   the same suite built with ASan + UBSan into build-asan/ (-DPL_SANITIZE=ON; no GPU
#          plugins: test_gpu_objects checks those in the first section)
#   fuzz   every libFuzzer target of tests/fuzz for $PL_FUZZ_SECONDS (default 15) from its seed
#          corpus (tools/fuzz.sh; clang)
# PL_TEST_SECTIONS picks them; the default is the suite alone (the asan and fuzz sections have
# not yet run clean on a clean clone of everything merged: PL_TEST_SECTIONS="suite asan fuzz"
# runs all three). Arguments go to the suites' ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
sections=${PL_TEST_SECTIONS:-suite}
times=()

s_section() { # NAME COMMAND...: run it, note its time, stop at the first failure
    local name=$1 t0=$SECONDS rc=0
    shift
    echo "test: == $name =="
    "$@" || rc=$?
    times+=("$name $((SECONDS - t0)) s")
    echo "test: $name: $([ $rc = 0 ] && echo passed || echo "FAILED ($rc)") in $((SECONDS - t0)) s"
    if [ $rc != 0 ]; then
        echo "test: times: ${times[*]}"
        exit $rc
    fi
}

# (set -e does not hold inside a function called from `||`: every step returns its failure)
s_suite() {
    tools/setup.sh || return $?
    (cd "${PL_BUILD_DIR:-build}" && ctest --output-on-failure -j1 "$@")
}

s_asan() {
    PL_BUILD_DIR=build-asan \
        PL_CMAKE_ARGS="${PL_CMAKE_ARGS:-} -DPL_SANITIZE=ON -DPL_WITH_CUDA=OFF -DPL_WITH_HIP=OFF" \
        tools/setup.sh || return $?
    # leaks: the libraries under us (UCX, OpenBLAS, ZeroMQ) keep allocations to exit, so only
    # errors count here; the fuzz section's harnesses do check for leaks. Left out: the suites
    # whose assertions are about time, which the sanitizers' 2-5x slowdown breaks (the measured
    # stage times against the plan's, a Ctrl-C 3 s into a streamed job); the first section runs
    # them.
    (cd build-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure -j1 \
        -E '^(test_gpu_objects|test_plan_cluster|test_cluster_generate)$' "$@")
}

for s in $sections; do
    case "$s" in
        suite) s_section suite s_suite "$@" ;;
        asan) s_section asan s_asan "$@" ;;
        fuzz) s_section fuzz tools/fuzz.sh ;;
        *) echo "test: unknown section '$s' (suite, asan, fuzz)" >&2; exit 2 ;;
    esac
done
echo "test: times: ${times[*]}"
