"""bench/scale.py: the JSON it writes, on a short chain, one light model and one that does not exist."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT
from kiln.stages import STAGES


def test_scale_bench_writes_its_table_and_json(tmp_path):
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench/scale.py"), "--chains", "8", "--models", "squeezenet,missing",
                           "--repeat", "1", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    stages = {st.name for st in STAGES}
    assert set(result) == {"chains", "ratio_3000_1000", "light_models"} and result["ratio_3000_1000"] == {}
    assert set(result["chains"]["8"]["stage_seconds"]) == set(result["chains"]["8"]["stage_cpu_seconds"]) == stages
    ok, missing = result["light_models"]
    assert ok["model"] == "squeezenet" and ok["ok"] and ok["error"] is None
    assert set(ok["stage_seconds"]) == set(ok["peak_rss_mb"]) == stages and all(v > 0 for v in ok["peak_rss_mb"].values())
    assert ok["weight_mb"] == 4.7 and ok["rss_bound_mb"] == 314.1  # SqueezeNet 1.1: 1,235,496 float weights
    assert not missing["ok"] and missing["error"].startswith("import: kiln: error: ") and missing["error"].endswith("no such file or folder")
    assert missing["stage_seconds"] == {} and missing["weight_mb"] is None
    assert "| squeezenet | 4.7 |" in proc.stdout and "| 3000/1000 |" not in proc.stdout
