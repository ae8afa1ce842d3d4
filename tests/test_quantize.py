"""The quantize stage: parameter rules per op, weights and biases, QDQ sources, calibration input, determinism."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln.errors import KilnError
from kiln.ir import dumps, loads
from kiln.ir.graph import Graph, Node, QuantParams, Tensor
from kiln.ir.ops import OPS
from kiln.ir.verify import verify
from kiln.quantize import quantize
from kiln.quantize.calibration import load_calibration
from kiln.quantize.config import CONFIG
from kiln.quantize.report import format_report, report, run_quantized, to_json
from kiln.quantize.scheme import choose_qparams, quantize_weights
from kiln.reference.batch import run_batch
from kiln.reference.executor import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_models import quantize_qdq  # noqa: E402

DEFAULTS = {k: v.default for k, v in CONFIG.items()}
INF = math.inf
RELU = {"act_min": 0.0, "act_max": INF}
NO_ACT = {"act_min": -INF, "act_max": INF}


class Builder:
    """Kernel-level graphs in a few lines; output shapes come from the op definitions."""

    def __init__(self, name: str, qdq: bool = False) -> None:
        self.g = Graph(name, meta={"quantized_source": "qdq"} if qdq else {})
        self.rng = np.random.default_rng(0)

    def input(self, name: str, shape: tuple[int, ...], quant: QuantParams | None = None) -> str:
        self.g.add_tensor(Tensor(name, shape, "float32", quant=quant))
        self.g.inputs.append(name)
        return name

    def const(self, name: str, data: np.ndarray, quant: QuantParams | None = None) -> str:
        self.g.add_tensor(Tensor(name, data.shape, "float32", quant=quant, data=np.asarray(data, np.float32)))
        return name

    def weights(self, name: str, shape: tuple[int, ...]) -> str:
        return self.const(name, self.rng.standard_normal(shape) * 0.3)

    def op(self, op: str, inputs: list[str], name: str, quant: QuantParams | None = None, **attrs) -> str:
        node = Node(name, op, inputs, [name], attrs)
        (shape, dtype), = OPS[op].infer(node, [self.g.tensors[i] if i else None for i in inputs])
        self.g.add_tensor(Tensor(name, shape, dtype, quant=quant))
        self.g.nodes.append(node)
        return name

    def done(self, *outputs: str) -> Graph:
        self.g.outputs = list(outputs)
        verify(self.g, levels=("kernel",))
        return self.g


def conv_attrs(pads: int = 1) -> dict:
    return {"strides": [1, 1], "dilations": [1, 1], "pads": [pads] * 4}


def rules_graph() -> Graph:
    """One graph with every parameter rule: weighted ops, sharing ops, concat, fixed-output ops."""
    b = Builder("rules")
    x = b.input("x", (1, 8, 8, 2))
    c = b.op("conv2d", [x, b.weights("wc", (4, 3, 3, 2)), b.weights("bc", (4,))], "c", **conv_attrs(), **RELU)
    d = b.op("depthwise_conv2d", [x, b.weights("wd", (1, 3, 3, 4))], "d", depth_multiplier=2, **conv_attrs(), **NO_ACT)
    pool = {"window": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]}
    p = b.op("max_pool2d", [c], "p", **pool, **NO_ACT)
    a = b.op("avg_pool2d", [d], "a", **pool, **NO_ACT)
    cat = b.op("concat", [p, a], "cat", axis=3)
    pd = b.op("pad", [cat], "pd", pads=[0, 1, 1, 0, 0, 1, 1, 0], value=0.0)
    gap = b.op("global_avg_pool", [pd], "gap")
    r = b.op("reshape", [gap], "r", shape=[1, 8])
    f = b.op("fully_connected", [r, b.weights("wf", (6, 8))], "f", **NO_ACT)
    sl = b.op("slice", [f], "sl", starts=[0, 0], ends=[1, 4], steps=[1, 1])
    t = b.op("transpose", [sl], "t", perm=[1, 0])
    ad = b.op("add", [f, b.const("k", np.linspace(-1, 2, 6, dtype=np.float32).reshape(1, 6))], "ad", **NO_ACT)
    sm = b.op("softmax", [sl], "sm", beta=1.0)
    sg = b.op("sigmoid", [f], "sg")
    th = b.op("tanh", [ad], "th")
    return b.done(sm, sg, th, t)


def samples(graph: Graph, n: int = 40, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1.0, 1.0, (n, *graph.tensors[name].shape)).astype(np.float32) for name in graph.inputs}


def params(g: Graph, name: str) -> QuantParams:
    return g.tensors[name].quant


def represented(q: QuantParams) -> tuple[float, float]:
    s, z = q.scale[0], q.zero_point[0]
    return s * (-128 - z), s * (127 - z)


@pytest.fixture(scope="module")
def rules() -> tuple[Graph, Graph, dict[str, np.ndarray]]:
    g = rules_graph()
    cal = samples(g)
    return g, quantize(g, DEFAULTS, cal), cal


# -- activation parameters ---------------------------------------------------
@pytest.mark.parametrize("lo, hi, scale, zp", [
    (0.0, 1.0, 1 / 255, -128),      # zero at the bottom
    (2.0, 5.0, 5 / 255, -128),      # widened down to 0
    (-4.0, -1.0, 4 / 255, 127),     # widened up to 0
    (-1.0, 1.0, 2 / 255, -1),       # zero point -0.5 rounds half away from zero
    (-3.0, 1.0, 4 / 255, 63),       # 127 - 1/(4/255) = 63.25
    (0.0, 0.0, 1.0, 0),             # an all-zero tensor
])
def test_choose_qparams(lo, hi, scale, zp):
    q = choose_qparams(lo, hi)
    assert q.scale[0] == pytest.approx(scale, rel=1e-6) and q.zero_point == (zp,) and q.axis is None


def test_range_always_contains_zero_exactly():
    rng = np.random.default_rng(2)
    for lo, hi in rng.uniform(-10, 10, (200, 2)):
        q = choose_qparams(min(lo, hi), max(lo, hi))
        rlo, rhi = represented(q)
        assert -128 <= q.zero_point[0] <= 127 and rlo <= 1e-6 and rhi >= -1e-6


# -- weights and biases --------------------------------------------------------
def test_weight_rounding_is_half_away_from_zero():
    w = np.array([[127.0, 2.5, -2.5, 0.5, -0.4, -126.5]], np.float32)  # max|w| = 127: scale exactly 1
    q, p = quantize_weights(w, axis=0)
    assert p.scale == (1.0,) and p.zero_point == (0,) and p.axis == 0
    assert q.tolist() == [[127, 3, -3, 1, 0, -127]]


def test_weight_edge_channels():
    w = np.zeros((3, 4), np.float32)
    w[1] = [-2.0, -1.0, -0.5, -0.25]   # negative only
    w[2] = [0.1, 0.2, -0.4, 0.3]
    q, p = quantize_weights(w, axis=0)
    assert q.dtype == np.int8 and p.zero_point == (0, 0, 0)
    assert p.scale[0] == 1.0 and q[0].tolist() == [0, 0, 0, 0]          # all-zero channel: scale 1, zeros
    assert p.scale[1] == pytest.approx(2.0 / 127) and q[1].tolist() == [-127, -64, -32, -16]
    assert p.scale[2] == pytest.approx(0.4 / 127) and q[2].tolist() == [32, 64, -127, 95]
    assert q.min() >= -127


def test_weights_per_tensor_and_depthwise_axis():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1, 3, 3, 5)).astype(np.float32)
    q, p = quantize_weights(w, axis=3)
    assert len(p.scale) == 5 and p.axis == 3
    assert np.allclose(p.scale, np.abs(w).max(axis=(0, 1, 2)) / 127, rtol=1e-6)
    assert np.all(np.abs(q).max(axis=(0, 1, 2)) == 127)
    q1, p1 = quantize_weights(w, axis=None)
    assert p1.axis is None and p1.scale[0] == pytest.approx(np.abs(w).max() / 127, rel=1e-6)


def test_weighted_ops_get_int8_weights_and_int32_bias(rules):
    _, q, _ = rules
    for node, axis in (("c", 0), ("d", 3), ("f", 0)):
        n = q.node(node)
        assert len(n.inputs) == 3 and n.inputs[2]
        x, w, bias = (q.tensors[i] for i in n.inputs)
        assert w.dtype == "int8" and w.quant.axis == axis and set(w.quant.zero_point) == {0}
        assert bias.dtype == "int32" and bias.quant.axis == 0 and set(bias.quant.zero_point) == {0}
        expected = np.float32(np.float64(x.quant.scale[0]) * np.asarray(w.quant.scale, np.float64))
        assert np.array_equal(np.asarray(bias.quant.scale, np.float32), expected)
    bias = q.tensors[q.node("c").inputs[2]]
    original = rules[0].tensors["bc"].data
    assert np.array_equal(bias.data, np.round(original / np.asarray(bias.quant.scale, np.float64)).astype(np.int32))
    for node in ("d", "f"):  # the source had no bias: a zero one is added
        assert not q.tensors[q.node(node).inputs[2]].data.any()


def test_per_tensor_weights_option(rules):
    g, _, cal = rules
    q = quantize(g, dict(DEFAULTS, per_channel=False), cal)
    for node in ("c", "d", "f"):
        w, bias = (q.tensors[i] for i in q.node(node).inputs[1:3])
        assert w.quant.axis is None and len(w.quant.scale) == 1
        assert bias.quant.axis is None and len(bias.quant.scale) == 1


# -- op rules --------------------------------------------------------------------
def test_every_activation_is_int8_and_graph_verifies(rules):
    g, q, _ = rules
    verify(q, levels=("kernel",))
    for name, t in q.tensors.items():
        if not t.is_constant:
            assert t.dtype == "int8" and t.quant.axis is None, name
    assert [n.op for n in q.nodes] == [n.op for n in g.nodes]


def test_sharing_rules(rules):
    _, q, _ = rules
    # max pool and avg pool keep their input's parameters; concat unifies its inputs with its output,
    # which pulls in the convs feeding the pools; pad keeps them; the global average pool (TFLite's MEAN)
    # requantizes to a range of its own, which the reshape after it keeps
    shared = {params(q, n) for n in ("c", "d", "p", "a", "cat", "pd")}
    assert len(shared) == 1
    assert params(q, "gap") == params(q, "r") != params(q, "pd")
    assert represented(params(q, "gap"))[1] < represented(params(q, "pd"))[1] / 2  # a mean is far narrower
    assert params(q, "sl") == params(q, "f") and params(q, "t") == params(q, "f")
    assert params(q, "sm") == QuantParams((1 / 256,), (-128,))  # the softmax kernel's fixed output
    assert represented(params(q, "sg"))[0] == 0.0 and represented(params(q, "sg"))[1] <= 1.0  # calibrated, inside (0, 1)
    assert represented(params(q, "th"))[1] <= 1.0 and params(q, "th") != QuantParams((1 / 128,), (0,))
    assert len({params(q, n) for n in ("x", "f", "ad", "c")}) == 4  # calibrated ops get their own


def test_unified_range_covers_every_member(rules):
    g, q, cal = rules
    lo, hi = 0.0, 0.0
    for i in range(len(cal["x"])):
        values = run(g, {"x": cal["x"][i]}, keep=True)
        for name in ("c", "d", "p", "a", "cat", "pd"):
            lo, hi = min(lo, values[name].min()), max(hi, values[name].max())
    rlo, rhi = represented(params(q, "cat"))
    step = params(q, "cat").scale[0]
    assert rlo <= lo + step and rhi >= hi - step
    assert rlo >= lo - 2 * step and rhi <= hi + 2 * step  # and no wider than the members need


def assert_ranges_cover(g: Graph, q: Graph, cal: dict[str, np.ndarray]) -> None:
    """Every int8 activation's range covers the float values it held during calibration (to within a step)."""
    seen: dict[str, tuple[float, float]] = {}
    run_batch(g, cal, visit=lambda name, v: seen.__setitem__(name, (float(v.min()), float(v.max()))))
    checked = 0
    for name, t in q.tensors.items():
        if t.dtype == "int8" and not t.is_constant and name in seen:
            lo, hi = represented(t.quant)
            step = t.quant.scale[0]
            assert lo - step <= seen[name][0] and seen[name][1] <= hi + step, (name, seen[name], (lo, hi))
            checked += 1
    assert checked == len(seen)


