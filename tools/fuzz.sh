#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz with clang (build-fuzz/, or $PL_FUZZ_BUILD_DIR) and
# run each for a bounded time ($PL_FUZZ_SECONDS, default 15) from its seed corpus
# tests/fuzz/corpus/<target>/ (read only: new inputs go to a scratch copy), libFuzzer's random
# seed from $PL_FUZZ_SEED (default 0: a new one each run; CI fixes one, so that each run tries
# the inputs the run before it tried, and a new crash is a change's, not the draw's). A crash, leak or
# timeout fails the run; the input that caused it is left in $PL_FUZZ_ARTIFACTS (default
# build-fuzz/artifacts/) -- minimize it (-minimize_crash=1), add it to the target's corpus, fix.
#   tools/fuzz.sh [TARGET...]           all targets, or the ones named
#   tools/fuzz.sh --update-corpus [T...] also merge what added coverage into the corpus
#                                        (libFuzzer -merge=1: only inputs that add coverage)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${PL_FUZZ_SECONDS:-15}
BUILD=${PL_FUZZ_BUILD_DIR:-build-fuzz}
ART=${PL_FUZZ_ARTIFACTS:-$BUILD/artifacts}
update=0
if [ "${1:-}" = "--update-corpus" ]; then
    update=1
    shift
fi
command -v clang >/dev/null || { echo "fuzz: clang is missing (apt-get install clang)" >&2; exit 1; }
# shellcheck disable=SC2086
CC=clang cmake -S . -B "$BUILD" -DPL_FUZZ=ON -DPL_WITH_CUDA=OFF -DPL_WITH_HIP=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo ${PL_FUZZ_CMAKE_ARGS:-} >/dev/null
if ! cmake --build "$BUILD" -j"$(nproc)" --target fuzz_all >"$BUILD/fuzz-build.log" 2>&1; then
    grep -v -E '^\[ *[0-9]+%\]' "$BUILD/fuzz-build.log" | tail -40 >&2
    echo "fuzz: the build failed ($BUILD/fuzz-build.log)" >&2
    exit 1
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
mkdir -p "$ART"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
    exe="$BUILD/bin/fuzz_$t"
    [ -x "$exe" ] || { echo "fuzz: no target $t ($exe)" >&2; failed+=("$t"); continue; }
    case "$t" in # keep what libFuzzer makes near the size of the seeds
        grant) max_len=64 ;;
        gguf|gpu_objects) max_len=65536 ;;
        ctl|coord_row) max_len=8192 ;;
        *) max_len=4096 ;;
    esac
    # the first input of these also loads real tokenizer files (megabytes of JSON, instrumented)
    # (about a minute of CPU under the sanitizers): they get that minute on top, and that input
    # up to 300 s (on a machine shared twenty ways it took over 120 s)
    case "$t" in
        chat_template|gen_job|tokenizer_encode) unit_timeout=300 total=$((SECONDS_EACH + 60)) ;;
        *) unit_timeout=10 total=$SECONDS_EACH ;;
    esac
    work="$scratch/$t"
    mkdir -p "$work"
    t0=$SECONDS
    if "$exe" -seed="${PL_FUZZ_SEED:-0}" -max_total_time="$total" -max_len="$max_len" \
        -timeout="$unit_timeout" -rss_limit_mb=2048 \
        -artifact_prefix="$ART/$t-" -print_final_stats=1 "$work" "tests/fuzz/corpus/$t" \
        >"$scratch/$t.log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" | grep -o '[0-9]*$' || echo '?')
        cov=$(grep -o 'cov: [0-9]*' "$scratch/$t.log" | tail -1 | grep -o '[0-9]*' || echo '?')
        echo "fuzz: $t: ok, $runs runs, coverage $cov, $((SECONDS - t0)) s"
    else
        echo "fuzz: $t: FAILED after $((SECONDS - t0)) s; the input is in $ART/:" >&2
        grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$scratch/$t.log" | head -20 >&2 || tail -20 "$scratch/$t.log" >&2
        failed+=("$t")
        continue
    fi
    if [ "$update" = 1 ]; then
        "$exe" -merge=1 -max_len="$max_len" "tests/fuzz/corpus/$t" "$work" >/dev/null 2>&1
        echo "fuzz: $t: corpus now $(ls "tests/fuzz/corpus/$t" | wc -l) files"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: failed: ${failed[*]}" >&2
    exit 1
fi
