#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS, 30 by default)
# from its seeds, one target at a time. Skips, saying why, without the
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

targets=$(cargo +nightly fuzz list)
# One target built at a time, its binary removed after its run: the
# binaries are about 100 MB each, and the dependencies they share are
# built once either way.
bin_dir="target/$(rustc -vV | sed -n 's/^host: //p')/release"
for target in $targets; do
    echo "fuzz: $target for ${seconds}s (sanitizer: $sanitizer)"
    mkdir -p "corpus/$target"
    # Fresh inputs go to corpus/ (not kept in git); seeds/ is only read.
    # -timeout: one input taking longer than that is a finding too.
    log=$(mktemp)
    status=0
    cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log" || true
    if [[ $status -ne 0 ]]; then
        tail -n 60 "$log" >&2
        echo "fuzz: $target failed (exit $status); the input is in fuzz/artifacts/$target/" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log" "$bin_dir/$target"
done
echo "fuzz: every target ran ${seconds}s without a crash"
