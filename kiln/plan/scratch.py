"""Scratch regions for LZ4-compressed weights (`plan.lz4`).

A constant is stored compressed when its LZ4 block is smaller than its raw
bytes. Just before a layer runs, its compressed constants are decompressed
into that layer's scratch region in the arena, one after another, each
aligned; the region is a buffer live during that step only, so the planner
packs it among the activations.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.lz4 import worth_compressing
from kiln.ir.graph import Graph
from kiln.plan.buffers import round_up


@dataclass(frozen=True)
class Scratch:
    compressed: dict[str, int]  # constant name -> compressed bytes
    layout: dict[str, dict[str, int]]  # node name -> {constant: offset inside the node's region}
    sizes: dict[str, int]  # node name -> bytes of its region


def plan_scratch(g: Graph, align: int) -> Scratch:
    """Which constants to compress and where each layer's decompressed constants go in its region."""
    compressed: dict[str, int] = {}
    tried: set[str] = set()
    layout: dict[str, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    for n in g.nodes:
        if not n.attrs.get("kernel"):
            continue
        region: dict[str, int] = {}
        cursor = 0
        for name in n.inputs:
            t = g.tensors.get(name) if name else None
            if t is None or not t.is_constant or name in region:
                continue
            if name not in tried:
                tried.add(name)
                size = worth_compressing(t.data)
                if size:
                    compressed[name] = size
            if name in compressed:
                region[name] = cursor
                cursor = round_up(cursor + t.nbytes, align)
        if region:
            layout[n.name] = region
            sizes[n.name] = cursor
    return Scratch(compressed, layout, sizes)
