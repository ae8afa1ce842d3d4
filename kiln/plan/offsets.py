"""Arena offsets: several placement heuristics, keeping the smallest arena.

Each heuristic is a placement order plus a fit rule, decoded against the
buffers already placed whose live ranges overlap:

- greedy by size, first fit (TFLM's and TVM's default);
- greedy by size, best fit (the smallest gap that holds the buffer);
- greedy by breadth (TFLite): steps by total live bytes, largest first, each
  step's buffers by size, best fit;
- greedy by conflicts: buffers overlapping the most live bytes first;
- hill climbing (as TVM's `hill_climb` allocator): seeded swaps of the best
  order so far, keeping a swap when the arena does not grow; stops at the
  lower bound.

Ties go to the heuristic listed first, so the result is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.plan.buffers import Buffer, round_up

HILL_CLIMB_STEPS = 300


@dataclass(frozen=True)
class Placement:
    heuristic: str
    offsets: tuple[int, ...]
    size: int


def place(bufs: list[Buffer], align: int, bound: int | None = None) -> Placement:
    """The smallest placement of `bufs` found; the caller applies `offsets` (in `bufs` order)."""
    conflicts = _conflicts(bufs)
    near = _near(bufs, conflicts)
    tried = [(Placement(name, *_decode(bufs, near, order, best_fit, align)), order, best_fit)
             for name, order, best_fit in _orders(bufs, conflicts)]
    placement, order, best_fit = tried[min(range(len(tried)), key=lambda k: (tried[k][0].size, k))]
    if bound is not None and placement.size > bound:
        placement = _hill_climb(bufs, near, order, best_fit, align, bound, placement)
    return placement


def _near(bufs: list[Buffer], conflicts: list[list[int]]) -> list[list[tuple[int, int, int]]]:
    """For each buffer, (j, x, y) for each other buffer j and pair of their parts live at a common step: placed at
    offset o_j, j forbids every offset in the open interval (o_j + x, o_j + y). A buffer without parts is one part."""
    spans = [b.spans() for b in bufs]
    found: list[list[tuple[int, int, int]]] = []
    for i, others in enumerate(conflicts):
        found.append([(j, lo_q - hi_p, hi_q - lo_p) for j in others for s_p, e_p, lo_p, hi_p in spans[i]
                      for s_q, e_q, lo_q, hi_q in spans[j] if s_p <= e_q and s_q <= e_p])
    return found


def _conflicts(bufs: list[Buffer]) -> list[list[int]]:
    """For each buffer, the (ascending) indices of the others whose live ranges overlap it.

    A sweep over the buffers by start step keeps those still live: time in
    the number of buffers and overlapping pairs, not in their square.
    """
    found: list[list[int]] = [[] for _ in bufs]
    live: list[int] = []
    for i in sorted(range(len(bufs)), key=lambda i: bufs[i].start):
        b = bufs[i]
        live = [j for j in live if bufs[j].end >= b.start]
        for j in live:
            found[i].append(j)
            found[j].append(i)
        live.append(i)
    return [sorted(c) for c in found]


def _orders(bufs: list[Buffer], conflicts: list[list[int]]) -> list[tuple[str, list[int], bool]]:
    """(heuristic, placement order, best fit?) for each greedy heuristic."""
    by_size = sorted(range(len(bufs)), key=lambda i: (-bufs[i].size, bufs[i].start, bufs[i].tensors[0]))
    load = [sum(bufs[j].size for j in c) for c in conflicts]
    by_conflicts = sorted(range(len(bufs)), key=lambda i: (-load[i] - bufs[i].size, -bufs[i].size, i))
    return [("greedy_by_size", by_size, False), ("greedy_by_size_best_fit", by_size, True),
            ("greedy_by_breadth", _by_breadth(bufs), True), ("greedy_by_conflicts", by_conflicts, False)]


def _by_breadth(bufs: list[Buffer]) -> list[int]:
    steps = sorted({s for b in bufs for s in (b.start, b.end)})
    live: dict[int, list[int]] = {}
    starts = sorted(range(len(bufs)), key=lambda i: bufs[i].start)
    active: list[int] = []
    k = 0
    for s in steps:  # a sweep: the buffers live at each step where one starts or ends
        while k < len(starts) and bufs[starts[k]].start <= s:
            active.append(starts[k])
            k += 1
        active = [i for i in active if bufs[i].end >= s]
        live[s] = sorted(active)
    totals = {s: sum(bufs[i].size for i in live[s]) for s in steps}
    order: list[int] = []
    seen: set[int] = set()
    for s in sorted(steps, key=lambda s: (-totals[s], s)):
        for i in sorted(live[s], key=lambda i: (-bufs[i].size, i)):
            if i not in seen:
                seen.add(i)
                order.append(i)
    return order


def _decode(bufs: list[Buffer], near: list[list[tuple[int, int, int]]], order: list[int], best_fit: bool,
            align: int) -> tuple[tuple[int, ...], int]:
    offsets: list[int | None] = [None] * len(bufs)
    for i in order:
        forbidden = sorted((o + x, o + y) for j, x, y in near[i] for o in [offsets[j]] if o is not None)
        offsets[i] = _fit(forbidden, best_fit, align)
    final = tuple(int(o or 0) for o in offsets)
    return final, max((o + b.size for o, b in zip(final, bufs)), default=0)


def _fit(forbidden: list[tuple[int, int]], best_fit: bool, align: int) -> int:
    """The lowest (first fit) or tightest (best fit: the smallest gap between placed buffers that holds it) aligned
    offset, at least 0, in none of the sorted open intervals `forbidden`."""
    gaps: list[tuple[int, int]] = []
    cursor = 0
    for x, y in forbidden:
        if x >= cursor:
            if not best_fit:
                return cursor
            gaps.append((x - cursor, cursor))
        cursor = max(cursor, round_up(y, align))
    if gaps:
        return min(gaps)[1]
    return cursor


def _hill_climb(bufs: list[Buffer], near: list[list[tuple[int, int, int]]], order: list[int], best_fit: bool, align: int,
                bound: int, start: Placement) -> Placement:
    rng = np.random.default_rng(0)
    best, current = start, list(order)
    for _ in range(HILL_CLIMB_STEPS if len(order) > 1 else 0):
        i, j = (int(v) for v in rng.choice(len(current), size=2, replace=False))
        trial = list(current)
        trial[i], trial[j] = trial[j], trial[i]
        offsets, size = _decode(bufs, near, trial, best_fit, align)
        if size <= best.size:
            current = trial
            if size < best.size:
                best = Placement("hill_climbing", offsets, size)
            if size <= bound:
                break
    return best
