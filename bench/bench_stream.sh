#!/usr/bin/env bash
# bench_stream: the activation stream (bench_stream: pooled registered send buffers, inboxes,
# credits, progress threads, as the stages run it) beside ucx_perftest's tag_bw and tag_lat (with
# -e: error-handling endpoints, as ours) on the same path and sizes, and this host's memcpy
# bandwidth at each size: shared memory on this host, and TCP between two network namespaces
# with their own UTS/IPC namespaces (root only; skipped otherwise); last, the CPU a stage
# waiting for input takes.
#
# usage: bench/bench_stream.sh [BUILD_DIR]      (needs ucx_perftest: Debian's ucx-utils)
# env:   PL_BENCH_RUNS=N   runs per figure, the median printed (default 3)
#        PL_BENCH_CPUS=A,B receiver / server on CPU A, sender / client on B (default: the first
#                          two CPUs this script may use; "none": unpinned)
#        PL_BENCH_NICE=N   run every measured process in a session (scheduler autogroup) of its
#                          own at this niceness (root may give a negative one: on a machine
#                          shared with builds they then get their cores; default 0)
#        PL_BENCH_SIZES="4096 ..."  the bandwidth rows' sizes (default 4 KiB to 16 MiB; "" none)
#        PL_BENCH_PATHS="shm tcp"   the paths measured (default both; tcp needs root)
#        PL_BENCH_MIB=N    MiB per bandwidth run, ours and ucx_perftest alike (default 256)
#        PL_BENCH_WINDOW=N ucx_perftest's sends in flight (-O; default: its own, 32 for tag_bw;
#                          the stream keeps PL_BENCH_CREDITS, 2, in flight)
# Each row's runs alternate stream / ucx_perftest, and every run's figure is printed beside the
# medians.
set -euo pipefail

