"""`kiln check --layers`: the first layer at which a built program departs from the integer reference.

The program runs in its harness's `--tensors` mode (`runtime/host_main.c` on
the host, `runtime/firmware/firmware_main.c` under the target's QEMU board):
the generated code's per-layer hook (`kiln_layer_hook_t`) writes each layer's
output as it is at the end of the layer, through the pointer the hook is
given. That moment matters: the plan reuses arena bytes, runs element-wise
layers and layers in pieces over their input, and runs its leading layers
tile by tile (docs/ir.md, "Planned graphs"), so after the layer a later one
may write over its output; read at the hook, a layer's output is whole
unless the plan says otherwise. What the hook never sees whole is said per
layer and not compared (`observed`):

- a layer inside a tiled run but the last: its map only ever exists one tile
  at a time (the hook sees the run as one layer; a difference there shows at
  the run's end);
- a writer of a tensor several layers write (each input of a concat is one
  copy into the concat's output) but the last: the tensor is whole only
  after the last writer;
- an alias (a reshape-like node): no code runs, it shares its input's bytes.

Every other layer's output is compared bit for bit with the integer
reference executor's value of the same tensor (the quantized graph, run on
the same int8 samples as `kiln check`), and the first layer in schedule order
that differs on any sample is named with its first differing element. Beside
each layer: the SQNR of that tensor in int8 against the float graph, as
`kiln report` measures it (`kiln.quantize.report`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln import host
from kiln.check import program_of, seeded_inputs, staleness, started_builds
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import DTYPES, Graph
from kiln.quantize.kept import load_samples, report_inputs
from kiln.runio import quantize_inputs

SQNR_SAMPLES = 16  # `kiln report`'s default


@dataclass
class Layer:
    """One node of the schedule: what the check saw of its output."""

    index: int  # the node's place in the schedule, the layer index the hook is given
    name: str
    op: str
    tensor: str  # its output
    seen: bool = True  # the hook is called after it (not an alias, not inside a tiled run)
    compared: bool = True  # and its output is whole then
    note: str = ""  # why it is not compared, or what its comparison covers
    differs: int = 0  # samples on which its output differs from the reference
    first: str = ""  # its first difference (on the first sample that differs)
    sqnr: float | None = None
    has_sqnr: bool = False  # the float graph has the tensor (sqnr None then means exact)


def observed(planned: Graph) -> list[Layer]:
    """Every node of the planned schedule, and whether its output is whole when the hook sees it after the node."""
    start, stop = (int(v) for v in planned.meta.get("tiled_run", [-1, -1]))
    in_place = {int(s) for s in planned.meta.get("in_place_steps", [])}
    writers: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(planned.nodes):
        if node.attrs.get("kernel"):
            writers[node.outputs[0]].append(i)
    layers = []
    for i, node in enumerate(planned.nodes):
        y = node.outputs[0]
        layer = Layer(i, node.name, node.op + (f"+{node.attrs['residual']}" if "residual" in node.attrs else ""), y)
        if not node.attrs.get("kernel"):
            layer.seen = layer.compared = False
            layer.note = f"an alias of {node.inputs[0]}: no code runs"
        elif start <= i < stop - 1:
            layer.seen = layer.compared = False
            layer.note = f"inside the tiled run of layers {start}-{stop - 1}: never whole"
        elif writers[y][-1] != i:
            layer.compared, layer.note = False, f"writes part of {y}, whole after layer {writers[y][-1]}"
        elif i == stop - 1:
            layer.note = f"the end of the tiled run of layers {start}-{stop - 1}: a difference may start in any of them"
        elif len(writers[y]) > 1:
            layer.note = f"{y} as layers {', '.join(map(str, writers[y]))} wrote it"
        elif i in in_place:
            layer.note = "ran in pieces over its input: compared after its last piece"
        layers.append(layer)
    return layers


def parse_tensors(text: str, count: int, program: Path) -> list[dict[int, bytes]]:
    """Per sample, each layer's output bytes from a harness's `--tensors` report of `count` samples."""
    got: list[dict[int, bytes]] = [{} for _ in range(count)]
    ended = 0
    for line in text.splitlines():
        if line.startswith("sample="):
            ended += 1
        if not line.startswith("tensor "):
            continue
        try:
            fields = dict(f.split("=", 1) for f in line.split(" ")[1:])
            sample, index, data = int(fields["sample"]), int(fields["index"]), bytes.fromhex(fields["hex"])
            got[sample][index] = data
        except (ValueError, KeyError, IndexError):
            raise KilnError(f"{program}: unreadable tensor line {line[:60]!r}") from None
    if ended != count:
        raise KilnError(f"{program}: reported {ended} of {count} samples")
    return got


def _first_difference(got: np.ndarray, want: np.ndarray, shape: tuple[int, ...], sample: int) -> tuple[int, str]:
    """How many elements differ bit for bit, and the first of them described (element index, both values)."""
    bits = f"u{got.dtype.itemsize}"
    bad = np.flatnonzero(got.view(bits) != want.view(bits))
    if not bad.size:
        return 0, ""
    where = [int(v) for v in np.unravel_index(int(bad[0]), shape)]
    return int(bad.size), (f"sample {sample}, element {where} is {got[bad[0]]}, the reference {want[bad[0]]}; "
                           f"{bad.size} of {got.size} elements differ")


def compare(layers: list[Layer], planned: Graph, got: list[dict[int, bytes]], want: list[dict[str, np.ndarray]], program: Path) -> None:
    """Fill in each compared layer's differences: `got` per sample by layer index, `want` by tensor name."""
    expected = {layer.index for layer in layers if layer.seen}
    for sample, g in enumerate(got):
        if set(g) != expected:
            extra, missing = sorted(set(g) - expected), sorted(expected - set(g))
            raise KilnError(f"{program}: its hook reported layers {extra} and not {missing} on sample {sample}, "
                            "unlike planned.kir (rebuild the program)")
    for layer in (entry for entry in layers if entry.compared):
        if any(layer.tensor not in w for w in want):
            raise KilnError(f"{program}: layer {layer.index}'s output {layer.tensor} is not a tensor of quantized.kir "
                            "(the build folder's graphs disagree: rebuild it)")
        t = planned.tensors[layer.tensor]
        dtype = np.dtype(DTYPES[t.dtype])
        for sample, (g, w) in enumerate(zip(got, want)):
            actual = np.frombuffer(g[layer.index], dtype) if len(g[layer.index]) == t.nbytes else None
            if actual is None:
                raise KilnError(f"{program}: layer {layer.index} wrote {len(g[layer.index])} bytes, its output "
                                f"{layer.tensor} has {t.nbytes}")
            count, text = _first_difference(actual, np.ascontiguousarray(w[layer.tensor], dtype).ravel(), t.shape, sample)
            if count:
                layer.differs += 1
                layer.first = layer.first or text