def test_every_range_covers_its_calibrated_values(rules):
    assert_ranges_cover(*rules)


def test_constant_operand_quantized_with_its_own_range(rules):
    _, q, _ = rules
    k = q.tensors["k"]
    assert k.dtype == "int8" and k.data is not None
    assert represented(k.quant) == pytest.approx((-1.0, 2.0), abs=3 / 255)  # its data spans [-1, 2]


def test_concat_of_a_fixed_output_it_cannot_hold_requantizes_it():
    b = Builder("conflict")
    x = b.input("x", (1, 4))
    s = b.op("softmax", [x], "s", beta=1.0)
    t = b.op("tanh", [x], "t")
    cat = b.op("concat", [s, t], "cat", axis=1)
    g = b.done(cat)
    q = quantize(g, DEFAULTS, samples(g))
    verify(q, levels=("kernel",))
    # softmax's fixed [0, 1) grid cannot hold tanh's negative values: the softmax output is requantized
    # into the concat, which is calibrated over both
    (clamp,) = [n for n in q.nodes if n.op == "clamp"]
    assert clamp.inputs == ["s"] and q.node("cat").inputs == [clamp.outputs[0], "t"]
    assert params(q, "s") == QuantParams((1 / 256,), (-128,))
    unified = params(q, "cat")
    assert params(q, clamp.outputs[0]) == unified == params(q, "t")
    lo, hi = represented(unified)
    assert lo < -0.5 and hi > 0.5  # tanh's negative values survive
    feeds = {"x": np.array([[-0.9, -0.5, 0.5, 0.9]], np.float32)}  # inside the calibrated range
    got = (run_quantized(q, feeds)["cat"].astype(np.float64) - unified.zero_point[0]) * unified.scale[0]
    assert np.abs(got - run(g, feeds)["cat"]).max() <= 2 * unified.scale[0]


