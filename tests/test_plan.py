"""The plan stage: live buffers never overlap, aliases and in-place kernels share storage, the
memory-aware order never raises the peak, every model's arena is within 5% of its lower bound,
budgets fail with the peak, and the same input gives the same bytes.

Plans are checked by `check_plan`, which re-derives lifetimes from the schedule alone
(independently of the planner's buffers) and recomputes the lower bound.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from model_builds import MODELS, ROOT, ModelBuilds, shared_root
from kiln.errors import KilnError
from kiln.ir import Graph, Node, QuantParams, Tensor, dumps, load
from kiln.plan import plan
from kiln.plan.buffers import Buffer
from kiln.plan.inplace import IN_PLACE
from kiln.plan.offsets import _decode, _near, place
from kiln.plan.schedule import candidate_orders
from kiln.runner import run_stage

CONFIG = {"alignment": 16, "budget": 0, "io_in_arena": False, "reorder": True, "in_place": True, "lz4": False}
GIVEN_ORDER = dict(CONFIG, reorder=False)
Q = QuantParams((0.1,), (0,))


def _round(n: int, align: int) -> int:
    return -(-n // align) * align


def _lifetimes(g: Graph) -> tuple[dict[str, int], dict[str, int]]:
    steps = len(g.nodes)
    start = {n: -1 for n in g.inputs}
    end: dict[str, int] = {}
    for i, node in enumerate(g.nodes):
        for o in node.outputs:
            start.setdefault(o, i)
        for t in node.inputs:
            if t and not g.tensors[t].is_constant:
                end[t] = max(end.get(t, -1), i)
    for n in g.outputs:
        end[n] = steps
    return start, {n: end.get(n, s) for n, s in start.items()}


def _sharing(g: Graph, start: dict[str, int], end: dict[str, int]) -> dict[str, str]:
    """Classes of tensors allowed to share bytes: aliases, and in-place pairs whose input dies at the kernel."""
    parent: dict[str, str] = {}

    def find(n: str) -> str:
        while parent.get(n, n) != n:
            n = parent[n]
        return n

    for i, node in enumerate(g.nodes):
        kernel = node.attrs.get("kernel")
        if kernel == "" and not g.tensors[node.inputs[0]].is_constant:
            x, y = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
            assert (x.attrs["memory"], x.attrs["offset"]) == (y.attrs["memory"], y.attrs["offset"]), node.name
            parent[find(y.name)] = find(x.name)
            continue
        y = g.tensors[node.outputs[0]]
        for pos in IN_PLACE.get(kernel, ()):
            x = g.tensors[node.inputs[pos]]
            if y.attrs.get("memory") == x.attrs.get("memory") == "arena" and x.attrs["offset"] == y.attrs["offset"]:
                assert end[x.name] == i and x.shape == y.shape and x.dtype == y.dtype, f"{node.name}: unsafe in place"
                parent[find(y.name)] = find(x.name)
    return {n: find(n) for n in start}


def check_plan(g: Graph) -> int:
    """Assert that no two tensors live at one step share bytes unless they may; return the lower bound."""
    align, arena_size = g.meta["alignment"], g.meta["arena_size"]
    start, end = _lifetimes(g)
    cls = _sharing(g, start, end)
    regions = []  # (name, offset, bytes, first step, last step)
    for name in start:
        t = g.tensors[name]
        if t.attrs["memory"] == "arena":
            regions.append((name, t.attrs["offset"], t.nbytes, start[name], end[name]))
    for i, node in enumerate(g.nodes):
        for pos, offset in enumerate(node.attrs.get("lz4_scratch", [])):
            if offset >= 0:
                regions.append((f"{node.name}#scratch{pos}", offset, g.tensors[node.inputs[pos]].nbytes, i, i))
        if node.attrs.get("scratch", -1) >= 0:  # the kernel's own scratch
            regions.append((f"{node.name}#scratch", node.attrs["scratch"], node.attrs["scratch_bytes"], i, i))
    for k, (a, oa, na, sa, ea) in enumerate(regions):
        assert oa % align == 0 and oa + na <= arena_size, a
        for b, ob, nb, sb, eb in regions[k + 1:]:
            if sa <= eb and sb <= ea and oa < ob + nb and ob < oa + na:
                assert cls.get(a, a) == cls.get(b, b) and oa == ob, f"{a} and {b} overlap while live"
    bound = 0
    for s in range(len(g.nodes)):
        live: dict[str, int] = {}
        for name, _, nbytes, first, last in regions:
            if first <= s <= last:
                key = cls.get(name, name)
                live[key] = max(live.get(key, 0), _round(nbytes, align))
        bound = max(bound, sum(live.values()))
    return bound


def is_topological(g: Graph, order: list[int]) -> bool:
    """Every node once; every input written (by all its writers) before it is read; writers of one tensor in given order."""
    if sorted(order) != list(range(len(g.nodes))):
        return False
    written: dict[str, list[int]] = {}
    for i in order:
        node = g.nodes[i]
        needed = [t for t in node.inputs if t and not g.tensors[t].is_constant and t not in g.inputs]
        writers = {t: [j for j, n in enumerate(g.nodes) if t in n.outputs] for t in needed + node.outputs}
        if any(sorted(written.get(t, [])) != writers[t] for t in needed):
            return False
        if any(written.get(t, []) != [j for j in writers[t] if j < i] for t in node.outputs):
            return False
        for t in node.outputs:
            written.setdefault(t, []).append(i)
    return True


# -- small graphs ---------------------------------------------------------------------------
def chain(sizes: list[int], alias_at: int | None = None, kernel: str = "k") -> Graph:
    """x -> n0 -> t0 -> n1 -> t1 ... ; node `alias_at` is a reshape alias."""
    g = Graph("chain")
    g.add_tensor(Tensor("x", (1, sizes[0]), "int8", quant=Q))
    prev = "x"
    for i, size in enumerate(sizes[1:]):
        name = f"t{i}"
        g.add_tensor(Tensor(name, (1, size), "int8", quant=Q))
        alias = i == alias_at
        g.nodes.append(Node(f"n{i}", "reshape" if alias else "clamp", [prev], [name], {"kernel": "" if alias else kernel}))
        prev = name
    g.inputs, g.outputs = ["x"], [prev]
    return g


def diamond() -> Graph:
    """x -> a; a -> b; a -> c; (b, c) -> d: a stays live while b and c are computed."""
    g = Graph("diamond")
    for name, size in [("x", 40), ("a", 100), ("b", 50), ("c", 70), ("d", 30)]:
        g.add_tensor(Tensor(name, (1, size), "int8", quant=Q))
    g.add_constant("w", np.ones((1, 50), np.int8), quant=Q)
    g.nodes += [
        Node("n0", "clamp", ["x"], ["a"], {"kernel": "k"}),
        Node("n1", "clamp", ["a"], ["b"], {"kernel": "k"}),
        Node("n2", "clamp", ["a"], ["c"], {"kernel": "k"}),
        Node("n3", "add", ["b", "w"], ["d"], {"kernel": "k"}),
    ]
    g.inputs, g.outputs = ["x"], ["d"]
    return g


def branches() -> Graph:
    """Two branches from x joined by an add; each branch grows then shrinks.

    Given order interleaves them (both 400-byte intermediates live at once);
    finishing one branch first keeps only one alive.
    """
    g = Graph("branches")
    for name, size in [("x", 32), ("p1", 400), ("p2", 400), ("q1", 32), ("q2", 32), ("y", 32)]:
        g.add_tensor(Tensor(name, (1, size), "int8", quant=Q))
    g.nodes += [
        Node("up1", "clamp", ["x"], ["p1"], {"kernel": "k"}),
        Node("up2", "clamp", ["x"], ["p2"], {"kernel": "k"}),
        Node("down1", "clamp", ["p1"], ["q1"], {"kernel": "k"}),
        Node("down2", "clamp", ["p2"], ["q2"], {"kernel": "k"}),
        Node("join", "add", ["q1", "q2"], ["y"], {"kernel": "k"}),
    ]
    g.inputs, g.outputs = ["x"], ["y"]
    return g


def test_live_buffers_never_overlap():
    g = plan(diamond(), GIVEN_ORDER)
    assert g.tensors["x"].attrs["memory"] == "input" and g.tensors["d"].attrs["memory"] == "output"
    # a (112 after alignment), b (64) and c (80) are live together at step 2
    assert check_plan(g) == g.meta["lower_bound"] == 112 + 64 + 80
    assert g.meta["arena_size"] == g.meta["lower_bound"] and g.meta["arena_ratio"] == 1.0


def test_memory_aware_order_lowers_the_peak():
    for graph, given, best in [(diamond(), 256, 192), (branches(), 832, 464)]:
        assert plan(graph, GIVEN_ORDER).meta["lower_bound"] == given
        g = plan(graph, CONFIG)
        assert check_plan(g) == g.meta["lower_bound"] == g.meta["arena_size"] == best
        assert g.meta["schedule"] != "given"
        names = [n.name for n in graph.nodes]
        assert is_topological(graph, [names.index(n.name) for n in g.nodes])


def test_concat_parts_keep_their_order():
    """Multi-writer tensors: the first part starts the tensor's life in every candidate order."""
    g = Graph("concat")
    for name, size in [("x", 16), ("a", 64), ("b", 16), ("y", 80)]:
        g.add_tensor(Tensor(name, (1, size), "int8", quant=Q))
    g.nodes += [
        Node("big", "clamp", ["x"], ["a"], {"kernel": "k"}),
        Node("small", "clamp", ["x"], ["b"], {"kernel": "k"}),
        Node("cat/part0", "concat", ["a"], ["y"], {"kernel": "kiln_copy_part"}),
        Node("cat/part1", "concat", ["b"], ["y"], {"kernel": "kiln_copy_part"}),
    ]
    g.inputs, g.outputs = ["x"], ["y"]
    assert not is_topological(g, [0, 1, 3, 2]) and not is_topological(g, [2, 0, 1, 3]) and is_topological(g, [0, 2, 1, 3])
    for _, order in candidate_orders(g):
        assert is_topological(g, order) and order.index(2) < order.index(3)


