"""Incremental builds of the model zoo: the no-op build against plain SCons, edits, and the cold build.

    python bench/incremental.py                    # the zoo: cold build, no-op ratio, edits (a few minutes)
    python bench/incremental.py --json build/incremental.json [--models tiny_cnn,...] [--pairs 7] [--edits 3]
    python bench/incremental.py --rows none,table:plan   # also time mutation-matrix rows (tests/scons_matrix.py)
    python bench/incremental.py --markdown         # the matrix table of docs/build.md (expected actions)

The zoo is a copy of the project with every model under models/, built with
`scons -j2` from nothing (cold: wall and CPU seconds of the build and its
stage processes, and the workers with the stage processes they forked). Then:

- no-op: `scons -Q` in the built zoo next to plain SCons over the same
  files: a generated SConstruct whose targets are the zoo's build files one
  for one (each artifact a copy of the zoo's, the objects compiled from the
  same C files with the same flags, the programs linked from them), so both
  builds check the same bytes and as many targets. The runs are paired
  (Kiln, plain, Kiln, plain, ...): `noop_ratio` is the median of the pairs'
  ratios, so machine load hits both sides alike;
- comment edit: comments added to tiny_cnn's model.py (stage actions run);
- code edit: one statement added to tiny_cnn's model.py, with the worker
  warm (median wall seconds; import reruns, its graph is the same);
- stage module edit: a comment in a module only the plan stage is built from
  (plan reruns for every model; wall seconds).

Edits are measured with workers (the default) and with `KILN_WORKERS=0`. The
JSON holds `noop_ratio`, `comment_edit_stage_actions`, `code_edit_seconds`,
`stage_module_edit_seconds`, the fresh-process numbers and the cold build.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import copy_repo  # noqa: E402
from scons_matrix import (HOST, Build, Row, all_rows, append, clone_snapshot, comment_line, describe, make_snapshot,  # noqa: E402
                          markdown_table, own_file, run_scons)
from kiln import worker  # noqa: E402

PAIRS = 7
EDITS = 3


def timed_scons(repo: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, float, set[str]]:
    """Wall and CPU seconds (SCons and every process it waited for) of `scons -Q args`, and its actions."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    actions, _, _ = run_scons(repo, *args, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), actions


def worker_cpu_seconds(folder: Path) -> float:
    """CPU seconds of the workers serving from `folder` and of the stage processes they forked and reaped."""
    total = 0
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"kiln.worker" not in argv or not any(a.startswith(str(folder).encode()) for a in argv):
                continue
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def stage_actions(actions: set[str]) -> list[str]:
    return sorted(a for a in actions if a.startswith("kiln "))


def plain_tree(zoo: Path, dest: Path) -> tuple[Path, int]:
    """Plain SCons over the zoo's build files: one target per file of `build/host` (copies of the artifacts, objects
    compiled from the same C sources, programs linked from the same objects); built once. Returns it and its target
    count."""
    build = Build(zoo)
    objects = {obj: src.relative_to(zoo).as_posix() for obj, src in build.sources().items()}
    programs = {p: sorted(objs) for p, objs in build.programs().items()}
    copies = []
    for f in sorted((zoo / HOST).rglob("*")):
        rel = f.relative_to(zoo).as_posix()
        if f.is_file() and rel not in objects and rel not in programs:
            copies.append(rel)
            (dest / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / "src" / rel)
    for folder in ("runtime", "firmware_stubs"):
        shutil.copytree(zoo / folder, dest / folder)
    (dest / "plain.json").write_text(json.dumps({"copies": copies, "objects": objects, "programs": programs}))
    (dest / "SConstruct").write_text(
        "import json, os\n"
        'SetOption("hash_format", "sha256")\n'
        'env = Environment(ENV={"PATH": os.environ.get("PATH", "")}, CPPPATH=["runtime"],\n'
        '                  CFLAGS=["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"])\n'
        'env.Decider("content")\n'
        'spec = json.load(open("plain.json"))\n'
        'for rel in spec["copies"]:\n'
        '    env.Command(rel, "src/" + rel, Copy("$TARGET", "$SOURCE"))\n'
        'for obj, src in spec["objects"].items():\n'
        '    env.Object(obj, src)\n'
        'for program, objs in spec["programs"].items():\n'
        '    env.Program(program, objs, LIBS=["m"])\n')
    subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2"], cwd=dest, check=True, capture_output=True)
    return dest, len(copies) + len(objects) + len(programs)


