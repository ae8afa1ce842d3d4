#!/usr/bin/env bash
# Regenerates the committed FlatBuffers Python bindings of the .kir schema.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/kiln/ir/fb"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flatc --python -o "$tmp" "$root/kiln/ir/kir.fbs"
rm -rf "$out"
mv "$tmp/kiln/ir/fb" "$out"
