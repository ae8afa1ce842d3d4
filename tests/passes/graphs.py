"""Helpers for the pass tests: a small graph builder, running a pass under the rules every pass obeys, value checks."""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from kiln.ir import dumps
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.ir.ops import OPS
from kiln.ir.verify import verify
from kiln.reference.executor import run


class Builder:
    """Builds a verified graph op by op; output shapes come from the op's own inference."""

    def __init__(self, name: str = "g") -> None:
        self.graph = Graph(name)
        self._count = 0

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32", quant: QuantParams | None = None) -> str:
        self.graph.add_tensor(Tensor(name, shape, dtype, quant=quant))
        self.graph.inputs.append(name)
        return name

    def const(self, name: str, data: Any, dtype: str | None = None, quant: QuantParams | None = None) -> str:
        arr = np.asarray(data)
        if dtype is None:
            dtype = "float32" if arr.dtype.kind == "f" else "int64"
        self.graph.add_tensor(Tensor(name, arr.shape, dtype, quant=quant, data=arr))
        return name

    def weight(self, name: str, *shape: int, seed: int = 0, quant: QuantParams | None = None) -> str:
        return self.const(name, np.random.default_rng(seed).standard_normal(shape).astype(np.float32), quant=quant)

    def op(self, op: str, inputs: list[str], attrs: dict | None = None, name: str | None = None, outputs: int = 1,
           out: list[str] | str | None = None, quant: QuantParams | None = None) -> str | list[str]:
        """Add a node; returns its output name (or names when `outputs` > 1)."""
        self._count += 1
        name = name or f"{op.lower()}{self._count}"
        names = [out] if isinstance(out, str) else (out or [f"{name}_out{i}" if outputs > 1 else f"{name}_out" for i in range(outputs)])
        node = Node(name, op, list(inputs), names, dict(attrs or {}), source=f"model.py: {name}")
        ins = [self.graph.tensors[i] if i else None for i in inputs]
        for n, (shape, dtype) in zip(names, OPS[op].infer(node, ins)):
            self.graph.add_tensor(Tensor(n, shape, dtype, quant=quant))
        self.graph.nodes.append(node)
        return names if outputs > 1 else names[0]

    def output(self, *names: str) -> Graph:
        self.graph.outputs.extend(names)
        verify(self.graph)
        return self.graph


def run_pass(module: ModuleType, graph: Graph) -> tuple[Graph, bool]:
    """Run one pass as the manager would; checks that it left its input alone and produced a valid graph."""
    before = dumps(graph)
    result, changed = module.run(graph)
    assert dumps(graph) == before, f"{module.__name__} modified its input graph"
    verify(result)
    assert (dumps(result) != before) == changed, f"{module.__name__} reported changed={changed} wrongly"
    return result, changed


def feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(graph.tensors[k].shape).astype(np.float32) for k in graph.inputs}


def assert_same_values(before: Graph, after: Graph, seed: int = 0, rtol: float = 1e-5) -> None:
    """Both graphs give the same outputs on seeded inputs (within rtol of the output's magnitude)."""
    data = feeds(before, seed)
    want, got = run(before, data), run(after, data)
    for name in before.outputs:
        scale = max(float(np.abs(want[name]).max(initial=0.0)), 1e-12)
        err = float(np.abs(got[name].astype(np.float64) - want[name]).max(initial=0.0))
        assert err <= rtol * scale, f"output {name!r} differs by {err} (scale {scale})"


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def unchanged(module: ModuleType, graph: Graph) -> None:
    """The pass leaves `graph` alone: reports no change and returns the same bytes."""
    result, changed = run_pass(module, graph)
    assert not changed
    assert dumps(result) == dumps(graph)


def conv_bn_relu(quant_weight: bool = False) -> Graph:
    """Conv → BatchNorm → Relu on an NCHW input: the most common source pattern."""
    b = Builder("conv_bn_relu")
    x = b.input("x", (2, 3, 6, 6))
    wq = QuantParams((0.1, 0.2, 0.3, 0.4), (0, 0, 0, 0), 0) if quant_weight else None
    c = b.op("Conv", [x, b.weight("w", 4, 3, 3, 3, quant=wq), b.weight("b", 4, seed=1)], {"pads": [1, 1, 1, 1]}, name="conv")
    rng = np.random.default_rng(2)
    params = [b.const(n, rng.uniform(0.5, 1.5, 4).astype(np.float32)) for n in ("scale", "bias", "mean", "var")]
    n = b.op("BatchNormalization", [c, *params], {"epsilon": 1e-3}, name="bn")
    return b.output(b.op("Relu", [n], name="relu"))
