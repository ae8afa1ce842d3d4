"""Kiln's integer reference executor against the TFLite Micro interpreter.

Kiln promises TFLite's int8 arithmetic; the generated C is held bit-exact to the integer
reference elsewhere (test_kernels, test_end_to_end), so here the reference meets TFLite itself:
each graph is written as a .tflite flatbuffer with the same tensors and parameters
(`kiln/export/tflite.py`, what `kiln export` writes), run on TFLM's kernels, and every tensor is compared.

1. Seeded sweeps of single-op graphs (odd channel counts, strides, dilations, SAME/VALID and
   explicit paddings, zero points at −128 and 127, per-channel weight scales spanning three
   orders of magnitude, power-of-two scales whose rescaling meets rounding ties, inputs at the
   int8 extremes, every fused activation and ranges TFLite has no fused form for): conv,
   depthwise conv, fully connected, batch matmul, add, sub, mul, max/average pooling, global average pooling
   (written as MEAN, requantizing to its own output parameters),
   softmax, reshape, transpose, concat (requantizing inputs too), pad, clamp, quantize and
   dequantize are bit for bit.
2. Every model in models/ on its seeded calibration samples: every tensor, bit for bit.

Deliberate differences, each held within one quantization step:

- `sigmoid`, `tanh`, `hardswish`, `leaky_relu` and a `clamp` to new output parameters: Kiln
  tables the real function, rounded once (as TFLite's `LUTPopulate`); TFLM evaluates fixed
  point (gemmlowp `logistic`/`tanh`, the hard-swish multiplier chain, and for leaky ReLU and
  the int8→int8 QUANTIZE a `MultiplyByQuantizedMultiplier` that rounds to an integer before its
  final shift), which near a half-step rounds the other way. Kiln's value is then the nearer
  to the exact result.

Not compared: softmax rows whose sum of exponentials reaches 512 (only rows over 511 values):
TFLM's reference asserts there (`RoundingDivideByPOT` exponent above 31), where Kiln's
reference and C kernel shift in 64 bits; the sweeps keep rows at 500 values or fewer.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kernel_harness import act, q, random_int8, single_node
from model_builds import MODELS
from tflm_harness import Tflm
from kiln.check import seeded_inputs
from kiln.export.tflite import NotExportable, to_tflite
from kiln.ir import load
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.ir.ops import OPS
from kiln.ir.verify import verify
from kiln.numerics.functions import scalar_function
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.runio import quantize_inputs

SEEDS = range(40)
SAMPLES = 8
FUSED = [(-math.inf, math.inf), (0.0, math.inf), (0.0, 6.0), (-1.0, 1.0)]


# -- building single-op graphs ----------------------------------------------------------
def one_op(op: str, inputs: list[Tensor], out_quant: QuantParams | None, attrs: dict, out_dtype: str = "int8") -> Graph:
    """A verified graph of `op` whose output shape is the op's own inference."""
    ((shape, _),) = OPS[op].infer(Node("n", op, [t.name for t in inputs], ["y"], attrs), inputs)
    graph = single_node(op, inputs, [act("y", shape, out_quant, out_dtype)], attrs)
    verify(graph, levels=("kernel",))
    return graph


def zero_point(rng: np.random.Generator) -> int:
    """Often an extreme, else anywhere in int8."""
    return int(rng.choice([-128, 127, rng.integers(-128, 128)]))


def log_uniform(rng: np.random.Generator, lo: float, hi: float, size: int | None = None) -> np.ndarray:
    return 10.0 ** rng.uniform(lo, hi, size)


