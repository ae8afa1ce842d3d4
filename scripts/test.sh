#!/usr/bin/env bash
# The test suite: set up (idempotent), then pytest. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
# One xdist worker per core, at most 8: each worker may hold a PyTorch import (~0.5 GB).
workers="$(nproc)"
[ "$workers" -le 8 ] || workers=8
python -m pytest -n "$workers" -q "$@"
