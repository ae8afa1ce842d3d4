"""What the build report shows of one built model: its layers, the arena over the schedule, and its sizes.

Everything is read from the model's build folder: `planned.kir` (schedule,
kernel symbols, arena offsets, each layer's name in the source model),
`normalized.kir` and `quantized.kir` with the calibration samples the build
keeps (per-layer SQNR, as `kiln report` measures it), the generated header
(weight bytes), and the compiled model — its firmware image `<model>.elf`
(this build root's, else its Cortex-M4 one) when one was linked, else its
object `<model>.o` alone. When a Cortex-M4 build of the model exists (in a
build root the SCons tool names, or one whose record says cortex-m4 beside
or inside this one, or this one) and QEMU is installed, each layer's
Cortex-M4 instructions come from running that image on the first kept
sample.

Floors: a layer whose int8 output is below `LAYER_SQNR_FLOOR_DB` against
float, and a model whose output is below `OUTPUT_SQNR_FLOOR_DB` or whose
arena exceeds its lower bound by more than `ARENA_RATIO_CEILING`, is marked
for the page to highlight.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


from kiln.check import seeded_inputs
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import Graph
from kiln.manifest import ROOT_RECORD, read, read_root
from kiln.plan.buffers import round_up
from kiln.quantize.kept import load_samples, report_inputs
from kiln.quantize.report import report
from kiln.runio import quantize_inputs
from kiln.target import qemu
from kiln.target.macs import node_macs
from kiln.target.size import size_report

LAYER_SQNR_FLOOR_DB = 20.0  # a layer that loses more than 1% of its signal power to quantization
OUTPUT_SQNR_FLOOR_DB = 20.0
ARENA_RATIO_CEILING = 1.05  # the arena against the largest sum of simultaneously live bytes
MACHINES = {3: "x86", 40: "Arm", 62: "x86-64", 183: "AArch64", 243: "RISC-V"}  # ELF e_machine codes


@dataclass(frozen=True)
class Layer:
    index: int
    name: str  # the node's name in Kiln's graph
    label: str  # the layer's name in the source model (`Node.label`)
    op: str
    kernel: str  # "" for an alias (reshape-like: no code runs)
    inputs: list[str]  # activation shapes
    output: str
    memory: str  # "arena", "input", "output"
    offset: int
    nbytes: int
    macs: int
    compared: bool  # the float graph has this tensor too
    sqnr_db: float | None  # None: bit-exact (or not compared)
    m4_instructions: int | None = None  # Cortex-M4 instructions of this layer, when measured

    @property
    def below_floor(self) -> bool:
        return self.compared and self.sqnr_db is not None and self.sqnr_db < LAYER_SQNR_FLOOR_DB


@dataclass(frozen=True)
class Step:
    """Arena occupancy while one node runs: the bytes of every arena tensor live then."""

    index: int
    node: str
    live_bytes: int
    label: str  # the node's layer, as the source model names it
    op: str


@dataclass(frozen=True)
class Buffer:
    """One arena tensor: where it sits and the schedule steps it lives through."""

    name: str
    first: int
    last: int
    offset: int
    nbytes: int
    label: str  # what the chart calls it: the layer that writes it (and which of its buffers), or the model input


@dataclass(frozen=True)
class SizeRow:
    part: str
    nbytes: int


@dataclass
class ModelReport:
    name: str
    layers: list[Layer]
    steps: list[Step]
    arena_size: int
    lower_bound: int
    macs: int
    output_sqnr_db: float | None
    top1_agreement: float
    inputs: str  # what the SQNR was measured on: "8 calibration samples (from ...)" or seeded random inputs
    size_source: str  # what the size rows were read from
    sizes: list[SizeRow] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    m4_source: str = ""  # where the per-layer Cortex-M4 instructions came from, or why there are none
    tiling: str = ""  # what plan.budget changed (kiln.plan.budget), in words; "" for a layer-by-layer plan

    @property
    def peak(self) -> Step:
        return max(self.steps, key=lambda s: (s.live_bytes, -s.index))

    @property
    def failed_floors(self) -> list[str]:
        """The model-level floors this model misses, in words."""
        failed = []
        if self.output_sqnr_db is not None and self.output_sqnr_db < OUTPUT_SQNR_FLOOR_DB:
            failed.append(f"output SQNR below {OUTPUT_SQNR_FLOOR_DB:g} dB")
        if self.arena_size > ARENA_RATIO_CEILING * self.lower_bound:
            failed.append(f"arena above {ARENA_RATIO_CEILING:g} x its lower bound")
        return failed


def gather(build: Path, samples: int | None, cortex_m4: list[Path]) -> ModelReport:
    """The report of the model built in `build`, its SQNR over up to `samples` of the calibration samples kept there
    (all of them when None), and its layers' instructions from its image in the Cortex-M4 build roots `cortex_m4`."""
    planned, normalized, quantized = (load(build / f"{a}.kir", a) for a in ("planned", "normalized", "quantized"))
    rep = report(normalized, quantized, *report_inputs(normalized, load_samples(build), samples))
    sqnr = {n: e["sqnr_db"] for n, e in rep["tensors"].items()}
    counts, m4_source = m4_layers(build, planned, cortex_m4)
    layers = [_layer(planned, i, sqnr, counts.get(i)) for i in range(len(planned.nodes))]
    sizes, source = sizes_of(build, planned, cortex_m4)
    return ModelReport(
        name=build.name, layers=layers, steps=timeline(planned), arena_size=int(planned.meta["arena_size"]),
        lower_bound=int(planned.meta["lower_bound"]), macs=sum(layer.macs for layer in layers),
        output_sqnr_db=rep["outputs"].get(quantized.outputs[0]), top1_agreement=rep["top1_agreement"],
        inputs=rep["inputs"], size_source=source, sizes=sizes, buffers=buffers(planned), m4_source=m4_source,
        tiling=tiling_text(planned),
    )


