"""Tiled runs (kiln.plan.tiling, kiln.plan.budget) compute exactly what the untiled layers compute.

Random stacks of int8 conv, depthwise, 1x1 conv, max and average pooling
(random kernels, strides, dilations, paddings, channel counts and map sizes)
are each planned with a random run of their leading layers tiled as a random
grid (grids that do not divide the map, border tiles that clip their windows,
patches copied in or read in place, output tiles copied out or written in
place, every kernel scratch level), and zoo models under a budget that forces
tiling (or, where no budget can, with a tiling imposed). All are generated
into one program per target: on the host under AddressSanitizer and
UndefinedBehaviorSanitizer, and on the Cortex-M4 under QEMU, each output must
equal the integer reference executor's bit for bit.
"""
from __future__ import annotations


import numpy as np
import pytest

from model_builds import ModelBuilds, shared_root
from kiln import host
from kiln.check import reference_outputs
from kiln.codegen import generate
from kiln.inspect import describe, render
from kiln.ir import Graph, Node, QuantParams, Tensor, load
from kiln.lower import lower
from kiln.model_table import firmware_model
from kiln.plan import plan
from kiln.lower import specialize
from kiln.lower.abi import KERNELS
from kiln.plan import tiling
from kiln.plan.budget import COPY_FIELDS, LEVELS, options, plan_tiled
from kiln.report.data import buffers, tiling_text, timeline
from kiln.target import cortex_m, qemu

PLAN = {"alignment": 16, "budget": 0, "io_in_arena": True, "reorder": False, "in_place": True, "lz4": False}
STACKS = 24
# model -> (budget that forces tiling, or None) and the tiling imposed when no budget can force one
ZOO = {"tiny_cnn": (2000, None), "digits_cnn": (1500, None), "kws_dscnn": (None, (11, (12, 1))),
       "tiny_resnet": (None, (2, (3, 2))), "ic_resnet8": (None, (2, (5, 3))), "vww_mobilenet": (None, (5, (4, 3))),
       "vww_mobilenet_over": (None, (8, (10, 6), "full", True))}


def _q(rng: np.random.Generator) -> QuantParams:
    return QuantParams((float(rng.uniform(0.02, 0.08)),), (int(rng.integers(-30, 30)),))


def _out(size: int, k: int, s: int, d: int, before: int, after: int) -> int:
    return (size + before + after - ((k - 1) * d + 1)) // s + 1