class Scales:
    """Scales for one graph: as given, or (a third of the graphs) snapped to powers of two, where
    every rescaling multiplier is exactly 2^30 and rounding meets its ties."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.pow2 = bool(rng.random() < 0.33)

    def __call__(self, value: float) -> float:
        return float(2.0 ** round(math.log2(value))) if self.pow2 else float(value)


def activation(rng: np.random.Generator, out_scale: float, out_zp: int) -> dict:
    """One of TFLite's fused activations, or (a fifth of the time) a range it has no fused form for,
    half the time with bounds halfway between two output levels."""
    if rng.random() < 0.2:
        levels = np.sort(rng.choice(np.arange(-128, 127), 2, replace=False)) + (0.5 if rng.random() < 0.5 else rng.uniform(0, 1, 2))
        lo, hi = out_scale * (levels - out_zp)
        return {"act_min": float(lo), "act_max": float(hi)}
    lo, hi = FUSED[rng.integers(len(FUSED))]
    return {"act_min": lo, "act_max": hi}


def pads_for(rng: np.random.Generator, size: tuple[int, int], span: tuple[int, int], strides, explicit: bool) -> list[int]:
    """Kiln pads [top, left, bottom, right]: TFLite SAME or VALID, or (explicit) any pads below the window."""
    if explicit:
        return [int(rng.integers(0, s)) for s in span + span]
    if rng.random() < 0.5 and all(n >= k for n, k in zip(size, span)):
        return [0, 0, 0, 0]
    totals = [max((-(-n // s) - 1) * s + k - n, 0) for n, k, s in zip(size, span, strides)]
    return [totals[0] // 2, totals[1] // 2, totals[0] - totals[0] // 2, totals[1] - totals[1] // 2]


def weights(rng: np.random.Generator, shape: tuple[int, ...], axis: int, base: float, scale: Scales) -> Tensor:
    """Symmetric int8 weights, per channel along `axis` with scales over three decades (or per tensor)."""
    data = rng.integers(-127, 128, shape).astype(np.int8)
    if rng.random() < 0.25:
        return Tensor("w", shape, "int8", quant=QuantParams((base,), (0,)), data=data)
    scales = tuple(scale(base * s) for s in log_uniform(rng, -1.5, 1.5, shape[axis]))
    return Tensor("w", shape, "int8", quant=QuantParams(scales, (0,) * shape[axis], axis), data=data)


def bias(rng: np.random.Generator, in_scale: float, w: Tensor, channels: int) -> Tensor:
    """int32 bias with scale input_scale × weight_scale per channel, as the quantize stage makes it."""
    bound = 1 << int(rng.choice([10, 16, 24]))
    scales = tuple(in_scale * s for s in w.quant.scale)
    quant = QuantParams(scales, (0,) * len(scales), 0 if len(scales) > 1 else None)
    return Tensor("b", (channels,), "int32", quant=quant, data=rng.integers(-bound, bound, channels).astype(np.int32))


def conv_graph(rng: np.random.Generator, op: str) -> Graph:
    """conv2d or depthwise_conv2d with random geometry and quantization."""
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(3, 10)), int(rng.integers(3, 10))
    c = int(rng.choice([1, 3, 5, 7]))
    kh, kw = (int(k) for k in rng.integers(1, 4, 2))
    strides = [int(s) for s in rng.integers(1, 3, 2)]
    dil = [int(d) for d in rng.integers(1, 3, 2)] if rng.random() < 0.3 else [1, 1]
    span = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
    pads = pads_for(rng, (h, w), span, strides, explicit=rng.random() < 0.25)
    scale = Scales(rng)
    in_s, in_zp = scale(log_uniform(rng, -3, -0.5)), zero_point(rng)
    w_base = scale(log_uniform(rng, -3, -1))
    attrs = {"strides": strides, "dilations": dil, "pads": pads}
    if op == "conv2d":
        oc = int(rng.integers(1, 10))
        wt, taps = weights(rng, (oc, kh, kw, c), 0, w_base, scale), kh * kw * c
    else:
        mult = int(rng.integers(1, 4))
        oc = c * mult
        wt, taps = weights(rng, (1, kh, kw, oc), 3, w_base, scale), kh * kw
        attrs["depth_multiplier"] = mult
    out_s, out_zp = scale(in_s * w_base * math.sqrt(taps) * log_uniform(rng, 1.5, 2.5)), zero_point(rng)
    attrs.update(activation(rng, out_s, out_zp))
    return one_op(op, [act("x", (n, h, w, c), q(in_s, in_zp)), wt, bias(rng, in_s, wt, oc)], q(out_s, out_zp), attrs)


def fully_connected_graph(rng: np.random.Generator) -> Graph:
    n, k, oc = int(rng.integers(1, 4)), int(rng.integers(1, 41)), int(rng.integers(1, 10))
    scale = Scales(rng)
    in_s, in_zp, w_base = scale(log_uniform(rng, -3, -0.5)), zero_point(rng), scale(log_uniform(rng, -3, -1))
    out_s, out_zp = scale(in_s * w_base * math.sqrt(k) * log_uniform(rng, 1.5, 2.5)), zero_point(rng)
    inputs = [act("x", (n, k), q(in_s, in_zp)), weights(rng, (oc, k), 0, w_base, scale)]
    if rng.random() < 0.8:
        inputs.append(bias(rng, in_s, inputs[1], oc))
    return one_op("fully_connected", inputs, q(out_s, out_zp), activation(rng, out_s, out_zp))


def batch_matmul_graph(rng: np.random.Generator) -> Graph:
    """A product of two activations ([..., m, k] @ [..., k, n]), both with zero points."""
    lead = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    m, k, n = int(rng.integers(1, 9)), int(rng.integers(1, 41)), int(rng.integers(1, 9))
    scale = Scales(rng)
    a_s, b_s = scale(log_uniform(rng, -3, -0.5)), scale(log_uniform(rng, -3, -0.5))
    out_s, out_zp = scale(a_s * b_s * 128 * math.sqrt(k) * log_uniform(rng, 0.5, 1.5)), zero_point(rng)
    inputs = [act("a", (*lead, m, k), q(a_s, zero_point(rng))), act("b", (*lead, k, n), q(b_s, zero_point(rng)))]
    return one_op("batch_matmul", inputs, q(out_s, out_zp), activation(rng, out_s, out_zp))


def binary_graph(rng: np.random.Generator, op: str) -> Graph:
    """add/sub/mul, broadcasting one input over rows, columns or channels a third of the time."""
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.choice([1, 3, 5])))
    other = list(shape)
    if rng.random() < 0.33:
        for axis in rng.choice(4, int(rng.integers(1, 4)), replace=False):
            other[axis] = 1
    scale = Scales(rng)
    a_s, b_s = (scale(s) for s in log_uniform(rng, -3, 0, 2))
    zps = [zero_point(rng) for _ in range(3)]
    out_s = scale((a_s * b_s * 128 if op == "mul" else a_s + b_s) * log_uniform(rng, -0.4, 0.4))
    ins = [act("a", shape, q(a_s, zps[0])), act("b", tuple(other), q(b_s, zps[1]))]
    if rng.random() < 0.5:
        ins.reverse()
    return one_op(op, ins, q(out_s, zps[2]), activation(rng, out_s, zps[2]))


def pool_graph(rng: np.random.Generator, op: str) -> Graph:
    shape = (int(rng.integers(1, 3)), int(rng.integers(2, 10)), int(rng.integers(2, 10)), int(rng.choice([1, 3, 5])))
    window = [int(k) for k in rng.integers(1, 4, 2)]
    strides = [int(s) for s in rng.integers(1, 4, 2)]
    explicit = op == "max_pool2d" and rng.random() < 0.3
    pads = pads_for(rng, shape[1:3], tuple(window), strides, explicit)
    quant = q(Scales(rng)(log_uniform(rng, -3, 0)), zero_point(rng))
    attrs = {"window": window, "strides": strides, "pads": pads, **activation(rng, quant.scale[0], quant.zero_point[0])}
    return one_op(op, [act("x", shape, quant)], quant, attrs)


def global_avg_pool_graph(rng: np.random.Generator) -> Graph:
    """Output parameters of their own (a quarter of the time the input's), from 30x finer to 10x coarser."""
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 20)), int(rng.integers(1, 20)), int(rng.choice([1, 3, 5, 8])))
    quant = q(float(log_uniform(rng, -3, 0)), zero_point(rng))
    out = quant if rng.random() < 0.25 else q(float(quant.scale[0] * log_uniform(rng, -1.5, 1.0)), zero_point(rng))
    return one_op("global_avg_pool", [act("x", shape, quant)], out, {})


