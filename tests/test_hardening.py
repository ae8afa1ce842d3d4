"""Hostile and extreme input, one section per defect the hardening probe found: each is a clear
one-line error (or the right answer), never injected C, a traceback or a silently wrong value.

The folder-name, cache and corrupt-artifact defects run SCons and live in
`test_scons_hardening.py`, `test_scons_cache.py` and `test_kir_integrity.py`.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_models import make_model
from kiln import config as model_config
from kiln.codegen import generate
from kiln.errors import KilnError
from kiln.ir import Graph, Node, QuantParams, Tensor, load
from kiln.plan import plan
from kiln.quantize.scheme import quantize_array

PLAN = {"alignment": 16, "budget": 0, "io_in_arena": False, "reorder": True, "in_place": True, "lz4": False}


def kiln(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True, cwd=cwd)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("kiln: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def raises_one_line(fn, *needles: str) -> str:
    with pytest.raises(KilnError) as err:
        fn()
    text = str(err.value)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# -- 1. C injection through model.toml ---------------------------------------------------------
INJECTED_SECTIONS = [
    '.rodata")));\nint kiln_injected(void){return 42;}\nstatic const int kiln_pad __attribute__((section(".rodata',
    '.rodata\n#include </etc/passwd>\n',
    '.data") , aligned(4',
    ".rodata */ int x; /*",
    "",  # (empty is the default: no section) -- kept valid below
]


@pytest.mark.parametrize("value", [v for v in INJECTED_SECTIONS if v])
def test_injected_weights_section_is_refused_at_config_and_at_codegen(compiled, value):
    raises_one_line(lambda: model_config.validate({"codegen": {"weights_section": value}}, "model.toml"),
                    "model.toml", "codegen.weights_section")
    planned = load(compiled("tiny_cnn") / "planned.kir")
    raises_one_line(lambda: generate(planned, "tiny_cnn", {"prefix": "", "weights_section": value}),
                    "weights_section")


@pytest.mark.parametrize("value", ["", ".rodata.kiln", "ExtFlash", "_weights.2"])
def test_ordinary_section_names_are_kept(compiled, value):
    cfg = model_config.validate({"codegen": {"weights_section": value}}, "model.toml")
    planned = load(compiled("tiny_cnn") / "planned.kir")
    source = generate(planned, "tiny_cnn", cfg["codegen"])["tiny_cnn.c"].decode()
    assert (f'section("{value}")' in source) == bool(value)


@pytest.mark.parametrize("value", ["x y", "1abc", "a-b", "int\n", "é", "a" * 200])
def test_prefix_must_be_a_c_identifier(value):
    raises_one_line(lambda: model_config.validate({"codegen": {"prefix": value}}, "model.toml"), "codegen.prefix")


def test_kiln_new_cannot_be_made_to_write_config_by_a_model_file(tmp_path):
    """An ONNX input (or free dimension) name that would start a line of its own in the new model.toml."""
    evil = 'x]\n[codegen]\nweights_section = "evil"\n#'
    model = _relu_model([1, 8])
    model.graph.input[0].name = model.graph.node[0].input[0] = evil
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n\n[plan]\nalignment = 64\n#"
    onnx.save(model, tmp_path / "net.onnx")
    proc = kiln("new", "net", "--from", str(tmp_path / "net.onnx"), "--models-dir", str(tmp_path / "models"))
    assert proc.returncode == 0, proc.stderr
    cfg = model_config.load(tmp_path / "models/net/model.toml")
    assert cfg == model_config.validate({"model": {"source": "model.onnx"}}, "x")  # every line it added is a comment
    with pytest.raises(KilnError, match="control character"):
        model_config.validate({"inputs": {evil: {"shape": [1, 8]}}}, "model.toml")


# -- 5. a model source outside its folder -------------------------------------------------------
@pytest.mark.parametrize("source", ["../shared/m.py", "/abs/shared/m.py", "sub/../../m.py"])
def test_a_source_outside_the_model_folder_is_refused_with_the_alternative(source):
    raises_one_line(lambda: model_config.validate({"model": {"source": source}}, "models/a/model.toml"),
                    "models/a/model.toml", "model.source", "model.depends")


def test_a_source_in_a_subfolder_is_fine():
    assert model_config.validate({"model": {"source": "net/model.onnx"}}, "model.toml")["model"]["source"] == "net/model.onnx"


# -- 6. extreme values quantize saturating, with the right sign ---------------------------------
def test_extreme_floats_saturate_with_their_sign():
    q = QuantParams((0.05,), (-3,))
    x = np.array([-np.inf, -1e17, -1e38, -7.0, 0.0, 7.0, 1e17, 3e38, np.inf], np.float64)
    # Expected by hand: the int8 ends for everything beyond them, round(x / 0.05) - 3 for the rest.
    assert quantize_array(x, q).tolist() == [-128, -128, -128, -128, -3, 127, 127, 127, 127]
    per_channel = QuantParams((0.5, 2.0), (0, 0), 1)
    assert quantize_array(np.array([[-np.inf, 1e30], [3.0, -3.0]], np.float32), per_channel).tolist() == [[-128, 127], [6, -2]]


def test_nan_has_no_int8_value():
    raises_one_line(lambda: quantize_array(np.array([1.0, np.nan]), QuantParams((0.1,), (0,))), "NaN")


@pytest.fixture(scope="module")
def samples_dir(tmp_path_factory):
    """A folder for the sample files given to `kiln run`."""
    return tmp_path_factory.mktemp("samples")


def _with_nan(shape: tuple[int, ...], sample: int) -> np.ndarray:
    """Three samples of 0.5, one NaN in sample `sample`."""
    a = np.full((3, *shape), 0.5, np.float32)
    a[sample].flat[5] = np.nan
    return a


def _npy(folder: Path, name: str, array: np.ndarray) -> Path:
    path = folder / name
    np.save(path, array)
    return path


@pytest.mark.parametrize("case, make, needles", [
    ("nan", lambda s: _with_nan(s, sample=2), ("'image'", "sample 2", "NaN")),
    ("complex", lambda s: np.zeros(s, np.complex64), ("'image'", "complex")),
    ("bool", lambda s: np.zeros(s, bool), ("'image'", "bool")),
    ("str", lambda s: np.full(s, "a"), ("'image'",)),
    ("empty", lambda s: np.zeros((0, *s), np.float32), ("no samples",)),
])
def test_kiln_run_refuses_samples_without_int8_values(compiled, samples_dir, case, make, needles):
    out = compiled("tiny_cnn")
    shape = load(out / "planned.kir").tensors["image"].shape
    path = _npy(samples_dir, f"{case}.npy", make(shape))
    one_line_error(kiln("run", str(out), "--input", str(path), "--output", str(samples_dir / f"{case}_out.npy")),
                   str(path), *needles)
    assert not (samples_dir / f"{case}_out.npy").exists()


def test_kiln_run_saturates_infinite_inputs(compiled, samples_dir):
    out = compiled("tiny_cnn")
    graph = load(out / "planned.kir")
    x = graph.tensors["image"]
    big = np.where(np.indices(x.shape).sum(0) % 2 == 0, -np.inf, np.inf).astype(np.float32)
    ends = np.where(np.indices(x.shape).sum(0) % 2 == 0, -128, 127).astype(np.int8)
    raw_in = _npy(samples_dir, "ends.npy", ends)
    inf_in = _npy(samples_dir, "inf.npy", big)
    proc = kiln("run", str(out), "--input", str(inf_in), "--output", str(samples_dir / "inf_out.npy"), "--raw")
    one_line_error(proc, str(inf_in), "--raw", "int8")
    for args in ((inf_in, "inf_out.npy"), (raw_in, "ends_out.npy", "--raw")):
        proc = kiln("run", str(out), "--input", str(args[0]), "--output", str(samples_dir / args[1]), *args[2:])
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    # +-inf quantize to the int8 ends: the float run equals the raw run on the ends, dequantized.
    raw = np.load(samples_dir / "ends_out.npy")
    q = graph.tensors[graph.outputs[0]].quant
    want = (np.float64(q.scale[0]) * (raw.astype(np.int64) - q.zero_point[0])).astype(np.float32)
    assert np.array_equal(np.load(samples_dir / "inf_out.npy"), want)


def test_raw_run_demands_int8_data(compiled, samples_dir):
    out = compiled("tiny_cnn")
    shape = load(out / "planned.kir").tensors["image"].shape
    for dtype in (np.float32, np.int16, np.uint8):
        path = _npy(samples_dir, f"raw_{np.dtype(dtype).name}.npy", np.zeros(shape, dtype))
        one_line_error(kiln("run", str(out), "--input", str(path), "--output", str(samples_dir / "raw_out.npy"), "--raw"),
                       str(path), "int8", np.dtype(dtype).name)


# -- 7. .pt2 archives with duplicate members ---------------------------------------------------
def _duplicate_first(data: bytes, suffix: str, content: bytes) -> bytes:
    """The archive with a second copy of the member ending in `suffix`, holding `content`, written first."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src:
        infos = src.infolist()
        target = next(i.filename for i in infos if i.filename.endswith(suffix))
        with zipfile.ZipFile(out, "w") as dst:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zipfile warns about the duplicate name: that is the payload
                dst.writestr(target, content)
                for info in infos:
                    dst.writestr(info.filename, src.read(info.filename))
    return out.getvalue()


