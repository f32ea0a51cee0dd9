#!/usr/bin/env bash
# bench_pipeline: prefill and decode tokens/s of a batched job, and the time to first token of
# one long prompt (prefill in chunks), on 1, 2 and 3 pipeline stages of a local cluster (one
# pipecoord, three pipeld with one CPU thread each), each the median of PL_BENCH_RUNS runs, with
# the ratio to one stage, the ideal decode ratio from this machine's 2- and 1-thread memory read
# bandwidth (bench_decode), and what the planner predicted beside what was measured: from the
# daemons' calibrations alone (each job's plan asked for before any job ran) and after the
# lessons of the jobs before it (the run's own plan), per job and per stage and phase.
#
# usage: bench/bench_pipeline.sh [BUILD_DIR]     (default: build; builds nothing)
# env:   PL_BENCH_MODEL=DIR   use this model instead of making one (must match the sizes below
#                              in spirit: weights well beyond the caches)
#        PL_BENCH_KEEP=1      keep the work directory (logs, jobs, results)
#        PL_BENCH_PROMPT_LEN, PL_BENCH_NEW_TOKENS, PL_BENCH_SEQS   override the job shapes
#        PL_BENCH_RUNS=N      runs of each job, the median shown (default 3)
#        PL_BENCH_TTFT_LEN, PL_BENCH_CHUNK   the long prompt (1024) and its prefill chunk (default
#                              0: the planner's, which keeps it whole on one stage)
#        PL_BENCH_MEMREF=0    skip the memory bandwidth reference (bench_decode)
#        PL_UCX_PROGRESS_THREAD=0   progress UCX between layers (no progress thread), to compare
#        PL_BENCH_PLANNER=even   the job's planner (default optimal)
#        PL_BENCH_PREFILL_CHUNK=N   the batched prefill job's chunk (default 0: the planner's)
#        PL_BENCH_MB=N        microbatches of every job on 2 or more stages (default 0: the
#                              planner chooses; one stage always runs the whole batch at once)
#        PL_BENCH_STAGES="1 2"   the stage counts to run (default "1 2 3"; 1 is the reference)
#        PL_BENCH_DEAD_AFTER_MS=N   the coordinator's dead_after_ms (default 20000: on a machine
#                              shared with many builds a daemon's heartbeat can lag 3 s)
#        PL_BENCH_NICE=N      run the coordinator and the daemons at this niceness, each in a
#                              session (scheduler autogroup) of its own with that niceness: root
#                              may give a negative one, and on a machine shared with builds the
#                              stages then get their cores almost to themselves (default 0)
#        PL_BENCH_PAIRED=0    skip the paired reference: each 1-stage job twice at once, one
#                              on node0's core and one on node1's, which shows what running both
#                              cores costs each one (shared caches, memory, clock): the most that
#                              two stages can give on this machine (default 1, with 1 stage)
#        PL_BENCH_CPUS="A B [C]"   the CPUs of node0, node1 (and node2) instead
#        PL_BENCH_DTYPE=T     the weights pl-mkmodel stores, which the CPU backend computes from
#                              as stored: bf16 (default), f16 or f32 (safetensors), q8_0 or q4_k
#                              (one GGUF file)
#        PL_BENCH_JOBS="decode"   the jobs to run (default "prefill decode ttft"); a sweep of the
#                              decode batch: bench/bench_pipeline_sweep.sh
#        PL_BENCH_LAYERS=N    layers of the model made here (default 12: 317 MB as bf16, about
#                              the 300 MB L3; 48 stores 1.2 GB, far past it)
#        PL_BENCH_PIN=0       do not pin the daemons to cores (default: node0 on the first CPU,
#                              node1 on the second, node2 (started with the others when 3 stages
#                              run; the 1- and 2-stage jobs are placed on node0 and node1) on the
#                              third, or the first when there are only two)
set -euo pipefail

BUILD=${1:-build}
if [ ! -d "$BUILD/bin" ]; then
    echo "bench_pipeline: no $BUILD/bin; build first (cmake --build $BUILD)" >&2
    exit 2
fi
B=$(cd "$BUILD/bin" && pwd)
for t in pipecoord pipeld pipectl pl-mkmodel; do
    [ -x "$B/$t" ] || { echo "bench_pipeline: $B/$t is missing; build it first" >&2; exit 2; }
done

