"""Generated C: every model bit-exact with LZ4 weights and with I/O in the arena, the float path
against the float reference, several models in one program, weights in a named section, hostile
layer names, the layer hook, and invoke's argument checks — all under ASan+UBSan with
-Wall -Wextra -Werror -pedantic -std=c99."""
from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from model_builds import FLOAT_CAPABLE, MODELS, ModelBuilds, shared_root
from kiln import config, host
from kiln.check import reference_outputs, seeded_inputs
from kiln.codegen import generate
from kiln.errors import KilnError
from kiln.ir import Graph, load
from kiln.names import c_text
from kiln.plan import plan
from kiln.quantize.kept import load_samples
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS
from kiln.runio import quantize_inputs

PROBE = Path(__file__).parent / "c" / "invoke_probe.c"
VARIANTS = {"lz4": ({"lz4": True}, {}), "io_in_arena": ({"io_in_arena": True}, {})}
FLOAT_TOLERANCE = 1e-4  # max |C - reference| relative to max(1, max |reference|): float32 summation order


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> ModelBuilds:
    return ModelBuilds(shared_root(tmp_path_factory.getbasetemp(), "kiln-models"))


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> Path:
    return shared_root(tmp_path_factory.getbasetemp(), "kiln-objects")


def program(out: Path, model: str, objects: Path, name: str = "asan", main: Path | None = None) -> Path:
    source = out / f"{model}.c"
    return host.build_executable([source], [host.model_prefix(source.with_suffix(".h"))], out / name, sanitize=True,
                                 main=main, object_cache=objects)


def int8_samples(out: Path, count: int = 8) -> tuple[Graph, list[list[np.ndarray]]]:
    quantized = load(out / "quantized.kir")
    return quantized, quantize_inputs(quantized, seeded_inputs(quantized, load_samples(out).inputs, count=count))


def assert_bit_exact(got: list[list[np.ndarray]], want: list[list[np.ndarray]]) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"sample {i}: C {a.ravel()[:8]} != reference {b.ravel()[:8]}"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_int8_variant_is_bit_exact_under_sanitizers(builds, objects, model, variant):
    plan_cfg, codegen_cfg = VARIANTS[variant]
    out = builds.variant(model, variant, plan=plan_cfg, codegen=codegen_cfg)
    planned = load(out / "planned.kir")
    text = (out / f"{model}.c").read_text()
    if variant == "lz4":
        decompressed = sum(1 for n in planned.nodes for off in n.attrs.get("lz4_scratch", []) if off >= 0)
        assert text.count("kiln_lz4_decompress(") == decompressed > 0
        plain = sum(t.nbytes for t in planned.tensors.values() if t.is_constant)
        weights = int(re.search(r"_WEIGHT_BYTES (\d+)u", (out / f"{model}.h").read_text()).group(1))
        assert weights < plain
    else:
        assert all(planned.tensors[n].attrs["memory"] == "arena" for n in planned.inputs + planned.outputs)
        assert text.count("memmove(") == len(planned.inputs) + len(planned.outputs)
    quantized, samples = int8_samples(out)
    assert_bit_exact(host.run_executable(program(out, model, objects), planned, samples), reference_outputs(quantized, samples))


@pytest.mark.parametrize("model", FLOAT_CAPABLE)
def test_float_path_matches_float_reference(builds, objects, model):
    out = builds.variant(model, "plain", mode="none")
    planned, quantized = load(out / "planned.kir"), load(out / "quantized.kir")
    assert all(planned.tensors[n].dtype == "float32" for n in planned.inputs + planned.outputs)
    any_dtype = ("", "kiln_copy_part", "kiln_slice", "kiln_transpose", "kiln_resize_nearest")
    assert all(n.attrs["kernel"].endswith("_f32") or n.attrs["kernel"] in any_dtype for n in planned.nodes)
    samples = seeded_inputs(quantized, load_samples(out).inputs, count=6)
    got = host.run_executable(program(out, model, objects), planned, samples)
    for g, w in zip(got, reference_outputs(quantized, samples)):
        for a, b in zip(g, w):
            assert np.max(np.abs(a - b)) <= FLOAT_TOLERANCE * max(1.0, float(np.max(np.abs(b))))