def test_input_is_not_modified():
    g = diamond()
    before = dumps(g)
    plan(g, CONFIG)
    assert dumps(g) == before


def test_aliases_share_storage():
    g = plan(chain([32, 48, 48, 16], alias_at=1), CONFIG)
    assert g.tensors["t1"].attrs["offset"] == g.tensors["t0"].attrs["offset"]
    check_plan(g)


def test_alias_of_output_lives_in_output():
    g = plan(chain([32, 48, 48], alias_at=1), CONFIG)
    assert g.tensors["t0"].attrs["memory"] == "output"


def test_in_place_only_for_allowed_kernels_whose_input_dies():
    sizes = [32, 48, 48, 48, 16]
    g = plan(chain(sizes, kernel="kiln_lut_s8"), CONFIG)
    assert g.tensors["t0"].attrs["offset"] == g.tensors["t1"].attrs["offset"] == g.tensors["t2"].attrs["offset"]
    assert check_plan(g) == g.meta["arena_size"] == 48
    assert plan(chain(sizes, kernel="kiln_lut_s8"), dict(CONFIG, in_place=False)).meta["arena_size"] == 96
    assert plan(chain(sizes, kernel="kiln_conv2d_s8"), CONFIG).meta["arena_size"] == 96
    kept = chain(sizes, kernel="kiln_lut_s8")
    kept.nodes[-1].inputs.append("t0")  # t0 now lives until the last node: n1 may not overwrite it
    g = plan(kept, CONFIG)
    assert g.tensors["t0"].attrs["offset"] != g.tensors["t1"].attrs["offset"]
    check_plan(g)