SEQS=${PL_BENCH_SEQS:-12}              # sequences in each job: 4 per stage on 3 stages
PROMPT_LEN=${PL_BENCH_PROMPT_LEN:-64}  # tokens per prompt of the prefill job
NEW_TOKENS=${PL_BENCH_NEW_TOKENS:-32}  # tokens generated per sequence by the decode job
RUNS=${PL_BENCH_RUNS:-3}
TTFT_LEN=${PL_BENCH_TTFT_LEN:-1024}    # the one long prompt
CHUNK=${PL_BENCH_CHUNK:-0}             # its prefill chunk (0: the planner's)
MB=${PL_BENCH_MB:-0}
PCHUNK=${PL_BENCH_PREFILL_CHUNK:-0}
STAGES=${PL_BENCH_STAGES:-1 2 3}
PIN=${PL_BENCH_PIN:-1}
PAIRED=${PL_BENCH_PAIRED:-1}
NICE=${PL_BENCH_NICE:-0}
PRIO=()
[ "$NICE" != 0 ] && PRIO=(setsid nice -n "$NICE")
# With scheduler autogroups on, niceness counts only within a session: give the sessions of our
# processes (each its own, once it runs: never this script's) the same niceness.
prio() {
    [ "$NICE" = 0 ] && return 0
    local p mine
    mine=$(sed 's/ nice.*//' /proc/$$/autogroup 2>/dev/null || true)
    for p in "${pids[@]}"; do
        [ -w "/proc/$p/autogroup" ] || continue
        [ "$(sed 's/ nice.*//' "/proc/$p/autogroup")" = "$mine" ] && continue
        echo "$NICE" >"/proc/$p/autogroup" 2>/dev/null || true
    done
}
PLANNER=${PL_BENCH_PLANNER:-optimal}   # even: split layers evenly (calibration under load is noisy)
# One BLAS thread per daemon: --threads 1 sets it, and no idle OpenBLAS pool competes either.
export OPENBLAS_NUM_THREADS=1
WORK=$(mktemp -d /tmp/pl-bench-pipeline-XXXXXX)
EP=
pids=()

cleanup() {
    if [ -n "$EP" ]; then
        "$B/pipectl" -c "$EP" --timeout 2 shutdown >/dev/null 2>&1 || true
        sleep 0.5
    fi
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "${PL_BENCH_KEEP:-0}" = 1 ]; then
        echo "bench_pipeline: work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the model and the two jobs ----
JOBS=${PL_BENCH_JOBS:-prefill decode ttft}
WTYPE=${PL_BENCH_DTYPE:-bf16}
MODEL=${PL_BENCH_MODEL:-$WORK/model}
LAYERS=${PL_BENCH_LAYERS:-12}
MK=(--layers "$LAYERS" --hidden 1024 --intermediate 2816 --heads 16 --kv-heads 8 --vocab 8192 --seed 1
    --max-pos 2048)
if [ -z "${PL_BENCH_MODEL:-}" ]; then
    case "$WTYPE" in
    bf16 | f16 | f32) "$B/pl-mkmodel" --out "$MODEL" "${MK[@]}" --dtype "$WTYPE" >&2 ;;
    q8_0 | q4_k)
        MODEL=$WORK/model.gguf
        "$B/pl-mkmodel" --out "$MODEL" "${MK[@]}" --format gguf --type "$WTYPE" >&2
        ;;
    *) echo "bench_pipeline: PL_BENCH_DTYPE=$WTYPE: not bf16, f16, f32, q8_0 or q4_k" >&2; exit 2 ;;
    esac
fi
if [ -d "$MODEL" ]; then
    MODEL=$(cd "$MODEL" && pwd)
    cfg() { sed -n "s/^ *\"$1\": *\([^,]*\),*$/\1/p" "$MODEL/config.json" | head -n 1; }
    DTYPE=$(cfg torch_dtype | tr -d '"')
else # a GGUF file that pl-mkmodel made here: its shape is MK's
    cfg() {
        case "$1" in
        num_hidden_layers) echo "$LAYERS" ;; hidden_size) echo 1024 ;; intermediate_size) echo 2816 ;;
        num_attention_heads) echo 16 ;; num_key_value_heads) echo 8 ;; vocab_size) echo 8192 ;;
        esac
    }
    DTYPE="$WTYPE (GGUF)"
fi
VOCAB=$(cfg vocab_size)

# Deterministic random prompts: SEQS lines of LEN token ids in 3..VOCAB-1.
prompts() { # LEN SEED
    awk -v n="$SEQS" -v len="$1" -v seed="$2" -v vocab="$VOCAB" 'BEGIN {
        srand(seed)
        for (i = 0; i < n; i++) {
            line = "["
            for (j = 0; j < len; j++)
                line = line (j ? ", " : "") (3 + int(rand() * (vocab - 3)))
            print line "]"
        }
    }'
}
prompts "$PROMPT_LEN" 11 >"$WORK/prefill.jsonl"
prompts 8 12 >"$WORK/decode.jsonl"
SEQS_ALL=$SEQS
SEQS=1
prompts "$TTFT_LEN" 13 >"$WORK/ttft.jsonl"
SEQS=$SEQS_ALL

job() { # NAME PROMPTS MAX_NEW STAGES [PREFILL_CHUNK] [NODES]
    cat >"$WORK/$1.yaml" <<EOF
$([ -n "${6:-}" ] && printf "placement:\n  nodes: [%s]" "$6")
model: $MODEL
prompts: $2
max_new_tokens: $3
sampling:
  temperature: 0.0
microbatches: $([ "$4" = 1 ] && echo 0 || echo "$MB")
prefill_chunk: ${5:-0}
stages: $4
planner: $PLANNER
stop_at_eos: false
EOF
}