def noop_pairs(zoo: Path, plain: Path, pairs: int) -> tuple[list[float], list[float]]:
    kiln, base = [], []
    for _ in range(pairs):
        for repo, out in ((zoo, kiln), (plain, base)):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "SCons", "-Q"], cwd=repo, capture_output=True, text=True)
            out.append(time.perf_counter() - start)
            lines = (proc.stdout + proc.stderr).splitlines()
            if proc.returncode != 0 or any(not (line.startswith("scons: ") and line.endswith("is up to date.")) for line in lines):
                raise SystemExit(f"{repo}: the no-op build was not one:\n{proc.stdout}{proc.stderr}")
    return kiln, base


def edits(zoo: Path, env: dict[str, str], tag: str, count: int) -> dict[str, Any]:
    """Comment, code and stage module edits in `zoo` (left as it was), with the environment `env`."""
    model_py = zoo / "models/tiny_cnn/model.py"
    original = model_py.read_text()
    append(model_py, "\n# a comment\n")
    model_py.write_text(model_py.read_text().replace("import torch\n", "import torch  # a comment after code\n", 1))
    _, _, comment = timed_scons(zoo, "-j2", env=env)
    code = []
    for i in range(count + 1):  # the first warms the worker (it loads torch for the import stage), and is not counted
        model_py.write_text(original + f"\n_BENCH_EDIT_{tag} = {i}\n")
        seconds, _, actions = timed_scons(zoo, "-j2", env=env)
        if stage_actions(actions) != ["kiln import tiny_cnn"]:
            raise SystemExit(f"a code edit of model.py ran {stage_actions(actions)}")
        code.append(seconds)
    model_py.write_text(original)
    timed_scons(zoo, "-j2", env=env)
    module = own_file("plan", zoo)
    text = module.read_text()
    append(module, comment_line(module))
    module_seconds, _, actions = timed_scons(zoo, "-j2", env=env)
    models = Build(zoo).models
    if stage_actions(actions) != sorted(f"kiln plan {m}" for m in models):
        raise SystemExit(f"an edit of {module.name} ran {stage_actions(actions)}")
    module.write_text(text)
    timed_scons(zoo, "-j2", env=env)
    return {"comment_edit_stage_actions": len(stage_actions(comment)), "code_edit_seconds": round(statistics.median(code[1:]), 2),
            "stage_module_edit_seconds": round(module_seconds, 2), "stage_module_edit_actions": len(stage_actions(actions))}


def zoo_bench(work: Path, models: tuple[str, ...], pairs: int, count: int, fresh_too: bool) -> dict[str, Any]:
    zoo = copy_repo(work / "zoo", (*models, "_kit"))  # the models and their shared kit
    env = {**os.environ, "KILN_WORKERS": "1", "KILN_WORKER_DIR": str(Path(tempfile.mkdtemp(prefix="kb")))}
    fresh_env = {**env, "KILN_WORKERS": "0"}
    try:
        cold_wall, cold_cpu, actions = timed_scons(zoo, "-j2", env=env)
        cold_cpu += worker_cpu_seconds(Path(env["KILN_WORKER_DIR"]))
        plain, plain_targets = plain_tree(zoo, work / "plain")
        kiln_targets = sum(1 for f in (zoo / HOST).rglob("*") if f.is_file())
        kiln, base = noop_pairs(zoo, plain, pairs)
        warm = edits(zoo, env, "warm", count)
    finally:
        worker.stop_all(Path(env["KILN_WORKER_DIR"]))
        shutil.rmtree(env["KILN_WORKER_DIR"], ignore_errors=True)
    fresh = edits(zoo, fresh_env, "fresh", count) if fresh_too else {}
    return {"models": len(models), "cold_seconds": round(cold_wall, 1), "cold_cpu_seconds": round(cold_cpu, 1),
            "cold_stage_actions": len(stage_actions(actions)),
            "noop_seconds": round(statistics.median(kiln), 3), "plain_noop_seconds": round(statistics.median(base), 3),
            "noop_ratio": round(statistics.median(k / b for k, b in zip(kiln, base)), 2),
            "kiln_targets": kiln_targets, "plain_targets": plain_targets, **warm,
            "fresh_process": {k: v for k, v in fresh.items() if k != "comment_edit_stage_actions"}}


