#!/bin/sh
# bench_decode over every weight type on the small model and the ~1 B one, unattended: each run's
# tables (decode at batch 1/4/8 on 1 and 2 threads beside the best read, the kernel alone, the
# pool's per-job cost, prefill beside sgemm), and the load average before each run.
# Usage: bench/bench_decode_all.sh [BUILD_DIR]. Environment: PL_BENCH_SMALL_TYPES,
# PL_BENCH_1B_TYPES (comma lists; empty skips the model; both default to every type, a few minutes
# each on the 1 B model), PL_BENCH_PREFILL (512; 0 skips it).
set -eu
build=${1:-build}
bin=$build/bin/bench_decode
[ -x "$bin" ] || { echo "bench_decode_all: no $bin (build first)" >&2; exit 2; }
small=${PL_BENCH_SMALL_TYPES-f32,bf16,q8_0,q4_k,q4_0,q5_k,q6_k}
big=${PL_BENCH_1B_TYPES-f32,bf16,q8_0,q4_k,q4_0,q5_k,q6_k}
prefill=${PL_BENCH_PREFILL:-512}

run() { # model type steps reps
    echo "## bench_decode --model $1 --dtype $2 ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
    echo
    "$bin" --model "$1" --dtype "$2" --steps "$3" --reps "$4" --prefill "$prefill" ||
        echo "bench_decode_all: $1 $2 failed" >&2
    echo
}

for t in $(echo "$small" | tr ',' ' '); do run small "$t" 16 3; done
for t in $(echo "$big" | tr ',' ' '); do run 1b "$t" 4 2; done
