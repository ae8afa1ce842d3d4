"""The plan stage: live buffers never overlap, aliases share storage, budgets fail with the peak."""
import numpy as np
import pytest

from toolchain.errors import KilnError
from toolchain.ir import Graph, Node, QuantParams, Tensor
from toolchain.plan import plan
from toolchain.plan.buffers import buffers

CONFIG = {"alignment": 16, "budget": 0, "io_in_arena": False}
Q = QuantParams((0.1,), (0,))


def chain(sizes: list[int], alias_at: int | None = None) -> Graph:
    """x -> n0 -> t0 -> n1 -> t1 ... ; node `alias_at` is a reshape alias."""
    g = Graph("chain")
    g.add_tensor(Tensor("x", (1, sizes[0]), "int8", quant=Q))
    prev = "x"
    for i, size in enumerate(sizes[1:]):
        name = f"t{i}"
        g.add_tensor(Tensor(name, (1, size), "int8", quant=Q))
        alias = i == alias_at
        g.nodes.append(Node(f"n{i}", "reshape" if alias else "clamp", [prev], [name], {"kernel": "" if alias else "k"}))
        prev = name
    g.inputs, g.outputs = ["x"], [prev]
    return g


def diamond() -> Graph:
    """x -> a; a -> b; a -> c; (b, c) -> d: a stays live while b and c are computed."""
    g = Graph("diamond")
    for name, size in [("x", 40), ("a", 100), ("b", 50), ("c", 70), ("d", 30)]:
        g.add_tensor(Tensor(name, (1, size), "int8", quant=Q))
    g.add_constant("w", np.ones((1, 50), np.int8), quant=Q)
    g.nodes += [
        Node("n0", "clamp", ["x"], ["a"], {"kernel": "k"}),
        Node("n1", "clamp", ["a"], ["b"], {"kernel": "k"}),
        Node("n2", "clamp", ["a"], ["c"], {"kernel": "k"}),
        Node("n3", "add", ["b", "w"], ["d"], {"kernel": "k"}),
    ]
    g.inputs, g.outputs = ["x"], ["d"]
    return g


def assert_no_live_overlap(g: Graph) -> None:
    bufs = [b for b in buffers(g, False, 16) if b.memory == "arena"]
    for i, a in enumerate(bufs):
        t = g.tensors[a.tensors[0]]
        assert t.attrs["offset"] % g.meta["alignment"] == 0
        assert t.attrs["offset"] + a.size <= g.meta["arena_size"]
        for b in bufs[i + 1:]:
            if a.overlaps(b):
                oa, ob = g.tensors[a.tensors[0]].attrs["offset"], g.tensors[b.tensors[0]].attrs["offset"]
                assert oa + a.size <= ob or ob + b.size <= oa, (a, b)


def test_live_buffers_never_overlap():
    g = plan(diamond(), CONFIG)
    assert_no_live_overlap(g)
    assert g.tensors["x"].attrs["memory"] == "input" and g.tensors["d"].attrs["memory"] == "output"
    # a (112 after alignment), b (64) and c (80) are live together at step 2
    assert g.meta["lower_bound"] == 112 + 64 + 80
    assert g.meta["arena_size"] == g.meta["lower_bound"]


def test_input_is_not_modified():
    g = diamond()
    plan(g, CONFIG)
    assert all("offset" not in t.attrs for t in g.tensors.values())


def test_aliases_share_storage():
    g = plan(chain([32, 48, 48, 16], alias_at=1), CONFIG)
    assert g.tensors["t1"].attrs["offset"] == g.tensors["t0"].attrs["offset"]
    assert_no_live_overlap(g)


def test_alias_of_output_lives_in_output():
    g = plan(chain([32, 48, 48], alias_at=1), CONFIG)
    assert g.tensors["t0"].attrs["memory"] == "output"


def test_io_in_arena_places_inputs_and_outputs():
    g = plan(chain([32, 48, 16]), dict(CONFIG, io_in_arena=True))
    assert all(g.tensors[n].attrs["memory"] == "arena" for n in ("x", "t0", "t1"))
    assert_no_live_overlap(g)


def test_alignment_is_configurable():
    g = plan(diamond(), dict(CONFIG, alignment=64))
    assert all(t.attrs["offset"] % 64 == 0 for t in g.tensors.values() if "offset" in t.attrs)


def test_budget_error_names_peak_step_and_tensors():
    with pytest.raises(KilnError) as e:
        plan(diamond(), dict(CONFIG, budget=100))
    msg = str(e.value)
    assert "exceeds plan.budget 100" in msg and "step 2" in msg and "'n2'" in msg
    assert "a (112 B)" in msg and "b (64 B)" in msg and "c (80 B)" in msg