# ---- the local cluster on a free port ----
mkdir -p "$WORK/logs"
cat >"$WORK/cluster.yaml" <<EOF
coordinator:
  endpoint: tcp://127.0.0.1:5555
  heartbeat_ms: 500
  dead_after_ms: ${PL_BENCH_DEAD_AFTER_MS:-20000}
nodes:
  - name: node0
    address: 127.0.0.1
    threads: 1
  - name: node1
    address: 127.0.0.1
    threads: 1
  - name: node2
    address: 127.0.0.1
    threads: 1
EOF
for _ in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && continue
    "${PRIO[@]}" "$B/pipecoord" --cluster "$WORK/cluster.yaml" --endpoint "tcp://127.0.0.1:$port" --state-db "$WORK/coord-$port.db" >"$WORK/logs/pipecoord.log" 2>&1 &
    cpid=$!
    sleep 0.3
    if kill -0 "$cpid" 2>/dev/null; then
        pids+=("$cpid")
        EP="tcp://127.0.0.1:$port"
        break
    fi
    wait "$cpid" 2>/dev/null || true
done
[ -n "$EP" ] || { echo "bench_pipeline: pipecoord did not start on any port" >&2; exit 1; }
# The daemons, each pinned to its own CPU where there are enough: node0 and node1 for the 1- and
# 2-stage jobs, node2 joining for the 3-stage ones (so a 2-stage job never lands on two daemons
# that share a core).
CPUS=($(taskset -pc $$ 2>/dev/null | sed 's/.*: //' | tr ',' '\n' |
    awk -F- '{ for (i = $1; i <= ($2 == "" ? $1 : $2); i++) print i }'))
[ -n "${PL_BENCH_CPUS:-}" ] && CPUS=($PL_BENCH_CPUS)
daemon() { # NAME INDEX
    local pin=()
    if [ "$PIN" = 1 ] && [ "${#CPUS[@]}" -ge 2 ] && command -v taskset >/dev/null; then
        pin=(taskset -c "${CPUS[$(($2 < ${#CPUS[@]} ? $2 : 0))]}")
    fi
    "${PRIO[@]}" "${pin[@]}" "$B/pipeld" --name "$1" --coordinator "$EP" --threads 1 >"$WORK/logs/$1.log" 2>&1 &
    pids+=($!)
    PINS="$PINS $1:${pin[2]:-any}"
}
wait_idle() { # N
    local up=0
    for _ in $(seq 100); do
        up=$("$B/pipectl" -c "$EP" -o json nodes 2>/dev/null | grep -c '"state": "idle"' || true)
        [ "$up" -ge "$1" ] && { prio; return 0; }
        sleep 0.2
    done
    echo "bench_pipeline: only $up of $1 daemons registered" >&2
    exit 1
}
PINS=
daemon node0 0
daemon node1 1
# node2 from the start, so that every plan below can be asked for before any job has run (the
# daemons' calibrations alone); the 1- and 2-stage jobs are placed on node0 and node1, so that
# a 2-stage job never lands on two daemons that share a core
N_UP=2 PLACE=
if [[ " $STAGES " == *" 3 "* ]]; then
    daemon node2 2
    N_UP=3 PLACE="node0, node1"
fi
wait_idle "$N_UP"

# ---- one job: submit, wait, keep its results and throughput ----
# The first number named KEY in a `pipectl -o json status` file (the plan comes first).
field() { # FILE KEY (nothing when the job did not run: PL_BENCH_JOBS)
    [ -f "$1" ] || return 0
    sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p" "$1" | head -n 1
}
# A measured number: KEY inside the top-level "throughput" object (the plan has predictions
# under the same names).
tput() { # FILE KEY
    [ -f "$1" ] || return 0
    sed -n '/^  "throughput": {/,/^  }/p' "$1" |
        sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p" | head -n 1
}

stage_nums() { # FILE KEY: KEY of each stage of the job (its "stages" array), one a line
    [ -f "$1" ] || return 0
    sed -n '/^  "stages": \[/,/^  \]/p' "$1" | sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p"
}
run() { # NAME YAML
    if ! timeout 900 "$B/pipectl" -c "$EP" submit "$2" --wait >"$WORK/$1.out" \
        2>"$WORK/$1.err"; then
        echo "bench_pipeline: job $1 failed:" >&2
        cat "$WORK/$1.err" >&2
        exit 1
    fi
    local id
    id=$(sed -n 's/^job \([0-9]*\) submitted$/\1/p' "$WORK/$1.err" | head -n 1)
    "$B/pipectl" -c "$EP" -o json status "$id" >"$WORK/$1.json"
    local layers
    layers=$(sed -n 's/^ *"n_layers": \([0-9]*\),*$/\1/p' "$WORK/$1.json" | paste -sd+ -)
    local sched
    sched=$(schedule "$WORK/$1.json")
    echo "  $1: job $id, layers per stage $layers, microbatches $(field "$WORK/$1.json" microbatches), chunk $(field "$WORK/$1.json" \
        prefill_chunk)${sched:+ (uneven: $sched)}, wall $(printf %.2f "$(tput "$WORK/$1.json" wall_s)") s" >&2
}

