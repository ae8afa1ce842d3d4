"""`scons report` / `kiln build-report`: one self-contained HTML page with every model and every layer.

The page built by SCons (with a Cortex-M4 build beside the host one) is
parsed and checked against the planned graphs (every model, every layer in
schedule order, one timeline bar per step with the peak marked, one
placement box per arena tensor and no two boxes sharing bytes and steps,
per-layer Cortex-M4 instructions, the size table of the firmware image), and
rebuilt only when a model's artifacts change. Headless Chromium (which
`scripts/setup.sh` installs) renders it over the DevTools protocol
(`chromium.py`), at a desktop and a phone width: no console message, no
request but the page itself, and every chart titled, its axes named with
their units, every step and buffer named on the chart where a reader sees it
(no two labels overlapping, none cut off, none smaller than 11 px). Names from
model files are HTML-escaped; rows below a floor are marked; a build with no
firmware image says so, and the page advises no command a build may lack.
"""
from __future__ import annotations

import platform
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chromium import Browser
from conftest import scons
from kiln.check import seeded_inputs
from kiln.ir import load
from kiln.names import c_text
from kiln.report import build_report, render
from kiln.report.data import LAYER_SQNR_FLOOR_DB, Buffer, Layer, ModelReport, SizeRow, Step, buffers, timeline
from kiln.report.plot import shorten
from kiln.runio import quantize_inputs
from kiln.target import qemu
from kiln.target.size import size_report

MODELS = ("tiny_cnn", "tiny_resnet")


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
    steps = [Step(0, name, 16, name, "conv2d"), Step(1, "b", 32, name, "add")]
    layer = Layer(index=0, name=name, label=name, op="conv2d", kernel="kiln_conv2d_s8", inputs=["int8[1, 4]"],
                  output="int8[1, 4]", memory="arena", offset=0, nbytes=16, macs=64, compared=True, sqnr_db=30.0)
    model = ModelReport(name=f"m{name}", layers=[layer], steps=steps, arena_size=32, lower_bound=32, macs=64,
                        output_sqnr_db=None, top1_agreement=1.0, inputs=name, size_source=name, sizes=[SizeRow(name, 1)],
                        buffers=[Buffer(name, 0, 1, 0, 16, name)])
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
    steps = [Step(0, "a", 16, "a", "conv2d"), Step(1, "b", 16, "b", "conv2d")]
    layers = [Layer(index=i, name=n, label=n, op="conv2d", kernel="kiln_conv2d_s8", inputs=[], output="int8[1, 4]",
                    memory="arena", offset=0, nbytes=16, macs=64, compared=True, sqnr_db=db)
              for i, (n, db) in enumerate([("good", LAYER_SQNR_FLOOR_DB + 1), ("bad", LAYER_SQNR_FLOOR_DB - 1)])]
    fine = ModelReport(name="fine", layers=layers[:1], steps=steps, arena_size=16, lower_bound=16, macs=64,
                       output_sqnr_db=40.0, top1_agreement=1.0, inputs="x", size_source="x", buffers=[Buffer("a", 0, 1, 0, 16, "a")])
    poor = ModelReport(name="poor", layers=layers[1:], steps=steps, arena_size=32, lower_bound=16, macs=64,
                       output_sqnr_db=10.0, top1_agreement=0.5, inputs="x", size_source="x")
    assert fine.failed_floors == [] and len(poor.failed_floors) == 2  # output SQNR, arena against its bound
    page = parse(render("floors", [fine, poor]))
    assert page.failing == ["model", "bad"]


def test_sizes_come_from_the_firmware_image(built):
    """Both pages size each model from its Cortex-M4 image (the host build root's too), as `kiln.target.size` reads it."""
    for root in ("host", "cortex-m4"):
        page = (built / "build" / root / "report.html").read_text()
        for model in MODELS:
            image = size_report(built / "build/cortex-m4" / model / f"{model}.elf")
            section = page[page.index(f'data-model="{model}"'):]
            assert f'<p class="size-source">From the cortex-m4 firmware image cortex-m4/{model}/{model}.elf.</p>' in section
            rows = dict(re.findall(r'<tr><td>([^<]*)</td><td class="n">([\d,]+)</td></tr>', section[:section.index("</table>")]))
            assert rows["flash (whole image)"] == f"{image.flash:,}" and rows["RAM (whole image)"] == f"{image.ram:,}"