def stack(seed: int) -> Graph:
    """A chain of 1 to 4 random window layers on a random NHWC int8 map."""
    rng = np.random.default_rng(seed)
    g = Graph(f"tiles_{seed}")
    shape = (1, int(rng.integers(5, 19)), int(rng.integers(5, 19)), int(rng.integers(1, 6)))
    g.add_tensor(Tensor("x", shape, "int8", quant=_q(rng)))
    prev = "x"
    for i in range(int(rng.integers(1, 5))):
        kind = str(rng.choice(["conv", "depthwise", "pointwise", "max", "avg"]))
        _, h, w, c = shape
        k = (1, 1) if kind == "pointwise" else tuple(int(v) for v in rng.integers(1, 4, 2))
        s = (1, 1) if kind == "pointwise" else tuple(int(v) for v in rng.integers(1, 3, 2))
        d = tuple(int(v) for v in rng.integers(1, 3, 2)) if kind in ("conv", "depthwise") else (1, 1)
        pads = [0] * 4 if kind == "pointwise" else [int(rng.integers(0, kk)) if kk > 1 else 0 for kk in (k[0], k[1], k[0], k[1])]
        oh, ow = _out(h, k[0], s[0], d[0], pads[0], pads[2]), _out(w, k[1], s[1], d[1], pads[1], pads[3])
        if oh < 1 or ow < 1:
            break
        name = f"t{i}"
        attrs: dict = {"strides": list(s), "pads": pads, "act_min": -np.inf, "act_max": np.inf}
        if kind in ("max", "avg"):
            out_c, quant = c, g.tensors[prev].quant
            op, inputs, attrs = f"{kind}_pool2d", [prev], {**attrs, "window": list(k)}
        else:
            mult = int(rng.integers(1, 3)) if kind == "depthwise" else 1
            out_c = c * mult if kind == "depthwise" else int(rng.integers(1, 9))
            quant = _q(rng)
            w_shape = (1, k[0], k[1], out_c) if kind == "depthwise" else (out_c, k[0], k[1], c)
            axis = 3 if kind == "depthwise" else 0
            wq = QuantParams(tuple(float(v) for v in rng.uniform(0.005, 0.02, out_c)), (0,) * out_c, axis)
            g.add_tensor(Tensor(f"w{i}", w_shape, "int8", quant=wq, data=rng.integers(-127, 128, w_shape).astype(np.int8)))
            bq = QuantParams(tuple(g.tensors[prev].quant.scale[0] * s_ for s_ in wq.scale), (0,) * out_c, 0)
            g.add_tensor(Tensor(f"b{i}", (out_c,), "int32", quant=bq, data=rng.integers(-2000, 2000, out_c).astype(np.int32)))
            op = "depthwise_conv2d" if kind == "depthwise" else "conv2d"
            attrs = {**attrs, "dilations": list(d)} | ({"depth_multiplier": mult} if kind == "depthwise" else {})
            if rng.random() < 0.5:
                attrs.update(act_min=0.0, act_max=6.0)
            inputs = [prev, f"w{i}", f"b{i}"]
        shape = (1, oh, ow, out_c)
        g.add_tensor(Tensor(name, shape, "int8", quant=quant))
        g.nodes.append(Node(f"n{i}", op, inputs, [name], attrs))
        prev = name
    if not g.nodes:
        return stack(seed + 1000)
    g.inputs, g.outputs = ["x"], [prev]
    return g


def tiled_stack(seed: int) -> tuple[Graph, Graph]:
    """A random stack and its plan with a random tiling (run length, grid, scratch level, io in the arena or not)."""
    graph = stack(seed)
    rng = np.random.default_rng(seed + 7)
    lowered = lower(graph, {"profile": "portable", "scratch_limit": 1 << 20})
    config = dict(PLAN, io_in_arena=bool(rng.integers(0, 2)))
    found = [o.tiling for o in options(lowered.copy(), config, ("full",)) if o.tiling]
    choices = sorted({(t.stop, t.grid) for t in found})
    if not choices:
        return tiled_stack(seed + 1000)
    stop, grid = choices[int(rng.integers(len(choices)))]
    over = (stop, grid) in {(t.stop, t.grid) for t in found if t.shift is not None} and np.random.default_rng(seed + 13).random() < 0.6
    return graph, plan_tiled(lowered, config, stop, grid, LEVELS[int(rng.integers(len(LEVELS)))], over)


def zoo_case(builds, model: str) -> tuple[Graph, Graph]:
    front = builds.front(model.removesuffix("_over"))
    lowered, quantized = load(front / "lowered.kir"), load(front / "quantized.kir")
    budget, imposed = ZOO[model]
    if budget:
        planned = plan(lowered, dict(PLAN, reorder=True, budget=budget))
        assert planned.meta["arena_size"] <= budget < planned.meta["layer_by_layer_arena"]
    else:
        planned = plan_tiled(lowered, PLAN, *imposed)
    return quantized, planned


def samples(g: Graph, seed: int, count: int = 2) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(-128, 128, g.tensors[n].shape).astype(np.int8) for n in g.inputs] for _ in range(count)]


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> ModelBuilds:
    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models"))


