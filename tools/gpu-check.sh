#!/usr/bin/env bash
# gpu-check.sh: the CUDA backend's checks and benchmarks for a session that has a GPU machine:
# prepare a small self-contained bundle here, run it there under a time limit.
#
#   tools/gpu-check.sh prepare   on the build machine, in the checkout the device tool sends: a
#                                Release build for sm_90 in build-gpu; the programs, the plugin
#                                and the libraries the GPU machine lacks (OpenBLAS, ZeroMQ, UCX
#                                without its InfiniBand modules, libyaml, jansson; not glibc,
#                                libstdc++ or CUDA's) packed into .gpucheck/bundle.tar.xz. It
#                                checks that every carried binary's libraries resolve inside the
#                                bundle and prints the size. Carry [".gpucheck"] (git-ignored).
#   tools/gpu-check.sh [run]     on the GPU machine, from the repository root: unpacks the bundle
#                                to $PL_GPU_DIR (/tmp/pl-gpucheck), sets its own LD_LIBRARY_PATH
#                                and UCX_MODULE_DIR, fails at once when ldd finds a library "not
#                                found" or cuBLAS is not loadable, then runs each step under
#                                `timeout` inside an overall DEADLINE (seconds, default 540).
#                                Writes summary.txt, env.txt, parity.log, mixed.log, torch.txt and
#                                bench.txt under $OUT (6 of the 8 files that come back).
#
# Environment: OUT (default ./out), MODELS (generated models, default /tmp/pl-models), QUICK=1
# (no 1B-parameter model: parity, mixed pipeline and PyTorch generation only), ONLY=bench (the
# 1B-model benchmarks alone, for a second run after the checks passed), DEADLINE,
# EXPECT_CUBLAS=0 (accept the built-in GEMM). Exit status 0 when every step passed.
set -uo pipefail

MODE=${1:-run}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

PROGS="pl-cuda-parity pl-cuda-bench pl-mkmodel pipecoord pipeld pipectl pl-generate"
PLUGIN=libpipeld_be_cuda.so
# Provided by the GPU machine itself: glibc, the compiler runtimes and the CUDA libraries.
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnvidia)'
UCX_MODULES=/usr/lib/x86_64-linux-gnu/ucx
UCX_KEEP='^libuct_cma\.so\.0$' # no InfiniBand there: libuct_ib and libuct_rdmacm stay behind

# elf_libs FILE: "name path" for each library the loader resolves for FILE (path may be "not").
elf_libs() {
    ldd "$1" 2>/dev/null | awk '$2 == "=>" {print $1, ($3 == "not" ? "not-found" : $3)}'
}