schedule() { # FILE: the plan's uneven prefill chunks, comma-separated ("" when none)
    awk '/"prefill_schedule": \[\]/ { exit } /"prefill_schedule": \[/ { f = 1; next }
         f && /\]/ { exit } f { gsub(/[ ,]/, ""); s = s (s != "" ? "," : "") $0 }
         END { print s }' "$1"
}

# CPU time (clock ticks) of the whole machine, and of this cluster's processes.
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
our_ticks() {
    local sum=0 p
    for p in "${pids[@]}"; do
        [ -r "/proc/$p/stat" ] || continue
        sum=$((sum + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
    done
    echo "$sum"
}

NPROC=$(nproc)
m0=$(machine_ticks)
o0=$(our_ticks)
t0=$(date +%s.%N)
echo "bench_pipeline: model $MODEL; $SEQS sequences; prefill job: prompts of $PROMPT_LEN tokens," \
    "1 new token; decode job: prompts of 8 tokens, $NEW_TOKENS new tokens (greedy); one prompt" \
    "of $TTFT_LEN tokens in chunks of $([ "$CHUNK" = 0 ] && echo "the planner's choice" || echo "$CHUNK");" \
    "$RUNS runs each" >&2
# 1 and 2 stages run in rounds (each round every job on 1 stage, then on 2), so that the
# machine's drift between minutes (this VM's speed moved 25% within a session) reaches both
# sides of a ratio alike; 3 stages (a third daemon joins) after them.
jobs_of() { # STAGES
    local place=
    [ "$1" -le 2 ] && place=$PLACE
    job "prefill$1" "$WORK/prefill.jsonl" 1 "$1" "$PCHUNK" "$place"
    job "decode$1" "$WORK/decode.jsonl" "$NEW_TOKENS" "$1" 0 "$place"
    job "ttft$1" "$WORK/ttft.jsonl" 1 "$1" "$CHUNK" "$place"
}
# What the daemons' calibrations alone predict: every job's plan before any job has run.
for s in $STAGES; do
    jobs_of "$s"
    for j in $JOBS; do
        "$B/pipectl" -c "$EP" -o json plan "$WORK/$j$s.yaml" >"$WORK/$j$s.calib.json" \
            2>>"$WORK/logs/plan.err" || rm -f "$WORK/$j$s.calib.json"
    done
done
ROUNDS= LATER=
for s in $STAGES; do
    if [ "$s" -le 2 ]; then ROUNDS="$ROUNDS $s"; else LATER="$LATER $s"; fi
done
for s in $ROUNDS; do jobs_of "$s"; done
for r in $(seq "$RUNS"); do
    for s in $ROUNDS; do
        for j in $JOBS; do
            run "$j$s.$r" "$WORK/$j$s.yaml"
        done
    done
done
for s in $ROUNDS $LATER; do
    if [ "$s" -ge 3 ]; then
        jobs_of "$s"
        for r in $(seq "$RUNS"); do
            for j in $JOBS; do
                run "$j$s.$r" "$WORK/$j$s.yaml"
            done
        done
    fi
    if [ "$s" = 1 ] && [ "$PAIRED" = 1 ]; then # the paired reference (see the usage above)
        for j in $JOBS; do
            c=$PCHUNK
            [ "$j" = ttft ] && c=$CHUNK
            n=1
            [ "$j" = decode ] && n=$NEW_TOKENS
            job "${j}a" "$WORK/$j.jsonl" "$n" 1 "$c" node0
            job "${j}b" "$WORK/$j.jsonl" "$n" 1 "$c" node1
        done
        for r in $(seq "$RUNS"); do
            for j in $JOBS; do
                run "${j}a.$r" "$WORK/${j}a.yaml" &
                pa=$!
                run "${j}b.$r" "$WORK/${j}b.yaml"
                wait "$pa"
            done
        done
    fi
done
# The run whose KEY is the median of the RUNS runs of job J; its status file stands for J.
for s in $STAGES; do
    for j in $JOBS; do
        key=${j}_tok_s
        [ "$j" = ttft ] && key=prefill_s
        pick=$(for r in $(seq "$RUNS"); do echo "$(tput "$WORK/$j$s.$r.json" "$key") $r"; done |
            sort -g | awk '{ r[NR] = $2 } END { print r[int((NR + 1) / 2)] }')
        cp "$WORK/$j$s.$pick.json" "$WORK/$j$s.json"
        cp "$WORK/$j$s.$pick.out" "$WORK/$j$s.out"
    done
done

# ---- the table ----
other=$(awk -v m="$(($(machine_ticks) - m0))" -v o="$(($(our_ticks) - o0))" -v t0="$t0" \
    -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { v = (m - o) / hz / (t1 - t0); printf "%.2f", (v > 0 ? v : 0) }')
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
read -r l1 l2 l3 <"/proc/loadavg"
echo "machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), $NPROC cores," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $l1 $l2 $l3"
echo "daemons pinned (name:cpu): ${PINS# }; OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS;" \
    "progress thread: ${PL_UCX_PROGRESS_THREAD:-1} (0: progress between layers); niceness $NICE"
if [ "$NPROC" -lt 4 ]; then
    echo "note: 3 daemons x 1 thread + coordinator on $NPROC cores: one core per daemon is not" \
        "possible here, so the stages share cores and the 2- and 3-stage figures are" \
        "oversubscribed"
fi
echo "model: $(cfg num_hidden_layers) layers, hidden $(cfg hidden_size), intermediate" \
    "$(cfg intermediate_size), heads $(cfg num_attention_heads)/$(cfg num_key_value_heads)," \
    "vocab $VOCAB, $DTYPE weights on disk, which the CPU backend computes from as stored"
echo "prefill job: $SEQS prompts x $PROMPT_LEN tokens, max_new_tokens 1;" \
    "decode job: $SEQS sequences x $NEW_TOKENS new tokens; microbatches: $MB and planner:" \
    "$PLANNER (0: the planner chooses; see below)"
echo
echo "| stages | prefill tok/s | ratio | decode tok/s | ratio | TTFT of $TTFT_LEN tokens, s | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
p1=$(tput "$WORK/prefill1.json" prefill_tok_s)
d1=$(tput "$WORK/decode1.json" decode_tok_s)
t1=$(tput "$WORK/ttft1.json" prefill_s)
for s in $STAGES; do
    p=$(tput "$WORK/prefill$s.json" prefill_tok_s)
    d=$(tput "$WORK/decode$s.json" decode_tok_s)
    t=$(tput "$WORK/ttft$s.json" prefill_s)
    printf '| %d | %.1f | %s | %.1f | %s | %.2f | %s |\n' "$s" "${p:-0}" "$(ratio "${p:-0}" "${p1:-0}")" \
        "${d:-0}" "$(ratio "${d:-0}" "${d1:-0}")" "${t:-0}" "$(ratio "${t:-0}" "${t1:-0}")"
done
echo
# Each round's own ratio (its 1- and 2-stage runs ran minutes apart at most): the spread shows
# how much of a ratio's movement is the machine's.
if [[ " $ROUNDS " == *" 1 "* && " $ROUNDS " == *" 2 "* ]]; then
    for j in $JOBS; do
        key=${j}_tok_s
        [ "$j" = ttft ] && key=prefill_s
        echo "$j ratio 2 / 1 stage per round: $(for r in $(seq "$RUNS"); do
            ratio "$(tput "$WORK/${j}2.$r.json" "$key")" "$(tput "$WORK/${j}1.$r.json" "$key")"
            echo
        done | paste -sd' ' -)"
    done
fi
echo "targets (issue 8, 2 stages against 1): prefill ratio >= 1.8; decode >= 90% of the ideal" \
    "below; TTFT ratio <= 0.6"
# The paired reference: a stage's work costs more CPU time when the other core computes too.
if [ "$PAIRED" = 1 ] && [ -f "$WORK/prefilla.1.json" ]; then
    echo
    echo "| 1-stage job | alone: compute s, CPU s | two at once, one per core: compute s, CPU s (median of runs, mean of the two) | CPU time paired / alone | the most 2 stages can give here |"
    echo "| --- | --- | --- | ---: | ---: |"
    for j in $JOBS; do
        aw=$(stage_nums "$WORK/${j}1.json" compute_s | head -n 1)
        ac=$(stage_nums "$WORK/${j}1.json" compute_cpu_s | head -n 1)
        pw_pc=$(for r in $(seq "$RUNS"); do
            paste -d' ' <(stage_nums "$WORK/${j}a.$r.json" compute_s; stage_nums "$WORK/${j}b.$r.json" compute_s) \
                <(stage_nums "$WORK/${j}a.$r.json" compute_cpu_s; stage_nums "$WORK/${j}b.$r.json" compute_cpu_s) |
                awk '{ w += $1; c += $2 } END { printf "%.3f %.3f\n", c / NR, w / NR }'
        done | sort -g | awk '{ c[NR] = $1; w[NR] = $2 } END { m = int((NR + 1) / 2); print w[m], c[m] }')
        read -r pw pc <<<"$pw_pc"
        awk -v j="$j" -v aw="$aw" -v ac="$ac" -v pw="$pw" -v pc="$pc" 'BEGIN {
            printf "| %s | %.2f, %.2f | %.2f, %.2f | %.2f | %s %.2f |\n", j, aw, ac, pw, pc,
                (ac > 0 ? pc / ac : 0), (j == "ttft" ? "time ratio" : "ratio"),
                (j == "ttft" ? (ac > 0 ? pc / ac / 2 : 0) : (pc > 0 ? 2 * ac / pc : 0)) }'
    done
fi
if [ -x "$B/bench_decode" ] && [ "${PL_BENCH_MEMREF:-1}" = 1 ]; then
    # its table "| **best (the reference below)** | **R1 GB/s** | **R2 GB/s** |" (1, 2 threads)
    # in its own session at the cluster's niceness, as the daemons
    if [ "$NICE" != 0 ]; then
        setsid bash -c 'echo "$0" >/proc/$$/autogroup 2>/dev/null; exec nice -n "$0" "$@"' "$NICE" \
            "$B/bench_decode" --threads 1,2 --steps 4 --prefill 0 --reps 2 >"$WORK/memref.txt" 2>&1 || true
    else
        "$B/bench_decode" --threads 1,2 --steps 4 --prefill 0 --reps 2 >"$WORK/memref.txt" 2>&1 || true
    fi
    # cells "W GB/s (CPU time: C)": W in wall time, C the same read in CPU time (which other
    # processes do not inflate); the ideal ratio comes from C where it is there
    best=$(grep -m 1 '^| \*\*best' "$WORK/memref.txt" | tr -d '*' | tr '|' '\n' | grep 'GB/s' || true)
    r1=$(echo "$best" | sed -n '1s/^ *\([0-9.]*\) GB\/s.*/\1/p')
    r2=$(echo "$best" | sed -n '2s/^ *\([0-9.]*\) GB\/s.*/\1/p')
    c1=$(echo "$best" | sed -n '1s/.*CPU time: *\([0-9.]*\).*/\1/p')
    c2=$(echo "$best" | sed -n '2s/.*CPU time: *\([0-9.]*\).*/\1/p')
    if [ -n "$r1" ] && [ -n "$r2" ]; then
        i1=${c1:-$r1} i2=${c2:-$r2}
        echo "memory read bandwidth (bench_decode): 1 thread $r1 GB/s${c1:+ (CPU time: $c1)}," \
            "2 threads $r2 GB/s${c2:+ (CPU time: $c2)}: ideal 2-stage decode ratio" \
            "$(ratio "$i2" "$i1"), 90% of it $(awk -v a="$i2" -v b="$i1" 'BEGIN { printf "%.2f", 0.9 * a / b }')" \
            "${c1:+(from the CPU-time figures)}"
    fi
fi
echo

# Decode's ceiling. Each decode call of a microbatch reads its stage's weights (and KV, and the
# embedding rows or LM head): decode_read_bytes in the plan. With M microbatches a step reads
# them M times, so with M >= S (every stage busy) S stages move M / S times the bytes of one
# stage holding the whole model per step. At the measured bandwidth (1 stage: the 1-thread
# figure; S stages: the 2-thread figure shared by the cores) that traffic alone allows the
# ratio below; the issue's ideal (the bandwidth ratio) assumes one weight pass per step. Where
# a step is slower than its traffic (weights in the 300 MB L3, the bf16 kernels' own pass over
# them), the cost is still per weight pass: "passes" is the ratio when a pass over a byte of
# weights costs what it does on one stage (1 stage's bytes per step / the busiest stage's).
if [ -n "${i1:-}" ] && [ -n "${i2:-}" ] && [ -f "$WORK/decode1.json" ]; then
    echo "decode's ceiling in memory traffic (the plan's bytes per decode call x microbatches," \
        "at the measured read bandwidth; $SEQS sequences; bandwidth-ratio ideal $(ratio "$i2" "$i1")):"
    echo
    echo "| decode job | microbatches | MB read per step, per stage | all stages, MB | step at the bandwidth, ms | tok/s the traffic allows | ratio the traffic allows | ratio the passes allow | measured tok/s | measured ratio |"
    echo "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    st1= all1=
    dm1=$(tput "$WORK/decode1.json" decode_tok_s)
    for s in $STAGES; do
        f="$WORK/decode$s.json"
        [ -f "$f" ] || continue
        m=$(field "$f" microbatches)
        read -r per all step mxb <<<"$(sed -n 's/^ *"decode_read_bytes": *\([-0-9.eE+]*\),\{0,1\}$/\1/p' "$f" |
            awk -v m="${m:-1}" -v s="$s" -v bw1="$i1" -v bw2="$i2" -v np="$NPROC" '
                { b = $1 * m; per = per (NR > 1 ? "+" : "") sprintf("%.1f", b / 1e6); tot += b
                  if (b > mx) mx = b }
                END { if (s == 1) t = tot / (bw1 * 1e9)
                      else { t = tot / (bw2 * 1e9); u = mx / (bw2 / (s < np ? s : np) * 1e9)
                             if (u > t) t = u }
                      printf "%s %.1f %.6f %.3f\n", per, tot / 1e6, t, mx / 1e6 }')"
        [ -z "$st1" ] && st1=$step all1=$all
        dm=$(tput "$f" decode_tok_s)
        awk -v s="$s" -v m="$m" -v per="$per" -v all="$all" -v t="$step" -v t1="$st1" \
            -v a1="$all1" -v mx="$mxb" -v n="$SEQS" -v dm="${dm:-0}" -v dm1="${dm1:-0}" 'BEGIN {
            printf "| %d stage(s) | %s | %s | %s | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f |\n", s,
                m, per, all, 1e3 * t, (t > 0 ? n / t : 0), (t > 0 ? t1 / t : 0),
                (mx > 0 ? a1 / mx : 0), dm, (dm1 > 0 ? dm / dm1 : 0) }'
    done
    echo
