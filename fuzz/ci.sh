#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS, 30 by default)
# from its seeds, two targets at a time. Skips, saying why, without the
# nightly toolchain; installs cargo-fuzz when missing; fails on a crash,
# leaving the input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${FUZZ_SECONDS:-30}
# No sanitizer by default: the crates under test have no `unsafe` code, and
# what the targets look for (panics, hangs, memory blowing up) libFuzzer
# finds alone. The address sanitizer (FUZZ_SANITIZER=address) costs a third
# more build time and runs several times fewer inputs a second.
sanitizer=${FUZZ_SANITIZER:-none}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: skipped, the nightly toolchain is not installed (rustup toolchain install nightly)"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

targets=($(cargo +nightly fuzz list))
# Two targets at a time, one core each: built one after the other (the
# dependencies they share are built once), run side by side, and their
# binaries (about 100 MB each) removed after their run.
bin_dir="target/$(rustc -vV | sed -n 's/^host: //p')/release"
fuzz() {
    local target=$1 log=$2
    mkdir -p "corpus/$target"
    # Fresh inputs go to corpus/ (not kept in git); seeds/ is only read.
    # -timeout: one input taking longer than that is a finding too.
    cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
    pair=("${targets[@]:i:2}")
    for target in "${pair[@]}"; do
        cargo +nightly fuzz build --sanitizer "$sanitizer" "$target"
    done
    pids=() logs=()
    for target in "${pair[@]}"; do
        echo "fuzz: $target for ${seconds}s (sanitizer: $sanitizer)"
        logs+=("$(mktemp)")
        fuzz "$target" "${logs[-1]}" &
        pids+=($!)
    done
    failed=""
    for j in "${!pair[@]}"; do
        target=${pair[j]} log=${logs[j]} status=0
        wait "${pids[j]}" || status=$?
        echo "fuzz: $target:"
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log" || true
        if [[ $status -ne 0 ]]; then
            tail -n 60 "$log" >&2
            echo "fuzz: $target failed (exit $status); the input is in fuzz/artifacts/$target/" >&2
            failed=1
        fi
        rm -f "$log" "$bin_dir/$target"
    done
    if [[ -n $failed ]]; then
        exit 1
    fi
done
echo "fuzz: every target ran ${seconds}s without a crash"