# check_resolved DIR: every ELF under DIR/bin and DIR/lib finds each of its libraries, and each
# one that is not the system's comes from DIR/lib. Prints the offenders; status 1 if any.
check_resolved() {
    local dir=$1 bad=0 f name path
    for f in "$dir"/bin/* "$dir"/lib/*.so* "$dir"/lib/ucx/*.so*; do
        [ -f "$f" ] || continue
        while read -r name path; do
            if [ "$path" = not-found ]; then
                echo "gpu-check: $f: $name not found" >&2
                bad=1
            elif ! [[ $name =~ $SYSTEM_LIBS ]] && [[ $path != "$dir"/lib/* ]]; then
                echo "gpu-check: $f: $name resolves outside the bundle ($path)" >&2
                bad=1
            fi
        done < <(LD_LIBRARY_PATH="$dir/lib:$dir/lib/ucx" elf_libs "$f")
    done
    return $bad
}

prepare() {
    local build=${BUILD:-build-gpu} archs=${CUDA_ARCHS:-90} stage f name path
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" \
        -DPL_WITH_CUDA=ON -DPL_WITH_HIP=OFF -DPL_WERROR=OFF >/dev/null || return 1 # CI checks warnings
    # shellcheck disable=SC2086
    cmake --build "$build" -j"$(nproc)" --target $PROGS pipeld_be_cuda || return 1
    stage=$build/gpucheck-stage
    rm -rf "$stage" .gpucheck && mkdir -p "$stage/bin" "$stage/lib/ucx" .gpucheck
    for f in $PROGS; do cp "$build/bin/$f" "$stage/bin/"; done
    cp "$build/lib/$PLUGIN" "$stage/lib/"
    strip --strip-debug "$stage"/bin/* "$stage/lib/$PLUGIN"
    # one copy of each library under its soname, the name the loader asks for
    for f in "$stage"/bin/* "$stage/lib/$PLUGIN"; do
        while read -r name path; do
            [[ $name =~ $SYSTEM_LIBS ]] && continue
            [ "$path" = not-found ] && { echo "gpu-check: $f: $name not found here" >&2; return 1; }
            [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
        done < <(elf_libs "$f")
    done
    if [ -e "$stage/lib/libuct.so.0" ]; then # UCX loads its transports from the module folder
        for f in "$UCX_MODULES"/*.so.0; do
            name=$(basename "$f")
            [[ $name =~ $UCX_KEEP ]] || continue
            cp -L "$f" "$stage/lib/ucx/$name"
            while read -r name path; do
                [[ $name =~ $SYSTEM_LIBS ]] || [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
            done < <(elf_libs "$f")
        done
    fi
    strip --strip-unneeded "$stage"/lib/*.so* "$stage"/lib/ucx/*.so* 2>/dev/null
    check_resolved "$stage" || { echo "gpu-check: the bundle is incomplete" >&2; return 1; }
    tar -C "$stage" -cf - . | xz -9e -T"$(nproc)" > .gpucheck/bundle.tar.xz || return 1
    local raw packed tree
    raw=$(du -sb "$stage" | cut -f1)
    packed=$(stat -c %s .gpucheck/bundle.tar.xz)
    tree=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 stat -c %s 2>/dev/null |
        awk '{s += $1} END {print s + 0}')
    echo "gpu-check: bundle $(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries:" \
        "$((raw >> 20)) MiB unpacked, $((packed >> 10)) KiB packed; the working tree adds" \
        "$((tree >> 10)) KiB: $(((packed + tree) >> 10)) KiB of the 64 MiB carry limit"
    echo "gpu-check: carry [\".gpucheck\"]; run: tools/gpu-check.sh run (QUICK=1 for a first run)"
}

if [ "$MODE" = prepare ]; then
    prepare
    exit $?
elif [ "$MODE" != run ]; then
    echo "usage: $0 [prepare|run]" >&2
    exit 2
fi

# ---------------------------------------------------------------- on the GPU machine
OUT=${OUT:-$ROOT/out}
MODELS=${MODELS:-/tmp/pl-models}
QUICK=${QUICK:-0}
ONLY=${ONLY:-}
DEADLINE=${DEADLINE:-540}
EXPECT_CUBLAS=${EXPECT_CUBLAS:-1}
D=${PL_GPU_DIR:-/tmp/pl-gpucheck}
BIN=$D/bin
LIB=$D/lib
PROMPT=1,2,3,4,5,6,7
mkdir -p "$OUT" "$MODELS"
: > "$OUT/summary.txt"
failed=0

say() { echo "[gpu-check $(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
die() { say "FAILED: $*"; say "done: FAILURES, see the logs"; exit 1; }

# step NAME LIMIT LOGFILE CMD...: run CMD under `timeout` (LIMIT seconds, less when the deadline
# is nearer), appending its output to LOGFILE; a failure or timeout marks the run failed.
step() {
    local name=$1 limit=$2 logf=$3 left rc t0=$SECONDS
    shift 3
    left=$((DEADLINE - SECONDS - 10))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        say "$name: NOT RUN, the ${DEADLINE} s deadline is reached"
        failed=1
        return 1
    fi
    echo "### $name (limit ${limit} s): $*" >> "$logf"
    timeout -k 5 "$limit" "$@" >> "$logf" 2>&1
    rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        say "$name: TIMED OUT after $((SECONDS - t0)) s (limit $limit s)"
    else
        say "$name: exit $rc after $((SECONDS - t0)) s"
    fi
    grep -E '^# parity:' "$logf" | tail -1 | sed 's/^/    /' | tee -a "$OUT/summary.txt" >/dev/null
    [ $rc = 0 ] || failed=1
    return $rc
}

mkmodel() { # NAME LIMIT ARGS...: generate once into $MODELS/NAME
    local name=$1 limit=$2
    shift 2
    [ -f "$MODELS/$name/config.json" ] && return 0
    step "mkmodel $name" "$limit" "$OUT/env.txt" "$BIN/pl-mkmodel" --out "$MODELS/$name" "$@"
}

# 0. unpack, library path, fail fast on anything not found
if [ ! -x "$BIN/pipeld" ]; then
    [ -f .gpucheck/bundle.tar.xz ] || die "no .gpucheck/bundle.tar.xz: run '$0 prepare' here, carry .gpucheck"
    mkdir -p "$D"
    timeout 60 tar -C "$D" -xJf .gpucheck/bundle.tar.xz 2>/dev/null ||
        timeout 60 python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            .gpucheck/bundle.tar.xz "$D" || die "cannot unpack the bundle into $D"
fi
CUDA_LIB=${CUDA_LIB:-/usr/local/cuda/lib64}
if [ ! -e "$CUDA_LIB/libcublas.so.13" ]; then # else PyTorch's cuBLAS wheel
    alt=$(timeout 30 python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
    [ -n "$alt" ] && [ -e "$alt/libcublas.so.13" ] && CUDA_LIB=$alt
fi
export LD_LIBRARY_PATH=$LIB:$CUDA_LIB UCX_MODULE_DIR=$LIB/ucx
{
    echo "### environment"
    date -u
    uname -a
    nvidia-smi 2>&1 | head -20
    nvcc --version 2>&1 | tail -2
    (unset LD_LIBRARY_PATH; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)') 2>&1
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "UCX_MODULE_DIR=$UCX_MODULE_DIR"
    ls -la "$CUDA_LIB"/libcublas* 2>&1
    ldd "$LIB/$PLUGIN" "$BIN/pipeld"
    echo "### cuobjdump --list-elf (test_gpu_objects' reader lists the same cubins)"
    timeout 20 cuobjdump --list-elf "$LIB/$PLUGIN" 2>&1 | head -40
} >> "$OUT/env.txt" 2>&1
missing=$(for f in "$BIN"/* "$LIB"/*.so* "$LIB"/ucx/*.so*; do
    ldd "$f" 2>/dev/null | awk -v f="$f" '/not found/ {print f ": " $1}'
done)
[ -z "$missing" ] || die "libraries not found (see env.txt): $(echo "$missing" | tr '\n' ' ')"
say "bundle in $D, libraries resolve; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if [ "$EXPECT_CUBLAS" = 1 ]; then
    [ -e "$CUDA_LIB/libcublas.so.13" ] || die "libcublas.so.13 neither in $CUDA_LIB nor in PyTorch's wheel"
    ldd "$CUDA_LIB/libcublas.so.13" | grep -q 'not found' && die "libcublas.so.13: a library it needs is not found"
fi
timeout 20 nvidia-smi -L >> "$OUT/env.txt" 2>&1 || die "nvidia-smi -L failed: no GPU?"

checks() {
    # 1. small random models, all GQA: f32 (exact generation), llama3 rope with head_dim 128 in
    #    f32 and in tied two-shard bf16, tied bf16 in two shards, f16
    mkmodel f32 30 --layers 3 --hidden 256 --heads 8 --kv-heads 2 --intermediate 688 --vocab 512 \
        --dtype f32 --seed 1
    mkmodel f32-hd128 30 --layers 2 --hidden 512 --heads 4 --kv-heads 2 --intermediate 1024 \
        --vocab 1000 --dtype f32 --rope-llama3 --max-pos 8192 --seed 2
    mkmodel bf16 30 --layers 4 --hidden 512 --heads 8 --kv-heads 2 --intermediate 1376 --vocab 2048 \
        --dtype bf16 --tie --shards 2 --seed 3
    mkmodel f16 30 --layers 3 --hidden 384 --heads 6 --kv-heads 3 --intermediate 1024 --vocab 1000 \
        --dtype f16 --seed 4
    mkmodel bf16-hd128 30 --layers 2 --hidden 512 --heads 4 --kv-heads 2 --intermediate 1024 \
        --vocab 1000 --dtype bf16 --rope-llama3 --max-pos 8192 --tie --shards 2 --seed 6

    # 2. parity: per op, whole stages against the CPU backend, greedy generation, the plugin itself
    P=$OUT/parity.log
    step "parity ops" 120 "$P" "$BIN/pl-cuda-parity"
    step "parity f32 stages" 120 "$P" "$BIN/pl-cuda-parity" --no-ops --exact --gen 24 \
        --prompt-ids "$PROMPT" --model "$MODELS/f32" --model "$MODELS/f32-hd128"
    step "parity f16/bf16 stages" 120 "$P" "$BIN/pl-cuda-parity" --no-ops --gen 24 \
        --model "$MODELS/bf16" --model "$MODELS/bf16-hd128" --model "$MODELS/f16"
    step "parity via plugin" 60 "$P" "$BIN/pl-cuda-parity" --no-ops --exact --gen 8 \
        --plugin "$LIB/$PLUGIN" --model "$MODELS/f32"

    # 3. a mixed pipeline: one daemon on the GPU, one on the CPU; its tokens must equal the
    #    single-process CPU run of the same f32 model (greedy). Every wait is bounded.
    # shellcheck disable=SC2317 # run through bash -c under timeout
    mixed_job() {
        local dir=$MODELS/mixed ep=tcp://127.0.0.1:5655 rc=0 pids=()
        local ctl=("$BIN/pipectl" -c "$ep" --timeout 10)
        mkdir -p "$dir"
        rm -f "$dir"/coord.db "$dir"/coord.db-wal "$dir"/coord.db-shm "$dir"/coord-specs.db* # its job is job 1
        printf '[1, 15, 27, 99]\n[1, 7]\n[1, 100, 101, 102, 103, 104, 105]\n[3, 42, 42]\n' \
            > "$dir/prompts.jsonl"
        printf 'model: %s\nprompts: prompts.jsonl\nmax_new_tokens: 24\nstages: 2\n' \
            "$MODELS/f32" > "$dir/job.yaml"
        timeout 60 "$BIN/pl-generate" "$dir/job.yaml" > "$dir/reference.jsonl" || return 1
        timeout 150 "$BIN/pipecoord" --endpoint $ep --state-db "$dir/coord.db" > "$dir/coord.log" 2>&1 & pids+=($!)
        PIPELD_PLUGIN_DIR=$LIB timeout 150 "$BIN/pipeld" --name gpu0 --coordinator $ep \
            --devices cuda > "$dir/gpu0.log" 2>&1 & pids+=($!)
        timeout 150 "$BIN/pipeld" --name cpu0 --coordinator $ep --devices cpu --threads 4 \
            > "$dir/cpu0.log" 2>&1 & pids+=($!)
        for _ in $(seq 1 30); do # both nodes registered with their devices, or give up
            "${ctl[@]}" nodes 2>/dev/null > "$dir/nodes.txt"
            grep -q '^gpu0 .*cuda' "$dir/nodes.txt" && grep -q '^cpu0 .*cpu' "$dir/nodes.txt" && break
            kill -0 "${pids[1]}" 2>/dev/null || { echo "# pipeld gpu0 exited"; rc=1; break; }
            sleep 1
        done
        "${ctl[@]}" nodes || rc=1
        "${ctl[@]}" health gpu0 || rc=1
        if [ $rc = 0 ]; then
            timeout 90 "${ctl[@]}" submit "$dir/job.yaml" --wait > "$dir/got.jsonl" || rc=1
            "${ctl[@]}" status 1
        fi
        "${ctl[@]}" shutdown >/dev/null 2>&1
        sleep 1
        kill "${pids[@]}" 2>/dev/null
        wait "${pids[@]}" 2>/dev/null
        tail -n 8 "$dir"/*.log
        if [ $rc = 0 ] && cmp -s "$dir/reference.jsonl" "$dir/got.jsonl"; then
            echo "# mixed pipeline: cuda + cpu stages equal the single-process cpu run"
        else
            echo "# mixed pipeline: DIFFERS or failed"
            diff "$dir/reference.jsonl" "$dir/got.jsonl"
            return 1
        fi
    }
    export -f mixed_job
    export BIN LIB MODELS
    step "mixed cuda+cpu pipeline" 160 "$OUT/mixed.log" bash -c mixed_job

    # 4. the same greedy generation in PyTorch, with PyTorch's own libraries (reported, not a
    #    pass/fail: another implementation)
    T=$OUT/torch.txt
    if step "torch generation" 90 "$T" env -u LD_LIBRARY_PATH -u UCX_MODULE_DIR python3 \
        bench/torch_reference.py --model "$MODELS/f32" --dtype f32 --gen 24 --prompt-ids "$PROMPT"; then
        ours=$(grep -m1 '^GEN gpu:' "$P" | cut -d: -f2)
        theirs=$(grep -m1 '^GEN torch:' "$T" | cut -d: -f2)
        if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then
            say "torch generation: identical to pl-cuda-parity's gpu generation"
        else
            say "torch generation differs: gpu:$ours torch:$theirs"
        fi
    fi
}
P=$OUT/parity.log
T=$OUT/torch.txt
[ "$ONLY" = bench ] || checks

# 5. benchmarks on a Llama-3.2-1B-shaped bf16 model, ours then PyTorch eager on the same jobs
B=$OUT/bench.txt
if [ "$QUICK" != 1 ]; then
    mkmodel 1b-bf16 150 --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 8192 \
        --vocab 128256 --dtype bf16 --tie --rope-llama3 --max-pos 131072 --seed 5
    step "bench" 150 "$B" "$BIN/pl-cuda-bench" --model "$MODELS/1b-bf16"
    step "bench builtin gemm" 90 "$B" "$BIN/pl-cuda-bench" --model "$MODELS/1b-bf16" --builtin \
        --batches 1,8 --steps 32
    step "torch bench" 120 "$T" env -u LD_LIBRARY_PATH -u UCX_MODULE_DIR python3 \
        bench/torch_reference.py --model "$MODELS/1b-bf16" --bench
fi

# 6. strict: where cuBLAS was expected, it must have run, and nothing ran the built-in GEMM in
#    its place (a fallback is logged as a warning and shows in the gemm descriptions)
if [ "$EXPECT_CUBLAS" = 1 ]; then
    why=""
    if [ "$ONLY" != bench ] && ! grep -q '^PASS gemm vendor' "$P" 2>/dev/null; then
        why="no vendor GEMM check passed in parity.log"
    fi
    if grep -q -E 'SKIP vendor gemm|falling back to the built-in GEMM' "$P" "$OUT/mixed.log" \
        "$MODELS/mixed/gpu0.log" 2>/dev/null; then
        why="the built-in GEMM ran where cuBLAS was expected"
    fi
    if [ "$QUICK" != 1 ] && ! grep -m1 '^model ' "$B" 2>/dev/null | grep -q 'gemm cublas'; then
        why="bench.txt's model line does not say 'gemm cublas'"
    fi
    if [ -n "$why" ]; then
        say "FAILED: cuBLAS expected: $why"
        failed=1
    else
        say "cuBLAS: used wherever it was expected"
    fi
fi

say "done: $([ $failed = 0 ] && echo 'all passed' || echo 'FAILURES, see the logs')"
exit $failed
