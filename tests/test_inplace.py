"""Every kernel on the planner's in-place allow-list, run in place under AddressSanitizer.

Each case is a one-node model planned with its input in the arena (so the
input dies at the kernel and the output takes its bytes), generated, and
linked with the same model planned out of place into one sanitized program.
The in-place run must equal the out-of-place run bit for bit, and the
reference (int8 exactly, float within 1e-5).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kiln import host
from kiln.check import reference_outputs
from kiln.codegen import generate
from kiln.ir import Graph, Node, QuantParams, Tensor
from kiln.lower import lower
from kiln.plan import plan
from kiln.plan.inplace import IN_PLACE

UNARY = {"sigmoid": {}, "tanh": {}, "hardswish": {}, "hardsigmoid": {"alpha": 0.2, "beta": 0.5}, "silu": {},
         "gelu": {"approximate": "none"}, "leaky_relu": {"alpha": 0.07}, "clamp": {"act_min": -0.5, "act_max": 0.75}}
BINARY = ("add", "sub", "mul", "div")
SHAPE = (2, 3, 5, 4)
PLAN = {"alignment": 16, "budget": 0, "io_in_arena": True, "reorder": True, "in_place": True, "lz4": False}


def _tensor(name: str, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> Tensor:
    quant = QuantParams((float(rng.uniform(0.01, 0.05)),), (int(rng.integers(-20, 20)),)) if dtype == "int8" else None
    return Tensor(name, shape, dtype, quant=quant)


def case(op: str, dtype: str, broadcast_first: bool, seed: int) -> Graph:
    """One `op` node; binary ops broadcast one operand so the other is the one written over."""
    rng = np.random.default_rng(seed)
    g = Graph(f"inplace_{op}_{dtype}_{int(broadcast_first)}")
    if op in BINARY:
        small = (1, 3, 1, 4)
        ins = [_tensor("a", small if broadcast_first else SHAPE, dtype, rng), _tensor("b", SHAPE, dtype, rng)]
        attrs = {"act_min": -math.inf, "act_max": math.inf}
    else:
        ins, attrs = [_tensor("x", SHAPE, dtype, rng)], dict(UNARY[op])
    for t in ins + [_tensor("y", SHAPE, dtype, rng)]:
        g.add_tensor(t)
    g.nodes.append(Node("n", op, [t.name for t in ins], ["y"], attrs))
    g.inputs, g.outputs = [t.name for t in ins], ["y"]
    return g


CASES = ([(op, "int8", False) for op in ("sigmoid", "gelu")]
         + [(op, "int8", b) for op in ("add", "sub", "mul") for b in (False, True)]
         + [(op, "float32", False) for op in UNARY]
         + [(op, "float32", b) for op in BINARY for b in (False, True)])


def feeds(g: Graph, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(4):
        row = []
        for name in g.inputs:
            t = g.tensors[name]
            if t.dtype == "int8":
                row.append(rng.integers(-128, 128, t.shape).astype(np.int8))
            else:
                v = rng.uniform(-3, 3, t.shape).astype(np.float32)
                row.append(np.where(np.abs(v) < 0.25, 0.5, v).astype(np.float32))
        samples.append(row)
    return samples


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> tuple[Path, dict[str, tuple[Graph, Graph, Graph]]]:
    """One sanitized program holding every case twice: planned in place and out of place."""
    out = tmp_path_factory.mktemp("inplace")
    built: dict[str, tuple[Graph, Graph, Graph]] = {}
    sources, prefixes = [], []
    for i, (op, dtype, b) in enumerate(CASES):
        graph = case(op, dtype, b, seed=i)
        lowered = lower(graph, {"profile": "portable"})
        variants = []
        for tag, in_place in (("in", True), ("out", False)):
            planned = plan(lowered, dict(PLAN, in_place=in_place))
            name = f"{graph.name}_{tag}"
            files = generate(planned, name, {"prefix": "", "weights_section": ""})
            for file, text in files.items():
                (out / file).write_bytes(text)
            sources.append(out / f"{name}.c")
            prefixes.append(name)
            variants.append(planned)
        built[graph.name] = (graph, *variants)
    return host.build_executable(sources, prefixes, out / "inplace", sanitize=True), built


def test_every_allowed_kernel_is_covered():
    kernels = {lower(case(op, dt, b, 0), {"profile": "portable"}).nodes[0].attrs["kernel"] for op, dt, b in CASES}
    assert kernels == set(IN_PLACE)


@pytest.mark.parametrize("op,dtype,broadcast_first", CASES)
def test_kernel_in_place_matches_out_of_place_and_reference(program, op, dtype, broadcast_first):
    exe, built = program
    graph = case(op, dtype, broadcast_first, 0)
    graph, in_place, out_of_place = built[graph.name]
    victim = "b" if broadcast_first else graph.inputs[0]
    assert in_place.tensors[victim].attrs["offset"] == in_place.tensors["y"].attrs["offset"]
    assert out_of_place.tensors[victim].attrs["offset"] != out_of_place.tensors["y"].attrs["offset"]
    samples = feeds(graph, seed=CASES.index((op, dtype, broadcast_first)))
    got = host.run_executable(exe, in_place, samples, model=f"{graph.name}_in")
    ref_c = host.run_executable(exe, out_of_place, samples, model=f"{graph.name}_out")
    want = reference_outputs(graph, samples)
    for g, r, w in zip(got, ref_c, want):
        assert np.array_equal(g[0], r[0])
        if dtype == "int8":
            assert np.array_equal(g[0], w[0])
        else:
            np.testing.assert_allclose(g[0], w[0], rtol=1e-5, atol=1e-5)
