"""`kiln extract SRC --from A --to B -o DIR`: the layers between named tensors of a model source, as a model of its own.

Tensor names are those of the source's imported graph, as `kiln inspect imported.kir` prints them (the ONNX
names, PyTorch's traced names, the TFLite file's). The cut keeps every node needed to compute the `--to`
tensors from the `--from` tensors and the constants; each `--from` tensor becomes an input of the new model,
each `--to` tensor an output. The new folder holds:

- the cut as a source Kiln reads: `model.onnx` for a float graph (`kiln.export.onnx`: source ops are ONNX's
  own), `model.tflite` for an int8 TFLite source (`kiln.export.tflite`, which writes the file's own
  quantization parameters, so the cut keeps TFLite Micro's arithmetic). It is read back and compared with the
  cut before anything is written: what compiles is what was cut;
- `calibration.npz`: the original's values of the `--from` tensors on the calibration samples its quantize
  stage uses (those `quant.max_samples` and `quant.seed` choose, in order), by the reference executor — the
  float one, or the integer one for an int8 TFLite source (written dequantized, so the cut quantizes them back
  to the same integers);
- `model.toml`: the source, that calibration (`max_samples = 0`: all of it, in that order) and the
  original's `[normalize]`, `[quant]` and `[kernels]` tables, so the cut is quantized as the original was.

Errors are one line: an unknown tensor name (with the closest known one), a `--to` tensor that needs a
graph input or tensor not computable from the `--from` tensors (naming the node that needs it), a `--from`
tensor nothing in the cut reads, a folder that exists.
"""
from __future__ import annotations

import difflib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from kiln.atomic import write_atomic
from kiln.config import check_model_name
from kiln.errors import KilnError
from kiln.ir import load
from kiln.ir.graph import Graph, Node
from kiln.runner import run_stage

CARRIED = ("normalize", "quant", "kernels")  # the original's tables the cut keeps