def test_pt2_with_a_duplicate_member_is_refused_before_torch_reads_it(tmp_path, monkeypatch):
    import torch

    from kiln.frontends import import_model
    from kiln.frontends.torch_pt2 import check_archive

    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    buf = io.BytesIO()
    with torch.no_grad():
        torch.export.save(torch.export.export(module, (torch.zeros(1, 1, 5, 5),)), buf)
    # The first copy asks for a pickled constant; torch reads the first copy, the landed check read the last.
    evil = json.dumps({"config": {"c": {"path_name": "tensor_0", "use_pickle": True}}}).encode()
    data = _duplicate_first(buf.getvalue(), "_constants_config.json", evil)
    raises_one_line(lambda: check_archive(data, "net.pt2"), "net.pt2", "duplicate archive member",
                    "data/constants/model_constants_config.json")
    path = tmp_path / "net.pt2"
    path.write_bytes(data)
    monkeypatch.setattr(torch.export, "load", lambda *a, **k: pytest.fail("torch saw the archive"))
    raises_one_line(lambda: import_model(path, "net", {}), str(path), "duplicate archive member")


# -- 8. late failures and tracebacks -----------------------------------------------------------
def _chain(shape: tuple[int, ...]) -> Graph:
    g = Graph("huge")
    q = QuantParams((0.1,), (0,))
    for name in ("x", "a", "y"):
        g.add_tensor(Tensor(name, shape, "int8", quant=q))
    g.nodes += [Node("n0", "clamp", ["x"], ["a"], {"kernel": "k"}), Node("n1", "clamp", ["a"], ["y"], {"kernel": "k"})]
    g.inputs, g.outputs = ["x"], ["y"]
    return g


