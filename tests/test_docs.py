"""Every command line README.md and docs/*.md show runs here, as documented (tests/doc_commands.py: which lines
are commands, how a runner fills placeholders and optional parts).

Runners work in a fresh project: a clone of the snapshot (tests/scons_matrix.py: tiny_cnn and onnx_cnn, built
for the host once per session), with `.venv` (and `.venv-tf`) linking to the test environment, or in an empty
folder for the commands that need no project. `kiln`, `scons` and `python` are the test environment's.
Expensive commands run on that small project, or with the subset options the docs show.
"""
from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cache_servers import nginx
from conftest import ROOT, project_files
from doc_commands import RUNNERS, Command, commands, doc_files, runs, unmarked_lines
from scons_matrix import ONNX_MODEL, clone_snapshot, fresh_clone, parse_actions, set_key, shared_snapshot
from kiln.check import reference_outputs, seeded_inputs
from kiln.errors import missing_package
from kiln.ir import load
from kiln.runio import dequantize_outputs, quantize_inputs
from kiln.stages import STAGES
from kiln.target.macs import graph_macs
from kiln.target.targets import TARGETS

DOCUMENTED = commands()
STAGE_NAMES = [s.name for s in STAGES]


@dataclass
class Result:
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        return self.stdout + self.stderr

    @property
    def actions(self) -> set[str]:
        return parse_actions(self.log)[0]


