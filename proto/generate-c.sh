#!/usr/bin/env bash
# Regenerates clients/c/generated (libberyl's message code) from proto/*.proto with protoc-c (Debian:
# protobuf-c-compiler) and records checksums, so that proto/check.sh can tell when the committed C code is out of
# step with the schema without running the generator in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc-c >/dev/null || { echo "generate-c.sh: no protoc-c; apt-get install protobuf-c-compiler" >&2; exit 1; }
out=clients/c/generated
rm -rf "$out" && mkdir -p "$out"
protoc-c --proto_path=proto --c_out="$out" proto/*.proto
proto/check.sh --record