def softmax_graph(rng: np.random.Generator) -> Graph:
    depth = int(rng.choice([1, 2, 3, 10, 17, 64, 500]))
    shape = (int(rng.integers(1, 4)), depth) if rng.random() < 0.5 else (1, int(rng.integers(1, 4)), int(rng.integers(1, 4)), depth)
    beta = float(rng.choice([1.0, 0.5, 2.0]))
    quant = q(Scales(rng)(log_uniform(rng, -2.5, -0.3)), zero_point(rng))
    return one_op("softmax", [act("x", shape, quant)], q(1.0 / 256.0, -128), {"beta": beta})


def movement_graph(rng: np.random.Generator, op: str) -> Graph:
    """reshape, transpose, concat, pad: same parameters in and out (concat inputs may requantize)."""
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.choice([1, 3, 5])))
    quant = q(float(log_uniform(rng, -3, 0)), zero_point(rng))
    x = act("x", shape, quant)
    if op == "reshape":
        return one_op(op, [x], quant, {"shape": [shape[0], int(np.prod(shape[1:]))] if rng.random() < 0.5 else [int(np.prod(shape))]})
    if op == "transpose":
        return one_op(op, [x], quant, {"perm": [int(p) for p in rng.permutation(4)]})
    if op == "concat":
        axis = int(rng.integers(0, 4))
        others = []
        for i in range(int(rng.integers(1, 3))):
            own = quant if rng.random() < 0.5 else q(quant.scale[0] * log_uniform(rng, -1, 1), zero_point(rng))
            others.append(act(f"x{i}", tuple(int(rng.integers(1, 4)) if d == axis else s for d, s in enumerate(shape)), own))
        return one_op(op, [x, *others], quant, {"axis": axis if rng.random() < 0.5 else axis - 4})
    value = 0.0 if rng.random() < 0.5 else float(rng.uniform(-128 - quant.zero_point[0], 127 - quant.zero_point[0]) * quant.scale[0])
    return one_op(op, [x], quant, {"pads": [int(p) for p in rng.integers(0, 3, 8)], "value": value})