def tiling_text(planned: Graph) -> str:
    """The budget's plan in words: the tiled run, its grid and recomputed MACs, the layer-by-layer arena it beat."""
    meta = planned.meta
    if "layer_by_layer_arena" not in meta:
        return ""
    text = f"plan.budget: {int(meta['layer_by_layer_arena']):,} B layer by layer"
    if "tiled_run" in meta:
        start, stop = meta["tiled_run"]
        rows, cols = meta["tile_grid"]
        text += (f"; steps {start} to {stop - 1} run tile by tile ({rows}x{cols} tiles, the map below shows one tile's "
                 f"buffers), {int(meta['extra_macs']):,} MACs recomputed ({100 * int(meta['extra_macs']) / max(int(meta['run_macs']), 1):.1f}% of the run)")
    if "in_place_steps" in meta:
        text += (f"; steps {', '.join(map(str, meta['in_place_steps']))} write their output over their input piece by "
                 f"piece ({int(meta['in_place_copied']):,} bytes copied out of a tile buffer)")
    return text + f"; kernel scratch: {meta['scratch_level']}"


def m4_roots(root: Path) -> list[Path]:
    """The build roots of Cortex-M4 builds near `root` (itself, the folders beside it and inside it), found by the
    target their records name (`kiln.manifest.read_root`), whatever they are called."""
    near = [root, *sorted(p for p in root.parent.iterdir() if p.is_dir() and p != root),
            *sorted(p for p in root.iterdir() if p.is_dir())]
    return [r for r in near if read_root(r)["target"] == "cortex-m4" and (r / ROOT_RECORD).is_file()]


def m4_layers(build: Path, planned: Graph, roots: list[Path]) -> tuple[dict[int, int], str]:
    """Each kernel layer's Cortex-M4 instructions (node index -> count) from this model's own image in the first of
    the Cortex-M4 build `roots` that has one (its manifest names it), run under QEMU on the first kept sample; empty
    (and why) when there is no image, no QEMU, or another graph."""
    found = [(folder, elf) for folder, elf in ((r / build.name, own_image(r / build.name)) for r in roots) if elf]
    if not found:
        return {}, "none, no Cortex-M4 firmware image of this model was found"
    cortex, elf = found[0]
    if shutil.which("qemu-system-arm") is None:
        return {}, "qemu-system-arm not found"
    image_graph, quantized = load(cortex / "planned.kir", "planned"), load(cortex / "quantized.kir", "quantized")
    if [n.name for n in image_graph.nodes] != [n.name for n in planned.nodes]:
        return {}, f"none, {_shown(elf, build)} was built from another graph than this build's (it is out of date)"
    sample = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(cortex).inputs, 1))
    run = qemu.run_firmware(elf, image_graph, sample, layers=True)
    return {lc.index: lc.instructions for lc in run.layers}, f"{_shown(elf, build)} under QEMU, first kept sample"


