"""Reading an ONNX file safely: parsing, external data, checking, input binding, shape inference."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import onnx
import onnx.inliner
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor, uses_external_data

from kiln.errors import KilnError, did_you_mean
from kiln.frontends.onnx.context import Unsupported
from kiln.frontends.onnx.handlers import onnx_dtype

Shape = tuple[int, ...]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_model(path: Path) -> onnx.ModelProto:
    """Parse, load external data from inside the model's folder only, and run the ONNX checker."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf reports a corrupt file as any of several errors
        raise KilnError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from None
    if not model.graph.output:
        raise KilnError(f"{path}: not a readable ONNX model (no graph outputs)")
    if len(model.graph.sparse_initializer):
        raise KilnError(f"{path}: sparse initializers are not supported")
    for tensor in _tensors(model.graph):
        if uses_external_data(tensor):
            _load_external(tensor, path)
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise KilnError(f"{path}: invalid ONNX model ({_first_line(exc)})") from None
    return onnx.inliner.inline_local_functions(model) if model.functions else model


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t


def _load_external(tensor: onnx.TensorProto, path: Path) -> None:
    """External data must stay inside the model's folder: no absolute path, no `..`, no symlink out."""
    base = path.parent.resolve()
    try:
        location = ExternalDataInfo(tensor).location
    except ValueError as exc:
        raise KilnError(f"{path}: tensor {tensor.name!r}: bad external data entry ({_first_line(exc)})") from None
    where = f"{path}: tensor {tensor.name!r}: external data file {location!r}"
    if not location:
        raise KilnError(f"{where}: no location given")
    if os.path.isabs(location):
        raise KilnError(f"{where} is an absolute path; external data must be inside the model's folder")
    if os.path.normpath(location).split(os.sep)[0] == os.pardir:
        raise KilnError(f"{where} leaves the model's folder; external data must be inside it")
    if not (base / location).resolve().is_relative_to(base):
        raise KilnError(f"{where} is a symlink to outside the model's folder; external data must be inside it")
    if not (base / location).is_file():
        raise KilnError(f"{where} does not exist (paths are relative to the model file's folder)")
    try:
        load_external_data_for_tensor(tensor, str(base))
    except (OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as exc:
        raise KilnError(f"{where}: cannot read ({_first_line(exc)})") from None


def default_opset(model: onnx.ModelProto, path: Path) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    newest = onnx.defs.onnx_opset_version()
    if not versions:
        raise KilnError(f"{path}: the model imports no default-domain ONNX opset")
    if not 7 <= versions[0] <= newest:
        raise KilnError(f"{path}: ONNX opset {versions[0]} is not supported (Kiln reads opsets 7 to {newest})")
    return versions[0]


def bind_inputs(model: onnx.ModelProto, inputs: dict[str, Any], path: Path) -> list[tuple[str, Shape, str]]:
    """Each graph input's static shape and dtype, free dimensions taken from the model.toml bindings.

    The bound dimensions are also written into `model`, so ONNX shape
    inference sees the shapes Kiln will use.
    """
    constant = {t.name for t in model.graph.initializer}
    real = [vi for vi in model.graph.input if vi.name not in constant]
    unknown = sorted(set(inputs) - {vi.name for vi in real})
    if unknown:
        names = [vi.name for vi in real]
        raise KilnError(f"{path}: inputs {', '.join(map(repr, unknown))} in model.toml are not inputs of the model"
                        f"{did_you_mean(unknown[0], names)} (it has {', '.join(map(repr, names))})")
    return [_bind(vi, inputs.get(vi.name) or {}, path) for vi in real]


def _bind(vi: onnx.ValueInfoProto, binding: dict[str, Any], path: Path) -> tuple[str, Shape, str]:
    where = f"{path}: input {vi.name!r}"
    if not vi.type.HasField("tensor_type"):
        raise KilnError(f"{where} is not a tensor")
    tt = vi.type.tensor_type
    try:
        dtype = onnx_dtype(tt.elem_type)
    except Unsupported as exc:
        raise KilnError(f"{where}: {exc}") from None
    if dtype == "int8":
        raise KilnError(f"{where}: an int8 graph input needs quantization parameters; give the model a float input (QDQ or the quantize stage sets int8)")
    if binding.get("dtype", dtype) != dtype:
        raise KilnError(f"{where}: model.toml says dtype {binding['dtype']}, the model has {dtype}")
    want = binding.get("shape")
    if not tt.HasField("shape"):
        if want is None:
            raise KilnError(f"{where} has no shape in the model; give its shape in model.toml")
        tt.shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in want)
    dims = tt.shape.dim
    if want is not None and (len(want) != len(dims) or any(not isinstance(d, int) or d <= 0 for d in want)):
        raise KilnError(f"{where}: model.toml shape {list(want)} is not {len(dims)} positive integers (the model's rank)")
    shape = []
    for i, dim in enumerate(dims):
        label = f"dimension {i}" + (f" ({dim.dim_param!r})" if dim.dim_param else "")
        fixed = dim.dim_value if dim.HasField("dim_value") else None
        if want is None and fixed is None:
            raise KilnError(f"{where}: {label} is free; give the input's shape in model.toml")
        if want is not None and fixed is not None and want[i] != fixed:
            raise KilnError(f"{where}: model.toml gives {want[i]} for {label}, which the model fixes at {fixed}")
        dim.dim_value = want[i] if want is not None else fixed
        shape.append(dim.dim_value)
    return vi.name, tuple(shape), dtype


def onnx_shapes(model: onnx.ModelProto, path: Path, quiet: bool) -> dict[str, Shape]:
    """Static shapes from ONNX shape inference (strict); with `quiet`, a failure gives no shapes instead of an error."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as exc:
        if quiet:
            return {}
        raise KilnError(f"{path}: ONNX shape inference fails ({_first_line(exc)})") from None
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
    return shapes