@pytest.fixture(scope="module")
def cases(builds) -> dict[str, tuple[Graph, Graph]]:
    """name -> (graph for the reference, tiled plan)."""
    found = {f"tiles_{seed}": tiled_stack(seed) for seed in range(STACKS)}
    found.update({model: zoo_case(builds, model) for model in ZOO})
    for graph, planned in found.values():
        assert "tiled_run" in planned.meta and planned.meta["tile_grid"] != [1, 1]
    return found


def _sources(cases: dict[str, tuple[Graph, Graph]], out) -> tuple[list, list[str]]:
    sources, headers = [], []
    for name, (_, planned) in cases.items():
        for file, text in generate(planned, name, {"prefix": "", "weights_section": ""}).items():
            (out / file).write_bytes(text)
        sources.append(out / f"{name}.c")
        headers.append((out / f"{name}.h").read_text())
    return sources, headers


def in_freed_bytes(p: Graph) -> list[str]:
    """The maps placed over the bytes of a map that a tiled run or a layer wrote its output over, after that map
    died and while the output over it lives (beside that output, not on it)."""
    placed = buffers(p)  # a tiled run's input and output live through its loop
    spans, spot = {b.name: (b.first, b.last) for b in placed}, {b.name: (b.offset, b.offset + b.nbytes) for b in placed}
    pairs = [(p.nodes[s].inputs[0], p.nodes[s].outputs[0]) for s in p.meta.get("in_place_steps", [])]
    if p.meta.get("tile_output_over_input"):
        start, stop = p.meta["tiled_run"]
        pairs.append((p.nodes[start].inputs[0], p.nodes[stop - 1].outputs[0]))

    def meet(a: str, b: str) -> bool:
        return spot[a][0] < spot[b][1] and spot[b][0] < spot[a][1]

    return [t for x, y in pairs if x in spot and y in spot for t in spot
            if "#" not in t and t not in (x, y) and spans[x][1] < spans[t][0] <= spans[y][1] and meet(t, x) and not meet(t, y)]


def test_random_tilings_cover_the_hard_cases(cases):
    """The random plans include what could go wrong: uneven grids, clipped border windows, copies and direct windows."""
    planned = [p for name, (_, p) in cases.items() if name.startswith("tiles_")]
    runs = [(p, p.nodes[p.meta["tiled_run"][0]], p.nodes[p.meta["tiled_run"][1] - 1]) for p in planned]
    uneven = [p for p, _, last in runs if any(d % g for d, g in zip(p.tensors[last.outputs[0]].shape[1:3], p.meta["tile_grid"]))]
    assert uneven
    assert any("tile_gather" in first.attrs for _, first, _ in runs) and any(any(first.attrs["tile_in"]) for _, first, _ in runs)
    assert any("tile_scatter" in last.attrs for _, _, last in runs) and any(any(last.attrs["tile_out"]) for _, _, last in runs)
    assert {p.meta["scratch_level"] for p in planned} == set(LEVELS)
    assert any(p.meta["tiled_run"][1] - p.meta["tiled_run"][0] >= 3 for p in planned)
    assert any(p.meta["extra_macs"] > 0 for p in planned)
    over = [p for p, first, last in runs if p.meta.get("tile_output_over_input")]
    assert over and len(over) < len(planned)
    shifts = [int(p.tensors[last.outputs[0]].attrs["offset"]) - int(p.tensors[first.inputs[0]].attrs["offset"])
              for p, first, last in runs if p.meta.get("tile_output_over_input")]
    assert any(shifts) and any(abs(d) < p.tensors[first.inputs[0]].nbytes for d, (p, first, _) in zip(shifts, runs))
    assert any(in_freed_bytes(p) for p in planned)  # the input's bytes serve later maps while the output lives


def assert_bit_exact_on_host_sanitized(cases: dict[str, tuple[Graph, Graph]], out) -> None:
    """Every plan's generated C, built with ASan+UBSan, gives the untiled integer reference's outputs."""
    sources, _ = _sources(cases, out)
    exe = host.build_executable(sources, list(cases), out / "plans", sanitize=True)
    for k, (name, (graph, planned)) in enumerate(cases.items()):
        feeds = samples(graph, k)
        got = host.run_executable(exe, planned, feeds, model=name)
        for g, w in zip(got, reference_outputs(graph, feeds)):
            assert all(np.array_equal(a, b) for a, b in zip(g, w)), name


