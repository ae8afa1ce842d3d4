"""`.kir` files: the IR as a size-prefixed FlatBuffer (schema `kir.fbs`).

A file is a `Kir` table: the schema version, the level (which stage wrote
the graph), a SHA-256 checksum, and the graph as a nested FlatBuffer. Output
is canonical: tensors and attributes are written sorted by name, so the same
graph always gives the same bytes. Loading checks, before it decodes the
graph, the size prefix (a truncated file), the file identifier (a foreign
file), the schema version, the checksum over version, level and graph bytes
(any corrupted byte), and, when the caller says which it reads, the level (a
stage's input replaced by another stage's output). A file that fails is never
used: the error names it and the way to rebuild it.
"""
from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import flatbuffers
import numpy as np

from kiln.atomic import write_atomic
from kiln.errors import KilnError
from kiln.ir.fb import Attr as FbAttr
from kiln.ir.fb import Graph as FbGraph
from kiln.ir.fb import Kir as FbKir
from kiln.ir.fb import Node as FbNode
from kiln.ir.fb import QuantParams as FbQuant
from kiln.ir.fb import Tensor as FbTensor
from kiln.ir.fb.AttrKind import AttrKind
from kiln.ir.fb.DType import DType
from kiln.ir.fb.Level import Level
from kiln.ir.graph import DTYPES, AttrValue, Graph, Node, QuantParams, Tensor

FILE_IDENTIFIER = b"KIR1"
SCHEMA_VERSION = 2
# Levels by their code in the file: "none" for graphs no stage wrote, then each stage's output.
LEVELS = ("none", "imported", "normalized", "quantized", "lowered", "planned")
REBUILD = "delete it and rebuild (`scons`, or `kiln compile` again)"

_DTYPE_CODES = {name: getattr(DType, name) for name in DTYPES}
_DTYPE_NAMES = {code: name for name, code in _DTYPE_CODES.items()}
assert all(getattr(Level, name) == code for code, name in enumerate(LEVELS))


def dumps(graph: Graph, level: str = "none") -> bytes:
    """The canonical bytes of `graph` as a .kir file written at `level` (one of LEVELS)."""
    return b"".join(dump_chunks(graph, level))


def dump_chunks(graph: Graph, level: str = "none") -> list[bytes | memoryview]:
    """`dumps` as pieces to write one after another: the graph's bytes are not copied again to frame them."""
    if level not in LEVELS:
        raise ValueError(f"unknown .kir level {level!r} (levels: {', '.join(LEVELS)})")
    payload = _graph_bytes(graph)
    code = LEVELS.index(level)
    head, tail = _frame(len(payload), _checksum(SCHEMA_VERSION, code, payload), code)
    return [head, payload, tail]


def _frame(length: int, checksum: bytes, code: int) -> tuple[bytes, bytes]:
    """The `Kir` table's bytes before and after a payload of `length` bytes.

    They are built around a stand-in payload of the same length modulo 8, so
    every alignment and padding comes out the same; then the three values
    that span the payload are corrected: the size prefix, the payload's
    length and the offset from the table to the checksum, which lies beyond
    the payload.
    """
    stand_in = length % 8
    b = flatbuffers.Builder(256)
    checksum_vec = b.CreateByteVector(checksum)
    nested = b.CreateByteVector(bytes(stand_in))
    FbKir.Start(b)
    FbKir.AddSchemaVersion(b, SCHEMA_VERSION)
    FbKir.AddLevel(b, code)
    FbKir.AddChecksum(b, checksum_vec)
    FbKir.AddPayload(b, nested)
    b.FinishSizePrefixed(FbKir.End(b), FILE_IDENTIFIER)
    out = bytearray(b.Output())
    grow = length - stand_in
    payload_at = len(out) - nested  # the payload vector's length field, then its bytes
    root = FbKir.Kir.GetRootAs(out, 4)
    checksum_field = root._tab.Pos + root._tab.Offset(8)  # the table's offset to the checksum vector
    for at, value in ((0, struct.unpack_from("<I", out, 0)[0] + grow), (payload_at, length),
                      (checksum_field, struct.unpack_from("<I", out, checksum_field)[0] + grow)):
        struct.pack_into("<I", out, at, value)
    return bytes(out[: payload_at + 4]), bytes(out[payload_at + 4 + stand_in :])


