#!/usr/bin/env bash
# Regenerates the committed FlatBuffers Python bindings of the .kir schema.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/toolchain/ir/fb"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flatc --python -o "$tmp" "$root/toolchain/ir/kir.fbs"
rm -rf "$out"
mv "$tmp/toolchain/ir/fb" "$out"
