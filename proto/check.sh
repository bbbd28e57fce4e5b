#!/usr/bin/env bash
# Verifies that the generated Swift and C code matches what it was generated from: proto/*.proto for the IPC, the pinned
# bt-test-interfaces release (proto/pandora/VERSION) for the Pandora interfaces.
# --record writes proto/checksums.sha256 (generate.sh does this); without it, compares.
set -euo pipefail
cd "$(dirname "$0")/.."
sums() { sha256sum proto/*.proto Sources/BerylWire/Generated/*.pb.swift clients/c/generated/*.pb-c.[ch] proto/pandora/VERSION proto/pandora/descriptors.py Sources/PandoraInterfaces/Generated/*.swift; }
if [ "${1:-}" = "--record" ]; then sums > proto/checksums.sha256; exit 0; fi
if ! diff <(sums) proto/checksums.sha256 >/dev/null; then
  echo "proto/check.sh: generated code is out of date with proto/*.proto:" >&2
  diff <(sums) proto/checksums.sha256 >&2 || true
  echo "run proto/generate.sh, proto/generate-c.sh (or proto/pandora/generate.sh) and commit the result" >&2
  exit 1
fi
# The descriptors the Pandora code was generated from are the installed package's (when ci/setup has made .venv-lab).
if [ -x .venv-lab/bin/python ]; then
  desc=$(mktemp)
  .venv-lab/bin/python proto/pandora/descriptors.py "$desc" >/dev/null
  if [ "$(sha256sum < "$desc" | cut -d" " -f1)" != "$(sed -n 2p proto/pandora/VERSION)" ]; then
    rm -f "$desc"
    echo "proto/check.sh: the installed bt-test-interfaces' descriptors differ from those the Pandora code was generated from" >&2
    exit 1
  fi
  rm -f "$desc"
fi
echo "proto: generated code matches the schemas"