def test_concat_of_outputs_a_fixed_grid_holds_shares_it():
    b = Builder("agree")
    x = b.input("x", (1, 4))
    s = b.op("softmax", [x], "s", beta=1.0)
    h = b.op("sigmoid", [x], "h")
    g = b.done(b.op("concat", [s, h], "cat", axis=1))
    q = quantize(g, DEFAULTS, samples(g))
    assert not [n for n in q.nodes if n.op == "clamp"]  # sigmoid values lie in [0, 1): no requantization
    assert params(q, "cat") == params(q, "h") == params(q, "s") == QuantParams((1 / 256,), (-128,))


@pytest.mark.parametrize("head", ["sigmoid", "softmax"])
def test_concat_never_narrows_an_input_to_a_fixed_output_grid(head: str):
    """The MLP head cat([sigmoid(fc(silu(fc(x)))), x]) -> fc -> softmax, x a normal(0, 1) model input: x keeps
    its own calibrated range, never the sigmoid's [0, 1) (nor a softmax's fixed grid, which is requantized)."""
    b = Builder("head")
    x = b.input("x", (1, 16))
    h = b.op("fully_connected", [x, b.weights("w1", (32, 16)), b.weights("b1", (32,))], "h", **NO_ACT)
    h = b.op("silu", [h], "act")
    h = b.op("fully_connected", [h, b.weights("w2", (16, 32)), b.weights("b2", (16,))], "h2", **NO_ACT)
    s = b.op(head, [h], "s", **({"beta": 1.0} if head == "softmax" else {}))
    cat = b.op("concat", [s, x], "cat", axis=1)
    y = b.op("fully_connected", [cat, b.weights("w3", (10, 32)), b.weights("b3", (10,))], "logits", **NO_ACT)
    g = b.done(b.op("softmax", [y], "probs", beta=1.0))
    rng = np.random.default_rng(5)
    cal = {"x": rng.standard_normal((64, 1, 16)).astype(np.float32)}
    q = quantize(g, DEFAULTS, cal)
    verify(q, levels=("kernel",))
    assert params(q, "x") == choose_qparams(cal["x"].min(), cal["x"].max()) == params(q, "cat")
    clamps = [n for n in q.nodes if n.op == "clamp"]
    if head == "softmax":
        assert params(q, "s") == QuantParams((1 / 256,), (-128,))
        assert [c.inputs for c in clamps] == [["s"]] and q.node("cat").inputs == [clamps[0].outputs[0], "x"]
    else:
        assert not clamps and params(q, "s") == params(q, "x")
    test = {"x": rng.standard_normal((64, 1, 16)).astype(np.float32)}
    rep = report(g, q, test)
    assert rep["tensors"]["x"]["sqnr_db"] > 35.0 and rep["outputs"]["probs"] > 30.0  # landed code: 2.2 dB and 16.6 dB
    assert_ranges_cover(g, q, cal)