def test_plan_refuses_a_tensor_too_big_for_the_target():
    raises_one_line(lambda: plan(_chain((1, 3, 30000, 30000)), PLAN), "'x'", "2700000000", "2147483647")


def test_plan_refuses_an_arena_too_big_for_the_target():
    g = _chain((1, 2, 30000, 30000))  # 1.8 GB each: every tensor fits, x, a and y in the arena do not
    raises_one_line(lambda: plan(g, dict(PLAN, io_in_arena=True)), "arena", "2147483647")


@pytest.mark.parametrize("value", [2 ** 62, 2 ** 20, 0, -16, 24])
def test_alignment_is_bounded(value):
    raises_one_line(lambda: model_config.validate({"plan": {"alignment": value}}, "model.toml"), "plan.alignment")


def _onnx_folder(tmp_path: Path, model: onnx.ModelProto, toml: str = "") -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    onnx.save(model, folder / "model.onnx")
    (folder / "model.toml").write_text('[model]\nsource = "model.onnx"\n' + toml)
    return folder


def _relu_model(shape: list[int]) -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (shape, TensorProto.FLOAT)}, {}, ["y"], 17)


def test_missing_onnx_external_data_is_one_line(tmp_path):
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": ([1, 4096], TensorProto.FLOAT)},
                       {"w": np.ones((1, 4096), np.float32)}, ["y"], 17)
    folder = tmp_path / "m"
    folder.mkdir()
    onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    (folder / "weights.bin").unlink()
    (folder / "model.toml").write_text('[model]\nsource = "model.onnx"\n')
    one_line_error(kiln("compile", str(folder), "-o", str(tmp_path / "out")), "model.onnx", "weights.bin")


def test_empty_calibration_is_one_line(tmp_path):
    folder = _onnx_folder(tmp_path, _relu_model([1, 8]), '[quant]\ncalibration = ["calib.npy"]\n')
    np.save(folder / "calib.npy", np.zeros((0, 1, 8), np.float32))
    one_line_error(kiln("compile", str(folder), "-o", str(tmp_path / "out")), "calib.npy", "no samples")


def test_zero_size_tensor_in_calibration_is_one_line(tmp_path):
    # Slice with an empty range: a zero-size activation inside the graph.
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "a"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                       {"x": ([1, 8], TensorProto.FLOAT)},
                       {"s": np.array([3], np.int64), "e": np.array([3], np.int64), "a": np.array([1], np.int64)}, ["y"], 17)
    folder = _onnx_folder(tmp_path, model, '[quant]\ncalibration = ["calib.npy"]\n')
    np.save(folder / "calib.npy", np.ones((4, 1, 8), np.float32))
    one_line_error(kiln("compile", str(folder), "-o", str(tmp_path / "out")), "'t'", "no elements")


def test_nan_initializer_is_named(tmp_path):
    w = np.ones((1, 8), np.float32)
    w[0, 3] = np.nan
    model = make_model([helper.make_node("Add", ["x", "bad_weight"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                       {"x": ([1, 8], TensorProto.FLOAT)}, {"bad_weight": w}, ["y"], 17)
    folder = _onnx_folder(tmp_path, model, '[quant]\ncalibration = ["calib.npy"]\n')
    np.save(folder / "calib.npy", np.ones((4, 1, 8), np.float32))
    one_line_error(kiln("compile", str(folder), "-o", str(tmp_path / "out")), "'bad_weight'", "NaN")


def test_huge_input_fails_at_plan_naming_the_tensor(tmp_path):
    conv = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": ([1, 3, 30000, 30000], TensorProto.FLOAT)},
                      {"w": np.ones((2, 3, 1, 1), np.float32)}, ["y"], 17)
    folder = _onnx_folder(tmp_path, conv, '[quant]\nmode = "none"\n')
    one_line_error(kiln("compile", str(folder), "-o", str(tmp_path / "out")), "'x'", "2147483647")
    assert not (tmp_path / "out" / "planned.kir").exists()
