"""The codegen stage: a planned graph into `<model>.c` and `<model>.h` through jinja2 templates.

Every kernel is called the same way — `kernel(&params, inputs..., outputs...)`
— so this stage knows no op: it emits constants, parameter structs and calls
in schedule order, with arena/caller pointers from the plan.

Constant arrays are streamed: the template is rendered with a marker where
each array's values go, and the values are written in chunks as the source
is written, so a model's weights are never held as text at once.
Constants the plan marked `lz4_bytes` (`plan.lz4`) are emitted as LZ4 blocks and
decompressed (`runtime/kiln_lz4.c`) into the node's `lz4_scratch` offsets
just before the call; a kernel that takes scratch gets the node's `scratch`
offset as its last argument; inputs and outputs the plan put in the arena are
copied in at the start of invoke and out at the end. Names from the model
reach C only through `kiln.names`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import jinja2
import numpy as np

from kiln.codegen.config import identifier_problem, section_problem
from kiln.config import check_model_name
from kiln.names import c_identifier, c_text
from kiln.errors import KilnError
from kiln.ir.graph import Graph, Tensor
from kiln.lz4 import compress
from kiln.stages import symbol_prefix

C_TYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "uint8": "uint8_t", "float32": "float"}
DTYPE_CODES = {"int8": "KILN_INT8", "float32": "KILN_FLOAT32", "uint8": "KILN_UINT8"}

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


# Where a constant array's values go in the rendered template; no name or attribute reaching C holds it.
BODY = "\0"
CHUNK_ELEMENTS = 1 << 20  # values formatted at a time (a multiple of every line length)


@dataclass
class Constant:
    name: str
    ctype: str
    count: int
    nbytes: int  # bytes in flash
    tensor: Tensor
    lz4: bool
    body: str = BODY


@dataclass
class Decompress:
    blob: str
    blob_bytes: int
    offset: int
    raw_bytes: int


@dataclass
class Call:
    index: int
    comment: str
    kernel: str
    params_type: str
    params: list[tuple[str, int]]
    args: list[str]
    output: str
    output_bytes: int
    decompress: list[Decompress]
    tiled: Tiled | None = None


@dataclass
class Tiled:
    """A call inside a tiled run (kiln.plan.budget): one parameter struct per distinct tile, pointer deltas per tile."""

    tiles: int
    variants: list[list[tuple[str, int]]]
    index: list[int]
    index_type: str
    in_delta: list[int] | None
    out_delta: list[int] | None
    gather: list[list[tuple[str, int]]] | None  # kiln_copy_part of each tile's patch into `gather_to`
    gather_from: str
    gather_to: int
    scatter: list[list[tuple[str, int]]] | None  # kiln_copy_part of each output tile from `scatter_from` into place
    scatter_from: int
    scatter_to: str
    scatter_last: list[list[tuple[str, int]]] | None  # copies after the loop (pieces computed before their copy)
    first: bool
    last: bool
    length: int  # layers in the run


def generate(graph: Graph, model: str, config: dict) -> dict[str, bytes]:
    """Render the C source and header of `graph` for model `model`."""
    return {name: data if isinstance(data, bytes) else b"".join(data) for name, data in stream(graph, model, config).items()}


def stream(graph: Graph, model: str, config: dict) -> dict[str, bytes | Iterator[bytes]]:
    """`generate`'s files, the source as chunks made while it is written (the bytes are the same)."""
    check_model_name(model, "codegen")
    for key, problem in (("prefix", identifier_problem), ("weights_section", section_problem)):
        text = problem(config[key])
        if text:
            raise KilnError(f"model {model!r}: codegen.{key}: {text}")
    prefix = symbol_prefix(model, config)
    constants, const_names = _constants(graph)  # checked here, written later
    calls = [_call(graph, i, n, const_names) for i, n in enumerate(graph.nodes) if n.attrs.get("kernel")]
    runs = ([graph.meta["tiled_run"]] if "tiled_run" in graph.meta else []) + [[s, s + 1] for s in graph.meta.get("in_place_steps", [])]
    for call in calls:
        for start, stop in runs:
            if start <= call.index < stop:
                _tile(graph, call, first=call.index == start, last=call.index == stop - 1, length=stop - start)
    ctx = {
        "model": c_text(model),
        "prefix": prefix,
        "guard": f"KILN_{prefix.upper()}_H",
        "macro": prefix.upper(),
        "arena_size": int(graph.meta["arena_size"]),
        "alignment": int(graph.meta["alignment"]),
        "weight_bytes": sum(c.nbytes for c in constants),
        "lz4": bool(graph.meta.get("lz4", 0)),
        "section": config["weights_section"],
        "constants": constants,
        "calls": calls,
        "inputs": [_io_info(graph, n, i) for i, n in enumerate(graph.inputs)],
        "outputs": [_io_info(graph, n, i) for i, n in enumerate(graph.outputs)],
    }
    header = _ENV.get_template("model.h.j2").render(ctx)
    source = _ENV.get_template("model.c.j2").render(ctx, header=f"{model}.h").split(BODY)
    if len(source) != len(constants) + 1:
        raise RuntimeError(f"model {model!r}: {len(source) - 1} constant array markers in the rendered source, {len(constants)} constants")
    return {f"{model}.c": _source_chunks(source, constants), f"{model}.h": header.encode()}


