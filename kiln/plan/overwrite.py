"""Layers that write their output over their own input (TinyEngine's in-place depthwise, generalised).

A window or 1x1 layer whose input map dies at it is run in pieces, row bands
of its output (for a 1x1, runs of pixels in whole groups of four, the kernel's
fast-path group), each computed into a small tile buffer and copied into the
output map, which shares storage with the input map, `shift` bytes from it.
The shift is chosen so that every copy lands only on input bytes no later
piece reads: with the copy right after its piece and the pieces in map order,
the output sits at or before the input (a 3x3 stride-1 depthwise: one row
before; a 1x1 with as many or fewer output channels: on it), in reverse order
at or after it; with the copy one piece late (a tile buffer of two pieces,
TinyEngine's line buffer) a 3x3 stride-1 depthwise sits exactly on its input.
Each piece is the same kernel on a sub-window with its own parameters (as a
tiled run's tile), so nothing in the arithmetic changes; the cost is one copy
of the output and the calls' own overhead.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.ir.graph import DTYPES, Graph
from kiln.plan import tiling
from kiln.plan.buffers import Buffer, round_up

GRAINS = (1, 2, 4, 8)  # output rows per piece (or, for a 1x1, about as many pixels)
ONE_BY_ONE = "kiln_conv2d_1x1_s8"


@dataclass(frozen=True)
class Overwrite:
    """One layer run in pieces over its input, in execution order."""

    step: int
    params: tuple[tuple[int, ...], ...]  # the kernel's parameters per piece
    reads: tuple[tuple[int, int], ...]  # [lo, hi) bytes of the input map each piece reads
    writes: tuple[tuple[int, int], ...]  # [lo, hi) bytes of the output map each piece writes
    tile: int  # the largest piece's output bytes: the tile buffer
    scratch: int  # the kernel's scratch per call
    shift: int  # the output map's offset minus the input map's
    lag: int  # pieces computed before one is copied out (0: at once; 1: one later, the tile buffer holding two)

    @property
    def copied(self) -> int:
        return sum(hi - lo for lo, hi in self.writes)


def eligible(g: Graph, step: int) -> bool:
    """A batch-1 int8 window or 1x1 layer with one output and weights not decompressed into scratch."""
    n = g.nodes[step]
    if n.attrs.get("kernel") not in tiling.TILEABLE or "lz4_scratch" in n.attrs or len(n.outputs) != 1:
        return False
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    return all(len(t.shape) == 4 and t.shape[0] == 1 and DTYPES[t.dtype].itemsize == 1 for t in (x, y))


def pieces(g: Graph, step: int, grain: int, scratch_level: str, align: int) -> list[Overwrite]:
    """`step` cut into pieces of `grain` output rows, in map order and in reverse, each with the shift nearest
    zero that lets it run over its input; none when it cannot be cut in two."""
    n = g.nodes[step]
    x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
    x_row, y_row = x.shape[2] * x.shape[3], y.shape[2] * y.shape[3]
    names = list(n.attrs["param_names"])
    if n.attrs["kernel"] == ONE_BY_ONE:
        pixels, step_pixels = y.shape[1] * y.shape[2], grain * y.shape[2]
        if step_pixels >= 4:  # whole groups of four pixels: the kernel's fast path takes four at a time
            step_pixels -= step_pixels % 4
        ranges = [(p, min(p + step_pixels, pixels)) for p in range(0, pixels, step_pixels)]
        if len(ranges) < 2:
            return []
        scratch = int(n.attrs.get("scratch_bytes", 0))  # the 1x1 kernel's scratch does not depend on the pixels
        params = []
        for p0, p1 in ranges:
            values = dict(zip(names, (int(v) for v in n.attrs["params"])))
            values["pixels"] = p1 - p0
            if "scratch_bytes" in values:
                values["scratch_bytes"] = scratch
            params.append(tuple(values[k] for k in names))
        reads = [(p0 * x.shape[3], p1 * x.shape[3]) for p0, p1 in ranges]
        writes = [(p0 * y.shape[3], p1 * y.shape[3]) for p0, p1 in ranges]
        tile = step_pixels * y.shape[3]
    else:
        parts = -(-y.shape[1] // grain)
        rows, cols = tiling.axis_windows(g, step, step + 1, 0, parts), tiling.axis_windows(g, step, step + 1, 1, 1)
        if parts < 2 or rows is None or cols is None:
            return []
        t = tiling.Tiling(step, step + 1, rows, cols, scratch_level)
        whole = names.index("in_w")  # rows are read whole: the row stride is the map's, whatever the windows reach
        params = [tuple(x.shape[2] if k == whole else v for k, v in enumerate(tiling.tile_params(g, t, 0, (r, 0))))
                  for r in range(parts)]
        reads = [(w.lo * x_row, w.hi * x_row) for w in rows.windows[0]]
        writes = [(o0 * y_row, o1 * y_row) for o0, o1 in rows.outputs]
        tile, scratch = tiling.tile_bytes(g, t, 0), tiling.kernel_scratch(g, t, 0)
    found = []
    for lag in (0, 1):
        for order in (1, -1):
            r, w = reads[::order], writes[::order]
            found.append(Overwrite(step, tuple(params[::order]), tuple(r), tuple(w), tile, scratch,
                                   shift_for(r, w, align, lag, reverse=order < 0), lag))
    return found


def shift_for(reads: list[tuple[int, int]], writes: list[tuple[int, int]], align: int, lag: int, reverse: bool) -> int:
    """The shift nearest zero (a multiple of `align`) at which each piece's write (made once `lag` more pieces are
    computed; -1: while the piece itself still reads) misses what the pieces after those read: in map order
    every write below every later read, in reverse order above it."""
    n = len(writes)
    edge = [0] * (n + 1)  # edge[j]: the lowest (reverse: highest) byte read by pieces j and after
    edge[n] = 2**62 if not reverse else -(2**62)
    for j in range(n - 1, -1, -1):
        edge[j] = min(edge[j + 1], reads[j][0]) if not reverse else max(edge[j + 1], reads[j][1])
    if not reverse:
        most = min((edge[k + lag + 1] - writes[k][1] for k in range(n - lag - 1)), default=0)
        return min(0, most) // align * align
    least = max((edge[k + lag + 1] - writes[k][0] for k in range(n - lag - 1)), default=0)
    return round_up(max(0, least), align)


def join(bufs: list[Buffer], x: str, y: str, shift: int, start: int, end: int, align: int) -> list[Buffer] | None:
    """`bufs` with the buffers of map `x` (last read at step `end`) and map `y` (first written at step `start`) made
    one, `y` placed `shift` bytes from `x`; None when `x` lives on, either is outside the arena, or they would not
    overlap (two buffers place better)."""
    bx = next((b for b in bufs if not b.scratch and x in b.tensors), None)
    by = next((b for b in bufs if not b.scratch and y in b.tensors), None)
    if bx is None or by is None or bx is by or bx.memory != "arena" or by.memory != "arena":
        return None
    if bx.end != end or by.start != start:
        return None
    base_y = bx.shifts.get(x, 0) + shift - by.shifts.get(y, 0)
    if base_y >= bx.size or base_y + by.size <= 0:
        return None
    low = min(0, base_y)
    shifts = {t: bx.shifts.get(t, 0) - low for t in bx.tensors}
    shifts.update({t: base_y + by.shifts.get(t, 0) - low for t in by.tensors})
    size = round_up(max(bx.size, base_y + by.size) - low, align)
    parts = tuple((s, e, lo - low, hi - low) for s, e, lo, hi in bx.spans())
    parts += tuple((s, e, base_y + lo - low, base_y + hi - low) for s, e, lo, hi in by.spans())
    joined = Buffer(bx.tensors + by.tensors, size, bx.start, by.end, "arena", shifts=shifts, parts=parts)
    return [joined if b is bx else b for b in bufs if b is not by]


def merge(bufs: list[Buffer], g: Graph, o: Overwrite, align: int) -> list[Buffer] | None:
    """`bufs` with the layer's input and output buffers made one (`join`) and the step's kernel scratch resized
    (the tile buffer is the caller's to add)."""
    node = g.nodes[o.step]
    joined = join(bufs, node.inputs[0], node.outputs[0], o.shift, o.step, o.step, align)
    if joined is None:
        return None
    label = f"{node.name}#scratch"
    return [Buffer(b.tensors, round_up(o.scratch, align), b.start, b.end, b.memory, scratch=True)
            if b.scratch and b.start == o.step and b.tensors[0] == label else b for b in joined]


def tile_buffer(g: Graph, o: Overwrite, align: int) -> Buffer:
    return Buffer([f"{g.nodes[o.step].name}#inplace"], (o.lag + 1) * round_up(o.tile, align), o.step, o.step, scratch=True)


def best_merge(bufs: list[Buffer], g: Graph, found: list[Overwrite], align: int) -> tuple[list[Buffer], Overwrite] | None:
    """Of the layer's orders and lags, the one whose joined input and output buffer is smallest (it lives on),
    then whose tile buffer is (then map order)."""
    merged = [(m, o) for o in found for m in [merge(bufs, g, o, align)] if m is not None]
    if not merged:
        return None
    joined = [next(b for b in m if g.nodes[o.step].outputs[0] in b.tensors).size for m, o in merged]
    return merged[min(range(len(merged)), key=lambda k: (joined[k], merged[k][1].lag, k))]


def annotate(g: Graph, o: Overwrite, tile_offset: int, copy_fields: tuple[str, ...], align: int) -> None:
    """The node's per-piece calls, as a one-layer tiled run's: parameters, input deltas, the slot of the tile
    buffer each piece is computed into, the copy after each piece (of the piece `lag` before) and after the loop."""
    node = g.nodes[o.step]
    vectors: list[list[int]] = []
    index = []
    for v in o.params:
        if list(v) not in vectors:
            vectors.append(list(v))
        index.append(vectors.index(list(v)))
    node.attrs["tile_params"] = [x for v in vectors for x in v]
    node.attrs["tile_index"] = index
    node.attrs["tile_in"] = [lo for lo, _ in o.reads]
    slot, n = round_up(o.tile, align), len(o.params)
    node.attrs["tile_out"] = [k % (o.lag + 1) * slot for k in range(n)]

    def copy(k: int) -> list[int]:
        lo, hi = o.writes[k]
        fields = dict(elem_size=1, outer=1, inner=hi - lo, in_stride=hi - lo, in_offset=k % (o.lag + 1) * slot,
                      out_stride=hi - lo, out_offset=lo)
        return [fields[f] for f in copy_fields]

    nothing = [0 if f != "elem_size" else 1 for f in copy_fields]  # outer = 0: no copy yet
    node.attrs["tile_scatter"] = [v for k in range(n) for v in (copy(k - o.lag) if k >= o.lag else nothing)]
    if o.lag:
        node.attrs["tile_scatter_last"] = [v for k in range(n - o.lag, n) for v in copy(k)]
    node.attrs["tile_scatter_from"] = tile_offset
    node.attrs["tile_scatter_bytes"] = (o.lag + 1) * slot
    node.attrs["tile_copy_fields"] = list(copy_fields)
