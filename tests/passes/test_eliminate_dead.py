"""eliminate_dead: nodes that reach no output and unused constants go; everything else stays."""
from graphs import Builder, ops, run_pass, unchanged
from kiln.normalize.passes import eliminate_dead


def test_dead_branch_and_unused_constant_are_removed() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    live = b.op("Relu", [x])
    b.op("Sigmoid", [b.op("Tanh", [x])])
    b.weight("unused", 3)
    g = b.output(live)
    out, changed = run_pass(eliminate_dead, g)
    assert changed and ops(out) == ["Relu"] and "unused" not in out.tensors


def test_a_node_with_one_live_output_stays_and_inputs_stay() -> None:
    b = Builder()
    x = b.input("x", (2, 4))
    b.input("spare", (1,))
    parts = b.op("Split", [x, b.const("sizes", [1, 3])], {"axis": 1}, outputs=2)
    unchanged(eliminate_dead, b.output(parts[1]))
