#!/usr/bin/env bash
# The README's test command (and CI's, through .ci/run), in four timed sections, all by default:
#   suite    install what is missing, build into build/, run the whole criterion suite
#   release  the daemons, pipectl and the tools (so every library source) built at -O3 with
#            -Werror (CMAKE_BUILD_TYPE=Release, build-release/): gcc's maybe-uninitialized
#            warnings show only there, and the sanitizers of the asan section hide them
#   asan     the suite built with ASan + UBSan into build-asan/ (-DPL_SANITIZE=ON), run but for
#            the suites s_asan names with their reasons
#   fuzz     every libFuzzer target of tests/fuzz for $PL_FUZZ_SECONDS (default 15) from its seed
#            corpus (tools/fuzz.sh; clang)
# PL_TEST_SECTIONS picks some (e.g. PL_TEST_SECTIONS=suite). Every section runs even when one
# before it failed (one CI run shows every failure); the exit status is the first failure's.
# Arguments go to the suites' ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
sections=${PL_TEST_SECTIONS:-suite release asan fuzz}
times=()
first_rc=0

s_section() { # NAME COMMAND...: run it, note its time and its failure
    local name=$1 t0=$SECONDS rc=0
    shift
    echo "test: == $name =="
    "$@" || rc=$?
    times+=("$name $((SECONDS - t0)) s$([ $rc = 0 ] || echo " FAILED")")
    echo "test: $name: $([ $rc = 0 ] && echo passed || echo "FAILED ($rc)") in $((SECONDS - t0)) s"
    if [ $rc != 0 ] && [ $first_rc = 0 ]; then
        first_rc=$rc
    fi
}

# (set -e does not hold inside a function called from `||`: every step returns its failure)
s_suite() {
    tools/setup.sh || return $?
    (cd "${PL_BUILD_DIR:-build}" && ctest --output-on-failure -j1 "$@")
}

s_release() {
    local log=build-release/build.log
    mkdir -p build-release
    # shellcheck disable=SC2086
    cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DPL_WITH_CUDA=OFF -DPL_WITH_HIP=OFF \
        >/dev/null || return $?
    if ! cmake --build build-release -j"$(nproc)" --target pipeld pipecoord pipectl pl-generate \
        pl-mkmodel pl-tokenize >"$log" 2>&1; then
        grep -v -E '^\[ *[0-9]+%\]' "$log" | tail -40 >&2
        echo "test: the Release build failed ($log)" >&2
        return 1
    fi
}

# Left out under the sanitizers, each for its reason (the suite section runs both):
#   test_gpu_objects  checks the GPU plugins' device code (nvcc/hipcc objects), which the asan
#                     tree does not build (CI=true makes it fail on a missing plugin)
#   test_plan_cluster asserts the measured stage times within 15% of the plan's and the link
#                     probe's latency: the plan calibrates on OpenBLAS and memory reads, which
#                     the sanitizers do not slow, while they slow our own kernels 2-5x, so the
#                     measured balance is the sanitizers', not the planner's
S_ASAN_SKIP='^(test_gpu_objects|test_plan_cluster)$'

s_asan() {
    PL_BUILD_DIR=build-asan \
        PL_CMAKE_ARGS="${PL_CMAKE_ARGS:-} -DPL_SANITIZE=ON -DPL_WITH_CUDA=OFF -DPL_WITH_HIP=OFF" \
        tools/setup.sh || return $?
    # leaks: the libraries under us (UCX, OpenBLAS, ZeroMQ) keep allocations to exit, so only
    # errors count here; the fuzz section's harnesses do check for leaks.
    (cd build-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure -j1 -E "$S_ASAN_SKIP" "$@")
}

# the tokenizer and chat template harnesses read the real tokenizer files of tests/js
s_fuzz() {
    PL_SETUP_NO_BUILD=1 tools/setup.sh || return $?
    tools/fuzz.sh
}

for s in $sections; do
    case "$s" in
        suite) s_section suite s_suite "$@" ;;
        release) s_section release s_release ;;
        asan) s_section asan s_asan "$@" ;;
        fuzz) s_section fuzz s_fuzz ;;
        *) echo "test: unknown section '$s' (suite, release, asan, fuzz)" >&2; exit 2 ;;
    esac
done
echo "test: times: ${times[*]}"
exit $first_rc