def own_image(folder: Path) -> Path | None:
    """The model's own image in a model's build folder, as its manifest names it (None without one)."""
    try:
        elf = folder / read((folder / f"{folder.name}.manifest").read_text())["program"]
    except (OSError, ValueError):
        return None
    return elf if elf.is_file() and (folder / "planned.kir").is_file() else None


def _shown(elf: Path, build: Path) -> str:
    """`elf` relative to the folder holding the report's build root, when it is inside it."""
    try:
        return elf.resolve().relative_to(build.resolve().parent.parent).as_posix()
    except ValueError:
        return elf.as_posix()


def _shape(graph: Graph, name: str) -> str:
    t = graph.tensors[name]
    return f"{t.dtype}[{', '.join(map(str, t.shape))}]"


def _layer(graph: Graph, index: int, sqnr: dict[str, float | None], m4: int | None) -> Layer:
    node = graph.nodes[index]
    out = graph.tensors[node.outputs[0]]
    acts = [i for i in node.inputs if i and not graph.tensors[i].is_constant]
    return Layer(
        index=index, name=node.name, label=node.label, op=node.op, kernel=str(node.attrs.get("kernel", "")),
        inputs=[_shape(graph, i) for i in acts], output=_shape(graph, node.outputs[0]),
        memory=str(out.attrs.get("memory", "arena")), offset=int(out.attrs.get("offset", 0)), nbytes=out.nbytes,
        macs=node_macs(graph, node), compared=node.outputs[0] in sqnr, sqnr_db=sqnr.get(node.outputs[0]),
        m4_instructions=m4,
    )


def lifetimes(graph: Graph) -> dict[str, tuple[int, int]]:
    """Each tensor's first and last step: from the step that writes it to the last that reads it (outputs: the end)."""
    last = len(graph.nodes) - 1
    born = {n: 0 for n in graph.inputs}
    dies = {n: last for n in graph.outputs}
    for step, node in enumerate(graph.nodes):
        for o in node.outputs:
            born.setdefault(o, step)
            dies.setdefault(o, step)
        for i in node.inputs:
            if i in born:
                dies[i] = max(dies.get(i, step), step)
    return {n: (born[n], dies[n]) for n in born}


def buffers(graph: Graph) -> list[Buffer]:
    """The arena tensors with their offsets and lifetimes, in schedule order (aliases share their input's bytes),
    and each step's scratch (`<node>#scratch<input>` for a decompressed constant, `<node>#scratch` for the
    kernel's, `<node>#patch` and `<node>#tile` for the buffers a tiled run or a layer run in pieces copies its
    input patches from and its output tiles through), live during that step (through the whole loop for a step of a tiled run), as large as the plan
    reserved them (aligned)."""
    spans = lifetimes(graph)
    if "tiled_run" in graph.meta:  # a tiled run is one loop: what lives at any of its steps lives through all of them
        start, last = int(graph.meta["tiled_run"][0]), int(graph.meta["tiled_run"][1]) - 1
        inner = {graph.nodes[s].outputs[0] for s in range(start, last)}
        spans = {n: (min(a, start), max(b, last)) if a <= last and b >= start and n not in inner else (a, b)
                 for n, (a, b) in spans.items()}
    else:
        start, last = -1, -2

    def step_span(step: int) -> tuple[int, int]:
        return (start, last) if start <= step <= last else (step, step)

    writers = graph.producers()
    out = [Buffer(n, *spans[n], int(t.attrs["offset"]), int(t.attrs.get("tile_bytes", t.nbytes)),
                  writers[n].label if n in writers else f"input {n}")
           for n, t in graph.tensors.items() if t.attrs.get("memory") == "arena" and n in spans]
    align = int(graph.meta.get("alignment", 1))
    for step, node in enumerate(graph.nodes):
        for pos, offset in enumerate(node.attrs.get("lz4_scratch", [])):
            if int(offset) >= 0:
                out.append(Buffer(f"{node.name}#scratch{pos}", *step_span(step), int(offset),
                                  round_up(graph.tensors[node.inputs[pos]].nbytes, align), f"{node.label} weights {pos}"))
        if int(node.attrs.get("scratch", -1)) >= 0:
            out.append(Buffer(f"{node.name}#scratch", *step_span(step), int(node.attrs["scratch"]),
                              round_up(_scratch_bytes(node), align), f"{node.label} scratch"))
        if "tile_gather_bytes" in node.attrs:
            out.append(Buffer(f"{node.name}#patch", *step_span(step), int(node.attrs["tile_gather_to"]),
                              int(node.attrs["tile_gather_bytes"]), f"{node.label} patch"))
        if "tile_scatter_bytes" in node.attrs:
            out.append(Buffer(f"{node.name}#tile", *step_span(step), int(node.attrs["tile_scatter_from"]),
                              int(node.attrs["tile_scatter_bytes"]), f"{node.label} tile"))
    return sorted(out, key=lambda b: (b.first, b.offset, b.name))