def loads(buf: bytes, path: str = "<bytes>", level: str | None = None) -> Graph:
    """The graph in .kir bytes `buf` (named `path` in errors); `level`, when given, is the only level accepted."""
    if len(buf) < 12:
        raise KilnError(f"{path}: not a .kir file (too short: {len(buf)} bytes)")
    (size,) = struct.unpack_from("<I", buf, 0)
    if buf[8:12] != FILE_IDENTIFIER:
        raise KilnError(f"{path}: not a .kir file (file identifier {bytes(buf[8:12])!r}, expected {FILE_IDENTIFIER!r})")
    if size != len(buf) - 4:
        raise KilnError(f"{path}: truncated or padded .kir file ({len(buf) - 4} bytes after the size prefix, "
                        f"expected {size}); {REBUILD}")
    try:
        root = FbKir.Kir.GetRootAs(buf, 4)
        version = root.SchemaVersion()
        if version != SCHEMA_VERSION:
            raise KilnError(f"{path}: .kir schema version {version}, this Kiln reads version {SCHEMA_VERSION}; {REBUILD}")
        code = root.Level()
        checksum = root.ChecksumAsNumpy().tobytes() if root.ChecksumLength() else b""
        payload = memoryview(root.PayloadAsNumpy() if root.PayloadLength() else b"")  # a view: not copied
    except KilnError:
        raise
    except Exception as exc:  # a corrupt buffer surfaces as any decoding error
        raise KilnError(f"{path}: corrupt .kir file ({type(exc).__name__} while reading its header); {REBUILD}") from None
    if code >= len(LEVELS) or checksum != _checksum(version, code, payload):
        raise KilnError(f"{path}: corrupt .kir file (its checksum does not match its content); {REBUILD}")
    if level is not None and LEVELS[code] != level:
        raise KilnError(f"{path}: holds a graph of level {LEVELS[code]!r}, but a {level!r} graph is read here "
                        f"(a file from another stage); {REBUILD}")
    try:
        return _graph(FbGraph.Graph.GetRootAs(payload, 0))
    except Exception as exc:  # checksummed, so only a file written to look valid gets here
        raise KilnError(f"{path}: corrupt .kir file ({type(exc).__name__}: {exc}); {REBUILD}") from None


def save(graph: Graph, path: str | os.PathLike, level: str = "none") -> None:
    write_atomic(path, dump_chunks(graph, level))


def load(path: str | os.PathLike, level: str | None = None) -> Graph:
    """The graph in .kir file `path`, checked; `level`, when given, is the only level accepted."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KilnError(f"{path}: cannot read ({exc.strerror})") from None
    return loads(data, str(path), level)


def _checksum(version: int, level: int, payload: bytes | memoryview) -> bytes:
    digest = hashlib.sha256(b"KIR" + struct.pack("<IB", version, level))
    digest.update(payload)
    return digest.digest()


class _Builder(flatbuffers.Builder):
    """A builder that copies an array into its buffer directly (the stock one, and a slice assignment to its
    bytearray, copy it to a temporary first)."""

    def CreateNumpyVector(self, x: np.ndarray) -> int:  # noqa: N802 (flatbuffers' name)
        if x.ndim != 1 or x.dtype.byteorder == ">" or x.dtype.kind not in "biuf":
            return super().CreateNumpyVector(x)
        self.StartVector(x.itemsize, x.size, x.dtype.alignment)
        self.head = self.head - x.nbytes
        np.frombuffer(self.Bytes, np.uint8, x.nbytes, self.head)[:] = np.ascontiguousarray(x).view(np.uint8).ravel()
        self.vectorNumElems = x.size
        return self.EndVector()


def _size_estimate(graph: Graph) -> int:
    """More than the graph's FlatBuffer takes, so the builder never grows (growing copies the whole buffer)."""
    def attrs(values: dict[str, AttrValue]) -> int:
        return sum(96 + len(k) + (len(v) * 16 if isinstance(v, (list, tuple)) else len(v) if isinstance(v, str) else 8)
                   for k, v in values.items())

    tensors = sum(256 + 2 * len(t.name) + 8 * len(t.shape) + len(t.layout) + attrs(t.attrs) + (t.data.nbytes if t.data is not None else 0)
                  + (8 * len(t.quant.scale) + 64 if t.quant is not None else 0) for t in graph.tensors.values())
    nodes = sum(256 + len(n.name) + len(n.op) + len(n.source) + len(n.source_name) + sum(16 + len(i) for i in n.inputs + n.outputs) + attrs(n.attrs)
                for n in graph.nodes)
    return 4096 + tensors + nodes + attrs(graph.meta) + sum(16 + len(i) for i in graph.inputs + graph.outputs)


