"""plan.budget as a target: when the layer-by-layer arena exceeds it, less kernel scratch, a tiled leading run
or layers run over their own input.

The plan stage first tries its candidate schedules (the smallest arena among
them is the layer-by-layer plan). When that is still over budget, this module
tries, at each kernel scratch level (LEVELS), the layer-by-layer plan and
every spatial tiling of the leading run of window layers
(`kiln.plan.tiling`): every run length and every grid up to
MAX_SPLITS x MAX_SPLITS, the run's own scratch level apart. A tiled run is one macro-step of the schedule: its
input and output maps are live through the whole run, each intermediate map
shrinks to its largest tile, and a layer's scratch to what its tile needs;
when the first layer's patches are not whole rows of its input they are
copied into a patch buffer, and when the output tiles are not whole rows
they are computed into a tile buffer and copied into place
(`kiln_copy_part`); a variant writes the run's output over its input. Given
a budget, layers are also run in pieces over their own input
(`kiln.plan.overwrite`), one at a time at the step of most live bytes while
it is over the budget: in a layer-by-layer plan, and, when nothing else
fits, after each tiled run whose loop fits, in order of cost (a map written
over its input frees the input's bytes once it dies: `Buffer.parts`). Among
the plans whose placed arena fits, the one that adds the least work wins
(`Option.rank`); when none fits, the error gives the smallest arena found
and what limits it. Tiled candidates are measured only when a lower bound of
their peak that builds no buffers (`floor`, `run_floor`) could fit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace

from kiln.errors import KilnError
from kiln.ir.graph import Graph, Node
from kiln.plan import overwrite, tiling
from kiln.plan.buffers import Buffer, buffers, round_up
from kiln.plan.offsets import Placement, place
from kiln.plan.scratch import Scratch, plan_scratch
from kiln.plan.tiling import Tiling
from kiln.target.macs import node_macs

MAX_PLACEMENTS = 12  # candidates placed (the costly part) before giving up on the cheaper ones
# kiln_copy_part's fields (runtime/kiln_kernels.h; tests hold this to kiln.lower.abi): the plan stage does not import the lower stage
COPY_FIELDS = ("elem_size", "outer", "inner", "in_stride", "in_offset", "out_stride", "out_offset")


LEVELS = ("full", "strip", "none")  # kernel scratch: as lowered; depthwise strips one window tall; none


@dataclass
class Option:
    """One candidate plan: a scratch level, and a tiled run or none (the layer-by-layer schedule)."""

    graph: Graph  # the schedule, its nodes' scratch at `level`
    scratch: Scratch
    level: str  # kernel scratch outside a tiled run (see LEVELS); the run's own is `tiling.scratch`
    tiling: Tiling | None
    base: list[Buffer]  # the layer-by-layer buffers of `graph`
    extra_macs: int
    slow_macs: int  # MACs run on a kernel's path without scratch that the lowered graph gave scratch
    bufs: list[Buffer] = field(default_factory=list)  # `base` resized and stretched for the run (once measured)
    extras: list[Buffer] = field(default_factory=list)  # patch and output-tile buffers
    bound: int = -1  # the peak of live arena bytes (-1: not measured yet)
    placement: Placement | None = None
    overwrites: tuple[overwrite.Overwrite, ...] = ()  # layers run in pieces over their own input
    grain: int = 0  # the most output rows in their pieces

    @property
    def moved(self) -> int:
        """Bytes copied out of tile buffers by layers run over their input."""
        return sum(o.copied for o in self.overwrites)

    @property
    def size(self) -> int:
        return self.placement.size if self.placement else self.bound

    @property
    def rank(self) -> tuple[int, int, int, int]:
        """The least work: recomputed MACs plus MACs moved off a fast path (counted once more: a path without
        scratch takes about twice the instructions per MAC) plus bytes copied by layers run over their input (one
        each); then more scratch outside the run, then inside; then larger pieces (fewer calls)."""
        inside = LEVELS.index(self.tiling.scratch) if self.tiling else 0
        return self.extra_macs + self.slow_macs + self.moved, LEVELS.index(self.level), inside, -self.grain


def shrink_scratch(g: Graph, level: str) -> Graph:
    """`g` with less kernel scratch: kernels given less take their path without scratch, same results."""
    if level == "full":
        return g
    nodes = []
    for n in g.nodes:
        given = int(n.attrs.get("scratch_bytes", 0))
        less = 0 if level == "none" or not given else _strip(n, given)
        if less != given:
            params = [less if f == "scratch_bytes" else v for f, v in zip(n.attrs["param_names"], n.attrs["params"])]
            n = n.copy(attrs={**n.attrs, "scratch_bytes": less, "params": params})
        nodes.append(n)
    return Graph(g.name, g.tensors, nodes, g.inputs, g.outputs, g.meta)


def _strip(n: Node, given: int) -> int:
    if n.attrs["kernel"] != "kiln_depthwise_conv2d_s8":
        return given
    geo = dict(zip(n.attrs["param_names"], (int(v) for v in n.attrs["params"])))
    return tiling.depthwise_scratch(geo, min(given, tiling.one_window(geo)))


def leading_run(g: Graph, scratch: Scratch) -> tuple[int, int]:
    """[start, stop) of the first chain of tileable layers in the schedule (empty when there is none)."""
    start = next((s for s, n in enumerate(g.nodes) if n.attrs.get("kernel") in tiling.TILEABLE), len(g.nodes))
    stop = tiling.chain(g, start) if start < len(g.nodes) else start
    compressed = next((s for s in range(start, stop) if g.nodes[s].name in scratch.layout), stop)
    return start, compressed  # layers with LZ4-compressed weights are left out of the run


def _buffers(g: Graph, base: list[Buffer], t: Tiling, scratch: Scratch, align: int) -> tuple[list[Buffer], list[Buffer]]:
    s, e = t.start, t.stop - 1
    inner = {g.nodes[i].outputs[0]: i - s for i in range(s, e)}
    out = []
    for b in base:
        b = replace(b)
        if b.scratch and s <= b.start <= e:
            node = g.nodes[b.start]
            b.size = round_up(scratch.kernel.get(node.name, 0) + tiling.kernel_scratch(g, t, b.start - s), align)
        elif b.tensors[0] in inner:
            b.size = round_up(tiling.tile_bytes(g, t, inner[b.tensors[0]]), align)
        elif b.start <= e and b.end >= s:  # live during the run: live through all of it
            b.start, b.end = min(b.start, s), max(b.end, e)
        out.append(b)
    if t.shift is not None:
        out = overwrite.join(out, g.nodes[s].inputs[0], g.nodes[e].outputs[0], t.shift, s, e, align)
        assert out is not None, "options() offers the output over the input only where it can lie there"
    extras = []
    if tiling.needs_gather(g, t):
        extras.append(Buffer([f"{g.nodes[s].name}#patch"], round_up(tiling.patch_bytes(g, t), align), s, s, scratch=True))
    if tiling.needs_scatter(g, t):
        extras.append(Buffer([f"{g.nodes[e].name}#tile"], round_up(tiling.tile_bytes(g, t, e - s), align), e, e, scratch=True))
    return out, extras


def _live(bufs: list[Buffer], steps: int) -> list[int]:
    """The arena bytes live at each step."""
    live = [0] * steps
    for b in bufs:
        if b.memory == "arena":
            for step in range(max(b.start, 0), min(b.end, steps - 1) + 1):
                live[step] += b.live_bytes(step)
    return live


def _peak(bufs: list[Buffer], steps: int) -> int:
    return max(_live(bufs, steps), default=0)


def evaluate(g: Graph, base: list[Buffer], t: Tiling | None, scratch: Scratch, level: str, fast: dict[str, int],
             untiled: dict[str, int]) -> Option:
    """A candidate's cost (cheap; its memory is measured when needed). `fast`: the MACs of each layer that the
    lowered graph gave scratch for its fast path; `untiled`: every layer's MACs."""
    run = range(t.start, t.stop) if t else range(0)
    extra = tiling.macs(g, t, untiled) - sum(untiled[g.nodes[s].name] for s in run) if t else 0
    slow = sum(fast.get(n.name, 0) for s, n in enumerate(g.nodes) if s not in run and not n.attrs.get("scratch_bytes"))
    slow += sum(tiling.layer_macs(g, t, s - t.start, untiled[g.nodes[s].name]) for s in run
                if g.nodes[s].name in fast and not tiling.kernel_scratch(g, t, s - t.start))
    return Option(g, scratch, level, t, base, extra, slow)