def _source_chunks(parts: list[str], constants: list[Constant]) -> Iterator[bytes]:
    for text, c in zip(parts, constants):
        yield text.encode()
        yield from _array_chunks(np.frombuffer(_lz4_block(c.tensor), np.uint8) if c.lz4 else c.tensor.data)
    yield parts[-1].encode()


def _constants(graph: Graph) -> tuple[list[Constant], dict[str, str]]:
    """Constants in order of first use, named by that order (never by model-file names).

    A constant the plan marked `lz4_bytes` is emitted as its LZ4 block (bytes).
    """
    names: dict[str, str] = {}
    out = []
    for n in graph.nodes:
        if not n.attrs.get("kernel"):
            continue
        for i in n.inputs:
            t = graph.tensors.get(i)
            if t is None or not t.is_constant or i in names:
                continue
            names[i] = f"k_const{len(names)}"
            if "lz4_bytes" in t.attrs:
                size = int(t.attrs["lz4_bytes"])
                out.append(Constant(names[i], "uint8_t", size, size, t, lz4=True))
            else:
                _check_literals(t)
                out.append(Constant(names[i], _ctype(t, n.name), max(t.size, 1), t.nbytes, t, lz4=False))
    return out, names


def _lz4_block(t: Tensor) -> bytes:
    blob = compress(t.data)
    if len(blob) != int(t.attrs["lz4_bytes"]):
        raise KilnError(f"constant {t.name!r}: LZ4 block is {len(blob)} bytes, the plan sized it "
                        f"{t.attrs['lz4_bytes']}; plan and codegen ran with different lz4 libraries")
    return blob


def _ctype(t: Tensor, where: str) -> str:
    if t.dtype not in C_TYPES:
        raise KilnError(f"tensor {t.name!r} used by {where!r}: dtype {t.dtype} has no C type")
    return C_TYPES[t.dtype]


def _check_literals(t: Tensor) -> None:
    if t.dtype == "float32" and not np.all(np.isfinite(t.data)):
        bad = float(t.data.ravel()[~np.isfinite(t.data.ravel())][0])
        raise KilnError(f"constant value {bad} has no C literal")


