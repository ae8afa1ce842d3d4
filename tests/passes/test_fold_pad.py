"""fold_pad: zero padding of H/W becomes conv (and, when safe, max pool) padding; never avg pool's."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import fold_pad
from kiln.normalize.rewrite import no_act

PADS = [0, 1, 2, 0, 0, 0, 1, 0]  # NHWC: H begin 1, W begin 2, W end 1


def _conv_attrs(pads=(0, 0, 0, 0)) -> dict:
    return {"strides": [1, 1], "dilations": [1, 1], "pads": list(pads), **no_act()}


def test_pad_folds_into_convolutions_and_a_max_pool_of_non_negative_values() -> None:
    b = Builder()
    x = b.input("x", (1, 5, 6, 2))
    padded = b.op("pad", [x], {"pads": PADS, "value": 0.0})
    conv = b.op("conv2d", [padded, b.weight("w", 3, 3, 3, 2)], _conv_attrs((1, 0, 0, 1)))
    dw = b.op("depthwise_conv2d", [padded, b.weight("d", 1, 2, 2, 2)], {**_conv_attrs(), "depth_multiplier": 1})
    relu = b.op("clamp", [x], {"act_min": 0.0, "act_max": np.inf})
    pool = b.op("max_pool2d", [b.op("pad", [relu], {"pads": PADS, "value": 0.0})], {"window": [2, 3], "strides": [1, 1], "pads": [0, 0, 0, 0], **no_act()})
    g = b.output(conv, dw, pool)
    out, changed = run_pass(fold_pad, g)
    assert changed and "pad" not in ops(out)
    assert {n.op: n.attrs["pads"] for n in out.nodes if "pads" in n.attrs} == {"conv2d": [2, 2, 0, 2], "depthwise_conv2d": [1, 2, 0, 1], "max_pool2d": [1, 2, 0, 1]}
    assert_same_values(g, out)


def test_leaves_unsafe_pads_alone() -> None:
    b = Builder()
    x = b.input("x", (1, 5, 6, 2))
    w = b.weight("w", 3, 3, 3, 2)
    valued = b.op("conv2d", [b.op("pad", [x], {"pads": PADS, "value": 1.0}), w], _conv_attrs())
    channel = b.op("conv2d", [b.op("pad", [x], {"pads": [0, 0, 0, 1, 0, 0, 0, 0], "value": 0.0}), b.weight("w3", 3, 3, 3, 3)], _conv_attrs())
    pool_attrs = {"window": [3, 3], "strides": [1, 1], "pads": [0, 0, 0, 0], **no_act()}
    signed = b.op("max_pool2d", [b.op("pad", [x], {"pads": PADS, "value": 0.0})], pool_attrs)
    average = b.op("avg_pool2d", [b.op("pad", [x], {"pads": PADS, "value": 0.0})], pool_attrs)
    unchanged(fold_pad, b.output(valued, channel, signed, average))


def test_pad_of_an_nchw_input_folds_through_the_transpose_into_nhwc() -> None:
    b = Builder()
    x = b.input("x", (1, 2, 5, 6))
    padded = b.op("pad", [x], {"pads": [0, 0, 1, 2, 0, 0, 0, 1], "value": 0.0})
    nhwc = b.op("transpose", [padded], {"perm": [0, 2, 3, 1]})
    conv = b.op("conv2d", [nhwc, b.weight("w", 3, 3, 3, 2)], _conv_attrs((0, 1, 1, 0)))
    g = b.output(conv)
    out, changed = run_pass(fold_pad, g)
    live = [n for n in out.nodes if n.outputs[0] in {i for m in out.nodes for i in m.inputs} | set(out.outputs)]
    assert changed and [n.op for n in live] == ["transpose", "conv2d"]
    assert live[0].inputs == ["x"] and live[1].attrs["pads"] == [1, 3, 1, 1]
    assert_same_values(g, out)


def test_pad_of_channels_before_the_transpose_stays() -> None:
    b = Builder()
    x = b.input("x", (1, 2, 5, 6))
    padded = b.op("pad", [x], {"pads": [0, 1, 0, 0, 0, 0, 0, 0], "value": 0.0})
    conv = b.op("conv2d", [b.op("transpose", [padded], {"perm": [0, 2, 3, 1]}), b.weight("w", 3, 3, 3, 3)], _conv_attrs())
    unchanged(fold_pad, b.output(conv))
