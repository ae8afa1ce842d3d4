"""The plan stage: buffer lifetimes over the schedule and arena offsets.

Reshape-like aliases (`kernel == ""`) share their input's storage, so a chain
of aliases is one buffer. Graph inputs and outputs live in the caller's
buffers unless `plan.io_in_arena` asks for them inside the arena. Every
non-constant tensor gets a `memory` attribute ("arena", "input", "output")
and an `offset`; the graph meta records the arena size, the lower bound (the
largest sum of simultaneously live bytes) and the alignment.
"""
from __future__ import annotations

from toolchain.errors import KilnError
from toolchain.ir.graph import Graph
from toolchain.plan.buffers import Buffer, buffers
from toolchain.plan.offsets import place


def plan(graph: Graph, config: dict) -> Graph:
    g = graph.copy()
    align = int(config["alignment"])
    bufs = buffers(g, bool(config["io_in_arena"]), align)
    arena = [b for b in bufs if b.memory == "arena"]
    size = place(arena, align)
    bound = lower_bound(arena, len(g.nodes))
    for b in bufs:
        for name in b.tensors:
            t = g.tensors[name]
            t.attrs["memory"] = b.memory
            t.attrs["offset"] = b.offset
    g.meta.update({"arena_size": size, "lower_bound": bound, "alignment": align})
    budget = int(config["budget"])
    if budget and size > budget:
        raise KilnError(over_budget(g, arena, size, budget))
    return g


def lower_bound(bufs: list[Buffer], steps: int) -> int:
    """The largest total of live bytes at any step: no placement can use less."""
    return max((sum(b.size for b in bufs if b.start <= s <= b.end) for s in range(steps)), default=0)


def over_budget(g: Graph, bufs: list[Buffer], size: int, budget: int) -> str:
    peak_step = max(range(len(g.nodes)), key=lambda s: sum(b.size for b in bufs if b.start <= s <= b.end))
    live = [b for b in bufs if b.start <= peak_step <= b.end]
    node = g.nodes[peak_step]
    names = ", ".join(f"{b.tensors[0]} ({b.size} B)" for b in sorted(live, key=lambda b: (-b.size, b.tensors[0])))
    return (f"graph {g.name!r}: arena {size} bytes exceeds plan.budget {budget}; peak at step {peak_step} "
            f"(node {node.name!r}, {node.op}) with live tensors: {names}")
