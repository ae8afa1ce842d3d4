"""The int8 conv, depthwise, matrix, table-add and mul kernels on the Cortex-M4 (their DSP path) against the reference.

Seeded graphs of every kernel family (tests/test_kernels.py's BLOCK_CASES:
conv, depthwise, fully connected, conv fused with a residual add, table add,
requantization sweeps, mul; plus the zoo's layer shapes and a mul on each of
its lane paths) are lowered, planned and
generated as separate models of one firmware image, some also lowered without
scratch (the kernels' paths without it), run under QEMU mps2-an386 and
compared bit for bit with the integer reference executor. The host tests run
the same kernels' portable path; this one runs the assembly blocks.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel_harness import act, q, random_int8, single_node
from test_kernels import BLOCK_CASES, MUL_PATH_CASES, _calibrate, mul_path, mul_path_case
from kiln.codegen import generate
from kiln.config import validate
from kiln.host import model_prefix
from kiln.ir.graph import Graph, QuantParams, Tensor
from kiln.lower import lower
from kiln.lower.specialize import KILN_RQ_FAST, KILN_RQ_FULL, KILN_RQ_UNIFORM
from kiln.model_table import firmware_model
from kiln.plan import plan
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.target import cortex_m, qemu

CASES_PER_FAMILY = 10
WITHOUT_SCRATCH = 3  # cases per family also lowered with kernels.scratch_limit = 0
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
    ("depthwise_conv2d", (1, 3, 3, 20), 20, (3, 3), (1, 1), (1, 1, 1, 1)),  # tiny map, all border
    ("depthwise_conv2d", (1, 9, 6, 8), 8, (3, 3), (2, 1), (1, 0, 1, 1)),  # strides 2 down, 1 across
    ("conv2d", (1, 7, 9, 3), 5, (3, 3), (1, 1), (1, 1, 1, 1)),  # 27 values: rows read on past k
    ("conv2d", (1, 6, 5, 2), 3, (1, 3), (1, 2), (0, 1, 0, 1)),  # 6 values, 3 channels, odd pixel count
    ("conv2d", (1, 5, 7, 8), 2, (3, 3), (2, 1), (1, 1, 1, 1)),  # 72 values: an even number of groups
    ("conv2d", (1, 4, 5, 12), 7, (1, 1), (1, 1), (0, 0, 0, 0)),  # pointwise, 20 pixels
    ("conv2d", (1, 6, 5, 24), 6, (3, 3), (1, 1), (1, 1, 1, 1)),  # 216 values
    ("conv2d", (1, 8, 8, 8), 3, (6, 6), (1, 1), (2, 2, 3, 3)),  # 36 taps of 8 channels
    *[("conv2d", (1, 3, 5, c), 6, (1, 1), (1, 1), (0, 0, 0, 0)) for c in (5, 6, 7)],  # pointwise, k % 4 = 1, 2, 3
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


# (rows, in_features, out_features, one multiplier for all channels) of fully connected layers with few
# inputs: every group count and k % 4, channel counts not divisible by 4 or 16, the zoo's AD 8>128.
FC_FEW = [(1, 1, 11, False), (2, 2, 5, True), (3, 3, 19, False), (1, 4, 6, True), (1, 5, 33, True), (5, 6, 3, False),
          (1, 7, 2, True), (1, 8, 128, False), (2, 8, 17, True), (1, 9, 13, False), (3, 12, 10, True), (1, 16, 37, False)]


def fc_few_case(rng: np.random.Generator, rows: int, k: int, oc: int, uniform: bool) -> tuple[Graph, dict[str, np.ndarray]]:
    """A fully connected layer of FC_FEW over the whole int8 output range (KILN_RQ_FULL)."""
    scales = (float(rng.uniform(0.002, 0.02)),) if uniform else tuple(float(s) for s in rng.uniform(0.002, 0.02, oc))
    weights = Tensor("w", (oc, k), "int8", quant=QuantParams(scales, (0,) * len(scales), None if uniform else 0),
                     data=random_int8(rng, (oc, k)))
    bias = Tensor("b", (oc,), "int32", data=rng.integers(-2**12, 2**12, oc).astype(np.int32))
    g = single_node("fully_connected", [act("x", (rows, k), q(0.02, int(rng.integers(-128, 128)))), weights, bias],
                    [act("y", (rows, oc), q(0.05, 0))], {})
    feeds = {"x": random_int8(rng, (rows, k))}
    _calibrate(rng, g, feeds)
    return g, feeds


def narrow_add_case(rng: np.random.Generator, b_shape: tuple[int, ...]) -> tuple[Graph, dict[str, np.ndarray]]:
    """An add whose output scale is far below its inputs' (most outputs saturate): with operands of one
    shape an output shift below the table add's SSAT-shift loops, so its loop shifts with ASR; with b
    broadcast, kiln_add_s8."""
    shape = (3, 11)
    g = single_node("add", [act("a", shape, q(0.5, 3)), act("b", b_shape, q(0.4, -7))], [act("y", shape, q(0.002, 1))], {})
    return g, {"a": random_int8(rng, shape), "b": random_int8(rng, b_shape)}


def all_cases() -> list[tuple[str, Graph, dict[str, np.ndarray], int]]:
    """(model name, graph, feeds, kernels.scratch_limit) of every case."""
    limit = DEFAULTS["kernels"]["scratch_limit"]
    cases = [(f"{op}_{seed}", *BLOCK_CASES[op](np.random.default_rng([seed, 64])), limit)
             for op in sorted(BLOCK_CASES) for seed in range(CASES_PER_FAMILY)]
    cases += [(f"{op}_{seed}_bare", *BLOCK_CASES[op](np.random.default_rng([seed, 64])), 0)
              for op in sorted(BLOCK_CASES) for seed in range(WITHOUT_SCRATCH)]
    cases += [(f"zoo_{i}{tag}", *zoo_case(np.random.default_rng([i, 65]), *layer), size)
              for i, layer in enumerate(ZOO_LAYERS) for tag, size in (("", limit), ("_bare", 0))]
    cases += [(f"fc_few_{i}", *fc_few_case(np.random.default_rng([i, 67]), *shape), limit) for i, shape in enumerate(FC_FEW)]
    cases += [(f"narrow_add_{i}", *narrow_add_case(np.random.default_rng(66), b_shape), limit)
              for i, b_shape in enumerate([(3, 11), (1, 11)])]
    cases += [(f"mul_path_{i}", *mul_path_case(np.random.default_rng([i, 68]), *case), limit) for i, case in enumerate(MUL_PATH_CASES)]
    return cases


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, list[tuple[str, Graph, Graph, dict]]]:
    """One firmware image holding every case as a model named after it."""
    d = tmp_path_factory.mktemp("cm4_kernels")
    built, sources, models = [], [], []
    for name, graph, feeds, limit in all_cases():
        planned = plan(lower(graph, {"profile": "portable", "scratch_limit": limit}), PLAN)
        for fname, text in generate(planned, name, DEFAULTS["codegen"]).items():
            (d / fname).write_bytes(text)
        sources.append(d / f"{name}.c")
        models.append(firmware_model(model_prefix(d / f"{name}.h"), (d / f"{name}.h").read_text()))
        built.append((name, graph, planned, feeds))
    return cortex_m.build_firmware(sources, models, d / "kernels.elf"), built


FAST_FULL = KILN_RQ_FAST | KILN_RQ_FULL
TABLE_ADD_SHIFTS = range(14, 23)  # the shifts firmware_stubs/binary.c's table add has SSAT-shift loops for


def kernel_path(node) -> str:
    """Which path of its kernel a call takes, from its parameters (firmware_stubs/*.c)."""
    kernel, p = node.attrs["kernel"], dict(zip(node.attrs["param_names"], node.attrs["params"]))
    if kernel == "kiln_fully_connected_few_s8":
        k = p["in_features"]  # the channels whose 8 weight bytes end inside the array: firmware_stubs/fc_few_s8.c
        asm = p["requant"] & KILN_RQ_FULL and k <= 8 and p["out_features"] - 7 // k >= 2
        uniform = ", uniform" if asm and p["requant"] & KILN_RQ_UNIFORM else ""
        return f"fully connected few inputs, {'assembly' if asm else 'C'}{uniform}"
    if kernel == "kiln_add_table_s8":
        return "table add, SSAT shift" if p["out_shift"] in TABLE_ADD_SHIFTS else "table add, ASR"
    if kernel == "kiln_mul_s8":
        return mul_path(node)
    if kernel not in ("kiln_conv2d_s8", "kiln_conv2d_1x1_s8", "kiln_conv2d_add_s8", "kiln_depthwise_conv2d_s8"):
        return kernel
    if kernel == "kiln_depthwise_conv2d_s8" and p["ch_mult"] % 4 == 0:
        return "depthwise four per input value"
    if not p["scratch_bytes"]:
        if kernel == "kiln_conv2d_s8":  # KILN_COL_MAX, KILN_TAPS_MAX
            taps = p["k_h"] * p["k_w"]
            return "conv columns" if taps * p["in_c"] <= 160 else "conv channels" if taps <= 25 else "conv large"
        return f"{kernel} without scratch"
    if kernel == "kiln_depthwise_conv2d_s8":
        rows3x3 = (p["requant"] == FAST_FULL and p["in_c"] * p["ch_mult"] >= 4 and (p["k_h"], p["k_w"], p["dil_h"], p["dil_w"]) == (3, 3, 1, 1)
                   and p["stride_w"] in (1, 2))
        return f"depthwise 3x3 rows, stride {p['stride_w']}" if rows3x3 else "depthwise strips"
    k = p["in_c"] * (p["k_h"] * p["k_w"] if "k_h" in p else 1)
    pixels = p["pixels"] if "pixels" in p else p["n"] * p["out_h"] * p["out_w"]
    if p["requant"] == FAST_FULL and pixels >= 4:
        return f"{kernel} rows, k % 4 = {k % 4}, {'even' if -(-k // 4) % 2 == 0 else 'odd'} groups"
    return f"{kernel} blocks"


def test_every_kernel_family_and_path_is_covered(image):
    _, built = image
    paths = {kernel_path(n) for _, _, planned, _ in built for n in planned.nodes if n.attrs.get("kernel")}
    assert {"conv columns", "conv channels", "conv large", "kiln_conv2d_1x1_s8 without scratch",
            "kiln_depthwise_conv2d_s8 without scratch", "depthwise 3x3 rows, stride 1", "depthwise 3x3 rows, stride 2",
            "depthwise strips", "depthwise four per input value", "kiln_conv2d_s8 blocks", "kiln_conv2d_1x1_s8 blocks", "kiln_conv2d_add_s8 blocks",
            "table add, SSAT shift", "table add, ASR", "kiln_fully_connected_s8", "kiln_add_s8",
            "fully connected few inputs, assembly", "fully connected few inputs, assembly, uniform",
            "fully connected few inputs, C"} <= paths, paths
    for kernel in ("kiln_conv2d_s8", "kiln_conv2d_1x1_s8"):
        for rest in range(4):
            assert any(p.startswith(f"{kernel} rows, k % 4 = {rest}") for p in paths), (kernel, rest)
        assert {f"{kernel} rows, k % 4 = 0, even groups", f"{kernel} rows, k % 4 = 0, odd groups"} <= paths
    assert any(p.startswith("kiln_conv2d_add_s8 rows") for p in paths)
    mul = {f"mul {kind}, {clamp}, {'no lanes' if clamp == 'below zero' else 'lanes'}, rest {rest}"
           for kind, clamp, rest in MUL_PATH_CASES} | {"mul general"}
    assert mul <= paths, sorted(mul - paths)
    assert any(p.startswith("mul ") and "no lanes" in p for p in paths), paths


def test_dsp_kernels_match_reference(image):
    elf, built = image
    for name, graph, planned, feeds in built:
        run_ = qemu.run_firmware(elf, planned, [[feeds[n] for n in planned.inputs]], model=name)
        want = run(graph, feeds, table=INT8_IMPLS)
        for got, out in zip(run_.outputs[0], planned.outputs):
            assert np.array_equal(got, want[out]), f"{name}: firmware {got.ravel()} != reference {want[out].ravel()}"
