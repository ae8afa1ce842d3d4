"""relabel_depthwise: group == in_channels convolutions become depthwise_conv2d with 1HWC weights."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import relabel_depthwise


def test_depthwise_with_multiplier() -> None:
    b = Builder()
    q = QuantParams(tuple(0.1 * (i + 1) for i in range(8)), (0,) * 8, 0)
    g = b.output(b.op("Conv", [b.input("x", (2, 4, 6, 7)), b.weight("w", 8, 1, 3, 3, quant=q), b.weight("b", 8)],
                      {"group": 4, "pads": [1, 0, 1, 2], "strides": [2, 1]}, name="dw"))
    out, changed = run_pass(relabel_depthwise, g)
    assert changed and ops(out) == ["transpose", "depthwise_conv2d", "transpose"]
    dw = out.node("dw")
    w = out.tensors[dw.inputs[1]]
    assert dw.attrs["depth_multiplier"] == 2 and dw.attrs["pads"] == [1, 0, 1, 2] and (w.shape, w.layout) == ((1, 3, 3, 8), "1HWC")
    assert w.quant == QuantParams(q.scale, q.zero_point, 3)
    assert_same_values(g, out)


def test_leaves_other_convolutions_alone() -> None:
    b = Builder()
    x = b.input("x", (1, 4, 5, 5))
    plain = b.op("Conv", [x, b.weight("w1", 3, 4, 3, 3)])
    grouped = b.op("Conv", [x, b.weight("w2", 4, 2, 3, 3)], {"group": 2})
    unchanged(relabel_depthwise, b.output(plain, grouped))
