"""bench/run.py: a model that does not exist is one line. tests/test_docs.py runs the documented command on
tiny_cnn and checks every number of its row against an independent source."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_unknown_model_is_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "bench/run.py"), "no_such_model", "--no-m4"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert err.startswith("bench: error: unknown model(s) no_such_model") and len(err.splitlines()) == 1
