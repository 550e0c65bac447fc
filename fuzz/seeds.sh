#!/usr/bin/env bash
# Rebuilds the committed fuzz corpora (`fuzz/seeds/`) of the protocol
# targets from the fixtures in tests/fixtures/megamind/ (text format, the
# type named on the first line): their text, binary and JSON forms,
# converted by the server's own `convert`.
set -euo pipefail
cd "$(dirname "$0")/.."

fixtures=tests/fixtures/megamind
seeds=fuzz/seeds
cargo build --quiet --bin megamind-scenario
convert() { target/debug/megamind-scenario convert "$@"; }

# The order of TYPES in fuzz_targets/text_round_trip.rs.
type_index() {
    case "$1" in
        TScenarioRunRequest) echo 0 ;; TScenarioApplyRequest) echo 1 ;;
        TScenarioRunResponse) echo 2 ;; TScenarioContinueResponse) echo 3 ;;
        TScenarioCommitResponse) echo 4 ;; TScenarioApplyResponse) echo 5 ;;
        *) echo "no round-trip index for $1" >&2; exit 1 ;;
    esac
}

mkdir -p "$seeds"/{decode_binary,decode_json,decode_text,text_round_trip}
for fixture in "$fixtures"/*.pb.txt; do
    name=$(basename "$fixture" .pb.txt)
    type=$(head -n1 "$fixture" | sed -E 's/^# (T[A-Za-z]+).*/\1/')
    binary=$(mktemp)
    convert -t "$type" --from text --to binary <"$fixture" >"$binary"
    { printf "\\x$(printf %02x "$(type_index "$type")")"; cat "$binary"; } >"$seeds/text_round_trip/$name"
    if [[ $name == *_request ]]; then
        cp "$fixture" "$seeds/decode_text/$name.txt"
        cat "$binary" >"$seeds/decode_binary/$name.pb"
        convert -t "$type" --from text --to json <"$fixture" >"$seeds/decode_json/$name.json"
    fi
    rm "$binary"
done
echo "seeds written under $seeds/"
