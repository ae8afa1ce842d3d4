"""fold_flatten_transpose: flattening an NHWC map for an NCHW-trained FC permutes the FC weight columns instead."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import fold_flatten_transpose
from kiln.normalize.rewrite import no_act


def test_weight_columns_absorb_the_transpose() -> None:
    b = Builder()
    q = QuantParams((0.1, 0.2, 0.3, 0.4, 0.5), (0,) * 5, 0)
    t = b.op("transpose", [b.input("x", (2, 3, 4, 6))], {"perm": [0, 3, 1, 2]})
    flat = b.op("reshape", [t], {"shape": [2, 72]})
    g = b.output(b.op("fully_connected", [flat, b.weight("w", 5, 72, quant=q), b.weight("b", 5)], no_act(), name="fc"))
    out, changed = run_pass(fold_flatten_transpose, g)
    assert changed and ops(out) == ["reshape", "fully_connected"] and out.nodes[0].inputs == ["x"]
    w = out.tensors[out.node("fc").inputs[1]]
    assert w.quant == q and sorted(w.data[0].tolist()) == sorted(g.tensors["w"].data[0].tolist())
    assert_same_values(g, out)


def test_leaves_other_fc_inputs_alone() -> None:
    b = Builder()
    plain = b.op("reshape", [b.input("x", (2, 3, 4))], {"shape": [2, 12]})
    batch_moved = b.op("reshape", [b.op("transpose", [b.input("y", (3, 2, 4))], {"perm": [1, 0, 2]})], {"shape": [2, 12]})
    w = b.weight("w", 5, 12)
    unchanged(fold_flatten_transpose, b.output(b.op("fully_connected", [plain, w], no_act()), b.op("fully_connected", [batch_moved, w], no_act())))