def test_shared_output_with_other_source_parameters_requantizes_input():
    b = Builder("qdq_pool", qdq=True)
    x = b.input("x", (1, 4, 4, 2), QuantParams((0.1,), (0,)))
    p = b.op("max_pool2d", [x], "p", QuantParams((0.2,), (5,)), window=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], **NO_ACT)
    g = b.done(p)
    q = quantize(g, DEFAULTS, {})
    verify(q, levels=("kernel",))
    (clamp,) = [n for n in q.nodes if n.op == "clamp"]
    assert clamp.inputs == ["x"] and q.node("p").inputs == clamp.outputs
    assert params(q, clamp.outputs[0]) == params(q, "p") == QuantParams((0.2,), (5,))


def test_int8_reference_tracks_float(rules):
    g, q, cal = rules
    rep = report(g, q, samples(g, n=20, seed=5))
    assert json.loads(to_json(rep)) == rep
    assert to_json(rep) == json.dumps(rep, sort_keys=True, indent=2) + "\n"
    assert set(rep["outputs"]) == set(g.outputs)
    assert all(v is not None and v > 20.0 for v in rep["outputs"].values())
    agree = 0
    data = samples(g, n=20, seed=5)
    for i in range(20):
        feeds = {"x": data["x"][i]}
        agree += int(np.argmax(run(g, feeds)["sm"]) == np.argmax(run_quantized(q, feeds)["sm"]))
    assert rep["top1_agreement"] == agree / 20 and rep["samples"] == 20
    assert rep["tensors"]["x"]["op"] == "input" and rep["tensors"]["cat"]["op"] == "concat"
    assert rep["tensors"]["cat"]["range"] == pytest.approx(list(represented(params(q, "cat"))))
    text = format_report(rep)
    assert text.splitlines()[1].startswith("x ") and "top-1 agreement" in text.splitlines()[-1]