def layer_sqnr(build: Path, quantized: Graph, layers: list[Layer]) -> str:
    """Give each layer its output's SQNR in int8 against the float graph; returns what it was measured on."""
    from kiln.quantize.report import report

    normalized = load(build / "normalized.kir", "normalized")
    samples, described = report_inputs(normalized, load_samples(build), SQNR_SAMPLES)
    rep = report(normalized, quantized, samples, described)
    if "note" in rep:
        return f"no SQNR: {rep['note']}"
    for layer in layers:
        entry = rep["tensors"].get(layer.tensor)
        layer.has_sqnr = entry is not None
        layer.sqnr = entry["sqnr_db"] if entry else None
    return f"SQNR of int8 against the float graph on {rep['inputs']}"


def check_program(program: Path, target, quantized: Graph, planned: Graph, samples: list[list[np.ndarray]]) -> list[Layer]:
    """Every layer of `program` (a host program, or an image for the firmware `target`), built from `planned`, against
    the integer reference running `quantized` on the same int8 `samples`."""
    from kiln.reference.executor import run
    from kiln.reference.int8 import INT8_IMPLS

    if target is None:
        text = host.run_tensors(program, planned, samples)
    else:
        from kiln.target.qemu import run_firmware

        text = run_firmware(program, planned, samples, timeout=600, tensors=True).report
    got = parse_tensors(text, len(samples), program)
    want = [run(quantized, dict(zip(quantized.inputs, s)), table=INT8_IMPLS, keep=True) for s in samples]
    layers = observed(planned)
    compare(layers, planned, got, want, program)
    return layers


