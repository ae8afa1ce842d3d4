"""lower_matmul: Gemm / MatMul with constant weights become fully_connected with [out, in] weights, products of
activations batch_matmul."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.ir.graph import QuantParams
from kiln.normalize.passes import lower_matmul


def _gemm(attrs: dict, a_shape, b_shape, c_shape=None, b_quant=None):
    b = Builder()
    ins = [b.input("a", a_shape), b.weight("b", *b_shape, quant=b_quant)] + ([b.weight("c", *c_shape, seed=1)] if c_shape else [])
    return b.output(b.op("Gemm", ins, attrs, name="gemm"))


def test_gemm_folds_transposes_alpha_and_beta() -> None:
    q = QuantParams((0.1, 0.2, 0.3, 0.4), (0, 0, 0, 0), 1)
    g = _gemm({"alpha": 0.5, "beta": 2.0}, (3, 5), (5, 4), (1, 4), b_quant=q)
    out, changed = run_pass(lower_matmul, g)
    assert changed and ops(out) == ["fully_connected"]
    fc = out.node("gemm")
    w, bias = out.tensors[fc.inputs[1]], out.tensors[fc.inputs[2]]
    np.testing.assert_allclose(w.data, 0.5 * g.tensors["b"].data.T, rtol=1e-6)
    assert w.quant == QuantParams((0.05, 0.1, 0.15, 0.2), (0, 0, 0, 0), 0) and bias.shape == (4,)
    assert fc.attrs == {"act_min": -np.inf, "act_max": np.inf}
    assert_same_values(g, out)


def test_gemm_with_a_full_c_or_trans_a() -> None:
    for attrs, a, bs, c, want in (({"transB": 1, "beta": 0.5}, (3, 5), (4, 5), (3, 4), ["fully_connected", "add"]),
                                  ({"transA": 1}, (5, 3), (5, 4), (4,), ["transpose", "fully_connected"]),
                                  ({}, (3, 5), (5, 4), (1,), ["fully_connected"])):
        g = _gemm(attrs, a, bs, c)
        out, _ = run_pass(lower_matmul, g)
        assert ops(out) == want
        assert_same_values(g, out)


def test_matmul_of_any_rank_reshapes_around_the_fc() -> None:
    for a, w, want in (((2, 3, 5), (5, 4), ["reshape", "fully_connected", "reshape"]), ((3, 5), (5, 4), ["fully_connected"]),
                       ((3, 5), (5,), ["fully_connected", "reshape"]), ((5,), (1, 5, 4), ["reshape", "fully_connected"]), ((2, 5), (1, 5, 4), ["fully_connected", "reshape"])):
        b = Builder()
        g = b.output(b.op("MatMul", [b.input("a", a), b.weight("w", *w)]))
        out, _ = run_pass(lower_matmul, g)
        assert ops(out) == want, (a, w)
        assert_same_values(g, out)


def test_products_of_activations_become_batch_matmul() -> None:
    b = Builder()
    q, k = b.input("q", (2, 4, 8)), b.input("k", (2, 8, 3))
    g = b.output(b.op("MatMul", [q, k], name="scores"), b.op("MatMul", [b.input("x", (3, 5)), b.input("y", (5, 2))], name="plain"))
    out, changed = run_pass(lower_matmul, g)
    assert changed and ops(out) == ["batch_matmul", "batch_matmul"]
    assert out.node("scores").attrs == {"act_min": -np.inf, "act_max": np.inf}
    assert_same_values(g, out)


def test_leaves_other_products_alone() -> None:
    b = Builder()
    x = b.input("x", (3, 5))
    broadcast = b.op("MatMul", [b.input("a", (2, 3, 5)), b.input("y", (5, 2))])  # batch dims differ: no kernel
    unchanged(lower_matmul, b.output(broadcast, b.op("MatMul", [x, b.weight("w", 2, 5, 4)])))
