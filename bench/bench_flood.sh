#!/usr/bin/env bash
# bench_flood: how long a node's heartbeat waits for the coordinator's answer while clients flood
# it, with and without a job running. Runs tests/test_flood (a probe node heartbeating 10 a
# second through 5 s windows: quiet, bad messages from four clients, the same plus a client
# submitting valid 4.6 MiB jobs in a loop; then, while a decode job runs on two daemons, quiet
# and the whole flood plus large invalid submissions) PL_BENCH_RUNS times and prints each
# window's answer time p50 / p99 / max (the median of the runs) beside the quiet window of the
# same runs (the machine's own reference), the job's token rate per window, and the load average
# (above the core count the figures are "measured under load").
#
# With PL_BENCH_REF_BIN (a directory with another build's pipecoord, pipeld, pipectl,
# pl-generate and pl-mkmodel) each run is made twice, reference and candidate alternating, and
# the table puts the two side by side: a before/after inside one run of the script.
#
# usage: bench/bench_flood.sh [BUILD_DIR]     (default: build; builds nothing)
# env:   PL_BENCH_RUNS=N        runs (default 3)
#        PL_BENCH_REF_BIN=DIR   the reference's binaries (default: none)
#        PL_BENCH_FILTER=GLOB   criterion filter (default: both tests, '*/*')
#        PL_BENCH_SLOW_FSYNC_MS=MS  a slow disk: every fsync of the coordinator's state db
#                               (coord.db and its WAL, not the specs file) sleeps MS first, through
#                               tests/slow_fsync.c (BUILD_DIR/bin/libpl_slow_fsync.so, LD_PRELOAD)
set -euo pipefail

BUILD=${1:-build}
T=$BUILD/bin/test_flood
[ -x "$T" ] || { echo "bench_flood: no $T; build first" >&2; exit 2; }
B=$(cd "$BUILD/bin" && pwd)
RUNS=${PL_BENCH_RUNS:-3}
REF=${PL_BENCH_REF_BIN:-}
FILTER=${PL_BENCH_FILTER:-*/*}
[ -z "$REF" ] || [ -x "$REF/pipecoord" ] || { echo "bench_flood: no $REF/pipecoord" >&2; exit 2; }
SLOW=${PL_BENCH_SLOW_FSYNC_MS:-}
SHIM=$(cd "$BUILD" && pwd)/bin/libpl_slow_fsync.so
[ -z "$SLOW" ] || [ -f "$SHIM" ] || { echo "bench_flood: no $SHIM; build pl_slow_fsync" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$RUNS"); do
    for who in ${REF:+ref} new; do
        bin=$B
        [ "$who" = ref ] && bin=$(cd "$REF" && pwd)
        env ${SLOW:+LD_PRELOAD=$SHIM PL_SLOW_FSYNC_PATH=coord.db PL_SLOW_FSYNC_MS=$SLOW} \
            PL_BIN_DIR=$bin PL_SOURCE_DIR=$(pwd) "$T" --jobs=1 --filter="$FILTER" 2>&1 |
            grep '^flood:' | sed "s/^/$who run $r /" | tee -a "$out" >&2 || true
    done
done
python3 - "$out" "$RUNS" "$(nproc)" "${REF:+yes}" "$SLOW" <<'PY'
import re, statistics, sys
rows, loads, big, rate = {}, [], [], {}
for line in open(sys.argv[1]):
    who = line.split()[0]
    m = re.search(r'flood: (\S+)\s+(\d+) heartbeats\s+answer p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms\s+max\s+([\d.]+) ms\s+flood\s+(\d+) msg/s', line)
    if m:
        rows.setdefault((who, m.group(1)), []).append([float(x) for x in m.group(3, 4, 5, 6)] + [int(m.group(2))])
    m = re.search(r'load average ([\d.]+ [\d.]+ [\d.]+)', line)
    if m:
        loads.append(m.group(1))
    m = re.search(r'job rate quiet (\d+) tok/s.*, flood (\d+) tok/s', line)
    if m:
        rate.setdefault(who, []).append((int(m.group(1)), int(m.group(2))))
    m = re.search(r'large submitter: (\d+) SUBMITs of ([\d.]+) MiB \(([\d.]+) MiB/s\), (\d+) accepted', line)
    if m:
        big.append((who,) + m.groups())
med = lambda xs: statistics.median(xs)
whos = ['ref', 'new'] if sys.argv[4] == 'yes' else ['new']
print("\nbench_flood: heartbeat answer times, median of %s runs (ms); load average per run: %s; %s cores%s"
      % (sys.argv[2], ", ".join(loads), sys.argv[3],
         "; every state-db fsync slowed by %s ms" % sys.argv[5] if sys.argv[5] else ""))
print("| build | window | heartbeats | p50 | p99 | max | flood msg/s | p50 / quiet p50 | max / quiet max |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for who in whos:
    for w, quiet in (('quiet', 'quiet'), ('bad', 'quiet'), ('bad+large', 'quiet'),
                     ('job-quiet', 'job-quiet'), ('job-flood', 'job-quiet')):
        if (who, w) not in rows:
            print("| %s | %s | none answered | | | | | | |" % (who, w))
            continue
        r, q = rows[(who, w)], rows.get((who, quiet))
        p50, p99, mx, fl, n = (med([x[i] for x in r]) for i in range(5))
        ref = "%.2f | %.2f" % (p50 / med([x[0] for x in q]), mx / med([x[2] for x in q])) if q else " | "
        print("| %s | %s | %d | %.3f | %.3f | %.3f | %.0f | %s |" % (who, w, n, p50, p99, mx, fl, ref))
if rate:
    print("\n| build | job tok/s, quiet window | job tok/s, flood window | flood / quiet |")
    print("|---|---:|---:|---:|")
    for who in whos:
        if who in rate:
            q, f = med([x[0] for x in rate[who]]), med([x[1] for x in rate[who]])
            print("| %s | %.0f | %.0f | %.2f |" % (who, q, f, f / q if q else 0))
for b in big:
    print("%s: large submitter: %s SUBMITs of %s MiB (%s MiB/s), %s accepted" % b)
PY