def measure(p: Option, align: int) -> Option:
    """The candidate's buffers and its peak of live arena bytes."""
    if p.bound < 0:
        g, t = p.graph, p.tiling
        p.bufs, p.extras = _buffers(g, p.base, t, p.scratch, align) if t else ([replace(b) for b in p.base], [])
        p.bound = _peak(p.bufs + p.extras, len(g.nodes))
    return p


def overwrites(g: Graph, plain: Option, grain: int, budget: int, align: int, memo: dict | None = None) -> Option | None:
    """`plain` (layer by layer, or with a tiled run) with layers outside its run run over their input, added one
    at a time at the step of most live bytes while that is over `budget` (and the layer there lowers it): only
    where the budget needs one. Each in the largest pieces, up to `grain` rows, that bring its step within the
    budget (fewer calls), else in those that lower it most. None: no layer helps. `memo` keeps the pieces cut
    for `g` across calls."""
    measure(plain, align)
    memo = {} if memo is None else memo
    bufs, extras, chosen = list(plain.bufs), list(plain.extras), []
    tried = set(range(plain.tiling.start, plain.tiling.stop)) if plain.tiling else set()
    steps = len(g.nodes)
    while True:
        live = _live(bufs + extras, steps)
        order = [s for s in sorted(range(steps), key=lambda s: (-live[s], s)) if live[s] > budget and s not in tried]
        step = next((s for s in order if overwrite.eligible(g, s)), None)
        if step is None:
            break
        tried.add(step)
        tries = []
        for size in (k for k in reversed(overwrite.GRAINS) if k <= grain):
            key = (id(g), step, size, plain.level)
            if key not in memo:
                memo[key] = overwrite.pieces(g, step, size, plain.level, align)
            merged = overwrite.best_merge(bufs, g, memo[key], align)
            if merged is not None:
                new_extras = extras + [overwrite.tile_buffer(g, merged[1], align)]
                at = sum(b.live_bytes(step) for b in merged[0] + new_extras if b.memory == "arena")
                tries.append((at, merged, new_extras))
        fits = [t for t in tries if t[0] <= budget]
        if not tries:
            continue
        at, (new_bufs, o), new_extras = fits[0] if fits else min(tries, key=lambda t: t[0])
        if at < live[step]:
            bufs, extras, chosen = new_bufs, new_extras, chosen + [o]
    if not chosen:
        return None
    p = replace(plain, bufs=bufs, extras=extras, overwrites=tuple(sorted(chosen, key=lambda o: o.step)), grain=grain)
    p.bound = _peak(bufs + extras, steps)
    return p