def lut_graph(rng: np.random.Generator, case: str) -> Graph:
    """An elementwise op over all 256 int8 inputs; `clamp/requantize` has new output parameters.

    sigmoid and tanh inputs keep scales up to 1: above, TFLM's fixed-point kernels saturate every
    input more than a radius of 8 to 16 units from zero, counted in whole input steps (one step
    at scale 4), several steps from the real function, which Kiln's table still follows."""
    scale = Scales(rng)
    op, attrs = case.split("/")[0], {}
    in_q = q(scale(log_uniform(rng, -3, 0 if op in ("sigmoid", "tanh") else 0.5)), zero_point(rng))
    out_q = q(scale(in_q.scale[0] * log_uniform(rng, -0.5, 0.5)), zero_point(rng))
    if op in ("sigmoid", "tanh"):
        out_q = q(1.0 / 256.0, -128) if op == "sigmoid" else q(1.0 / 128.0, 0)
    elif op == "leaky_relu":
        attrs = {"alpha": float(rng.choice([0.01, 0.1, 0.2, 0.3]))}
    elif op == "clamp":
        out_q = out_q if case == "clamp/requantize" else in_q
        attrs = activation(rng, out_q.scale[0], out_q.zero_point[0])
    return one_op(op, [act("x", (1, 256), in_q)], out_q, attrs)


def real_result(graph: Graph) -> np.ndarray:
    """The exact real output of an elementwise graph at every int8 input, in output steps (float64)."""
    (in_s, in_zp), (out_s, out_zp) = qp(graph, "x"), qp(graph, "y")
    fn = scalar_function(graph.nodes[0].op, graph.nodes[0].attrs)
    return np.array([fn(in_s * (v - in_zp)) / out_s + out_zp for v in range(-128, 128)])


# -- running both sides -----------------------------------------------------------------
def qp(graph: Graph, name: str) -> tuple[float, int]:
    quant = graph.tensors[name].quant
    return quant.scale[0], quant.zero_point[0]


def bits(a: np.ndarray) -> np.ndarray:
    """Values compared exactly: float32 by bit pattern, integers as int64."""
    return a.view(np.int32).astype(np.int64) if a.dtype == np.float32 else a.astype(np.int64)


