"""Reading a .tflite file: the flatbuffer through the schema bindings `tflite-micro` ships, checked.

The bytes are hostile until checked: the file identifier and schema version, one subgraph, every
index (buffer, tensor, operator code) in range, every buffer inside the file and of the size its
tensor's shape needs. A file that is not a flatbuffer, or a truncated one, fails while the
bindings unpack it; that failure becomes one line too. Quantization is taken as TFLM's reader takes
it and checked where it is read (`kiln.frontends.tflite.quant`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

from kiln.errors import KilnError

IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3
OPCODE_NAMES = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
TYPE_NAMES = {v: k for k, v in vars(tfl.TensorType).items() if not k.startswith("_")}
# TFLite tensor types Kiln reads, as NumPy dtypes (INT4 is unpacked to int8 on reading).
NUMPY_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16,
               "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_, "INT4": np.int8}
ACTIVATIONS = {v: k for k, v in vars(tfl.ActivationFunctionType).items() if not k.startswith("_")}


@dataclass
class TflQuant:
    scale: np.ndarray  # float32, one per channel
    zero_point: np.ndarray  # int64, one per scale
    axis: int | None  # None: one scale; else the file's quantized_dimension (checked where it is read)


@dataclass
class TflTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    type: str  # TensorType name, e.g. "INT8"
    quant: TflQuant | None
    data: np.ndarray | None  # constant contents, shaped


@dataclass
class TflOperator:
    index: int
    code: str  # BuiltinOperator name, or "CUSTOM(<name>)"
    inputs: list[int]  # -1: absent optional input
    outputs: list[int]
    options: Any  # the bindings' options object (e.g. Conv2DOptionsT) or None


@dataclass
class TflModel:
    tensors: list[TflTensor]
    operators: list[TflOperator]
    inputs: list[int]
    outputs: list[int]


def read_tflite(path: Path) -> TflModel:
    """The checked contents of a .tflite file; any defect is a KilnError naming the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KilnError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) < 8:
        raise KilnError(f"{path}: {len(data)} bytes is too short for a TFLite flatbuffer")
    if data[4:8] != IDENTIFIER:
        raise KilnError(f"{path}: not a TFLite file (file identifier {data[4:8]!r}, expected {IDENTIFIER!r})")
    try:
        model = tfl.ModelT.InitFromPackedBuf(data, 0)
    except Exception as exc:  # the bindings raise whatever a bad offset leads to (struct, index, value errors)
        raise KilnError(f"{path}: corrupt or truncated TFLite flatbuffer ({type(exc).__name__}: {exc})") from None
    return _check(path, data, model)


def _fail(path: Path, what: str) -> KilnError:
    return KilnError(f"{path}: {what}")


def _check(path: Path, raw: bytes, model: Any) -> TflModel:
    if model.version != SCHEMA_VERSION:
        raise _fail(path, f"TFLite schema version {model.version}, expected {SCHEMA_VERSION}")
    subgraphs = model.subgraphs or []
    if len(subgraphs) != 1:
        raise _fail(path, f"{len(subgraphs)} subgraphs; Kiln compiles single-subgraph models (no control flow such as WHILE or IF)")
    sg = subgraphs[0]
    buffers = [_buffer(path, raw, i, b) for i, b in enumerate(model.buffers or [])]
    codes = [_opcode(c) for c in (model.operatorCodes or [])]
    tensors = [_tensor(path, i, t, buffers) for i, t in enumerate(sg.tensors or [])]
    count = len(tensors)

    def indices(values: Any, what: str, optional: bool = False) -> list[int]:
        out = [int(v) for v in (values if values is not None else [])]
        for v in out:
            if not (0 <= v < count or (optional and v == -1)):
                raise _fail(path, f"{what} names tensor {v}, the subgraph has {count}")
        return out

    operators = []
    for i, op in enumerate(sg.operators or []):
        if not 0 <= op.opcodeIndex < len(codes):
            raise _fail(path, f"operator {i}: operator code index {op.opcodeIndex} out of range ({len(codes)} codes)")
        operators.append(TflOperator(i, codes[op.opcodeIndex], indices(op.inputs, f"operator {i} input", True),
                                     indices(op.outputs, f"operator {i} output"), op.builtinOptions))
    return TflModel(tensors, operators, indices(sg.inputs, "subgraph input"), indices(sg.outputs, "subgraph output"))


