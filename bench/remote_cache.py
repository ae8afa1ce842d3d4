"""The remote build cache on a real server: a fresh clone with a warm nginx cache runs no stage action and
gets byte-identical firmware.

    python bench/remote_cache.py                        # the whole zoo
    python bench/remote_cache.py kws_dscnn_onnx         # some models
    python bench/remote_cache.py --json build/remote_cache.json

Starts nginx (WebDAV PUT, 127.0.0.1, a temporary folder; tests/cache_servers.py), builds a fresh clone of the
project with `--kiln-cache=http://...` (a cold build that fills the server), then builds another fresh clone in
another folder against the warm server, and compares every file under build/ of the two.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cache_servers import nginx  # noqa: E402
from conftest import copy_repo  # noqa: E402
from scons_matrix import build_files, fresh_clone, run_scons  # noqa: E402


def zoo() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "models").glob("*/model.toml"))


def build(repo: Path, url: str) -> dict:
    start = time.perf_counter()
    actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={url}")
    seconds = time.perf_counter() - start
    cache_line = next((line for line in log.splitlines() if line.startswith("kiln: cache http")), "")
    return {"seconds": round(seconds, 2), "stage_actions": sum(a.startswith("kiln ") for a in actions),
            "other_actions": sum(not a.startswith(("kiln ", "cache ")) for a in actions),
            "from_cache": sum(a.startswith("cache ") for a in actions), "cache": cache_line.split(": ", 2)[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model folders under models/ (default: every one)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    models = args.models or zoo()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        helpers = [d.name for d in (ROOT / "models").iterdir() if d.is_dir() and not (d / "model.toml").exists()]
        source = copy_repo(work / "source", (*models, *helpers))  # models/_kit/: code the zoo's model.py files share
        with nginx(work / "nginx") as url:
            first = fresh_clone(source, work / "ci-runner-1" / "repo")
            cold = build(first, url)
            second = fresh_clone(source, work / "elsewhere" / "ci-runner-2" / "checkout")
            warm = build(second, url)
        stored = [p.stat().st_size for p in (work / "nginx" / "root" / "cas").iterdir()]
        built, expected = build_files(second), build_files(first)
        differ = sorted(p for p in set(built) | set(expected) if built.get(p) != expected.get(p))
        firmware = "build/host/firmware"
        result = {"models": models, "cold": cold, "warm": warm, "files": len(expected), "files_differ": differ,
                  "firmware_identical": firmware in built and built[firmware] == expected[firmware],
                  "server_entries": len(stored), "server_bytes": sum(stored)}
    print(f"{len(models)} model(s), nginx WebDAV on 127.0.0.1, scons -j2; {result['server_entries']} entries, "
          f"{result['server_bytes']:,} bytes on the server\n")
    print("| build | wall s | stage actions | other actions | from the cache | cache summary |")
    print("|---|---|---|---|---|---|")
    for name, row in (("fresh clone, cold server (fills it)", cold), ("fresh clone elsewhere, warm server", warm)):
        print(f"| {name} | {row['seconds']:.1f} | {row['stage_actions']} | {row['other_actions']} | {row['from_cache']} "
              f"| {row['cache']} |")
    print(f"\nwarm clone vs cold clone: {len(expected) - len(differ)}/{len(expected)} files under build/ byte-identical; "
          f"firmware {'identical' if result['firmware_identical'] else 'DIFFERS'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if differ or not result["firmware_identical"] or warm["stage_actions"]:
        raise SystemExit(f"the warm clone ran {warm['stage_actions']} stage action(s); differing files: {differ}")


if __name__ == "__main__":
    main()
