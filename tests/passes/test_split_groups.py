"""split_groups: a grouped convolution runs as split, one conv2d per group, concat."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import split_groups


def test_grouped_convolution_is_split_per_group() -> None:
    b = Builder()
    q = QuantParams(tuple(0.1 * (i + 1) for i in range(6)), (0,) * 6, 0)
    g = b.output(b.op("Conv", [b.input("x", (2, 4, 6, 6)), b.weight("w", 6, 2, 3, 3, quant=q), b.weight("b", 6)],
                      {"group": 2, "pads": [1, 1, 1, 1], "dilations": [1, 2]}))
    out, changed = run_pass(split_groups, g)
    assert changed and ops(out) == ["transpose", "split", "conv2d", "conv2d", "concat", "transpose"]
    second = out.tensors[out.nodes[3].inputs[1]]
    assert second.shape == (3, 3, 3, 2) and second.quant == QuantParams(q.scale[3:], q.zero_point[3:], 0)
    assert_same_values(g, out)


def test_leaves_ungrouped_and_depthwise_alone() -> None:
    b = Builder()
    x = b.input("x", (1, 4, 5, 5))
    unchanged(split_groups, b.output(b.op("Conv", [x, b.weight("w1", 3, 4, 3, 3)]), b.op("Conv", [x, b.weight("w2", 4, 1, 3, 3)], {"group": 4})))
