"""fuse_silu: x * sigmoid(x) becomes silu(x), in either operand order and spelling."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import fuse_silu
from kiln.normalize.rewrite import no_act


def test_both_operand_orders_and_kernel_spelling_fuse() -> None:
    for mul, sig, swap in (("Mul", "Sigmoid", False), ("Mul", "Sigmoid", True), ("mul", "sigmoid", False)):
        b = Builder()
        x = b.op("Relu", [b.input("x", (2, 5))])
        s = b.op(sig, [x])
        g = b.output(b.op(mul, [s, x] if swap else [x, s], no_act() if mul == "mul" else {}))
        out, changed = run_pass(fuse_silu, g)
        assert changed and ops(out) == ["Relu", "silu"]
        assert_same_values(g, out)


def test_leaves_non_silu_products_alone() -> None:
    b = Builder()
    x, y = b.input("x", (2, 5)), b.input("y", (2, 5))
    shared = b.op("Sigmoid", [x])
    other = b.op("Mul", [x, b.op("Sigmoid", [y])])  # sigmoid of another tensor
    used_twice = b.op("Mul", [x, shared])  # the sigmoid is also an output
    clamped = b.op("mul", [x, b.op("sigmoid", [x])], {"act_min": 0.0, "act_max": 1.0})  # fused activation
    unchanged(fuse_silu, b.output(other, used_twice, shared, clamped))