fi

# Where each job's time went: a pipeline overlaps its stages when wall < the sum of computes.
nums() { # FILE KEY: every value of KEY, two decimals, joined with +
    [ -f "$1" ] || return 0
    sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p" "$1" |
        awk '{ printf "%s%.2f", (NR > 1 ? "+" : ""), $1 }'
}
echo "| job | layers per stage | microbatches | tok/s: planned, measured | wall s |" \
    "compute s per stage | wait s per stage |"
echo "| --- | --- | ---: | ---: | ---: | --- | --- |"
for j in $JOBS; do
    for s in $STAGES; do
        f="$WORK/$j$s.json"
        k=${j}_tok_s
        [ "$j" = ttft ] && k=prefill_tok_s
        printf '| %s, %d stage(s) | %s | %s | %.1f, %.1f | %.2f | %s | %s |\n' "$j" "$s" \
            "$(sed -n 's/^ *"n_layers": \([0-9]*\),*$/\1/p' "$f" | paste -sd+ -)" \
            "$(field "$f" microbatches)" "$(field "$f" "$k")" \
            "$(tput "$f" "$k")" "$(tput "$f" wall_s)" "$(nums "$f" compute_s)" \
            "$(nums "$f" wait_s)"
    done
done
echo
# The planner's predictions beside the measurement: from the calibrations alone (the plan asked
# for before any job ran: what a first job after the daemons start gets) and the run's own plan
# (after the lessons of the jobs before it); the target is each within 20% (0.83-1.20).
plan_nums() { # FILE KEY: KEY of each stage of the plan, one a line
    [ -f "$1" ] || return 0
    sed -n '/^  "plan": {/,/^  }/p' "$1" | sed -n '/^    "stages": \[/,/^    \]/p' |
        sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\),\{0,1\}$/\1/p"
}
echo "| job | tok/s planned: from calibration, after lessons | measured tok/s | planned / measured: calibration, lessons |"
echo "| --- | ---: | ---: | ---: |"
for j in $JOBS; do
    for s in $STAGES; do
        k=${j}_tok_s
        [ "$j" = ttft ] && k=prefill_tok_s
        awk -v j="$j" -v s="$s" -v c="$(field "$WORK/$j$s.calib.json" "$k")" \
            -v l="$(field "$WORK/$j$s.json" "$k")" -v m="$(tput "$WORK/$j$s.json" "$k")" 'BEGIN {
            printf "| %s, %d stage(s) | %.1f, %.1f | %.1f | %.2f, %.2f |\n", j, s, c, l, m,
                (m > 0 ? c / m : 0), (m > 0 ? l / m : 0) }'
    done
