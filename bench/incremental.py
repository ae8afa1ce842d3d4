"""Incremental builds: the wall time of every mutation-matrix rebuild, and the no-op build.

    python bench/incremental.py                  # every row: actions run and wall time (minutes)
    python bench/incremental.py --rows none,table:plan
    python bench/incremental.py --markdown       # the matrix table of docs/build.md (expected actions)

Each row starts from a copy of one fully built tree (tiny_cnn and onnx_cnn,
see tests/scons_matrix.py), applies its edit and runs `scons -j2`. The no-op
build of that tree is shown next to plain SCons's no-op build of a generated
tree with as many C files, so the cost Kiln's signatures add is visible.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from scons_matrix import Build, Row, all_rows, clone_snapshot, describe, make_snapshot, markdown_table, run_scons  # noqa: E402

REPEATS = 3


def time_row(row: Row, snapshot: Path, work: Path) -> tuple[float, set[str]]:
    repo = clone_snapshot(snapshot, work / row.id.replace("/", "_").replace(":", "_"))
    row.apply(repo)
    start = time.perf_counter()
    actions, _, _ = run_scons(repo, "-j2", check=row.error is None)
    return time.perf_counter() - start, actions


def noop_seconds(repo: Path) -> float:
    """The best of REPEATS no-op `scons -Q` runs in `repo`."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        actions, log, _ = run_scons(repo)
        best = min(best, time.perf_counter() - start)
        if actions:
            raise SystemExit(f"{repo}: a no-op build ran {sorted(actions)}\n{log}")
    return best


def plain_tree(folder: Path, count: int) -> Path:
    """A plain SCons project with `count` C files linked into one program, built once."""
    folder.mkdir(parents=True)
    for i in range(count - 1):
        (folder / f"f{i}.c").write_text(f"int f{i}(void);\nint f{i}(void) {{ return {i}; }}\n")
    (folder / "main.c").write_text("int main(void) { return 0; }\n")
    (folder / "SConstruct").write_text(
        'SetOption("hash_format", "sha256")\n'
        'env = Environment(CFLAGS=["-std=c99", "-O2"])\n'
        'env.Decider("content")\n'
        'env.Program("build/app", [env.Object("build/" + str(f)[:-2], f) for f in sorted(Glob("*.c"), key=str)])\n'
    )
    subprocess.run([sys.executable, "-m", "SCons", "-Q"], cwd=folder, check=True, capture_output=True)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row ids (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print the expected-actions table of docs/build.md and stop")
    args = parser.parse_args()
    rows = all_rows()
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [r for r in rows if r.id in wanted]
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        work = Path(tmp)
        snapshot = make_snapshot(work / "snapshot")
        build = Build(snapshot)
        if args.markdown:
            sys.stdout.write(markdown_table(all_rows(), build))
            return 0
        print(f"{'row':46} {'seconds':>8}  {'as expected':11}  stage actions | C actions")
        for row in rows:
            seconds, actions = time_row(row, snapshot, work)
            stage_text, c_text = describe(actions, build)
            ok = "yes" if actions == row.expected(build) else "NO"
            print(f"{row.id:46} {seconds:8.2f}  {ok:11}  {stage_text} | {c_text}", flush=True)
        kiln_noop = noop_seconds(clone_snapshot(snapshot, work / "noop"))
        files = len(build.sources())
        plain_noop = noop_seconds(plain_tree(work / "plain", files))
        print(f"\nno-op build: Kiln tree {kiln_noop:.2f} s; plain SCons tree with {files} C files {plain_noop:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
