""".kir integrity: a corrupted, truncated or swapped artifact is refused in one line naming the
file and the fix (every load checks the checksum; a stage checks the level), a build rebuilds it,
`kiln check` never compares against it, and seeded fuzzing of every stage's .kir finds no
traceback and no silently different graph."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scons_matrix import build_files, clone_snapshot, run_scons, shared_snapshot
from kiln import config as model_config
from kiln.errors import KilnError
from kiln.ir import dumps, load, loads
from kiln.manifest import manifest, recorded
from kiln.runner import run_stage
from kiln.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
LEVELS = ("imported", "normalized", "quantized", "lowered", "planned")
READER = {f"{level}.kir": st.name for st in STAGES for level in LEVELS if f"{level}.kir" in st.consumes}
FUZZ_PER_FILE = 500


def kiln(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True)


def one_line(text: str, *needles: str) -> None:
    assert "\n" not in text.strip() and "Traceback" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


@pytest.fixture
def build(compiled, tmp_path) -> Path:
    """A private copy of tiny_cnn's compiled artifacts."""
    return Path(shutil.copytree(compiled("tiny_cnn"), tmp_path / "tiny_cnn"))


def flip_a_weight(path: Path) -> None:
    """Change one int8 weight by one (the probe's 5 -> 4), in place."""
    data = bytearray(path.read_bytes())
    weights = next(t.data for t in load(path).tensors.values() if t.is_constant and t.dtype == "int8" and t.size > 8)
    at = bytes(data).find(weights.tobytes())
    assert at > 0
    data[at + 3] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_weight_bit_is_refused(build):
    path = build / "quantized.kir"
    flip_a_weight(path)
    with pytest.raises(KilnError) as err:
        load(path, "quantized")
    one_line(str(err.value), str(path), "checksum", "delete it and rebuild")


@pytest.mark.parametrize("artifact", sorted(READER))
def test_every_stage_refuses_another_stages_graph(build, artifact):
    stage = READER[artifact]
    target = build / artifact
    for level in LEVELS:
        if f"{level}.kir" == artifact:
            continue
        shutil.copy(build / f"{level}.kir", target)
        outputs = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
        with pytest.raises(KilnError) as err:
            run_stage(stage, "tiny_cnn", ROOT / "models/tiny_cnn", model_config.load(ROOT / "models/tiny_cnn/model.toml"), build)
        one_line(str(err.value), str(target), f"level {level!r}", f"a {artifact[:-4]!r} graph is read here")
        assert {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()} == outputs  # nothing written


@pytest.mark.parametrize("stage, artifact, impostor", [("codegen", "planned.kir", "lowered.kir"), ("plan", "lowered.kir", "quantized.kir")])
def test_kiln_stage_refuses_a_swapped_artifact_in_one_line(build, stage, artifact, impostor):
    shutil.copy(build / impostor, build / artifact)
    proc = kiln("stage", stage, "--model-dir", str(ROOT / "models/tiny_cnn"), "--build-dir", str(build))
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    one_line(proc.stderr, "kiln: error: ", str(build / artifact), "delete it and rebuild")


# -- the build ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return shared_snapshot(tmp_path_factory)


