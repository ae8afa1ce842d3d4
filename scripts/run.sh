#!/usr/bin/env bash
# The main job: set up (idempotent), build every model in models/ into host
# firmware with SCons, run each model and check its output against the
# reference executor. Extra arguments go to scons (e.g. -j2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
scons -Q -j"$(nproc)" "$@"
python -m kiln check build/host
