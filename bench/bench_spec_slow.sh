#!/usr/bin/env bash
# bench_spec_slow: how long a small client request waits for its answer while another client
# submits large (4.6 MiB) valid jobs back to back, each killed once accepted. Runs
# tests/test_spec_slow's timing test PL_BENCH_RUNS times: windows "quiet/NODES" and "quiet/bad"
# (the machine's own reference, same run), then "large/NODES" (answered by the loop) and
# "large/bad" (a body that is not JSON: refused by the intake itself) with the submitter running;
# per window the answer time p50 / p99 / max (median of the runs) and its ratio to the quiet
# window of the same kind, and the load average (above the core count: measured under load).
#
# With PL_BENCH_REF_BIN (a directory with another build's pipecoord, pipectl, pl-mkmodel and
# libpl_slow_fsync.so) each run is made twice, reference and candidate alternating.
# With PL_BENCH_SLOW_FSYNC_MS=N every sync of the specs file sleeps N ms (tests/slow_fsync.c).
#
# usage: bench/bench_spec_slow.sh [BUILD_DIR]     (default: build; builds nothing)
set -euo pipefail
BUILD=${1:-build}
T=$BUILD/bin/test_spec_slow
[ -x "$T" ] || { echo "bench_spec_slow: no $T; build first" >&2; exit 2; }
B=$(cd "$BUILD/bin" && pwd)
RUNS=${PL_BENCH_RUNS:-3}
REF=${PL_BENCH_REF_BIN:-}
[ -z "$REF" ] || [ -x "$REF/pipecoord" ] || { echo "bench_spec_slow: no $REF/pipecoord" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$RUNS"); do
    for who in ${REF:+ref} new; do
        bin=$B
        [ "$who" = ref ] && bin=$(cd "$REF" && pwd)
        PL_BIN_DIR=$bin PL_SOURCE_DIR=$(pwd) "$T" --jobs=1 --filter='*/small_request_*' 2>&1 |
            grep '^spec_slow:' | sed "s/^/$who run $r /" | tee -a "$out" >&2 || true
    done
done
python3 - "$out" "$RUNS" "$(nproc)" "${REF:+yes}" "${PL_BENCH_SLOW_FSYNC_MS:-real disk}" <<'PY'
import re, statistics, sys
rows, loads = {}, []
for line in open(sys.argv[1]):
    who = line.split()[0]
    m = re.search(r'spec_slow: (\S+)\s+(\d+) small requests\s+answer p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms\s+max\s+([\d.]+) ms\s+\(load average ([\d. ]+)\)', line)
    if m:
        rows.setdefault((who, m.group(1)), []).append([float(x) for x in m.group(3, 4, 5)] + [int(m.group(2))])
        loads.append(m.group(6).split()[0])
med = statistics.median
whos = ['ref', 'new'] if sys.argv[4] == 'yes' else ['new']
print("\nbench_spec_slow: small-request answer times, median of %s runs (ms); specs file sync: %s; "
      "1-min load per window: %s; %s cores" % (sys.argv[2], sys.argv[5], ", ".join(loads), sys.argv[3]))
print("| build | window | answered | p50 | p99 | max | p50 / quiet p50 | max / quiet max |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for who in whos:
    for w in ('quiet/NODES', 'quiet/bad', 'large/NODES', 'large/bad'):
        if (who, w) not in rows:
            print("| %s | %s | none | | | | | |" % (who, w)); continue
        r, q = rows[(who, w)], rows.get((who, 'quiet/' + w.split('/')[1]))
        p50, p99, mx, n = (med([x[i] for x in r]) for i in range(4))
        ref = "%.1f | %.1f" % (p50 / med([x[0] for x in q]), mx / med([x[2] for x in q])) if q else " | "
        print("| %s | %s | %d | %.3f | %.3f | %.3f | %s |" % (who, w, n, p50, p99, mx, ref))
PY
