"""`kiln extract`: a part of a model between named tensors, as a model folder that compiles like any other.

Its outputs on the cut inputs equal the original's intermediates: exactly for a float ONNX source in the float
reference, bit for bit with the original's int8 values for an int8 TFLite source (through the generated C too),
within one float32 step for a PyTorch source (whose float64 attributes ONNX stores as float32). The calibration
it writes is the original's values at the cut, so the cut is quantized as the original was.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from test_check_layers import documented
from kiln import cli, host
from kiln.cli import resolve_source
from kiln.ir import load
from kiln.quantize.calibration import load_calibration
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.runio import quantize_inputs
from kiln.runner import run_stage


def imported(source: Path, build: Path):
    """A model source's imported graph and its calibration samples (as its quantize stage reads them)."""
    name, model_dir, cfg = resolve_source(source, None)
    build.mkdir(parents=True)
    run_stage("import", name, model_dir, cfg, build)
    graph = load(build / "imported.kir")
    return graph, load_calibration(graph, cfg["quant"], model_dir, build / "calibration.npz")


def values(graph, samples: dict[str, np.ndarray], index: int, int8: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of `graph` on calibration sample `index` (int8 graphs: quantized as `kiln check` does)."""
    feeds = [samples[n][index] for n in graph.inputs]
    if int8:
        feeds = quantize_inputs(graph, [feeds])[0]
    return run(graph, dict(zip(graph.inputs, feeds)), table=INT8_IMPLS if int8 else None, keep=True)


def test_a_middle_part_of_an_onnx_model_compiles_and_equals_the_original(make_repo, tmp_path):
    """The documented commands on a fresh project: the names `kiln inspect` shows, the cut, its build with scons
    (`kiln check`: bit-exact); the cut's float outputs equal the original's intermediates exactly, and its int8
    graph is the original's layers (same parameters, the same int8 values on the original's int8 inputs)."""
    repo = make_repo(("kws_dscnn_onnx",))
    for line in ("kiln compile models/kws_dscnn_onnx -o out/", "kiln inspect out/imported.kir",
                 "kiln extract models/kws_dscnn_onnx --from relu_2 --to relu_6 -o models/kws_middle"):
        proc = subprocess.run(documented(line, *([ROOT / "README.md"] if "extract" in line else [])), cwd=repo,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "=> relu_2 float32[1, 64, 25, 5]" in subprocess.run(documented("kiln inspect out/imported.kir"), cwd=repo,
                                                               capture_output=True, text=True).stdout
    cut = repo / "models/kws_middle"
    assert sorted(p.name for p in cut.iterdir()) == ["calibration.npz", "model.onnx", "model.toml"]
    proc = subprocess.run(documented("scons kws_middle"), cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = subprocess.run([sys.executable, "-m", "kiln", "check", "build/host"], cwd=repo, capture_output=True, text=True)
    assert check.returncode == 0 and "kws_middle  bit-exact (10/10)" in check.stdout, check.stdout

    graph, samples = imported(repo / "models/kws_dscnn_onnx", tmp_path / "original")
    part, calibration = imported(cut, tmp_path / "cut")
    assert (part.inputs, part.outputs) == (["relu_2"], ["relu_6"])
    assert len(calibration["relu_2"]) == len(samples["mfcc"]) == 32
    original_q, part_q = load(repo / "out/quantized.kir"), load(repo / "build/host/kws_middle/quantized.kir")
    for name in ("relu_3/pre", "relu_4/pre", "relu_5/pre", "relu_6/pre"):
        assert part_q.tensors[name].quant == original_q.tensors[name].quant
    for i in range(len(calibration["relu_2"])):
        ref = values(graph, samples, i)
        assert np.array_equal(calibration["relu_2"][i], ref["relu_2"])
        assert np.array_equal(run(part, {"relu_2": ref["relu_2"]})["relu_6"], ref["relu_6"])
        ints = values(original_q, samples, i, int8=True)
        nchw = ints["relu_2/pre"].transpose(0, 3, 1, 2)
        got = run(part_q, {"relu_2": nchw}, table=INT8_IMPLS)["relu_6"]
        assert np.array_equal(got, ints["relu_6/pre"].transpose(0, 3, 1, 2))


def test_an_int8_tflite_part_is_bit_exact_with_the_original(tmp_path):
    """A TFLite source's cut is a .tflite file with the original's parameters: the C generated from it, fed the
    cut calibration (quantized back to the original's int8 values), gives the original's int8 values bit for bit."""
    source, out = ROOT / "models/kws_dscnn_tflite", tmp_path / "kws_tail"
    assert cli.main(["extract", str(source), "--from", "relu_4/pre", "--to", "relu_7/pre", "linear", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["calibration.npz", "model.tflite", "model.toml"]
    assert cli.main(["compile", str(out), "-o", str(tmp_path / "build")]) == 0
    graph, samples = imported(source, tmp_path / "original")
    part, calibration = imported(out, tmp_path / "cut")
    planned = load(tmp_path / "build/planned.kir")
    exe = host.build_executable([tmp_path / "build/kws_tail.c"], ["kws_tail"], tmp_path / "program")
    count = len(calibration["relu_4/pre"])
    inputs = quantize_inputs(part, [[calibration["relu_4/pre"][i]] for i in range(count)])
    outputs = host.run_executable(exe, planned, inputs)
    for i in range(count):
        ref = values(graph, samples, i, int8=True)
        assert np.array_equal(inputs[i][0], ref["relu_4/pre"])
        assert np.array_equal(outputs[i][0], ref["relu_7/pre"]) and np.array_equal(outputs[i][1], ref["linear"])


def test_a_pytorch_part_with_two_inputs_and_two_outputs(tmp_path):
    """tiny_resnet's residual add, cut at both operands: two inputs, two outputs, within one float32 step of the
    original (its batch norms' float64 epsilons are float32 in ONNX: none of these nodes has one, so exact here)."""
    source, out = ROOT / "models/tiny_resnet", tmp_path / "residual"
    assert cli.main(["extract", str(source), "--from", "relu", "getitem_6", "--to", "add", "relu_2", "-o", str(out)]) == 0
    graph, samples = imported(source, tmp_path / "original")
    part, calibration = imported(out, tmp_path / "cut")
    assert (part.inputs, part.outputs, [n.op for n in part.nodes]) == (["relu", "getitem_6"], ["add", "relu_2"], ["Add", "Relu"])
    for i in range(len(calibration["relu"])):
        ref = values(graph, samples, i)
        got = run(part, {"relu": calibration["relu"][i], "getitem_6": calibration["getitem_6"][i]})
        assert np.array_equal(got["add"], ref["add"]) and np.array_equal(got["relu_2"], ref["relu_2"])
    assert cli.main(["compile", str(out), "-o", str(tmp_path / "build")]) == 0


def test_a_pytorch_batch_norm_is_within_one_float32_step(tmp_path):
    """kws_dscnn's blocks: the batch norms' epsilon is float32 in the ONNX file, so a value may move one step."""
    source, out = ROOT / "models/kws_dscnn", tmp_path / "blocks"
    assert cli.main(["extract", str(source), "--from", "relu_2", "--to", "relu_6", "-o", str(out)]) == 0
    graph, samples = imported(source, tmp_path / "original")
    part, _ = imported(out, tmp_path / "cut")
    assert [n.op for n in part.nodes].count("BatchNormalization") == 4
    for i in range(4):
        ref = values(graph, samples, i)
        np.testing.assert_array_max_ulp(run(part, {"relu_2": ref["relu_2"]})["relu_6"], ref["relu_6"], maxulp=1)


@pytest.mark.parametrize("args, message", [
    (["--from", "relu2", "--to", "relu_6"], "--from 'relu2': no such tensor in the imported graph (did you mean 'relu_2'?)"),
    (["--from", "relu_2", "--to", "zzz"], "--to 'zzz': no such tensor in the imported graph (`kiln inspect imported.kir` lists them)"),
    (["--from", "relu_4", "--to", "relu_6", "getitem_3"],
     "--to 'getitem_3' needs the model input 'mfcc' (read by node 'node_Conv_70', Conv), which is not computable from "
     "--from relu_4: add it to --from, or cut after it"),
    (["--from", "relu_4", "--to", "relu_4"], "'relu_4' is both --from and --to"),
    (["--from", "relu_2", "relu_6", "--to", "relu_4"], "--from 'relu_6': nothing between --from and --to reads it"),
    (["--from", "blocks.1.0.weight", "--to", "relu_6"], "--from 'blocks.1.0.weight' is a constant (weights)"),
    (["--from", "mfcc", "--to", "getitem", "relu"], None),
])
def test_one_line_errors(args, message, tmp_path, capsys):
    """Each bad cut is one line naming the source and the reason, and writes nothing."""
    out = tmp_path / "cut"
    status = cli.main(["extract", str(ROOT / "models/kws_dscnn_onnx"), *args, "-o", str(out)])
    err = capsys.readouterr().err
    if message is None:
        assert status == 0 and out.is_dir()
        assert cli.main(["extract", str(ROOT / "models/kws_dscnn_onnx"), *args, "-o", str(out)]) == 1
        assert capsys.readouterr().err == f"kiln: error: {out}: already exists; kiln extract writes a new model folder\n"
        return
    assert status == 1 and err.count("\n") == 1 and err.startswith("kiln: error: "), err
    assert message in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_qdq_source_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "cut"
    assert cli.main(["extract", str(ROOT / "models/ad_autoencoder_qdq"), "--from", "relu", "--to", "reconstruction", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == (f"kiln: error: {ROOT / 'models/ad_autoencoder_qdq'}: a QDQ ONNX source: kiln extract cuts float graphs "
                   "(ONNX, PyTorch and .pt2 sources) and int8 .tflite files\n"), err
    assert not out.exists()


def test_any_tensor_name_reaches_the_calibration_file(tmp_path):
    """A cut input named `file` (np.savez's own argument) or with quotes and a newline: its calibration is there."""
    from onnx import helper
    from onnx_models import FLOAT, make_model

    odd = 'file"\n'
    nodes = [helper.make_node("Relu", ["x"], ["file"], name="relu"), helper.make_node("Sigmoid", ["x"], [odd], name="sig"),
             helper.make_node("Add", ["file", odd], ["y"], name="add")]
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(make_model(nodes, {"x": ([1, 4], FLOAT)}, {}, ["y"], 17).SerializeToString())
    np.save(folder / "calib.npy", np.random.default_rng(1).standard_normal((8, 1, 4)).astype(np.float32))
    (folder / "model.toml").write_text('[model]\nsource = "model.onnx"\n[quant]\ncalibration = ["calib.npy"]\n')
    out = tmp_path / "cut"
    assert cli.main(["extract", str(folder), "--from", "file", odd, "--to", "y", "-o", str(out)]) == 0
    with np.load(out / "calibration.npz") as npz:
        assert sorted(npz.files) == sorted(["file", odd]) and npz["file"].shape == (8, 1, 4)
    assert cli.main(["compile", str(out), "-o", str(tmp_path / "build")]) == 0