def over_inputs(g: Graph, plain: Option, budget: int, align: int, memo: dict | None = None) -> list[Option]:
    """`overwrites` at every piece grain: the candidates of `plain` with layers run over their input."""
    return [o for grain in overwrite.GRAINS for o in [overwrites(g, plain, grain, budget, align, memo)] if o]


def options(g: Graph, config: dict, levels: tuple[str, ...] = LEVELS,
            only: tuple[int, tuple[int, int]] | None = None, budget: int | None = None) -> list[Option]:
    """Every candidate over the scratch levels, cheapest first: layer by layer, then each tiling of the leading run
    (`only`: just the tiling of steps up to that stop as that grid), then (given a `budget`) layers run over
    their input where the budget needs them, at each piece size."""
    align = int(config["alignment"])
    untiled = {n.name: node_macs(g, n) for n in g.nodes}
    fast = {n.name: untiled[n.name] for n in g.nodes if n.attrs.get("scratch_bytes")}
    found = []
    for level in levels:
        shrunk = shrink_scratch(g, level)
        scratch = plan_scratch(shrunk, align, bool(config["lz4"]))
        steps = {n.name: s for s, n in enumerate(shrunk.nodes)}
        base = buffers(shrunk, bool(config["io_in_arena"]), align, in_place=bool(config["in_place"]),
                       scratch={steps[node]: size for node, size in scratch.sizes.items()})
        start, stop = leading_run(shrunk, scratch)
        grids = tiling.candidates(shrunk, start, stop) if stop > start else []
        if only:
            grids = [t for t in grids if (t.stop, t.grid) == only]
        runs = ([] if only else [None]) + [replace(t, scratch=inside) for t in grids
                                           for inside in dict.fromkeys((level, "strip", "none"))]
        runs += [replace(t, shift=shift) for t in runs if t for shift in [_over_input(shrunk, base, t, align)] if shift is not None]
        found += [evaluate(shrunk, base, t, scratch, level, fast, untiled) for t in runs]
        if budget is not None and not only:
            plain = evaluate(shrunk, base, None, scratch, level, fast, untiled)
            found += over_inputs(shrunk, plain, budget, align)
    return sorted(found, key=lambda p: (p.rank, p.tiling.stop if p.tiling else 0, p.tiling.grid if p.tiling else (1, 1),
                                        p.tiling is not None and p.tiling.shift is not None))


