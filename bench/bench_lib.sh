# bench_lib.sh: what the cluster benchmarks share, sourced (not run). The caller sets B (the bin
# directory), EP (the coordinator) and WORK (its scratch directory) and names itself in BENCH.

# Wait until N daemons are idle on EP (20 s); true when they are.
bench_wait_idle() { # N
    for _ in $(seq 100); do
        [ "$("$B/pipectl" -c "$EP" -o json nodes 2>/dev/null | grep -c '"state": "idle"' || true)" -ge "$1" ] && return 0
        sleep 0.2
    done
    return 1
}

# Submit WORK/NAME.yaml and wait (at most TIMEOUT s); prints "tok_s tokens seconds" (the job's
# generated tokens over its wall time); its results in WORK/NAME.res, its status in NAME.json.
bench_run_job() { # NAME TIMEOUT
    timeout "$2" "$B/pipectl" -c "$EP" submit "$WORK/$1.yaml" --wait >"$WORK/$1.out" 2>"$WORK/$1.err" ||
        { echo "$BENCH: job $1 failed" >&2; cat "$WORK/$1.err" >&2; exit 1; }
    local id
    id=$(sed -n 's/^job \([0-9]*\) submitted$/\1/p' "$WORK/$1.err" | head -n 1)
    "$B/pipectl" -c "$EP" -o json results "$id" >"$WORK/$1.res"
    "$B/pipectl" -c "$EP" -o json status "$id" >"$WORK/$1.json"
    python3 - "$WORK/$1.res" "$WORK/$1.json" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["results"]
st = json.load(open(sys.argv[2]))
ev = {e["what"]: e["at"] for e in st.get("events", [])}
wall = st["throughput"]["wall_s"] if st.get("throughput") else ev["done"] - ev["running"]
n = sum(len(r["tokens"]) for r in res)
print("%.3f %d %.3f" % (n / wall, n, wall))
PY
}