def _graph_bytes(graph: Graph) -> memoryview:
    """The graph as a FlatBuffer: a view of the builder's buffer (copying it would double the model in memory)."""
    b = _Builder(_size_estimate(graph))
    tensors = [_tensor(b, graph.tensors[k]) for k in sorted(graph.tensors)]
    nodes = [_node(b, n) for n in graph.nodes]
    name = b.CreateString(graph.name)
    inputs = _strings(b, graph.inputs)
    outputs = _strings(b, graph.outputs)
    meta = _attrs(b, graph.meta)
    tensors_vec = _table_vector(b, tensors)
    nodes_vec = _table_vector(b, nodes)
    FbGraph.Start(b)
    FbGraph.AddName(b, name)
    FbGraph.AddTensors(b, tensors_vec)
    FbGraph.AddNodes(b, nodes_vec)
    FbGraph.AddInputs(b, inputs)
    FbGraph.AddOutputs(b, outputs)
    FbGraph.AddMeta(b, meta)
    b.Finish(FbGraph.End(b))
    return memoryview(b.Bytes)[b.Head() :]


# -- writing ---------------------------------------------------------------
def _strings(b: flatbuffers.Builder, items: list[str]) -> int:
    return _table_vector(b, [b.CreateString(s) for s in items])


def _table_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _attrs(b: flatbuffers.Builder, attrs: dict[str, AttrValue]) -> int:
    return _table_vector(b, [_attr(b, k, attrs[k]) for k in sorted(attrs)])


def _attr(b: flatbuffers.Builder, name: str, value: AttrValue) -> int:
    name_off = b.CreateString(name)
    payload = None
    if isinstance(value, (bool, int, np.integer)):
        kind = AttrKind.int
    elif isinstance(value, (float, np.floating)):
        kind = AttrKind.float
    elif isinstance(value, str):
        kind, payload = AttrKind.string, b.CreateString(value)
    elif isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value) and value:
            kind, payload = AttrKind.strings, _strings(b, list(value))
        elif all(isinstance(v, (bool, int, np.integer)) for v in value):
            kind, payload = AttrKind.ints, b.CreateNumpyVector(np.asarray(value, dtype="<i8"))
        else:
            kind, payload = AttrKind.floats, b.CreateNumpyVector(np.asarray(value, dtype="<f8"))
    else:
        raise TypeError(f"attribute {name!r}: unsupported value {value!r}")
    FbAttr.Start(b)
    FbAttr.AddName(b, name_off)
    FbAttr.AddKind(b, kind)
    if kind == AttrKind.int:
        FbAttr.AddI(b, int(value))
    elif kind == AttrKind.float:
        FbAttr.AddF(b, float(value))
    elif kind == AttrKind.string:
        FbAttr.AddS(b, payload)
    elif kind == AttrKind.ints:
        FbAttr.AddInts(b, payload)
    elif kind == AttrKind.floats:
        FbAttr.AddFloats(b, payload)
    else:
        FbAttr.AddStrings(b, payload)
    return FbAttr.End(b)


def _tensor(b: flatbuffers.Builder, t: Tensor) -> int:
    name = b.CreateString(t.name)
    shape = b.CreateNumpyVector(np.asarray(t.shape, dtype="<i8"))
    layout = b.CreateString(t.layout)
    quant = None
    if t.quant is not None:
        scale = b.CreateNumpyVector(np.asarray(t.quant.scale, dtype="<f4"))
        zp = b.CreateNumpyVector(np.asarray(t.quant.zero_point, dtype="<i4"))
        FbQuant.Start(b)
        FbQuant.AddScale(b, scale)
        FbQuant.AddZeroPoint(b, zp)
        FbQuant.AddAxis(b, -1 if t.quant.axis is None else t.quant.axis)
        quant = FbQuant.End(b)
    data = None
    if t.data is not None:
        raw = np.ascontiguousarray(t.data, dtype=DTYPES[t.dtype].newbyteorder("<")).view(np.uint8).ravel()
        data = b.CreateNumpyVector(raw)
    attrs = _attrs(b, t.attrs)
    FbTensor.Start(b)
    FbTensor.AddName(b, name)
    FbTensor.AddShape(b, shape)
    FbTensor.AddDtype(b, _DTYPE_CODES[t.dtype])
    FbTensor.AddLayout(b, layout)
    if quant is not None:
        FbTensor.AddQuant(b, quant)
    if data is not None:
        FbTensor.AddData(b, data)
    FbTensor.AddAttrs(b, attrs)
    return FbTensor.End(b)


