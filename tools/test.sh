#!/usr/bin/env bash
# The README's test command: install what is missing, build, run the whole criterion suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cd "${PL_BUILD_DIR:-build}"
ctest --output-on-failure -j1 "$@"
