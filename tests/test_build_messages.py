"""What a build says when something is wrong: one line per user error naming the model, the file and the key, with
the closest known name when a name was mistyped; and a summary that reports a failed model as failed, naming its
stage, with no sizes from an earlier build."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, copy_repo
from scons_matrix import add_onnx_model, set_key

SCONS = [sys.executable, "-m", "SCons", "-Q"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The project with one small ONNX model, `alpha`, whose calibration file is `samples.npy`."""
    dest = copy_repo(tmp_path / "repo", ())
    add_onnx_model(dest / "models" / "alpha")
    return dest


def scons(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SCONS, *args], cwd=repo, capture_output=True, text=True, env=env, timeout=600)


def the_error(proc: subprocess.CompletedProcess) -> str:
    """The one error line of a run that failed: asserts there is exactly one, and no traceback."""
    log = proc.stdout + proc.stderr
    errors = [line for line in log.splitlines() if "error:" in line]
    assert proc.returncode != 0 and len(errors) == 1 and "Traceback" not in log, log
    return errors[0]


TOML = "models/alpha/model.toml"


@pytest.mark.parametrize("edit, message", [
    (lambda r: set_key(r / TOML, "model", "source", "modle.onnx"),
     "model.source: modle.onnx is not a file the build tracks in alpha/ (missing, or inside a symlinked folder) "
     "(did you mean 'model.onnx'?)"),
    (lambda r: set_key(r / TOML, "quant", "calibration", ["sample.npy"]),
     "quant.calibration: sample.npy does not exist (relative to alpha/) (did you mean 'samples.npy'?)"),
    (lambda r: ((r / "models/alpha/helper.py").write_text("X = 1\n"), set_key(r / TOML, "model", "depends", ["helpr.py"])),
     "model.depends: helpr.py does not exist (relative to alpha/) (did you mean 'helper.py'?)"),
    (lambda r: set_key(r / TOML, "plann", "budget", 1000), "unknown table [plann] (did you mean 'plan'?)"),
    (lambda r: set_key(r / TOML, "plan", "alignement", 16), "unknown key 'plan.alignement' (did you mean 'plan.alignment'?)"),
    (lambda r: (r / TOML).write_text('source = "model.onnx"\n' + (r / TOML).read_text()),
     "unknown key 'source' outside a table (did you mean 'model.source'?)"),
])
def test_a_mistyped_name_in_model_toml_is_one_line_naming_the_file_the_key_and_the_closest_name(repo, edit, message):
    edit(repo)
    line = the_error(scons(repo))
    assert line == f"kiln: error: {repo / TOML}: {message}"


@pytest.mark.parametrize("args, message", [
    (["alpha-quantise"], "kiln: error: unknown target 'alpha-quantise' (did you mean 'alpha-quantize'?)"),
    (["target=cortex-m5"], "kiln: error: target=cortex-m5: unknown target 'cortex-m5' (did you mean 'cortex-m55'?) "
                           "(targets: host, cortex-m0, cortex-m3, cortex-m4, cortex-m7, cortex-m33, cortex-m55, riscv32, all)"),
    (["KILN_PYTON=python3"], "kiln: error: unknown command-line variable 'KILN_PYTON' (did you mean 'KILN_PYTHON'?) "
                             "(Kiln's: KILN_PYTHON, KILN_WORKERS, KILN_PROGRESS)"),
])
def test_a_mistyped_target_or_variable_is_one_line_with_the_closest_name(repo, args, message):
    proc = scons(repo, *args)
    assert proc.returncode == 2 and the_error(proc) == message
    assert not (repo / "build/host/alpha").exists()  # stopped before building anything


def test_an_unknown_firmware_target_in_a_projects_own_sconstruct_is_one_line(tmp_path):
    """The tool itself refuses a wrong KILN_TARGET in one line (exit 2), where it raised a traceback."""
    tools = ROOT / "site_scons" / "site_tools"
    (tmp_path / "SConstruct").write_text(
        f"env = Environment(tools=['default', 'kiln_scons'], toolpath=[{str(tools)!r}])\n"
        f"cross = env.Clone(tools=['kiln_cortex_m'], toolpath=[{str(tools)!r}], KILN_TARGET=ARGUMENTS['target'])\n")
    proc = scons(tmp_path, "target=cortex-m5")
    assert proc.returncode == 2 and the_error(proc) == (
        "kiln: error: unknown target 'cortex-m5' (did you mean 'cortex-m55'?) "
        "(targets: cortex-m0, cortex-m3, cortex-m4, cortex-m7, cortex-m33, cortex-m55, riscv32)")


