"""Buffers: tensors that share storage, with their live ranges over the schedule.

Three things make tensors share one buffer: reshape-like aliases
(`kernel == ""`), element-wise kernels that run in place when their input
dies at them (`kiln.plan.inplace`), and chains of both. A step's scratch
region (decompressed weights, kernel scratch) is a buffer live during that
step only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kiln.errors import KilnError
from kiln.ir.graph import Graph
from kiln.plan.inplace import in_place_candidates


@dataclass
class Buffer:
    tensors: list[str]  # the root first, then the tensors sharing it; a scratch region's label
    size: int
    start: int  # first step that writes it (-1: before the first step)
    end: int  # last step that reads it (len(nodes): after the last step)
    memory: str = "arena"
    offset: int = 0
    scratch: bool = False
    shifts: dict[str, int] = field(default_factory=dict)  # tensors placed this many bytes into it (others: at 0)
    # (start, end, lo, hi): bytes [lo, hi) of it live over steps start..end, when what is live changes over its life
    # (the input and output maps of a layer written over its input); none: all of it, all its life
    parts: tuple[tuple[int, int, int, int], ...] = ()

    def overlaps(self, other: "Buffer") -> bool:
        return self.start <= other.end and other.start <= self.end

    def spans(self) -> tuple[tuple[int, int, int, int], ...]:
        return self.parts or ((self.start, self.end, 0, self.size),)

    def live_bytes(self, step: int) -> int:
        """Its bytes live at `step`: the union of its parts live there."""
        if not self.parts:
            return self.size if self.start <= step <= self.end else 0
        total, end = 0, 0
        for lo, hi in sorted((lo, hi) for s, e, lo, hi in self.parts if s <= step <= e):
            if hi > end:
                total += hi - max(lo, end)
                end = hi
        return total


def round_up(n: int, align: int) -> int:
    return -(-n // align) * align


class _Groups:
    """Union-find over tensor names; the root is the tensor written first."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def join(self, root: str, other: str) -> None:
        self.parent[self.find(other)] = self.find(root)


def _lifetimes(g: Graph) -> tuple[dict[str, int], dict[str, int]]:
    """First step writing and last step reading each tensor (graph inputs/outputs extend to the ends)."""
    steps = len(g.nodes)
    first_def: dict[str, int] = {name: -1 for name in g.inputs}
    last_use: dict[str, int] = {name: steps for name in g.outputs}
    for i, n in enumerate(g.nodes):
        for o in n.outputs:
            first_def.setdefault(o, i)
        for t in n.inputs:
            if t:
                last_use[t] = max(last_use.get(t, -1), i)
    return first_def, last_use


def _memory(g: Graph, names: list[str], io_in_arena: bool) -> str:
    if io_in_arena:
        return "arena"
    kinds = {"input" for n in names if n in g.inputs} | {"output" for n in names if n in g.outputs}
    if len(kinds) > 1:
        raise KilnError(f"graph {g.name!r}: output {names} is an alias of an input; nothing to compute")
    return kinds.pop() if kinds else "arena"


def buffers(g: Graph, io_in_arena: bool, align: int, in_place: bool = True,
            scratch: dict[int, int] | None = None) -> list[Buffer]:
    """Group tensors into buffers over the schedule `g.nodes`; `scratch` maps a step to its scratch bytes."""
    groups = _Groups()
    for n in g.nodes:
        if n.attrs.get("kernel") == "" and n.inputs and not g.tensors[n.inputs[0]].is_constant:
            groups.join(n.inputs[0], n.outputs[0])
    first_def, last_use = _lifetimes(g)
    steps = len(g.nodes)
    span: dict[str, list[int]] = {}
    for name, t in g.tensors.items():
        if not t.is_constant:
            s = span.setdefault(groups.find(name), [steps, -1])
            s[0] = min(s[0], first_def.get(name, steps))
            s[1] = max(s[1], last_use.get(name, first_def.get(name, steps)))
    if in_place:
        _merge_in_place(g, groups, span, io_in_arena)
    members: dict[str, list[str]] = {}
    for name, t in g.tensors.items():
        if not t.is_constant:
            members.setdefault(groups.find(name), []).append(name)
    out = []
    for root in sorted(members, key=lambda r: (span[r][0], r)):
        names = [root] + sorted(n for n in members[root] if n != root)
        size = round_up(max(g.tensors[n].nbytes for n in names), align)
        out.append(Buffer(names, size, span[root][0], max(span[root]), _memory(g, names, io_in_arena)))
    for step, size in sorted((scratch or {}).items()):
        node = g.nodes[step]
        out.append(Buffer([f"{node.name}#scratch"], round_up(size, align), step, step, scratch=True))
    return out


def _merge_in_place(g: Graph, groups: _Groups, span: dict[str, list[int]], io_in_arena: bool) -> None:
    """Give an element-wise kernel's output its input's buffer when that input dies at the kernel."""
    writers: dict[str, int] = {}
    for n in g.nodes:
        for o in n.outputs:
            writers[o] = writers.get(o, 0) + 1
    for step, node in enumerate(g.nodes):
        y = node.outputs[0] if len(node.outputs) == 1 else ""
        if not y or writers[y] != 1:
            continue
        gy = groups.find(y)
        for x in in_place_candidates(g, node):
            gx = groups.find(x)
            if gx == gy or span[gx][1] != step or span[gy][0] != step or span[gx][0] >= step:
                continue
            if not io_in_arena and {gx, gy} & {groups.find(n) for n in g.inputs + g.outputs}:
                continue  # caller memory: inputs are const, outputs are not the arena
            groups.join(gx, gy)
            span[gx][1] = span.pop(gy)[1]
            break
