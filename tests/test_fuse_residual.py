"""kiln.lower.fuse_residual: a conv2d whose output alone feeds an add or sub becomes one fused node.

The value checks (the fused kernel against the reference, on the host and on
the Cortex-M4) are tests/test_kernels.py's `residual` cases; these check the
rewrite itself.
"""
from __future__ import annotations

import numpy as np

from kernel_harness import act, q, random_int8
from kiln.ir import dumps
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.ir.verify import verify
from kiln.lower import fuse_residual, lower

LIMIT = 8192
SHAPE = (1, 6, 6, 8)


def conv(g: Graph, name: str, x: str, out: str, bias: bool = True, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    w = Tensor(f"{name}_w", (8, 3, 3, 8), "int8", quant=QuantParams(tuple(rng.uniform(0.005, 0.01, 8)), (0,) * 8, 0),
               data=random_int8(rng, (8, 3, 3, 8)))
    g.add_tensor(w)
    inputs = [x, w.name]
    if bias:
        g.add_tensor(Tensor(f"{name}_b", (8,), "int32", data=rng.integers(-500, 500, 8).astype(np.int32)))
        inputs.append(f"{name}_b")
    if out not in g.tensors:
        g.add_tensor(act(out, SHAPE, q(0.05, -3)))
    g.nodes.append(Node(name, "conv2d", inputs, [out], {"pads": [1, 1, 1, 1], "act_min": 0.0, "act_max": 6.0}))


def block(op: str = "add", conv_first: bool = True, bias: bool = True) -> Graph:
    """x -> conv -> op(conv, x) -> y, the residual block of ResNet-8."""
    g = Graph("block")
    g.add_tensor(act("x", SHAPE, q(0.04, 5)))
    conv(g, "conv", "x", "t", bias)
    g.add_tensor(act("y", SHAPE, q(0.08, -10)))
    g.nodes.append(Node("res", op, ["t", "x"] if conv_first else ["x", "t"], ["y"], {"act_min": 0.0}))
    g.inputs, g.outputs = ["x"], ["y"]
    return g


def test_a_residual_block_becomes_one_node() -> None:
    for op in ("add", "sub"):
        for conv_first in (True, False):
            for bias in (True, False):
                g = block(op, conv_first, bias)
                before = dumps(g)
                out, changed = fuse_residual.run(g, LIMIT)
                assert changed and dumps(g) == before, "the pass mutated its input"
                verify(out, levels=("kernel",))
                (node,) = out.nodes
                assert (node.name, node.op, node.outputs) == ("conv", "conv2d", ["y"])
                assert node.inputs == ["x", "conv_w", "conv_b" if bias else "", "x"]
                assert node.attrs["residual"] == op and node.attrs["residual_operand"] == (0 if conv_first else 1)
                assert (node.attrs["residual_scale"], node.attrs["residual_zero_point"]) == (np.float32(0.05), -3)
                assert (node.attrs["residual_act_min"], node.attrs["act_min"], node.attrs["act_max"]) == (0.0, 0.0, 6.0)
                assert "t" not in out.tensors
                assert lower(g, {"profile": "portable"}).nodes[0].attrs["kernel"] == "kiln_conv2d_add_s8"


def test_the_fused_node_runs_where_the_add_ran() -> None:
    """The other operand may come after the conv: the fused node takes the add's place in the order."""
    g = Graph("late")
    g.add_tensor(act("x", SHAPE, q(0.04, 5)))
    conv(g, "first", "x", "t")
    conv(g, "second", "x", "u", seed=1)
    g.add_tensor(act("s", SHAPE, q(0.05, 0)))
    g.nodes.append(Node("relu", "clamp", ["u"], ["s"], {"act_min": 0.0, "act_max": 6.0}))
    g.add_tensor(act("y", SHAPE, q(0.08, -10)))
    g.nodes.append(Node("res", "add", ["t", "s"], ["y"], {}))
    g.inputs, g.outputs = ["x"], ["y"]
    out, changed = fuse_residual.run(g, LIMIT)
    assert changed and [n.name for n in out.nodes] == ["second", "relu", "first"]
    verify(out, levels=("kernel",))


def test_an_add_of_two_convs_takes_one() -> None:
    g = Graph("two")
    g.add_tensor(act("x", SHAPE, q(0.04, 5)))
    conv(g, "a", "x", "t")
    conv(g, "b", "x", "u", seed=1)
    g.add_tensor(act("y", SHAPE, q(0.08, -10)))
    g.nodes.append(Node("res", "add", ["t", "u"], ["y"], {}))
    g.inputs, g.outputs = ["x"], ["y"]
    out, changed = fuse_residual.run(g, LIMIT)
    assert changed and [(n.name, n.inputs[-1]) for n in out.nodes] == [("b", "b_b"), ("a", "u")]
    verify(out, levels=("kernel",))


def test_what_stays_apart() -> None:
    shared = block()  # the conv's output also leaves the graph
    shared.outputs.append("t")
    twice = block()  # the conv's output feeds the add twice
    twice.nodes[1] = twice.nodes[1].copy(inputs=["t", "t"])
    broadcast = block()  # the other operand broadcasts
    broadcast.tensors["x2"] = act("x2", (1, 1, 1, 8), q(0.04, 5))
    broadcast.inputs.append("x2")
    broadcast.nodes[1] = broadcast.nodes[1].copy(inputs=["t", "x2"])
    unfit = block()  # an output scale the add's table cannot take (its shift is above 22)
    unfit.tensors["y"] = unfit.tensors["y"].copy(quant=QuantParams((1e4,), (0,)))
    for g in (shared, twice, broadcast, unfit):
        out, changed = fuse_residual.run(g, LIMIT)
        assert not changed and dumps(out) == dumps(g)
    assert not fuse_residual.run(block(), 0)[1], "no scratch: the conv would take its slow path"
