"""lower_layer_norm: LayerNormalization over the last axis (or several, on a flattened view) becomes layer_norm."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_layer_norm


def test_last_axis_and_trailing_axes() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 8))
    last = b.op("LayerNormalization", [x, b.weight("s", 8), b.weight("b", 8, seed=1)], {"axis": -1, "epsilon": 1e-3}, name="last")
    img = b.input("img", (2, 4, 5, 6))
    two = b.op("LayerNormalization", [img, b.weight("s2", 5, 1, seed=2)], {"axis": 2, "epsilon": 1e-5}, name="two")
    g = b.output(last, two)
    out, changed = run_pass(lower_layer_norm, g)
    assert changed and ops(out) == ["layer_norm", "reshape", "layer_norm", "reshape"]
    flat = out.node("two")
    assert out.tensors[flat.inputs[0]].shape == (2, 4, 30) and out.tensors[flat.inputs[2]].data.tolist() == [0.0] * 30
    np.testing.assert_array_equal(out.tensors[flat.inputs[1]].data, np.repeat(g.tensors["s2"].data.reshape(5), 6))
    assert out.node("last").attrs == {"epsilon": 1e-3}
    assert_same_values(g, out)


def test_runtime_scale_is_left_alone() -> None:
    b = Builder()
    x = b.input("x", (2, 8))
    unchanged(lower_layer_norm, b.output(b.op("LayerNormalization", [x, b.input("s", (8,))], {"axis": -1})))
