"""`kiln build-report`: one self-contained HTML page describing every model built under a build root.

Per model: the layer table (each layer by its name in the source model and
Kiln's node name, op, kernel symbol, shapes, arena offset and bytes, MACs,
SQNR of the int8 output against float, Cortex-M4 instructions when a
Cortex-M4 image of the model exists), the arena occupancy over the schedule
and the buffer placement map as inline SVG charts (`kiln.report.plot`: titled,
axes in bytes, every step and buffer named on the chart), and the size
breakdown of the model's firmware image, or of its compiled object alone,
which the page says. SQNR is measured on every calibration sample the build
keeps, as `kiln report` does by default, so the two give the same figures.
Rows that miss a floor (`kiln.report.data`) are highlighted. The page has no
script, no external file and no timestamp: the same build gives the same
bytes. Every name taken from a model goes through jinja2's autoescaping.
"""
from __future__ import annotations

from pathlib import Path

import jinja2

from kiln import __version__
from kiln.errors import KilnError
from kiln.report.data import LAYER_SQNR_FLOOR_DB, ModelReport, gather, m4_roots
from kiln.report.plot import placement, timeline

TEMPLATES = Path(__file__).resolve().parent / "templates"


def built_models(root: Path) -> list[Path]:
    """The model folders under `root` that hold a planned graph, sorted by name."""
    builds = sorted(p.parent for p in root.glob("*/planned.kir"))
    if not builds:
        raise KilnError(f"{root}: no built models (no folder in it holds a planned.kir)")
    return builds


def render(title: str, models: list[ModelReport]) -> str:
    """The page for `models` (autoescaped: names come from model files)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return env.get_template("report.html.j2").render(
        title=title, version=__version__, floor=LAYER_SQNR_FLOOR_DB,
        models=[(m, timeline(m), placement(m)) for m in models])


def build_report(root: Path, samples: int | None = None, cortex_m4: list[Path] | None = None) -> str:
    """The HTML page for the models built under `root`, each measured on up to `samples` of its kept samples (all
    of them by default, as `kiln report`), with per-layer instructions from their images in the Cortex-M4 build
    roots `cortex_m4` (by default those found near `root`: `kiln.report.data.m4_roots`)."""
    roots = m4_roots(root) if cortex_m4 is None else cortex_m4
    reports = [gather(b, samples, roots) for b in built_models(root)]
    return render(f"Kiln build report: {root.as_posix()}", reports)
