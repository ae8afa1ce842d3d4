"""The pass manager: fixed point, rewrite cycles stopped, verification, logging, dumps, canonical order."""
import random

import pytest

from graphs import Builder
from kiln.errors import KilnError
from kiln.ir import dumps, load
from kiln.ir.graph import Graph
from kiln.ir.verify import VerifyError
from kiln.normalize.manager import Pass, canonicalize, run_passes


def _renamer(name: str, old: str, new: str) -> Pass:
    def run(graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        hits = [n for n in g.nodes if n.op == old]
        for n in hits:
            n.op = new
        return g, bool(hits)

    return Pass(name, run)


def _graph() -> Graph:
    b = Builder()
    x = b.input("x", (2, 3))
    return b.output(b.op("Tanh", [b.op("Relu", [x])]), b.op("Sigmoid", [x]))


def test_a_cycle_of_rewrites_is_stopped_with_the_passes_named() -> None:
    passes = [_renamer("relu_to_sigmoid", "Relu", "Sigmoid"), _renamer("idle", "Exp", "Exp"), _renamer("sigmoid_to_relu", "Sigmoid", "Relu")]
    with pytest.raises(KilnError, match=r"no fixed point after 5 rounds.*: relu_to_sigmoid, sigmoid_to_relu$"):
        run_passes(_graph(), passes, max_rounds=5)


def test_runs_until_a_round_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    passes = [_renamer("sigmoid_to_tanh", "Sigmoid", "Tanh"), _renamer("relu_to_sigmoid", "Relu", "Sigmoid")]
    g = _graph()
    out = run_passes(g, passes, log=True)
    assert sorted(n.op for n in out.nodes) == ["Tanh", "Tanh", "Tanh"]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].split()[1:5] for line in lines] == [
        ["round", "1", "pass", "sigmoid_to_tanh"], ["round", "1", "pass", "relu_to_sigmoid"],
        ["round", "2", "pass", "sigmoid_to_tanh"], ["round", "2", "pass", "relu_to_sigmoid"],
        ["round", "3", "pass", "sigmoid_to_tanh"], ["round", "3", "pass", "relu_to_sigmoid"],
    ]
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["changed", "changed", "changed", "unchanged", "unchanged", "unchanged"]
    assert [n.op for n in g.nodes] == ["Relu", "Tanh", "Sigmoid"]


def test_checking_names_the_pass_that_broke_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        g.nodes = g.nodes[1:]  # drops the Relu that the Tanh reads
        return g, True

    with pytest.raises(VerifyError, match=r"after pass broken \(round 1\): .*used before it is defined"):
        run_passes(_graph(), [Pass("broken", broken)], check=True)
    monkeypatch.setenv("KILN_VERIFY", "1")
    with pytest.raises(VerifyError, match="after pass broken"):
        run_passes(_graph(), [Pass("broken", broken)])


def test_dumps_the_graph_after_every_pass(tmp_path) -> None:
    passes = [_renamer("relu_to_tanh", "Relu", "Tanh"), _renamer("idle", "Exp", "Exp")]
    out = run_passes(_graph(), passes, dump_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r01_01_relu_to_tanh.kir", "r01_02_idle.kir", "r02_01_relu_to_tanh.kir", "r02_02_idle.kir"]
    assert dumps(load(tmp_path / "r02_02_idle.kir")) == dumps(out)


def test_canonical_order_ignores_how_the_nodes_were_listed() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    left = b.op("Relu", [b.op("Tanh", [x])])
    right = b.op("Sigmoid", [b.op("Neg", [x])])
    b.op("Exp", [x])  # dead: reaches no output
    g = b.output(b.op("Add", [left, right]))
    want = dumps(canonicalize(g))
    for seed in range(5):
        nodes = list(g.nodes)
        random.Random(seed).shuffle(nodes)
        shuffled = Graph(g.name, dict(reversed(list(g.tensors.items()))), nodes, g.inputs, g.outputs)
        assert dumps(canonicalize(shuffled)) == want
    assert [n.op for n in canonicalize(g).nodes] == ["Tanh", "Relu", "Neg", "Sigmoid", "Add", "Exp"]
