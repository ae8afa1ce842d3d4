"""bench/incremental.py on a one-model zoo: the JSON the issue asks for, and the edits doing what they say."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_incremental_bench_writes_its_table_and_json(tmp_path):
    out = tmp_path / "incremental.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench/incremental.py"), "--models", "tiny_cnn", "--pairs", "1",
                           "--edits", "1", "--no-fresh", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["models"] == 1 and r["cold_stage_actions"] == 6 and r["kiln_targets"] == r["plain_targets"] > 20
    assert r["comment_edit_stage_actions"] == 0
    assert r["stage_module_edit_actions"] == 1 and r["fresh_process"] == {}
    for key in ("noop_ratio", "code_edit_seconds", "stage_module_edit_seconds", "cold_seconds", "cold_cpu_seconds"):
        assert r[key] > 0, key
    assert r["cold_cpu_seconds"] > 1  # the workers' and their stages' CPU counts (torch alone loads for longer)
    assert "| comment edit in model.py: stage actions | 0 |" in proc.stdout
