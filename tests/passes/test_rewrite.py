"""The Rewriter: copy-on-write, a walk that sees edits as the old in-place editor did, and indexes that stay true."""
import numpy as np

from graphs import Builder
from kiln.ir import dumps
from kiln.ir.graph import Graph
from kiln.normalize.passes import cancel_transposes, fold_batchnorm
from kiln.normalize.rewrite import Rewriter


def _chain() -> Graph:
    b = Builder()
    x = b.input("x", (2, 3))
    a = b.op("Relu", [x], name="a")
    s = b.op("Sigmoid", [a], name="s")
    m = b.op("Mul", [a, s], name="m")
    t = b.op("Tanh", [m], name="t")
    return b.output(b.op("Add", [t, t], name="add"))


def _indexes_agree(rw: Rewriter, tensors: list[str]) -> None:
    """The rewriter's producers and readers equal what its current node list says."""
    nodes = list(rw.walk())
    for name in tensors:
        writers = [n for n in nodes if name in n.outputs]
        assert rw.producer(name) is (writers[-1] if writers else None), name
        reads = sorted((id(n) for n in nodes for i in n.inputs if i == name))
        assert sorted(id(n) for n in rw.consumers(name)) == reads, name


def test_a_pass_that_matches_nothing_returns_its_input_uncopied() -> None:
    g = _chain()
    for module in (cancel_transposes, fold_batchnorm):
        out, changed = module.run(g)
        assert out is g and not changed


def test_indexes_follow_every_kind_of_edit_and_the_input_stays_untouched() -> None:
    g = _chain()
    before = dumps(g)
    rw = Rewriter(g)
    names = list(g.tensors) + ["m2"]
    _indexes_agree(rw, names)
    assert rw.only_user("s_out", g.node("m")) and not rw.only_user("t_out", g.node("add"))  # Add(t, t) reads t twice
    rw.replace(g.node("s"), [rw.node("s", "Tanh", ["a_out"], ["s_out"], {}, g.node("s"))])
    _indexes_agree(rw, names)
    rw.replace_uses("m_out", "a_out")  # t and nothing else read m: t is edited in place
    _indexes_agree(rw, names)
    rw.remove(g.node("m"))
    rw.edit(g.node("t"), op="Sigmoid")  # `t` here is the node before replace_uses edited it
    _indexes_agree(rw, names)
    assert [n.op for n in rw.walk()] == ["Relu", "Tanh", "Sigmoid", "Add"]
    out, changed = rw.finish()
    assert changed and dumps(g) == before
    assert [(n.op, n.inputs) for n in out.nodes] == [("Relu", ["x"]), ("Sigmoid", ["a_out"]), ("Add", ["t_out", "t_out"])]
    assert out.node("a") is g.node("a") and "m_out" not in out.tensors  # unchanged nodes are shared, dead tensors dropped


def test_walk_yields_edited_nodes_as_edited_and_skips_replaced_ones() -> None:
    g = _chain()
    rw = Rewriter(g)
    seen = []
    for node in rw.walk():
        seen.append((node.name, node.op, list(node.inputs)))
        if node.name == "a":
            rw.replace(g.node("s"), [rw.node("s2", "Tanh", ["a_out"], ["s_out"], {}, g.node("s"))])  # not walked: new
            rw.replace_uses("a_out", "x")  # m is edited ahead of the walk
    assert seen == [("a", "Relu", ["x"]), ("m", "Mul", ["x", "s_out"]), ("t", "Tanh", ["m_out"]), ("add", "Add", ["t_out", "t_out"])]


def test_names_of_new_nodes_and_tensors_are_unique_and_constants_are_shared() -> None:
    g = _chain()
    rw = Rewriter(g)
    assert [rw.node("a", "Relu", [], [], {}, g.node("a")).name for _ in range(2)] == ["a_1", "a_2"]
    assert rw.tensor_like("a_out", (1,), "float32") == "a_out_1"
    c = rw.constant("k", np.ones(3, np.float32))
    assert rw.constant("k", np.ones(3, np.float32)) == c and rw.constant("k", np.zeros(3, np.float32)) == "k_1"
    assert "k" not in g.tensors  # added to the rewriter's tensors, not the input's


def test_a_new_node_belongs_to_the_layer_it_was_made_for() -> None:
    """A node a rewrite adds keeps the source text and the source model's layer name of the node it stands in for."""
    g = _chain()
    g.nodes[1] = g.node("s").copy(source="model.py: s = torch.sigmoid(a)", source_name="block.gate")
    new = Rewriter(g).node("s/to_nhwc", "transpose", ["a_out"], ["s_t"], {"perm": [1, 0]}, g.node("s"))
    assert (new.source, new.source_name, new.label) == ("model.py: s = torch.sigmoid(a)", "block.gate", "block.gate")