# -- purity, modes, determinism ---------------------------------------------------
def test_pure_and_mode_none(rules):
    g, _, cal = rules
    before = dumps(g)
    quantize(g, DEFAULTS, cal)
    assert dumps(g) == before
    assert dumps(quantize(g, dict(DEFAULTS, mode="none"), {})) == before


@pytest.mark.parametrize("observer", ["minmax", "moving_average", "percentile", "mse"])
def test_byte_identical_runs(rules, observer):
    g, _, cal = rules
    cfg = dict(DEFAULTS, observer=observer, max_samples=25)
    first = dumps(quantize(g, cfg, cal))
    assert first == dumps(quantize(loads(dumps(g)), cfg, {k: v.copy() for k, v in cal.items()}))


def test_byte_identical_across_processes(rules, tmp_path):
    g, q, cal = rules
    (tmp_path / "g.kir").write_bytes(dumps(g))
    np.savez(tmp_path / "cal.npz", **cal)
    script = ("import sys, numpy as np\nfrom kiln.ir import load, dumps\nfrom kiln.quantize import quantize\n"
              "from kiln.quantize.config import CONFIG\n"
              "cal = dict(np.load(sys.argv[2]))\n"
              "sys.stdout.buffer.write(dumps(quantize(load(sys.argv[1]), {k: v.default for k, v in CONFIG.items()}, cal)))\n")
    outs = [subprocess.run([sys.executable, "-c", script, str(tmp_path / "g.kir"), str(tmp_path / "cal.npz")],
                           capture_output=True, check=True, env=dict(os.environ, PYTHONHASHSEED=seed)).stdout
            for seed in ("1", "2")]
    assert outs[0] == outs[1] == dumps(q)