done
echo
# Each stage's compute per call (a prefill message, a decode step) as the run's plan predicted
# it (its device's rates beside) and as the stage measured it: its compute over its calls, in
# wall time and in the CPU time it had (other processes do not inflate the second).
echo "| job | rates used per stage: GFLOP/s, GB/s, decode rows GFLOP/s, prefill passes GB/s, prefill attention GFLOP/s, host GB/s (GB/s is after the shares of CPUs and of the host's bandwidth) | prefill ms per call: planned, measured (CPU) | decode ms per step: planned, measured (CPU) |"
echo "| --- | --- | --- | --- |"
for j in $JOBS; do
    for s in $STAGES; do
        f="$WORK/$j$s.json"
        [ -f "$f" ] || continue
        printf '| %s, %d stage(s) | ' "$j" "$s"
        paste -d' ' <(plan_nums "$f" gflops) <(plan_nums "$f" mem_gbps) <(plan_nums "$f" dec_gflops) \
            <(plan_nums "$f" pass_gbps) <(plan_nums "$f" compute_prefill_s) \
            <(plan_nums "$f" compute_decode_s) \
            <(stage_nums "$f" prefill_compute_s) <(stage_nums "$f" prefill_calls) \
            <(stage_nums "$f" decode_compute_s) <(stage_nums "$f" decode_calls) \
            <(stage_nums "$f" compute_s) <(stage_nums "$f" compute_cpu_s) \
            <(plan_nums "$f" attn_gflops) <(plan_nums "$f" host_gbps) |
            awk '{ c = ($11 > 0 && $12 > 0 && $12 < $11 ? $12 / $11 : 1)
                   r = r (NR > 1 ? "; " : "") sprintf("%.1f, %.2f, %.1f, %.2f, %.1f, %.1f", $1, $2,
                       $3, $4, $13, $14)
                   p = p (NR > 1 ? "; " : "") sprintf("%.1f, %.1f (%.1f)", 1e3 * $5,
                       ($8 > 0 ? 1e3 * $7 / $8 : 0), ($8 > 0 ? 1e3 * c * $7 / $8 : 0))
                   d = d (NR > 1 ? "; " : "") sprintf("%.2f, %.2f (%.2f)", 1e3 * $6,
                       ($10 > 0 ? 1e3 * $9 / $10 : 0), ($10 > 0 ? 1e3 * c * $9 / $10 : 0)) }
                 END { printf "%s | %s | %s |\n", r, p, d }'
    done
