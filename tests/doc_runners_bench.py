"""Runners of the documented firmware-target builds and benchmarks, each on the small project or a subset
(tests/doc_commands.py)."""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from doc_commands import STAGE_NAMES, Command, Docs, runs
from scons_matrix import ONNX_MODEL
from kiln.check import reference_outputs, seeded_inputs
from kiln.ir import load
from kiln.runio import quantize_inputs
from kiln.target.macs import graph_macs
from kiln.target.targets import TARGETS

# -- docs/cortex-m.md, docs/targets.md: firmware targets ------------------------------------------------
def images(repo: Path, target: str) -> set[str]:
    return {p.relative_to(repo / "build" / target).as_posix() for p in (repo / "build" / target).rglob("*.elf")}


MODEL_IMAGES = {"firmware.elf", f"{ONNX_MODEL}/{ONNX_MODEL}.elf", "tiny_cnn/tiny_cnn.elf"}


@runs(r"scons (-k )?target=[\w,-]+( tiny_cnn)?", r"kiln check build/cortex-m0", r"kiln check --layers build/cortex-m4",
      r"timeout .* qemu-system-arm .*",
      r"python -m kiln\.target\.size build/cortex-m4 .*", r"(\.venv/bin/)?python bench/(cortex_m|targets)\.py.*")
def firmware_targets(docs: Docs, cmds: list[Command]) -> None:
    """One project, each target built once: the M4 images (and their layers checked), one model's image relinked
    alone, the QEMU line on one tiny_cnn sample (samples.bin) whose output is the reference executor's, the size
    report and the M4 bench; the micro:bit, M55 and RISC-V images and `kiln check` of the micro:bit's; then every
    target (on this project every model fits the micro:bit, so -k changes nothing), and bench/targets.py over them."""
    repo = docs.project()
    by_text = {c.text: c for c in cmds}
    command = lambda pattern: next(c for c in cmds if re.fullmatch(pattern, c.text))  # noqa: E731
    for text in ("scons target=cortex-m4", "scons target=cortex-m0", "scons target=cortex-m55,riscv32"):
        docs.run(by_text[text].shell(), repo)
        assert all(images(repo, target) == MODEL_IMAGES for target in text.split("=")[1].split(","))
    for target in ("cortex-m4", "cortex-m0"):
        (repo / f"build/{target}/tiny_cnn/tiny_cnn.elf").unlink()
        actions = docs.run(by_text[f"scons target={target} tiny_cnn"].shell(), repo).actions
        assert {a for a in actions if a.startswith("link ")} == {f"link build/{target}/tiny_cnn/tiny_cnn.elf"}, actions
    text = docs.run(by_text["kiln check build/cortex-m0"].shell(), repo).stdout
    assert all(re.search(rf"^{model} +bit-exact \(10/10\)", text, re.M) for model in (ONNX_MODEL, "tiny_cnn")), text
    text = docs.run(by_text["kiln check --layers build/cortex-m4"].shell(), repo).stdout  # docs/debugging.md
    assert all(re.search(rf"^{model}: \d+ layers against the integer reference on 10 samples", text, re.M)
               for model in (ONNX_MODEL, "tiny_cnn")) and "DIFFERS" not in text, text

    quantized = load(repo / "build/host/tiny_cnn/quantized.kir")
    sample = quantize_inputs(quantized, seeded_inputs(quantized, None, count=1))[0]
    (repo / "samples.bin").write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in sample))
    out = docs.run(command(r"timeout .*").shell(), repo).stdout
    want = b"".join(np.ascontiguousarray(o).tobytes() for o in reference_outputs(quantized, [sample])[0]).hex()
    assert re.search(rf"^sample=0 instructions=\d+ out0={want}$", out, re.M) and "kiln-firmware end samples=1" in out, out
    text = docs.run(command(r".*kiln\.target\.size.*").shell(keep={"--json": True}), repo).stdout
    assert re.search(r"^build/cortex-m4/firmware\.elf +\d+", text, re.M), text
    assert {r["image"] for r in json.loads((repo / "sizes.json").read_text())} == {f"build/cortex-m4/{i}" for i in MODEL_IMAGES}
    docs.run(command(r".*bench/cortex_m\.py.*").shell(keep={"build/cortex-m4": True, "--layers": True, "--mul": True, "--json": True}), repo)
    rows = json.loads((repo / "bench.json").read_text())
    assert {(r["model"], r["bit_exact"]) for r in rows["models"]} == {(ONNX_MODEL, 10), ("tiny_cnn", 10)}
    assert rows["mul"] and all(r["bit_exact"] for r in rows["mul"])

    everything = [c for c in cmds if c.text.endswith("target=all")]
    actions = docs.run(everything[0].shell(), repo).actions
    assert {a.split("/")[1] for a in actions if a.startswith("link ")} == {"cortex-m3", "cortex-m7", "cortex-m33"}, actions
    assert all(images(repo, t) == MODEL_IMAGES for t in TARGETS)
    assert all(docs.run(c.shell(), repo).actions == set() for c in everything[1:])
    for cmd in (c for c in cmds if "bench/targets.py" in c.text):
        options = {"build": True, "--targets": True, "--json": True} if "[" in cmd.text else {}
        text = docs.run(cmd.shell(keep=options), repo).stdout
        for target in ("cortex-m0", "cortex-m3") if options else TARGETS:
            assert all(re.search(rf"^{target} +{m} +ok ", text, re.M) for m in (ONNX_MODEL, "tiny_cnn")), (target, text)
        if options:
            rows = json.loads((repo / "rows.json").read_text())
            assert sorted((r["target"], r["bit_exact"]) for r in rows) == [("cortex-m0", 10)] * 2 + [("cortex-m3", 10)] * 2


