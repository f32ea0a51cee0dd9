#!/usr/bin/env bash
# bench_trace: what tracing costs a pipeline. The same 3-stage decode job on a local cluster (one
# pipecoord, three pipeld with one CPU thread each) with `trace: true` and `trace: false`, runs
# interleaved (on, off, on, off, ...) so drift hits both alike; the median tokens/s of each, their
# ratio, and beside them the machine's own references: the spread of the untraced runs (the
# noise floor) and the cost the events should have (events of a run x the ns of one traced
# interval from bench_trace_ring, over the stages' compute time). The plan is fixed (even split,
# 3 microbatches): the planner learns from finished jobs, and both settings must run one plan.
#
# usage: bench/bench_trace.sh [BUILD_DIR]     (default: build; builds nothing)
# env:   PL_BENCH_RUNS=N          runs of each setting (default 5)
#        PL_BENCH_SEQS, PL_BENCH_NEW_TOKENS   the job's shape (12 sequences, 48 new tokens)
#        PL_BENCH_KEEP=1          keep the work directory
set -euo pipefail

BUILD=${1:-build}
B=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "bench_trace: no $BUILD/bin; build first" >&2; exit 2; }
for t in pipecoord pipeld pipectl pl-mkmodel bench_trace_ring; do
    [ -x "$B/$t" ] || { echo "bench_trace: $B/$t is missing; build it first" >&2; exit 2; }
done
RUNS=${PL_BENCH_RUNS:-5}
SEQS=${PL_BENCH_SEQS:-12}
NEW=${PL_BENCH_NEW_TOKENS:-48}
WORK=$(mktemp -d /tmp/pl-bench-trace-XXXXXX)
export PIPELD_STATE_DIR=$WORK/state
EP=
pids=()

cleanup() {
    [ -n "$EP" ] && { "$B/pipectl" -c "$EP" --timeout 2 shutdown >/dev/null 2>&1 || true; sleep 0.5; }
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "${PL_BENCH_KEEP:-0}" = 1 ]; then echo "bench_trace: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$B/pl-mkmodel" --out "$WORK/model" --layers 6 --hidden 512 --intermediate 1408 --heads 8 \
    --kv-heads 4 --vocab 4096 --seed 1 --max-pos 512 >&2
awk -v n="$SEQS" 'BEGIN { srand(7); for (i = 0; i < n; i++) { l = "["
    for (j = 0; j < 8; j++) l = l (j ? ", " : "") (3 + int(rand() * 4000)); print l "]" } }' \
    >"$WORK/prompts.jsonl"
for tr in true false; do
    cat >"$WORK/$tr.yaml" <<EOF
model: $WORK/model
prompts: prompts.jsonl
max_new_tokens: $NEW
stop_at_eos: false
stages: 3
microbatches: 3
planner: even
trace: $tr
EOF
done

mkdir -p "$WORK/logs"
for _ in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && continue
    "$B/pipecoord" --endpoint "tcp://127.0.0.1:$port" --state-db "$WORK/coord.db" \
        >"$WORK/logs/pipecoord.log" 2>&1 &
    cpid=$!
    sleep 0.3
    if kill -0 "$cpid" 2>/dev/null; then pids+=("$cpid"); EP="tcp://127.0.0.1:$port"; break; fi
    wait "$cpid" 2>/dev/null || true
done
[ -n "$EP" ] || { echo "bench_trace: pipecoord did not start" >&2; exit 1; }
for n in node0 node1 node2; do
    "$B/pipeld" --name "$n" --coordinator "$EP" --threads 1 >"$WORK/logs/$n.log" 2>&1 &
    pids+=($!)
done
up=0
for _ in $(seq 100); do
    up=$("$B/pipectl" -c "$EP" -o json nodes 2>/dev/null | grep -c '"state": "idle"' || true)
    [ "$up" -ge 3 ] && break
    sleep 0.2
done
[ "$up" -ge 3 ] || { echo "bench_trace: only $up of 3 daemons registered" >&2; exit 1; }

