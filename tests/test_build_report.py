"""`scons report` / `kiln build-report`: one self-contained HTML page with every model and every layer.

The page built by SCons (with a Cortex-M4 build beside the host one) is
parsed and checked against the planned graphs (every model, every layer in
schedule order, one timeline bar per step with the peak marked, one
placement box per arena tensor and no two boxes sharing bytes and steps,
per-layer Cortex-M4 instructions, the size table), rendered by headless
Chromium (which `scripts/setup.sh` installs) at a desktop and a phone width,
and rebuilt only when a model's artifacts change. Names from model files are
HTML-escaped; rows below a floor are marked.
"""
from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import scons
from kiln.ir import load
from kiln.report import render
from kiln.report.data import LAYER_SQNR_FLOOR_DB, Buffer, Layer, ModelReport, SizeRow, Step, buffers, timeline

MODELS = ("tiny_cnn", "tiny_resnet")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"]


class Page(HTMLParser):
    """The parts of the report a reader relies on, collected while parsing (and checking that tags nest)."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source", "line", "circle", "rect"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.models: list[str] = []
        self.layers: dict[str, list[str]] = {}
        self.bars: dict[str, list[bool]] = {}
        self.boxes: dict[str, list[str]] = {}
        self.m4: dict[str, list[str]] = {}
        self.failing: list[str] = []  # data-node of layer rows, or "model" for summary rows, marked below a floor
        self.svg_widths: list[str | None] = []
        self.in_m4 = False
        self.svgs = 0
        self.size_tables = 0
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag in ("script", "iframe", "object", "embed") or any(
                v and k in ("src", "href") and not v.startswith("#") for k, v in attrs):
            self.external.append(tag)
        if tag == "section" and "model" in (a.get("class") or ""):
            self.models.append(a["data-model"])
            self.layers[a["data-model"]], self.bars[a["data-model"]] = [], []
            self.boxes[a["data-model"]], self.m4[a["data-model"]] = [], []
        elif tag == "tr" and (a.get("class") or "").startswith("layer"):
            self.layers[self.models[-1]].append(a["data-node"])
            if "fail" in a["class"]:
                self.failing.append(a["data-node"])
        elif tag == "tr" and "model-row fail" == a.get("class"):
            self.failing.append("model")
        elif tag == "td" and a.get("class") == "n m4":
            self.m4[self.models[-1]].append("")
            self.in_m4 = True
        elif tag == "svg":
            self.svgs += 1
            self.svg_widths.append(a.get("width"))
        elif tag == "rect" and a.get("class") == "buffer":
            self.boxes[self.models[-1]].append(a["x"])
        elif tag == "rect" and (a.get("class") or "").startswith("bar"):
            self.bars[self.models[-1]].append("peak" in a["class"])
        elif tag == "table" and a.get("class") == "sizes":
            self.size_tables += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.in_m4:
            self.m4[self.models[-1]][-1] += data

    def handle_endtag(self, tag: str) -> None:
        self.in_m4 = self.in_m4 and tag != "td"
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    assert page.stack == [], page.stack
    return page


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from conftest import copy_repo

    repo = copy_repo(tmp_path_factory.mktemp("report") / "repo", MODELS)
    _, log = scons(repo, "-j2", "target=host,cortex-m4", "report")
    assert "kiln build-report build/host/report.html" in log and "kiln build-report build/cortex-m4/report.html" in log, log
    return repo


def test_report_has_every_model_and_layer_and_the_timeline(built):
    page = parse((built / "build/host/report.html").read_text())
    assert page.models == sorted(MODELS)
    assert page.external == []  # self-contained: no script, no external file
    assert page.svgs == 2 * len(MODELS) and page.size_tables == len(MODELS)
    assert set(page.svg_widths) == {None}  # sized by the stylesheet to the window's width, not fixed
    for model in MODELS:
        planned = load(built / "build/host" / model / "planned.kir")
        assert page.layers[model] == [n.name for n in planned.nodes]
        bars = page.bars[model]
        assert len(bars) == len(planned.nodes) and sum(bars) == 1  # one bar per step, exactly one peak
        assert len(page.boxes[model]) == len(buffers(planned)) > 0
        # Per-layer Cortex-M4 instructions from the cortex-m4 build: a count for every kernel layer, none for an alias.
        counts = page.m4[model]
        assert len(counts) == len(planned.nodes)
        assert [bool(c.strip()) for c in counts] == [bool(n.attrs.get("kernel")) for n in planned.nodes]
        assert all(int(c.replace(",", "")) > 0 for c in counts if c.strip())


@pytest.mark.parametrize("model", MODELS)
def test_placement_boxes_never_share_bytes_and_steps(built, model):
    """The map shows the plan: two tensors (or a step's scratch) that overlap in the arena are never live at the
    same step (aliases and in-place results, which share an input's bytes on purpose, excepted)."""
    planned = load(built / "build/host" / model / "planned.kir")
    placed = buffers(planned)
    offset = {name: t.attrs.get("offset") for name, t in planned.tensors.items()}
    shared = {(i, n.outputs[0]) for n in planned.nodes for i in n.inputs
              if i and offset.get(i) is not None and offset[i] == offset.get(n.outputs[0])}
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            overlap = a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes and a.first <= b.last and b.first <= a.last
            assert not overlap or (a.name, b.name) in shared or (b.name, a.name) in shared, (a, b)


def test_report_renders_in_headless_chromium(built, tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "scripts/setup.sh installs Debian's chromium"
    page = (built / "build/host/report.html").as_uri()
    flags = CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = parse(dom.stdout)
    assert rendered.models == sorted(MODELS) and rendered.svgs == 2 * len(MODELS)
    for size in ("1000,800", "420,900"):  # a desktop and a phone
        shot = subprocess.run([chromium, *flags, f"--screenshot={tmp_path / 'page.png'}", f"--window-size={size}", page],
                              capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and (tmp_path / "page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_is_rebuilt_only_when_artifacts_change(built):
    report = built / "build/host/report.html"
    before = report.read_bytes()
    _, log = scons(built, "target=host,cortex-m4", "report")
    assert "kiln build-report" not in log, log
    model_py = built / "models/tiny_cnn/model.py"
    model_py.write_text(model_py.read_text() + "\n_UNUSED = 1  # code: import reruns, its graph stays byte-identical\n")
    actions, log = scons(built, "target=host,cortex-m4", "report")
    assert actions == [("import", "tiny_cnn")] and "kiln build-report" not in log, log  # once for every target
    toml = built / "models/tiny_cnn/model.toml"
    toml.write_text(toml.read_text().replace("alignment = 16", "alignment = 32"))
    _, log = scons(built, "target=host,cortex-m4", "report")
    assert "kiln build-report build/host/report.html" in log, log
    assert report.read_bytes() != before


def test_names_from_model_files_are_escaped():
    name = '<script>alert("x")</script>&'
    steps = [Step(0, name, 16), Step(1, "b", 32)]
    layer = Layer(index=0, name=name, op="conv2d", kernel="kiln_conv2d_s8", inputs=["int8[1, 4]"], output="int8[1, 4]",
                  memory="arena", offset=0, nbytes=16, macs=64, compared=True, sqnr_db=30.0)
    model = ModelReport(name=f"m{name}", layers=[layer], steps=steps, arena_size=32, lower_bound=32, macs=64,
                        output_sqnr_db=None, top1_agreement=1.0, inputs=name, size_source=name, sizes=[SizeRow(name, 1)])
    html = render(name, [model])
    assert "<script" not in html and name not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;" in html
    assert parse(html).models == [f"m{name}"]  # the parser unescapes the attribute back


@pytest.mark.parametrize("model", MODELS)
def test_timeline_peak_is_the_planners_lower_bound(built, model):
    """Rebuilt from offsets and lifetimes alone, the busiest step holds exactly the bytes the planner's bound says
    (these models' tensor sizes are multiples of the alignment, so no padding separates the two)."""
    planned = load(built / "build/host" / model / "planned.kir")
    steps = timeline(planned)
    assert [s.node for s in steps] == [n.name for n in planned.nodes]
    assert max(s.live_bytes for s in steps) == planned.meta["lower_bound"] <= planned.meta["arena_size"]


def test_rows_below_a_floor_are_marked():
    steps = [Step(0, "a", 16), Step(1, "b", 16)]
    layers = [Layer(index=i, name=n, op="conv2d", kernel="kiln_conv2d_s8", inputs=[], output="int8[1, 4]", memory="arena",
                    offset=0, nbytes=16, macs=64, compared=True, sqnr_db=db)
              for i, (n, db) in enumerate([("good", LAYER_SQNR_FLOOR_DB + 1), ("bad", LAYER_SQNR_FLOOR_DB - 1)])]
    fine = ModelReport(name="fine", layers=layers[:1], steps=steps, arena_size=16, lower_bound=16, macs=64,
                       output_sqnr_db=40.0, top1_agreement=1.0, inputs="x", size_source="x", buffers=[Buffer("a", 0, 1, 0, 16)])
    poor = ModelReport(name="poor", layers=layers[1:], steps=steps, arena_size=32, lower_bound=16, macs=64,
                       output_sqnr_db=10.0, top1_agreement=0.5, inputs="x", size_source="x")
    assert fine.failed_floors == [] and len(poor.failed_floors) == 2  # output SQNR, arena against its bound
    page = parse(render("floors", [fine, poor]))
    assert page.failing == ["model", "bad"]