def test_the_firmware_names_its_layers_as_the_source_model_does(built):
    """The Cortex-M4 image's per-layer lines (what the M4 column is read from) carry each layer's source name."""
    cortex = built / "build/cortex-m4/tiny_resnet"
    planned, quantized = load(cortex / "planned.kir"), load(cortex / "quantized.kir")
    sample = quantize_inputs(quantized, seeded_inputs(quantized, None, 1))
    layers = qemu.run_firmware(cortex / "tiny_resnet.elf", planned, sample, layers=True).layers
    assert [(lc.index, lc.name) for lc in layers] == [(i, c_text(f"{n.label} ({n.op})")) for i, n in enumerate(planned.nodes)
                                                      if n.attrs["kernel"]]
    assert "block2.0 (conv2d)" in [lc.name for lc in layers]


def test_a_host_only_build_says_so_and_advises_no_command(built, tmp_path):
    """With no firmware image anywhere, the sizes are the host object's and the page says so plainly; it names
    what is missing, never a command (an external repository's build has no `target=` option)."""
    for model in MODELS:
        shutil.copytree(built / "build/host" / model, tmp_path / "root" / model)
    page = build_report(tmp_path / "root")
    code = {"x86_64": "x86-64", "aarch64": "AArch64"}[platform.machine()]
    for model in MODELS:
        assert (f'<p class="size-source">No firmware image of this model was found, only its compiled object {model}.o '
                f'({code} code): the code and data below are that object&#39;s alone') in page
    assert page.count("Cortex-M4 instructions: none, no Cortex-M4 firmware image of this model was found.") == len(MODELS)
    assert "scons" not in page.lower() and "target=" not in page


# What the browser rendered, per model section and chart: every label with its box and font size, every bar and
# buffer box, every leader line's ends (in page coordinates, as the boxes are).
CHARTS_JS = """(() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const own = t => [...t.childNodes].filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.nodeValue).join('');
  const at = (svg, x, y) => { const p = svg.createSVGPoint(); p.x = x; p.y = y; const q = p.matrixTransform(svg.getScreenCTM());
                              return [q.x, q.y]; };
  return {
    page_width: document.documentElement.scrollWidth, window_width: window.innerWidth,
    layers: [...document.querySelectorAll('td.layer-name')].map(td => td.textContent),
    sections: [...document.querySelectorAll('section.model')].map(section => [...section.querySelectorAll('svg')].map(svg => ({
      kind: svg.getAttribute('class'), box: box(svg),
      title: (document.getElementById(svg.getAttribute('aria-labelledby')) || {textContent: ''}).textContent,
      texts: [...svg.querySelectorAll('text')].map(t => ({cls: t.getAttribute('class'), text: own(t), box: box(t),
                                                       size: parseFloat(getComputedStyle(t).fontSize), id: t.dataset.box})),
      shapes: [...svg.querySelectorAll('rect.bar, rect.buffer')].map(r => ({box: box(r), id: r.dataset.box})),
      leaders: [...svg.querySelectorAll('line.leader')].map(l => ({id: l.dataset.box,
        ends: [at(svg, l.x1.baseVal.value, l.y1.baseVal.value), at(svg, l.x2.baseVal.value, l.y2.baseVal.value)]})),
    }))),
  };
})()"""


