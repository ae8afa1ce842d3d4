"""Spatial tiling of a run of layers (patch-based inference, as MCUNetV2).

A run is a chain of window kernels (conv, depthwise, 1x1 conv, max/avg pool,
int8, batch 1) where each layer's output feeds only the next. The last
layer's output map is split into a grid of R x C tiles; each tile is computed
through the whole run from the input patch its receptive field covers, so
only a tile of every intermediate map is ever live, and the halos that
neighbouring tiles share are recomputed. Rows and columns are independent, so
the geometry is computed per axis: for each layer and tile row (column), the
window of the layer's input it reads, clipped to the map, and the padding the
clipping leaves before it (`pad`); the kernel treats what lies beyond the
window as padding, which for a clipped window is exactly the map's padding.
Tiling changes which output elements a call computes, never how.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from kiln.ir.graph import DTYPES, Graph, Node
from kiln.target.macs import node_macs

WINDOW_KERNELS = {"kiln_conv2d_s8", "kiln_depthwise_conv2d_s8", "kiln_max_pool2d_s8", "kiln_avg_pool2d_s8"}
TILEABLE = WINDOW_KERNELS | {"kiln_conv2d_1x1_s8"}
MAX_RUN = 16  # layers in a tiled run
MAX_SPLITS = 12  # tiles along one axis


@dataclass(frozen=True)
class Window:
    lo: int  # first input row (column) read, inside the map
    hi: int  # one past the last
    pad: int  # padded rows (columns) before lo that the kernel's windows start in


@dataclass(frozen=True)
class Axis:
    """One axis of a grid: per layer, per tile along the axis, the input window; and the run's output ranges."""

    windows: tuple[tuple[Window, ...], ...]  # [layer][tile]
    outputs: tuple[tuple[int, int], ...]  # [tile] output range of the last layer

    @cached_property
    def extents(self) -> tuple[tuple[int, int], ...]:
        """Per layer: (largest, total) output extent over the tiles."""
        found = []
        for layer in range(len(self.windows)):
            sizes = [hi - lo for lo, hi in (self.out_range(layer, t) for t in range(len(self.outputs)))]
            found.append((max(sizes), sum(sizes)))
        return tuple(found)

    def out_range(self, layer: int, tile: int) -> tuple[int, int]:
        if layer + 1 < len(self.windows):
            w = self.windows[layer + 1][tile]
            return w.lo, w.hi
        return self.outputs[tile]


@dataclass(frozen=True)
class Tiling:
    start: int  # first step of the run
    stop: int  # one past its last step
    rows: Axis
    cols: Axis
    scratch: str = "full"  # the run's kernel scratch: "full" as given, "strip" one depthwise window tall, "none"
    shift: int | None = None  # the run's output map written over its input map, this many bytes from it (None: apart)

    @property
    def grid(self) -> tuple[int, int]:
        return len(self.rows.outputs), len(self.cols.outputs)

    def tiles(self) -> list[tuple[int, int]]:
        """(tile row, tile column) in execution order: row-major."""
        return [(r, c) for r in range(self.grid[0]) for c in range(self.grid[1])]


def _param(node: Node, name: str, default: int) -> int:
    names = list(node.attrs["param_names"])
    return int(node.attrs["params"][names.index(name)]) if name in names else default


def geometry(node: Node, axis: int) -> tuple[int, int, int, int]:
    """(kernel size, stride, dilation, leading pad) of `node` along axis 0 (rows) or 1 (columns)."""
    if node.attrs["kernel"] == "kiln_conv2d_1x1_s8":
        return 1, 1, 1, 0
    k, s, d, p = (("k_h", "stride_h", "dil_h", "pad_top"), ("k_w", "stride_w", "dil_w", "pad_left"))[axis]
    return _param(node, k, 1), _param(node, s, 1), _param(node, d, 1), _param(node, p, 0)


def chain(g: Graph, start: int) -> int:
    """One past the last step of the longest run of tileable layers starting at step `start`."""
    consumers = g.consumers()
    stop = start
    while stop < len(g.nodes) and stop - start < MAX_RUN:
        n = g.nodes[stop]
        x, y = g.tensors[n.inputs[0]], g.tensors[n.outputs[0]]
        if (n.attrs.get("kernel") not in TILEABLE or "lz4_scratch" in n.attrs or len(n.outputs) != 1
                or len(x.shape) != 4 or x.shape[0] != 1 or DTYPES[x.dtype].itemsize != 1):
            break
        if stop > start and n.inputs[0] != g.nodes[stop - 1].outputs[0]:
            break
        stop += 1
        if len(consumers.get(y.name, [])) != 1 or y.name in g.outputs:
            break  # the map is read elsewhere: it must exist whole, so the run ends with it
    return stop


