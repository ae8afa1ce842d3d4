"""bench/run.py: one small model through the whole table, every number checked against an independent source."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from test_end_to_end import zoo_module
from kiln.cli import main as kiln
from kiln.ir import load
from kiln.stages import STAGES
from kiln.target.macs import graph_macs

MODEL = "tiny_cnn"
KEYS = {"model", "params", "macs", "weight_bytes", "code_bytes", "arena_bytes", "lower_bound_bytes", "arena_ratio",
        "stage_seconds", "compile_seconds", "m4_instructions", "m4_instructions_per_mac", "m4_samples", "sqnr_db",
        "top1_agreement", "accuracy"}


def bench(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "bench/run.py"), *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    proc = bench(MODEL, "--repeat", "1", "--work", str(tmp / "work"), "--json", str(tmp / "rows.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp / "rows.json").read_text())
    return proc.stdout, rows, tmp / "work" / MODEL


def test_row_has_every_key_and_the_table_shows_it(result):
    table, rows, _ = result
    assert [r["model"] for r in rows] == [MODEL]
    assert set(rows[0]) == KEYS
    assert set(rows[0]["stage_seconds"]) == {st.name for st in STAGES}
    assert all(s > 0 for s in rows[0]["stage_seconds"].values())
    assert rows[0]["compile_seconds"] == pytest.approx(sum(rows[0]["stage_seconds"].values()), abs=0.01)
    lines = table.splitlines()
    assert lines[0].startswith("| model |") and lines[2].startswith(f"| {MODEL} | {rows[0]['params']:,} |")


def test_numbers_agree_with_the_planned_graph_and_the_sources(result):
    _, rows, build = result
    row = rows[0]
    planned = load(build / "planned.kir")
    assert row["arena_bytes"] == planned.meta["arena_size"]
    assert row["lower_bound_bytes"] == planned.meta["lower_bound"] <= row["arena_bytes"]
    assert row["macs"] == graph_macs(planned)
    header = (build / f"{MODEL}.h").read_text()
    assert row["weight_bytes"] == int(re.search(r"_WEIGHT_BYTES (\d+)u", header).group(1))
    net = zoo_module(MODEL).model()
    assert row["params"] == sum(p.numel() for p in net.parameters())  # tiny_cnn has no batch norm to fold


def test_cortex_m4_and_accuracy_columns(result, tmp_path):
    _, rows, build = result
    row = rows[0]
    assert row["m4_samples"] >= 1 and row["m4_instructions"] > row["macs"]
    assert row["m4_instructions_per_mac"] == pytest.approx(row["m4_instructions"] / row["macs"], abs=0.01)
    assert kiln(["report", str(build), "--json", str(tmp_path / "r.json")]) == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    assert row["sqnr_db"] == rep["outputs"][load(build / "quantized.kir").outputs[0]]
    assert row["top1_agreement"] == rep["top1_agreement"]
    assert row["accuracy"] is None  # tiny_cnn has no held-out split


def test_unknown_model_is_one_line():
    proc = bench("no_such_model", "--no-m4")
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert err.startswith("bench: error: unknown model(s) no_such_model") and len(err.splitlines()) == 1
