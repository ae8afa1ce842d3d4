"""Cortex-M4 benchmark: instructions per inference and per MAC, code, flash and RAM, for every built model.

Runs each model's firmware image (`scons target=cortex-m4`) under QEMU
mps2-an386 on the seeded inputs `kiln check` uses; instruction counts are
exact (QEMU -icount shift=0, SysTick resolution of 40 instructions). The
outputs are checked against the integer reference as they go, so a number
never comes from a wrong program.

`--layers` adds one row per layer: its kind and shape, instructions, the work
they did (MACs, or output elements for element-wise kinds), instructions per
unit, the arena scratch the planner gave it, and CMSIS-NN's instructions per
MAC on the same layer shape where issue 18 measured it (CMSIS_NN below). For
a conv fused with the residual add it feeds, the add's share is measured
apart: the same layer built alone with and without the add.

`--mul` measures the int8 mul kernel alone (no zoo model has a mul): one
layer per case in one image, on operands of one shape, on a map times a
per-channel vector (a squeeze-and-excitation block's scaling) and on a map
times a scalar, each over the whole int8 range and with a ReLU (one shape also
clamped on both sides); instructions per output element, outputs checked
against the integer reference.

    python bench/cortex_m.py [BUILD_ROOT] [--layers] [--mul] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from kiln.check import reference_outputs, seeded_inputs
from kiln.codegen import generate
from kiln.config import validate
from kiln.errors import KilnError
from kiln.host import model_prefix
from kiln.ir import Graph, load
from kiln.ir.graph import Node, QuantParams, Tensor
from kiln.lower import lower
from kiln.lower.abi import KERNELS, bind
from kiln.model_table import firmware_model
from kiln.plan import plan
from kiln.quantize.kept import load_samples
from kiln.runio import quantize_inputs
from kiln.target.cortex_m import build_firmware
from kiln.target.macs import graph_macs, node_macs
from kiln.target.qemu import run_firmware
from kiln.target.size import size_report

# CMSIS-NN's DSP path on the zoo's layer shapes, instructions per MAC, as issue 18 measured them: the
# same QEMU mps2-an386 with -icount shift=0 and per-layer hook counts, CMSIS-NN built with gcc 12 -O2.
CMSIS_NN = {
    ("conv", "10x4 s2 1>64 @25x5"): 3.49,  # KWS conv1
    ("pointwise", "64>64 @25x5"): 2.04,  # KWS pointwise
    ("depthwise", "3x3 s1 64 @25x5"): 7.68,  # KWS depthwise
    ("pointwise", "8>16 @48x48"): 6.66,  # VWW pointwise
    ("conv", "3x3 s1 16>16 @32x32"): 2.33,  # ResNet-8 3x3
    ("fc", "640>128"): 1.95,  # anomaly detection FC
}
# Issue 18's targets: instructions per MAC of whole models, and per layer kind (per element for adds and muls).
MODEL_TARGETS = {"kws_dscnn": 2.4, "vww_mobilenet": 2.4, "ic_resnet8": 1.9}
LAYER_TARGETS = {"depthwise": 5.0, "add": 10.0, "residual add": 10.0, "mul": 10.0, ("pointwise", "8>16 @48x48"): 3.5}
ELEMENT_WISE = {"add", "mul"}  # kinds measured per output element, not per MAC
# --mul: (label, a's shape, b's shape, activation range) of the mul layers measured alone.
RELU, CLAMP = (0.0, float("inf")), (0.0, 3.0)
MUL_CASES = [("one shape", (1, 32, 32, 16), (1, 32, 32, 16), None), ("one shape, ReLU", (1, 32, 32, 16), (1, 32, 32, 16), RELU),
             ("one shape, 0..3", (1, 32, 32, 16), (1, 32, 32, 16), CLAMP),
             ("per channel", (1, 6, 6, 128), (1, 1, 1, 128), None), ("per channel, ReLU", (1, 6, 6, 128), (1, 1, 1, 128), RELU),
             ("scalar", (1, 32, 32, 16), (1,), None), ("scalar, ReLU", (1, 32, 32, 16), (1,), RELU)]


def describe(planned: Graph, node) -> tuple[str, str]:
    """(kind, shape) of a planned layer, e.g. ("depthwise", "3x3 s1 64 @25x5")."""
    kernel = str(node.attrs.get("kernel", ""))
    p = dict(zip(node.attrs.get("param_names", []), node.attrs.get("params", [])))
    out = planned.tensors[node.outputs[0]].shape
    at = f"@{out[1]}x{out[2]}" if len(out) == 4 else ""
    if kernel in ("kiln_conv2d_s8", "kiln_conv2d_add_s8"):
        kind = "conv+add" if kernel == "kiln_conv2d_add_s8" else "conv"
        return kind, f"{p['k_h']}x{p['k_w']} s{p['stride_h']} {p['in_c']}>{p['out_c']} {at}"
    if kernel == "kiln_conv2d_1x1_s8":
        return "pointwise", f"{p['in_c']}>{p['out_c']} {at}"
    if kernel == "kiln_depthwise_conv2d_s8":
        return "depthwise", f"{p['k_h']}x{p['k_w']} s{p['stride_h']} {p['in_c'] * p['ch_mult']} {at}"
    if kernel in ("kiln_fully_connected_s8", "kiln_fully_connected_few_s8"):
        return "fc", f"{p['in_features']}>{p['out_features']}"
    if kernel in ("kiln_add_table_s8", "kiln_add_s8", "kiln_sub_s8"):
        return "add", f"{planned.tensors[node.outputs[0]].size} values"
    if kernel == "kiln_mul_s8":
        return "mul", f"{planned.tensors[node.outputs[0]].size} values"
    return node.op, ""


def bench_model(build: Path, layers: bool) -> dict:
    """One model's row: instruction counts over the seeded samples, MACs, sizes, and the output check."""
    name = build.name
    quantized, planned = load(build / "quantized.kir"), load(build / "planned.kir")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(build).inputs))
    run = run_firmware(build / f"{name}.elf", planned, samples)
    want = reference_outputs(quantized, samples)
    exact = sum(all(np.array_equal(g, w) for g, w in zip(gs, ws)) for gs, ws in zip(run.outputs, want))
    macs = graph_macs(planned)
    per_inference = statistics.median(run.instructions)
    size = size_report(build / f"{name}.elf")
    row = {
        "model": name,
        "samples": len(samples),
        "bit_exact": exact,
        "instructions": int(per_inference),
        "instructions_min": min(run.instructions),
        "instructions_max": max(run.instructions),
        "macs": macs,
        "instructions_per_mac": round(per_inference / macs, 2) if macs else None,
        "text_bytes": size.code,
        "kernel_bytes": size.parts.get("kernels", {}).get("flash", 0),
        "flash_bytes": size.flash,
        "weight_bytes": size.weights,
        "ram_bytes": size.data + size.bss + run.stack_bytes,
        "arena_bytes": size.arena,
        "stack_bytes": run.stack_bytes,
    }
    if layers:  # a second run: the hook's own work would inflate the totals above
        row["layers"] = [layer_row(planned, lc) for lc in run_firmware(build / f"{name}.elf", planned, samples[:1], layers=True).layers]
        fused = [n for n in planned.nodes if n.attrs.get("kernel") == "kiln_conv2d_add_s8"]
        if fused:
            shares = residual_add_share(planned, fused)
            for layer in row["layers"]:
                layer["residual_add_per_element"] = shares.get(layer["index"])
    return row


