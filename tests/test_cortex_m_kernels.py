"""The int8 conv, depthwise and matrix kernels on the Cortex-M4 (their DSP path) against the reference.

Seeded single-node graphs of every kernel family (tests/test_kernels.py's
BLOCK_CASES plus the zoo's layer shapes) are lowered, planned and generated
as separate models of one firmware image, run under QEMU mps2-an386 and
compared bit for bit with the integer reference executor. The host tests
run the same kernels' portable path; this one runs SMLAD/SXTB16.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel_harness import act, q, random_int8, single_node
from test_kernels import BLOCK_CASES, _calibrate
from kiln.codegen import generate
from kiln.config import validate
from kiln.host import model_prefix
from kiln.ir.graph import Graph, QuantParams, Tensor
from kiln.lower import lower
from kiln.model_table import firmware_model
from kiln.plan import plan
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.target import cortex_m, qemu

CASES_PER_FAMILY = 12
DEFAULTS = validate({}, "kernel test")
PLAN = dict(DEFAULTS["plan"], io_in_arena=True)  # a non-empty arena: a single node has no intermediate tensor

# (op, input NHWC, out channels, kernel, stride, pads top/left/bottom/right) of the zoo's layer kinds.
ZOO_LAYERS = [
    ("conv2d", (1, 8, 8, 1), 8, (3, 3), (1, 1), (1, 1, 1, 1)),  # first layer, one input channel
    ("conv2d", (1, 9, 9, 3), 8, (3, 3), (2, 2), (0, 0, 0, 0)),  # first layer, RGB, stride 2
    ("conv2d", (1, 20, 7, 1), 8, (10, 4), (2, 2), (4, 1, 5, 1)),  # keyword-spotting first layer
    ("conv2d", (1, 6, 6, 16), 16, (3, 3), (1, 1), (1, 1, 1, 1)),  # 3x3, many channels
    ("conv2d", (1, 6, 6, 8), 10, (1, 1), (2, 2), (0, 0, 0, 0)),  # strided 1x1 shortcut
    ("conv2d", (1, 5, 5, 24), 12, (1, 1), (1, 1), (0, 0, 0, 0)),  # pointwise
    ("depthwise_conv2d", (1, 7, 5, 24), 24, (3, 3), (1, 1), (1, 1, 1, 1)),
    ("depthwise_conv2d", (1, 8, 8, 16), 16, (3, 3), (2, 2), (0, 0, 1, 1)),
]


def zoo_case(rng: np.random.Generator, op: str, shape: tuple, oc: int, kernel: tuple, stride: tuple,
             pads: tuple) -> tuple[Graph, dict[str, np.ndarray]]:
    """One of ZOO_LAYERS with random per-channel weights, bias and a calibrated output."""
    n, h, w, c = shape
    kh, kw = kernel
    oh, ow = (h + pads[0] + pads[2] - kh) // stride[0] + 1, (w + pads[1] + pads[3] - kw) // stride[1] + 1
    w_shape, axis = ((1, kh, kw, oc), 3) if op == "depthwise_conv2d" else ((oc, kh, kw, c), 0)
    scales = tuple(float(s) for s in rng.uniform(0.002, 0.02, oc))
    weights = Tensor("w", w_shape, "int8", quant=QuantParams(scales, (0,) * oc, axis), data=random_int8(rng, w_shape))
    bias = Tensor("b", (oc,), "int32", data=rng.integers(-2**15, 2**15, oc).astype(np.int32))
    attrs = {"strides": list(stride), "dilations": [1, 1], "pads": list(pads), "act_min": 0.0, "act_max": float("inf")}
    if op == "depthwise_conv2d":
        attrs["depth_multiplier"] = 1
    x = act("x", shape, q(0.02, int(rng.integers(-128, 128))))
    g = single_node(op, [x, weights, bias], [act("y", (n, oh, ow, oc), q(0.05, -128))], attrs)
    feeds = {"x": random_int8(rng, shape)}
    _calibrate(rng, g, feeds)
    return g, feeds


def all_cases() -> list[tuple[str, Graph, dict[str, np.ndarray]]]:
    cases = [(f"{op}_{seed}", *BLOCK_CASES[op](np.random.default_rng([seed, 64])))
             for op in sorted(BLOCK_CASES) for seed in range(CASES_PER_FAMILY)]
    cases += [(f"zoo_{i}", *zoo_case(np.random.default_rng([i, 65]), *layer)) for i, layer in enumerate(ZOO_LAYERS)]
    return cases


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, list[tuple[str, Graph, Graph, dict]]]:
    """One firmware image holding every case as a model named after it."""
    d = tmp_path_factory.mktemp("cm4_kernels")
    built, sources, models = [], [], []
    for name, graph, feeds in all_cases():
        planned = plan(lower(graph, {"profile": "portable"}), PLAN)
        for fname, text in generate(planned, name, DEFAULTS["codegen"]).items():
            (d / fname).write_bytes(text)
        sources.append(d / f"{name}.c")
        models.append(firmware_model(model_prefix(d / f"{name}.h"), (d / f"{name}.h").read_text()))
        built.append((name, graph, planned, feeds))
    return cortex_m.build_firmware(sources, models, d / "kernels.elf"), built


def conv_path(params: dict[str, int]) -> str:
    """Which of kiln_conv2d_s8's paths a call takes (firmware_stubs/conv_s8.c: KILN_COL_MAX, KILN_TAPS_MAX)."""
    taps = params["k_h"] * params["k_w"]
    return "columns" if taps * params["in_c"] <= 160 else "channels" if taps <= 25 else "large"


def test_every_kernel_family_and_path_is_covered(image):
    _, built = image
    nodes = [n for _, _, planned, _ in built for n in planned.nodes]
    kernels = {n.attrs["kernel"] for n in nodes}
    assert {"kiln_conv2d_s8", "kiln_conv2d_1x1_s8", "kiln_depthwise_conv2d_s8", "kiln_fully_connected_s8"} <= kernels
    paths = {conv_path(dict(zip(n.attrs["param_names"], n.attrs["params"]))) for n in nodes
             if n.attrs["kernel"] == "kiln_conv2d_s8"}
    assert paths == {"columns", "channels", "large"}


def test_dsp_kernels_match_reference(image):
    elf, built = image
    for name, graph, planned, feeds in built:
        run_ = qemu.run_firmware(elf, planned, [[feeds[n] for n in planned.inputs]], model=name)
        want = run(graph, feeds, table=INT8_IMPLS)
        for got, out in zip(run_.outputs[0], planned.outputs):
            assert np.array_equal(got, want[out]), f"{name}: firmware {got.ravel()} != reference {want[out].ravel()}"