def time_rows(rows: list[Row], work: Path) -> None:
    snapshot = make_snapshot(work / "snapshot")
    build = Build(snapshot)
    print(f"\n{'row':46} {'seconds':>8}  {'as expected':11}  stage actions | C actions")
    for row in rows:
        repo = clone_snapshot(snapshot, work / row.id.replace("/", "_").replace(":", "_"))
        row.apply(repo)
        start = time.perf_counter()
        actions, _, _ = run_scons(repo, "-j2", check=row.error is None)
        seconds = time.perf_counter() - start
        stage_text, c_text = describe(actions, build)
        ok = "yes" if actions == row.expected(build) else "NO"
        print(f"{row.id:46} {seconds:8.2f}  {ok:11}  {stage_text} | {c_text}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="also time these mutation-matrix rows, comma-separated ('all' for every row)")
    parser.add_argument("--markdown", action="store_true", help="print the expected-actions table of docs/build.md and stop")
    parser.add_argument("--json", type=Path, help="also write the zoo results as JSON")
    parser.add_argument("--models", help="the zoo's models, comma-separated (default: all; tiny_cnn is always one)")
    parser.add_argument("--pairs", type=int, default=PAIRS, help=f"paired no-op runs (default {PAIRS})")
    parser.add_argument("--edits", type=int, default=EDITS, help=f"timed code edits (default {EDITS})")
    parser.add_argument("--no-fresh", action="store_true", help="measure the edits with workers only")
    args = parser.parse_args()
    os.environ["KILN_WORKERS"] = "0"  # the matrix rows and the snapshot as the tests run them
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        work = Path(tmp)
        if args.markdown:
            sys.stdout.write(markdown_table(all_rows(), Build(make_snapshot(work / "snapshot"))))
            return 0
        models = sorted({p.parent.name for p in (ROOT / "models").glob("*/model.toml")} if not args.models
                        else {"tiny_cnn", *args.models.split(",")})
        r = zoo_bench(work, tuple(models), args.pairs, args.edits, not args.no_fresh)
        print(f"zoo: {r['models']} models, cold build {r['cold_seconds']} s wall, {r['cold_cpu_seconds']} s CPU "
              f"({r['cold_stage_actions']} stage actions)")
        print(f"\n| measure | with workers | fresh processes |\n|---|---|---|")
        print(f"| no-op: Kiln / plain SCons ({r['kiln_targets']} / {r['plain_targets']} file targets), medians of "
              f"{args.pairs} pairs | {r['noop_seconds']} s / {r['plain_noop_seconds']} s = {r['noop_ratio']}x | |")
        print(f"| comment edit in model.py: stage actions | {r['comment_edit_stage_actions']} | |")
        fresh = {k: f"{v} s" for k, v in r["fresh_process"].items()}
        print(f"| code edit in model.py (median of {args.edits}) | {r['code_edit_seconds']} s "
              f"| {fresh.get('code_edit_seconds', '-')} |")
        print(f"| comment in a plan module: plan for {r['stage_module_edit_actions']} models | {r['stage_module_edit_seconds']} s "
              f"| {fresh.get('stage_module_edit_seconds', '-')} |")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(r, indent=1) + "\n")
        if args.rows:
            wanted = set(args.rows.split(","))
            time_rows([row for row in all_rows() if "all" in wanted or row.id in wanted], work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
