"""lower_conv_transpose: a transposed conv with kernel == stride is a 1x1 conv, then reshape-transpose-reshape."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_conv_transpose


def test_kernel_equal_to_stride_becomes_a_pointwise_conv_and_depth_to_space() -> None:
    b = Builder()
    x = b.input("x", (2, 4, 3, 5))
    g = b.output(b.op("ConvTranspose", [x, b.weight("w", 4, 3, 2, 3), b.weight("b", 3, seed=1)], {"strides": [2, 3]}, name="up"))
    out, changed = run_pass(lower_conv_transpose, g)
    assert changed and ops(out) == ["transpose", "conv2d", "reshape", "transpose", "reshape", "transpose"]
    assert out.tensors[out.node("up").inputs[1]].shape == (2 * 3 * 3, 1, 1, 4)
    assert_same_values(g, out)


def test_other_transposed_convolutions_are_left_alone() -> None:
    b = Builder()
    x = b.input("x", (1, 4, 3, 3))
    w = b.weight("w", 4, 2, 3, 3)
    overlapping = b.op("ConvTranspose", [x, w], {"strides": [2, 2]})
    padded = b.op("ConvTranspose", [x, b.weight("w2", 4, 2, 2, 2)], {"strides": [2, 2], "pads": [1, 1, 0, 0]})
    unchanged(lower_conv_transpose, b.output(overlapping, padded))
