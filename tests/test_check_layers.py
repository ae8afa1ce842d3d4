"""`kiln check --layers`: every layer's output, as the program's per-layer hook sees it, against the integer reference.

A kernel made wrong on purpose (a max pool that skips each window's last column) is found at its layer, with its
first differing element as an independent NumPy model of the bug predicts, on the host and on the Cortex-M4 under
QEMU; a generated C file patched at one layer likewise. Layers the plan never holds whole (inside a tiled run, a
concat's first writers, aliases) are named and not compared; layers run over their input, whose output the next layer
overwrites, are compared as the hook saw them.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from conftest import ROOT, scons
from model_builds import ModelBuilds, shared_root
from onnx_models import FLOAT, _w, make_model
from kiln import cli, host
from kiln.check import seeded_inputs
from kiln.check_layers import Layer, check_program
from kiln.errors import KilnError
from kiln.ir import load
from kiln.quantize.kept import load_samples
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.runio import quantize_inputs

DOC = ROOT / "docs" / "debugging.md"
WRONG_MAX_POOL = ("for (ix = x0; ix < x1; ix++) {\n                const int32_t v = x[KILN_AT(p, b, iy, ix, ch)];",
                  "for (ix = x0; ix < x1 - 1 || ix == x0; ix++) {\n                const int32_t v = x[KILN_AT(p, b, iy, ix, ch)];")


def documented(command: str, *pages: Path) -> list[str]:
    """`command` (a `kiln` or `scons` line) as docs/debugging.md and `pages` show it, checked to be there, as argv."""
    for path in (DOC, *pages):
        text = path.read_text()
        assert re.search(rf"^(\$ )?{re.escape(command)}(\s|$)", text, re.M), f"{path.name} does not show `{command}`"
    program, *args = shlex.split(command)
    return [sys.executable, "-m", {"kiln": "kiln", "scons": "SCons"}[program], *args]


def table(output: str, model: str) -> dict[int, list[str]]:
    """The layer rows printed for `model`: index -> [name, op, check, SQNR, output...]."""
    rows, inside = {}, False
    for line in output.splitlines():
        if line.startswith(f"{model}: ") and "layers against" in line:
            inside = True
        elif inside and line.startswith("  ") and line.split()[0].isdigit():
            cells = re.split(r"\s{2,}", line.strip(), maxsplit=5)
            rows[int(cells[0])] = cells[1:]
        elif inside and not line.startswith("  "):
            inside = False
    return rows


def summary(output: str, model: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"{model}: ") and "layers against" not in line)


def wrong_max_pool_difference(build: Path) -> str:
    """What a max pool over each 2x2 window's first column only gives on the first kept sample, against the
    reference: the first differing element and the count, as `kiln check --layers` words it."""
    quantized = load(build / "quantized.kir")
    pool = next(n for n in quantized.nodes if n.op == "max_pool2d")
    assert pool.attrs["window"] == pool.attrs["strides"] == [2, 2] and not any(pool.attrs["pads"]), pool.attrs
    sample = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(build).inputs, count=1))[0]
    values = run(quantized, dict(zip(quantized.inputs, sample)), table=INT8_IMPLS, keep=True)
    x, want = values[pool.inputs[0]], values[pool.outputs[0]]
    n, h, w, c = x.shape
    got = x.reshape(n, h // 2, 2, w // 2, 2, c)[:, :, :, :, 0, :].max(axis=2)
    bad = np.flatnonzero(got.ravel() != want.ravel())
    where = [int(v) for v in np.unravel_index(bad[0], want.shape)]
    return f"sample 0, element {where} is {got.ravel()[bad[0]]}, the reference {want.ravel()[bad[0]]}; {bad.size} of {want.size} elements differ"


def overlaps(planned, a: str, b: str) -> bool:
    ta, tb = planned.tensors[a], planned.tensors[b]
    oa, ob = int(ta.attrs["offset"]), int(tb.attrs["offset"])
    return ta.attrs["memory"] == tb.attrs["memory"] == "arena" and oa < ob + tb.nbytes and ob < oa + ta.nbytes


def test_a_wrong_kernel_is_found_at_its_layer_on_host_and_cortex_m4(make_repo):
    """The documented commands on a fresh project: all exact (with kws_dscnn_tflite's layers run over their input
    under plan.budget, each compared before the next overwrites it), then with a wrong max pool kernel linked into
    both targets' programs, the max pool layer named on both, with the difference NumPy predicts."""
    repo = make_repo(("tiny_cnn", "kws_dscnn_tflite"))
    toml = repo / "models/kws_dscnn_tflite/model.toml"
    toml.write_text(toml.read_text() + "\n[plan]\nbudget = 10000\n")
    scons(repo, "-j2", "target=host,cortex-m4")
    commands = {"host": documented("kiln check --layers build/host", ROOT / "README.md"),
                "cortex-m4": documented("kiln check --layers build/cortex-m4")}

    planned = load(repo / "build/host/kws_dscnn_tflite/planned.kir")
    steps = [int(s) for s in planned.meta["in_place_steps"]]
    assert steps == list(range(1, 9)), planned.meta
    assert all(overlaps(planned, planned.nodes[i].outputs[0], planned.nodes[i + 1].outputs[0]) for i in steps[:-1])
    report = subprocess.run([sys.executable, "-m", "kiln", "report", "build/host/tiny_cnn"], cwd=repo, capture_output=True, text=True)
    report_sqnr = {line.split()[0]: line.split()[-1] for line in report.stdout.splitlines()[1:] if len(line.split()) > 5}
    for root, command in commands.items():
        proc = subprocess.run(command, cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert summary(proc.stdout, "tiny_cnn") == "tiny_cnn: every compared layer is bit-exact (4 compared, 2 not)", proc.stdout
        assert summary(proc.stdout, "kws_dscnn_tflite") == "kws_dscnn_tflite: every compared layer is bit-exact (12 compared, 1 not)"
        kws = table(proc.stdout, "kws_dscnn_tflite")
        assert all(kws[i][2] == "bit-exact" and "ran in pieces over its input" in kws[i][4] for i in steps), proc.stdout
        assert kws[10][2] == "not compared" and "an alias of avg_pool2d/nhwc: no code runs" in kws[10][4]
        assert all(row[3] == "-" for row in kws.values())  # a quantized TFLite source has no float graph
        assert "no SQNR: a quantized TFLite source" in proc.stdout
        cnn = table(proc.stdout, "tiny_cnn")
        assert [row[3] for row in cnn.values()] == [report_sqnr[row[4].split()[0]] for row in cnn.values()], (proc.stdout, report.stdout)

    pool = repo / "firmware_stubs/pool.c"
    assert pool.read_text().count(WRONG_MAX_POOL[0]) == 1
    pool.write_text(pool.read_text().replace(*WRONG_MAX_POOL))
    scons(repo, "-j2", "target=host,cortex-m4")
    expected = wrong_max_pool_difference(repo / "build/host/tiny_cnn")
    firsts = []
    for root, command in commands.items():
        proc = subprocess.run(command, cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        cnn = table(proc.stdout, "tiny_cnn")
        assert [row[2] for row in cnn.values()] == ["not compared", "bit-exact", "DIFFERS (10/10)", "DIFFERS (10/10)",
                                                    "not compared", "DIFFERS (10/10)"], proc.stdout
        first = summary(proc.stdout, "tiny_cnn")
        assert first == (f"tiny_cnn: first layer that differs: 2 max_pool2d (max_pool2d), output max_pool2d/nhwc: {expected} "
                         "(on 10 of 10 samples)"), proc.stdout
        assert summary(proc.stdout, "kws_dscnn_tflite").endswith("every compared layer is bit-exact (12 compared, 1 not)")
        firsts.append(first)
    assert firsts[0] == firsts[1]

    toml = repo / "models/tiny_cnn/model.toml"
    toml.write_text(toml.read_text().replace('observer = "minmax"', 'observer = "percentile"'))
    scons(repo, "tiny_cnn-quantize")
    proc = subprocess.run(commands["host"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1 and "tiny_cnn: out of date: quantized.kir changed since the program was built" in proc.stdout
    assert "kws_dscnn_tflite: first layer that differs" not in proc.stdout


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> ModelBuilds:
    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models"))


def program(folder: Path, model: str, out: Path, patch: tuple[str, str] | None = None) -> Path:
    """The host program of the C generated in `folder`, with `patch` (old, new) applied to a copy of it."""
    source = folder / f"{model}.c"
    if patch is not None:
        text = source.read_text()
        assert text.count(patch[0]) == 1, patch[0]
        out.mkdir(parents=True, exist_ok=True)
        source = out / source.name
        source.write_text(text.replace(*patch))
        (out / f"{model}.h").write_text((folder / f"{model}.h").read_text())
    return host.build_executable([source], [host.model_prefix(source.with_suffix(".h"))], out / "program")


def check(folder: Path, exe: Path, count: int = 3) -> list[Layer]:
    quantized, planned = load(folder / "quantized.kir"), load(folder / "planned.kir")
    samples = quantize_inputs(quantized, seeded_inputs(quantized, load_samples(folder).inputs, count=count))
    return check_program(exe, None, quantized, planned, samples)


def test_a_tiled_run_is_compared_at_its_end(builds, tmp_path):
    """Under a budget tiny_cnn runs layers 1-3 tile by tile: 1 and 2 are never whole (not compared, said why),
    3 is compared at the run's end; a program of another plan is refused, not misread."""
    tiled = builds.variant("tiny_cnn", "budget2064", plan={"budget": 2064})
    assert load(tiled / "planned.kir").meta["tiled_run"] == [1, 4]
    layers = check(tiled, program(tiled, "tiny_cnn", tmp_path / "tiled"))
    assert [(x.index, x.compared, x.differs) for x in layers] == [(0, False, 0), (1, False, 0), (2, False, 0), (3, True, 0),
                                                                  (4, False, 0), (5, True, 0)]
    assert layers[1].note == layers[2].note == "inside the tiled run of layers 1-3: never whole"
    assert layers[3].note == "the end of the tiled run of layers 1-3: a difference may start in any of them"
    plain = builds.complete("tiny_cnn")
    with pytest.raises(KilnError, match=r"its hook reported layers \[1, 2\] and not \[\] on sample 0, unlike planned.kir"):
        check(tiled, program(plain, "tiny_cnn", tmp_path / "plain"))


def test_a_patched_layer_of_the_generated_c_is_the_first_that_differs(builds, tmp_path):
    """tiny_resnet's fused conv+add (layer 3) with its output zero point off by one: layers 0-2 stay exact."""
    folder = builds.complete("tiny_resnet")
    text = (folder / "tiny_resnet.c").read_text()
    params = text[text.index("k_params3 = {"):]
    zp = re.search(r"\.out_zp = (-?\d+),", params)
    patch = (params[: zp.end()], params[: zp.start()] + f".out_zp = {int(zp[1]) + 1},")
    layers = check(folder, program(folder, "tiny_resnet", tmp_path, patch))
    assert [(x.index, x.op, x.differs) for x in layers][:4] == [(0, "transpose", 0), (1, "conv2d", 0), (2, "conv2d", 0),
                                                                (3, "conv2d+add", 3)]
    assert re.fullmatch(r"sample 0, element \[0, \d+, \d+, \d+\] is -?\d+, the reference -?\d+; \d+ of 2048 elements differ",
                        layers[3].first), layers[3].first


def concat_model(folder: Path) -> Path:
    """x -> (conv 3x3 -> relu, conv 1x1) -> concat -> conv 1x1: the concat's output has two writers (copies)."""
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ra"], name="relu_a"),
        helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
        helper.make_node("Concat", ["ra", "b"], ["c"], name="cat", axis=1),
        helper.make_node("Conv", ["c", "wc"], ["y"], name="conv_c"),
    ]
    model = make_model(nodes, {"x": ([1, 3, 8, 8], FLOAT)}, {"wa": _w(4, 3, 3, 3), "wb": _w(4, 3, 1, 1, seed=2),
                                                            "wc": _w(2, 8, 1, 1, seed=3)}, ["y"], 17)
    folder.mkdir(parents=True)
    (folder / "net.onnx").write_bytes(model.SerializeToString())
    np.save(folder / "calib.npy", np.random.default_rng(0).standard_normal((16, 1, 3, 8, 8)).astype(np.float32))
    assert cli.main(["compile", str(folder / "net.onnx"), "--calibration", str(folder / "calib.npy"), "-o", str(folder / "out")]) == 0
    return folder / "out"


def test_a_tensor_several_layers_write_is_compared_after_the_last(tmp_path):
    """The concat's first copy writes half of its output: not compared there, the whole tensor after the second
    copy; a wrong first copy shows at the second, which says who wrote the tensor."""
    out = concat_model(tmp_path / "cat")
    planned = load(out / "planned.kir")
    writers = [i for i, n in enumerate(planned.nodes) if n.op == "concat"]
    cat = planned.nodes[writers[0]].outputs[0]
    assert len(writers) == 2 and planned.nodes[writers[1]].outputs[0] == cat, [n.name for n in planned.nodes]
    layers = check(out, program(out, "net", tmp_path / "exact"))
    first, last = (layers[i] for i in writers)
    assert (first.compared, first.note) == (False, f"writes part of {cat}, whole after layer {writers[1]}")
    assert (last.compared, last.differs, last.note) == (True, 0, f"{cat} as layers {writers[0]}, {writers[1]} wrote it")
    assert all(x.differs == 0 for x in layers)

    text = (out / "net.c").read_text()
    params = text[text.index(f"k_params{writers[0]} = {{"):]
    offset = re.search(r"\.in_offset = 0,", params)
    wrong = check(out, program(out, "net", tmp_path / "wrong", (params[: offset.end()], params[: offset.start()] + ".in_offset = 1,")))
    assert [x.index for x in wrong if x.differs][0] == writers[1], [(x.index, x.differs) for x in wrong]
