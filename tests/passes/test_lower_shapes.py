"""lower_shapes: reshape-like ops to `reshape` with a static shape, Transpose and Concat to kernel form."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_shapes


def test_shape_ops_lower_with_static_attributes() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 1, 4))
    outs = [
        b.op("Reshape", [x, b.const("s", np.asarray([0, -1], np.int64))]),
        b.op("Flatten", [x], {"axis": 2}),
        b.op("Squeeze", [x, b.const("a", np.asarray([2], np.int64))]),
        b.op("Unsqueeze", [x, b.const("u", np.asarray([-1], np.int64))]),
        b.op("Transpose", [x]),
        b.op("Concat", [x, x], {"axis": -3}),
    ]
    g = b.output(*outs)
    out, changed = run_pass(lower_shapes, g)
    assert changed
    assert [(n.op, n.attrs) for n in out.nodes] == [
        ("reshape", {"shape": [2, 12]}), ("reshape", {"shape": [6, 4]}), ("reshape", {"shape": [2, 3, 4]}),
        ("reshape", {"shape": [2, 3, 1, 4, 1]}), ("transpose", {"perm": [3, 2, 1, 0]}), ("concat", {"axis": 1}),
    ]
    assert_same_values(g, out)


def test_a_kept_identity_becomes_a_copying_reshape() -> None:
    b = Builder()
    g = b.output(b.op("Identity", [b.input("x", (2, 3))]))
    out, _ = run_pass(lower_shapes, g)
    assert [(n.op, n.attrs) for n in out.nodes] == [("reshape", {"shape": [2, 3]})]


def test_leaves_integer_shape_data_and_used_masks_alone() -> None:
    b = Builder()
    shape = b.op("Concat", [b.input("i", (2,), "int64"), b.const("one", np.asarray([1], np.int64))], {"axis": 0})
    masked = b.op("Dropout", [b.input("x", (2, 3))], outputs=2)
    unchanged(lower_shapes, b.output(shape, *masked))