def _scratch_bytes(node) -> int:
    """The kernel scratch a call takes: in a tiled run or in pieces, the most any tile's call takes."""
    if "tile_params" not in node.attrs:
        return int(node.attrs["scratch_bytes"])
    names = list(node.attrs["param_names"])
    flat = [int(v) for v in node.attrs["tile_params"]]
    return max(flat[k + names.index("scratch_bytes")] for k in range(0, len(flat), len(names)))


def timeline(graph: Graph) -> list[Step]:
    """Arena bytes in use at each step of the schedule: the union of the live arena tensors' byte ranges.

    Aliases and in-place results share their input's bytes, and the union counts those bytes once.
    """
    ranges = [(b.first, b.last, b.offset, b.offset + b.nbytes) for b in buffers(graph)]
    return [Step(s, node.name, _union([(lo, hi) for b, d, lo, hi in ranges if b <= s <= d]), node.label, node.op)
            for s, node in enumerate(graph.nodes)]


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for lo, hi in sorted(intervals):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def sizes_of(build: Path, planned: Graph, cortex_m4: list[Path]) -> tuple[list[SizeRow], str]:
    """Weights, arena and code bytes, and a sentence saying what they were read from: the model's firmware image
    (this build root's, else the Cortex-M4 one whose per-layer instructions the page shows), else its compiled
    object alone, which says nothing of a microcontroller's flash and RAM when it is the host's."""
    header = (build / f"{build.name}.h").read_text()
    weights = int(re.search(r"_WEIGHT_BYTES (\d+)u", header).group(1))
    rows = [SizeRow("weights (generated constants)", weights), SizeRow("arena", int(planned.meta["arena_size"]))]
    images = [build / f"{build.name}.elf", *(own_image(r / build.name) for r in cortex_m4)]
    elf = next((e for e in images if e is not None and e.is_file()), None)
    obj = build / f"{build.name}.o"
    if elf is not None:
        image = size_report(elf)
        rows += [SizeRow("code (.text, whole image)", image.code), SizeRow("flash (whole image)", image.flash),
                 SizeRow("RAM (whole image)", image.ram)]
        rows += [SizeRow(f"flash: {part}", b["flash"]) for part, b in image.parts.items()]
        return rows, f"From the {image.target} firmware image {elf.relative_to(build.parent.parent).as_posix()}."
    if obj.is_file():
        sections = object_sections(obj)
        rows += [SizeRow("code (.text of the model object)", _sum(sections, ".text")),
                 SizeRow("read-only data (.rodata of the model object)", _sum(sections, ".rodata"))]
        return rows, (f"No firmware image of this model was found, only its compiled object {obj.name} ({machine(obj)} code): "
                      "the code and data below are that object's alone, not a microcontroller image's flash and RAM.")
    return rows, "No compiled code of this model was found: the weights and arena come from its generated header and plan."


def machine(obj: Path) -> str:
    """The processor an ELF object file was compiled for (from its header), or "unknown" for another format."""
    head = obj.read_bytes()[:20]
    if head[:4] != b"\x7fELF" or len(head) < 20:
        return "unknown"
    return MACHINES.get(int.from_bytes(head[18:20], "little" if head[5] == 1 else "big"), "unknown")


def object_sections(obj: Path) -> dict[str, int]:
    """Section sizes of a host object file (binutils `size -A`)."""
    if shutil.which("size") is None:
        raise KilnError("'size' (binutils) not found")
    proc = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise KilnError(f"{obj}: size failed: {proc.stderr.strip()}")
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\.\S+)\s+(\d+)", proc.stdout, re.M)}


def _sum(sections: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in sections.items() if k == prefix or k.startswith(prefix + "."))