def check_layers_model(build: Path) -> dict:
    """The layer check of the model built in `build` (on a firmware target, its image under QEMU)."""
    row = {"model": build.name, "stale": staleness(build)}
    if row["stale"]:
        return row
    program, target = program_of(build)
    quantized, planned = load(build / "quantized.kir", "quantized"), load(build / "planned.kir", "planned")
    kept = load_samples(build)
    samples = quantize_inputs(quantized, seeded_inputs(quantized, kept.inputs))
    layers = check_program(program, target, quantized, planned, samples)
    measured = layer_sqnr(build, quantized, layers)
    inputs = f"from {kept.source}" if kept.count else "seeded random inputs"
    return row | {"layers": layers, "samples": len(samples), "inputs": inputs, "sqnr": measured}


def check_layers_all(root: Path) -> list[dict]:
    """The layer check of every model under `root` that the build has started."""
    return [check_layers_model(b) for b in started_builds(root)]


def first_difference(row: dict) -> Layer | None:
    return next((layer for layer in row.get("layers", []) if layer.differs), None)


def layers_passed(row: dict) -> bool:
    """Every compared layer bit-exact (a model that cannot fit its target passes, as in `kiln check`)."""
    if row["stale"]:
        return row["stale"].startswith("does not fit:")
    return first_difference(row) is None


def render_layers(rows: list[dict]) -> str:
    """Per model: one line per layer (check, SQNR, output or note), then the first layer that differs."""
    out = []
    for r in rows:
        if r["stale"]:
            out.append(f"{r['model']}: {r['stale']}")
            continue
        layers = r["layers"]
        out.append(f"{r['model']}: {len(layers)} layers against the integer reference on {r['samples']} samples "
                   f"({r['inputs']}); {r['sqnr']}")
        table = [("layer", "name", "op", "check", "SQNR dB", "output")]
        for layer in layers:
            check = "not compared" if not layer.compared else f"DIFFERS ({layer.differs}/{r['samples']})" if layer.differs else "bit-exact"
            sqnr = "-" if not layer.has_sqnr else "exact" if layer.sqnr is None else f"{layer.sqnr:.2f}"
            table.append((str(layer.index), layer.name, layer.op, check, sqnr, layer.tensor + (f"  ({layer.note})" if layer.note else "")))
        widths = [max(len(row[i]) for row in table) for i in range(5)]
        for row in table:
            cells = [row[0].rjust(widths[0]), *(c.ljust(w) for c, w in zip(row[1:4], widths[1:4])), row[4].rjust(widths[4]), row[5]]
            out.append("  " + "  ".join(cells))
        bad = first_difference(r)
        compared = sum(layer.compared for layer in layers)
        if bad is None:
            out.append(f"{r['model']}: every compared layer is bit-exact ({compared} compared, {len(layers) - compared} not)")
        else:
            out.append(f"{r['model']}: first layer that differs: {bad.index} {bad.name} ({bad.op}), output {bad.tensor}: "
                       f"{bad.first} (on {bad.differs} of {r['samples']} samples){f'; {bad.note}' if bad.note else ''}")
    return "\n".join(out)