def test_in_place_never_writes_caller_memory():
    g = plan(chain([32, 32], kernel="kiln_lut_s8"), CONFIG)
    assert g.tensors["x"].attrs["memory"] == "input" and g.tensors["t0"].attrs["memory"] == "output"
    g = plan(chain([32, 32], kernel="kiln_lut_s8"), dict(CONFIG, io_in_arena=True))
    assert g.tensors["x"].attrs["offset"] == g.tensors["t0"].attrs["offset"] and g.meta["arena_size"] == 32


def test_io_in_arena_places_inputs_and_outputs():
    g = plan(chain([32, 48, 16]), dict(CONFIG, io_in_arena=True))
    assert all(g.tensors[n].attrs["memory"] == "arena" for n in ("x", "t0", "t1"))
    check_plan(g)


def test_alignment_is_configurable():
    g = plan(diamond(), dict(CONFIG, alignment=64))
    assert all(t.attrs["offset"] % 64 == 0 for t in g.tensors.values() if "offset" in t.attrs)
    check_plan(g)


def test_budget_error_names_peak_step_and_tensors():
    with pytest.raises(KilnError) as e:
        plan(diamond(), dict(GIVEN_ORDER, budget=100))
    msg = str(e.value)
    assert "exceeds plan.budget 100" in msg and "step 2" in msg and "'n2'" in msg
    assert "a (112 B)" in msg and "b (64 B)" in msg and "c (80 B)" in msg
    with pytest.raises(KilnError, match=r"arena 192 bytes exceeds plan.budget 191; peak at step 3 \(node 'n2', clamp\) "
                                        r"with live tensors: a \(112 B\), c \(80 B\); neither less kernel scratch nor tiling lowers it$"):
        plan(diamond(), dict(CONFIG, budget=191))
    assert plan(diamond(), dict(CONFIG, budget=192)).meta["arena_size"] == 192