# The number KEY in the top-level "throughput" object of a `pipectl -o json status` file.
tput() { sed -n '/^  "throughput": {/,/^  }/p' "$1" |
    sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p" | head -n 1; }
# The sum of every stage's compute_s.
compute() { sed -n 's/^ *"compute_s": *\([-0-9.eE+]*\),\{0,1\}$/\1/p' "$1" | awk '{ s += $1 } END { print s }'; }

run() { # SETTING RUN
    local f="$WORK/$1.$2"
    "$B/pipectl" -c "$EP" submit "$WORK/$1.yaml" --wait >"$f.out" 2>"$f.err" ||
        { echo "bench_trace: job failed:" >&2; cat "$f.err" >&2; exit 1; }
    local id
    id=$(sed -n 's/^job \([0-9]*\) submitted$/\1/p' "$f.err" | head -n 1)
    "$B/pipectl" -c "$EP" -o json status "$id" >"$f.json"
    if [ "$1" = true ]; then
        "$B/pipectl" -c "$EP" trace "$id" -o "$f.trace.json" 2>"$f.trace.err"
    fi
    echo "  trace $1, run $2: job $id, $(tput "$f.json" decode_tok_s) decode tok/s" >&2
}

run true 0 # warm-up (page cache, calibration effects), not counted
run false 0
for r in $(seq "$RUNS"); do run true "$r"; run false "$r"; done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
col() { for r in $(seq "$RUNS"); do tput "$WORK/$1.$r.json" "$2"; done; }
d_on=$(col true decode_tok_s | median); d_off=$(col false decode_tok_s | median)
o_on=$(col true tok_s | median); o_off=$(col false tok_s | median)
off_min=$(col false decode_tok_s | sort -g | head -n 1); off_max=$(col false decode_tok_s | sort -g | tail -n 1)
events=$(for r in $(seq "$RUNS"); do sed -n 's/.* \([0-9]*\) events .*/\1/p' "$WORK/true.$r.trace.err"; done | median)
comp=$(for r in $(seq "$RUNS"); do compute "$WORK/true.$r.json"; done | median)
ring=$("$B/bench_trace_ring" 2000000)
ev_ns=$(echo "$ring" | sed -n 's/^| one traced interval[^|]*| *\([0-9.]*\) .*/\1/p')
clk_ns=$(echo "$ring" | sed -n 's/^| reference: one CLOCK[^|]*| *\([0-9.]*\) .*/\1/p')

read -r l1 l2 l3 _ </proc/loadavg
echo "machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $l1 $l2 $l3"
if awk -v l="$l1" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    echo "measured under load: other work shares this machine; the spread below is the noise"
fi
echo "job: 3 stages (even split), 3 microbatches, $SEQS sequences x $NEW new tokens (greedy), $RUNS runs per setting, interleaved"
echo
echo "| | trace: true | trace: false | ratio on/off | reference |"
echo "| --- | ---: | ---: | ---: | --- |"
printf '| decode tok/s (median) | %.1f | %.1f | %.3f | untraced runs spread %.1f..%.1f (%.1f%%) |\n' \
    "$d_on" "$d_off" "$(awk -v a="$d_on" -v b="$d_off" 'BEGIN { print a / b }')" "$off_min" \
    "$off_max" "$(awk -v a="$off_min" -v b="$off_max" -v m="$d_off" 'BEGIN { print 100 * (b - a) / m }')"
printf '| overall tok/s (median) | %.1f | %.1f | %.3f | |\n' "$o_on" "$o_off" \
    "$(awk -v a="$o_on" -v b="$o_off" 'BEGIN { print a / b }')"
printf '| events of a run, all stages | %s | 0 | | one traced interval %s ns = %.1f clock reads of %s ns (bench_trace_ring) |\n' \
    "$events" "$ev_ns" "$(awk -v a="$ev_ns" -v b="$clk_ns" 'BEGIN { print a / b }')" "$clk_ns"
printf '| expected cost: events x interval / compute | %.4f%% | | | of %.3f s compute, all stages |\n' \
    "$(awk -v e="$events" -v n="$ev_ns" -v c="$comp" 'BEGIN { print 100 * e * n * 1e-9 / c }')" "$comp"
echo
echo "target (issue 12): tracing costs < 2% of throughput, so it is on by default"
