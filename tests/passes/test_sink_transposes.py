"""sink_transposes: layout-free ops move above the transpose that feeds them; axes and constants follow."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import sink_transposes
from kiln.normalize.rewrite import no_act

BACK = [0, 3, 1, 2]  # NHWC -> NCHW, what follows every lowered conv


def _nchw(b: Builder, name: str = "x", shape=(2, 5, 6, 3)) -> str:
    return b.op("transpose", [b.input(name, shape)], {"perm": BACK})


def test_unary_and_binary_ops_sink_with_constants_transposed() -> None:
    b = Builder()
    q = QuantParams((0.1, 0.2, 0.3), (0, 0, 0), 0)
    t = _nchw(b)
    y = b.op("clamp", [t], {"act_min": 0.0, "act_max": 6.0})
    y = b.op("add", [y, b.const("bias", np.arange(3, dtype=np.float32).reshape(3, 1, 1), quant=q)], no_act())
    y = b.op("mul", [y, _nchw(b, "z")], no_act())
    g = b.output(b.op("sigmoid", [y], name="last"))
    out, changed = run_pass(sink_transposes, g)
    assert changed and ops(out) == ["clamp", "add", "mul", "sigmoid", "transpose"]
    bias = out.tensors[out.nodes[1].inputs[1]]
    assert bias.shape == (3,) and bias.quant == QuantParams(q.scale, q.zero_point, 0)
    assert_same_values(g, out)


def test_axis_attributes_are_remapped() -> None:
    b = Builder()
    t = _nchw(b)
    cat = b.op("concat", [t, t], {"axis": 1})
    padded = b.op("pad", [t], {"pads": [0, 1, 2, 0, 0, 0, 1, 3], "value": 0.5})
    sliced = b.op("slice", [t], {"starts": [0, 1, 0, 2], "ends": [2, 3, 5, 3], "steps": [1, 1, 2, 1]})
    parts = b.op("split", [t], {"axis": 1, "sizes": [2, 1]}, outputs=2)
    g = b.output(cat, padded, sliced, *parts)
    out, _ = run_pass(sink_transposes, g)
    by_op = {n.op: n for n in out.nodes}
    assert by_op["concat"].attrs["axis"] == 3 and by_op["split"].attrs["axis"] == 3
    assert by_op["pad"].attrs["pads"] == [0, 2, 0, 1, 0, 1, 3, 0]
    assert ops(out).count("transpose") == 5
    assert_same_values(g, out)


def test_unit_reshapes_sink_and_reshapes_equal_to_the_transpose_count() -> None:
    b = Builder()
    pooled = b.op("transpose", [b.input("p", (2, 1, 1, 4))], {"perm": BACK})
    flat = b.op("reshape", [pooled], {"shape": [2, 4]})
    s = b.op("reshape", [b.input("s", (2, 1, 1, 4))], {"shape": [2, 4, 1, 1]})  # equals transpose(s, BACK)
    g = b.output(flat, b.op("mul", [pooled, s], no_act()))
    out, _ = run_pass(sink_transposes, g)
    assert ops(out).count("transpose") == 2 and "mul" in ops(out)
    mul = next(n for n in out.nodes if n.op == "mul")
    assert mul.inputs == ["p", "s"]
    assert_same_values(g, out)


def test_leaves_mixed_layouts_alone() -> None:
    b = Builder()
    t = _nchw(b)
    mixed = b.op("add", [t, b.input("y", (2, 3, 5, 6))], no_act())  # the other operand is plain NCHW
    other = b.op("add", [t, b.op("transpose", [b.input("z", (2, 3, 6, 5))], {"perm": [0, 1, 3, 2]})], no_act())
    last_axis = b.op("softmax", [t], {"beta": 1.0})  # the transpose moves the softmax axis
    merged = b.op("reshape", [t], {"shape": [2, 90]})  # not a unit-dim reshape
    partly = b.op("concat", [t, b.weight("c", 2, 1, 5, 6), b.input("w", (2, 3, 5, 6))], {"axis": 1})  # a constant, then a plain input
    unchanged(sink_transposes, b.output(mixed, other, last_axis, merged, partly))
