#!/bin/sh
# bench_decode over every weight type on the small model and the ~1 B one, unattended: each run's
# tables (decode at batch 1/4/8 on 1 and 2 threads beside the best read, the kernel alone, where
# a batch-1 step goes, the pool's jobs and barrier waits, prefill beside sgemm), and the load
# average before each run.
# Usage: bench/bench_decode_all.sh [BUILD_DIR]. Environment: PL_BENCH_SMALL_TYPES,
# PL_BENCH_1B_TYPES (comma lists; empty skips the model; both default to every type, a few minutes
# each on the 1 B model), PL_BENCH_PREFILL (512; 0 skips it), PL_BENCH_CTX (a context, say 1024:
# one more batch-1 run per small-model type decoding from there, attention's share; default
# none), PL_BENCH_NICE (root: each run in a scheduler session of its own at this niceness, say
# -20, so that on a shared machine it gets its cores; default 0, as it is).
set -eu
build=${1:-build}
bin=$build/bin/bench_decode
[ -x "$bin" ] || { echo "bench_decode_all: no $bin (build first)" >&2; exit 2; }
small=${PL_BENCH_SMALL_TYPES-f32,bf16,q8_0,q4_k,q4_0,q5_k,q6_k}
big=${PL_BENCH_1B_TYPES-f32,bf16,q8_0,q4_k,q4_0,q5_k,q6_k}
prefill=${PL_BENCH_PREFILL:-512}
ctx=${PL_BENCH_CTX:-}
nice=${PL_BENCH_NICE:-0}

bench() { # bench_decode's arguments
    if [ "$nice" != 0 ]; then
        # with scheduler autogroups on, niceness counts only inside a session: a session of its
        # own, its autogroup at that niceness too
        setsid sh -c 'echo "$0" >/proc/$$/autogroup 2>/dev/null; exec nice -n "$0" "$@"' \
            "$nice" "$bin" "$@"
    else
        "$bin" "$@"
    fi
}

run() { # model type steps reps [more arguments]
    m=$1 t=$2 s=$3 r=$4
    shift 4
    echo "## bench_decode --model $m --dtype $t --steps $s --reps $r $* ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg), niceness $nice)"
    echo
    bench --model "$m" --dtype "$t" --steps "$s" --reps "$r" "$@" ||
        echo "bench_decode_all: $m $t failed" >&2
    echo
}

for t in $(echo "$small" | tr ',' ' '); do
    run small "$t" 16 3 --prefill "$prefill"
    if [ -n "$ctx" ]; then run small "$t" 16 3 --prefill 0 --ctx "$ctx"; fi
done
for t in $(echo "$big" | tr ',' ' '); do run 1b "$t" 4 2 --prefill "$prefill"; done