# -- README: benchmarks, each on a small subset ---------------------------------------------------------
BENCH_KEYS = {"model", "params", "macs", "weight_bytes", "code_bytes", "arena_bytes", "lower_bound_bytes", "arena_ratio",
              "stage_seconds", "compile_seconds", "m4_instructions", "m4_instructions_per_mac", "m4_samples", "sqnr_db",
              "top1_agreement", "accuracy"}


@runs(r"\.venv/bin/python bench/run\.py .*")
def bench_run(docs: Docs, cmds: list[Command]) -> None:
    """tiny_cnn through the whole table, every number checked against an independent source: the project's own build
    of it (the same model.toml, so the same graph), its model.py, `kiln report`."""
    from test_end_to_end import zoo_module

    repo = docs.project()
    lines = docs.run(cmds[0].shell(keep={"MODEL...": "tiny_cnn", "--repeat": "1"}), repo).stdout.splitlines()
    (row,) = json.loads((repo / "build/bench.json").read_text())
    assert row["model"] == "tiny_cnn" and set(row) == BENCH_KEYS and set(row["stage_seconds"]) == set(STAGE_NAMES)
    assert all(s > 0 for s in row["stage_seconds"].values())
    assert row["compile_seconds"] == pytest.approx(sum(row["stage_seconds"].values()), abs=0.01)
    assert lines[0].startswith("| model |") and lines[2].startswith(f"| tiny_cnn | {row['params']:,} |"), lines
    build = repo / "build/host/tiny_cnn"
    planned = load(build / "planned.kir")
    assert row["arena_bytes"] == planned.meta["arena_size"]
    assert row["lower_bound_bytes"] == planned.meta["lower_bound"] <= row["arena_bytes"]
    assert row["macs"] == graph_macs(planned)
    assert row["weight_bytes"] == int(re.search(r"_WEIGHT_BYTES (\d+)u", (build / "tiny_cnn.h").read_text())[1])
    assert row["params"] == sum(p.numel() for p in zoo_module("tiny_cnn").model().parameters())  # no batch norm to fold
    assert row["m4_samples"] >= 1 and row["m4_instructions"] > row["macs"]
    assert row["m4_instructions_per_mac"] == pytest.approx(row["m4_instructions"] / row["macs"], abs=0.01)
    docs.run("kiln report build/host/tiny_cnn --json report.json", repo)
    report = json.loads((repo / "report.json").read_text())
    assert row["sqnr_db"] == report["outputs"][load(build / "quantized.kir").outputs[0]]
    assert row["top1_agreement"] == report["top1_agreement"] and row["accuracy"] is None  # tiny_cnn: no held-out split


