"""The plan stage: a memory-aware schedule, buffer lifetimes and arena offsets.

Reshape-like aliases (`kernel == ""`) share their input's storage, and
element-wise kernels on the in-place allow-list write over an input that dies
at them, so a chain of such tensors is one buffer. Graph inputs and outputs
live in the caller's buffers unless `plan.io_in_arena` asks for them inside
the arena. Each layer with compressed constants (`plan.lz4`) or a kernel
that takes scratch gets a scratch buffer live during that layer only.

The stage tries several valid topological orders (`kiln.plan.schedule`)
and several placement heuristics (`kiln.plan.offsets`) and keeps the
smallest arena among the orders whose peak is no higher than the given
order's. Every non-constant tensor gets a `memory` attribute ("arena",
"input", "output") and an `offset`; the graph meta records the arena size,
the lower bound (the largest sum of simultaneously live bytes over the chosen
schedule), their ratio, the alignment, and which order and heuristic won.

When the smallest arena is over `plan.budget`, `kiln.plan.budget` searches
plans with less kernel scratch and with the leading run of window layers
tiled (`kiln.plan.tiling`), and keeps the cheapest that fits.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from kiln.errors import KilnError
from kiln.ir.graph import DTYPES, Graph
from kiln.plan.budget import finish, over_budget_error
from kiln.plan.budget import search as budget_search
from kiln.plan.buffers import Buffer, buffers
from kiln.plan.config import alignment_problem
from kiln.plan.offsets import Placement, place
from kiln.plan.schedule import candidate_orders
from kiln.plan.scratch import Scratch, plan_scratch


@dataclass
class _Candidate:
    name: str
    graph: Graph  # shares tensors and nodes with the stage's copy; only the node order differs
    arena: list[Buffer]
    all: list[Buffer]
    bound: int
    placement: Placement


# Sizes and offsets reach C as size_t and kernel parameters as int32: on every target both hold this.
SIZE_LIMIT = 2**31 - 1


def plan(graph: Graph, config: dict) -> Graph:
    """Plan `graph`'s memory (`config`: the `[plan]` table); `lz4` reserves scratch regions for compressed weights."""
    g = graph.copy()
    _check_sizes(g)
    align = int(config["alignment"])
    if alignment_problem(align):
        raise KilnError(f"graph {g.name!r}: plan.alignment: {alignment_problem(align)}")
    lz4 = bool(config["lz4"])
    scratch = plan_scratch(g, align, lz4)
    orders = candidate_orders(g) if config["reorder"] else [("given", list(range(len(g.nodes))))]
    found = [_evaluate(g, name, order, config, scratch) for name, order in orders]
    eligible = [k for k, c in enumerate(found) if c.bound <= found[0].bound]  # never a higher peak than given
    best = found[min(eligible, key=lambda k: (found[k].placement.size, found[k].bound, k))]
    g.nodes = best.graph.nodes
    budget = int(config["budget"])
    if budget and best.placement.size > budget:
        return _tile_to_budget(g, best, scratch, config, budget)
    for b, offset in zip(best.arena, best.placement.offsets):
        b.offset = offset
    _annotate(g, best, scratch)
    size = best.placement.size
    g.meta.update({"arena_size": size, "lower_bound": best.bound, "alignment": align,
                   "arena_ratio": round(size / best.bound, 4) if best.bound else 1.0,
                   "schedule": best.name, "placement": best.placement.heuristic, "lz4": int(lz4)})
    if size > SIZE_LIMIT:
        raise KilnError(f"graph {g.name!r}: the arena needs {size} bytes; the target's size_t/int32 limit is {SIZE_LIMIT} bytes")
    return g


def _tile_to_budget(g: Graph, best: _Candidate, scratch: Scratch, config: dict, budget: int) -> Graph:
    """The layer-by-layer plan is over budget: the cheapest plan that fits (kiln.plan.budget)."""
    align, size = int(config["alignment"]), best.placement.size
    found, reached = budget_search(g, config, budget)
    if found is None:
        if reached is None or reached.size >= size:
            raise KilnError(over_budget(g, best.arena, size, budget) + "; neither less kernel scratch nor tiling lowers it")
        raise over_budget_error(g, budget, reached)
    finish(g, found, config, best.name, size, best.bound, _annotate)
    return g


