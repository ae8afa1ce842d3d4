"""conv1d_to_conv2d: 1-D convolutions and pools run as 2-D ones with height 1."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import conv1d_to_conv2d


def test_conv_and_pools_gain_a_unit_height() -> None:
    b = Builder()
    q = QuantParams((0.1, 0.2, 0.3, 0.4), (0, 0, 0, 0), 0)
    x = b.op("Conv", [b.input("x", (2, 3, 11)), b.weight("w", 4, 3, 3, quant=q), b.weight("b", 4)],
             {"strides": [2], "pads": [2, 1], "dilations": [2]}, name="conv")
    x = b.op("MaxPool", [x], {"kernel_shape": [2], "strides": [1], "pads": [1, 0]})
    x = b.op("AveragePool", [x], {"kernel_shape": [2], "count_include_pad": 1, "pads": [0, 1]})
    g = b.output(b.op("GlobalAveragePool", [x]))
    out, changed = run_pass(conv1d_to_conv2d, g)
    assert changed and [o for o in ops(out) if o != "reshape"] == ["Conv", "MaxPool", "AveragePool", "GlobalAveragePool"]
    conv = out.node("conv")
    assert conv.attrs["pads"] == [0, 2, 0, 1] and conv.attrs["strides"] == [1, 2] and conv.attrs["dilations"] == [1, 2]
    assert out.tensors[conv.inputs[1]].shape == (4, 3, 1, 3) and out.tensors[conv.inputs[1]].quant == q
    assert_same_values(g, out)


def test_leaves_two_d_ops_alone() -> None:
    b = Builder()
    unchanged(conv1d_to_conv2d, b.output(b.op("Conv", [b.input("x", (1, 2, 5, 5)), b.weight("w", 3, 2, 3, 3)])))
