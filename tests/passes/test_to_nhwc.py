"""to_nhwc: channel-first ops become NHWC kernel ops between transposes, with weights transposed at compile time."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import to_nhwc


def _single(op: str, attrs: dict, shape=(2, 3, 7, 9), extra=()):
    b = Builder()
    return b.output(b.op(op, [b.input("x", shape), *[e(b) if callable(e) else e for e in extra]], attrs, name="node"))


def test_conv_becomes_conv2d_with_ohwi_weights() -> None:
    q = QuantParams((0.5, 0.25), (0, 0), 0)
    g = _single("Conv", {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]},
                extra=(lambda b: b.weight("w", 2, 3, 3, 2, quant=q), lambda b: b.weight("b", 2)))
    out, changed = run_pass(to_nhwc, g)
    assert changed and ops(out) == ["transpose", "conv2d", "transpose"]
    conv = out.node("node")
    w = out.tensors[conv.inputs[1]]
    assert (w.shape, w.layout, w.quant) == ((2, 3, 2, 3), "OHWI", q)
    assert conv.attrs == {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1], "act_min": -np.inf, "act_max": np.inf}
    assert_same_values(g, out)


def test_pools_resize_and_global_pool() -> None:
    cases = [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 0], "ceil_mode": 1}, (), ["max_pool2d"]),
        ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (), ["avg_pool2d"]),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1, "ceil_mode": 1}, (), ["pad", "avg_pool2d"]),
        ("GlobalAveragePool", {}, (), ["global_avg_pool"]),
        ("Resize", {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
         ("", "", lambda b: b.const("sizes", np.asarray([2, 3, 14, 5], np.int64))), ["resize_nearest"]),
    ]
    for op, attrs, extra, want in cases:
        g = _single(op, attrs, extra=extra)
        out, _ = run_pass(to_nhwc, g)
        assert ops(out) == ["transpose", *want, "transpose"], op
        assert_same_values(g, out)


def test_leaves_what_it_cannot_express_alone() -> None:
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    dilated = b.op("MaxPool", [x], {"kernel_shape": [2, 2], "dilations": [2, 2]})
    grouped = b.op("Conv", [x, b.weight("w", 4, 2, 3, 3)], {"group": 2})
    one_d = b.op("Conv", [b.input("s", (1, 2, 9)), b.weight("w1", 3, 2, 3)])
    channels = b.op("Resize", [x, "", b.const("scales", np.float32([1, 2, 1, 1]))])
    unchanged(to_nhwc, b.output(dilated, grouped, one_d, channels))
