"""The memory charts as SVG geometry, every step and buffer named on the chart itself.

Both charts run the schedule down the page, one row per step named by its
layer (the source model's name for it) and op, so names of any length have
room and nothing needs hovering to be read. The timeline: each row's bar is
the arena bytes live while that step runs, with its value; the arena size and
the lower bound are vertical lines. The buffer placement map, as memory
planners draw it turned on its side: arena offset across, one box per buffer
from the step that writes it to the last that reads it, named inside when the
name fits and otherwise in a column to its right, joined to it by a line.

Chart text is monospace, so its width is known here and no two labels
overlap; the page shows the SVG at this natural size and scrolls it sideways
on a narrow screen rather than shrinking its text. The template draws the
shapes; this module only places them, so the page needs no script.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.report.data import ModelReport, Step

ROW = 18  # a schedule step's row
CHAR = 6.7  # width of one character of the 11 px monospace chart text (0.6 em, and a little to spare)
TITLE_CHAR = 7.4  # ... of the 12 px titles
PAD = 8
TOP = 64  # the plot's top: the title, the axis title and the tick labels above it
PLOT_W = 480
SLOT = 14  # pitch of the names in the placement map's name column
NAME_CHARS = 40  # a longer name is cut (with "…") on the chart; the tables and tooltips keep it whole
TICKS = 4


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"
    tooltip: str = ""  # the whole text when `text` is cut


@dataclass(frozen=True)
class Frame:
    """What both charts share: title, axes with their units, one named row per step."""

    width: float
    height: float
    title: Text
    x_title: Text
    y_title: Text
    ticks: list[Text]  # the bytes axis along the top
    grid: list[float]  # x of each tick's line through the plot
    steps: list[Text]  # each row's step index ...
    names: list[Text]  # ... and its layer and op
    left: float
    right: float
    top: float
    bottom: float


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    peak: bool
    tooltip: str
    value: Text


@dataclass(frozen=True)
class Marker:
    """A vertical line through the plot at a byte count, named below it."""

    x: float
    label: Text


@dataclass(frozen=True)
class Timeline:
    frame: Frame
    bars: list[Bar]
    arena: Marker
    bound: Marker


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float
    hue: int
    tooltip: str
    label: Text
    leader: tuple[float, float, float, float] | None  # the line from the box to its name in the name column


@dataclass(frozen=True)
class Placement:
    frame: Frame
    boxes: list[Box]


def shorten(name: str, limit: int = NAME_CHARS) -> str:
    """`name`, or its start and end around a "…" in `limit` characters (a module path's leaf, a suffix stay)."""
    if len(name) <= limit:
        return name
    tail = (limit - 1) // 2
    return name[: limit - 1 - tail] + "…" + name[len(name) - tail:]


def _width(text: str) -> float:
    return len(text) * CHAR


def frame(model: ModelReport, title: str, axis: str, top_value: int, extra_right: float, extra_height: float) -> Frame:
    """The frame of a chart whose x axis runs from 0 to `top_value` bytes, with `extra_right` px of room to the
    right of the plot and `extra_height` px below its rows."""
    digits = len(str(max(len(model.steps) - 1, 0)))
    y_title = "step, layer (op)"
    whole = [f"{s.label} ({s.op})" for s in model.steps]
    names = [f"{shorten(s.label)} ({s.op})" for s in model.steps]
    left = PAD + max([_width(y_title)] + [(digits + 1) * CHAR + _width(n) for n in names]) + 2 * PAD
    right = left + PLOT_W
    bottom = TOP + ROW * len(model.steps)
    width = max(right + extra_right, PAD * 2 + len(title) * TITLE_CHAR)
    step_x = PAD + digits * CHAR

    def baseline(row: int) -> float:
        return TOP + row * ROW + 13

    values = [round(top_value * k / TICKS) for k in range(TICKS + 1)]
    xs = [round(left + PLOT_W * k / TICKS, 2) for k in range(TICKS + 1)]
    return Frame(
        width=round(width), height=round(bottom + extra_height), title=Text(PAD, 18, title),
        x_title=Text(round((left + right) / 2, 2), 38, axis, "middle"), y_title=Text(PAD, 56, y_title),
        ticks=[Text(x, 56, f"{v:,}", "middle") for x, v in zip(xs, values)], grid=xs,
        steps=[Text(step_x, baseline(s.index), str(s.index), "end") for s in model.steps],
        names=[Text(step_x + CHAR, baseline(s.index), n, tooltip=w if n != w else "") for s, n, w in zip(model.steps, names, whole)],
        left=left, right=right, top=TOP, bottom=bottom,
    )


def timeline(model: ModelReport) -> Timeline:
    """One bar per step, its bytes written after it; the x axis runs from 0 to the arena size (or the peak, if higher)."""
    top = max(model.arena_size, model.peak.live_bytes, 1)
    values = {s.index: f"{s.live_bytes:,} B" + (" peak" if s.index == model.peak.index else "") for s in model.steps}
    f = frame(model, f"Memory timeline of {model.name}: arena bytes in use at each step", "arena bytes in use (B)", top,
              PAD + 4 + max(map(_width, values.values()), default=0), 44)

    def x(value: int) -> float:
        return round(f.left + PLOT_W * value / top, 2)

    def bar(s: Step) -> Bar:
        end = x(s.live_bytes)
        return Bar(f.left, TOP + s.index * ROW + 3, round(end - f.left, 2), ROW - 6, s.index == model.peak.index,
                   f"step {s.index} {s.label} ({s.op}): {s.live_bytes:,} B live", Text(end + 4, TOP + s.index * ROW + 13, values[s.index]))

    def marker(value: int, name: str, y: float) -> Marker:
        text = f"{name} {value:,} B"
        at = x(value)
        return Marker(at, Text(at, y, text, "end" if at - _width(text) >= PAD else "start"))

    return Timeline(f, [bar(s) for s in model.steps], marker(model.arena_size, "arena size", f.bottom + 16),
                    marker(model.lower_bound, "lower bound", f.bottom + 32))


def placement(model: ModelReport) -> Placement:
    """One box per arena buffer: offsets across (0 to the arena size), its steps down; each named on the chart."""
    top = max(model.arena_size, 1)
    column = PAD + 24  # from the plot's right edge to the name column

    def x(offset: int) -> float:
        return round(PLOT_W * offset / top, 2)

    spans = [(x(b.offset), max(x(b.offset + b.nbytes) - x(b.offset), 1.0)) for b in model.buffers]
    labels = [shorten(b.label) for b in model.buffers]
    inside = [_width(label) + 6 <= w for label, (_, w) in zip(labels, spans)]
    outside = [label for label, fits in zip(labels, inside) if not fits]
    slots, used = {}, -1
    for k in sorted(range(len(labels)), key=lambda k: (model.buffers[k].first, model.buffers[k].offset)):
        if not inside[k]:  # a name that does not fit its box: the next free slot from its row down
            used = slots[k] = max(used + 1, (model.buffers[k].first * ROW) // SLOT)
    rows_bottom = TOP + ROW * len(model.steps)
    names_bottom = TOP + SLOT * (used + 1)
    f = frame(model, f"Buffer placement of {model.name}: where each arena buffer lives, step by step", "arena offset (B)",
              top, column + max(map(_width, outside), default=0) + PAD, max(names_bottom - rows_bottom, 0) + 12)
    name_x = f.right + column
    boxes = []
    for k, (b, name, (bx, bw), fits) in enumerate(zip(model.buffers, labels, spans, inside)):
        bx = round(f.left + bx, 2)
        row_y = TOP + b.first * ROW
        tooltip = f"{b.label}: tensor {b.name}, {b.nbytes:,} B at offset {b.offset:,}, steps {b.first} to {b.last}"
        if fits:
            label, leader = Text(bx + 3, row_y + 13, name), None
        else:
            y = TOP + slots[k] * SLOT
            label, leader = Text(name_x, y + 11, name), (round(bx + bw, 2), row_y + ROW / 2, name_x - 3, y + 7)
        boxes.append(Box(bx, row_y + 1, round(bw, 2), (b.last - b.first + 1) * ROW - 2, (k * 137) % 360, tooltip, label, leader))
    return Placement(f, boxes)
