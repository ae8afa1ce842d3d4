"""Buffers: tensors that share storage (alias chains), with their live ranges over the schedule."""
from __future__ import annotations

from dataclasses import dataclass

from toolchain.errors import KilnError
from toolchain.ir.graph import Graph


@dataclass
class Buffer:
    tensors: list[str]  # the root first, then its aliases
    size: int
    start: int  # first step that writes it (-1: before the first step)
    end: int  # last step that reads it (len(nodes): after the last step)
    memory: str = "arena"
    offset: int = 0

    def overlaps(self, other: "Buffer") -> bool:
        return self.start <= other.end and other.start <= self.end


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def buffers(g: Graph, io_in_arena: bool, align: int) -> list[Buffer]:
    """Group alias chains into buffers and compute each buffer's live range."""
    root: dict[str, str] = {}
    for n in g.nodes:
        if n.attrs.get("kernel") == "" and n.inputs and not g.tensors[n.inputs[0]].is_constant:
            root[n.outputs[0]] = root.get(n.inputs[0], n.inputs[0])
    groups: dict[str, list[str]] = {}
    for name, t in g.tensors.items():
        if not t.is_constant:
            groups.setdefault(root.get(name, name), []).append(name)
    steps = len(g.nodes)
    first_def: dict[str, int] = {name: -1 for name in g.inputs}
    last_use: dict[str, int] = {name: steps for name in g.outputs}
    for i, n in enumerate(g.nodes):
        for o in n.outputs:
            first_def.setdefault(o, i)
        for t in n.inputs:
            if t:
                last_use[t] = max(last_use.get(t, -1), i)
    out = []
    for r in sorted(groups, key=lambda k: (first_def.get(k, -1), k)):
        names = [r] + sorted(n for n in groups[r] if n != r)
        start = min(first_def.get(n, steps) for n in names)
        end = max(last_use.get(n, start) for n in names)
        memory = "arena"
        if not io_in_arena:
            kinds = {"input" for n in names if n in g.inputs} | {"output" for n in names if n in g.outputs}
            if len(kinds) > 1:
                raise KilnError(f"graph {g.name!r}: output {names} is an alias of an input; nothing to compute")
            memory = kinds.pop() if kinds else "arena"
        out.append(Buffer(names, _round_up(g.tensors[r].nbytes, align), start, end, memory))
    return out