def _array_chunks(data: np.ndarray) -> Iterator[bytes]:
    """An array's values as C initializer text: 16 per line (floats 8, as exact hexadecimal literals), in chunks."""
    flat = data.ravel()
    if flat.size == 0:
        yield b"0"
        return
    per_line = 8 if flat.dtype == np.float32 else 16
    for start in range(0, flat.size, CHUNK_ELEMENTS):
        part = flat[start : start + CHUNK_ELEMENTS]
        if start:
            yield b",\n    "
        if flat.dtype in (np.int8, np.uint8):
            yield _byte_values(part, per_line)
        else:
            text = [_float_literal(v) for v in part.tolist()] if flat.dtype == np.float32 else [str(v) for v in part.tolist()]
            yield ",\n    ".join(", ".join(text[i : i + per_line]) for i in range(0, len(text), per_line)).encode()


def _byte_table(values: range, last: bool) -> np.ndarray:
    """Row v - values.start: the text of v, then the separator that follows it (", ", or ",\n    " ending a line),
    zero-padded to a common width."""
    table = np.zeros((len(values), 10), np.uint8)
    for row, v in enumerate(values):
        text = (str(v) + (",\n    " if last else ", ")).encode()
        table[row, : len(text)] = np.frombuffer(text, np.uint8)
    return table


_BYTE_TABLES = {np.dtype(np.int8): (range(-128, 128), _byte_table(range(-128, 128), False), _byte_table(range(-128, 128), True)),
                np.dtype(np.uint8): (range(256), _byte_table(range(256), False), _byte_table(range(256), True))}


def _byte_values(part: np.ndarray, per_line: int) -> bytes:
    """8-bit values as text, by table lookup instead of one Python string per value (weights are most of a model)."""
    values, inside, ending = _BYTE_TABLES[part.dtype]
    rows = np.asarray(part, np.int64) - values.start
    line_end = (np.arange(part.size) % per_line == per_line - 1)[:, None]
    text = np.where(line_end, ending[rows], inside[rows])
    text[-1, len(str(int(part[-1]))):] = 0  # no separator after a chunk's last value
    return text[text != 0].tobytes()


def _float_literal(v: float) -> str:
    """An exact C99 float literal (hexadecimal), so weights round-trip bit for bit."""
    return f"{float(v).hex()}f"


def _pointer(graph: Graph, name: str, const: bool) -> str:
    t = graph.tensors[name]
    ctype = C_TYPES[t.dtype]
    memory, offset = t.attrs["memory"], int(t.attrs["offset"])
    qual = "const " if const else ""
    if memory == "arena":
        return f"({qual}{ctype} *)(arena + {offset})"
    index = (graph.inputs if memory == "input" else graph.outputs).index(_root(graph, name))
    array = "inputs" if memory == "input" else "outputs"
    return f"({qual}{ctype} *){array}[{index}]"


def _root(graph: Graph, name: str) -> str:
    """The graph input/output that a caller-memory tensor aliases."""
    if name in graph.inputs or name in graph.outputs:
        return name
    producers = graph.producers()
    node = producers.get(name)
    while node is not None and node.attrs.get("kernel") == "":
        name = node.inputs[0]
        if name in graph.inputs:
            return name
        node = producers.get(name)
    consumers = graph.consumers()
    for user in consumers.get(name, []):
        if user.attrs.get("kernel") == "":
            return _root(graph, user.outputs[0])
    raise KilnError(f"tensor {name!r} is in caller memory but aliases no graph input or output")


