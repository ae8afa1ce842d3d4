"""Runners of the documented `kiln` commands outside SCons (tests/doc_commands.py)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np

from conftest import ROOT
from doc_commands import Command, Docs, model_stages, runs
from scons_matrix import ONNX_MODEL
from kiln.check import reference_outputs, seeded_inputs
from kiln.ir import load
from kiln.runio import dequantize_outputs, quantize_inputs

# -- README: outside SCons --------------------------------------------------------------------------
ZOO_SOURCES = {".onnx": "models/kws_dscnn_onnx/model.onnx", ".tflite": "models/kws_dscnn_tflite/model.tflite"}


@runs(r"kiln new kws --from \S+")
def new_model(docs: Docs, cmds: list[Command]) -> None:
    """The source the docs name, made from the zoo's DS-CNN in that form."""
    for i, cmd in enumerate(cmds):
        cwd, source = docs.folder(f"new{i}"), Path(cmd.text.split("--from ")[1])
        (cwd / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / ZOO_SOURCES[source.suffix], cwd / source)
        assert docs.run(cmd.shell(), cwd).stderr == "kiln: created models/kws (edit its model.toml, then `scons kws`)\n"
        toml = (cwd / "models/kws/model.toml").read_text()
        assert f'source = "model{source.suffix}"' in toml and "`kiln doc model-toml`" in toml
        assert (cwd / f"models/kws/model{source.suffix}").read_bytes() == (cwd / source).read_bytes()


@runs(r"kiln compile .*")
def compile_outside_scons(docs: Docs, cmds: list[Command]) -> None:
    """Model folders (tiny_cnn: the same C as the build's), and files named net.* from the zoo's DS-CNN."""
    for i, cmd in enumerate(cmds):
        if "models/tiny_cnn" in cmd.text:
            cwd, name = docs.project(), "tiny_cnn"
        elif "models/kws_dscnn_onnx" in cmd.text:  # docs/debugging.md: the source whose tensor names it looks up
            cwd, name = docs.folder(f"compile{i}"), "kws_dscnn_onnx"
            shutil.copytree(ROOT / "models/kws_dscnn_onnx", cwd / "models/kws_dscnn_onnx")
        else:
            cwd, name = docs.folder(f"compile{i}"), "net"
            source = next(Path(w) for w in cmd.text.split() if w.startswith("net."))
            shutil.copyfile(ROOT / ZOO_SOURCES[source.suffix], cwd / source)
            if "calib.npy" in cmd.text:
                shutil.copyfile(ROOT / "models/kws_dscnn_onnx/calibration.npy", cwd / "calib.npy")
        assert docs.run(cmd.shell(), cwd).stderr == f"kiln: compiled {name} into out\n"
        assert load(cwd / "out/planned.kir", "planned").name == name
        if name == "tiny_cnn":
            assert (cwd / "out/tiny_cnn.c").read_bytes() == (cwd / "build/host/tiny_cnn/tiny_cnn.c").read_bytes()


@runs(r"kiln inspect out/\w+\.kir( \[--json\])?")
def inspect(docs: Docs, cmds: list[Command]) -> None:
    """out/ of tiny_cnn; imported.kir is docs/tflite.md's, of a .tflite file (kws_dscnn_tflite)."""
    for i, cmd in enumerate(cmds):
        cwd = docs.folder(f"inspect{i}")
        docs.out(cwd, "kws_dscnn_tflite" if "imported.kir" in cmd.text else "tiny_cnn")
        if "imported.kir" in cmd.text:
            assert "  tflite = int8" in docs.run(cmd.shell(), cwd).stdout
            continue
        text = docs.run(cmd.shell(), cwd).stdout
        assert text.startswith("graph tiny_cnn: inputs image -> outputs linear") and "@arena+" in text, text
        info = json.loads(docs.run(cmd.shell(keep={"--json": True}), cwd).stdout)
        assert info["meta"]["arena_size"] == load(cwd / "out/planned.kir").meta["arena_size"]


@runs(r"kiln plan --explore models/kws_dscnn")
def plan_explore(docs: Docs, cmds: list[Command]) -> None:
    repo = docs.project()
    for model in ("kws_dscnn", "_kit"):
        shutil.copytree(ROOT / "models" / model, repo / "models" / model)
    lines = docs.run(cmds[0].shell(), repo).stdout.splitlines()
    assert lines[0] == "kws_dscnn: arena bytes against extra MACs (plan.io_in_arena = false)", lines
    rows = [[int(v) for v in line.split()[:4]] for line in lines[2:]]
    assert len(rows) >= 2 and rows[0][1:] == [0, 0, 0] and rows[-1][0] < rows[0][0], lines


