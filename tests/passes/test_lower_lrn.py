"""lower_lrn: LRN as mul, a window-sum conv2d on a [1, N*H*W, C, 1] view, lrn_scale and mul, between NHWC transposes."""
import numpy as np
import pytest

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_lrn


@pytest.mark.parametrize("size, channels", [(5, 7), (4, 6), (1, 3), (9, 4)])
def test_lrn_becomes_kernel_ops_with_the_same_values(size: int, channels: int) -> None:
    b = Builder()
    x = b.input("x", (2, channels, 3, 5))
    attrs = {"size": size, "alpha": 0.5, "beta": 0.75, "bias": 2.0}  # large alpha: the window sum matters
    g = b.output(b.op("LRN", [x], attrs, name="lrn"))
    out, changed = run_pass(lower_lrn, g)
    assert changed
    assert ops(out) == ["transpose", "mul", "reshape", "conv2d", "reshape", "lrn_scale", "mul", "transpose"]
    conv = out.node("lrn/window")
    assert out.tensors[conv.inputs[0]].shape == (1, 2 * 3 * 5, channels, 1)
    assert conv.attrs["pads"] == [0, (size - 1) // 2, 0, size // 2]  # ONNX's window: floor below, ceil above
    np.testing.assert_array_equal(out.tensors[conv.inputs[1]].data, np.ones((1, 1, size, 1), np.float32))
    assert out.node("lrn/scale").attrs == {"bias": 2.0, "alpha_over_size": 0.5 / size, "beta": 0.75}
    for seed in range(3):
        assert_same_values(g, out, seed=seed, rtol=1e-6)


def test_lrn_of_other_ranks_is_left_for_kernel_form_to_report() -> None:
    b = Builder()
    x = b.input("x", (2, 6, 5))
    unchanged(lower_lrn, b.output(b.op("LRN", [x], {"size": 3, "alpha": 1e-4, "beta": 0.75, "bias": 1.0})))
