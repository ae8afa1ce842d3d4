"""clamp_into_concat: a clamp after a concat of conv outputs moves onto each input (then fuses into each conv)."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import clamp_into_concat, fuse_activation
from kiln.normalize.rewrite import no_act

CONV = {"strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1], **no_act()}
RELU = {"act_min": 0.0, "act_max": np.inf}


def grouped(quant: QuantParams | None = None, shared: bool = False):
    b = Builder()
    x = b.input("x", (1, 5, 5, 2))
    a = b.op("conv2d", [x, b.weight("wa", 3, 3, 3, 2)], CONV, name="a")
    c = b.op("conv2d", [x, b.weight("wc", 3, 3, 3, 2, seed=1)], CONV, name="c")
    cat = b.op("concat", [a, c], {"axis": 3}, name="cat", quant=quant)
    outs = [b.op("clamp", [cat], RELU, name="relu")]
    return b.output(*outs, a) if shared else b.output(*outs)


def test_clamp_moves_onto_every_input_and_fuses() -> None:
    g = grouped()
    out, changed = run_pass(clamp_into_concat, g)
    assert changed and ops(out) == ["conv2d", "conv2d", "clamp", "clamp", "concat"]
    assert out.outputs == ["relu_out"] and out.producers()["relu_out"].op == "concat"
    assert_same_values(g, out)
    fused, _ = run_pass(fuse_activation, out)
    assert ops(fused) == ["conv2d", "conv2d", "concat"]
    assert all(n.attrs["act_min"] == 0.0 for n in fused.nodes if n.op == "conv2d")
    assert_same_values(g, fused)


def test_left_alone_when_an_input_is_shared_or_parameters_are_given() -> None:
    unchanged(clamp_into_concat, grouped(shared=True))  # a standalone clamp would be needed
    unchanged(clamp_into_concat, grouped(quant=QuantParams((0.1,), (0,))))