# -- calibration input -----------------------------------------------------------------
def test_float_source_without_calibration_is_an_error(rules, tmp_path):
    g = rules[0]
    with pytest.raises(KilnError, match=r"calibration_data\(\) in model\.py.*quant\.calibration"):
        quantize(g, DEFAULTS, {})
    np.savez(tmp_path / "calibration.npz")
    with pytest.raises(KilnError, match=r"calibration_data\(\) in model\.py.*quant\.calibration = \[\"calib\.npy\"\]"):
        load_calibration(g, DEFAULTS, tmp_path, tmp_path / "calibration.npz")


def test_calibration_files_take_precedence(rules, tmp_path):
    g = rules[0]
    imported = samples(g, n=3)
    np.savez(tmp_path / "calibration.npz", **imported)
    assert np.array_equal(load_calibration(g, DEFAULTS, tmp_path, tmp_path / "calibration.npz")["x"], imported["x"])
    np.save(tmp_path / "a.npy", np.ones((2, 1, 8, 8, 2), np.float32))
    np.savez(tmp_path / "b.npz", x=np.zeros((5, 1, 8, 8, 2), np.float32))
    got = load_calibration(g, dict(DEFAULTS, calibration=["a.npy", "b.npz"]), tmp_path, tmp_path / "calibration.npz")
    assert got["x"].shape == (7, 1, 8, 8, 2) and got["x"][:2].all() and not got["x"][2:].any()
    with pytest.raises(KilnError, match="missing.npy: no such file"):
        load_calibration(g, dict(DEFAULTS, calibration=["missing.npy"]), tmp_path, tmp_path / "calibration.npz")


def test_bad_calibration_shapes(rules):
    g = rules[0]
    with pytest.raises(KilnError, match=r"input 'x' has shape \[4, 8, 2, 8\], expected \[N, 1, 8, 8, 2\] or \[N, 8, 8, 2\]$"):
        quantize(g, DEFAULTS, {"x": np.zeros((4, 8, 2, 8), np.float32)})
    with pytest.raises(KilnError, match="must be finite"):
        quantize(g, DEFAULTS, {"x": np.full((2, 1, 8, 8, 2), np.nan, np.float32)})


def test_float_only_op_in_float_source_is_an_error():
    b = Builder("div")
    x = b.input("x", (1, 4))
    y = b.op("div", [x, b.const("two", np.full((1, 4), 2.0, np.float32))], "y", **NO_ACT)
    g = b.done(y)
    with pytest.raises(KilnError, match=r"node 0 'y' \(div\).*no int8 kernel"):
        quantize(g, DEFAULTS, samples(g))


# -- QDQ sources -----------------------------------------------------------------------------
def dequantized(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return (np.float32(scale) * q.astype(np.float32)).astype(np.float32)


def qdq_graph(output_quant: bool = True) -> tuple[Graph, np.ndarray]:
    """x -> conv (source int8 weights) -> div (float island) -> fully connected -> y."""
    b = Builder("qdq", qdq=True)
    rng = np.random.default_rng(4)
    w_int = rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8)
    w_scale = np.array([0.01, 0.02, 0.005], np.float32)
    w = b.const("w", dequantized(w_int, w_scale.reshape(3, 1, 1, 1)), QuantParams(tuple(w_scale), (0, 0, 0), 0))
    x = b.input("x", (1, 4, 4, 2), QuantParams((1 / 128,), (0,)))
    c = b.op("conv2d", [x, w], "c", QuantParams((0.05,), (-3,)), **conv_attrs(), **NO_ACT)
    dv = b.op("div", [c, b.const("two", np.full((1, 4, 4, 3), 2.0, np.float32))], "dv", **NO_ACT)
    r = b.op("reshape", [dv], "r", shape=[1, 48])
    y = b.op("fully_connected", [r, b.weights("wf", (5, 48))], "y", QuantParams((0.1,), (4,)) if output_quant else None, **NO_ACT)
    return b.done(y), w_int


