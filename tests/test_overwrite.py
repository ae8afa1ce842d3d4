"""Layers run over their own input (kiln.plan.overwrite) compute exactly what the layer-by-layer plan computes.

Random stacks of depthwise and pointwise layers (with the odd conv or pool; random kernels, strides,
dilations, paddings, channel counts, depth multipliers and map sizes) are planned with every layer that
helps run over its input, at a random piece size and kernel scratch level; kws_dscnn is planned under
plan.budget = 10,000 B and 14,000 B. All are generated into one program per target: on the host under
AddressSanitizer and UndefinedBehaviorSanitizer, and on the Cortex-M4 under QEMU, each output must equal
the integer reference executor's bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from model_builds import ModelBuilds, shared_root
from kiln import host
from kiln.errors import KilnError
from kiln.check import reference_outputs
from kiln.codegen import generate
from kiln.inspect import describe, render
from kiln.ir import Graph, load
from kiln.lower import lower
from kiln.model_table import firmware_model
from kiln.plan import overwrite, plan
from kiln.plan.budget import LEVELS, floor, measure, options, plan_overwritten, plan_tiled, run_floor, run_peak
from kiln.report.data import buffers, tiling_text, timeline
from kiln.target.macs import graph_macs
from kiln.target import cortex_m, qemu
from test_tiling import PLAN, assert_bit_exact_on_cortex_m4, assert_bit_exact_on_host_sanitized, in_freed_bytes, samples, stack

STACKS = 20
MIXED = 6  # stacks with a tiled leading run and later layers over their input
KWS_BUDGETS = (10000, 14000)


def dw_pw_stack(seed: int) -> Graph:
    """A random stack (test_tiling.stack) kept when most of its layers are depthwise or pointwise."""
    for s in range(seed, seed + 10000, 97):
        g = stack(s)
        kinds = [n.op if n.op != "conv2d" or g.tensors[n.inputs[1]].shape[1:3] != (1, 1) else "pointwise" for n in g.nodes]
        if sum(k in ("depthwise_conv2d", "pointwise") for k in kinds) * 2 > len(kinds):
            return g
    raise AssertionError("no depthwise/pointwise stack")


def overwritten_stack(seed: int) -> tuple[Graph, Graph]:
    rng = np.random.default_rng(seed + 11)
    for attempt in range(50):
        graph = dw_pw_stack(seed + 1000 * attempt)
        lowered = lower(graph, {"profile": "portable", "scratch_limit": 1 << 20})
        config = dict(PLAN, io_in_arena=bool(rng.integers(0, 4)))  # mostly in the arena: the first layer can take part
        grain, level = int(rng.choice(overwrite.GRAINS)), LEVELS[int(rng.integers(len(LEVELS)))]
        try:
            return graph, plan_overwritten(lowered, config, grain, level)
        except KilnError as e:  # no layer helps in this stack: another
            if "no layer can run over its input" not in str(e):
                raise
    raise AssertionError(f"seed {seed}: no stack with a layer run over its input")


def tiled_then_overwritten(seed: int) -> tuple[Graph, Graph]:
    """A random stack with its leading layers tiled (the run's output over its input when it can) and layers after
    the run over their input."""
    rng = np.random.default_rng(seed + 23)
    for attempt in range(80):
        graph = dw_pw_stack(seed + 1000 * attempt)
        if len(graph.nodes) < 2:
            continue
        lowered = lower(graph, {"profile": "portable", "scratch_limit": 1 << 20})
        config = dict(PLAN, io_in_arena=True)
        runs = sorted({(o.tiling.stop, o.tiling.grid, o.tiling.shift is not None)
                       for o in options(lowered.copy(), config, ("full",)) if o.tiling and o.tiling.stop < len(graph.nodes)})
        if not runs:
            continue
        stop, grid, over = runs[int(rng.integers(len(runs)))]
        try:
            return graph, plan_tiled(lowered, config, stop, grid, "full", over, int(rng.choice(overwrite.GRAINS)))
        except KilnError as e:
            if "no layer after the tiled run" not in str(e):
                raise
    raise AssertionError(f"seed {seed}: no stack with a tiled run and a layer over its input after it")


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> ModelBuilds:
    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models"))


@pytest.fixture(scope="module")
def cases(builds) -> dict[str, tuple[Graph, Graph]]:
    """name -> (graph for the reference, plan with layers run over their input)."""
    found = {f"over_{seed}": overwritten_stack(seed) for seed in range(STACKS)}
    found.update({f"mixed_{seed}": tiled_then_overwritten(seed) for seed in range(MIXED)})
    vww = builds.front("vww_mobilenet")  # its first stage tiled, the output over the input, then layers over theirs
    found["vww_mobilenet"] = load(vww / "quantized.kir"), plan_tiled(load(vww / "lowered.kir"), PLAN, 8, (10, 6), "strip", True, 2)
    nhwc = builds.front("vww_mobilenet", normalize={"input_layout": "NHWC"})  # the image itself in the arena, as bench/arena.py
    found["vww_mobilenet_30000"] = load(nhwc / "quantized.kir"), plan(load(nhwc / "lowered.kir"), dict(PLAN, reorder=True, budget=30000))
    front = builds.front("kws_dscnn")
    lowered, quantized = load(front / "lowered.kir"), load(front / "quantized.kir")
    for budget in KWS_BUDGETS:
        found[f"kws_dscnn_{budget}"] = quantized, plan(lowered, dict(PLAN, reorder=True, budget=budget))
    for _, planned in found.values():
        assert planned.meta["in_place_steps"]
    return found


def test_kws_dscnn_meets_10000_bytes_with_its_io_in_the_arena(cases):
    planned = cases["kws_dscnn_10000"][1]
    assert planned.meta["arena_size"] <= 10000 < 16000 <= planned.meta["layer_by_layer_arena"]
    assert planned.meta["extra_macs"] == 0 and planned.meta["scratch_level"] == "full"
    kernels = {planned.nodes[s].attrs["kernel"] for s in planned.meta["in_place_steps"]}
    assert {"kiln_depthwise_conv2d_s8", "kiln_conv2d_1x1_s8"} <= kernels


def test_vww_mobilenet_meets_30000_bytes_with_its_io_in_the_arena(cases):
    """Issue 19's last target: the tiled first stage writes its output over input rows no tile reads again, and the
    bytes the image frees hold the next layers' maps while that output is still live."""
    planned = cases["vww_mobilenet_30000"][1]
    meta = planned.meta
    assert meta["arena_size"] <= 30000 < 40000 < meta["layer_by_layer_arena"]
    assert meta.get("tile_output_over_input") and meta["in_place_steps"] and meta["tile_grid"] != [1, 1]
    assert meta["extra_macs"] <= 0.15 * graph_macs(planned)
    start, stop = meta["tiled_run"]
    assert "relu_4/pre" in in_freed_bytes(planned)  # step 4's map beside the run's output, in the image's bytes
    assert max(s.live_bytes for s in timeline(planned)) <= meta["arena_size"]
    text, (rows, cols) = render(describe(planned)), meta["tile_grid"]
    assert f"tiled: steps {start} to {stop - 1} run as {rows}x{cols} tiles" in text and "in place: steps" in text


def test_the_budget_search_floors_never_exceed_the_peaks_they_bound(builds):
    """The search skips tiled candidates by lower bounds of their peaks that build no buffers: above a measured peak,
    a plan that fits could be skipped."""
    graphs = [load(builds.front("kws_dscnn") / "lowered.kir")]
    graphs += [lower(dw_pw_stack(seed), {"profile": "portable", "scratch_limit": 1 << 20}) for seed in range(8)]
    checked = 0
    for g in graphs:
        outside: dict = {}
        for p in options(g, dict(PLAN, reorder=True))[::3]:
            if p.tiling and not p.overwrites:
                low, run_low = floor(p, 16, outside), run_floor(p, 16)
                measure(p, 16)
                assert run_low <= run_peak(p) and low <= p.bound
                checked += 1
    assert checked > 1000


def test_tiled_runs_and_layers_over_their_input_mix(cases):
    mixed = [p for name, (_, p) in cases.items() if name.startswith("mixed_") or name == "vww_mobilenet"]
    assert all(p.meta["tiled_run"][1] <= min(p.meta["in_place_steps"]) for p in mixed)
    assert any(p.meta.get("tile_output_over_input") for p in mixed)
    assert cases["vww_mobilenet"][1].meta.get("tile_output_over_input")


def test_the_random_plans_cover_the_hard_cases(cases):
    """Both orders, both lags (kws_dscnn's depthwise layers copy one piece late), shifted and unshifted outputs, strided and padded layers, pieces that do not divide."""
    plans = [p for name, (_, p) in cases.items() if name.startswith("over_")]
    nodes = [(p, p.nodes[s]) for p in plans for s in p.meta["in_place_steps"]]
    lagged = [n for _, p in cases.values() for n in (p.nodes[s] for s in p.meta["in_place_steps"]) if "tile_scatter_last" in n.attrs]
    assert lagged and any("tile_scatter_last" not in n.attrs for _, n in nodes)
    backwards = [n for _, n in nodes if n.attrs["tile_in"] != sorted(n.attrs["tile_in"])]
    assert backwards and len(backwards) < len(nodes)
    offsets = [int(p.tensors[n.outputs[0]].attrs["offset"]) - int(p.tensors[n.inputs[0]].attrs["offset"]) for p, n in nodes]
    assert any(offsets) and not all(offsets)
    kernels = {n.attrs["kernel"] for _, n in nodes}
    assert {"kiln_depthwise_conv2d_s8", "kiln_conv2d_1x1_s8"} <= kernels
    strided = [n for _, n in nodes if n.attrs["kernel"] == "kiln_depthwise_conv2d_s8"
               and dict(zip(n.attrs["param_names"], n.attrs["params"]))["stride_h"] > 1]
    assert strided
    assert {p.meta["scratch_level"] for p in plans} == set(LEVELS)
    assert any(len(set(n.attrs["tile_index"])) > 1 for _, n in nodes)  # a last piece of other rows


def test_in_place_plans_bit_exact_on_host_sanitized(cases, tmp_path):
    assert_bit_exact_on_host_sanitized(cases, tmp_path)


def test_in_place_plans_bit_exact_on_cortex_m4(cases, tmp_path):
    assert_bit_exact_on_cortex_m4(cases, tmp_path)


def test_inspect_and_the_report_name_the_layers_run_in_place(cases):
    planned = cases["kws_dscnn_10000"][1]
    steps = ", ".join(map(str, planned.meta["in_place_steps"]))
    assert f"in place: steps {steps} write their output over their input" in render(describe(planned))
    assert f"steps {steps} write their output over their input piece by piece" in tiling_text(planned)
    placed = {b.name: b for b in buffers(planned)}
    for step in planned.meta["in_place_steps"]:
        tile = placed[f"{planned.nodes[step].name}#tile"]
        assert tile.first == tile.last == step and tile.nbytes > 0
        assert 0 <= tile.offset and tile.offset + tile.nbytes <= planned.meta["arena_size"]
    assert max(s.live_bytes for s in timeline(planned)) <= planned.meta["arena_size"]


def test_no_budget_no_pieces(cases, builds):
    """In place is chosen only for the budget: without one (or when the layer-by-layer plan fits) the plan has none."""
    lowered = load(builds.front("kws_dscnn") / "lowered.kir")
    for budget in (0, 20000):
        assert "in_place_steps" not in plan(lowered, dict(PLAN, reorder=True, budget=budget)).meta


def test_kiln_plan_explore_prints_the_frontier(builds, capsys):
    """Each row a smaller arena for more work; the last row's arena met as a budget, one byte less refused."""
    from kiln.cli import main

    lowered = builds.front("kws_dscnn") / "lowered.kir"
    assert main(["plan", "--explore", str(lowered)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("lowered: arena bytes against extra MACs") and lines[1].split()[:2] == ["arena", "extra"]
    rows = [tuple(int(v) for v in line.split()[:4]) for line in lines[2:]]
    assert len(rows) >= 3 and any("over their input" in line for line in lines[2:])
    assert all(a[0] > b[0] and sum(a[1:]) < sum(b[1:]) for a, b in zip(rows, rows[1:]))
    graph, config = load(lowered), dict(PLAN, io_in_arena=False, reorder=True)
    assert plan(graph, dict(config, budget=rows[-1][0])).meta["arena_size"] <= rows[-1][0]
    with pytest.raises(KilnError, match=f"exceeds plan.budget {rows[-1][0] - 1}; the smallest"):
        plan(graph, dict(config, budget=rows[-1][0] - 1))


@pytest.mark.parametrize("argument", ["no/such/model", "missing.kir", "README.md"])
def test_kiln_plan_explore_refuses_a_bad_model_in_one_line(argument, capsys):
    from kiln.cli import main

    assert main(["plan", "--explore", argument]) != 0
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(f"kiln: error: {argument}") and out.err.count("\n") == 1