def test_placement_beats_greedy_by_size_when_it_can():
    """Greedy by size puts `a` at 0 under `b`, so `c` goes above `b` and `d` finds no gap below it;
    placing the most conflicted buffers first reaches the lower bound (c + a + d at step 3)."""
    bufs = [Buffer(["a"], 48, 3, 5), Buffer(["b"], 64, 0, 2), Buffer(["c"], 48, 2, 3), Buffer(["d"], 32, 3, 4)]
    assert place(bufs, 16).size == place(bufs, 16, None).size == 128
    conflicts = [[j for j, o in enumerate(bufs) if j != i and b.overlaps(o)] for i, b in enumerate(bufs)]
    by_size = sorted(range(4), key=lambda i: -bufs[i].size)
    assert _decode(bufs, _near(bufs, conflicts), by_size, False, 16)[1] == 144
    result = place(bufs, 16, 128)
    assert result.heuristic == "greedy_by_conflicts" and result.size == 128
    for i, a in enumerate(bufs):
        for j, b in enumerate(bufs[:i]):
            if a.overlaps(b):
                oa, ob = result.offsets[i], result.offsets[j]
                assert oa + a.size <= ob or ob + b.size <= oa


def test_hill_climbing_stops_at_the_bound_and_never_worsens():
    rng = np.random.default_rng(5)
    for _ in range(40):
        bufs = []
        for i in range(int(rng.integers(4, 12))):
            first = int(rng.integers(0, 8))
            bufs.append(Buffer([f"t{i}"], 16 * int(rng.integers(1, 9)), first, first + int(rng.integers(0, 4))))
        bound = max(sum(b.size for b in bufs if b.start <= s <= b.end) for s in range(12))
        greedy = place(bufs, 16)
        climbed = place(bufs, 16, bound)
        assert bound <= climbed.size <= greedy.size


def test_a_buffer_in_parts_frees_the_bytes_of_its_dead_parts():
    """A layer's output written over its input is one buffer in parts: once the input's part dies, other buffers
    take its bytes (`b` lies in the 96-byte input's bytes, beside the 32-byte output still live)."""
    joined = Buffer(["x", "y"], 96, 0, 3, parts=((0, 1, 0, 96), (1, 3, 0, 32)))
    late = Buffer(["b"], 64, 2, 3)
    assert place([joined, late], 16).offsets == (0, 32) and place([late, joined], 16).size == 96
    assert [joined.live_bytes(s) for s in range(5)] == [96, 96, 32, 32, 0]


