#!/usr/bin/env bash
# The README's run command: build, start the embedded local cluster (one pipecoord and three
# pipeld processes on loopback, CPU backend), make a random-weight Llama test model, submit a
# generation job with pipectl, print the generated token ids and the throughput, stop the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
B=$PWD/${PL_BUILD_DIR:-build}/bin
OUT=$PWD/out/demo
export PIPELD_COORDINATOR=tcp://127.0.0.1:5555   # the embedded default cluster's endpoint
mkdir -p "$OUT/logs" "$OUT/models"

if [ ! -f "$OUT/models/tiny/config.json" ]; then
    "$B/pl-mkmodel" --out "$OUT/models/tiny" --layers 8 --hidden 512 --intermediate 1376 \
        --heads 8 --kv-heads 4 --vocab 4096 --dtype bf16 --seed 1
fi
cp etc/job.yaml etc/prompts.jsonl "$OUT/"
# a model this small decodes fastest on one device (the default plan would say so); the demo is
# about the pipeline, so it asks for every node
sed -i 's/^planner: auto /planner: optimal/' "$OUT/job.yaml"

pids=()
cleanup() {
    "$B/pipectl" --timeout 2 shutdown >/dev/null 2>&1 || true
    sleep 0.5
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# the demo's own state database, fresh each run, so that its job is job 1 (a real cluster keeps
# one in the state directory: ids continue across restarts)
rm -f "$OUT"/coord.db "$OUT"/coord.db-wal "$OUT"/coord.db-shm "$OUT"/coord-specs.db*
"$B/pipecoord" --state-db "$OUT/coord.db" >"$OUT/logs/pipecoord.log" 2>&1 &
pids+=($!)
echo "demo: starting 3 daemons (logs in $OUT/logs)"
# one at a time: each daemon calibrates its device before registering, and three
# calibrations at once on a small machine would measure each other
registered() { "$B/pipectl" -o json nodes 2>/dev/null | grep -c '"state": "idle"' || true; }
i=0
for n in node0 node1 node2; do
    "$B/pipeld" --cluster - --name "$n" >"$OUT/logs/$n.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
    for _ in $(seq 150); do
        [ "$(registered)" -ge $i ] && break
        sleep 0.2
    done
done
"$B/pipectl" nodes
echo
"$B/pipectl" submit "$OUT/job.yaml" --wait | tee "$OUT/results.jsonl"
echo
"$B/pipectl" status 1
