#!/bin/sh
# Distributed training over UCX on 1, 2 and 3 stages (1 thread each) per schedule: tokens/s vs
# 1 stage, measured vs predicted bubble, peak stash vs predicted. Usage: bench/bench_train_pipe.sh
# [BUILD_DIR]. The load average is printed before and after: on a shared machine the measured
# columns are "measured under load".
set -eu
build=${1:-build}
bin="$build/bin/bench_train_pipe"
[ -x "$bin" ] || { echo "bench_train_pipe.sh: build $bin first" >&2; exit 2; }
echo "machine: $(nproc) cores; loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
OPENBLAS_NUM_THREADS=1 "$bin"
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