def overlap(a: list[float], b: list[float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1


def inside(a: list[float], b: list[float], slack: float = 1) -> bool:
    return a[0] >= b[0] - slack and a[1] >= b[1] - slack and a[2] <= b[2] + slack and a[3] <= b[3] + slack


def check_chart(chart: dict, steps: list[str], buffers: list[str]) -> None:
    """A chart a reader can read: titled, both axes named (bytes with their unit), each step named beside its row
    and each buffer on its box or joined to it by a line, no label over another or outside the chart, none small."""
    texts = chart["texts"]
    of = lambda cls: [t for t in texts if t["cls"] == cls]  # noqa: E731
    what = f"{chart['kind']} {chart['title']!r}"
    assert chart["title"] and [t["text"] for t in of("chart-title")] == [chart["title"]], what
    assert len(of("axis-title x")) == 1 and of("axis-title x")[0]["text"].endswith("(B)"), what
    assert [t["text"] for t in of("axis-title y")] == ["step, layer (op)"], what
    assert len(of("tick")) >= 2 and all(re.fullmatch(r"[\d,]+", t["text"]) for t in of("tick")), what
    names = of("step-name")
    assert [t["text"] for t in names] == steps, what
    assert [t["text"] for t in of("step")] == [str(i) for i in range(len(steps))], what
    for a, b in ((t, u) for i, t in enumerate(texts) for u in texts[i + 1:]):
        assert not overlap(a["box"], b["box"]), (what, a, b)
    for t in texts:
        assert inside(t["box"], chart["box"]) and t["size"] >= 11 and t["box"][3] - t["box"][1] >= 10, (what, t)
    shapes = chart["shapes"]
    if chart["kind"] == "timeline":
        assert len(shapes) == len(steps) and len(of("value")) + len(of("value peak")) == len(steps), what
        assert len(of("value peak")) == 1 and len(of("marker")) == 2, what
        for bar, name in zip(shapes, names):  # each bar sits in its step's row, beside its name
            middle = (bar["box"][1] + bar["box"][3]) / 2
            assert name["box"][1] <= middle <= name["box"][3], (what, bar, name)
        return
    labels = {t["id"]: t for t in of("buffer-name")}
    leaders = {line["id"]: line["ends"] for line in chart["leaders"]}
    assert len(shapes) == len(buffers) and [labels[s["id"]]["text"] for s in shapes] == buffers, what
    for shape in shapes:
        label, rect = labels[shape["id"]], shape["box"]
        if inside(label["box"], rect):
            continue
        (x1, y1), (x2, y2) = leaders[shape["id"]]  # a name outside its box is joined to it by a line
        assert abs(x1 - rect[2]) <= 1 and rect[1] <= y1 <= rect[3], (what, shape, leaders[shape["id"]])
        assert 0 <= label["box"][0] - x2 <= 8 and label["box"][1] <= y2 <= label["box"][3], (what, label, leaders[shape["id"]])


def look(page: Path, profile: Path, width: int) -> tuple[dict, Browser]:
    """What Chromium rendered of `page` in a window `width` px wide, and what the page did meanwhile."""
    with Browser(profile) as browser:
        browser.open(page.as_uri(), width, 900)
        facts = browser.evaluate(CHARTS_JS)
    return facts, browser


def check_page(facts: dict, browser: Browser, page: Path) -> None:
    """Nothing said on the console, nothing thrown, nothing requested but the page, and no page-wide sideways
    scrolling (a chart wider than the window scrolls in its own box)."""
    assert browser.seen("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded") == []
    assert [r["request"]["url"] for r in browser.seen("Network.requestWillBeSent")] == [page.as_uri()]
    assert browser.seen("Network.loadingFailed") == []
    assert facts["page_width"] <= facts["window_width"]


@pytest.mark.parametrize("width", [1200, 420])  # a desktop and a phone
def test_every_chart_is_labelled_in_a_browser(built, tmp_path, width):
    page = built / "build/host/report.html"
    facts, browser = look(page, tmp_path / "profile", width)
    check_page(facts, browser, page)
    assert len(facts["sections"]) == len(MODELS)
    labels = []
    for model, charts in zip(sorted(MODELS), facts["sections"]):
        planned = load(built / "build/host" / model / "planned.kir")
        steps = [f"{shorten(n.label)} ({n.op})" for n in planned.nodes]
        assert [c["kind"] for c in charts] == ["timeline", "placement"]
        for chart in charts:
            check_chart(chart, steps, [shorten(b.label) for b in buffers(planned)])
        labels += [n.label for n in planned.nodes]
    assert facts["layers"] == labels and "stem.0" in labels  # the source model's names (tiny_resnet's modules)


def test_long_and_hostile_names_stay_legible_in_a_browser(tmp_path):
    """Forty steps of long names with markup in them, buffers too small for their names and several born at one
    step: every name still has its own place, cut (with its whole text in a tooltip) where it is too long."""
    hostile = '<b>&"x"</b>'
    labels = [f"encoder.layers.{i}.self_attention.output_projection{hostile}" if i % 3 else f"l{i}" for i in range(40)]
    steps = [Step(i, f"node_{i}", 1000 * (i % 7), label, "conv2d" if i % 2 else "depthwise_conv2d") for i, label in enumerate(labels)]
    placed = [Buffer(f"t{i}", i, min(i + 2, 39), (i % 5) * 9000, 9000 if i % 4 else 120, labels[i]) for i in range(40)]
    placed += [Buffer(f"s{i}", i, i, 45000 + 100 * k, 100, f"{labels[i]} scratch") for i in range(0, 40, 5) for k in range(3)]
    model = ModelReport(name="long", layers=[], steps=steps, arena_size=50000, lower_bound=46000, macs=0, output_sqnr_db=None,
                        top1_agreement=1.0, inputs="x", size_source="x", buffers=placed)
    page = tmp_path / "page.html"
    page.write_text(render("long names", [model]))
    facts, browser = look(page, tmp_path / "profile", 1200)
    check_page(facts, browser, page)
    (timeline, placement), = facts["sections"]
    names = [f"{shorten(s.label)} ({s.op})" for s in steps]
    assert names[1] == 'encoder.layers.1.sel…ojection<b>&"x"</b> (conv2d)'  # cut to 40 characters: its start and end
    check_chart(timeline, names, [])
    check_chart(placement, names, [shorten(b.label) for b in placed])
    boxes = {s["id"]: s["box"] for s in placement["shapes"]}
    outside = [t for t in placement["texts"] if t["cls"] == "buffer-name" and not inside(t["box"], boxes[t["id"]])]
    assert len(outside) > 20  # most of these names did not fit their boxes
