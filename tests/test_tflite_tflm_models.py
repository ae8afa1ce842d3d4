"""TFLite Micro's own example models, in the shapes of its files, from the TensorFlow converter
(tests/tflite_convert.py's TFLM_MODELS), and Kiln's default arena against TFLM's.

- person_detect: MobileNetV1 (alpha 0.25) on a 96x96 grayscale image, int8, its depthwise biases
  given per-channel scales along quantized_dimension 3 of their one dimension, as TFLM's
  person_detect.tflite has them (TFLM reads no bias quantization). TFLM runs it; the C Kiln
  generates, run on the host under ASan and UBSan, gives TFLM's outputs bit for bit.
- micro_speech: DEPTHWISE_CONV_2D 10x8 with depth multiplier 8, FULLY_CONNECTED, SOFTMAX, the
  converter's RESHAPE taken out as TFLM's file has none; bit for bit likewise.
- Kiln's default arena, inputs and outputs inside it, is at most TFLM's `arena_used` (its
  RecordingMicroAllocator's total, as `bench/run.py` reads it) on both and on every quantized file
  tests/tflite_convert.py writes.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

import flatbuffers
import numpy as np
import pytest
from tflite_micro.python.tflite_micro import runtime
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

from test_tflite_converter import CASES, bits, samples_for
from kiln import config as model_config, host
from kiln.ir import load
from kiln.plan import plan
from kiln.runner import run_stage
from kiln.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
Op = tfl.BuiltinOperator
QUANTIZED_FILES = ([("micro_speech", "int8"), ("person_detect", "int8")] + [(c, f) for c in CASES for f in ("int8", "int8_float_io")]
                   + [("conv_stack", "uint8"), ("pooling", "uint8")])


def edited(data: bytes, edit: Callable) -> bytes:
    """The file with `edit` applied to its unpacked model, packed again with the schema bindings."""
    model = tfl.ModelT.InitFromPackedBuf(data, 0)
    edit(model)
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def code(model, op) -> int:
    c = model.operatorCodes[op.opcodeIndex]
    return max(c.builtinCode, c.deprecatedBuiltinCode)


def without_reshape(model) -> None:
    """The FULLY_CONNECTED reads the depthwise output itself, as in TFLM's micro_speech model."""
    ops = model.subgraphs[0].operators
    (i,) = [k for k, op in enumerate(ops) if code(model, op) == Op.RESHAPE]
    src, dst = ops[i].inputs[0], ops[i].outputs[0]
    for op in ops:
        op.inputs = [src if t == dst else t for t in op.inputs]
    del ops[i]


def depthwise_biases_along_dimension_3(model) -> None:
    """person_detect.tflite's quirk: its 1-D depthwise biases' per-channel scales are along dimension 3."""
    sg = model.subgraphs[0]
    for op in sg.operators:
        if code(model, op) == Op.DEPTHWISE_CONV_2D:
            sg.tensors[op.inputs[2]].quantization.quantizedDimension = 3


@pytest.fixture(scope="module")
def tflm_files(converted, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("tflm_models")
    files = {}
    for name, edit in (("micro_speech", without_reshape), ("person_detect", depthwise_biases_along_dimension_3)):
        files[name] = out / f"{name}.int8.tflite"
        files[name].write_bytes(edited((converted / f"{name}.int8.tflite").read_bytes(), edit))
    return files


def source(case: str, form: str, converted: Path, tflm_files: dict[str, Path]) -> Path:
    return tflm_files[case] if case in tflm_files else converted / f"{case}.{form}.tflite"


def compile_to(path: Path, name: str, out: Path, stop: str = "codegen") -> dict:
    """Kiln's stages on the file with the defaults, up to `stop`; returns the config."""
    cfg = model_config.validate({"model": {"source": path.name}}, str(path))
    for st in STAGES:
        run_stage(st.name, name, path.parent, cfg, out)
        if st.name == stop:
            break
    return cfg


def test_person_detect_with_tflms_bias_quirk_runs_bit_exact(converted, tflm_files, tmp_path):
    path = tflm_files["person_detect"]
    model = tfl.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    sg = model.subgraphs[0]
    biases = [sg.tensors[op.inputs[2]] for op in sg.operators if code(model, op) == Op.DEPTHWISE_CONV_2D]
    assert len(biases) == 13 and all(len(b.shape) == 1 and b.quantization.quantizedDimension == 3 and len(b.quantization.scale) == b.shape[0] > 1
                                     for b in biases)
    compile_to(path, "person_detect", tmp_path)
    graph = load(tmp_path / "planned.kir")
    exe = host.build_executable([tmp_path / "person_detect.c"], [host.model_prefix(tmp_path / "person_detect.h")], tmp_path / "host_model",
                                sanitize=True)
    rows = samples_for(graph, np.load(converted / "person_detect.calibration.npy"), np.random.default_rng(9))[:6]
    interpreter = runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 22)
    outputs = set()
    for row, out in zip(rows, host.run_executable(exe, graph, rows)):
        interpreter.set_input(row[0], 0)
        interpreter.invoke()
        theirs = interpreter.get_output(0)
        assert np.array_equal(bits(out[0]).reshape(-1), bits(theirs).reshape(-1)), f"Kiln {out[0].ravel()} TFLM {theirs.ravel()}"
        outputs.add(theirs.tobytes())
    assert len(outputs) > 1


def test_micro_speech_runs_bit_exact_without_scratch(converted, tflm_files, tmp_path):
    """Its depthwise layer (multiplier 8) takes no scratch: four output channels per input value is the fast path."""
    path = tflm_files["micro_speech"]
    compile_to(path, "micro_speech", tmp_path)
    graph = load(tmp_path / "planned.kir")
    (dw,) = [n for n in graph.nodes if n.attrs.get("kernel") == "kiln_depthwise_conv2d_s8"]
    assert dw.attrs["scratch_bytes"] == 0 and dict(zip(dw.attrs["param_names"], dw.attrs["params"]))["ch_mult"] == 8
    exe = host.build_executable([tmp_path / "micro_speech.c"], [host.model_prefix(tmp_path / "micro_speech.h")], tmp_path / "host_model",
                                sanitize=True)
    rows = samples_for(graph, np.load(converted / "micro_speech.calibration.npy"), np.random.default_rng(4))
    interpreter = runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 22)
    for row, out in zip(rows, host.run_executable(exe, graph, rows)):
        interpreter.set_input(row[0], 0)
        interpreter.invoke()
        assert np.array_equal(out[0].reshape(-1), interpreter.get_output(0).reshape(-1))


def tflm_arena_used(path: Path, inputs: int) -> int:
    spec = importlib.util.spec_from_file_location("kiln_bench_arena", ROOT / "bench" / "arena.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tflm_memory(path, inputs)["total"]


@pytest.mark.parametrize("case,form", QUANTIZED_FILES)
def test_default_arena_at_most_tflms(converted, tflm_files, tmp_path, case, form):
    """Both arenas count the inputs and outputs; TFLM's also holds its interpreter's structures, Kiln's the
    kernels' scratch."""
    path = source(case, form, converted, tflm_files)
    cfg = compile_to(path, case, tmp_path, stop="lower")
    planned = plan(load(tmp_path / "lowered.kir"), dict(cfg["plan"], io_in_arena=True))
    kiln, tflm = int(planned.meta["arena_size"]), tflm_arena_used(path, len(planned.inputs))
    assert kiln <= tflm, f"{path.name}: Kiln's default arena {kiln} B, TFLM's arena_used {tflm} B"
