#!/usr/bin/env bash
# bench_flood: how long a node's heartbeat waits for the coordinator's answer while clients flood
# it. Runs tests/test_flood (a probe node heartbeating 10 a second through three 5 s windows:
# quiet, bad messages from four clients, the same plus a client submitting valid 4.6 MiB jobs in
# a loop) PL_BENCH_RUNS times and prints each window's answer time p50 / p99 / max (the median of
# the runs) beside the quiet window of the same runs, the machine's own reference, and the load
# average (above the core count the figures are "measured under load").
#
# usage: bench/bench_flood.sh [BUILD_DIR]     (default: build; builds nothing)
# env:   PL_BENCH_RUNS=N   runs (default 3)
set -euo pipefail

BUILD=${1:-build}
T=$BUILD/bin/test_flood
[ -x "$T" ] || { echo "bench_flood: no $T; build first" >&2; exit 2; }
B=$(cd "$BUILD/bin" && pwd)
RUNS=${PL_BENCH_RUNS:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$RUNS"); do
    PL_BIN_DIR=$B PL_SOURCE_DIR=$(pwd) "$T" --jobs=1 2>&1 | grep '^flood:' | sed "s/^/run $r /" | tee -a "$out" >&2
done
python3 - "$out" "$RUNS" "$(nproc)" <<'PY'
import re, statistics, sys
rows, loads, big = {}, [], []
for line in open(sys.argv[1]):
    m = re.search(r'flood: (\S+)\s+(\d+) heartbeats\s+answer p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms\s+max\s+([\d.]+) ms\s+flood\s+(\d+) msg/s', line)
    if m:
        rows.setdefault(m.group(1), []).append([float(x) for x in m.group(3, 4, 5, 6)] + [int(m.group(2))])
    m = re.search(r'load average ([\d.]+ [\d.]+ [\d.]+)', line)
    if m:
        loads.append(m.group(1))
    m = re.search(r'large submitter: (\d+) SUBMITs of ([\d.]+) MiB \(([\d.]+) MiB/s\), (\d+) accepted', line)
    if m:
        big.append(m.groups())
med = lambda xs: statistics.median(xs)
q = rows.get('quiet')
print("\nbench_flood: heartbeat answer times, median of %s runs (ms); load average per run: %s; %s cores"
      % (sys.argv[2], ", ".join(loads), sys.argv[3]))
print("| window | heartbeats | p50 | p99 | max | flood msg/s | p50 / quiet p50 | max / quiet max |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for w in ('quiet', 'bad', 'bad+large'):
    if w not in rows:
        print("| %s | none answered | | | | | | |" % w)
        continue
    r = rows[w]
    p50, p99, mx, fl, n = (med([x[i] for x in r]) for i in range(5))
    ref = "%.2f | %.2f" % (p50 / med([x[0] for x in q]), mx / med([x[2] for x in q])) if q else " | "
    print("| %s | %d | %.3f | %.3f | %.3f | %.0f | %s |" % (w, n, p50, p99, mx, fl, ref))
for b in big:
    print("large submitter: %s SUBMITs of %s MiB (%s MiB/s), %s accepted" % b)
PY
