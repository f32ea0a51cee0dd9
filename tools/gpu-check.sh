#!/usr/bin/env bash
# gpu-check.sh: the CUDA backend's checks and benchmarks for a session that has a GPU machine.
#
#   tools/gpu-check.sh prepare   on the build machine: Release build for sm_90 in build-gpu, the
#                                binaries copied to .gpucheck/ and their libraries to .devlibs/
#                                (both git-ignored through .git/info/exclude); carry both.
#   tools/gpu-check.sh [run]     on the GPU machine, from the repository root, with
#                                LD_LIBRARY_PATH=$PWD/.devlibs:/usr/local/cuda/lib64:...
#                                Writes summary.txt, env.txt, unit.log, parity.log, bench.txt and
#                                torch.txt under $OUT (at most 8 files come back).
#
# Environment: OUT (default ./out), PL_GPU_BIN (default .gpucheck/bin), MODELS (scratch
# directory for generated models, default /tmp/pl-models), QUICK=1 skips the 1B-parameter
# benchmark model. Exit status: 0 when every check passed, 1 otherwise.
set -uo pipefail

MODE=${1:-run}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

prepare() {
    local build=${BUILD:-build-gpu} archs=${CUDA_ARCHS:-90}
    local targets="pipeld_be_cuda pl-cuda-parity pl-cuda-bench pl-mkmodel test_cuda_host
                   pipecoord pipeld pipectl pl-generate"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" \
        -DPL_WITH_CUDA=ON -DPL_WITH_HIP=OFF -DPL_WERROR=OFF || return 1  # CI checks warnings
    # shellcheck disable=SC2086
    cmake --build "$build" -j"$(nproc)" --target $targets || return 1
    for d in /.gpucheck/ /.devlibs/; do
        grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
    done
    rm -rf .gpucheck && mkdir -p .gpucheck/bin .gpucheck/lib
    cp "$build"/bin/{pl-cuda-parity,pl-cuda-bench,pl-mkmodel,test_cuda_host} .gpucheck/bin/
    cp "$build"/bin/{pipecoord,pipeld,pipectl,pl-generate} .gpucheck/bin/
    cp "$build"/lib/libpipeld_be_cuda.so .gpucheck/lib/
    strip --strip-debug .gpucheck/bin/* .gpucheck/lib/*
    "$ROOT/../shared/device/bundle-libs" .devlibs .gpucheck/bin/* .gpucheck/lib/* || return 1
    du -sh .gpucheck .devlibs
    echo "carry: [\".gpucheck\", \".devlibs\"]; run: tools/gpu-check.sh run"
}

if [ "$MODE" = prepare ]; then
    prepare
    exit $?
elif [ "$MODE" != run ]; then
    echo "usage: $0 [prepare|run]" >&2
    exit 2
fi

OUT=${OUT:-$ROOT/out}
BIN=${PL_GPU_BIN:-$ROOT/.gpucheck/bin}
LIB=$BIN/../lib
MODELS=${MODELS:-/tmp/pl-models}
QUICK=${QUICK:-0}
PROMPT=1,2,3,4,5,6,7
mkdir -p "$OUT" "$MODELS"
failed=0

say() { echo "[gpu-check $(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

# run NAME LOGFILE CMD...: append the command's output to LOGFILE, record its status.
run() {
    local name=$1 logf=$2
    shift 2
    say "$name: $*"
    echo "### $name: $*" >> "$logf"
    local t0=$SECONDS
    "$@" >> "$logf" 2>&1
    local rc=$?
    say "$name: exit $rc after $((SECONDS - t0)) s"
    grep -E '^# parity:' "$logf" | tail -1 | tee -a "$OUT/summary.txt" >/dev/null
    [ $rc -eq 0 ] || failed=1
    return $rc
}

mkmodel() { # NAME ARGS...: generate once into $MODELS/NAME
    local name=$1
    shift
    [ -f "$MODELS/$name/config.json" ] && return 0
    run "mkmodel $name" "$OUT/env.txt" "$BIN/pl-mkmodel" --out "$MODELS/$name" "$@"
}

for f in "$BIN/pl-cuda-parity" "$BIN/pl-cuda-bench" "$BIN/pl-mkmodel" "$LIB/libpipeld_be_cuda.so"
do
    [ -e "$f" ] || { say "missing $f: run '$0 prepare' on the build machine and carry it"; exit 1; }
done

{
    echo "### environment"
    date -u
    uname -a
    nvidia-smi 2>&1 | head -20
    nvcc --version 2>&1 | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    ldd "$LIB/libpipeld_be_cuda.so"
} >> "$OUT/env.txt" 2>&1

# 1. host-side unit tests, here with a device (the plugin must probe it)
if [ -x "$BIN/test_cuda_host" ]; then
    run "unit tests" "$OUT/unit.log" env PL_BIN_DIR="$BIN" "$BIN/test_cuda_host" --jobs=4 --verbose
fi

# 2. small random models: f32 (exact generation), llama3 rope with head_dim 128, tied bf16, f16
mkmodel f32 --layers 3 --hidden 256 --heads 8 --kv-heads 2 --intermediate 688 --vocab 512 \
    --dtype f32 --seed 1
mkmodel f32-hd128 --layers 2 --hidden 512 --heads 4 --kv-heads 2 --intermediate 1024 \
    --vocab 1000 --dtype f32 --rope-llama3 --max-pos 8192 --seed 2
mkmodel bf16 --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1376 --vocab 2048 \
    --dtype bf16 --tie --seed 3
mkmodel f16 --layers 3 --hidden 384 --heads 6 --kv-heads 3 --intermediate 1024 --vocab 1000 \
    --dtype f16 --seed 4

# 3. parity: per op, whole stages against the CPU backend, greedy generation, the plugin itself
P=$OUT/parity.log
run "parity ops" "$P" "$BIN/pl-cuda-parity"
run "parity f32 stages" "$P" "$BIN/pl-cuda-parity" --no-ops --exact --gen 24 \
    --prompt-ids "$PROMPT" --model "$MODELS/f32" --model "$MODELS/f32-hd128"
run "parity f16/bf16 stages" "$P" "$BIN/pl-cuda-parity" --no-ops --gen 24 \
    --model "$MODELS/bf16" --model "$MODELS/f16"
run "parity via plugin" "$P" "$BIN/pl-cuda-parity" --no-ops --exact --gen 8 \
    --plugin "$LIB/libpipeld_be_cuda.so" --model "$MODELS/f32"

# 4b. a mixed pipeline: one daemon on the GPU, one on the CPU, on this machine; its tokens must
#     equal the single-process CPU run of the same f32 model (greedy)
mixed_job() {
    local dir=$MODELS/mixed ep=tcp://127.0.0.1:5655 rc=0 pids=()
    rm -f "$dir/coord.db" "$dir/coord.db-wal" "$dir/coord.db-shm" # its job is job 1
    mkdir -p "$dir"
    printf '[1, 15, 27, 99]\n[1, 7]\n[1, 100, 101, 102, 103, 104, 105]\n[3, 42, 42]\n' \
        > "$dir/prompts.jsonl"
    printf 'model: %s\nprompts: prompts.jsonl\nmax_new_tokens: 24\nstages: 2\n' \
        "$MODELS/f32" > "$dir/job.yaml"
    "$BIN/pl-generate" "$dir/job.yaml" > "$dir/reference.jsonl" || return 1
    PIPELD_PLUGIN_DIR=$LIB "$BIN/pipecoord" --endpoint $ep --state-db "$dir/coord.db" > "$dir/coord.log" 2>&1 & pids+=($!)
    PIPELD_PLUGIN_DIR=$LIB "$BIN/pipeld" --name gpu0 --coordinator $ep --devices cuda \
        > "$dir/gpu0.log" 2>&1 & pids+=($!)
    PIPELD_PLUGIN_DIR=$LIB "$BIN/pipeld" --name cpu0 --coordinator $ep --devices cpu \
        --threads 4 > "$dir/cpu0.log" 2>&1 & pids+=($!)
    sleep 5
    "$BIN/pipectl" -c $ep nodes
    "$BIN/pipectl" -c $ep --timeout 30 submit "$dir/job.yaml" --wait > "$dir/got.jsonl" || rc=1
    "$BIN/pipectl" -c $ep status 1
    "$BIN/pipectl" -c $ep shutdown >/dev/null 2>&1
    sleep 1
    kill "${pids[@]}" 2>/dev/null
    tail -n 5 "$dir"/*.log
    if [ $rc = 0 ] && cmp -s "$dir/reference.jsonl" "$dir/got.jsonl"; then
        echo "# mixed pipeline: cuda + cpu stages equal the single-process cpu run"
    else
        echo "# mixed pipeline: DIFFERS or failed"; diff "$dir/reference.jsonl" "$dir/got.jsonl"
        return 1
    fi
}
run "mixed cuda+cpu pipeline" "$P" mixed_job

# 4. the same greedy generation in PyTorch (reported, not a pass/fail: another implementation)
T=$OUT/torch.txt
if run "torch generation" "$T" python3 bench/torch_reference.py --model "$MODELS/f32" \
    --dtype f32 --gen 24 --prompt-ids "$PROMPT"; then
    ours=$(grep -m1 '^GEN gpu:' "$P" | cut -d: -f2)
    theirs=$(grep -m1 '^GEN torch:' "$T" | cut -d: -f2)
    if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then
        say "torch generation: identical to pl-cuda-parity's gpu generation"
    else
        say "torch generation differs: gpu:$ours torch:$theirs"
    fi
fi

# 5. benchmarks on a Llama-3.2-1B-shaped bf16 model, ours then PyTorch eager on the same jobs
if [ "$QUICK" != 1 ]; then
    mkmodel 1b-bf16 --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 \
        --vocab 128256 --dtype bf16 --tie --rope-llama3 --max-pos 131072 --seed 5
    B=$OUT/bench.txt
    run "bench" "$B" "$BIN/pl-cuda-bench" --model "$MODELS/1b-bf16"
    run "bench builtin gemm" "$B" "$BIN/pl-cuda-bench" --model "$MODELS/1b-bf16" --builtin \
        --batches 1,8 --steps 32
    run "torch bench" "$T" python3 bench/torch_reference.py --model "$MODELS/1b-bf16" --bench
fi

say "done: $([ $failed = 0 ] && echo 'all passed' || echo 'FAILURES, see the logs')"
exit $failed
