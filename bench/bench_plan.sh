#!/usr/bin/env bash
# bench_plan: the heterogeneous planner on a local cluster of unequal CPU daemons. For each
# cluster shape: the planned job on calibration only (the first job), the planned job on the
# rates learned from it, and the even split; predicted beside measured job time, decode and
# prefill tokens/s, and each stage's compute (the largest error); measured speed-up of the plan
# over the even split. Unequal daemons on one machine: one CPU thread each, some slowed down
# with the node file's `slowdown` (testing only: the device idles (k-1) x each forward call).
#
# usage: bench/bench_plan.sh [BUILD_DIR]     (default: build; builds nothing)
# env:   PL_BENCH_KEEP=1      keep the work directory (logs, jobs, statuses)
#        PL_BENCH_SHAPES      cluster shapes, e.g. "1,2.5 1,2,4" (slowdowns per node, default)
#        PL_BENCH_SEQS, PL_BENCH_PROMPT_LEN, PL_BENCH_NEW_TOKENS   the job's shape
set -euo pipefail

BUILD=${1:-build}
if [ ! -d "$BUILD/bin" ]; then
    echo "bench_plan: no $BUILD/bin; build first (cmake --build $BUILD)" >&2
    exit 2
fi
B=$(cd "$BUILD/bin" && pwd)
for t in pipecoord pipeld pipectl pl-mkmodel; do
    [ -x "$B/$t" ] || { echo "bench_plan: $B/$t is missing; build it first" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench_plan: needs python3 to read JSON" >&2; exit 2; }

SHAPES=${PL_BENCH_SHAPES:-"1,2.5 1,2,4"}
SEQS=${PL_BENCH_SEQS:-4}
PROMPT_LEN=${PL_BENCH_PROMPT_LEN:-32}
NEW_TOKENS=${PL_BENCH_NEW_TOKENS:-32}
WORK=$(mktemp -d /tmp/pl-bench-plan-XXXXXX)
EP=
pids=()

stop_cluster() {
    if [ -n "$EP" ]; then
        "$B/pipectl" -c "$EP" --timeout 2 shutdown >/dev/null 2>&1 || true
        sleep 0.5
    fi
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    EP=
}
cleanup() {
    stop_cluster
    if [ "${PL_BENCH_KEEP:-0}" = 1 ]; then
        echo "bench_plan: work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- model (weights beyond the caches: decode is memory-bound) and prompts ----
"$B/pl-mkmodel" --out "$WORK/model" --layers 8 --hidden 512 --intermediate 1376 --heads 8 \
    --kv-heads 4 --vocab 2048 --seed 3 --max-pos 1024 >/dev/null
awk -v n="$SEQS" -v len="$PROMPT_LEN" 'BEGIN {
    srand(11)
    for (i = 0; i < n; i++) {
        line = "["
        for (j = 0; j < len; j++)
            line = line (j ? ", " : "") (3 + int(rand() * 2000))
        print line "]"
    }
}' >"$WORK/prompts.jsonl"
for planner in optimal even; do
    printf 'model: %s/model\nprompts: %s/prompts.jsonl\nmax_new_tokens: %d\nstop_at_eos: false\nplanner: %s\n' \
        "$WORK" "$WORK" "$NEW_TOKENS" "$planner" >"$WORK/$planner.yaml"
done

start_cluster() { # SLOWDOWNS (comma-separated, one per node)
    local port i=0 s
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    EP=tcp://127.0.0.1:$port
    "$B/pipecoord" --endpoint "$EP" --state-db "$WORK/coord.db" >"$WORK/pipecoord.log" 2>&1 &
    pids+=($!)
    for s in ${1//,/ }; do
        printf 'name: node%d\ncoordinator: %s\nslowdown: %s\n' "$i" "$EP" "$s" >"$WORK/node$i.yaml"
        "$B/pipeld" --config "$WORK/node$i.yaml" --threads 1 >"$WORK/node$i.log" 2>&1 &
        pids+=($!)
        i=$((i + 1))
    done
    for _ in $(seq 300); do
        n=$("$B/pipectl" -c "$EP" -o json nodes 2>/dev/null | grep -c '"state": "idle"' || true)
        [ "$n" -ge "$i" ] && return 0
        sleep 0.2
    done
    echo "bench_plan: the nodes did not register" >&2
    exit 1
}

# One row from a finished job's status: what the plan predicted beside what was measured.
row() { # SHAPE LABEL STATUS_JSON (OTHER: other work during the job)
    python3 - "$1" "$2" "$3" "$OTHER" <<'PY'
import json, sys
shape, label, path, other = sys.argv[1:5]
s = json.load(open(path))
p, t = s["plan"], s["throughput"]
split = "/".join("%s:%d" % (st["node"].replace("node", "n"), st["n_layers"]) for st in p["stages"])
worst = 0.0
for st, ps in zip(s["stages"], p["stages"]):
    x = st["stats"]
    pred = x["prefill_calls"] * ps["compute_prefill_s"] + x["decode_calls"] * ps["compute_decode_s"]
    err = x["compute_s"] / pred - 1
    worst = err if abs(err) > abs(worst) else worst
print("| %-9s | %-24s | %-16s | %7.3f | %7.3f | %7.1f | %7.1f | %7.1f | %7.1f | %+8.1f%% | %5s |" % (
    shape, label, split, p["job_time_s"], t["wall_s"], p["decode_tok_s"], t["decode_tok_s"],
    p["prefill_tok_s"], t["prefill_tok_s"], 100 * worst, other))
PY
}

# Busy jiffies of every CPU minus those of the cluster's processes: other work on the machine.
other_jiffies() {
    local busy ours=0 p
    busy=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat)
    for p in "${pids[@]}"; do
        ours=$((ours + $(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0)))
    done
    echo $((busy - ours))
}

run_job() { # NAME; JOB is its id; OTHER becomes the cores' worth of other work meanwhile
    local j0 j1 t0 t1
    j0=$(other_jiffies)
    t0=$(date +%s.%N)
    "$B/pipectl" -c "$EP" --timeout 10 submit "$WORK/$1.yaml" --wait >/dev/null 2>>"$WORK/pipectl.err"
    t1=$(date +%s.%N)
    j1=$(other_jiffies)
    OTHER=$(awk -v j="$((j1 - j0))" -v t0="$t0" -v t1="$t1" -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%.2f", j / hz / (t1 - t0)}')
    "$B/pipectl" -c "$EP" -o json status "$JOB" >"$WORK/status-$SHAPE_TAG-$JOB.json"
}

echo "bench_plan: $SEQS sequences x $PROMPT_LEN prompt tokens, $NEW_TOKENS new tokens; model 8 x 512" \
    "(f32 on the CPU backend, $(du -sh "$WORK/model" | cut -f1)); $(nproc) cores" >&2
echo
echo "| cluster   | job                      | split (node:layers) | pred s  | meas s  | pred dec| meas dec| pred pre| meas pre| stage err | other |"
echo "| --------- | ------------------------ | ---------------- | ------- | ------- | ------- | ------- | ------- | ------- | --------- | ----- |"
refs=()
speedups=()
for SHAPE in $SHAPES; do
    SHAPE_TAG=${SHAPE//,/_}
    start_cluster "$SHAPE"
    refs+=("$SHAPE: $("$B/pipectl" -c "$EP" -o json nodes | python3 -c '
import json, sys
print("; ".join("%s %.1f GFLOP/s %.1f GB/s" % (n["name"], n["devices"][0]["gflops"], n["devices"][0]["mem_gbps"])
                for n in json.load(sys.stdin)["nodes"] if n["devices"]))')")
    JOB=1; run_job optimal; row "$SHAPE" "optimal, calibration" "$WORK/status-$SHAPE_TAG-1.json"
    JOB=2; run_job optimal; row "$SHAPE" "optimal, learned" "$WORK/status-$SHAPE_TAG-2.json"
    JOB=3; run_job even; row "$SHAPE" "even split" "$WORK/status-$SHAPE_TAG-3.json"
    JOB=4; run_job optimal; row "$SHAPE" "optimal, learned (again)" "$WORK/status-$SHAPE_TAG-4.json"
    speedups+=("$(python3 - "$WORK" "$SHAPE_TAG" <<'PY'
import json, sys
w, tag = sys.argv[1:3]
st = lambda j: json.load(open("%s/status-%s-%d.json" % (w, tag, j)))
opt = (st(2)["throughput"]["wall_s"] + st(4)["throughput"]["wall_s"]) / 2
even = st(3)["throughput"]["wall_s"]
print("%s: measured %.2fx over the even split (%.3f s vs %.3f s, plan jobs 2 and 4 averaged); "
      "predicted %.2fx" % (tag.replace("_", ","), even / opt, opt, even,
                          st(3)["plan"]["job_time_s"] / st(2)["plan"]["job_time_s"]))
PY
)")
    stop_cluster
done
echo
echo "slowdowns per node in the cluster column; pred/meas s: the job (plan.job_time_s / measured"
echo "wall of the last stage); dec/pre: tokens/s; stage err: the stage whose measured compute"
echo "differs most from calls x the predicted compute per call; other: cores' worth of other"
echo "work on the machine during the job (not the cluster's processes; a loaded machine skews"
echo "every measured figure)."
for s in "${speedups[@]}"; do echo "$s"; done
echo "calibration (the daemons' own sgemm GFLOP/s and read GB/s, slowdown applied):"
for r in "${refs[@]}"; do echo "  $r"; done
