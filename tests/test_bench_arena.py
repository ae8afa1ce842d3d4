"""bench/arena.py: one row per model with the planner's numbers, and the JSON list the brief names."""
from __future__ import annotations

import importlib.util
import json

import pytest

from model_builds import ROOT, ModelBuilds, shared_root
from kiln.errors import KilnError
from kiln.ir import load
from kiln.plan import plan


def bench_module():
    spec = importlib.util.spec_from_file_location("kiln_bench_arena", ROOT / "bench" / "arena.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> ModelBuilds:
    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models"))


def check_rows(rows: list[dict], builds: ModelBuilds, printed: str) -> None:
    for row in rows:
        assert {"model", "arena_bytes", "lower_bound_bytes", "weight_bytes", "code_bytes"} <= set(row)
        planned = load(builds.variant(row["model"], "plain") / "planned.kir")
        assert row["arena_bytes"] == planned.meta["arena_size"] and row["lower_bound_bytes"] == planned.meta["lower_bound"]
        assert row["weight_bytes"] == sum(t.nbytes for t in planned.tensors.values() if t.is_constant)
        assert row["code_bytes"] > 0 and row["lz4_weight_bytes"] < row["weight_bytes"]
        assert row["given_order_arena_bytes"] >= row["arena_bytes"]
        assert f"{row['model']:<20} {row['arena_bytes']:>8}" in printed


def test_compiles_and_reports_a_model(builds, tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench_module().main(["tiny_cnn", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["model"] for r in rows] == ["tiny_cnn"]
    check_rows(rows, builds, capsys.readouterr().out)


def test_reads_built_models(builds, tmp_path, capsys):
    (tmp_path / "kws_dscnn").symlink_to(builds.variant("kws_dscnn", "plain"))
    out = tmp_path / "rows.json"
    assert bench_module().main(["kws_dscnn", "--build-root", str(tmp_path), "--json", str(out)]) == 0
    check_rows(json.loads(out.read_text()), builds, capsys.readouterr().out)


def test_unknown_model_is_one_line_error(capsys):
    assert bench_module().main(["no_such_model"]) == 1
    assert capsys.readouterr().err.startswith("arena: error: unknown model(s) no_such_model")


def test_frontier_rows_trade_arena_for_macs_and_are_reachable(builds, tmp_path, capsys):
    """Each row of the frontier is a smaller arena for more work (recomputed MACs, MACs off a fast path, bytes
    copied by layers run over their input), and its arena met as a budget."""
    (tmp_path / "kws_dscnn").symlink_to(builds.variant("kws_dscnn", "plain"))
    assert bench_module().main(["kws_dscnn", "--build-root", str(tmp_path), "--frontier"]) == 0
    rows = [tuple(int(v) for v in line.split()[:4]) for line in capsys.readouterr().out.splitlines()[2:]]
    assert len(rows) >= 2
    assert all(a[0] > b[0] and sum(a[1:]) < sum(b[1:]) for a, b in zip(rows, rows[1:]))  # extra + slow MACs + bytes copied
    lowered = load(tmp_path / "kws_dscnn" / "lowered.kir")
    config = dict(builds.config("kws_dscnn")["plan"], io_in_arena=True)
    for arena, extra, _, _ in (rows[0], rows[-1]):
        met = plan(lowered, dict(config, budget=arena))
        assert met.meta["arena_size"] <= arena and met.meta.get("extra_macs", 0) <= extra  # none: the layer-by-layer plan
    with pytest.raises(KilnError, match=rf": arena {rows[-1][0]} bytes exceeds plan.budget {rows[-1][0] - 1}; the smallest"):
        plan(lowered, dict(config, budget=rows[-1][0] - 1))