done
echo
# Where each stage's wall time went besides compute (stats.overlap): a stage that waits for its
# input while another computes is the bubble; CPU time below compute time is the machine's
# other processes taking the core.
echo "| job | compute s | of it CPU s | wait for input s | for a send buffer s |" \
    "for a credit s (waits) | sending s | sampling s | microbatches in flight: most, mean |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for j in $JOBS; do
    for s in $STAGES; do
        f="$WORK/$j$s.json"
        printf '| %s, %d stage(s) | %s | %s | %s | %s | %s (%s) | %s | %s | %s, %s |\n' "$j" "$s" \
            "$(nums "$f" compute_s)" "$(nums "$f" compute_cpu_s)" "$(nums "$f" wait_s)" \
            "$(nums "$f" buf_wait_s)" "$(nums "$f" credit_wait_s)" \
            "$(sed -n 's/^ *"credit_waits": \([0-9]*\),*$/\1/p' "$f" | paste -sd+ -)" \
            "$(nums "$f" send_s)" "$(nums "$f" sample_s)" \
            "$(sed -n 's/^ *"max_mb_in_flight": \([0-9]*\),*$/\1/p' "$f" | head -n 1)" \
            "$(nums "$f" avg_mb_in_flight | cut -d+ -f1)"
    done
done
echo
# The same jobs in CPU time, which the machine's other processes do not inflate: one stage's
# work against the busiest stage's (what S cores of their own would give, with no bubble), and
# each stage's busy share of its wall time (compute / wall: the rest is waiting). Their product
# estimates the speedup on a quiet machine (for TTFT: 1 / the time ratio); under load it is
# pessimistic, as a stage also waits while its neighbour is descheduled. The estimated tok/s is
# one stage's tokens per CPU second times that speedup, beside what the planner predicted.
echo "| job | CPU s per stage | CPU-time ratio to 1 stage | busy share per stage |" \
    "estimated quiet speedup | tok/s: planned, estimated quiet |"
