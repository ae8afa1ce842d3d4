"""remove_noops: identity-like nodes disappear, readers (or graph outputs) move to their input."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import remove_noops


def test_noops_in_the_middle_are_removed() -> None:
    b = Builder()
    x = b.op("Relu", [b.input("x", (2, 3, 4))])
    x = b.op("Identity", [x])
    x = b.op("Dropout", [x])
    x = b.op("Reshape", [x, b.const("s", np.asarray([2, 3, 4], np.int64))])
    x = b.op("Transpose", [x], {"perm": [0, 1, 2]})
    x = b.op("Mul", [x, b.const("one", np.float32(1.0))])
    x = b.op("Add", [x, b.const("zero", np.zeros((3, 4), np.float32))])
    x = b.op("Cast", [x], {"to": "float32"})
    g = b.output(b.op("Sigmoid", [x]))
    out, changed = run_pass(remove_noops, g)
    assert changed and ops(out) == ["Relu", "Sigmoid"]
    assert_same_values(g, out)


def test_a_noop_producing_a_graph_output_hands_the_name_to_its_producer() -> None:
    b = Builder()
    g = b.output(b.op("Identity", [b.op("Relu", [b.input("x", (3,))], name="relu")], out="y"))
    out, _ = run_pass(remove_noops, g)
    assert [(n.name, n.outputs) for n in out.nodes] == [("relu", ["y"])] and out.outputs == ["y"]
    assert_same_values(g, out)


def test_keeps_what_is_not_a_noop() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    copy = b.op("Identity", [x])  # a graph input copied to a graph output: the node is the copy
    moved = b.op("Transpose", [x], {"perm": [1, 0]})
    scaled = b.op("Mul", [x, b.const("two", np.float32(2.0))])
    masked = b.op("Dropout", [x], outputs=2)
    relu = b.op("Relu", [x], quant=QuantParams((0.25,), (0,)))
    requant = b.op("Identity", [relu], quant=QuantParams((0.5,), (0,)))  # QDQ parameters differ: a requantization
    unchanged(remove_noops, b.output(copy, moved, scaled, *masked, requant))