@runs(r"\.venv/bin/python bench/arena\.py --budgets .*")
def bench_budgets(docs: Docs, cmds: list[Command]) -> None:
    """ic_resnet8 alone (its budget is met layer by layer)."""
    repo = docs.project()
    shutil.copytree(ROOT / "models/ic_resnet8", repo / "models/ic_resnet8")
    shutil.copytree(ROOT / "models/_kit", repo / "models/_kit")
    text = docs.run(cmds[0].shell(keep={"MODEL...": "ic_resnet8"}), repo).stdout
    assert re.search(r"^\| ic_resnet8 \| 36,000 \| [\d,]+ \([\d,]+\) \| yes \|", text, re.M), text


@runs(r"\.venv/bin/python bench/ptq\.py \[PATTERN\.\.\.\]")
def bench_ptq(docs: Docs, cmds: list[Command]) -> None:
    text = docs.run(cmds[0].shell(keep={"PATTERN...": "relu6_mlp"}), docs.project()).stdout
    assert re.search(r"^\| relu6_mlp \|( [-+]?[\d.]+ \|){7}$", text, re.M), text


@runs(r"\.venv/bin/python bench/calibration\.py \[--samples 4000\]")
def bench_calibration(docs: Docs, cmds: list[Command]) -> None:
    text = docs.run(cmds[0].shell(keep={"--samples": "64"}), docs.project()).stdout
    assert len(re.findall(r"^\| .* \| 64 \| [\d.]+ \| [\d.]+ \| [\d.]+x \| True \|$", text, re.M)) == 2, text


@runs(r"\.venv/bin/python bench/incremental\.py .*")
def bench_incremental(docs: Docs, cmds: list[Command]) -> None:
    """A one-model zoo, one pair and one edit, with workers only: the JSON's numbers and the edits doing what they say.
    In the repository itself: the script copies the project's files as git lists them."""
    out = docs.tmp / "incremental.json"
    text = docs.run(cmds[0].shell(keep={"--models": "tiny_cnn", "--pairs": "1", "--edits": "1", "--no-fresh": True,
                                        "--json": shlex.quote(str(out))}), ROOT).stdout
    r = json.loads(out.read_text())
    assert r["models"] == 1 and r["cold_stage_actions"] == 6 and r["kiln_targets"] == r["plain_targets"] > 20
    assert r["comment_edit_stage_actions"] == 0
    assert r["stage_module_edit_actions"] == 1 and r["fresh_process"] == {}
    for key in ("noop_ratio", "code_edit_seconds", "stage_module_edit_seconds", "cold_seconds", "cold_cpu_seconds"):
        assert r[key] > 0, key
    assert r["cold_cpu_seconds"] > 1  # the workers' and their stages' CPU counts (torch alone loads for longer)
    assert "| comment edit in model.py: stage actions | 0 |" in text


@runs(r"\.venv/bin/python bench/scale\.py .*")
def bench_scale(docs: Docs, cmds: list[Command]) -> None:
    """A short chain, one light model and one that does not exist (a row that says so, not a failed run)."""
    repo = docs.project()
    text = docs.run(cmds[0].shell(keep={"--chains": "8", "--models": "squeezenet,missing", "--repeat": "1",
                                        "--json": "scale.json"}), repo).stdout
    result = json.loads((repo / "scale.json").read_text())
    assert set(result) == {"chains", "ratio_3000_1000", "light_models"} and result["ratio_3000_1000"] == {}
    assert set(result["chains"]["8"]["stage_seconds"]) == set(result["chains"]["8"]["stage_cpu_seconds"]) == set(STAGE_NAMES)
    ok, missing = result["light_models"]
    assert ok["model"] == "squeezenet" and ok["ok"] and ok["error"] is None
    assert set(ok["stage_seconds"]) == set(ok["peak_rss_mb"]) == set(STAGE_NAMES) and all(v > 0 for v in ok["peak_rss_mb"].values())
    assert ok["weight_mb"] == 4.7 and ok["rss_bound_mb"] == 314.1  # SqueezeNet 1.1: 1,235,496 float weights
    assert not missing["ok"] and missing["error"].startswith("import: kiln: error: ") and missing["error"].endswith("no such file or folder")
    assert missing["stage_seconds"] == {} and missing["weight_mb"] is None
    assert "| squeezenet | 4.7 |" in text and "| 3000/1000 |" not in text