def test_an_unknown_stage_names_the_closest_one(repo):
    proc = subprocess.run([sys.executable, "-P", "-m", "kiln.runner", "quantise", "--model-dir", "models/alpha",
                           "--build-dir", "build/host/alpha"], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert the_error(proc) == ("kiln: error: quantise alpha: unknown stage 'quantise' (did you mean 'quantize'?) "
                               "(stages: import, normalize, quantize, lower, plan, codegen)")


def test_a_wrong_shape_calibration_file_names_the_model_the_file_and_the_key(repo):
    np.save(repo / "models/alpha/samples.npy", np.zeros((4, 3, 16), np.float32))
    line = the_error(scons(repo, "alpha-quantize"))
    assert line == ("kiln: error: quantize alpha: models/alpha/model.toml: quant.calibration: samples.npy: input 'x' "
                    "has shape [4, 3, 16], expected [N, 1, 3, 16, 16] or [N, 3, 16, 16]")


def test_an_input_the_model_does_not_have_names_the_closest_one(repo):
    set_key(repo / TOML, "inputs.xx", "shape", [1, 3, 16, 16])
    assert the_error(scons(repo, "alpha-import")) == (
        "kiln: error: import alpha: models/alpha/model.onnx: inputs 'xx' in model.toml are not inputs of the model "
        "(did you mean 'x'?) (it has 'x')")


def test_kiln_python_on_the_command_line_runs_the_stages_over_the_environment(repo, tmp_path):
    """`scons KILN_PYTHON=...` (as `scons -h` shows it) is a command-line variable, and it wins over the environment."""
    marker = tmp_path / "ran"
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "KILN_PYTHON": str(tmp_path / "no-such-python")}
    proc = scons(repo, f"KILN_PYTHON={wrapper}", "alpha-import", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.read_text().split()[:4] == ["-P", "-m", "kiln.runner", "import"]
    proc = scons(repo, "alpha-normalize", env=env)  # the environment alone: that Python, which does not exist
    assert the_error(proc) == f"kiln: error: normalize alpha: KILN_PYTHON {tmp_path / 'no-such-python'} is not a program"


SUMMARY_HEAD = ("; per model: stages run / from the cache, arena, code and constants (host object, or flash on a target), "
                "stage time")


def test_after_a_failed_stage_the_summary_names_it_and_shows_no_stale_sizes(repo):
    add_onnx_model(repo / "models" / "beta")
    assert scons(repo, "-j2").returncode == 0
    set_key(repo / TOML, "kernels", "profile", "portabel")
    for keep_going in ([], ["-k"]):
        proc = scons(repo, "-j2", *keep_going)
        log = proc.stdout + proc.stderr
        assert the_error(proc) == ("kiln: error: lower alpha: models/alpha/model.toml: kernels.profile: unknown profile "
                                   "'portabel' (did you mean 'portable'?)")
        summary = [line for line in log.splitlines() if line.startswith("kiln: ") and not line.startswith("kiln: error:")]
        assert summary[0] == "kiln: 1 model(s) failed" + SUMMARY_HEAD, log
        assert re.fullmatch(r"kiln:   build/host/alpha: FAILED in stage lower \(its error is above\); "
                            r"1 run / 0 cached of 6 stages, \d+\.\d s", summary[1]), log
        assert len(summary) == 2, log  # beta was up to date: no line; and no arena or size of alpha's last build


def test_the_summary_labels_the_host_object_and_reports_a_targets_flash(repo):
    proc = scons(repo, "-j2")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("kiln:   build/host/alpha:"))
    host = read_only_bytes(repo / "build/host/alpha/alpha.o", "size")
    assert re.fullmatch(rf"kiln:   build/host/alpha: 6 run / 0 cached of 6 stages, arena [\d,]+ B, host object {host:,} B, "
                        r"\d+\.\d s", line), proc.stdout  # the x86 object's code and constants, labelled so (not flash)
    set_key(repo / TOML, "plan", "alignment", 32)  # stages run again, and the target is built this time
    proc = scons(repo, "-j2", "target=cortex-m4")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("kiln:   build/host/alpha:"))
    flash = read_only_bytes(repo / "build/cortex-m4/alpha/alpha.o", "arm-none-eabi-size")
    assert re.fullmatch(rf"kiln:   build/host/alpha: 2 run / 0 cached of 6 stages, arena [\d,]+ B, flash {flash:,} B on "
                        r"cortex-m4, \d+\.\d s", line), proc.stdout  # no host object: this build did not compile it


def read_only_bytes(obj: Path, tool: str) -> int:
    """An object's bytes that go to flash, by binutils' `size` (Berkeley format: its text column counts every
    allocated read-only section, .rodata included)."""
    out = subprocess.run([tool, str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()
    return int(out[1].split()[0])
