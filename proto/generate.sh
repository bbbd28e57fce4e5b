#!/usr/bin/env bash
# Regenerates Sources/BerylWire/Generated from proto/*.proto and records checksums so that
# ci/test can tell when the committed code is out of step without building the plugin.
# Needs protoc (Debian: protobuf-compiler) and protoc-gen-swift, built once with
#   swift build --product protoc-gen-swift
set -euo pipefail
cd "$(dirname "$0")/.."
plugin="${PROTOC_GEN_SWIFT:-$(swift build --show-bin-path)/protoc-gen-swift}"
[ -x "$plugin" ] || { echo "generate.sh: no protoc-gen-swift at $plugin; run: swift build --product protoc-gen-swift" >&2; exit 1; }
out=Sources/BerylWire/Generated
rm -rf "$out" && mkdir -p "$out"
protoc --plugin=protoc-gen-swift="$plugin" --proto_path=proto \
  --swift_opt=Visibility=Public --swift_out="$out" proto/*.proto
proto/check.sh --record