@runs(r"kiln export out/quantized\.kir -o \w+\.tflite")
def export(docs: Docs, cmds: list[Command]) -> None:
    """tiny_cnn's int8 graph as a .tflite file, which the TFLite frontend reads back with every tensor."""
    from kiln.frontends.tflite.read import read_tflite

    for i, cmd in enumerate(cmds):
        cwd = docs.folder(f"export{i}")
        docs.out(cwd, "tiny_cnn")
        target = cwd / cmd.text.split()[-1]
        assert re.fullmatch(rf"kiln: wrote {target.name} \((\d+) bytes\)\n", docs.run(cmd.shell(), cwd).stderr)
        quantized = load(cwd / "out/quantized.kir")
        assert set(quantized.tensors) <= {t.name for t in read_tflite(target).tensors}


@runs(r"kiln run out/ --input x\.npy --output y\.npy \[--raw\]")
def run_on_the_host(docs: Docs, cmds: list[Command]) -> None:
    """Three float samples, and one int8 sample with --raw: the reference executor's outputs."""
    cwd = docs.folder("run")
    docs.out(cwd, "tiny_cnn")
    quantized = load(cwd / "out/quantized.kir")
    samples = [s[0] for s in seeded_inputs(quantized, None, count=3, seed=7)]
    want = reference_outputs(quantized, quantize_inputs(quantized, [[s] for s in samples]))
    np.save(cwd / "x.npy", np.stack(samples))
    docs.run(cmds[0].shell(), cwd)
    assert np.array_equal(np.load(cwd / "y.npy"), np.stack([o[0] for o in dequantize_outputs(quantized, want)]))
    np.save(cwd / "x.npy", quantize_inputs(quantized, [[samples[1]]])[0][0])
    docs.run(cmds[0].shell(keep={"--raw": True}), cwd)
    assert np.array_equal(np.load(cwd / "y.npy"), want[1][0])


@runs(r"kiln report out/")
def accuracy_report(docs: Docs, cmds: list[Command]) -> None:
    cwd = docs.folder("report")
    docs.out(cwd, "tiny_cnn")
    text = docs.run(cmds[0].shell(), cwd).stdout
    assert re.search(r"^model tiny_cnn: output SQNR linear [\d.]+ dB, top-1 agreement [\d.]+% over 16 calibration samples", text, re.M), text


@runs(r"kiln check build/host", r"kiln check --layers build/host")
def check_host(docs: Docs, cmds: list[Command]) -> None:
    """The whole outputs, then every layer (docs/debugging.md): all bit-exact on the built project."""
    repo = docs.project()
    text = docs.run(cmds[0].shell(), repo).stdout
    for model in (ONNX_MODEL, "tiny_cnn"):
        assert re.search(rf"^{model} +bit-exact \(10/10\)", text, re.M), text
    text = docs.run(cmds[1].shell(), repo).stdout
    for model in (ONNX_MODEL, "tiny_cnn"):
        assert re.search(rf"^{model}: \d+ layers against the integer reference on 10 samples", text, re.M), text
    assert "bit-exact" in text and "DIFFERS" not in text and "first layer that differs" not in text, text


@runs(r"kiln extract models/kws_dscnn_onnx --from relu_2 --to relu_6 -o models/kws_middle", r"scons kws_middle")
def extract(docs: Docs, cmds: list[Command]) -> None:
    """docs/debugging.md: the cut of the DS-CNN's middle layers becomes a model the build compiles and checks."""
    repo = docs.project()
    shutil.copytree(ROOT / "models/kws_dscnn_onnx", repo / "models/kws_dscnn_onnx")
    docs.run(cmds[0].shell(), repo)
    assert sorted(p.name for p in (repo / "models/kws_middle").iterdir()) == ["calibration.npz", "model.onnx", "model.toml"]
    build = docs.run(cmds[1].shell(), repo)
    assert model_stages("kws_middle") <= build.actions, build.log
    text = docs.run("kiln check build/host", repo).stdout
    assert re.search(r"^kws_middle +bit-exact \(10/10\)", text, re.M), text


@runs(r"kiln doc model-toml")
def model_toml_reference(docs: Docs, cmds: list[Command]) -> None:
    """The reference an installed Kiln prints is docs/model-toml.md (scripts/model_toml_doc.py writes both)."""
    assert docs.run(cmds[0].shell(), docs.folder("doc")).stdout == (ROOT / "docs/model-toml.md").read_text()