def assert_bit_exact_on_cortex_m4(cases: dict[str, tuple[Graph, Graph]], out) -> None:
    """The same on the Cortex-M4 under QEMU: the DSP kernel paths with the plans' per-tile calls."""
    sources, headers = _sources(cases, out)
    models = [firmware_model(name, header) for name, header in zip(cases, headers)]
    elf = cortex_m.build_firmware(sources, models, out / "plans.elf")
    for k, (name, (graph, planned)) in enumerate(cases.items()):
        feeds = samples(graph, k)
        run = qemu.run_firmware(elf, planned, feeds, model=name)
        for g, w in zip(run.outputs, reference_outputs(graph, feeds)):
            assert all(np.array_equal(a, b) for a, b in zip(g, w)), name


def test_tiled_plans_bit_exact_on_host_sanitized(cases, tmp_path):
    assert_bit_exact_on_host_sanitized(cases, tmp_path)


def test_tiled_plans_bit_exact_on_cortex_m4(cases, tmp_path):
    assert_bit_exact_on_cortex_m4(cases, tmp_path)


def test_inspect_and_the_build_report_show_the_tiled_run(cases):
    """`kiln inspect` names the run, grid and recomputed MACs; the report's memory timeline counts one tile's buffers."""
    planned = cases["kws_dscnn"][1]
    start, stop = planned.meta["tiled_run"]
    text = render(describe(planned))
    assert f"tiled: steps {start} to {stop - 1} run as {planned.meta['tile_grid'][0]}x{planned.meta['tile_grid'][1]} tiles" in text
    assert f"{planned.meta['extra_macs']} MACs recomputed" in text and "(one tile: " in text
    assert tiling_text(planned).startswith(f"plan.budget: {planned.meta['layer_by_layer_arena']:,} B layer by layer; steps {start} to")
    whole = sum(planned.tensors[planned.nodes[s].outputs[0]].nbytes for s in range(start, stop))
    peak = max(s.live_bytes for s in timeline(planned))
    assert peak <= planned.meta["lower_bound"] < whole


def test_the_report_places_the_patch_and_tile_buffers(cases):
    """The report's memory map holds the buffers a tiled run gathers its patches into and scatters its tiles
    from, inside the arena and live through the run's loop."""
    found = set()
    for name, (_, planned) in cases.items():
        start, stop = planned.meta["tiled_run"]
        placed = {b.name: b for b in buffers(planned)}
        for node in planned.nodes[start:stop]:
            for attr, kind in (("tile_gather", "patch"), ("tile_scatter", "tile")):
                if attr in node.attrs:
                    found.add(kind)
                    copy = placed[f"{node.name}#{kind}"]
                    assert (copy.first, copy.last) == (start, stop - 1) and copy.nbytes > 0, name
                    assert 0 <= copy.offset and copy.offset + copy.nbytes <= planned.meta["arena_size"], name
    assert found == {"patch", "tile"}


def test_the_plan_stage_copies_of_lower_stage_facts_agree():
    """The plan stage does not import the lower stage: its copy of the depthwise scratch formula and of
    kiln_copy_part's fields must equal the lower stage's."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        geo = {k: int(rng.integers(1, 6)) for k in ("k_h", "k_w", "stride_h", "stride_w", "dil_h", "dil_w")}
        geo.update(out_h=int(rng.integers(1, 60)), out_w=int(rng.integers(1, 60)))
        limit = int(rng.integers(0, 40000))
        assert tiling.depthwise_scratch(geo, limit) == specialize.depthwise_scratch(geo, limit)
    assert COPY_FIELDS == KERNELS["kiln_copy_part"].fields
