#!/usr/bin/env bash
# bench_pipeline_sweep: where decode pipelining pays. The decode job of bench_pipeline.sh on 1 and
# 2 stages for several batches (sequences) and stored weight types, one table: measured tok/s and
# ratio beside the ratio the weight passes allow (a stage reads its weights once per microbatch
# per step) and the ratio the memory traffic allows at the measured bandwidth.
#
# Last, the same decode job on a model far past the caches (PL_BENCH_LAYERS=48: 1.2 GB of bf16
# weights against the 300 MB L3), where a step's time is its memory traffic and the traffic's
# ratio is the bound a pipeline cannot pass (bench/README.md).
#
# usage: bench/bench_pipeline_sweep.sh [BUILD_DIR]     (default: build; builds nothing)
# env:   PL_BENCH_SWEEP_SEQS="12 24 48"    batches of the decode job
#        PL_BENCH_SWEEP_DTYPES="bf16 q8_0"  stored weights (PL_BENCH_DTYPE of bench_pipeline.sh)
#        PL_BENCH_SWEEP_BIG="48 12 1"      the large model's layers, sequences and runs ("": skip)
#        and bench_pipeline.sh's own (PL_BENCH_RUNS, PL_BENCH_NICE, PL_BENCH_NEW_TOKENS, ...)
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
SEQS_LIST=${PL_BENCH_SWEEP_SEQS:-12 24 48}
DTYPES=${PL_BENCH_SWEEP_DTYPES:-bf16 q8_0}
OUT=$(mktemp -d /tmp/pl-bench-sweep-XXXXXX)
trap 'rm -rf "$OUT"' EXIT

BIG=${PL_BENCH_SWEEP_BIG-48 12 1}

rows=()
cases=()
for dt in $DTYPES; do
    for n in $SEQS_LIST; do
        cases+=("$dt $n 12 ${PL_BENCH_RUNS:-3}")
    done
done
[ -n "$BIG" ] && { read -r bl bn br <<<"$BIG"; cases+=("bf16 $bn $bl $br"); }
for c in "${cases[@]}"; do
    read -r dt n layers runs <<<"$c"
    f="$OUT/$dt-$n-$layers.txt"
    name=$dt
    [ "$layers" != 12 ] && name="$dt, $layers layers"
    {
        echo "bench_pipeline_sweep: $name weights, $n sequences" >&2
        if ! PL_BENCH_DTYPE=$dt PL_BENCH_SEQS=$n PL_BENCH_LAYERS=$layers PL_BENCH_RUNS=$runs \
            PL_BENCH_JOBS=decode PL_BENCH_STAGES="1 2" PL_BENCH_PAIRED=0 \
            "$HERE/bench_pipeline.sh" "$BUILD" >"$f" 2>"$f.err"; then
            echo "bench_pipeline_sweep: $name, $n sequences failed:" >&2
            tail -n 20 "$f.err" >&2
            exit 1
        fi
        dt=$name
        # the ceiling table's rows (see bench_pipeline.sh): stage count, M, ..., ratios
        r1=$(grep -m 1 '^| 1 stage(s) |' "$f" || true)
        r2=$(grep -m 1 '^| 2 stage(s) |' "$f" || true)
        rows+=("$(awk -F'|' -v dt="$dt" -v n="$n" -v a="$r1" -v b="$r2" 'BEGIN {
            split(a, x, "|"); split(b, y, "|")
            for (i = 3; i <= 11; i++) { gsub(/ /, "", x[i]); gsub(/ /, "", y[i]) }
            printf "| %s | %d | %s | %s | %s | %s | %s | %s |", dt, n, x[10], y[10], y[3], y[11],
                y[9], y[8] }')")
        [ -z "${mem:-}" ] && mem=$(grep -m 1 '^memory read bandwidth' "$f" || true)
        load=$(grep -m 1 '^machine:' "$f" | sed 's/.*load average/load average/')
        others=$(grep -m 1 '^other processes' "$f" || true)
        echo "  $load; $others" >&2
    }
done
echo "decode on 1 and 2 stages by batch and stored weights ($(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "${mem:-memory read bandwidth: not measured}"
echo
echo "| weights | sequences | 1 stage tok/s | 2 stages tok/s | microbatches | measured ratio | ratio the weight passes allow | ratio the traffic allows |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
