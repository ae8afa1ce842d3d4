"""fold_batchnorm: BN into the producer's weights when allowed, else a per-channel scale and shift."""
import numpy as np

from graphs import Builder, assert_same_values, conv_bn_relu, ops, run_pass, unchanged
from kiln.normalize.passes import fold_batchnorm


def _bn(b: Builder, x: str, channels: int, name: str = "bn") -> str:
    rng = np.random.default_rng(5)
    params = [b.const(f"{name}_{k}", rng.uniform(0.5, 1.5, channels).astype(np.float32)) for k in ("s", "b", "m", "v")]
    return b.op("BatchNormalization", [x, *params], {"epsilon": 1e-5}, name=name)


def test_folds_into_the_preceding_conv() -> None:
    g = conv_bn_relu()
    out, changed = run_pass(fold_batchnorm, g)
    assert changed and ops(out) == ["Conv", "Relu"] and out.nodes[0].name == "conv"
    assert_same_values(g, out)


def test_folds_into_gemm_and_two_d_matmul() -> None:
    for op, attrs, w in (("Gemm", {"transB": 1, "alpha": 0.5, "beta": 2.0}, (4, 6)), ("MatMul", {}, (6, 4))):
        b = Builder()
        ins = [b.input("x", (3, 6)), b.weight("w", *w)] + ([b.weight("c", 4, seed=3)] if op == "Gemm" else [])
        g = b.output(_bn(b, b.op(op, ins, attrs), 4))
        out, _ = run_pass(fold_batchnorm, g)
        assert ops(out) == ["Gemm"]
        assert_same_values(g, out)


def test_standalone_batchnorm_becomes_a_scale_and_shift() -> None:
    b = Builder()
    g4 = b.output(_bn(b, b.input("x", (2, 3, 4, 4)), 3))
    out, _ = run_pass(fold_batchnorm, g4)
    assert ops(out) == ["Conv"] and out.nodes[0].attrs["group"] == 3 and out.tensors[out.nodes[0].inputs[1]].shape == (3, 1, 1, 1)
    assert_same_values(g4, out)
    b = Builder()
    g2 = b.output(_bn(b, b.input("x", (5, 3)), 3))
    out, _ = run_pass(fold_batchnorm, g2)
    assert ops(out) == ["Mul", "Add"]
    assert_same_values(g2, out)


def test_qdq_weights_are_never_rescaled() -> None:
    g = conv_bn_relu(quant_weight=True)
    out, _ = run_pass(fold_batchnorm, g)
    assert ops(out) == ["Conv", "Conv", "Relu"]
    assert out.nodes[0].inputs[1] == "w" and out.tensors["w"].quant == g.tensors["w"].quant
    assert_same_values(g, out)


def test_a_shared_conv_output_is_not_folded() -> None:
    b = Builder()
    c = b.op("Conv", [b.input("x", (1, 2, 4, 4)), b.weight("w", 3, 2, 1, 1)])
    g = b.output(_bn(b, c, 3), c)
    out, _ = run_pass(fold_batchnorm, g)
    assert ops(out) == ["Conv", "Conv"] and out.nodes[0].inputs[1] == "w"
    assert_same_values(g, out)


def test_leaves_graphs_without_batchnorm_alone() -> None:
    b = Builder()
    unchanged(fold_batchnorm, b.output(b.op("Relu", [b.input("x", (2, 3))])))