def _over_input(g: Graph, base: list[Buffer], t: Tiling, align: int) -> int | None:
    """Where the run's output map can lie over its input map (`tiling.over_input_shift`), when the input dies in
    the run, both are in the arena and they would overlap; else None."""
    x, y = g.nodes[t.start].inputs[0], g.nodes[t.stop - 1].outputs[0]
    bx = next((b for b in base if not b.scratch and x in b.tensors), None)
    by = next((b for b in base if not b.scratch and y in b.tensors), None)
    if not (bx and by and bx is not by and bx.memory == by.memory == "arena" and bx.end < t.stop):
        return None
    shift = tiling.over_input_shift(g, t, align)
    return shift if -by.size < shift < bx.size else None


def _placed(p: Option, align: int) -> Option:
    arena = [b for b in p.bufs + p.extras if b.memory == "arena"]
    p.placement = place(arena, align, p.bound)
    for b, offset in zip(arena, p.placement.offsets):
        b.offset = offset
    return p


def search(g: Graph, config: dict, budget: int) -> tuple[Option | None, Option | None]:
    """The cheapest plan that fits `budget` (or None), and the smallest arena found (placed).

    First the candidates as they are; then, in order of cost, each tiled run whose loop fits with the layers after
    it run over their input where the budget needs them (`overwrites`), until none left can be cheaper than the
    cheapest that fits."""
    align = int(config["alignment"])
    plans = options(g, config, budget=budget)
    outside: dict[int, list[int]] = {}
    tried = 0
    for p in plans:
        if floor(p, align, outside) > budget or measure(p, align).bound > budget:
            continue
        if _placed(p, align).size <= budget:
            return p, p
        tried += 1
        if tried >= MAX_PLACEMENTS:
            break
    tiled = [p for p in plans if p.tiling and not p.overwrites]
    best, tried, memo = None, 0, {}
    for p in tiled:
        if best is not None and p.rank[0] > best.rank[0] or tried >= MAX_PLACEMENTS:
            break
        if run_floor(p, align) > budget or run_peak(measure(p, align)) > budget:
            continue
        found = [o for o in over_inputs(p.graph, p, budget, align, memo) if o.bound <= budget]
        for o in sorted(found, key=lambda o: o.rank):
            if best is None or o.rank < best.rank:
                tried += 1
                if _placed(o, align).size <= budget:
                    best = o
    if best is not None:
        return best, best
    both = [o for p in lowest_runs(tiled, align) for o in over_inputs(p.graph, p, budget, align, memo)]
    least = smallest(sorted(plans + both, key=lambda p: p.rank), align, outside)  # the error reports its arena
    return (least if least is not None and least.size <= budget else None), least