def layer_row(planned: Graph, count) -> dict:
    node = planned.nodes[count.index]
    kind, shape = describe(planned, node)
    macs = node_macs(planned, node)
    work = planned.tensors[node.outputs[0]].size if kind in ELEMENT_WISE else macs
    return {"index": count.index, "name": count.name, "kind": kind, "shape": shape, "instructions": count.instructions,
            "macs": macs, "per_unit": round(count.instructions / work, 2) if work else None,
            "unit": "element" if kind in ELEMENT_WISE else "MAC", "scratch_bytes": int(node.attrs.get("scratch_bytes", 0)),
            "cmsis_nn": CMSIS_NN.get((kind, shape))}


def residual_add_share(planned: Graph, fused: list) -> dict[int, float]:
    """Instructions per output element that each fused conv + add spends on the add: the layer built
    alone with the add and without it (kiln_conv2d_s8 on the same parameters), one firmware image."""
    rng = np.random.default_rng(0)
    graphs, feeds = [], []
    for node in fused:
        alone = _alone(planned, node, with_add=True)
        graphs += [alone, _alone(planned, node, with_add=False)]
        sample = [rng.integers(-128, 128, alone.tensors[n].shape).astype(np.int8) for n in alone.inputs]
        feeds += [sample, sample[:1]]
    counts = [run.instructions for run, _ in run_alone(graphs, feeds)]
    index = {id(n): i for i, n in enumerate(planned.nodes)}
    return {index[id(n)]: round((counts[2 * j] - counts[2 * j + 1]) / planned.tensors[n.outputs[0]].size, 2)
            for j, n in enumerate(fused)}


