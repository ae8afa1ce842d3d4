"""fold_constants: constant-only nodes and shape arithmetic become constants; QDQ parameters follow moved data."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import fold_constants


def test_shape_arithmetic_on_a_runtime_tensor_folds_away() -> None:
    b = Builder()
    r = b.op("Relu", [b.input("x", (2, 3, 4, 2))])
    shape = b.op("Shape", [r])
    batch = b.op("Gather", [shape, b.const("zero", np.int64(0))], {"axis": 0})
    batch1 = b.op("Unsqueeze", [batch, b.const("axes", np.asarray([0], np.int64))])
    pair = b.op("Concat", [batch1, b.const("rest", np.asarray([-1], np.int64))], {"axis": 0})
    factor = b.op("Cast", [pair], {"to": "float32"})
    g = b.output(b.op("Mul", [r, factor]))
    out, changed = run_pass(fold_constants, g)
    assert changed and ops(out) == ["Relu", "Mul"]
    assert out.tensors[factor].data.tolist() == [2.0, -1.0]
    assert_same_values(g, out)


def test_constant_arithmetic_is_evaluated_by_the_reference() -> None:
    b = Builder()
    c = b.op("Mul", [b.const("a", np.float32([1.5, -2.0])), b.const("k", np.float32(3.0))])
    g = b.output(b.op("Add", [b.input("x", (2,)), c]))
    out, changed = run_pass(fold_constants, g)
    assert changed and ops(out) == ["Add"]
    assert out.tensors[c].data.tolist() == [4.5, -6.0] and out.tensors[c].dtype == "float32"


def test_qdq_axis_follows_a_folded_transpose() -> None:
    b = Builder()
    q = QuantParams((0.1, 0.2, 0.3, 0.4), (0, 0, 0, 0), 0)
    wt = b.op("Transpose", [b.weight("w", 4, 3, quant=q)], {"perm": [1, 0]})
    g = b.output(b.op("MatMul", [b.input("x", (2, 3)), wt]))
    out, _ = run_pass(fold_constants, g)
    assert ops(out) == ["MatMul"]
    assert out.tensors[wt].quant == QuantParams(q.scale, q.zero_point, 1)
    np.testing.assert_array_equal(out.tensors[wt].data, g.tensors["w"].data.T)


def test_leaves_graphs_without_constant_only_nodes_alone() -> None:
    b = Builder()
    g = b.output(b.op("Conv", [b.input("x", (1, 2, 5, 5)), b.weight("w", 3, 2, 3, 3)]))
    unchanged(fold_constants, g)