def lowest_runs(tiled: list[Option], align: int) -> list[Option]:
    """Per tiled run (its steps, scratch levels and whether its output lies over its input), the grid of lowest
    `run_floor` (then cost): the layers outside the run see the same buffers whatever the grid."""
    best: dict[tuple, tuple[int, int]] = {}
    for k, p in enumerate(tiled):
        key = (id(p.base), p.tiling.stop, p.tiling.scratch, p.tiling.shift is not None)
        floor = run_floor(p, align)
        if key not in best or floor < best[key][0]:
            best[key] = (floor, k)
    return [measure(tiled[k], align) for _, k in sorted(best.values())]


def run_floor(p: Option, align: int) -> int:
    """A lower bound of `run_peak` that builds no buffers: the run's input and output maps (one buffer when the
    output lies over the input), and the input and output tiles of its fullest layer."""
    g, t = p.graph, p.tiling
    x, y = g.nodes[t.start].inputs[0], g.nodes[t.stop - 1].outputs[0]
    sizes = {name: b.size for b in p.base if b.memory == "arena" and not b.scratch for name in b.tensors}
    sx, sy = sizes.get(x, 0), sizes.get(y, 0)
    ends = round_up(max(sx, t.shift + sy) - min(0, t.shift), align) if t.shift is not None else sx + sy
    last = t.stop - t.start - 1
    tiles = [round_up(tiling.tile_bytes(g, t, k), align) for k in range(last)]
    first = round_up(tiling.patch_bytes(g, t), align) if tiling.needs_gather(g, t) else 0
    final = round_up(tiling.tile_bytes(g, t, last), align) if tiling.needs_scatter(g, t) else 0
    inputs, outputs = [first] + tiles, tiles + [final]
    return ends + max(i + o for i, o in zip(inputs, outputs))


def run_peak(p: Option) -> int:
    """The most live arena bytes during the tiled run's loop (a measured candidate with a tiled run)."""
    live = _live(p.bufs + p.extras, len(p.graph.nodes))
    return max(live[p.tiling.start:p.tiling.stop])


def smallest(plans: list[Option], align: int, outside: dict[int, list[int]] | None = None) -> Option | None:
    """The smallest placed arena among the candidates of lowest peak (measuring only those whose `floor` could be
    among them)."""
    outside = {} if outside is None else outside
    lowest: list[tuple[int, int, int]] = []
    for low, k in sorted((floor(p, align, outside), k) for k, p in enumerate(plans)):
        if len(lowest) >= MAX_PLACEMENTS and low > lowest[-1][0]:
            break
        lowest = sorted(lowest + [(measure(plans[k], align).bound, plans[k].extra_macs, k)])[:MAX_PLACEMENTS]
    placed = [_placed(plans[k], align) for _, _, k in lowest]
    return min(placed, key=lambda p: (p.size, p.extra_macs), default=None)