def _known(graph: Graph, name: str, flag: str, source: Path) -> None:
    t = graph.tensors.get(name)
    if t is None:
        close = difflib.get_close_matches(name, [n for n, x in graph.tensors.items() if not x.is_constant], n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else " (`kiln inspect imported.kir` lists them)"
        raise KilnError(f"{source}: {flag} {name!r}: no such tensor in the imported graph{hint}")
    if t.is_constant:
        raise KilnError(f"{source}: {flag} {name!r} is a constant (weights), not a tensor the model computes")


def cut(graph: Graph, starts: list[str], ends: list[str], source: Path, name: str) -> Graph:
    """The sub-graph of `graph` computing `ends` from `starts` and constants, as graph `name`."""
    for flag, names in (("--from", starts), ("--to", ends)):
        for n in names:
            _known(graph, n, flag, source)
        if len(set(names)) != len(names):
            raise KilnError(f"{source}: {flag} names a tensor twice")
    both = sorted(set(starts) & set(ends))
    if both:
        raise KilnError(f"{source}: {both[0]!r} is both --from and --to")
    producers, kept, reached = graph.producers(), set(), set()
    pending = [(n, n, None) for n in ends]  # (tensor, the --to tensor that needs it, the node that reads it)
    while pending:
        tensor, end, user = pending.pop()
        if tensor in starts:
            reached.add(tensor)
            continue
        if not tensor or graph.tensors[tensor].is_constant:
            continue
        node = producers.get(tensor)
        if node is None:
            read = f" (read by node {user.name!r}, {user.op})" if user else ""
            raise KilnError(f"{source}: --to {end!r} needs the model input {tensor!r}{read}, which is not computable "
                            f"from --from {' '.join(starts)}: add it to --from, or cut after it")
        if node.name not in kept:
            kept.add(node.name)
            pending += [(i, end, node) for i in node.inputs]
    unread = [s for s in starts if s not in reached]
    if unread:
        raise KilnError(f"{source}: --from {unread[0]!r}: nothing between --from and --to reads it")
    nodes = [n.copy() for n in graph.nodes if n.name in kept]
    inner = sorted({s for n in nodes for s in n.outputs} & set(starts))
    if inner:
        maker = producers[inner[0]]
        raise KilnError(f"{source}: --from {inner[0]!r} is also computed inside the cut (node {maker.name!r}, "
                        f"{maker.op}, whose other outputs it needs): cut at that node's inputs")
    used = set(starts) | set(ends) | {t for n in nodes for t in (*n.inputs, *n.outputs) if t}
    sub = Graph(name, {k: t.copy() for k, t in graph.tensors.items() if k in used}, nodes, list(starts), list(ends),
                {k: v for k, v in graph.meta.items()})
    return sub


def _written(sub: Graph, folder: Path, source: Path) -> str:
    """Write `sub` into `folder` as a source Kiln reads; returns its file name."""
    from kiln.frontends import import_model

    if sub.meta.get("quantized_source") == "tflite":
        from kiln.export.tflite import NotExportable, to_tflite

        file, write, refusal, attrs = "model.tflite", lambda g: to_tflite(g).model, NotExportable, lambda n, g: n.attrs
    elif sub.meta.get("tflite") or sub.meta.get("quantized_source") == "qdq":
        kind = f"a {sub.meta['tflite']} .tflite" if sub.meta.get("tflite") else "a QDQ ONNX"
        raise KilnError(f"{source}: {kind} source: kiln extract cuts float graphs (ONNX, PyTorch and .pt2 sources) "
                        "and int8 .tflite files")
    else:
        from kiln.export.onnx import NotWritable, canonical_attrs, to_onnx

        file, write, refusal, attrs = "model.onnx", to_onnx, NotWritable, canonical_attrs
    try:
        data = write(sub)
    except refusal as exc:
        raise KilnError(f"{source}: the cut cannot be written as {file} exactly: {exc}") from None
    write_atomic(folder / file, data)
    back = import_model(folder / file, sub.name, {}).graph
    problem = _difference(sub, back, attrs)
    if problem:
        raise KilnError(f"{source}: the cut written as {file} reads back otherwise: {problem}")
    return file


def _difference(want: Graph, got: Graph, attrs: Callable[[Node, Graph], dict]) -> str | None:
    """How `got` (a written cut, read back) differs from `want`, or None: the same nodes (attributes compared as
    `attrs` gives them) computing the same tensors."""
    if (want.inputs, want.outputs) != (got.inputs, got.outputs):
        return f"inputs {got.inputs} and outputs {got.outputs}"
    if len(want.nodes) != len(got.nodes):
        return f"{len(got.nodes)} nodes, not {len(want.nodes)}"
    for a, b in zip(want.nodes, got.nodes):
        if (a.op, a.inputs, a.outputs, attrs(a, want)) != (b.op, b.inputs, b.outputs, attrs(b, got)):
            return f"node {a.name!r} ({a.op}) as {b.name!r} ({b.op})"
    for name, t in want.tensors.items():
        u = got.tensors.get(name)
        same = u is not None and (t.shape, t.dtype, t.quant) == (u.shape, u.dtype, u.quant)
        if not same or (t.is_constant and not (u.is_constant and np.array_equal(t.data, u.data))):
            return f"tensor {name!r}"
    return None


def cut_calibration(graph: Graph, samples: dict[str, np.ndarray], starts: list[str], quant: dict[str, Any]) -> dict[str, np.ndarray]:
    """The original's values of `starts` on the calibration samples its quantize stage uses, in order, float32."""
    from kiln.quantize.calibration import check_samples, chunk_size, select
    from kiln.quantize.scheme import dequantize_array, quantize_array
    from kiln.reference.batch import run_batch
    from kiln.reference.int8 import INT8_IMPLS

    if not samples:
        return {}
    count, shaped = check_samples(graph, samples)
    indices = select(count, quant["max_samples"], quant["seed"])
    int8 = graph.meta.get("quantized_source") == "tflite"
    values: dict[str, list[np.ndarray]] = {s: [] for s in starts}

    def keep(name: str, batch: np.ndarray) -> None:
        if name in values:
            t = graph.tensors[name]
            values[name].append(dequantize_array(batch, t.quant).astype(np.float32) if int8 else np.asarray(batch, np.float32))

    step = chunk_size(graph)
    for first in range(0, len(indices), step):
        chosen = indices[first:first + step]
        feeds = {n: shaped[n][chosen] for n in graph.inputs}
        if int8:  # as `kiln check` feeds an int8 model its float samples
            feeds = {n: quantize_array(a, graph.tensors[n].quant, graph.tensors[n].dtype, f"input {n!r}") for n, a in feeds.items()}
        run_batch(graph, feeds, table=INT8_IMPLS if int8 else None, visit=keep)
    return {s: np.concatenate(v) for s, v in values.items()}


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz file of `arrays` as np.savez writes it (fixed timestamps), for any key: np.savez takes its keys as
    keyword arguments, so a tensor named `file` or `allow_pickle` would not reach the file."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for key, array in arrays.items():
            with archive.open(zipfile.ZipInfo(f"{key}.npy", (1980, 1, 1, 0, 0, 0)), "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def model_toml(name: str, original: str, file: str, starts: list[str], ends: list[str], config: dict, calibrated: bool) -> str:
    """The cut's model.toml: its source, its calibration, and the original's carried tables."""
    def text(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False)

    lines = [f"# {name}: cut from {text(original)} by `kiln extract`, from {text(starts)} to {text(ends)}",
             "# (tensor names as `kiln inspect imported.kir` shows them for the original).",
             "[model]", f"source = {text(file)}"]
    for table in CARRIED:
        values = dict(config[table])
        if table == "quant":
            values |= {"calibration": ["calibration.npz"], "max_samples": 0} if calibrated else {"calibration": []}
        lines += ["", f"[{table}]"] + [f"{key} = {text(value)}" for key, value in sorted(values.items())]
    return "\n".join(lines) + "\n"


def extract(name: str, model_dir: Path, config: dict, source: Path, starts: list[str], ends: list[str], out: Path) -> Path:
    """Cut `source` (model `name` in `model_dir`, with its validated `config`) into the new model folder `out`."""
    from kiln.quantize.calibration import load_calibration

    check_model_name(out.name, f"{out}")
    if out.exists():
        raise KilnError(f"{out}: already exists; kiln extract writes a new model folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        build, staged = Path(tmp) / "import", Path(tmp) / out.name
        build.mkdir()
        staged.mkdir()
        run_stage("import", name, model_dir, config, build)
        graph = load(build / "imported.kir", "imported")
        sub = cut(graph, starts, ends, source, out.name)
        for s in starts:
            if graph.tensors[s].dtype not in ("float32", "int8"):
                raise KilnError(f"{source}: --from {s!r} is {graph.tensors[s].dtype}; a model input is float32 (or int8 in a TFLite file)")
        file = _written(sub, staged, source)
        samples = load_calibration(graph, config["quant"], model_dir, build / "calibration.npz")
        values = cut_calibration(graph, samples, starts, config["quant"])
        if values:
            write_atomic(staged / "calibration.npz", npz_bytes(values))
        write_atomic(staged / "model.toml", model_toml(out.name, source.name, file, starts, ends, config, bool(values)).encode())
        os.rename(staged, out)
    return out