def compare(graph: Graph, samples: list[dict[str, np.ndarray]]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(tensor, Kiln value, TFLM value) for every non-constant tensor of every sample."""
    exported = to_tflite(graph)
    tflm = Tflm(exported, graph)
    internal = {n for n, t in graph.tensors.items() if not t.is_constant}
    assert set(exported.tensors) >= internal, f"tensors not exported: {sorted(internal - set(exported.tensors))}"
    pairs = []
    for feeds in samples:
        mine, theirs = run(graph, feeds, table=INT8_IMPLS, keep=True), tflm(feeds)
        pairs += [(name, mine[name], theirs[name]) for name in sorted(internal)]
    return pairs


def random_feeds(rng: np.random.Generator, graph: Graph, count: int = SAMPLES) -> list[dict[str, np.ndarray]]:
    """Uniform int8 samples, and one of only −128 and 127 (saturating every accumulator it can)."""
    shapes = {n: graph.tensors[n].shape for n in graph.inputs}
    feeds = [{n: random_int8(rng, s) for n, s in shapes.items()} for _ in range(count - 1)]
    return feeds + [{n: rng.choice(np.array([-128, 127], np.int8), s) for n, s in shapes.items()}]


def assert_bit_exact(graph: Graph, samples: list[dict[str, np.ndarray]]) -> np.ndarray:
    """Kiln == TFLM on every tensor; returns Kiln's output values (for degeneracy checks)."""
    outputs = []
    for name, mine, theirs in compare(graph, samples):
        diff = np.flatnonzero(bits(mine) != bits(theirs))
        assert diff.size == 0, f"{name}: {diff.size} of {mine.size} values differ, first at {diff[0]}: Kiln {mine.ravel()[diff[0]]}, TFLM {theirs.ravel()[diff[0]]}"
        outputs += [mine.ravel()] if name in graph.outputs else []
    return np.concatenate(outputs)


def output_pair(graph: Graph, samples: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Kiln's and TFLM's graph output over all samples, as int64."""
    pairs = [(bits(m), bits(t)) for name, m, t in compare(graph, samples) if name == graph.outputs[0]]
    return np.concatenate([m.ravel() for m, _ in pairs]), np.concatenate([t.ravel() for _, t in pairs])


def seeded(op_or_case: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, sum(map(ord, op_or_case))])


# -- 1. single ops --------------------------------------------------------------------------
SWEEPS = {
    "conv2d": lambda rng: conv_graph(rng, "conv2d"),
    "depthwise_conv2d": lambda rng: conv_graph(rng, "depthwise_conv2d"),
    "fully_connected": fully_connected_graph,
    "batch_matmul": batch_matmul_graph,
    "add": lambda rng: binary_graph(rng, "add"),
    "sub": lambda rng: binary_graph(rng, "sub"),
    "mul": lambda rng: binary_graph(rng, "mul"),
    "max_pool2d": lambda rng: pool_graph(rng, "max_pool2d"),
    "avg_pool2d": lambda rng: pool_graph(rng, "avg_pool2d"),
    "global_avg_pool": global_avg_pool_graph,
    "softmax": softmax_graph,
    "reshape": lambda rng: movement_graph(rng, "reshape"),
    "transpose": lambda rng: movement_graph(rng, "transpose"),
    "concat": lambda rng: movement_graph(rng, "concat"),
    "pad": lambda rng: movement_graph(rng, "pad"),
}


@pytest.mark.parametrize("op", sorted(SWEEPS))
def test_op_sweep_bit_exact(op: str) -> None:
    """Every seeded single-op graph gives TFLM's values bit for bit, and the sweep is not degenerate."""
    outputs = []
    for seed in SEEDS:
        rng = seeded(op, seed)
        graph = SWEEPS[op](rng)
        try:
            outputs.append(assert_bit_exact(graph, random_feeds(rng, graph)))
        except AssertionError as exc:
            raise AssertionError(f"{op} seed {seed}: {exc}") from None
    values = np.concatenate(outputs)
    assert len(np.unique(values)) > 20, f"{op}: the sweep's outputs hold only {np.unique(values)}"
    assert {-128, 127} <= set(values.tolist()), f"{op}: the sweep never saturates"


ALL_INT8 = [{"x": np.arange(-128, 128, dtype=np.int8).reshape(1, 256)}]


def test_clamp_bit_exact() -> None:
    """A clamp keeping its parameters equals TFLite's MAXIMUM/MINIMUM with the bounds quantized as
    fused activations are, at every int8 input, bounds on half-steps included."""
    for seed in SEEDS:
        graph = lut_graph(seeded("clamp", seed), "clamp")
        try:
            assert_bit_exact(graph, ALL_INT8)
        except AssertionError as exc:
            raise AssertionError(f"clamp seed {seed}: {exc}") from None


@pytest.mark.parametrize("case", ["sigmoid", "tanh", "hardswish", "leaky_relu", "clamp/requantize"])
def test_lut_ops_within_one_step(case: str) -> None:
    """Kiln tables the real function, rounded once; TFLM's LOGISTIC and TANH evaluate gemmlowp
    fixed-point approximations (saturating beyond an input radius counted in whole input steps),
    HARD_SWISH a fixed-point multiplier chain, LEAKY_RELU and int8→int8 QUANTIZE one
    `MultiplyByQuantizedMultiplier` that rounds to an integer before its final shift. Near a
    half-step those land one step off. At every input where the two differ, Kiln's value is the
    nearer to the exact result, and never more than one step from TFLM's."""
    differing = 0
    for seed in SEEDS:
        graph = lut_graph(seeded(case, seed), case)
        mine, theirs = output_pair(graph, ALL_INT8)
        gap = np.abs(mine - theirs)
        assert gap.max() <= 1, f"{case} seed {seed}: Kiln and TFLM {gap.max()} steps apart"
        exact = real_result(graph)
        at = np.flatnonzero(gap)
        assert np.all(np.abs(mine[at] - exact[at]) <= np.abs(theirs[at] - exact[at])), f"{case} seed {seed}: TFLM rounds closer"
        differing += at.size
    assert differing > 0, f"{case}: now bit-exact with TFLM; test it bit for bit and update the docstrings"


@pytest.mark.parametrize("seed", range(6))
def test_quantize_dequantize_bit_exact(seed: int) -> None:
    """Float → int8 (float32 division, ties away from zero, saturation) and back, as TFLM's QUANTIZE and
    DEQUANTIZE, on values that include exact half-steps under power-of-two scales."""
    rng = seeded("quantize", seed)
    quant = q(Scales(rng)(log_uniform(rng, -3, 0)), zero_point(rng))
    x, mid = act("x", (4, 64), dtype="float32"), act("m", (4, 64), quant)
    graph = Graph("g", {t.name: t for t in (x, mid, act("y", (4, 64), dtype="float32"))}, inputs=["x"], outputs=["y"])
    graph.nodes = [Node("q", "quantize", ["x"], ["m"], {"to": "int8"}), Node("d", "dequantize", ["m"], ["y"])]
    verify(graph, levels=("kernel",))
    steps = np.concatenate([rng.uniform(-200, 200, 128), rng.integers(-200, 200, 128) + 0.5])
    values = (np.float32(quant.scale[0]) * steps.astype(np.float32)).reshape(4, 64)
    assert_bit_exact(graph, [{"x": values}, {"x": -values}])


@pytest.mark.parametrize("zp", [-3, 0, 5])
def test_fused_activation_bounds_round_ties_away(zp: int) -> None:
    """RELU_N1_TO_1 at output scale 2 and RELU6 at scale 12 put a bound exactly halfway between two
    levels; TFLite rounds it away from zero (`TfLiteRound`), and so must Kiln."""
    rng = seeded("ties", zp + 128)
    for out_s, (lo, hi) in ((2.0, (-1.0, 1.0)), (12.0, (0.0, 6.0))):
        w = Tensor("w", (6, 16), "int8", quant=QuantParams((1.0 / 64.0,), (0,)), data=rng.integers(-127, 128, (6, 16)).astype(np.int8))
        graph = one_op("fully_connected", [act("x", (8, 16), q(1.0 / 16.0, 0)), w], q(out_s, zp), {"act_min": lo, "act_max": hi})
        values = assert_bit_exact(graph, random_feeds(rng, graph))
        assert values.min() == zp + (-1 if lo < 0 else 0) and values.max() == zp + 1


def test_exporter_refuses_inexact_forms() -> None:
    """What TFLite cannot express exactly is refused with its reason, never approximated: an average
    pool whose explicit pads are neither SAME nor VALID (a PAD would count in the divisor), and ops
    without an int8 builtin."""
    quant = q(0.05, 3)
    pool = one_op("avg_pool2d", [act("x", (1, 5, 5, 2), quant)], quant, {"window": [3, 3], "strides": [1, 1], "pads": [0, 2, 0, 0]})
    with pytest.raises(NotExportable, match="neither SAME nor VALID"):
        to_tflite(pool)
    with pytest.raises(NotExportable, match="silu 'n': no TFLite counterpart"):
        to_tflite(one_op("silu", [act("x", (1, 8), quant)], q(0.02, -5), {}))


# -- 2. models --------------------------------------------------------------------------------
MODEL_SAMPLES = 8


@pytest.mark.parametrize("model", MODELS)
def test_model_bit_exact(model: str, compiled, calibration) -> None:
    """Every tensor of the model's quantized graph, on its seeded calibration samples, equals TFLM's.
    A model using an op with no exact TFLite form fails here with the exporter's reason."""
    graph = load(compiled(model) / "quantized.kir")
    samples = quantize_inputs(graph, seeded_inputs(graph, calibration(model), count=MODEL_SAMPLES))
    outputs = assert_bit_exact(graph, [dict(zip(graph.inputs, s)) for s in samples])
    assert len(np.unique(outputs)) > 1, f"{model}: every sample gives the same output"