def test_models_link_into_one_program(builds, objects, tmp_path):
    """Three models (one LZ4, one with its own symbol prefix) in one sanitized program, each run by name."""
    parts = [("tiny_cnn", builds.variant("tiny_cnn", "plain"), "tiny_cnn"),
             ("kws_dscnn", builds.variant("kws_dscnn", "prefixed", codegen={"prefix": "kws"}), "kws"),
             ("digits_cnn", builds.variant("digits_cnn", "lz4", plan={"lz4": True}), "digits_cnn")]
    exe = host.build_executable([out / f"{m}.c" for m, out, _ in parts], [p for _, _, p in parts], tmp_path / "three",
                                sanitize=True, object_cache=objects)
    listing = subprocess.run([str(exe), "--list"], capture_output=True, text=True, check=True).stdout
    assert [line.split()[0] for line in listing.splitlines()] == [m for m, _, _ in parts]
    symbols = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    for _, _, prefix in parts:
        assert re.search(rf" T {prefix}_invoke$", symbols, re.M) and re.search(rf" [DR] {prefix}_model$", symbols, re.M)
    for model, out, _ in parts:
        quantized, samples = int8_samples(out, count=4)
        got = host.run_executable(exe, load(out / "planned.kir"), samples, model=model)
        assert_bit_exact(got, reference_outputs(quantized, samples))


def _compile_object(out: Path, model: str) -> Path:
    obj = out / f"{model}.o"
    subprocess.run(["gcc", *host.STRICT_FLAGS, "-O2", "-c", f"-I{host.RUNTIME}", f"-I{out}", str(out / f"{model}.c"), "-o", str(obj)],
                   check=True, capture_output=True)
    return obj