def floor(p: Option, align: int, outside: dict[int, list[int]]) -> int:
    """A lower bound of the candidate's peak that builds no buffers when it is a tiled run alone (its steps outside
    the run are as layer by layer, or fuller; its loop takes at least `run_floor`); else its peak. `outside` keeps
    the layer-by-layer live bytes per step of each schedule."""
    if p.bound >= 0 or not p.tiling or p.overwrites:
        return measure(p, align).bound
    live = outside.setdefault(id(p.base), _live(p.base, len(p.graph.nodes)))
    return max(live[:p.tiling.start] + live[p.tiling.stop:] + [run_floor(p, align)])


def describe(g: Graph, p: Option) -> str:
    t = p.tiling
    words = {"full": "", "strip": "depthwise scratch one window tall", "none": "no kernel scratch"}
    scratch = f", {words[p.level]}" if p.level != "full" else ""
    parts = []
    if t is not None:
        first, last = g.nodes[t.start], g.nodes[t.stop - 1]
        inside = f" ({words[t.scratch]})" if t.scratch != p.level else ""
        over = ", output over its input" if t.shift is not None else ""
        parts.append(f"steps {t.start}-{t.stop - 1} ({first.name!r} to {last.name!r}) tiled {t.grid[0]}x{t.grid[1]}{over}{inside}")
    if p.overwrites:
        steps = ", ".join(str(o.step) for o in p.overwrites)
        parts.append(f"steps {steps} run over their input in pieces of up to {p.grain} row{'s' if p.grain > 1 else ''}")
    return " and ".join(parts or ["layer by layer"]) + scratch


def limit(g: Graph, p: Option) -> str:
    """What holds the plan's arena up: the live buffers at its peak step."""
    arena = [b for b in p.bufs + p.extras if b.memory == "arena"]
    live = _live(arena, len(g.nodes))
    step = max(range(len(g.nodes)), key=lambda s: (live[s], -s))
    held = sorted((b for b in arena if b.live_bytes(step)), key=lambda b: (-b.live_bytes(step), b.tensors[0]))
    names = ", ".join(f"{b.tensors[0]} ({b.live_bytes(step)} B)" for b in held)
    return f"peak at step {step} (node {g.nodes[step].name!r}) with live buffers: {names}"


def annotate(g: Graph, p: Option, annotate_untiled, align: int) -> None:
    """Offsets as an untiled plan's, then each run node's per-tile parameters and pointer deltas."""
    g.nodes = list(p.graph.nodes)
    annotate_untiled(g, SimpleNamespace(all=p.bufs), p.scratch)
    extras = {b.tensors[0]: b for b in p.extras}
    for o in p.overwrites:
        overwrite.annotate(g, o, extras[f"{g.nodes[o.step].name}#inplace"].offset, COPY_FIELDS, align)
    t = p.tiling
    if t is None:
        return
    tiles = t.tiles()
    for layer in range(t.stop - t.start):
        node = g.nodes[t.start + layer]
        vectors: list[list[int]] = []
        index = []
        for tile in tiles:
            v = tiling.tile_params(g, t, layer, tile)
            if v not in vectors:
                vectors.append(v)
            index.append(vectors.index(v))
        node.attrs["tile_params"] = [x for v in vectors for x in v]
        node.attrs["tile_index"] = index
        node.attrs["tile_in"] = [0] * len(tiles)
        node.attrs["tile_out"] = [0] * len(tiles)
        if layer + 1 < t.stop - t.start:
            g.tensors[node.outputs[0]].attrs["tile_bytes"] = tiling.tile_bytes(g, t, layer)
    extras = {b.tensors[0].rsplit("#", 1)[1]: b for b in p.extras}
    first, last = g.nodes[t.start], g.nodes[t.stop - 1]
    x, y = g.tensors[first.inputs[0]], g.tensors[last.outputs[0]]
    for k, (r, c) in enumerate(tiles):
        wr, wc = t.rows.windows[0][r], t.cols.windows[0][c]
        (o0, o1), (p0, p1) = t.rows.outputs[r], t.cols.outputs[c]
        x_row, y_row = x.shape[2] * x.shape[3], y.shape[2] * y.shape[3]
        if "patch" not in extras:
            first.attrs["tile_in"][k] = wr.lo * x_row
        if "tile" not in extras:
            last.attrs["tile_out"][k] = o0 * y_row
    if "patch" in extras:
        first.attrs["tile_gather"] = [v for r, c in tiles for v in _copy(
            t.rows.windows[0][r].hi - t.rows.windows[0][r].lo, t.cols.windows[0][c].hi - t.cols.windows[0][c].lo, x.shape,
            t.rows.windows[0][r].lo, t.cols.windows[0][c].lo, gather=True)]
        first.attrs["tile_gather_to"] = extras["patch"].offset
        first.attrs["tile_gather_bytes"] = extras["patch"].size
        first.attrs["tile_copy_fields"] = list(COPY_FIELDS)
    if "tile" in extras:
        last.attrs["tile_scatter"] = [v for r, c in tiles for v in _copy(
            t.rows.outputs[r][1] - t.rows.outputs[r][0], t.cols.outputs[c][1] - t.cols.outputs[c][0], y.shape,
            t.rows.outputs[r][0], t.cols.outputs[c][0], gather=False)]
        last.attrs["tile_scatter_from"] = extras["tile"].offset
        last.attrs["tile_scatter_bytes"] = extras["tile"].size
        last.attrs["tile_copy_fields"] = list(COPY_FIELDS)


