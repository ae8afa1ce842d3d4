"""fold_bias_add: a constant per-channel add after conv / depthwise / fully connected becomes the bias."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import fold_bias_add
from kiln.normalize.rewrite import no_act

CONV = {"strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1], **no_act()}


def test_per_channel_adds_become_biases() -> None:
    b = Builder()
    x = b.input("x", (1, 5, 5, 2))
    conv = b.op("conv2d", [x, b.weight("w", 3, 3, 3, 2), b.weight("b", 3, seed=3)], CONV, name="conv")
    y = b.op("add", [b.weight("shift", 1, 1, 1, 3, seed=4), conv], {"act_min": 0.0, "act_max": 6.0}, name="add")
    fc = b.op("fully_connected", [b.input("v", (2, 4)), b.weight("f", 3, 4)], no_act(), name="fc")
    z = b.op("add", [fc, b.weight("fb", 3, seed=5)], no_act(), name="add2")
    g = b.output(y, z)
    out, changed = run_pass(fold_bias_add, g)
    assert changed and ops(out) == ["conv2d", "fully_connected"]
    conv_out = out.producers()[y]
    assert (conv_out.attrs["act_min"], conv_out.attrs["act_max"]) == (0.0, 6.0)
    np.testing.assert_allclose(out.constant(conv_out.inputs[2]), g.constant("b") + g.constant("shift").reshape(3), rtol=1e-6)
    assert_same_values(g, out)


def test_an_add_after_a_channel_keeping_reshape_folds_too() -> None:
    """lower_matmul's MatMul of a [1, T, F] input: fully_connected between reshapes, then the exporter's Add."""
    b = Builder()
    rows = b.op("reshape", [b.input("x", (1, 3, 4))], {"shape": [3, 4]})
    fc = b.op("fully_connected", [rows, b.weight("w", 5, 4)], no_act(), name="fc")
    back = b.op("reshape", [fc], {"shape": [1, 3, 5]})
    g = b.output(b.op("add", [back, b.weight("bias", 5, seed=1)], {"act_min": 0.0, "act_max": np.inf}, name="add"))
    out, changed = run_pass(fold_bias_add, g)
    assert changed and ops(out) == ["reshape", "fully_connected", "reshape"]
    assert out.node("fc").attrs["act_min"] == 0.0 and out.producers()[out.outputs[0]].op == "reshape"
    assert_same_values(g, out)


def test_other_adds_are_left_alone() -> None:
    b = Builder()
    x = b.input("x", (1, 5, 5, 2))
    conv = b.op("conv2d", [x, b.weight("w", 3, 3, 3, 2)], CONV, name="conv")
    spatial = b.op("add", [conv, b.weight("s", 1, 5, 5, 1)], no_act())  # varies over positions
    relu = b.op("conv2d", [x, b.weight("w2", 3, 3, 3, 2)], {**CONV, "act_min": 0.0}, name="relu")
    after_relu = b.op("add", [relu, b.weight("c", 3)], no_act())  # the add comes after the activation
    shared = b.op("conv2d", [x, b.weight("w3", 3, 3, 3, 2)], CONV, name="shared")
    g = b.output(spatial, after_relu, b.op("add", [shared, b.weight("d", 3)], no_act()), shared)
    unchanged(fold_bias_add, g)
    b = Builder()
    fc = b.op("fully_connected", [b.input("v", (2, 4)), b.weight("f", 3, 4)], no_act(), quant=QuantParams((0.1,), (0,)))
    unchanged(fold_bias_add, b.output(b.op("add", [fc, b.weight("fb", 3)], no_act())))