class Docs:
    """What runners share: fresh projects, the session's compiled models, and running a command as bash would."""

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.tmp, self.request = tmp_path, request

    def fixture(self, name: str):
        """A fixture (pytest's or conftest.py's), set up when a runner first asks for it."""
        return self.request.getfixturevalue(name)

    def project(self, name: str = "project") -> Path:
        """A clone of the built snapshot: SCons sees it up to date."""
        return self._link_environment(clone_snapshot(shared_snapshot(self.fixture("tmp_path_factory")), self.tmp / name))

    def sources(self, name: str = "sources") -> Path:
        """The snapshot's sources only, as a fresh clone has them: nothing built."""
        return self._link_environment(fresh_clone(shared_snapshot(self.fixture("tmp_path_factory")), self.tmp / name))

    def folder(self, name: str) -> Path:
        path = self.tmp / name
        path.mkdir()
        return path

    def out(self, cwd: Path, model: str) -> None:
        """`out/`: what `kiln compile models/<model> -o out/` writes, from the session's compiled models."""
        shutil.copytree(self.fixture("compiled")(model), cwd / "out", ignore=shutil.ignore_patterns(".lock", ".done"))

    @staticmethod
    def _link_environment(repo: Path) -> Path:
        (repo / ".venv").symlink_to(sys.prefix)
        (repo / ".venv-tf").symlink_to((ROOT / ".venv-tf").resolve())
        return repo

    @staticmethod
    def run(text: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
        """Run `text` with bash in `cwd`; asserts it succeeds."""
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        proc = subprocess.run(["bash", "-c", text], cwd=cwd, env={**os.environ, "PATH": path, **(env or {})},
                              capture_output=True, text=True, timeout=900)
        result = Result(proc.stdout, proc.stderr)
        assert proc.returncode == 0, f"$ {text}\n(exit {proc.returncode})\n{result.log[-6000:]}"
        return result


def model_stages(model: str, names: list[str] = STAGE_NAMES) -> set[str]:
    return {f"kiln {name} {model}" for name in names}


def stage_actions(actions: set[str]) -> set[str]:
    return {a for a in actions if a.startswith("kiln ")}


# -- the registry ---------------------------------------------------------------------------------
def test_every_documented_command_has_exactly_one_runner():
    problems = [f"{', '.join(c.where)}: {c.text!r} matches {names or 'no runner'}" for c in DOCUMENTED
                if len(names := [r.name for r in RUNNERS.values() if r.matches(c)]) != 1]
    assert problems == [], "\n".join(problems)
    idle = [r.name for r in RUNNERS.values() if not any(r.matches(c) for c in DOCUMENTED)]
    assert idle == [], f"runners whose commands the docs no longer show: {idle}"


def test_no_command_hides_among_output_samples():
    assert unmarked_lines() == [], "mark these with `$ ` (or put them in a ```sh block)"


def test_extraction_rules(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/a.md").write_text("\n".join([
        "Text with `kiln inline` code.", "```sh", "./x.sh --flag   # a comment", "# only a comment", "",
        "python y.py \\", "    --long 'a # b' \\", "    --end", "```", "```", "$ kiln run out/ [--raw]   # comment",
        "                 # its comment continued", "kiln: error: an output line", "scores: 1 2", "$ scons -h", "```",
        "```python", "kiln compile x -o y", "```", "```yaml", "- run: ./scripts/run.sh", "```",
        "```", "kiln compile unmarked -o out/", "kiln fault: BusFault exception=0x5", "```", ""]))
    (tmp_path / "README.md").write_text("```\n$ scons -h\n$ scons\n```\n")
    found = [(c.text, c.where) for c in commands(tmp_path)]
    assert found == [("scons -h", ("README.md:2", "docs/a.md:15")), ("scons", ("README.md:3",)),
                     ("./x.sh --flag", ("docs/a.md:3",)), ("python y.py --long 'a # b' --end", ("docs/a.md:6",)),
                     ("kiln run out/ [--raw]", ("docs/a.md:11",))]
    assert unmarked_lines(tmp_path) == ["docs/a.md:24: kiln compile unmarked -o out/"]
    run = Command("kiln run out/ [--raw] [MODEL...] [--json FILE]", ())
    assert run.shell() == "kiln run out/"
    assert Command("pip install 'kiln-mcu[torch]' [-q]", ()).shell() == "pip install 'kiln-mcu[torch]'"
    assert run.shell(keep={"--raw": True, "MODEL...": "a b", "--json": "r.json"}) == "kiln run out/ --raw a b --json r.json"
    assert Command("KEY=... scons --x=DIR", ()).shell(replace={"KEY=...": "KEY=k", "DIR": "/d"}) == "KEY=k scons --x=/d"
    with pytest.raises(AssertionError, match="no optional part"):
        run.shell(keep={"--rwa": True})
    with pytest.raises(AssertionError, match="shows no"):
        run.shell(replace={"DIR": "/d"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per runner (registered below this point, so parametrized once the module is loaded)."""
    if "runner_name" in metafunc.fixturenames:
        metafunc.parametrize("runner_name", sorted(RUNNERS))


def test_documented_commands_run(runner_name, tmp_path, request):
    runner = RUNNERS[runner_name]
    runner.run(Docs(tmp_path, request), [c for c in DOCUMENTED if runner.matches(c)])


# -- README: quick start --------------------------------------------------------------------------
@runs(r"\./scripts/run\.sh")
def run_script(docs: Docs, cmds: list[Command]) -> None:
    """For real on a small project: onnx_cnn alone, nothing built."""
    repo = docs.sources()
    shutil.rmtree(repo / "models/tiny_cnn")
    result = docs.run(cmds[0].shell(), repo)
    assert model_stages(ONNX_MODEL) <= result.actions and not any("tiny_cnn" in a for a in result.actions), result.log
    assert re.search(rf"^{ONNX_MODEL} +bit-exact \(10/10\)", result.stdout, re.M), result.log


@runs(r"\./scripts/test\.sh \[ARGS\.\.\.\]")
def suite_script(docs: Docs, cmds: list[Command]) -> None:
    """What CI runs, on one small test file (its arguments go to pytest)."""
    assert (ROOT / ".ci/run").read_text().splitlines()[-1] == f"exec {cmds[0].shell()}"
    result = docs.run(cmds[0].shell(keep={"ARGS...": "tests/test_config.py"}), docs.project())
    assert re.search(r"^\d+ passed in ", result.stdout, re.M) and "failed" not in result.stdout, result.log


# -- README and docs/build.md: the SCons build ----------------------------------------------------------
@runs(r"scons", r"scons -j2")
def build_everything(docs: Docs, cmds: list[Command]) -> None:
    """A model whose build is gone: its stages run and its program is linked again (the firmware, linked from
    objects of the same bytes, is up to date)."""
    for cmd in cmds:
        repo = docs.project(cmd.text.replace(" ", ""))
        shutil.rmtree(repo / "build/host" / ONNX_MODEL)
        actions = docs.run(cmd.shell(), repo).actions
        assert stage_actions(actions) == model_stages(ONNX_MODEL), actions
        assert f"link build/host/{ONNX_MODEL}/{ONNX_MODEL}" in actions and (repo / "build/host/firmware").is_file(), actions


@runs(r"scons (kws|tiny_cnn)(-quantize)?")
def build_one_model(docs: Docs, cmds: list[Command]) -> None:
    """A model up to one stage, then its whole chain. `kws` is the model `kiln new kws` starts (here the zoo's DS-CNN
    as ONNX), built from nothing; of the built tiny_cnn, the stage's artifact is gone, and only that stage runs."""
    repo = docs.project()
    shutil.copytree(ROOT / "models/kws_dscnn_onnx", repo / "models/kws")
    for cmd in sorted(cmds, key=lambda c: not c.text.endswith("-quantize")):
        model, _, stage = cmd.text.split()[1].partition("-")
        if model == "kws":
            want = model_stages(model, STAGE_NAMES[:3] if stage else STAGE_NAMES[3:])
        else:
            (repo / "build/host/tiny_cnn" / ("quantized.kir" if stage else "planned.kir")).unlink()
            want = {f"kiln {stage or 'plan'} tiny_cnn"}
        actions = docs.run(cmd.shell(), repo).actions
        assert stage_actions(actions) == want, actions
        assert "link build/host/firmware" not in actions and (stage or model != "kws" or "link build/host/kws/kws" in actions)


@runs(r"scons -h")
def build_help(docs: Docs, cmds: list[Command]) -> None:
    text = docs.run(cmds[0].shell(), docs.project()).stdout
    assert re.search(r"^Kiln models \(build/host\): onnx_cnn, tiny_cnn$", text, re.M), text
    assert "MODEL-STAGE" in text and "target=cortex-m4" in text


@runs(r"scons --debug=explain")
def build_explained(docs: Docs, cmds: list[Command]) -> None:
    """As docs/build.md's sample: a changed plan table reruns plan, and scons says why."""
    repo = docs.project()
    set_key(repo / "models" / ONNX_MODEL / "model.toml", "plan", "alignment", 64)
    log = docs.run(cmds[0].shell(), repo).log
    assert f"scons: rebuilding `build/host/{ONNX_MODEL}/planned.kir' because:" in log, log
    assert re.search(r'`\{"plan":\{"alignment":64,.*\}\}\' is a new dependency', log), log


@runs(r"scons report", r"kiln build-report build/host -o r\.html")
def build_report(docs: Docs, cmds: list[Command]) -> None:
    """`scons report` and `kiln build-report` write the same page, of every model."""
    repo = docs.project()
    pages = []
    for cmd in cmds:
        docs.run(cmd.shell(), repo)
        pages.append((repo / ("r.html" if cmd.text.startswith("kiln") else "build/host/report.html")).read_text())
    assert 'data-model="tiny_cnn"' in pages[0] and f'data-model="{ONNX_MODEL}"' in pages[0] and pages[0] == pages[1]


def cache_summary(log: str, where: str) -> tuple[int, int, int, int, str]:
    """(hits, misses, refused, stored, rest) of the build's summary line for the cache at `where`."""
    line = re.search(rf"^kiln: cache {re.escape(where)}: (\d+) hits, (\d+) misses, (\d+) entries refused, (\d+) stored(.*)$", log, re.M)
    assert line, log
    return int(line[1]), int(line[2]), int(line[3]), int(line[4]), line[5]


@runs(r"scons --kiln-cache=DIR", r"scons --kiln-cache=DIR --kiln-cache-readonly", r"KILN_CACHE_HMAC_KEY=\.\.\. scons --kiln-cache=DIR")
def cache_folder(docs: Docs, cmds: list[Command]) -> None:
    """Each run rebuilds onnx_cnn's folder: the first fills the cache, a read-only run takes every stage from it,
    a signing run finds no signed entry (its stages run and it stores signed ones), and then takes them."""
    repo, cache = docs.project(), docs.tmp / "cache"
    by_text = {c.text: c for c in cmds}

    def build(cmd: Command) -> Result:
        shutil.rmtree(repo / "build/host" / ONNX_MODEL)
        secret = {"KILN_CACHE_HMAC_KEY=...": "KILN_CACHE_HMAC_KEY=" + "0123abcd" * 4} if "HMAC" in cmd.text else {}
        return docs.run(cmd.shell(replace={"DIR": shlex.quote(str(cache)), **secret}), repo)

    first = build(by_text["scons --kiln-cache=DIR"])
    assert stage_actions(first.actions) == model_stages(ONNX_MODEL) and cache_summary(first.log, str(cache))[3] > 0
    readonly = build(by_text["scons --kiln-cache=DIR --kiln-cache-readonly"])
    assert stage_actions(readonly.actions) == set() and cache_summary(readonly.log, str(cache))[3:] == (0, " (read-only)")
    signing = by_text["KILN_CACHE_HMAC_KEY=... scons --kiln-cache=DIR"]
    assert stage_actions(build(signing).actions) == model_stages(ONNX_MODEL)
    assert stage_actions(build(signing).actions) == set()


@runs(r"scons --kiln-cache=https://cache\.example\.com/kiln", r"scons --kiln-cache=http://cache:8080/kiln",
      r"KILN_CACHE_TOKEN=\.\.\. scons --kiln-cache=https://\.\.\.", r"KILN_CACHE_USER=ci KILN_CACHE_PASSWORD=\.\.\. scons --kiln-cache=https://\.\.\.")
def cache_server(docs: Docs, cmds: list[Command]) -> None:
    """Against nginx with WebDAV on 127.0.0.1 (HTTPS with a certificate of its own, trusted through SSL_CERT_FILE),
    all serving one folder: the first build fills it, every later one (plain HTTP, a bearer token, basic auth,
    each required by its server) takes every stage from it."""
    repo, root = docs.project(), docs.tmp / "served"
    root.mkdir()
    token, password = "a-ci-token-0123456789", "a-ci-password"
    basic = base64.b64encode(f"ci:{password}".encode()).decode()
    for i, cmd in enumerate(cmds):
        auth = f"Bearer {token}" if "TOKEN" in cmd.text else f"Basic {basic}" if "USER" in cmd.text else None
        tls = "https://" in cmd.text
        with nginx(docs.tmp / f"nginx{i}", root=root, auth=auth, tls=tls) as url:
            secrets = {"KILN_CACHE_TOKEN=...": f"KILN_CACHE_TOKEN={token}", "KILN_CACHE_PASSWORD=...": f"KILN_CACHE_PASSWORD={password}"}
            text = cmd.shell(replace={re.search(r"--kiln-cache=(\S+)", cmd.text)[1]: f"{url}/kiln",
                                      **{k: v for k, v in secrets.items() if k in cmd.text}})
            shutil.rmtree(repo / "build/host" / ONNX_MODEL)
            result = docs.run(text, repo, env={"SSL_CERT_FILE": str(docs.tmp / f"nginx{i}/cert.pem")} if tls else None)
        hits, misses, refused, stored, _ = cache_summary(result.log, f"{url}/kiln")
        assert refused == 0 and token not in result.log and password not in result.log
        if i == 0:
            assert stage_actions(result.actions) == model_stages(ONNX_MODEL) and stored > 0, result.log
        else:
            assert stage_actions(result.actions) == set() and misses == stored == 0 and hits > 0, result.log


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
    """A model folder (the same C as the build's), and files named net.* from the zoo's DS-CNN."""
    for i, cmd in enumerate(cmds):
        if "models/tiny_cnn" in cmd.text:
            cwd, name = docs.project(), "tiny_cnn"
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


@runs(r"kiln check build/host")
def check_host(docs: Docs, cmds: list[Command]) -> None:
    text = docs.run(cmds[0].shell(), docs.project()).stdout
    for model in (ONNX_MODEL, "tiny_cnn"):
        assert re.search(rf"^{model} +bit-exact \(10/10\)", text, re.M), text


@runs(r"kiln doc model-toml")
def model_toml_reference(docs: Docs, cmds: list[Command]) -> None:
    """The reference an installed Kiln prints is docs/model-toml.md (scripts/model_toml_doc.py writes both)."""
    assert docs.run(cmds[0].shell(), docs.folder("doc")).stdout == (ROOT / "docs/model-toml.md").read_text()


# -- docs/build.md: a firmware repository -----------------------------------------------------------
@runs(r"cd examples/external_repo && scons -j2 && \./build/gesture_app")
def external_repo(docs: Docs, cmds: list[Command]) -> None:
    repo = docs.project()
    result = docs.run(cmds[0].shell(), repo)
    assert model_stages("gesture") <= result.actions and "link build/gesture_app" in result.actions, result.log
    scores = [int(v) for v in re.search(r"^scores:(.*)$", result.stdout, re.M)[1].split()]
    assert re.search(rf"^class: {int(np.argmax(scores))}$", result.stdout, re.M), result.stdout



# -- docs/build.md: installing Kiln -----------------------------------------------------------------
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"  # scripts/setup.sh: the wheels of Kiln's dependencies, pinned


def hard_link(source: str, target: str) -> None:
    """A file's bytes at `target` without copying them, or a copy on another file system."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def install_from_here(names: list[str], venv: Path) -> None:
    """Install the distributions `names` and what they require into `venv` as this environment has them, hard-linked
    into a folder of `venv` that a .pth file puts first on its path (pip sees them as installed, ahead of older
    copies the virtual environment came with)."""
    folder, seen = venv / "installed-here", set()
    folder.mkdir()
    while names:
        requirement = Requirement(names.pop())
        if canonicalize_name(requirement.name) in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(canonicalize_name(requirement.name))
        dist = importlib.metadata.distribution(requirement.name)
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            source = Path(dist.locate_file(top))
            if source.is_dir():
                shutil.copytree(source, folder / top, copy_function=hard_link, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                hard_link(str(source), str(folder / top))
        names += dist.requires or []
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "installed-here.pth").write_text(f"import sys; sys.path.insert(0, {str(folder)!r})\n")


@runs(r"python3 -m venv \.venv && \.venv/bin/pip install kiln-mcu", r"\.venv/bin/pip install 'kiln-mcu\[torch\]'", r"\.venv/bin/scons -j2")
def install(docs: Docs, cmds: list[Command]) -> None:
    """In a firmware repository (examples/external_repo: its gesture model is a model.py), from a package index that
    is a folder: this checkout's wheel and the pinned dependency wheels (no pip configuration, no network). torch,
    which no local wheel holds, comes from the test environment (with what it requires) before the `[torch]` line,
    as if installed already: that line must resolve the extra and find torch's pinned version satisfied."""
    wheel = docs.fixture("wheel")
    assert zipfile.ZipFile(wheel).read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA").decode() \
        .splitlines()[1] == f"Name: {PROJECT['name']}"
    repo = Path(shutil.copytree(ROOT / "examples/external_repo", docs.tmp / "firmware"))
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{wheel.parent} {WHEELHOUSE}",
           "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    venv, torch = docs.run(cmds[0].shell(), repo, env=env), cmds[1]
    assert re.search(rf"^Successfully installed .*\b{PROJECT['name']}-", venv.stdout, re.M), venv.log
    pin = next(r for r in PROJECT["optional-dependencies"]["torch"] if r.startswith("torch=="))
    install_from_here([pin], repo / ".venv")
    result = docs.run(torch.shell(), repo, env=env)
    assert f"Requirement already satisfied: {pin}" in result.stdout and "does not provide the extra" not in result.log, result.log
    build = docs.run(cmds[2].shell(), repo)
    assert model_stages("gesture") <= build.actions and "link build/gesture_app" in build.actions, build.log
    assert "site-packages/kiln/runtime" in build.log and str(ROOT) not in build.log, build.log  # the installed Kiln


def test_every_install_line_names_the_distribution():
    """Each `pip install` in the docs, the examples and Kiln's missing-package errors installs the distribution
    pyproject.toml declares, with extras it declares; no text names a `kiln[...]` requirement."""
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in doc_files()}
    texts.update({str(p): (ROOT / p).read_text() for p in project_files() if p.parts[0] == "examples" and p.suffix not in (".npy", ".onnx")})
    texts.update({f"missing_package({name})": missing_package(ModuleNotFoundError(name=name)) for name in ("torch", "tflite_micro", "numpy")})
    found = {}
    for where, text in texts.items():
        for match in re.finditer(r"pip\s+install((?:\s+-[\w-]+)*)\s+['\"]?([A-Za-z0-9][\w.-]*(?:\[[^\]]*\])?)", text):
            found[f"{where}:{text.count(chr(10), 0, match.start()) + 1}"] = Requirement(match[2])
        assert not re.search(r"(?<![\w-])kiln\[", text), where
    assert {w.rsplit(":", 1)[0] for w in found} >= {"README.md", "docs/build.md", "examples/platformio/platformio.ini",
                                                   "examples/external_repo/SConstruct", "missing_package(torch)",
                                                   "missing_package(tflite_micro)", "missing_package(numpy)"}, found
    wrong = {w: str(r) for w, r in found.items()
             if canonicalize_name(r.name) != canonicalize_name(PROJECT["name"]) or not r.extras <= set(PROJECT["optional-dependencies"])}
    assert wrong == {}, wrong

# -- docs/cortex-m.md, docs/targets.md: firmware targets ------------------------------------------------
def images(repo: Path, target: str) -> set[str]:
    return {p.relative_to(repo / "build" / target).as_posix() for p in (repo / "build" / target).rglob("*.elf")}


MODEL_IMAGES = {"firmware.elf", f"{ONNX_MODEL}/{ONNX_MODEL}.elf", "tiny_cnn/tiny_cnn.elf"}


@runs(r"scons (-k )?target=[\w,-]+( tiny_cnn)?", r"kiln check build/cortex-m0", r"timeout .* qemu-system-arm .*",
      r"python -m kiln\.target\.size build/cortex-m4 .*", r"(\.venv/bin/)?python bench/(cortex_m|targets)\.py.*")
def firmware_targets(docs: Docs, cmds: list[Command]) -> None:
    """One project, each target built once: the M4 images, one model's image relinked alone, the QEMU line on one
    tiny_cnn sample (samples.bin) whose output is the reference executor's, the size report and the M4 bench; the
    micro:bit, M55 and RISC-V images and `kiln check` of the micro:bit's; then every target (on this project every
    model fits the micro:bit, so -k changes nothing), and bench/targets.py over them."""
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
