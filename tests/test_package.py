"""Kiln as a package a firmware repository installs.

The wheel carries the compiler, the C runtime, the portable kernels and the
SCons tools; its runtime dependencies are what every model source needs. A
firmware repository with no Kiln source in it (a copy of
examples/external_repo, with the SConstruct docs/build.md shows) builds
with the `scons` of a fresh virtual environment that has only the wheel and
its dependencies, installed without the network from the wheels
scripts/setup.sh keeps, and the page's commands run its app bit-exact with
the reference executor on the host and on the Cortex-M4 board (`kiln qemu`)
and check both builds (`kiln check`); its own `site_scons/toolchain.py` and
`site_scons/kiln.py` (and a `kiln.py` and `toolchain.py` beside its
SConstruct) are imported by nobody but itself. The SCons tool, loaded by a
bare interpreter that has only the standard library and SCons, imports
nothing else but the registry, and runs the stages with the Python that has
Kiln.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import external_repo
from conftest import ROOT
from scons_matrix import add_onnx_model, parse_actions
from kiln.stages import STAGES

WHEELHOUSE = Path(sys.prefix) / "wheelhouse"  # scripts/setup.sh: the wheels of Kiln's dependencies, pinned


def run(cmd: list, cwd: Path | None = None, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel and its dependencies, installed from local wheels only."""
    assert any(WHEELHOUSE.glob("numpy-*.whl")), f"{WHEELHOUSE}: no dependency wheels (run scripts/setup.sh)"
    folder = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", folder])
    run([folder / "bin/python", "-m", "pip", "install", "-q", "--no-index", "--find-links", WHEELHOUSE, wheel])
    return folder


