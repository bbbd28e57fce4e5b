#!/usr/bin/env bash
# Builds the libFuzzer targets with address sanitizer and runs each for a bounded time on a copy of
# its committed corpus (Fuzz/Corpus/NAME); a crash or a broken invariant fails the run.
# Usage: Fuzz/run.sh [SECONDS_PER_TARGET]
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-20}"
# Beryl is a path dependency, and this package's build does not notice files added to its targets (a stale module
# then fails to compile): start clean, which costs about 20 s.
rm -rf .build
swift build -c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
swift build -c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library >/dev/null
bin=$(swift build -c debug --show-bin-path)
for name in ATTServer L2CAP CreditBased JSONValue; do
  scratch=$(mktemp -d /tmp/beryl-fuzz-XXXXXX)
  echo "fuzz: $name for ${seconds}s"
  if ! "$bin/Fuzz$name" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$scratch/" "$scratch" "Corpus/$name" \
      > "$scratch/log" 2>&1; then
    tail -40 "$scratch/log"
    echo "fuzz: $name FAILED (artifacts in $scratch)"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|Done" "$scratch/log" | tail -2 | sed "s/^/fuzz: $name: /"
  rm -rf "$scratch"
done