def test_qdq_keeps_source_parameters_and_recovers_weights():
    g, w_int = qdq_graph()
    q = quantize(g, DEFAULTS, samples(g))
    verify(q, levels=("kernel",))
    assert np.array_equal(q.tensors["w"].data, w_int) and q.tensors["w"].quant == g.tensors["w"].quant
    assert params(q, "x") == QuantParams((1 / 128,), (0,)) and params(q, "c") == QuantParams((0.05,), (-3,))
    assert params(q, "y") == QuantParams((0.1,), (4,))
    ops = [n.op for n in q.nodes]
    assert ops == ["conv2d", "dequantize", "div", "reshape", "quantize", "fully_connected"]
    # the float island: div and reshape run in float between explicit boundaries; "r" is the int8 twin
    assert q.tensors["dv"].dtype == "float32" and q.node("dv").inputs[0] == "c_float"
    assert q.tensors["r"].dtype == "int8" and q.node("y").inputs[0] == "r"


def test_qdq_missing_parameters_listed_or_calibrated():
    g, _ = qdq_graph()  # the float island's output "r" feeds the int8 fc without source parameters
    with pytest.raises(KilnError, match=r"no quantization parameters for tensor\(s\) r;"):
        quantize(g, DEFAULTS, {})
    g, _ = qdq_graph(output_quant=False)  # the fc is float too; the int8 graph output "y" has none
    with pytest.raises(KilnError, match=r"no quantization parameters for tensor\(s\) y;"):
        quantize(g, DEFAULTS, {})
    q = quantize(g, DEFAULTS, samples(g))
    verify(q, levels=("kernel",))
    assert [n.op for n in q.nodes][-2:] == ["fully_connected", "quantize"]
    assert q.tensors["y"].dtype == "int8" and q.tensors["y_float"].dtype == "float32"


def test_qdq_fully_specified_needs_no_calibration():
    g, _ = qdq_graph()
    g.tensors["r"] = g.tensors["r"].copy(quant=QuantParams((0.02,), (0,)))
    q = quantize(g, DEFAULTS, {})
    assert params(q, "r") == QuantParams((0.02,), (0,))
    out = run_quantized(q, {"x": np.full((1, 4, 4, 2), 0.25, np.float32)})["y"]
    assert out.dtype == np.int8


def test_qdq_fixed_output_with_other_source_parameters_is_requantized():
    b = Builder("qdq_softmax", qdq=True)
    x = b.input("x", (1, 6), QuantParams((0.05,), (0,)))
    s = b.op("softmax", [x], "s", QuantParams((1 / 255,), (-128,)), beta=1.0)
    g = b.done(s)
    q = quantize(g, DEFAULTS, {})
    verify(q, levels=("kernel",))
    assert params(q, "s") == QuantParams((1 / 256,), (-128,))
    (out,) = q.outputs
    assert q.producers()[out].op == "clamp" and params(q, out) == QuantParams((1 / 255,), (-128,))


def test_qdq_weights_that_cannot_be_recovered():
    g, _ = qdq_graph()
    bad = g.tensors["w"]
    g.tensors["w"] = bad.copy(data=bad.data + np.float32(1e-3))
    with pytest.raises(KilnError, match=r"'c' \(conv2d\): weights 'w' are not exactly scale × int8"):
        quantize(g, DEFAULTS, samples(g))
    g.tensors["w"] = bad.copy(quant=QuantParams(bad.quant.scale, (1, 0, 0), 0))
    with pytest.raises(KilnError, match="symmetric weights"):
        quantize(g, DEFAULTS, samples(g))