def _check_sizes(g: Graph) -> None:
    """Every tensor's bytes must fit the target's size_t and the kernels' int32 sizes (checked here, not by gcc)."""
    order = g.inputs + [t for n in g.nodes for t in n.inputs + n.outputs if t] + sorted(g.tensors)
    for name in dict.fromkeys(order):
        t = g.tensors[name]
        nbytes = math.prod(t.shape) * DTYPES[t.dtype].itemsize  # Python ints: no int64 wrap-around
        if nbytes > SIZE_LIMIT:
            raise KilnError(f"graph {g.name!r}: tensor {name!r} ({t.dtype}{list(t.shape)}) is {nbytes} bytes; "
                            f"the target's size_t/int32 limit is {SIZE_LIMIT} bytes")


def _evaluate(g: Graph, name: str, order: list[int], config: dict, scratch: Scratch) -> _Candidate:
    scheduled = Graph(g.name, g.tensors, [g.nodes[i] for i in order], g.inputs, g.outputs, g.meta)
    steps = {n.name: s for s, n in enumerate(scheduled.nodes)}
    bufs = buffers(scheduled, bool(config["io_in_arena"]), int(config["alignment"]),
                   in_place=bool(config["in_place"]),
                   scratch={steps[node]: size for node, size in scratch.sizes.items()})
    arena = [b for b in bufs if b.memory == "arena"]
    bound = lower_bound(arena, len(scheduled.nodes))
    return _Candidate(name, scheduled, arena, bufs, bound, place(arena, int(config["alignment"]), bound))


def _annotate(g: Graph, best: _Candidate, scratch: Scratch) -> None:
    """Write memory/offset onto tensors, scratch offsets onto nodes, compressed sizes onto constants."""
    for b in best.all:
        if b.scratch:
            continue
        for name in b.tensors:
            g.tensors[name].attrs["memory"] = b.memory
            g.tensors[name].attrs["offset"] = b.offset + b.shifts.get(name, 0)
    regions = {b.start: b.offset for b in best.all if b.scratch}
    for step, node in enumerate(g.nodes):
        layout = scratch.layout.get(node.name)
        if layout:
            node.attrs["lz4_scratch"] = [regions[step] + layout[i] if i in layout else -1 for i in node.inputs]
        if "scratch_bytes" in node.attrs:
            node.attrs["scratch"] = regions[step] + scratch.kernel[node.name] if node.name in scratch.kernel else -1
    for name, size in scratch.compressed.items():
        g.tensors[name].attrs["lz4_bytes"] = size


def lower_bound(bufs: list[Buffer], steps: int) -> int:
    """The largest total of live bytes at any step: no placement can use less."""
    return max(_live_bytes(bufs, steps), default=0)


def _live_bytes(bufs: list[Buffer], steps: int) -> list[int]:
    """The bytes live at each step, from the changes where buffers start and end (not a scan per step)."""
    change = [0] * (steps + 1)
    for b in bufs:
        first, last = max(b.start, 0), min(b.end, steps - 1)
        if first <= last:
            change[first] += b.size
            change[last + 1] -= b.size
    return list(itertools.accumulate(change[:steps]))


def over_budget(g: Graph, bufs: list[Buffer], size: int, budget: int) -> str:
    live_bytes = _live_bytes(bufs, len(g.nodes))
    peak_step = max(range(len(g.nodes)), key=lambda s: (live_bytes[s], -s))
    live = [b for b in bufs if b.start <= peak_step <= b.end]
    node = g.nodes[peak_step]
    names = ", ".join(f"{b.tensors[0]} ({b.size} B)" for b in sorted(live, key=lambda b: (-b.size, b.tensors[0])))
    return (f"graph {g.name!r}: arena {size} bytes exceeds plan.budget {budget}; peak at step {peak_step} "
            f"(node {node.name!r}, {node.op}) with live tensors: {names}")