def split(size: int, parts: int) -> list[tuple[int, int]]:
    """`parts` ranges covering [0, size), sizes differing by at most one (so a grid need not divide the map)."""
    bounds = [size * k // parts for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(parts)]


def axis_windows(g: Graph, start: int, stop: int, axis: int, parts: int) -> Axis | None:
    """Receptive-field windows along one axis for `parts` tiles, or None when a tile reads only padding."""
    last = g.tensors[g.nodes[stop - 1].outputs[0]]
    outputs = tuple(split(last.shape[1 + axis], parts))
    ranges = list(outputs)
    windows: list[tuple[Window, ...]] = []
    for step in range(stop - 1, start - 1, -1):
        node = g.nodes[step]
        k, s, d, p = geometry(node, axis)
        size = g.tensors[node.inputs[0]].shape[1 + axis]
        layer = []
        for o0, o1 in ranges:
            need_lo, need_hi = o0 * s - p, (o1 - 1) * s - p + (k - 1) * d + 1
            lo, hi = max(0, need_lo), min(size, need_hi)
            if lo >= hi:
                return None
            layer.append(Window(lo, hi, lo - need_lo))
        windows.append(tuple(layer))
        ranges = [(w.lo, w.hi) for w in layer]
    return Axis(tuple(reversed(windows)), outputs)


def candidates(g: Graph, start: int, stop: int) -> list[Tiling]:
    """Every grid up to MAX_SPLITS x MAX_SPLITS over every run [start, end), end <= stop (the 1x1 grid left out)."""
    found = []
    for end in range(start + 1, stop + 1):
        last = g.tensors[g.nodes[end - 1].outputs[0]]
        rows = [axis_windows(g, start, end, 0, r) for r in range(1, min(last.shape[1], MAX_SPLITS) + 1)]
        cols = [axis_windows(g, start, end, 1, c) for c in range(1, min(last.shape[2], MAX_SPLITS) + 1)]
        for r in rows:
            for c in cols:
                if r is not None and c is not None and len(r.outputs) * len(c.outputs) > 1:
                    found.append(Tiling(start, end, r, c))
    return found


def _extent(a: Axis, layer: int) -> tuple[int, int]:
    """(largest, total) output extent over the tiles of `a` at `layer`."""
    return a.extents[layer]


def tile_bytes(g: Graph, t: Tiling, layer: int) -> int:
    """Bytes of the largest output tile of the run's `layer` (0-based within the run)."""
    channels = g.tensors[g.nodes[t.start + layer].outputs[0]].shape[3]
    return _extent(t.rows, layer)[0] * _extent(t.cols, layer)[0] * channels


def layer_macs(g: Graph, t: Tiling, layer: int, untiled: int | None = None) -> int:
    """Multiply-accumulates of one layer of the tiled run over all its tiles, halos recomputed (`untiled`: the
    layer's own MACs, when known)."""
    node = g.nodes[t.start + layer]
    y = g.tensors[node.outputs[0]]
    whole = node_macs(g, node) if untiled is None else untiled
    return whole // (y.shape[1] * y.shape[2]) * _extent(t.rows, layer)[1] * _extent(t.cols, layer)[1]


def macs(g: Graph, t: Tiling, untiled: dict[str, int] | None = None) -> int:
    """Multiply-accumulates of the tiled run, halos recomputed (`untiled`: each node's own MACs, when known)."""
    return sum(layer_macs(g, t, k, (untiled or {}).get(g.nodes[t.start + k].name)) for k in range(t.stop - t.start))


def run_macs(g: Graph, start: int, stop: int) -> int:
    return sum(node_macs(g, g.nodes[s]) for s in range(start, stop))


def needs_gather(g: Graph, t: Tiling) -> bool:
    """The first layer's patches are not whole rows of its input: they are copied into a patch buffer."""
    x = g.nodes[t.start].inputs[0]
    return any((w.lo, w.hi) != (0, g.tensors[x].shape[2]) for w in t.cols.windows[0])


def needs_scatter(g: Graph, t: Tiling) -> bool:
    """The output tiles are not whole rows of the run's output: each is computed apart, then copied in."""
    y = g.nodes[t.stop - 1].outputs[0]
    return any(o != (0, g.tensors[y].shape[2]) for o in t.cols.outputs)


def patch_bytes(g: Graph, t: Tiling) -> int:
    x = g.tensors[g.nodes[t.start].inputs[0]]
    rows = max(w.hi - w.lo for w in t.rows.windows[0])
    cols = max(w.hi - w.lo for w in t.cols.windows[0])
    return rows * cols * x.shape[3]


def kernel_scratch(g: Graph, t: Tiling, layer: int) -> int:
    """A tiled call's kernel scratch at the run's level: the depthwise strip shrinks with the tile; the others'
    do not depend on it."""
    node = g.nodes[t.start + layer]
    given = int(node.attrs.get("scratch_bytes", 0))
    if t.scratch == "none" or node.attrs["kernel"] != "kiln_depthwise_conv2d_s8" or not given:
        return 0 if t.scratch == "none" else given
    geo = {f: _param(node, f, 1) for f in ("k_h", "k_w", "stride_h", "stride_w", "dil_h", "dil_w")}
    geo["out_h"], geo["out_w"] = _extent(t.rows, layer)[0], _extent(t.cols, layer)[0]
    return depthwise_scratch(geo, min(given, one_window(geo)) if t.scratch == "strip" else given)


def depthwise_scratch(geo: dict[str, int], limit: int) -> int:
    """kiln_depthwise_conv2d_s8's scratch under `limit` (the formula of its header; the lower stage's
    `kiln.lower.specialize.depthwise_scratch`, which tests hold this to): a strip of rows as tall as fits."""
    cols = (geo["out_w"] - 1) * geo["stride_w"] + (geo["k_w"] - 1) * geo["dil_w"] + 1
    span = (geo["k_h"] - 1) * geo["dil_h"] + 1
    total = (geo["out_h"] - 1) * geo["stride_h"] + span
    fixed = 4 * (2 * geo["k_h"] * geo["k_w"] + 24) + 3
    size = fixed + 8 * cols * min(total, max(span, (limit - fixed) // (8 * cols)))
    return size if size <= limit else 0


def one_window(geo: dict[str, int]) -> int:
    """kiln_depthwise_conv2d_s8's scratch with a strip one window tall: the least that takes its fast path."""
    cols = (geo["out_w"] - 1) * geo["stride_w"] + (geo["k_w"] - 1) * geo["dil_w"] + 1
    return 4 * (2 * geo["k_h"] * geo["k_w"] + 24) + 3 + 8 * cols * ((geo["k_h"] - 1) * geo["dil_h"] + 1)


def tile_params(g: Graph, t: Tiling, layer: int, tile: tuple[int, int]) -> list[int]:
    """The call's parameters for one tile: input and output extents, the clipped window's leading pads."""
    node = g.nodes[t.start + layer]
    values = dict(zip(node.attrs["param_names"], (int(v) for v in node.attrs["params"])))
    r, c = tile
    wr, wc = t.rows.windows[layer][r], t.cols.windows[layer][c]
    (o0, o1), (p0, p1) = t.rows.out_range(layer, r), t.cols.out_range(layer, c)
    if node.attrs["kernel"] == "kiln_conv2d_1x1_s8":
        values["pixels"] = (o1 - o0) * (p1 - p0)
    else:
        values.update(in_h=wr.hi - wr.lo, in_w=wc.hi - wc.lo, out_h=o1 - o0, out_w=p1 - p0, pad_top=wr.pad, pad_left=wc.pad)
    if "scratch_bytes" in values:
        values["scratch_bytes"] = kernel_scratch(g, t, layer)
    return [values[name] for name in node.attrs["param_names"]]


def over_input_shift(g: Graph, t: Tiling, align: int) -> int:
    """The offset from the run's input map at which its output map can lie over it (`kiln.plan.overwrite`): each
    tile's output lands only on input bytes no later tile reads. A tile's input is read (or copied into the
    patch) before its last layer writes, except in a one-layer run writing in place, where both happen in
    one call. Per tile, the bytes read and written are taken as the hull from the first to the last."""
    from kiln.plan.overwrite import shift_for

    x, y = g.tensors[g.nodes[t.start].inputs[0]], g.tensors[g.nodes[t.stop - 1].outputs[0]]
    x_row, y_row = x.shape[2] * x.shape[3], y.shape[2] * y.shape[3]
    reads, writes = [], []
    for r, c in t.tiles():
        wr, wc = t.rows.windows[0][r], t.cols.windows[0][c]
        (o0, o1), (p0, p1) = t.rows.outputs[r], t.cols.outputs[c]
        reads.append((wr.lo * x_row + wc.lo * x.shape[3], (wr.hi - 1) * x_row + wc.hi * x.shape[3]))
        writes.append((o0 * y_row + p0 * y.shape[3], (o1 - 1) * y_row + p1 * y.shape[3]))
    same_call = t.stop - t.start == 1 and not needs_scatter(g, t)
    return shift_for(reads, writes, align, -1 if same_call else 0, reverse=False)