def _copy(rows: int, cols: int, shape: tuple[int, ...], row: int, col: int, gather: bool) -> list[int]:
    """kiln_copy_part's fields moving a rows x cols window between a whole map of `shape` and a packed tile."""
    row_bytes, window = shape[2] * shape[3], cols * shape[3]
    at = row * row_bytes + col * shape[3]
    fields = dict(elem_size=1, outer=rows, inner=window, in_stride=row_bytes if gather else window,
                  in_offset=at if gather else 0, out_stride=window if gather else row_bytes, out_offset=0 if gather else at)
    return [fields[f] for f in COPY_FIELDS]


def finish(g: Graph, p: Option, config: dict, schedule: str, layer_by_layer: int, layer_bound: int, annotate_untiled) -> Graph:
    """`g` (its schedule) planned as `p` (placed): offsets, per-tile calls and the meta a plan records."""
    annotate(g, p, annotate_untiled, int(config["alignment"]))
    g.meta.update({"arena_size": p.size, "lower_bound": p.bound, "alignment": int(config["alignment"]),
                   "arena_ratio": round(p.size / p.bound, 4) if p.bound else 1.0,
                   "schedule": schedule, "placement": p.placement.heuristic, "lz4": int(bool(config["lz4"]))})
    g.meta.update(budget_meta(g, p, layer_by_layer, layer_bound))
    return g


def plan_tiled(graph: Graph, config: dict, stop: int, grid: tuple[int, int], level: str = "full",
               over_input: bool = False, grain: int = 0) -> Graph:
    """`graph` planned in its given order with its leading run up to step `stop` tiled as `grid`, its output over its
    input when asked, and (`grain`) every later layer that helps run over its input (tests, exploring)."""
    from kiln.plan import _annotate, plan

    untiled = plan(graph, dict(config, budget=0, reorder=False))
    g = graph.copy()
    for p in options(g, config, (level,), (stop, tuple(grid))):
        if p.tiling.scratch != level or (p.tiling.shift is not None) != over_input:
            continue
        if grain:
            p = overwrites(g, p, grain, 0, int(config["alignment"]))
            if p is None:
                raise KilnError(f"graph {graph.name!r}: no layer after the tiled run can run over its input")
        _placed(measure(p, int(config["alignment"])), int(config["alignment"]))
        return finish(g, p, config, "given", untiled.meta["arena_size"], untiled.meta["lower_bound"], _annotate)
    raise KilnError(f"graph {graph.name!r}: no tiling of steps up to {stop} as a {grid[0]}x{grid[1]} grid")