BUILD=${1:-build}
B=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "bench_stream: no $BUILD/bin" >&2; exit 2; }
[ -x "$B/bench_stream" ] || { echo "bench_stream: build bench_stream first" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "bench_stream: ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 2; }
RUNS=${PL_BENCH_RUNS:-3}
SIZES=${PL_BENCH_SIZES-4096 65536 1048576 4194304 16777216}
LAT_SIZE=64
NS_A=plbs$$a
NS_B=plbs$$b
K=$((200 + $$ % 50))
NETNS=no
if [ -z "${PL_BENCH_CPUS:-}" ] && command -v taskset >/dev/null; then
    PL_BENCH_CPUS=$(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
        awk -F- '{ for (i = $1; i <= ($2 == "" ? $1 : $2); i++) print i }' | head -n 2 | paste -sd, -)
    [[ "$PL_BENCH_CPUS" == *,* ]] || PL_BENCH_CPUS=none
fi
export PL_BENCH_CPUS
NICE=${PL_BENCH_NICE:-0}
# hi CMD...: CMD in its own session at niceness NICE (with autogroups, niceness counts only
# within a session); as it is when NICE is 0.
hi() {
    if [ "$NICE" = 0 ]; then "$@"; return; fi
    setsid bash -c 'echo "$0" >/proc/$$/autogroup 2>/dev/null; exec nice -n "$0" "$@"' "$NICE" "$@"
}
PIN_A=() PIN_B=()
if [ "$PL_BENCH_CPUS" != none ]; then
    PIN_A=(taskset -c "${PL_BENCH_CPUS%,*}")
    PIN_B=(taskset -c "${PL_BENCH_CPUS#*,}")
fi

cleanup() {
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT

if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v unshare >/dev/null &&
    ip netns add "$NS_A" 2>/dev/null && ip netns add "$NS_B"; then
    ip link add "v$$a" type veth peer name "v$$b"
    ip link set "v$$a" netns "$NS_A"
    ip link set "v$$b" netns "$NS_B"
    ip -n "$NS_A" addr add "10.214.$K.1/24" dev "v$$a"
    ip -n "$NS_B" addr add "10.214.$K.2/24" dev "v$$b"
    for n in "$NS_A" "$NS_B"; do ip -n "$n" link set lo up; done
    ip -n "$NS_A" link set "v$$a" up
    ip -n "$NS_B" link set "v$$b" up
    NETNS=yes
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print 0 }'; }

# ucx_perftest: one server, one client; MB/s (tag_bw, overall) or usec (tag_lat: typical, the
# median of its iterations, then overall, the whole run's mean).
perftest() { # PATH TEST SIZE ITERS: a number (two for tag_lat), retried once (a server that did
    local v  # not come up)
    for _ in 1 2; do
        v=$(perftest_once "$@")
        if [[ "$v" =~ ^[0-9.]+( [0-9.]+)?$ ]]; then echo "$v"; return; fi
    done
    echo 0 0
}

perftest_once() {
    local port=$((20000 + RANDOM % 30000)) srv cli host=127.0.0.1
    srv=(ucx_perftest -p "$port")
    local win=
    [ -n "${PL_BENCH_WINDOW:-}" ] && [ "$2" = tag_bw ] && win="-O $PL_BENCH_WINDOW"
    # shellcheck disable=SC2206
    cli=(ucx_perftest "$host" -p "$port" -t "$2" -s "$3" -n "$4" -w $(($4 / 10 + 1)) -e -f $win)
    if [ "$1" = tcp ]; then
        srv=(ip netns exec "$NS_A" unshare --uts --ipc -- sh -c "hostname plbsa; exec ucx_perftest -p $port")
        cli=(ip netns exec "$NS_B" unshare --uts --ipc -- sh -c "hostname plbsb; exec ucx_perftest 10.214.$K.1 -p $port -t $2 -s $3 -n $4 -w $(($4 / 10 + 1)) -e -f $win")
    fi
    hi "${PIN_A[@]}" "${srv[@]}" >/dev/null 2>&1 &
    local spid=$!
    sleep 0.4
    local out
    out=$(hi timeout 120 "${PIN_B[@]}" "${cli[@]}" 2>/dev/null | tail -n 1) || true
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    # columns: iterations, lat 50%, lat avg (the last report's interval), lat overall (the whole
    # run: as ours, total time / iterations / 2), bw avg, bw overall, rate avg, rate overall
    if [ "$2" = tag_lat ]; then echo "$out" | awk '{ print $2, $4 }'; else echo "$out" | awk '{ print $6 }'; fi
}

ours() { # PATH MODE SIZE ITERS
    if [ "$1" = tcp ]; then
        hi "$B/bench_stream" "$2" "$3" "$4" "$NS_A" "$NS_B"
    else
        hi "$B/bench_stream" "$2" "$3" "$4"
    fi
}

iters_for() { # SIZE: about PL_BENCH_MIB (256) MiB per run, at least 20 messages: at 4 GB/s
    # 64 MiB took 16 ms, where one scheduler tick or a late wake-up moved a run by 20% and more
    local n=$((${PL_BENCH_MIB:-256} * 1048576 / $1))
    [ "$n" -lt 20 ] && n=20
    [ "$n" -gt 20000 ] && n=20000
    echo "$n"
}

read -r l1 l2 l3 _ </proc/loadavg
echo "machine: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores," \
    "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $l1 $l2 $l3; UCX $(ucx_info -v | sed -n 's/^# Version //p' | head -n 1)"
echo "each figure: the median of $RUNS runs of ${PL_BENCH_MIB:-256} MiB (ours and ucx_perftest alternating);" \
    "ucx_perftest with -e (error-handling endpoints), ${PL_BENCH_WINDOW:-its default window (32)} sends in flight," \
    "the stream ${PL_BENCH_CREDITS:-2} (credits); receiver and sender pinned to CPUs $PL_BENCH_CPUS; niceness $NICE"
echo
paths=${PL_BENCH_PATHS:-shm tcp}
if [ "$NETNS" != yes ] && [[ "$paths" == *tcp* ]]; then
    echo "note: not root or no ip/unshare: TCP between namespaces skipped"
    paths=${paths//tcp/}
fi
for p in $paths; do
    echo "### $p $([ "$p" = tcp ] && echo "(veth between two network namespaces, own UTS/IPC)" || echo "(one host)")"
    echo
    echo "| message | activation stream | ucx_perftest | ratio | memcpy on this host | stream / memcpy | every run: stream; tag_bw (MB/s) |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | :--- |"
    for s in $SIZES; do
        n=$(iters_for "$s")
        # the two alternate run by run, so that a slow spell of the machine hits both alike
        ra= rb=
        for _ in $(seq "$RUNS"); do
            ra="$ra $(ours "$p" bw "$s" "$n")"
            rb="$rb $(perftest "$p" tag_bw "$s" "$n")"
        done
        a=$(echo $ra | tr ' ' '\n' | median)
        b=$(echo $rb | tr ' ' '\n' | median)
        c=$(for _ in $(seq "$RUNS"); do hi "$B/bench_stream" memcpy "$s" "$((n * 4))"; done | median)
        printf '| %d B | %.0f MB/s | %.0f MB/s (tag_bw) | %s | %.0f MB/s | %s | %s; %s |\n' "$s" "$a" "$b" \
            "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')" "$c" \
            "$(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.2f", (c > 0 ? a / c : 0) }')" \
            "$(echo $ra | awk '{ for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? " " : ""), $i }')" \
            "$(echo $rb | awk '{ for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? " " : ""), $i }')"
    done
    # each run: the median round trip's one-way time, then the mean (ours and tag_lat's alike)
    la=$(for _ in $(seq "$RUNS"); do ours "$p" lat "$LAT_SIZE" 2000; done)
    lb=$(for _ in $(seq "$RUNS"); do perftest "$p" tag_lat "$LAT_SIZE" 2000; done)
    for col in 1 2; do
        a=$(echo "$la" | awk -v c=$col '{ print $c }' | median)
        b=$(echo "$lb" | awk -v c=$col '{ print $c }' | median)
        printf '| %d B one-way latency, %s | %.1f us | %.1f us (tag_lat %s) | %s |\n' "$LAT_SIZE" \
            "$([ $col = 1 ] && echo median || echo mean)" "$a" "$b" \
            "$([ $col = 1 ] && echo typical || echo overall)" \
            "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
    done
    echo
done
# What a stage waiting for input costs (its waits spin PL_UCX_SPIN_US, then sleep).
a=$(for _ in $(seq "$RUNS"); do hi "$B/bench_stream" idle 2000 1; done | median)
echo "a stage waiting 2 s for input: $a ms of CPU per second (all its threads)"
