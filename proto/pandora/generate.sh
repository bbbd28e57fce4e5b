#!/usr/bin/env bash
# Regenerates Sources/PandoraInterfaces/Generated from the Pandora interfaces (Google's bt-test-interfaces), taken
# from the package itself: its wheel ships each .proto's compiled descriptor, never the text, so nothing is copied
# by hand. Needs .venv-lab (ci/setup), protoc, and the two plugins, built once outside this package:
#   swift build -c release --product protoc-gen-swift            (in a checkout of apple/swift-protobuf 1.39.0)
#   swift build -c release --product protoc-gen-grpc-swift-2     (in a checkout of grpc/grpc-swift-protobuf 2.4.1)
# and named by PROTOC_GEN_SWIFT and PROTOC_GEN_GRPC_SWIFT. Records checksums for proto/check.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${PROTOC_GEN_SWIFT:?the path of protoc-gen-swift}" "${PROTOC_GEN_GRPC_SWIFT:?the path of protoc-gen-grpc-swift-2}"
version=$(.venv-lab/bin/python -c "import importlib.metadata as m; print(m.version('bt-test-interfaces'))")
[ "$version" = 0.0.6 ] || { echo "generate.sh: bt-test-interfaces is $version, not 0.0.6" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv-lab/bin/python proto/pandora/descriptors.py "$work/pandora.desc" >/dev/null
out=Sources/PandoraInterfaces/Generated
rm -rf "$out" && mkdir -p "$out"
files=(pandora/host.proto pandora/security.proto pandora/l2cap.proto)
protoc --descriptor_set_in="$work/pandora.desc" \
  --plugin=protoc-gen-swift="$PROTOC_GEN_SWIFT" --swift_opt=Visibility=Public --swift_opt=FileNaming=DropPath --swift_out="$out" \
  --plugin=protoc-gen-grpc-swift="$PROTOC_GEN_GRPC_SWIFT" --grpc-swift_opt=Visibility=Public,FileNaming=DropPath,Server=true,Client=true \
  --grpc-swift_out="$out" "${files[@]}"
printf "bt-test-interfaces==%s\n%s\n" "$version" "$(sha256sum < "$work/pandora.desc" | cut -d" " -f1)" > proto/pandora/VERSION
proto/check.sh --record