def _opcode(code: Any) -> str:
    value = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    if value == tfl.BuiltinOperator.CUSTOM:
        name = code.customCode.decode("utf-8", "replace") if code.customCode else ""
        return f"CUSTOM({name})"
    return OPCODE_NAMES.get(value, f"builtin operator {value}")


def _buffer(path: Path, raw: bytes, index: int, buf: Any) -> bytes | None:
    """A buffer's bytes: in the flatbuffer, or (files over 2 GB) at an offset past it, inside the file."""
    offset, size = int(buf.offset or 0), int(buf.size or 0)
    if offset > 1:
        if offset + size > len(raw):
            raise _fail(path, f"buffer {index} lies at bytes {offset}..{offset + size}, outside the file ({len(raw)} bytes)")
        return raw[offset:offset + size]
    if buf.data is None or len(buf.data) == 0:
        return None
    return np.asarray(buf.data, np.uint8).tobytes()


def _tensor(path: Path, index: int, t: Any, buffers: list[bytes | None]) -> TflTensor:
    name = t.name.decode("utf-8", "replace") if isinstance(t.name, bytes) else str(t.name or "")
    where = f"tensor {index} {name!r}"
    type_name = TYPE_NAMES.get(int(t.type), f"type {t.type}")
    shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
    if any(d < 0 for d in shape):
        raise _fail(path, f"{where}: shape {list(shape)} has an unknown dimension (Kiln needs static shapes)")
    if t.sparsity is not None:
        raise _fail(path, f"{where}: sparse tensors are not supported")
    if not 0 <= t.buffer < max(len(buffers), 1):
        raise _fail(path, f"{where}: buffer index {t.buffer} out of range ({len(buffers)} buffers)")
    contents = buffers[t.buffer] if buffers else None
    data = None if contents is None else _contents(path, where, contents, type_name, shape)
    return TflTensor(index, name, shape, type_name, _quant(t.quantization), data)


def _contents(path: Path, where: str, contents: bytes, type_name: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype = NUMPY_TYPES.get(type_name)
    if dtype is None:
        raise _fail(path, f"{where}: constant of type {type_name} is not supported")
    count = int(np.prod(shape, dtype=np.int64))
    need = (count + 1) // 2 if type_name == "INT4" else count * np.dtype(dtype).itemsize
    if len(contents) != need:
        raise _fail(path, f"{where}: buffer holds {len(contents)} bytes, shape {list(shape)} of {type_name} needs {need}")
    if type_name == "INT4":  # two values a byte, low nibble first, sign-extended
        packed = np.frombuffer(contents, np.uint8)
        nibbles = np.stack([packed & 0xF, packed >> 4], axis=1).ravel()[:count].astype(np.int8)
        return np.where(nibbles > 7, nibbles - 16, nibbles).astype(np.int8).reshape(shape)
    return np.frombuffer(contents, dtype).reshape(shape).copy()


def _quant(q: Any) -> TflQuant | None:
    """The quantization fields as TFLM's reader takes them (`InitializeTfLiteTensorFromFlatbuffer`): present only
    when the file gives both scales and zero points; one zero point per scale, or the first for all; the quantized
    dimension and the values unchecked (which of them count depends on how the tensor is used: `tflite/quant.py`)."""
    if q is None or q.scale is None or len(q.scale) == 0 or q.zeroPoint is None or len(q.zeroPoint) == 0:
        return None
    scale = np.asarray(q.scale, np.float32).ravel()
    zp = np.asarray(q.zeroPoint, np.int64).ravel()
    if len(zp) != len(scale):
        zp = np.full(len(scale), zp[0], np.int64)
    return TflQuant(scale, zp, int(q.quantizedDimension) if len(scale) > 1 else None)
