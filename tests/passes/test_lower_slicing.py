"""lower_slicing: Slice/Split/Pad/Gather with constant operands to kernel slice/split/pad (+ reshape, concat)."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_slicing


def _i(b: Builder, name: str, *v: int) -> str:
    return b.const(name, np.asarray(v, np.int64))


def test_slice_split_pad_gather() -> None:
    b = Builder()
    x = b.input("x", (2, 4, 7, 9))
    sliced = b.op("Slice", [x, _i(b, "s", 1, -1), _i(b, "e", 6, 2), _i(b, "a", 2, 3), _i(b, "st", 2, -3)])
    parts = b.op("Split", [x, _i(b, "sizes", 1, 3)], {"axis": 1}, outputs=2)
    padded = b.op("Pad", [x, _i(b, "p", 0, -1, 2, 0, 0, 1, 0, -3), b.const("v", np.float32(1.5))])
    picked = b.op("Gather", [x, b.const("one", np.int64(-2))], {"axis": 1})
    spaced = b.op("Gather", [x, _i(b, "even", 0, 2, 4, 6)], {"axis": 2})
    shuffled = b.op("Gather", [x, _i(b, "mixed", 3, 0, -1)], {"axis": 3})
    g = b.output(sliced, *parts, padded, picked, spaced, shuffled)
    out, changed = run_pass(lower_slicing, g)
    assert changed
    assert ops(out) == ["slice", "split", "slice", "pad", "slice", "reshape", "slice", "slice", "slice", "slice", "concat"]
    assert out.nodes[0].attrs == {"starts": [0, 0, 1, 8], "ends": [2, 4, 6, 2], "steps": [1, 1, 2, -3]}
    assert_same_values(g, out)


def test_leaves_backward_slices_through_zero_alone() -> None:
    b = Builder()
    x = b.input("x", (5,))
    unchanged(lower_slicing, b.output(b.op("Slice", [x, _i(b, "s", -1), _i(b, "e", -10), _i(b, "a", 0), _i(b, "st", -1)])))