def test_the_wheel_carries_the_compiler_runtime_kernels_and_scons_tools(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"kiln/{p.relative_to(ROOT / 'kiln').as_posix()}" for p in (ROOT / "kiln").rglob("*")
            if p.suffix in (".py", ".j2", ".fbs") and "__pycache__" not in p.parts}
    for folder, inside in (("runtime", "runtime"), ("firmware_stubs", "firmware_stubs"), ("site_scons/site_tools", "site_tools")):
        want |= {f"kiln/{inside}/{p.relative_to(ROOT / folder).as_posix()}" for p in (ROOT / folder).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    assert sorted(want - names) == []
    assert not [n for n in names if n.startswith(("tests/", "models/", "bench/", "examples/"))]


def test_runtime_dependencies_are_what_every_source_needs(wheel):
    metadata = zipfile.ZipFile(wheel).read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA").decode()
    required = {re.split(r"[<>=~! ;\[]", line.split(": ", 1)[1])[0].lower()
                for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert required == {"numpy", "onnx", "flatbuffers", "lz4", "jinja2", "scons"}
    assert re.search(r"^Requires-Dist: torch==2\.13\.0; extra == \"torch\"$", metadata, re.M)
    assert re.search(r"^Requires-Dist: tflite-micro\S*; extra == \"tflite\"$", metadata, re.M)


def firmware_repo(base: Path) -> Path:
    """examples/external_repo as docs/build.md shows it, in `base`, with no Kiln source; its gesture model an ONNX file
    (no torch needed); the firmware's own `kiln.py` and `toolchain.py` in its site_scons/ and beside its SConstruct,
    each logging who imports it."""
    models = base / "models"
    add_onnx_model(models / "gesture")
    repo = external_repo.lay_out(base, models)
    shutil.rmtree(models)
    own = ('"""The firmware\'s own {name}: it logs who imports it."""\nimport os, sys\n\nFIRMWARE_OWN = True\n'
           'with open(os.path.join(os.environ["FIRMWARE_LOG"]), "a") as log:\n'
           '    log.write(f"{{__file__}} {{sys.argv[0]}}\\n")\n')
    for path in (repo / "site_scons/toolchain.py", repo / "site_scons/kiln.py", repo / "toolchain.py", repo / "kiln.py"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(own.format(name=path.name))
    with open(repo / "SConstruct", "a") as f:  # the firmware uses its own modules after loading Kiln's tool
        f.write("\nimport kiln, toolchain\nassert kiln.FIRMWARE_OWN and toolchain.FIRMWARE_OWN\n")
    return repo


def test_installed_kiln_builds_a_firmware_repo_with_plain_scons(venv, tmp_path):
    """The commands docs/build.md shows, run from the wheel's environment (its base install: an ONNX model needs no
    extra) in a firmware repository with modules of its own named like Kiln's: the app on the host and under QEMU,
    `kiln check` of both build roots, the report with the Cortex-M4 image's layers; a broken model.toml reported
    by `scons -h`. (tests/doc_runners_install.py walks the same path with both extras, from scratch.)"""
    repo = firmware_repo(tmp_path / "firmware")
    log_file = tmp_path / "imports.log"
    # Fresh stage processes, as in the rest of the suite: a warm worker would outlive the test.
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "FIRMWARE_LOG": str(log_file), "KILN_WORKERS": "0"}
    results = external_repo.run_commands(tmp_path / "firmware", env)
    external_repo.check_documented_run(repo, results)
    log = results["scons -j2"].stdout + results["scons -j2"].stderr
    actions, _ = parse_actions(log)
    assert {f"kiln {s.name} gesture" for s in STAGES} <= actions and "link build/host/gesture_app" in actions, log
    assert "link build/m4/gesture_app.elf" in actions, log
    assert str(ROOT) not in log and "site-packages/kiln/runtime" in log, log  # the installed runtime, not this checkout
    # imported twice per scons run, by the SConstruct's own `import kiln, toolchain`, and by no Kiln process
    lines = [line.split() for line in log_file.read_text().splitlines()]
    assert {Path(module).name for module, _ in lines} == {"kiln.py", "toolchain.py"}, lines
    assert all(importer == str(venv / "bin/scons") for _, importer in lines), lines
    assert re.search(r"^\[1/6\] kiln import gesture$", log, re.M), log  # a cold build counts its stages
    assert re.search(r"^kiln:   build/host/gesture: 6 run / 0 cached of 6 stages, arena [\d,]+ B, host object [\d,]+ B", log, re.M), log
    assert parse_actions(run([venv / "bin/scons", "-Q"], cwd=repo, env=env).stdout)[0] == set()
    (repo / "models/broken").mkdir()  # a broken model.toml next to a good model
    (repo / "models/broken/model.toml").write_text('[plan]\nalignement = 8\n')
    help_text = run([venv / "bin/scons", "-h"], cwd=repo, env=env).stdout
    assert "Kiln models (build/host): gesture" in help_text and "report (build/host/report.html" in help_text
    assert re.search(r"^  not built: .*models/broken/model.toml: unknown key 'plan.alignement'", help_text, re.M)


def test_a_missing_extra_is_one_line_naming_the_python_to_install_into(venv, tmp_path):
    """The wheel without `kiln-mcu[torch]`: a model.py source fails in one line that says what to install, and where."""
    repo = firmware_repo(tmp_path / "firmware")
    shutil.copytree(external_repo.EXAMPLE / "models/gesture", repo / "models/gesture_torch")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "KILN_WORKERS": "0",
           "FIRMWARE_LOG": str(tmp_path / "imports.log")}
    proc = run([venv / "bin/scons", "-Q", "gesture_torch-import"], cwd=repo, env=env, check=False)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("kiln: error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert len(errors) == 1 and f"{venv}/bin/python" in errors[0] and "pip install 'kiln-mcu[torch]'" in errors[0], errors


# -- the SCons process: the standard library, SCons and the registry --------------------------------
BARE_SCONSTRUCT = """
import atexit, json, sys
env = Environment(tools=["default", "kiln_scons"], toolpath=[{tools!r}], KILN_PYTHON={python!r})
models = env.KilnModels("models", "build")
m4 = env.KilnTarget("cortex-m4")  # the target's tool too: the same rule
Default(env.KilnProgram("build/firmware", models, "build"), m4.KilnTargetModels(models, "build-m4")[0]["object"])
atexit.register(lambda: json.dump({{n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}},
                                   open("modules.json", "w")))
"""


def test_the_scons_tool_in_a_bare_interpreter_loads_only_stdlib_scons_and_the_registry(tmp_path):
    scons_only = tmp_path / "scons_only"
    import SCons

    shutil.copytree(Path(SCons.__file__).parent, scons_only / "SCons", ignore=shutil.ignore_patterns("__pycache__"))
    project = tmp_path / "project"
    add_onnx_model(project / "models/onnx_cnn")
    (project / "SConstruct").write_text(BARE_SCONSTRUCT.format(tools=str(ROOT / "site_scons/site_tools"), python=sys.executable))
    # -I -S: no site-packages (numpy, onnx, jinja2, ... are not even importable), no environment, no script folder.
    bare = [sys.executable, "-I", "-S", "-c",
            f"import sys; sys.path.insert(0, {str(scons_only)!r}); sys.argv = ['scons', *sys.argv[1:]]; "
            "from SCons.Script.Main import main; main()", "-Q"]
    proc = run([*bare, "-h"], cwd=project)
    assert "Kiln models (build): onnx_cnn" in proc.stdout
    proc = run(bare, cwd=project)  # the stages run in the Python that has Kiln (KILN_PYTHON)
    assert {f"kiln {s.name} onnx_cnn" for s in STAGES} <= parse_actions(proc.stdout + proc.stderr)[0]
    modules = json.loads((project / "modules.json").read_text())
    registry = {n for n in modules if n.startswith("_kiln_registry_")}
    outside = sorted(n for n in modules if n.split(".")[0] not in sys.stdlib_module_names | set(sys.builtin_module_names)
                     and n.split(".")[0] not in ("SCons", "kiln_scons", "kiln_cortex_m", "__main__") and n not in registry)
    assert outside == [] and "kiln" not in modules
    loaded = sorted(Path(modules[n]).relative_to(ROOT / "kiln").as_posix() for n in registry)
    assert loaded == sorted(["__init__.py", "atomic.py", "buildcache.py", "config.py", "errors.py", "manifest.py",
                             "model_table.py", "names.py", "paths.py", "progress.py", "remotecache.py", "stages.py",
                             "target/__init__.py", "target/cortex_m.py", "target/elf.py", "target/size.py", "target/targets.py",
                             "worker.py",
                             *(f"{package}/config.py" for package in ("frontends", "normalize", "quantize", "lower", "plan", "codegen"))])