def test_live_parts_never_overlap():
    """Random buffers, some in parts (an input part, then an output part shifted from it, as kiln.plan.overwrite
    joins them): whatever the heuristic, two parts live at a common step never share a byte."""
    rng = np.random.default_rng(11)
    for _ in range(60):
        bufs = []
        for i in range(int(rng.integers(3, 12))):
            start = int(rng.integers(0, 10))
            end = start + int(rng.integers(0, 5))
            if rng.random() < 0.4:
                a, b, shift = (16 * int(v) for v in (rng.integers(1, 8), rng.integers(1, 8), rng.integers(0, 4)))
                mid = int(rng.integers(start, end + 1))
                bufs.append(Buffer([f"j{i}"], max(a, shift + b), start, end, parts=((start, mid, 0, a), (mid, end, shift, shift + b))))
            else:
                bufs.append(Buffer([f"b{i}"], 16 * int(rng.integers(1, 9)), start, end))
        bound = max(sum(b.live_bytes(s) for b in bufs) for s in range(16))
        for result in (place(bufs, 16), place(bufs, 16, bound)):
            assert result.size >= bound
            for i, p in enumerate(bufs):
                for j, q in enumerate(bufs[:i]):
                    for s1, e1, lo1, hi1 in p.spans():
                        for s2, e2, lo2, hi2 in q.spans():
                            if s1 <= e2 and s2 <= e1:
                                a, b = result.offsets[i], result.offsets[j]
                                assert a + hi1 <= b + lo2 or b + hi2 <= a + lo1


# -- seeded random graphs ------------------------------------------------------------------
def random_graph(seed: int) -> Graph:
    """A random DAG of convolution-like nodes, in-place element-wise kernels, adds and aliases."""
    rng = np.random.default_rng(seed)
    g = Graph(f"random{seed}")
    g.add_tensor(Tensor("x", (1, int(rng.integers(1, 200))), "int8", quant=Q))
    live = ["x"]
    for i in range(int(rng.integers(3, 16))):
        kind = rng.choice(["conv", "lut", "add", "alias"], p=[0.45, 0.2, 0.2, 0.15])
        x = live[int(rng.integers(max(0, len(live) - 3), len(live)))]
        kind = "conv" if kind == "alias" and x == "x" else kind  # an output aliasing the input computes nothing
        shape = g.tensors[x].shape
        ins = [x]
        if kind == "conv":
            shape, kernel = (1, int(rng.integers(1, 300))), "kiln_conv2d_s8"
        elif kind == "add":
            others = [t for t in live if g.tensors[t].shape == shape and t != x]
            ins.append(others[int(rng.integers(len(others)))] if others else x)
            kernel = "kiln_add_s8"
        elif kind == "lut":
            kernel = "kiln_lut_s8"
        else:
            shape, kernel = shape[::-1], ""
        y = f"t{i}"
        g.add_tensor(Tensor(y, shape, "int8", quant=Q))
        g.nodes.append(Node(f"n{i}", "reshape" if kernel == "" else "clamp", ins, [y], {"kernel": kernel}))
        live.append(y)
    used = {t for n in g.nodes for t in n.inputs}
    g.inputs, g.outputs = ["x"], [t for t in live[1:] if t not in used]
    return g


@pytest.mark.parametrize("io_in_arena", [False, True])
def test_random_graphs_plan_soundly(io_in_arena):
    for seed in range(120):
        graph = random_graph(seed)
        config = dict(CONFIG, io_in_arena=io_in_arena)
        g = plan(graph, config)
        assert check_plan(g) == g.meta["lower_bound"] <= g.meta["arena_size"]
        assert g.meta["lower_bound"] <= plan(graph, dict(config, reorder=False)).meta["lower_bound"]
        names = [n.name for n in graph.nodes]
        assert is_topological(graph, [names.index(n.name) for n in g.nodes])
        assert dumps(plan(graph, config)) == dumps(g)


# -- every model in models/ -----------------------------------------------------------------
@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> ModelBuilds:
    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models"))