def test_corrupt_and_swapped_artifacts_in_build_are_rebuilt(snapshot, tmp_path):
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    model = repo / "build/host/tiny_cnn"

    def flip(name: str) -> None:
        data = bytearray((model / name).read_bytes())
        data[len(data) // 2] ^= 0x10
        (model / name).write_bytes(bytes(data))

    flip("imported.kir")
    (model / "normalized.kir").write_bytes((model / "normalized.kir").read_bytes()[:100])  # truncated
    shutil.copy(model / "normalized.kir", model / "quantized.kir")  # (truncated) another stage's graph
    shutil.copy(model / "imported.kir", model / "lowered.kir")
    shutil.copy(snapshot / "build/host/tiny_cnn/lowered.kir", model / "planned.kir")  # the probe's KeyError case
    flip("tiny_cnn.c")
    actions, log, _ = run_scons(repo, "-j2")
    assert actions == {f"kiln {s.name} tiny_cnn" for s in STAGES}, log  # each rebuilt once; same bytes, so no cc
    assert sum("changed since the build wrote it" in line for line in log.splitlines()) == 6, log
    assert build_files(repo) == build_files(snapshot)
    assert run_scons(repo, "-j2")[0] == set()


def test_kiln_check_never_compares_against_a_corrupt_artifact(snapshot, tmp_path):
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    flip_a_weight(repo / "build/host/tiny_cnn/quantized.kir")
    proc = subprocess.run([sys.executable, "-m", "kiln", "check", "build/host"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1 and "tiny_cnn: out of date: quantized.kir changed since the program was built" in proc.stdout
    assert not any(line.startswith("tiny_cnn ") and "bit-exact" in line for line in proc.stdout.splitlines()), proc.stdout
    build = repo / "build/host/tiny_cnn"  # a manifest that records the corrupt file: its checksum still refuses it
    (build / "tiny_cnn.manifest").write_text(manifest([build / f for f in recorded("tiny_cnn")], "tiny_cnn", "host"))
    proc = subprocess.run([sys.executable, "-m", "kiln", "check", "build/host"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1 and "bit-exact" not in proc.stdout, proc.stdout
    one_line(proc.stderr, "kiln: error: build/host/tiny_cnn/quantized.kir: corrupt .kir file")


# -- fuzzing --------------------------------------------------------------------------------
def mutate(rng: np.random.Generator, data: bytes, others: list[bytes]) -> bytes:
    """One random mutation: bit flips, a truncation, a splice from another .kir, an insertion, a deletion,
    random bytes over a range, or another file outright."""
    n = len(data)
    kind = int(rng.integers(7))
    if kind == 0:
        out = bytearray(data)
        for pos in rng.integers(0, n * 8, size=int(rng.integers(1, 5))):
            out[pos // 8] ^= 1 << (pos % 8)
        return bytes(out)
    if kind == 1:
        return data[: int(rng.integers(0, n))]
    a, b = sorted(int(v) for v in rng.integers(0, n + 1, size=2))
    if kind == 2:
        donor = others[int(rng.integers(len(others)))]
        c = int(rng.integers(0, len(donor)))
        return data[:a] + donor[c : c + (b - a)] + data[b:]
    if kind == 3:
        return data[:a] + rng.bytes(int(rng.integers(1, 9))) + data[a:]
    if kind == 4:
        return data[:a] + data[max(b, a + 1):]
    if kind == 5:
        return data[:a] + rng.bytes(b - a) + data[b:]
    return others[int(rng.integers(len(others)))]


@pytest.mark.parametrize("level", LEVELS)
def test_fuzzed_kir_is_refused_or_unchanged(compiled, level):
    """FUZZ_PER_FILE seeded mutations per stage's .kir: each is refused in one line naming the file, or
    decodes to exactly the original graph (a mutation of bytes nothing reads), so no stage ever runs on
    a different graph. The first few also go through the stage that reads the file."""
    folder = compiled("tiny_cnn")
    originals = {lv: (folder / f"{lv}.kir").read_bytes() for lv in LEVELS}
    original = originals[level]
    others = [data for lv, data in originals.items() if lv != level]
    rng = np.random.default_rng(LEVELS.index(level))
    refused = unchanged = 0
    while refused + unchanged < FUZZ_PER_FILE:
        mutated = mutate(rng, original, others)
        if mutated == original:
            continue
        try:
            graph = loads(mutated, f"{level}.kir", level)
        except KilnError as exc:
            assert str(exc).startswith(f"{level}.kir: ") and "\n" not in str(exc), str(exc)
            refused += 1
            continue
        assert dumps(graph, level) == original, f"mutation {refused + unchanged} decoded to another graph"
        unchanged += 1
    assert refused >= FUZZ_PER_FILE * 0.95, (refused, unchanged)


@pytest.mark.parametrize("artifact", sorted(READER))
def test_fuzzed_inputs_never_reach_a_stage(compiled, tmp_path, artifact):
    """Mutated inputs through the stage that reads them: a one-line error, and nothing written."""
    stage, level = READER[artifact], artifact[:-4]
    folder = Path(shutil.copytree(compiled("tiny_cnn"), tmp_path / "tiny_cnn"))
    original = (folder / artifact).read_bytes()
    others = [(folder / f"{lv}.kir").read_bytes() for lv in LEVELS if lv != level]
    cfg = model_config.load(ROOT / "models/tiny_cnn/model.toml")
    rng = np.random.default_rng(100 + LEVELS.index(level))
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != artifact}
    for _ in range(20):
        mutated = mutate(rng, original, others)
        if mutated == original:
            continue
        (folder / artifact).write_bytes(mutated)
        with pytest.raises(KilnError) as err:
            run_stage(stage, "tiny_cnn", ROOT / "models/tiny_cnn", cfg, folder)
        one_line(str(err.value), str(folder / artifact))
        assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != artifact} == before
