"""Arena offsets: greedy by size (as TFLM and TVM do), first fit among live-overlapping buffers."""
from __future__ import annotations

from toolchain.plan.buffers import Buffer


def place(bufs: list[Buffer], align: int) -> int:
    """Assign offsets to `bufs` in place; returns the arena size."""
    placed: list[Buffer] = []
    for b in sorted(bufs, key=lambda b: (-b.size, b.start, b.tensors[0])):
        b.offset = _first_fit(b, [p for p in placed if p.overlaps(b)], align)
        placed.append(b)
    return max((b.offset + b.size for b in bufs), default=0)


def _first_fit(b: Buffer, live: list[Buffer], align: int) -> int:
    offset = 0
    for other in sorted(live, key=lambda o: o.offset):
        if offset + b.size <= other.offset:
            break
        offset = max(offset, -(-(other.offset + other.size) // align) * align)
    return offset
