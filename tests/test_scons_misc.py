"""The SCons build as a user meets it: help, aliases, --debug=explain, -j determinism, killed
builds, another repository adopting Kiln, the model.toml reference and `kiln new`."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

import external_repo
from conftest import ROOT
from onnx_models import small_cnn
from scons_matrix import (ONNX_MODEL, TORCH_MODEL, Build, add_onnx_model, append, build_files, clone_snapshot, comment_line,
                          fresh_clone, from_stage, own_file, run_scons, set_key, shared_snapshot, stages)
from kiln import config
from kiln.cli import main as kiln
from kiln.errors import KilnError
from kiln.config import config_schema
from kiln.stages import STAGES

MODELS = (ONNX_MODEL, TORCH_MODEL)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return shared_snapshot(tmp_path_factory)


# -- what a user sees -------------------------------------------------------------------------
def test_help_lists_models_targets_stages_and_options(snapshot, tmp_path):
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    proc = subprocess.run([sys.executable, "-m", "SCons", "-h"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert re.search(r"^Kiln models \(build/host\): onnx_cnn, tiny_cnn$", text, re.M), text
    for word in ("MODEL-STAGE", "target=cortex-m4", "--kiln-cache=DIR", "--kiln-cache-readonly", "KILN_CACHE",
                 *(s.name for s in STAGES)):
        assert word in text, word


def test_model_and_stage_aliases_build_exactly_their_part(snapshot, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "repo")
    for st in STAGES:
        actions, log, _ = run_scons(repo, f"{ONNX_MODEL}-{st.name}")
        assert actions == {f"kiln {st.name} {ONNX_MODEL}", f"sources build/host/_kiln/{st.name}.sources"}, log
    actions, log, _ = run_scons(repo, "-j2", ONNX_MODEL)
    program = f"build/host/{ONNX_MODEL}/{ONNX_MODEL}"
    objects = Build(snapshot).programs()[program]
    assert actions == ({f"table build/host/{ONNX_MODEL}/{ONNX_MODEL}_models.c", f"link {program}", f"manifest {program}.manifest"}
                       | {f"cc {o}" for o in objects}), log


def test_explain_shows_the_config_text_and_the_module_that_changed(snapshot, tmp_path):
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    set_key(repo / "models" / TORCH_MODEL / "model.toml", "plan", "alignment", 64)
    module = own_file("plan", repo)
    append(module, comment_line(module))
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "--debug=explain"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    reasons = explanations(proc.stdout)
    rel = module.relative_to(repo).as_posix()
    listing = "build/host/_kiln/plan.sources"  # the one node standing for the plan stage's source modules
    assert reasons[listing] == [f"`{rel}' changed"]
    torch_plan = reasons[f"build/host/{TORCH_MODEL}/planned.kir"]
    assert f"`{listing}' changed" in torch_plan
    assert any('"alignment":16' in r and r.endswith("is no longer a dependency") for r in torch_plan), torch_plan
    assert any('"alignment":64' in r and r.endswith("is a new dependency") for r in torch_plan), torch_plan
    assert reasons[f"build/host/{ONNX_MODEL}/planned.kir"] == [f"`{listing}' changed"]


def explanations(log: str) -> dict[str, list[str]]:
    """`--debug=explain` output: target -> its reasons, one per line."""
    out: dict[str, list[str]] = {}
    target = None
    for line in log.splitlines():
        match = re.match(r"scons: rebuilding `(.+)' because(:| (.*))$", line)
        if match:
            target = match[1]
            out[target] = [match[3]] if match[3] else []
        elif target and line.startswith(" "):
            out[target].append(line.strip())
        else:
            target = None
    return out


def test_j1_and_j2_build_the_same_bytes(snapshot, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "repo")
    run_scons(repo, "-j1")
    serial, parallel = build_files(repo), build_files(snapshot)  # the snapshot is built with -j2
    assert sorted(serial) == sorted(parallel)
    assert [p for p in serial if serial[p] != parallel[p]] == []


# -- interrupted builds ----------------------------------------------------------------------
def stage_process(group: int, stage: str) -> str | None:
    """The model whose stage process (`python -P -m kiln.runner <stage>`) is running in process group `group`, if any."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ProcessLookupError):
            continue
        if argv[1:5] == ["-P", "-m", "kiln.runner", stage]:
            return Path(argv[argv.index("--build-dir") + 1]).name
    return None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("stage", [s.name for s in STAGES])
