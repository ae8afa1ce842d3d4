"""Every command line README.md and docs/*.md show runs here, as documented: tests/doc_commands.py says which
lines are commands and how a runner fills placeholders and optional parts; the runners are in
tests/doc_runners_*.py, by topic. Also: every install line names the distribution pyproject.toml declares.
"""
from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import doc_runners_bench  # noqa: F401  (each module registers its runners)
import doc_runners_build  # noqa: F401
import doc_runners_cli  # noqa: F401
import doc_runners_install  # noqa: F401
from conftest import ROOT, project_files
from doc_commands import RUNNERS, Command, Docs, commands, doc_files, unmarked_lines
from doc_runners_install import PROJECT
from kiln.errors import missing_package

DOCUMENTED = commands()


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


@pytest.mark.parametrize("runner_name", sorted(RUNNERS))
def test_documented_commands_run(runner_name, tmp_path, request):
    runner = RUNNERS[runner_name]
    runner.run(Docs(tmp_path, request), [c for c in DOCUMENTED if runner.matches(c)])


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