def _call(graph: Graph, index: int, node, const_names: dict[str, str]) -> Call:
    scratch = list(node.attrs.get("lz4_scratch", [-1] * len(node.inputs)))
    args, decompress = [], []
    for i, offset in zip(node.inputs, scratch):
        t = graph.tensors[i]
        if not t.is_constant:
            args.append(_pointer(graph, i, const=True))
        elif offset >= 0:
            args.append(f"(const {C_TYPES[t.dtype]} *)(arena + {offset})")
            if all(d.offset != offset for d in decompress):
                decompress.append(Decompress(const_names[i], int(t.attrs["lz4_bytes"]), int(offset), t.nbytes))
        else:
            args.append(const_names[i])
    args += [_pointer(graph, o, const=False) for o in node.outputs]
    if "scratch_bytes" in node.attrs:  # the kernel's scratch region, placed by the plan (-1: none)
        offset = int(node.attrs["scratch"])
        args.append(f"(void *)(arena + {offset})" if offset >= 0 else "NULL")
    out = graph.tensors[node.outputs[0]]
    return Call(
        index=index,
        comment=c_text(f"{node.label} ({node.op})"),
        kernel=c_identifier(node.attrs["kernel"]),
        params_type=c_identifier(node.attrs["params_type"]),
        params=list(zip(node.attrs["param_names"], node.attrs["params"])),
        args=args,
        output=_pointer(graph, node.outputs[0], const=True),
        output_bytes=out.nbytes,
        decompress=decompress,
    )


def _tile(graph: Graph, call: Call, first: bool, last: bool, length: int) -> None:
    """Turn `call` into a call per tile: the plan gave each tile's parameters and where its windows lie."""
    node = graph.nodes[call.index]
    names = list(node.attrs["param_names"])
    flat = [int(v) for v in node.attrs["tile_params"]]
    variants = [list(zip(names, flat[k : k + len(names)])) for k in range(0, len(flat), len(names))]
    index = [int(v) for v in node.attrs["tile_index"]]
    in_delta, out_delta = [int(v) for v in node.attrs["tile_in"]], [int(v) for v in node.attrs["tile_out"]]
    copy_fields = [str(f) for f in node.attrs.get("tile_copy_fields", [])]

    def copies(key: str) -> list[list[tuple[str, int]]] | None:
        if key not in node.attrs:
            return None
        values = [int(v) for v in node.attrs[key]]
        return [list(zip(copy_fields, values[k : k + len(copy_fields)])) for k in range(0, len(values), len(copy_fields))]

    gather, scatter, scatter_last = copies("tile_gather"), copies("tile_scatter"), copies("tile_scatter_last")
    x_arg, y_arg = 0, len(node.inputs)
    tiled = Tiled(len(index), variants, index, "uint8_t" if len(variants) < 256 else "uint16_t",
                  in_delta if any(in_delta) else None, out_delta if any(out_delta) else None,
                  gather, call.args[x_arg], int(node.attrs.get("tile_gather_to", -1)),
                  scatter, int(node.attrs.get("tile_scatter_from", -1)), call.args[y_arg], scatter_last,
                  first, last, length)
    if gather:
        call.args[x_arg] = f"(const int8_t *)(arena + {tiled.gather_to})"
    elif tiled.in_delta:
        call.args[x_arg] = f"{call.args[x_arg]} + k_tile_in{call.index}[t]"
    if scatter:
        slot = f" + k_tile_out{call.index}[t]" if tiled.out_delta else ""
        call.args[y_arg] = f"(int8_t *)(arena + {tiled.scatter_from}){slot}"
    elif tiled.out_delta:
        call.args[y_arg] = f"{call.args[y_arg]} + k_tile_out{call.index}[t]"
    call.tiled = tiled


def _io_info(graph: Graph, name: str, index: int) -> dict:
    t = graph.tensors[name]
    if t.dtype not in DTYPE_CODES:
        raise KilnError(f"graph {graph.name!r}: input/output {name!r} is {t.dtype}; only int8, uint8 and float32 cross the model boundary")
    q = t.quant
    in_arena = t.attrs.get("memory") == "arena"
    return {
        "index": index,
        "name": c_text(t.name, 40),
        "dtype": DTYPE_CODES[t.dtype],
        "shape": list(t.shape),
        "bytes": t.nbytes,
        "scale": repr(float(q.scale[0])) if q else "1.0",
        "zero_point": q.zero_point[0] if q else 0,
        "offset": int(t.attrs["offset"]) if in_arena else -1,
    }