def run_alone(graphs: list[Graph], feeds: list[list[np.ndarray]]) -> list[tuple]:
    """(the layer's hook count, the whole run) of each one-layer lowered graph run on its feed, all in one
    firmware image: the count is the layer's alone, not the I/O copies'."""
    defaults = validate({}, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        plans, sources, models = [], [], []
        for i, g in enumerate(graphs):
            planned_i = plan(g, dict(defaults["plan"], io_in_arena=True))
            for fname, text in generate(planned_i, f"layer{i}", defaults["codegen"]).items():
                (d / fname).write_bytes(text)
            sources.append(d / f"layer{i}.c")
            models.append(firmware_model(model_prefix(d / f"layer{i}.h"), (d / f"layer{i}.h").read_text()))
            plans.append(planned_i)
        elf = build_firmware(sources, models, d / "layers.elf")
        runs = [run_firmware(elf, p, [f], model=f"layer{i}", layers=True) for i, (p, f) in enumerate(zip(plans, feeds))]
    return [(r.layers[0], r) for r in runs]


def mul_graph(a_shape: tuple, b_shape: tuple, activation: tuple[float, float] | None) -> Graph:
    """An int8 mul with the scales of a feature map times a sigmoid's output (1/256): a right shift of 7."""
    out = tuple(int(d) for d in np.broadcast_shapes(a_shape, b_shape))
    g = Graph("mul")
    g.add_tensor(Tensor("a", a_shape, "int8", quant=QuantParams((0.05,), (-3,))))
    g.add_tensor(Tensor("b", b_shape, "int8", quant=QuantParams((1 / 256,), (-128,))))
    g.add_tensor(Tensor("y", out, "int8", quant=QuantParams((0.04,), (-5,))))
    attrs = {"act_min": activation[0], "act_max": activation[1]} if activation else {}
    g.nodes = [Node("mul", "mul", ["a", "b"], ["y"], attrs)]
    g.inputs, g.outputs = ["a", "b"], ["y"]
    return g


def bench_mul() -> list[dict]:
    """MUL_CASES built alone: instructions per output element, outputs checked against the reference."""
    rng = np.random.default_rng(0)
    graphs, lowered, feeds = [], [], []
    for _, a_shape, b_shape, act in MUL_CASES:
        g = mul_graph(a_shape, b_shape, act)
        graphs.append(g)
        lowered.append(lower(g, validate({}, "bench")["kernels"]))
        feeds.append([rng.integers(-128, 128, g.tensors[n].shape).astype(np.int8) for n in g.inputs])
    rows = []
    for (label, *_), g, low, feed, (count, run) in zip(MUL_CASES, graphs, lowered, feeds, run_alone(lowered, feeds)):
        want = reference_outputs(g, [feed])[0][0]
        size = g.tensors["y"].size
        rows.append({"case": label, "values": size, "kernel": low.nodes[0].attrs["kernel"], "instructions": count.instructions,
                     "per_element": round(count.instructions / size, 2), "bit_exact": bool(np.array_equal(run.outputs[0][0], want))})
    return rows


def _alone(planned: Graph, node, with_add: bool) -> Graph:
    """A lowered graph of the one fused layer (or of its conv only), its activations as inputs."""
    g = Graph(node.name)
    inputs = node.inputs if with_add else node.inputs[:5]
    for name in [*inputs, *node.outputs]:
        t = planned.tensors[name]
        g.add_tensor(t.copy(attrs={}))
    attrs = {k: v for k, v in node.attrs.items() if k != "scratch"}
    if not with_add:
        params = dict(zip(node.attrs["param_names"], node.attrs["params"]))
        attrs.update(bind("kiln_conv2d_s8", **{f: params[f] for f in KERNELS["kiln_conv2d_s8"].fields}))
    g.nodes = [node.copy(inputs=list(inputs), attrs=attrs)]
    g.inputs = [n for n in inputs if not g.tensors[n].is_constant]
    g.outputs = list(node.outputs)
    return g


def render(rows: list[dict]) -> str:
    head = (f"{'model':<18} {'check':>9} {'instr/inference':>16} {'MACs':>10} {'instr/MAC':>10} {'target':>7} {'text B':>8} "
            f"{'kernels B':>10} {'flash B':>9} {'RAM B':>8} {'weights B':>10} {'arena B':>8} {'stack B':>8}")
    lines = [head]
    for r in rows:
        check = "ok" if r["bit_exact"] == r["samples"] else f"BAD {r['samples'] - r['bit_exact']}/{r['samples']}"
        ipm = f"{r['instructions_per_mac']:.2f}" if r["instructions_per_mac"] is not None else "-"
        target = MODEL_TARGETS.get(r["model"])
        lines.append(f"{r['model']:<18} {check:>9} {r['instructions']:>16} {r['macs']:>10} {ipm:>10} "
                     f"{'<= ' + str(target) if target else '':>7} {r['text_bytes']:>8} {r['kernel_bytes']:>10} "
                     f"{r['flash_bytes']:>9} {r['ram_bytes']:>8} {r['weight_bytes']:>10} {r['arena_bytes']:>8} {r['stack_bytes']:>8}")
        if r.get("layers"):
            lines.append(f"  {'#':>4} {'layer':<28} {'kind':<10} {'shape':<22} {'instructions':>12} {'MACs':>10} "
                         f"{'instr/unit':>14} {'scratch B':>9} {'CMSIS-NN':>8} {'ratio':>6}")
        for layer in r.get("layers", []):
            unit = f"{layer['per_unit']:.2f}/{layer['unit']}" if layer["per_unit"] is not None else "-"
            ref = layer["cmsis_nn"]
            ratio = f"{layer['per_unit'] / ref:.2f}" if ref else ""
            lines.append(f"  {layer['index']:>4} {layer['name'][:28]:<28} {layer['kind']:<10} {layer['shape'][:22]:<22} "
                         f"{layer['instructions']:>12} {layer['macs']:>10} {unit:>14} {layer['scratch_bytes']:>9} "
                         f"{ref if ref else '':>8} {ratio:>6}")
            if layer.get("residual_add_per_element") is not None:
                lines.append(f"  {'':>4} {'  its residual add':<28} {'add':<10} {'':<22} {'':>12} {'':>10} "
                             f"{layer['residual_add_per_element']:>6.2f}/element")
    lines += targets(rows)
    return "\n".join(lines)


def render_mul(rows: list[dict]) -> str:
    lines = ["int8 mul alone", f"  {'case':<20} {'values':>7} {'check':>6} {'instructions':>12} {'instr/element':>14} {'target':>7}"]
    for r in rows:
        lines.append(f"  {r['case']:<20} {r['values']:>7} {'ok' if r['bit_exact'] else 'BAD':>6} {r['instructions']:>12} "
                     f"{r['per_element']:>14.2f} {'<= ' + str(LAYER_TARGETS['mul']):>7}")
    return "\n".join(lines)


def targets(rows: list[dict]) -> list[str]:
    """Issue 18's targets against the measured numbers (the layer targets only when --layers ran)."""
    out = []
    for r in rows:
        if r["model"] in MODEL_TARGETS and r["instructions_per_mac"] is not None:
            out.append((f"{r['model']} instr/MAC", r["instructions_per_mac"], MODEL_TARGETS[r["model"]]))
        for layer in r.get("layers", []):
            key = (layer["kind"], layer["shape"])
            bound = LAYER_TARGETS.get(key, LAYER_TARGETS.get(layer["kind"]))
            if bound is not None and layer["per_unit"] is not None:
                out.append((f"{r['model']} {layer['name']} ({layer['kind']} {layer['shape']})", layer["per_unit"], bound))
            if layer.get("residual_add_per_element") is not None:
                out.append((f"{r['model']} {layer['name']} residual add", layer["residual_add_per_element"], LAYER_TARGETS["residual add"]))
    if not out:
        return []
    return ["", "targets (issue 18)"] + [f"  {'ok  ' if value <= bound else 'MISS'} {what}: {value:.2f} <= {bound}" for what, value, bound in out]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Instructions per inference and per MAC, code, flash and RAM of each model on Cortex-M4 (QEMU).")
    p.add_argument("build_root", type=Path, nargs="?", default=Path("build/cortex-m4"))
    p.add_argument("--layers", action="store_true", help="also list each layer (first sample) and the residual adds' share")
    p.add_argument("--mul", action="store_true", help="measure the int8 mul kernel alone (MUL_CASES); without --layers, only that")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    rows, mul = [], []
    try:
        if args.layers or not args.mul:
            builds = sorted(e.parent for e in args.build_root.glob("*/*.elf") if e.stem == e.parent.name)
            if not builds:
                raise KilnError(f"{args.build_root}: no model images (run `scons target=cortex-m4` first)")
            rows = [bench_model(b, args.layers) for b in builds]
        mul = bench_mul() if args.mul else []
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 1
    print("\n\n".join(t for t in (render(rows) if rows else "", render_mul(mul) if mul else "") if t))
    if args.json:
        args.json.write_text(json.dumps({"models": rows, "mul": mul} if mul else rows, indent=1, sort_keys=True) + "\n")
    return 0 if all(r["bit_exact"] == r["samples"] for r in rows) and all(r["bit_exact"] for r in mul) else 1


if __name__ == "__main__":
    sys.exit(main())
