#!/usr/bin/env bash
# bench_serve_batch: output tokens/s of one batch job whose sequences finish at different times
# (mixed prompt lengths, EOS at different steps) on a 2-stage local cluster of a 12-layer model,
# with stage 0 forming microbatches two ways: statically (sequence s in microbatch s mod M, the
# executor of BASE_BUILD, e.g. main before the batcher) and continuously (this build: the
# batcher refills lanes as sequences leave). Same prompts, same tokens (checked); the median of
# PL_BENCH_RUNS runs each (the two clusters' runs interleaved), and the ratio. The machine's reference beside it: the job's tokens/s
# on ONE stage with this build (no pipeline: nothing to refill).
#
# usage: bench/bench_serve_batch.sh BUILD_DIR BASE_BUILD_DIR
# env:   PL_BENCH_RUNS=N (default 3), PL_BENCH_SEQS (16), PL_BENCH_NEW_TOKENS (64),
#        PL_BENCH_KEEP=1 keep the work directory
set -euo pipefail
BENCH=bench_serve_batch
. "$(dirname "$0")/bench_lib.sh"

NEW=$(cd "${1:?build dir}/bin" && pwd)
OLD=$(cd "${2:?base build dir}/bin" && pwd)
RUNS=${PL_BENCH_RUNS:-3}
SEQS=${PL_BENCH_SEQS:-16}
NEW_TOKENS=${PL_BENCH_NEW_TOKENS:-64}
WORK=$(mktemp -d /tmp/pl-bench-serve-XXXXXX)
EP=
pids=()

eps=()
stop_cluster() {
    for e in "${eps[@]}"; do
        "$NEW/pipectl" -c "$e" --timeout 2 shutdown >/dev/null 2>&1 || true
    done
    [ "${#eps[@]}" -gt 0 ] && sleep 0.5
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    eps=()
    EP=
}
cleanup() {
    stop_cluster
    if [ "${PL_BENCH_KEEP:-0}" = 1 ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_cluster() { # BIN_DIR: sets B and EP, and adds EP to eps
    B=$1
    EP=
    mkdir -p "$WORK/logs"
    for _ in $(seq 20); do
        port=$((20000 + RANDOM % 40000))
        [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && continue
        "$B/pipecoord" --endpoint "tcp://127.0.0.1:$port" --state-db "$WORK/coord-$port.db" \
            >"$WORK/logs/pipecoord-$port.log" 2>&1 &
        local cpid=$!
        sleep 0.3
        if kill -0 "$cpid" 2>/dev/null; then
            pids+=("$cpid")
            EP="tcp://127.0.0.1:$port"
            eps+=("$EP")
            break
        fi
        wait "$cpid" 2>/dev/null || true
    done
    [ -n "$EP" ] || { echo "bench_serve_batch: no coordinator" >&2; exit 1; }
    for n in node0 node1; do
        "$B/pipeld" --name "$n" --coordinator "$EP" --threads 1 >"$WORK/logs/$n-$port.log" 2>&1 &
        pids+=($!)
    done
    bench_wait_idle 2 && return
    echo "bench_serve_batch: daemons did not register" >&2
    exit 1
}

job() { # NAME MODEL STAGES EOS(true|false)
    cat >"$WORK/$1.yaml" <<EOF
model: $2
prompts: $WORK/prompts.jsonl
max_new_tokens: $NEW_TOKENS
sampling:
  temperature: 0.0
microbatches: 2
stages: $3
planner: even
stop_at_eos: $4
EOF
}


# ---- the model; an EOS that greedy decoding reaches at different steps ----
"$NEW/pl-mkmodel" --out "$WORK/m" --layers 12 --hidden 512 --intermediate 1408 --heads 8 \
    --kv-heads 4 --vocab 4096 --dtype bf16 --seed 5 --max-pos 1024 >&2
python3 - "$WORK" "$SEQS" <<'PY'
import random, sys
w, n = sys.argv[1], int(sys.argv[2])
random.seed(3)
with open(w + "/prompts.jsonl", "w") as f:
    for i in range(n):
        L = random.choice([4, 8, 16, 48, 96, 160])
        f.write(str([random.randrange(3, 4096) for _ in range(L)]) + "\n")
PY
start_cluster "$NEW"
job probe "$WORK/m" 2 false
bench_run_job probe 900 >/dev/null
# the token whose first appearances are spread widest over the sequences' steps
EOS=$(python3 - "$WORK/probe.res" "$NEW_TOKENS" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["results"]
first = {}
for r in res:
    seen = set()
    for i, t in enumerate(r["tokens"]):
        if t not in seen:
            seen.add(t)
            first.setdefault(t, []).append(i)
best = max(first, key=lambda t: (len(first[t]) >= len(res) // 2) * (max(first[t]) - min(first[t]) + 1) * len(set(first[t])))
print(best)
PY
)
mkdir -p "$WORK/me"
ln -s "$WORK/m/model.safetensors" "$WORK/me/"
for f in "$WORK"/m/*; do
    case "$f" in *.safetensors) ;; *config.json) ;; *) ln -s "$f" "$WORK/me/" ;; esac
done
python3 - "$WORK/m/config.json" "$WORK/me/config.json" "$EOS" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
job mixed "$WORK/me" 2 true
job one "$WORK/me" 1 true
# Both clusters up at once, their runs interleaved, so that the load of the shared machine
# drifts over both alike.
NEW_EP=$EP
start_cluster "$OLD"
OLD_EP=$EP
declare -A RATE
for r in $(seq "$RUNS"); do
    for which in new old; do
        if [ "$which" = new ]; then B=$NEW EP=$NEW_EP; else B=$OLD EP=$OLD_EP; fi
        read -r rate n wall < <(bench_run_job mixed 900)
        echo "  $which run $r: $n tokens in $wall s: $rate tok/s" >&2
        cp "$WORK/mixed.res" "$WORK/$which.$r.res"
        RATE[$which.$r]=$rate
    done
done
B=$NEW EP=$NEW_EP
read -r one_rate one_n _ < <(bench_run_job one 900)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
new_m=$(median $(for r in $(seq "$RUNS"); do echo "${RATE[new.$r]}"; done))
old_m=$(median $(for r in $(seq "$RUNS"); do echo "${RATE[old.$r]}"; done))
python3 - "$WORK" "$RUNS" <<'PY'
import json, sys
w, runs = sys.argv[1], int(sys.argv[2])
ref = None
for which in ("new", "old"):
    for r in range(1, runs + 1):
        toks = [x["tokens"] for x in json.load(open("%s/%s.%d.res" % (w, which, r)))["results"]]
        ref = ref or toks
        if toks != ref:
            sys.exit("bench_serve_batch: %s run %d gave other tokens" % (which, r))
lens = sorted(len(t) for t in ref)
print("output lengths: min %d, median %d, max %d (EOS at different steps)" % (lens[0], lens[len(lens) // 2], lens[-1]))
PY
echo "EOS id $EOS; $SEQS sequences, prompts of 4..160 tokens, up to $NEW_TOKENS new tokens, 2 microbatches"
echo "measured under load (other engineers' builds and tests share this machine's 2 cores)"
printf '%-40s %12s\n' "stage 0 forms microbatches" "output tok/s"
printf '%-40s %12s\n' "statically (base build, s mod M)" "$old_m"
printf '%-40s %12s\n' "continuously (batcher, this build)" "$new_m"
printf '%-40s %12s\n' "ratio continuous / static" "$(awk -v a="$new_m" -v b="$old_m" 'BEGIN { printf "%.2f", a / b }')"
printf '%-40s %12s\n' "reference: one stage, this build" "$one_rate"
