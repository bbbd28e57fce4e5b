#!/usr/bin/env bash
# Verifies that the generated Swift code matches the .proto files it was generated from.
# --record writes proto/checksums.sha256 (generate.sh does this); without it, compares.
set -euo pipefail
cd "$(dirname "$0")/.."
sums() { sha256sum proto/*.proto Sources/BerylIPC/Generated/*.pb.swift; }
if [ "${1:-}" = "--record" ]; then sums > proto/checksums.sha256; exit 0; fi
if ! diff <(sums) proto/checksums.sha256 >/dev/null; then
  echo "proto/check.sh: generated code is out of date with proto/*.proto:" >&2
  diff <(sums) proto/checksums.sha256 >&2 || true
  echo "run proto/generate.sh and commit the result" >&2
  exit 1
fi
echo "proto: generated code matches the schema"