def budget_meta(g: Graph, p: Option, layer_by_layer: int, layer_bound: int) -> dict:
    """What the budget changed, for planned.kir, `kiln inspect` and the build report."""
    meta = {"scratch_level": p.level, "extra_macs": p.extra_macs, "layer_by_layer_arena": layer_by_layer,
            "layer_by_layer_bound": layer_bound}
    if p.overwrites:
        meta.update({"in_place_steps": [o.step for o in p.overwrites], "in_place_pieces": [len(o.params) for o in p.overwrites],
                     "in_place_copied": p.moved})
    if p.tiling:
        t = p.tiling
        meta.update({"tiled_run": [t.start, t.stop], "tile_grid": list(t.grid), "tile_scratch": t.scratch,
                     "run_macs": tiling.run_macs(g, t.start, t.stop)})
        if t.shift is not None:
            meta["tile_output_over_input"] = 1
    return meta


def over_budget_error(g: Graph, budget: int, best: Option) -> KilnError:
    return KilnError(f"graph {g.name!r}: arena {best.size} bytes exceeds plan.budget {budget}; the smallest arena Kiln "
                     f"reaches, with {describe(g, best)}, {best.extra_macs} extra MACs; {limit(g, best)}")


def frontier(graph: Graph, config: dict) -> list[tuple[int, int, int, int, str]]:
    """(arena bytes, extra MACs, MACs off a fast path, bytes copied, plan) of the candidates no other beats on both
    arena and added work (their sum, as `Option.rank` counts it), in the graph's best schedule.

    Candidates are taken in order of added work, each kept when its peak is below every cheaper one's (a placement
    never goes below it), then placed. A tiled run comes also with the layers after it run over their input where
    they are above its loop's peak; a candidate is measured only when a lower bound of that could be below.
    """
    from kiln.plan import plan

    scheduled = plan(graph, dict(config, budget=0))
    g = graph.copy()
    g.nodes = [next(n for n in graph.nodes if n.name == m.name) for m in scheduled.nodes]
    align, kept, lowest, outside, memo = int(config["alignment"]), [], None, {}, {}
    plans = options(g, config, budget=0)
    for p in sorted(plans, key=lambda p: (p.rank[0], floor(p, align, outside), p.rank)):
        tiled = p.tiling is not None and not p.overwrites
        if lowest is not None and (run_floor(p, align) if tiled else floor(p, align, outside)) >= lowest:
            continue
        found = [measure(p, align)]
        if tiled and p.bound > run_peak(p):
            found += over_inputs(p.graph, p, run_peak(p), align, memo)
        for o in sorted(found, key=lambda o: (o.rank[0], o.bound)):
            if lowest is None or o.bound < lowest:
                kept.append(o)
                lowest = o.bound
    placed = sorted(((_placed(p, align).size, p.extra_macs, p.slow_macs, p.moved, describe(g, p)) for p in kept),
                    key=lambda r: (r[1] + r[2] + r[3], r[0]))
    best: list[tuple[int, int, int, int, str]] = []
    for row in placed:
        if not best or row[0] < best[-1][0]:
            best.append(row)
    return best


def plan_overwritten(graph: Graph, config: dict, grain: int, level: str = "full") -> Graph:
    """`graph` planned in its given order with every layer that lowers its step's live bytes run over its input in
    pieces of `grain` rows (tests, exploring)."""
    from kiln.plan import _annotate, plan

    untiled = plan(graph, dict(config, budget=0, reorder=False))
    g = graph.copy()
    for p in options(g, config, (level,), budget=0):
        if p.grain == grain:
            _placed(p, int(config["alignment"]))
            return finish(g, p, config, "given", untiled.meta["arena_size"], untiled.meta["lower_bound"], _annotate)
    raise KilnError(f"graph {graph.name!r}: no layer can run over its input in pieces of {grain} rows")