def _symbol_sections(obj: Path) -> dict[str, tuple[str, int]]:
    """symbol -> (section, size) from the object's symbol table."""
    table = subprocess.run(["objdump", "-t", str(obj)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in table.splitlines():
        m = re.match(r"^[0-9a-f]+ .{7} (\S+)\s+([0-9a-f]+) (\S+)$", line)
        if m:
            found[m.group(3)] = (m.group(1), int(m.group(2), 16))
    return found


@pytest.mark.parametrize("lz4", [False, True])
def test_weights_live_in_the_named_section(builds, lz4):
    out = builds.variant("tiny_cnn", f"section{int(lz4)}", plan={"lz4": lz4}, codegen={"weights_section": ".kiln_weights"})
    obj = _compile_object(out, "tiny_cnn")
    headers = subprocess.run(["objdump", "-h", str(obj)], capture_output=True, text=True, check=True).stdout
    section = re.search(r"^\s*\d+ \.kiln_weights\s+([0-9a-f]+)", headers, re.M)
    assert section, headers
    weights = {s: v for s, v in _symbol_sections(obj).items() if s.startswith("k_const")}
    weight_bytes = int(re.search(r"_WEIGHT_BYTES (\d+)u", (out / "tiny_cnn.h").read_text()).group(1))
    assert weights and all(sec == ".kiln_weights" for sec, _ in weights.values())
    assert sum(size for _, size in weights.values()) == weight_bytes <= int(section.group(1), 16)
    plain = _symbol_sections(_compile_object(builds.variant("tiny_cnn", "plain"), "tiny_cnn"))
    assert {sec for s, (sec, _) in plain.items() if s.startswith("k_const")} == {".rodata"}


HOSTILE = ["a */ int pwned; /*", 'say "hi"', "two\nlines", "back\\slash\\", "tri??/graph??=", "ünïcødé ✓ 名前",
           "// line comment", "#define X 1", "%s%n", "end\\", "tab\there", "/* open", "a///b/", "x/", "*/"]


def rename(g: Graph) -> Graph:
    """The same graph with every node, its layer in the source and every tensor renamed to something hostile to C."""
    names = {old: f"{HOSTILE[i % len(HOSTILE)]} {i}" for i, old in enumerate(sorted(g.tensors))}
    out = g.copy()
    out.tensors = {names[k]: t.copy(name=names[k]) for k, t in g.tensors.items()}
    for i, n in enumerate(out.nodes):
        n.name = f"{HOSTILE[(i + 5) % len(HOSTILE)]} node {i}"
        n.source_name = f"{HOSTILE[i % len(HOSTILE)]}/{HOSTILE[(i + 1) % len(HOSTILE)]}"
        n.inputs = [names[t] if t else t for t in n.inputs]
        n.outputs = [names[t] for t in n.outputs]
    out.inputs = [names[t] for t in g.inputs]
    out.outputs = [names[t] for t in g.outputs]
    return out


def test_hostile_names_cannot_escape_comments_or_strings(builds, objects, tmp_path):
    front = builds.front("tiny_resnet")
    planned = plan(rename(load(front / "lowered.kir")), builds.config("tiny_resnet")["plan"])
    files = generate(planned, "tiny_resnet", builds.config("tiny_resnet")["codegen"])
    for name, text in files.items():
        (tmp_path / name).write_bytes(text)
        source = text.decode("ascii")
        assert "??" not in source and "\\" not in source and "//" not in source
        assert source.count("/*") == source.count("*/")
        assert not re.search(r"^\s*#define X", source, re.M)
    for f in ("lowered.kir", "quantized.kir", "samples.npz"):
        (tmp_path / f).write_bytes((front / f).read_bytes())
    quantized, samples = int8_samples(tmp_path)
    got = host.run_executable(program(tmp_path, "tiny_resnet", objects), planned, samples)
    assert_bit_exact(got, reference_outputs(quantized, samples))


@pytest.mark.parametrize("name", ['bad"name', "back\\slash", "sub/dir", "what??/", "new\nline", ""])
def test_model_names_that_cannot_name_files_are_refused(builds, name):
    planned = load(builds.variant("tiny_cnn", "plain") / "planned.kir")
    with pytest.raises(KilnError, match="model name"):
        generate(planned, name, builds.config("tiny_cnn")["codegen"])


def test_codegen_is_deterministic(builds):
    planned = load(builds.variant("kws_dscnn", "lz4", plan={"lz4": True}) / "planned.kir")
    cfg = builds.config("kws_dscnn")["codegen"]
    assert generate(planned, "kws_dscnn", cfg) == generate(planned, "kws_dscnn", cfg)


def test_lz4_is_a_plan_key_and_codegen_follows_the_plan(builds):
    """The plan decides what is compressed (`plan.lz4`); codegen reads only `[codegen]`, so the old key names the new one."""
    with pytest.raises(KilnError, match=r"unknown key 'codegen.lz4' \(did you mean 'plan.lz4'\?\)"):
        config.validate({"codegen": {"lz4": True}}, "model.toml")
    planned = load(builds.variant("tiny_cnn", "lz4", plan={"lz4": True}) / "planned.kir")
    text = generate(planned, "tiny_cnn", builds.config("tiny_cnn")["codegen"])["tiny_cnn.c"].decode()
    assert planned.meta["lz4"] == 1 and "kiln_lz4_decompress(" in text


def _parse_hooks(raw: bytes) -> list[tuple[int, int, str, bytes]]:
    records, pos = [], 0
    while pos < len(raw):
        layer, phase, size = struct.unpack_from("<iii", raw, pos)
        pos += 12
        end = raw.index(b"\0", pos)
        name = raw[pos:end].decode("ascii")
        records.append((layer, phase, name, raw[end + 1:end + 1 + size]))
        pos = end + 1 + size
    return records


@pytest.mark.parametrize("model,variant", [("tiny_resnet", "plain"), ("kws_dscnn", "lz4")])
def test_layer_hook_sees_every_layer_and_its_output(builds, objects, model, variant):
    out = builds.variant(model, variant, plan={"lz4": variant == "lz4"})
    planned = load(out / "planned.kir")
    quantized, samples = int8_samples(out, count=1)
    exe = program(out, model, objects, "probe", main=PROBE)
    proc = subprocess.run([str(exe), "hooks"], input=b"".join(a.tobytes() for a in samples[0]), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    records = _parse_hooks(proc.stdout)
    layers = [i for i, n in enumerate(planned.nodes) if n.attrs["kernel"]]
    assert [(r[0], r[1]) for r in records] == [(i, phase) for i in layers for phase in (0, 1)]
    values = run(quantized, dict(zip(quantized.inputs, samples[0])), table=INT8_IMPLS, keep=True)
    compared = 0
    for layer, phase, name, data in records:
        node = planned.nodes[layer]
        assert name == c_text(f"{node.label} ({node.op})") and node.source_name  # the layer as the source model names it
        if phase == 0:
            assert data == b""
        elif node.outputs[0] in values:
            assert data == values[node.outputs[0]].tobytes(), node.name
            compared += 1
    assert compared >= len(layers) - 1


def _checks(exe: Path, sample: list[np.ndarray]) -> tuple[list[int], bytes]:
    proc = subprocess.run([str(exe), "checks"], input=b"".join(a.tobytes() for a in sample), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    head, _, outputs = proc.stdout.partition(b"outputs\n")
    return [int(v) for v in head.split()], outputs


def test_invoke_checks_its_arguments_before_running(builds, objects):
    out = builds.variant("tiny_cnn", "plain")
    quantized, samples = int8_samples(out, count=1)
    statuses, outputs = _checks(program(out, "tiny_cnn", objects, "probe", main=PROBE), samples[0])
    # arena one byte short, misaligned, NULL input, NULL output, hook calls so far, a correct call
    assert statuses == [2, 3, 1, 1, 0, 0]
    assert outputs == reference_outputs(quantized, samples)[0][0].tobytes()


def test_corrupt_weight_block_returns_decompress_error(builds, objects, tmp_path):
    out = builds.variant("kws_dscnn", "lz4", codegen={"lz4": True})
    source = (out / "kws_dscnn.c").read_text()
    blob = re.search(r"static const uint8_t (k_const\d+)\[(\d+)\] KILN_WEIGHTS = \{\n(.*?)\n\};", source, re.S)
    zeros = ", ".join(["0"] * int(blob.group(2)))
    broken = source.replace(blob.group(0), blob.group(0).replace(blob.group(3), f"    {zeros}"))
    (tmp_path / "kws_dscnn.c").write_text(broken)
    (tmp_path / "kws_dscnn.h").write_bytes((out / "kws_dscnn.h").read_bytes())
    _, samples = int8_samples(out, count=1)
    statuses, _ = _checks(program(tmp_path, "kws_dscnn", objects, "probe", main=PROBE), samples[0])
    assert statuses[-1] == 4  # KILN_ERR_DECOMPRESS


def test_lz4_float_weights_decompress_exactly(builds, objects, tmp_path):
    """Float weights coarsened so they compress: the LZ4 program equals the plain one bit for bit."""
    front = builds.front("tiny_resnet", "none")
    lowered = load(front / "lowered.kir")
    for t in lowered.tensors.values():
        if t.is_constant and t.dtype == "float32" and t.size > 64:
            t.data = (np.round(t.data * 4) / 4).astype(np.float32)
    cfg = builds.config("tiny_resnet", "none")
    outputs = []
    samples = seeded_inputs(load(front / "quantized.kir"), None, count=3)
    for lz4 in (False, True):
        folder = tmp_path / f"lz4_{int(lz4)}"
        folder.mkdir()
        planned = plan(lowered, dict(cfg["plan"], lz4=lz4))
        for name, text in generate(planned, "tiny_resnet", cfg["codegen"]).items():
            (folder / name).write_bytes(text)
        if lz4:
            assert any(t.dtype == "float32" and "lz4_bytes" in t.attrs for t in planned.tensors.values())
        outputs.append(host.run_executable(program(folder, "tiny_resnet", objects), planned, samples))
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(*outputs))


def test_model_with_an_empty_arena_compiles_and_runs(tmp_path, objects):
    """One fully connected layer from input to output: no intermediate tensor, arena size 0, still strict-clean and bit-exact."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from kiln.cli import main as kiln

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")], "single",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "single.onnx")
    np.save(tmp_path / "calib.npy", rng.standard_normal((8, 1, 8)).astype(np.float32))
    out = tmp_path / "out"
    assert kiln(["compile", str(tmp_path / "single.onnx"), "--calibration", str(tmp_path / "calib.npy"), "-o", str(out)]) == 0
    planned = load(out / "planned.kir")
    assert planned.meta["arena_size"] == 0
    quantized, samples = int8_samples(out, count=3)
    got = host.run_executable(program(out, "single", objects), planned, samples)
    assert all(np.array_equal(g[0], w[0]) for g, w in zip(got, reference_outputs(quantized, samples)))


def test_constant_arrays_are_written_in_chunks_as_one_rendering_would(monkeypatch):
    """16 integers or 8 exact hexadecimal floats a line, whatever the chunking; 8-bit values go by table."""
    import kiln.codegen as codegen

    def rendered(a: np.ndarray) -> str:
        flat = a.ravel()
        items = [f"{float(v).hex()}f" for v in flat] if flat.dtype == np.float32 else [str(int(v)) for v in flat]
        per_line = 8 if flat.dtype == np.float32 else 16
        return ",\n    ".join(", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)) or "0"

    monkeypatch.setattr(codegen, "CHUNK_ELEMENTS", 32)
    rng = np.random.default_rng(0)
    for dtype in (np.int8, np.uint8, np.int16, np.int32, np.float32):
        for size in (0, 1, 15, 16, 17, 31, 32, 33, 100):
            if dtype == np.float32:
                a = (rng.standard_normal(size) * 10.0 ** rng.integers(-30, 30, size)).astype(np.float32)
            else:
                info = np.iinfo(dtype)
                a = rng.integers(info.min, int(info.max) + 1, size, dtype=np.int64).astype(dtype)
                a[: min(size, 2)] = [info.min, info.max][: min(size, 2)]
            assert b"".join(codegen._array_chunks(a.reshape(1, -1))).decode() == rendered(a), (dtype, size)