@pytest.mark.parametrize("model", MODELS)
def test_model_plans_are_sound_and_near_the_lower_bound(builds, model):
    lowered = load(builds.front(model) / "lowered.kir")
    for io_in_arena in (False, True):
        for lz4 in (False, True):
            config = dict(CONFIG, io_in_arena=io_in_arena)
            g = plan(lowered, dict(config, lz4=lz4))
            bound = check_plan(g)
            assert bound == g.meta["lower_bound"], (io_in_arena, lz4)
            assert g.meta["arena_size"] <= 1.05 * bound, (io_in_arena, lz4, g.meta)
            assert bound <= plan(lowered, dict(config, reorder=False, lz4=lz4)).meta["lower_bound"]


@pytest.mark.parametrize("model", MODELS)
def test_plan_stage_is_deterministic(builds, model, tmp_path):
    front = builds.front(model)
    cfg = builds.config(model, plan={"lz4": True})
    produced = []
    for run in ("a", "b"):
        out = tmp_path / run
        out.mkdir()
        (out / "lowered.kir").write_bytes((front / "lowered.kir").read_bytes())
        run_stage("plan", model, ROOT / "models" / model, cfg, out)
        produced.append((out / "planned.kir").read_bytes())
    assert produced[0] == produced[1]


def test_budget_error_on_a_model_gives_the_smallest_arena_and_what_limits_it(builds):
    """A budget no plan meets: one line with the smallest arena reached (which is then met as a budget),
    the plan that reaches it and the live buffers at its peak, which add up to its peak."""
    lowered = load(builds.front("kws_dscnn") / "lowered.kir")
    with pytest.raises(KilnError) as e:
        plan(lowered, dict(CONFIG, budget=1000))
    msg = str(e.value)
    found = re.fullmatch(rf"graph {lowered.name!r}: arena (\d+) bytes exceeds plan.budget 1000; the smallest arena Kiln "
                         r"reaches, with (.+), (\d+) extra MACs; peak at step (\d+) \(node '([^']+)'\) with live buffers: (.+)", msg)
    assert found, msg
    smallest, step = int(found[1]), int(found[4])
    met = plan(lowered, dict(CONFIG, budget=smallest))
    assert met.meta["arena_size"] <= smallest < plan(lowered, CONFIG).meta["arena_size"]
    assert met.nodes[step].name == found[5]
    live = re.findall(r"(\S+) \((\d+) B\)", found[6])
    assert sum(int(b) for _, b in live) <= smallest
    assert all(n in lowered.tensors or "#" in n for n, _ in live)


# -- the sweeps against their pairwise definitions ---------------------------------------------
def _random_buffers(seed: int) -> tuple[list[Buffer], int]:
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(1, 40))
    bufs = []
    for i in range(int(rng.integers(0, 60))):
        start = int(rng.integers(-1, steps + 1))
        end = max(start, int(rng.integers(-1, steps + 1)))
        bufs.append(Buffer([f"t{i}"], int(rng.integers(1, 9)) * 16, start, end))
    return bufs, steps


def test_conflicts_live_bytes_and_breadth_order_equal_their_definitions():
    from kiln.plan import _live_bytes, lower_bound
    from kiln.plan.offsets import _by_breadth, _conflicts

    for seed in range(200):
        bufs, steps = _random_buffers(seed)
        assert _conflicts(bufs) == [[j for j, o in enumerate(bufs) if j != i and b.overlaps(o)] for i, b in enumerate(bufs)]
        live = [sum(b.size for b in bufs if b.start <= s <= b.end) for s in range(steps)]
        assert _live_bytes(bufs, steps) == live and lower_bound(bufs, steps) == max(live, default=0)
        points = sorted({s for b in bufs for s in (b.start, b.end)})
        order, seen = [], set()
        for s in sorted(points, key=lambda s: (-sum(b.size for b in bufs if b.start <= s <= b.end), s)):
            for i in sorted((i for i, b in enumerate(bufs) if b.start <= s <= b.end), key=lambda i: (-bufs[i].size, i)):
                if i not in seen:
                    seen.add(i)
                    order.append(i)
        assert _by_breadth(bufs) == order
