#!/bin/sh
# Training jobs through the daemons (pipectl train on a local cluster, one pipeld per stage, 1
# thread each) beside the same shape trained in one process over UCX (bench_train_pipe, the
# reference): tokens/s per schedule on 1 and 2 stages and 2 replicas x 2 stages, and each
# stage's measured bubble. The model is bench_train_pipe's (6 layers, hidden 256, seq 64, 8
# microbatches a step). Usage: bench/bench_train_job.sh [BUILD_DIR] [STEPS]. The load average
# is printed before and after: on a shared machine the figures are "measured under load".
set -eu
build=$(cd "${1:-build}" && pwd)
steps=${2:-6}
bin="$build/bin"
for b in pipecoord pipeld pipectl pl-mkmodel bench_train_pipe; do
    [ -x "$bin/$b" ] || { echo "bench_train_job.sh: build $bin/$b first" >&2; exit 2; }
done
dir=$(mktemp -d /tmp/pl-bench-train-XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
export PIPELD_STATE_DIR="$dir/state" OPENBLAS_NUM_THREADS=1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ep="tcp://127.0.0.1:$port"
"$bin/pl-mkmodel" --out "$dir/m" --layers 6 --hidden 256 --intermediate 704 --heads 8 \
    --kv-heads 4 --vocab 512 >/dev/null
python3 -c "print(' '.join(str((i * 7 + 3) % 509) for i in range(20000)))" >"$dir/corpus.tok"
echo "machine: $(nproc) cores; loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/pipecoord" --endpoint "$ep" --state-db "$dir/coord.db" >"$dir/coord.log" 2>&1 &
pids="$pids $!"
for i in 0 1 2 3; do
    "$bin/pipeld" --name "node$i" --coordinator "$ep" --threads 1 >"$dir/node$i.log" 2>&1 &
    pids="$pids $!"
done
for _ in $(seq 100); do
    n=$("$bin/pipectl" -c "$ep" -o json nodes 2>/dev/null | grep -c '"state": "idle"' || true)
    [ "$n" -ge 4 ] && break
    sleep 0.2
done
printf '%-7s %-9s %-9s %10s  %s\n' stages replicas schedule "tok/s" "bubble per stage (measured)"
job=0
run() { # stages replicas schedule
    job=$((job + 1))
    cat >"$dir/t$job.yaml" <<EOF
model: m
data:
  tokens: corpus.tok
seq_len: 64
global_batch: 8
steps: $steps
schedule: $3
stages: $1
replicas: $2
EOF
    "$bin/pipectl" -c "$ep" --timeout 10 train "$dir/t$job.yaml" --wait >/dev/null 2>"$dir/t$job.err" ||
        { cat "$dir/t$job.err" >&2; return 1; }
    "$bin/pipectl" -c "$ep" -o json status "$job" | python3 -c '
import json, sys
t = json.load(sys.stdin)["train"]
b = " ".join("%.3f" % s["bubble"] for s in t["stages"])
print("%-7s %-9s %-9s %10.1f  %s" % (sys.argv[1], sys.argv[2], t["schedule"], t["tok_s"], b))' \
        "$1" "$2"
}
run 1 1 gpipe
for s in gpipe 1f1b zb-h1; do run 2 1 "$s"; done
run 2 2 1f1b
echo "reference: the same shape in one process, stages as threads over UCX (bench_train_pipe):"
"$bin/bench_train_pipe"
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
