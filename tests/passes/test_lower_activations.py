"""lower_activations: Relu/Clip to clamp ranges (Clip(0, 6) is ReLU6), the rest to their kernel ops."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import lower_activations

INF = np.inf


def test_each_activation_gets_its_kernel_op_and_attributes() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 4))
    zero, six = b.const("zero", np.float32(0)), b.const("six", np.float32([6]))
    cases = [
        (b.op("Relu", [x]), "clamp", {"act_min": 0.0, "act_max": INF}),
        (b.op("Clip", [x, zero, six]), "clamp", {"act_min": 0.0, "act_max": 6.0}),
        (b.op("Clip", [x, "", six]), "clamp", {"act_min": -INF, "act_max": 6.0}),
        (b.op("LeakyRelu", [x]), "leaky_relu", {"alpha": 0.01}),
        (b.op("HardSigmoid", [x]), "hardsigmoid", {"alpha": 0.2, "beta": 0.5}),
        (b.op("Gelu", [x], {"approximate": "tanh"}), "gelu", {"approximate": "tanh"}),
        (b.op("Sigmoid", [x]), "sigmoid", {}),
        (b.op("Tanh", [x]), "tanh", {}),
        (b.op("HardSwish", [x]), "hardswish", {}),
        (b.op("Softmax", [x], {"axis": -1}), "softmax", {"beta": 1.0}),
    ]
    g = b.output(*[c[0] for c in cases])
    out, changed = run_pass(lower_activations, g)
    assert changed
    assert [(n.op, n.attrs) for n in out.nodes] == [(op, attrs) for _, op, attrs in cases]
    assert_same_values(g, out)


def test_softmax_over_another_axis_runs_between_transposes() -> None:
    b = Builder()
    g = b.output(b.op("Softmax", [b.input("x", (2, 3, 4, 5))], {"axis": 1}))
    out, _ = run_pass(lower_activations, g)
    assert ops(out) == ["transpose", "softmax", "transpose"] and out.nodes[0].attrs["perm"] == [0, 2, 3, 1]
    assert_same_values(g, out)


def test_leaves_kernel_ops_and_integer_tensors_alone() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    unchanged(lower_activations, b.output(b.op("clamp", [x], {"act_min": 0.0, "act_max": 1.0}), b.op("Relu", [b.input("i", (2,), "int64")])))
