"""The memory pictures as SVG geometry, in a fixed viewBox the page scales to its width.

The timeline: one bar per schedule step, the arena size and lower bound as
lines. The buffer placement map, as memory planners draw it: arena offset
up, schedule step across, one box per tensor from the step that writes it
to the last that reads it. The template draws the shapes; this module only
places them, so the page needs no script and no image file.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.report.data import ModelReport

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 70, 10, 24, 30


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    peak: bool
    tooltip: str


@dataclass(frozen=True)
class Timeline:
    width: int
    height: int
    bars: list[Bar]
    arena_y: float
    bound_y: float
    baseline_y: float
    left: float
    right: float
    ticks: list[tuple[float, str]]  # (y, label) on the bytes axis
    peak_label: str
    peak_x: float
    peak_y: float
    peak_anchor: str  # SVG text-anchor that keeps the label inside the plot


def timeline(model: ModelReport) -> Timeline:
    """Place `model`'s steps in the plot area; the y axis runs from 0 to the arena size (or the peak, if higher)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = max(model.arena_size, model.peak.live_bytes, 1)
    step_w = plot_w / max(len(model.steps), 1)

    def y(value: float) -> float:
        return round(TOP + plot_h * (1 - value / top), 2)

    peak = model.peak
    bars = [Bar(x=round(LEFT + s.index * step_w, 2), y=y(s.live_bytes), width=round(max(step_w - 1, 0.5), 2),
                height=round(plot_h * s.live_bytes / top, 2), peak=s.index == peak.index,
                tooltip=f"step {s.index} {s.node}: {s.live_bytes} B live")
            for s in model.steps]
    ticks = [(y(top * k / 4), f"{round(top * k / 4):,}") for k in range(5)]
    return Timeline(
        width=WIDTH, height=HEIGHT, bars=bars, arena_y=y(model.arena_size), bound_y=y(model.lower_bound),
        baseline_y=y(0), left=LEFT, right=WIDTH - RIGHT, ticks=ticks,
        peak_label=f"peak {peak.live_bytes:,} B at step {peak.index} ({peak.node})",
        peak_x=round(LEFT + (peak.index + 0.5) * step_w, 2), peak_y=y(peak.live_bytes),
        peak_anchor="end" if peak.index >= len(model.steps) / 2 else "start",
    )


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float
    hue: int
    tooltip: str


@dataclass(frozen=True)
class Placement:
    width: int
    height: int
    boxes: list[Box]
    left: float
    right: float
    baseline_y: float
    top_y: float
    ticks: list[tuple[float, str]]  # (y, label) on the offset axis


def placement(model: ModelReport) -> Placement:
    """One box per arena tensor: steps across, offsets up; the y axis runs from 0 to the arena size."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = max(model.arena_size, 1)
    step_w = plot_w / max(len(model.steps), 1)

    def y(offset: float) -> float:
        return round(TOP + plot_h * (1 - offset / top), 2)

    boxes = [Box(x=round(LEFT + b.first * step_w, 2), y=y(b.offset + b.nbytes),
                 width=round(max((b.last - b.first + 1) * step_w - 1, 0.5), 2),
                 height=round(max(plot_h * b.nbytes / top, 0.5), 2), hue=(k * 137) % 360,
                 tooltip=f"{b.name}: {b.nbytes:,} B at offset {b.offset:,}, steps {b.first} to {b.last}")
             for k, b in enumerate(model.buffers)]
    ticks = [(y(top * k / 4), f"{round(top * k / 4):,}") for k in range(5)]
    return Placement(width=WIDTH, height=HEIGHT, boxes=boxes, left=LEFT, right=WIDTH - RIGHT, baseline_y=y(0),
                     top_y=y(top), ticks=ticks)