def _node(b: flatbuffers.Builder, n: Node) -> int:
    name = b.CreateString(n.name)
    op = b.CreateString(n.op)
    inputs = _strings(b, n.inputs)
    outputs = _strings(b, n.outputs)
    attrs = _attrs(b, n.attrs)
    source = b.CreateString(n.source)
    source_name = b.CreateString(n.source_name)
    FbNode.Start(b)
    FbNode.AddName(b, name)
    FbNode.AddOp(b, op)
    FbNode.AddInputs(b, inputs)
    FbNode.AddOutputs(b, outputs)
    FbNode.AddAttrs(b, attrs)
    FbNode.AddSource(b, source)
    FbNode.AddSourceName(b, source_name)
    return FbNode.End(b)


# -- reading ---------------------------------------------------------------
def _str(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8")


def _read_attrs(count: int, get) -> dict[str, AttrValue]:
    out: dict[str, AttrValue] = {}
    for i in range(count):
        a = get(i)
        kind = a.Kind()
        if kind == AttrKind.int:
            value: AttrValue = int(a.I())
        elif kind == AttrKind.float:
            value = float(a.F())
        elif kind == AttrKind.string:
            value = _str(a.S())
        elif kind == AttrKind.ints:
            value = [int(v) for v in a.IntsAsNumpy()] if a.IntsLength() else []
        elif kind == AttrKind.floats:
            value = [float(v) for v in a.FloatsAsNumpy()] if a.FloatsLength() else []
        elif kind == AttrKind.strings:
            value = [_str(a.Strings(j)) for j in range(a.StringsLength())]
        else:
            raise ValueError(f"unknown attribute kind {kind}")
        out[_str(a.Name())] = value
    return out


def _graph(root: FbGraph.Graph) -> Graph:
    g = Graph(name=_str(root.Name()))
    for i in range(root.TensorsLength()):
        t = root.Tensors(i)
        dtype = _DTYPE_NAMES[t.Dtype()]
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        quant = None
        q = t.Quant()
        if q is not None:
            scale = tuple(float(s) for s in q.ScaleAsNumpy()) if q.ScaleLength() else ()
            zp = tuple(int(z) for z in q.ZeroPointAsNumpy()) if q.ZeroPointLength() else ()
            quant = QuantParams(scale, zp, None if q.Axis() < 0 else q.Axis())
        data = None
        if not t.DataIsNone():
            raw = t.DataAsNumpy() if t.DataLength() else np.zeros(0, np.uint8)
            data = raw.view(DTYPES[dtype].newbyteorder("<")).astype(DTYPES[dtype], copy=False)  # a view of the file
            data = (data if data.flags.aligned else data.copy()).reshape(shape)
        name = _str(t.Name())
        g.tensors[name] = Tensor(name, shape, dtype, _str(t.Layout()), quant, data, _read_attrs(t.AttrsLength(), t.Attrs))
    for i in range(root.NodesLength()):
        n = root.Nodes(i)
        g.nodes.append(
            Node(
                name=_str(n.Name()),
                op=_str(n.Op()),
                inputs=[_str(n.Inputs(j)) for j in range(n.InputsLength())],
                outputs=[_str(n.Outputs(j)) for j in range(n.OutputsLength())],
                attrs=_read_attrs(n.AttrsLength(), n.Attrs),
                source=_str(n.Source()),
                source_name=_str(n.SourceName()),
            )
        )
    g.inputs = [_str(root.Inputs(i)) for i in range(root.InputsLength())]
    g.outputs = [_str(root.Outputs(i)) for i in range(root.OutputsLength())]
    g.meta = _read_attrs(root.MetaLength(), root.Meta)
    return g

