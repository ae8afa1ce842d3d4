#!/usr/bin/env bash
# The test suite: set up (idempotent), then pytest. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
python -m pytest -n "$(nproc)" -q "$@"