def test_build_killed_during_a_stage_recovers(snapshot, tmp_path, stage, sig):
    """Kill scons and its process group (as a terminal or CI runner does) while `stage` runs:
    nothing half-written is left, the killed stage reruns, the result equals an uninterrupted build."""
    repo = clone_snapshot(snapshot, tmp_path / "repo")
    module = own_file(stage, repo)
    append(module, comment_line(module))  # reruns `stage` for every model; its outputs do not change
    proc = subprocess.Popen([sys.executable, "-u", "-m", "SCons", "-Q", "-j1"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen, killed = [], None
    for line in proc.stdout:
        seen.append(line)
        if re.match(rf"^(\[\d+/\d+\] )?kiln {stage} ", line):
            while killed is None and proc.poll() is None:
                killed = stage_process(proc.pid, stage)
                time.sleep(0.002)
            if killed:
                os.killpg(proc.pid, sig)
                break
    seen += proc.stdout.readlines()
    proc.wait(timeout=60)
    assert killed and proc.returncode != 0, "".join(seen)
    started = [m[1] for line in seen if (m := re.match(rf"^(?:\[\d+/\d+\] )?kiln {stage} (\S+)$", line.strip()))]

    listing = f"build/host/_kiln/{stage}.sources"  # the stage's list of its modules: the edit changed it
    expected = {p: data for p, data in build_files(snapshot).items() if p != listing}
    left = build_files(repo)
    partial = [p for p in left if left[p] != expected.get(p) and p != listing]
    assert all(re.fullmatch(r"\..+\.tmp", Path(p).name) for p in partial), partial

    # SIGINT lets scons record the stages that finished before it; after SIGKILL it records nothing.
    finished = started[:started.index(killed)] if sig == signal.SIGINT else []
    actions, log, _ = run_scons(repo, "-j1")
    assert actions - {f"sources {listing}"} == stages([stage], [m for m in MODELS if m not in finished]), log
    assert {p: data for p, data in build_files(repo).items() if p in expected} == expected
    assert run_scons(repo)[0] == set()


# -- another repository adopting Kiln -----------------------------------------------------------
def test_external_repo_rebuilds_nothing_and_its_check_advice_is_true(external_repo_run, tmp_path):
    """After the documented run (its commands and outputs: tests/doc_runners_build.py): nothing more to build; each
    model's own programs are part of its alias, which `kiln check` names; by hand, the report finds the M4 root."""
    repo, _ = external_repo_run
    env = external_repo.documented_env(tmp_path)
    assert run_scons(repo, env=env)[0] == set()
    # Each model's own programs are part of its alias: `kiln check` says so, and its advice builds them.
    clone = Path(shutil.copytree(repo, tmp_path / "clone"))
    for program in ("build/host/gesture/gesture", "build/m4/gesture/gesture.elf"):
        (clone / program).unlink()
    for root in ("build/host", "build/m4"):
        proc = subprocess.run([sys.executable, "-m", "kiln", "check", root], cwd=clone, capture_output=True, text=True)
        assert proc.returncode == 1 and "gesture: not built: no program (run `scons gesture`)" in proc.stdout, proc.stdout
    actions, _, _ = run_scons(clone, "gesture", env=env)
    assert actions == {"link build/host/gesture/gesture", "link build/m4/gesture/gesture.elf"}, actions
    for root in ("build/host", "build/m4"):
        proc = subprocess.run([sys.executable, "-m", "kiln", "check", root], cwd=clone, capture_output=True, text=True)
        assert proc.returncode == 0 and "bit-exact (10/10)" in proc.stdout, proc.stdout
    # By hand, the report finds the Cortex-M4 root beside its own by the target the root's record names.
    proc = subprocess.run([sys.executable, "-m", "kiln", "build-report", "build/host", "-o", "page.html"], cwd=clone,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "m4/gesture/gesture.elf under QEMU" in (clone / "page.html").read_text(), proc.stderr


APPS = {  # a firmware's own main on the board: the C library's heap is bounded, stdout is flushed at exit
    "heap.c": '#include <stdio.h>\n#include <stdlib.h>\nint main(void)\n{\n    int blocks = 0;\n'
              '    while (malloc(65536) != NULL) {\n        ++blocks;\n    }\n'
              '    printf("%d blocks", blocks);\n    return 7;\n}\n',
    "fault.c": "int main(void)\n{\n    __builtin_trap();\n}\n",
    "spin.c": "int main(void)\n{\n    volatile int forever = 1;\n    while (forever) {\n    }\n    return 0;\n}\n",
}


def test_own_main_on_the_board_heap_exit_status_fault_and_timeout(external_repo_run, tmp_path):
    repo = Path(shutil.copytree(external_repo_run[0], tmp_path / "repo"))
    for name, text in APPS.items():
        (repo / name).write_text(text)
    with open(repo / "SConstruct", "a") as f:
        f.writelines(f'm4.KilnApp("build/m4/{Path(n).stem}", ["{n}"], [m4_models["gesture"]])\n' for n in APPS)
        f.write('rv = env.KilnTarget("riscv32")\n'  # picolibc's stdio there, newlib's on the Arm cores
                'rv.KilnApp("build/rv/gesture_app", ["main.c"], [rv.KilnTargetModels(models, "build/rv")["gesture"]])\n')
    run_scons(repo, "build/rv/gesture_app.elf", *(f"build/m4/{Path(n).stem}.elf" for n in APPS),
              env=external_repo.documented_env(tmp_path))
    kiln = [sys.executable, "-m", "kiln", "qemu"]
    riscv = subprocess.run(kiln + ["build/rv/gesture_app.elf"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert riscv.returncode == 0 and riscv.stdout == external_repo_run[1]["./build/host/gesture_app"].stdout, riscv
    heap = subprocess.run(kiln + ["build/m4/heap.elf"], cwd=repo, capture_output=True, text=True, timeout=120)
    # 4 MB of RAM, less the stack and the data: some 63 blocks of 64 KB, then NULL; the line without a newline flushed.
    assert heap.returncode == 7 and re.fullmatch(r"(\d+) blocks", heap.stdout) and 50 < int(heap.stdout.split()[0]) < 64
    fault = subprocess.run(kiln + ["build/m4/fault.elf"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert fault.returncode == 1 and fault.stdout == "", fault
    assert re.fullmatch(r"kiln: error: build/m4/fault.elf: firmware fault \(exit status 134\): kiln fault: UsageFault .*\n",
                        fault.stderr), fault.stderr
    spin = subprocess.run(kiln + ["build/m4/spin.elf", "--timeout", "2"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert spin.returncode == 1 and spin.stderr == ("kiln: error: build/m4/spin.elf: no exit within 2 s (the firmware hung "
                                                    "or ran too long; --timeout)\n"), spin.stderr


@pytest.mark.parametrize("edit, message", [
    (('models["gesture"]', 'models["gestrue"]'), "kiln: error: no model 'gestrue' in models (did you mean 'gesture'?)"),
    (('"build/m4"', '"build/host"'), "kiln: error: build root build/host holds the host build; give the cortex-m4 build "
                                     "a root of its own (for example build/cortex-m4)"),
    (('KilnTarget("cortex-m4")', 'KilnTarget("cortex-m9")'), "kiln: error: unknown target 'cortex-m9' (did you mean 'cortex-m7'?) (targets: cortex-m0, "),
])
def test_external_repo_mistakes_are_one_line(tmp_path, edit, message):
    repo = external_repo.lay_out(tmp_path)
    shutil.rmtree(repo / "models/gesture")
    add_onnx_model(repo / "models/gesture")
    (repo / "SConstruct").write_text((repo / "SConstruct").read_text().replace(*edit))
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-n"], cwd=repo, capture_output=True, text=True,
                          env=external_repo.documented_env(tmp_path))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("kiln: error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stdout + proc.stderr
    assert errors[0].startswith(message), errors


def test_external_repo_builds_the_other_models_when_the_one_it_names_is_broken(tmp_path):
    """`models["gesture"]` of a broken gesture is a stand-in: one line names its model.toml, every other model builds
    (its programs on the host and the board), and the build then fails."""
    repo = external_repo.lay_out(tmp_path)
    shutil.rmtree(repo / "models/gesture")
    add_onnx_model(repo / "models/gesture")
    add_onnx_model(repo / "models/other")
    set_key(repo / "models/gesture/model.toml", "plan", "alignement", 8)
    actions, log, status = run_scons(repo, "-j2", env=external_repo.documented_env(tmp_path), check=False)
    errors = [line for line in log.splitlines() if line.startswith("kiln: error:")]
    assert status == 2 and "Traceback" not in log and "KeyError" not in log, log
    assert len(errors) == 1 and "models/gesture/model.toml" in errors[0] and "did you mean 'plan.alignment'" in errors[0]
    assert {"link build/host/other/other", "link build/m4/other/other.elf"} <= actions, log
    assert not [a for a in actions if "gesture" in a], log


# -- model.toml: the reference page, errors, `kiln new` ---------------------------------------
def test_model_toml_reference_is_generated_from_the_schema():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/model_toml_doc.py")], capture_output=True, text=True, check=True)
    assert (ROOT / "docs/model-toml.md").read_text() == proc.stdout, "regenerate: python scripts/model_toml_doc.py --write"
    for table, keys in config_schema().items():
        assert f"## `[{table}]`" in proc.stdout
        assert all(f"| `{k}` |" in proc.stdout for k in keys)


@pytest.mark.parametrize("text, fragment", [
    ("plan = 3\n", "'plan' must be a table"),
    ("[inputs]\nx = 3\n", "inputs.x: expected a table"),
    ("[inputs.x]\nshape = [1, 0]\n", "inputs.x.shape: expected a list of positive integers"),
    ("[inputs.x]\nshape = [1]\ndtype = \"int8\"\n", "only 'float32' model inputs"),
    ("[quant]\nobserverr = \"minmax\"\n", "did you mean 'quant.observer'"),
    ("[quant]\ncalibration = [\"samples.csv\"]\n", "expects a list of .npy/.npz file paths"),
    ("[plan]\nalignment = true\n", "plan.alignment: expected int, got bool"),
    ("[codegen]\nprefix = \"9lives\"\n", "is not a C identifier"),
    ("[normalize]\ninput_layout = \"nhwc\"\n", "is not one of 'source', 'NHWC'"),
    ("[modle]\n", "did you mean 'model'"),
])
def test_config_errors_are_one_line_naming_file_and_key(tmp_path, text, fragment):
    path = tmp_path / "model.toml"
    path.write_text(text)
    with pytest.raises(KilnError) as err:
        config.load(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and fragment in message, message


def test_a_broken_model_toml_is_reported_and_the_other_models_build(snapshot, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "repo")
    set_key(repo / "models" / TORCH_MODEL / "model.toml", "plan", "alignement", 8)
    proc = subprocess.run([sys.executable, "-m", "SCons", "-h"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0 and re.search(r"^Kiln models \(build/host\): onnx_cnn$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^  not built: .*models/tiny_cnn/model.toml: unknown key 'plan.alignement'", proc.stdout, re.M)
    actions, log, status = run_scons(repo, "-j2", check=False)
    errors = [line for line in log.splitlines() if line.startswith("kiln: error:")]
    assert status == 2 and "Traceback" not in log, log
    assert len(errors) == 1 and "models/tiny_cnn/model.toml" in errors[0] and "did you mean 'plan.alignment'" in errors[0]
    assert from_stage("import", [ONNX_MODEL]) <= actions and "link build/host/firmware" in actions, log
    assert not [a for a in actions if a.startswith("kiln ") and a.endswith(TORCH_MODEL)], log


def test_new_model_from_model_py(tmp_path):
    source = ROOT / "models" / TORCH_MODEL / "model.py"
    assert kiln(["new", "kws", "--from", str(source), "--models-dir", str(tmp_path)]) == 0
    folder = tmp_path / "kws"
    assert sorted(p.name for p in folder.iterdir()) == ["model.py", "model.toml"]
    assert (folder / "model.py").read_bytes() == source.read_bytes()
    text = (folder / "model.toml").read_text()
    cfg = config.load(folder / "model.toml")
    assert cfg == config.validate({}, "defaults")
    for table, keys in config_schema().items():
        for key in keys.values():
            assert re.search(rf"^(# )?{key.name} = ", text, re.M), key.name


def test_new_model_from_onnx_copies_external_data_and_lists_inputs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(small_cnn(17), src / "net.onnx", save_as_external_data=True, location="net.weights", size_threshold=0)
    assert kiln(["new", "vision", "--from", str(src / "net.onnx"), "--models-dir", str(tmp_path / "models")]) == 0
    folder = tmp_path / "models/vision"
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "model.toml", "net.weights"]
    cfg = config.load(folder / "model.toml")
    assert cfg["model"]["source"] == "model.onnx"
    assert "# [inputs.x]\n# shape = [batch, 3, 16, 16]\n" in (folder / "model.toml").read_text()
    assert len(onnx.load(folder / "model.onnx").graph.initializer) == len(small_cnn(17).graph.initializer)


@pytest.mark.parametrize("case", ["exists", "suffix", "missing", "name"])
def test_new_model_refuses_bad_requests_in_one_line(tmp_path, capsys, case):
    source = tmp_path / "model.py"
    source.write_text("# a model\n")
    (tmp_path / "models/taken").mkdir(parents=True)
    (tmp_path / "models/taken/model.toml").write_text("# mine\n")
    args = {"exists": ["taken", "--from", str(source)],
            "suffix": ["other", "--from", str(tmp_path / "models/taken/model.toml")],
            "missing": ["other", "--from", str(tmp_path / "nope.onnx")],
            "name": ["../up", "--from", str(source)]}[case]
    assert kiln(["new", *args, "--models-dir", str(tmp_path / "models")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kiln: error:"), err
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["taken"]
    assert (tmp_path / "models/taken/model.toml").read_text() == "# mine\n"
