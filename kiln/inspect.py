"""`kiln inspect`: what a .kir file holds, as data (for --json) and as readable text."""
from __future__ import annotations

from typing import Any

from kiln.ir.graph import Graph


def describe(g: Graph) -> dict[str, Any]:
    tensors = []
    for name in sorted(g.tensors):
        t = g.tensors[name]
        entry: dict[str, Any] = {"name": name, "shape": list(t.shape), "dtype": t.dtype, "constant": t.is_constant}
        if t.layout:
            entry["layout"] = t.layout
        if t.quant is not None:
            entry["quant"] = {"scale": list(t.quant.scale), "zero_point": list(t.quant.zero_point), "axis": t.quant.axis}
        if "offset" in t.attrs:
            entry["memory"] = t.attrs.get("memory", "arena")
            entry["offset"] = t.attrs["offset"]
        if "tile_bytes" in t.attrs:
            entry["tile_bytes"] = t.attrs["tile_bytes"]
        tensors.append(entry)
    nodes = [{"index": i, "name": n.name, "source_name": n.source_name, "op": n.op, "inputs": n.inputs, "outputs": n.outputs,
              "attrs": {k: _jsonable(v) for k, v in sorted(n.attrs.items())}} for i, n in enumerate(g.nodes)]
    return {"graph": g.name, "inputs": g.inputs, "outputs": g.outputs,
            "meta": {k: _jsonable(v) for k, v in sorted(g.meta.items())}, "nodes": nodes, "tensors": tensors}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return str(v)
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def render(info: dict[str, Any]) -> str:
    lines = [f"graph {info['graph']}: inputs {', '.join(info['inputs'])} -> outputs {', '.join(info['outputs'])}"]
    for k, v in info["meta"].items():
        lines.append(f"  {k} = {v}")
    meta = info["meta"]
    if "tiled_run" in meta:
        start, stop = meta["tiled_run"]
        lines.append(f"  tiled: steps {start} to {stop - 1} run as {meta['tile_grid'][0]}x{meta['tile_grid'][1]} tiles, "
                     f"{meta['extra_macs']} MACs recomputed on top of the run's {meta['run_macs']}; "
                     f"arena {meta['arena_size']} B against {meta['layer_by_layer_arena']} B layer by layer")
    if "in_place_steps" in meta:
        lines.append(f"  in place: steps {', '.join(map(str, meta['in_place_steps']))} write their output over their input, "
                     f"in {', '.join(map(str, meta['in_place_pieces']))} pieces, {meta['in_place_copied']} bytes copied; "
                     f"arena {meta['arena_size']} B against {meta['layer_by_layer_arena']} B layer by layer")
    by_name = {t["name"]: t for t in info["tensors"]}
    lines.append(f"{len(info['nodes'])} nodes:")
    for n in info["nodes"]:
        kernel = f" -> {n['attrs']['kernel']}" if n["attrs"].get("kernel") else ""
        outs = ", ".join(f"{o} {_tensor(by_name[o])}" for o in n["outputs"])
        layer = f" (layer {n['source_name']!r})" if n["source_name"] else ""  # repr: a model file's name cannot drive the terminal
        lines.append(f"  [{n['index']}] {n['name']}{layer} {n['op']}{kernel}: {', '.join(i or '-' for i in n['inputs'])} => {outs}")
    lines.append(f"{len(info['tensors'])} tensors:")
    for t in info["tensors"]:
        lines.append(f"  {t['name']} {_tensor(t)}{' const' if t['constant'] else ''}")
    return "\n".join(lines)


def _tensor(t: dict[str, Any]) -> str:
    text = f"{t['dtype']}{t['shape']}"
    q = t.get("quant")
    if q:
        scale = q["scale"][0] if len(q["scale"]) == 1 else f"{len(q['scale'])} scales axis {q['axis']}"
        text += f" q(scale={scale}, zp={q['zero_point'][0] if len(q['zero_point']) == 1 else '...'})"
    if "offset" in t:
        text += f" @{t['memory']}+{t['offset']}"
    if "tile_bytes" in t:
        text += f" (one tile: {t['tile_bytes']} B)"
    return text