@pytest.fixture(scope="module", params=["QInt8", "QUInt8"])
def onnxruntime_qdq(request, tmp_path_factory) -> tuple[Path, Graph]:
    """onnxruntime's QDQ quantization of a small CNN, imported and normalized."""
    from kiln.frontends import import_model
    from kiln.normalize import normalize
    from kiln.normalize.config import CONFIG as NORMALIZE_CONFIG

    folder = tmp_path_factory.mktemp("qdq")
    quantize_qdq(folder / "qdq.onnx", request.param)
    imported = import_model(folder / "qdq.onnx", "qdq", {})
    return folder / "qdq.onnx", normalize(imported.graph, {k: v.default for k, v in NORMALIZE_CONFIG.items()})


def test_onnxruntime_qdq_model_end_to_end(onnxruntime_qdq):
    import onnx
    from onnx import numpy_helper

    from qdq_oracle import DIFFERING, STEPS, layerwise

    path, normalized = onnxruntime_qdq
    q = quantize(normalized, DEFAULTS, {})  # every parameter comes from the source
    verify(q, levels=("kernel",))
    inits = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer]
    source_weights = [a for a in inits if a.dtype == np.int8 and a.ndim in (2, 4)]
    # OIHW -> OHWI / 1HWC; fc weights [out, in] with the input features reordered for NHWC: compare sorted rows
    layouts = {4: [(0, 2, 3, 1), (1, 2, 3, 0)], 2: [(0, 1), (1, 0)]}
    for n in q.nodes:
        if n.op in ("conv2d", "depthwise_conv2d", "fully_connected"):
            w = q.tensors[n.inputs[1]].data
            found = [np.transpose(a, p) for a in source_weights if a.size == w.size for p in layouts[a.ndim]]
            key = (lambda v: np.sort(v, axis=1)) if w.ndim == 2 else (lambda v: v)
            assert any(f.shape == w.shape and np.array_equal(key(f), key(w)) for f in found), n.name
    # Every layer within one rounding step of ONNX's reference QDQ semantics, on the reference's own int8
    # inputs (tests/qdq_oracle.py: onnxruntime's int8 kernels depend on the CPU, so they are no oracle).
    rng = np.random.default_rng(3)
    layers = [layer for _ in range(3) for layer in layerwise(path, q, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)})]
    arithmetic = ("conv2d", "depthwise_conv2d", "fully_connected", "add", "avg_pool2d", "global_avg_pool", "softmax")
    assert {n.name for n in q.nodes if n.op in arithmetic} <= {layer.node for layer in layers}
    assert max(layer.steps.max() for layer in layers) <= STEPS
    on_grid = np.concatenate([layer.steps.ravel() for layer in layers if layer.on_grid])
    assert np.mean(on_grid != 0) <= DIFFERING


def test_weights_quantize_alike_a_block_at_a_time(monkeypatch):
    """Blocks of rows bound the float64 temporaries of a large layer and change no value."""
    from kiln.numerics.fixedpoint import round_half_away
    from kiln.quantize import scheme

    rng = np.random.default_rng(5)
    for shape, axis in [((6, 3, 3, 5), 0), ((1, 3, 3, 7), 3), ((9, 40), 0), ((4, 5), None), ((3,), None), ((5, 4), 1)]:
        w = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
        w[(0,) * len(shape)] = 0.0
        monkeypatch.setattr(scheme, "BLOCK_ELEMENTS", 7)
        q, params = scheme.quantize_weights(w, axis)
        w64 = w.astype(np.float64)
        over = tuple(a for a in range(w.ndim) if a != axis)
        max_abs = np.max(np.abs(w64), axis=over).reshape(-1)
        assert params.scale == tuple(float(s) for s in np.where(max_abs > 0, max_abs / 127, 1.0).astype(np.float32))
        scale = np.asarray(params.scale, np.float64).reshape([-1 if a == axis else 1 for a in range(w.ndim)] if axis is not None else ())
        assert q.dtype == np.int8 and np.array_equal(q, np.clip(round_half_away(w64 / scale), -127, 127).astype(np.int8))
