"""ONNX's own backend node tests, run through the ONNX frontend and the float reference.

The cases come from the `onnx` package (`onnx.backend.test.case.node`), built
offline by its case collector. A case is in scope when every node is an op
the frontend imports. Kiln needs shape parameters (Reshape shape, Slice
starts, Pad pads, Resize scales, axes, Clip bounds, Q/DQ parameters, ...) as
constants, so graph inputs feeding those slots become initializers holding
the data set's values; everything else stays a run-time input.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kiln.errors import KilnError
from kiln.frontends.onnx import import_onnx
from kiln.frontends.onnx.handlers import HANDLERS
from kiln.reference.executor import run

# Input positions that hold parameters rather than data.
PARAM_SLOTS = {
    "Reshape": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 2, 3}, "Resize": {1, 2, 3}, "Upsample": {1}, "Squeeze": {1},
    "Unsqueeze": {1}, "Split": {1}, "ReduceMean": {1}, "Clip": {1, 2}, "Range": {0, 1, 2}, "Dropout": {1, 2},
    "ConstantOfShape": {0}, "QuantizeLinear": {1, 2}, "DequantizeLinear": {0, 1, 2}, "LayerNormalization": {1, 2},
}
IN_SCOPE_DTYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL}
# Constant parameters may also be 8-bit: the quantized weights of a QDQ model.
IN_SCOPE_PARAM_DTYPES = IN_SCOPE_DTYPES | {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}

SKIP = {
    **{f"test_training_dropout{s}": "training-mode Dropout (random) is out of scope: Kiln imports inference graphs"
       for s in ("", "_default", "_default_mask", "_mask", "_zero_ratio", "_zero_ratio_mask")},
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool's Indices output is out of scope",
    **{f"test_convtranspose_{s}": "1-D and 3-D transposed convolutions are out of scope (2-D only)" for s in ("1d", "3d")},
    **{f"test_convtranspose_{s}": "ConvTranspose's auto_pad and output_shape are out of scope (explicit pads only)"
       for s in ("autopad_same", "kernel_shape", "output_shape")},
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool's Indices output is out of scope",
    "test_batchnorm_epsilon_training_mode": "training-mode BatchNormalization is out of scope",
    "test_batchnorm_example_training_mode": "training-mode BatchNormalization is out of scope",
    **{f"test_{m}_pad": f"Pad mode {m!r} is out of scope (constant padding only)" for m in ("edge", "reflect", "wrap")},
    "test_quantizelinear": "a QuantizeLinear output as graph output: Kiln imports QuantizeLinear→DequantizeLinear pairs only",
    "test_quantizelinear_axis": "a QuantizeLinear output as graph output: Kiln imports QuantizeLinear→DequantizeLinear pairs only",
    "test_dequantizelinear_blocked": "blocked quantization (block_size) is out of scope",
    "test_quantizelinear_blocked_asymmetric": "blocked quantization (block_size) is out of scope",
    "test_quantizelinear_blocked_symmetric": "blocked quantization (block_size) is out of scope",
    **{f"test_center_crop_pad_{s}_expanded": "CenterCropPad's expanded form computes Pad's pads from a data input "
       "(the target shape): Kiln pads by constants only"
       for s in ("crop_and_pad", "crop_axes_chw", "crop_axes_hwc", "crop", "crop_negative_axes_hwc", "pad")},
}


@functools.cache
def _cases() -> dict[str, object]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def _in_scope(case) -> bool:
    nodes = case.model.graph.node
    return all(n.domain in ("", "ai.onnx") and n.op_type in HANDLERS for n in nodes)


def _params(graph: onnx.GraphProto) -> set[str]:
    return {n.input[i] for n in graph.node for i in PARAM_SLOTS.get(n.op_type, ()) if i < len(n.input) and n.input[i]}


def _out_of_scope(case) -> str | None:
    """Why a case is out of scope by rule: a dtype, a Resize mode or a window rank Kiln does not take."""
    g = case.model.graph
    params = _params(g)
    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            return f"{vi.name!r} is not a tensor (sequence/optional types are out of scope)"
        elem = vi.type.tensor_type.elem_type
        if elem not in (IN_SCOPE_PARAM_DTYPES if vi.name in params else IN_SCOPE_DTYPES):
            return f"dtype {onnx.TensorProto.DataType.Name(elem)} of {vi.name!r} is outside Kiln's source-level types"
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Resize" and attrs.get("mode", b"nearest") != b"nearest":
            return f"Resize mode {attrs['mode'].decode()!r} is out of scope (nearest only)"
        if n.op_type in ("MaxPool", "AveragePool") and len(attrs["kernel_shape"]) > 2:
            return "3-D pooling is out of scope (1-D and 2-D only)"
    return None


def _selected() -> list[str]:
    """The in-scope cases that run; the others are refused (test_skipped_cases_fail_cleanly)."""
    return [name for name, case in sorted(_cases().items())
            if _in_scope(case) and not (SKIP.get(name) or _out_of_scope(case))]


def test_how_many_cases_run() -> None:
    """With the pinned onnx: 622 node cases use only imported ops; 372 of them run (and must pass),
    250 are out of scope by SKIP or by rule (dtype, Resize mode, 3-D pooling) and are refused cleanly."""
    in_scope = [name for name, case in _cases().items() if _in_scope(case)]
    assert (len(in_scope), len(_selected())) == (622, 372)


def _constant_params(model: onnx.ModelProto, inputs: list[np.ndarray]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with parameter-slot inputs turned into initializers, and the remaining feeds."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    params = _params(g)
    feeds = {}
    for vi, value in zip(list(g.input), inputs):
        if vi.name in params and isinstance(value, (np.ndarray, np.generic)):
            g.initializer.append(numpy_helper.from_array(np.asarray(value), vi.name))
            g.input.remove(vi)
        else:
            feeds[vi.name] = value
    return model, feeds


@pytest.mark.parametrize("name", _selected())
def test_backend_node_case(name: str, tmp_path: Path) -> None:
    case = _cases()[name]
    outputs = [o.name for o in case.model.graph.output]
    for index, (inputs, expected) in enumerate(case.data_sets):
        model, feeds = _constant_params(case.model, inputs)
        path = tmp_path / f"{index}.onnx"
        path.write_bytes(model.SerializeToString())
        graph = import_onnx(path, name, {}).graph
        got = run(graph, feeds)
        for out, want in zip(outputs, expected):
            assert got[out].dtype == want.dtype and got[out].shape == want.shape, out
            np.testing.assert_allclose(got[out], want, rtol=case.rtol, atol=case.atol, err_msg=f"{name} output {out}")


def test_skip_list_names_selected_cases() -> None:
    """Every hand-written skip names an in-scope case, so the list cannot go stale."""
    in_scope = {name for name, case in _cases().items() if _in_scope(case)}
    assert set(SKIP) <= in_scope, sorted(set(SKIP) - in_scope)


def test_skipped_cases_fail_cleanly(tmp_path: Path) -> None:
    """Kiln rejects every skipped case with a KilnError: out of scope means refused, never a crash or a wrong graph."""
    skipped = [name for name, case in sorted(_cases().items()) if _in_scope(case) and (name in SKIP or _out_of_scope(case))]
    for name in skipped:
        case = _cases()[name]
        model, _ = _constant_params(case.model, case.data_sets[0][0])
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        with pytest.raises(KilnError):
            import_onnx(path, name, {})
