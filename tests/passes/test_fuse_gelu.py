"""fuse_gelu: the exporters' Erf and Tanh decompositions become one gelu."""
import math

import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import fuse_gelu


def _c(b: Builder, value: float) -> str:
    b._count += 1
    return b.const(f"c{b._count}", np.float32(value))


def _erf_torch(b: Builder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, _c(b, 1.4142135381698608)])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, _c(b, 1.0)])]), _c(b, 0.5)])


def _erf_reassociated(b: Builder, x: str) -> str:
    e = b.op("Erf", [b.op("Mul", [_c(b, 1 / math.sqrt(2)), x])])
    return b.op("Mul", [b.op("Mul", [_c(b, 0.5), x]), b.op("Add", [_c(b, 1.0), e])])


def _tanh(b: Builder, x: str, pow_cube: bool) -> str:
    cube = b.op("Pow", [x, _c(b, 3.0)]) if pow_cube else b.op("Mul", [x, b.op("Mul", [x, x])])
    inner = b.op("Add", [x, b.op("Mul", [cube, _c(b, 0.044715)])])
    t = b.op("Tanh", [b.op("Mul", [inner, _c(b, math.sqrt(2 / math.pi))])])
    return b.op("Div", [b.op("Mul", [x, b.op("Add", [t, _c(b, 1.0)])]), _c(b, 2.0)])


def test_decompositions_fuse_to_gelu() -> None:
    for build, approximate in ((_erf_torch, "none"), (_erf_reassociated, "none"), (lambda b, x: _tanh(b, x, True), "tanh"), (lambda b, x: _tanh(b, x, False), "tanh")):
        b = Builder()
        x = b.op("Relu", [b.input("x", (3, 7))])
        g = b.output(b.op("Sigmoid", [build(b, x)]))
        out, changed = run_pass(fuse_gelu, g)
        assert changed and ops(out) == ["Relu", "gelu", "Sigmoid"]
        assert out.nodes[1].attrs == {"approximate": approximate} and out.nodes[1].inputs == [x]
        assert_same_values(g, out)


def test_near_misses_stay() -> None:
    b = Builder()
    x = b.input("x", (3, 7))
    e = b.op("Erf", [b.op("Div", [x, _c(b, 1.5)])])  # wrong constant
    wrong = b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, _c(b, 1.0)])]), _c(b, 0.5)])
    e2 = b.op("Erf", [b.op("Div", [x, _c(b, 1.4142135)])])
    shared = b.op("Add", [e2, _c(b, 1.0)])
    leaked = b.op("Mul", [b.op("Mul", [x, shared]), _c(b, 0.5)])  # 1 + erf(...) is also an output
    unchanged(fuse_gelu, b.output(wrong, leaked, shared))
