"""lower_arithmetic: float Add/Sub/Mul/Div/Max/Min (and Neg, Pow 2, Reciprocal) to kernel ops; division by a constant multiplies."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_arithmetic


def test_arithmetic_lowers_to_kernel_ops() -> None:
    b = Builder()
    x, y = b.input("x", (2, 3, 4)), b.input("y", (3, 1))
    c = b.const("c", np.float32([2.0, -4.0, 0.5, 8.0]))
    outs = [b.op("Add", [x, y]), b.op("Sub", [c, x]), b.op("Mul", [x, c]), b.op("Div", [x, y]), b.op("Div", [x, c]),
            b.op("Neg", [x]), b.op("Pow", [x, b.const("two", np.int64(2))]), b.op("Reciprocal", [y]), b.op("Max", [x, y]),
            b.op("Min", [c, x])]
    g = b.output(*outs)
    out, changed = run_pass(lower_arithmetic, g)
    assert changed and ops(out) == ["add", "sub", "mul", "div", "mul", "mul", "mul", "div", "maximum", "minimum"]
    assert out.tensors[out.nodes[4].inputs[1]].data.tolist() == [0.5, -0.25, 2.0, 0.125]
    assert all(n.attrs == {"act_min": -np.inf, "act_max": np.inf} for n in out.nodes)
    assert_same_values(g, out)


def test_leaves_unsupported_powers_and_integer_arithmetic_alone() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    cube = b.op("Pow", [x, b.const("three", np.float32(3.0))])
    ints = b.op("Add", [b.input("i", (2,), "int64"), b.const("one", np.int64(1))])
    unchanged(lower_arithmetic, b.output(cube, ints))