echo "| --- | --- | ---: | --- | ---: | ---: |"
for j in $JOBS; do
    k=${j}_tok_s
    [ "$j" = ttft ] && k=prefill_tok_s
    c1=$(stage_nums "$WORK/${j}1.json" compute_cpu_s | head -n 1)
    w1=$(stage_nums "$WORK/${j}1.json" compute_s | head -n 1)
    t1=$(tput "$WORK/${j}1.json" "$k")
    for s in $STAGES; do
        f="$WORK/$j$s.json"
        printf '| %s, %d stage(s) | %s | ' "$j" "$s" "$(nums "$f" compute_cpu_s)"
        paste -d' ' <(stage_nums "$f" compute_cpu_s) <(stage_nums "$f" compute_s) \
            <(stage_nums "$f" wall_s) |
            awk -v c1="$c1" -v w1="$w1" -v t1="$t1" -v plan="$(field "$f" "$k")" '
                { busy[NR] = ($3 > 0 ? $2 / $3 : 0); if ($1 > mx) { mx = $1; b = busy[NR] } }
                END { r = (mx > 0 ? c1 / mx : 0); printf "%.2f | ", r
                      for (i = 1; i <= NR; i++) printf "%s%.0f%%", (i > 1 ? "+" : ""), 100 * busy[i]
                      printf " | %.2f | %.1f, %.1f |\n", r * b, plan,
                          (c1 > 0 ? t1 * w1 / c1 : 0) * r * b }'
    done
done
echo
[ -f "$WORK/decode2.json" ] && echo "data plane of the 2-stage decode job (stage 0, then stage 1):" \
    "$(grep -o '"inbox_slots": [0-9]*\|"max_in_flight": [0-9]*\|"bound_bytes": [0-9]*\|"progress_thread": [a-z]*' \
        "$WORK/decode2.json" | tr -d '"' | paste -sd' ' -)"
echo
echo "other processes kept $other of $NPROC cores busy on average during the jobs" \
    "(figures are comparable only when this is near 0)"
echo

same=yes
for s in $STAGES; do
    [ "$s" = 1 ] && continue
    for j in $JOBS; do
        cmp -s "$WORK/${j}1.out" "$WORK/$j$s.out" || same=no
    done
done
n_tok=0
if [ -f "$WORK/decode1.out" ]; then
    n_tok=$(grep -o '"tokens":\[[^]]*\]' "$WORK/decode1.out" | tr -cd , | wc -c)
    n_tok=$((n_tok + $(grep -c '"tokens"' "$WORK/decode1.out")))
fi
echo "greedy tokens identical on 1, 2 and 3 stages: $same ($n_tok decode tokens," \
    "$([ -f "$WORK/prefill1.out" ] && grep -c '"tokens"' "$WORK/prefill1.out" || echo 0) prefill-job tokens compared)"
[ "$same" = yes ]
