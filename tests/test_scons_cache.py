"""The shared build cache: a fresh clone with a warm cache runs nothing and gets the same bytes;
a corrupted entry is reported, never used, and rebuilt; a read-only cache is never written."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from scons_matrix import build_files, clone_snapshot, fresh_clone, run_scons, shared_snapshot

PLANNED = "build/host/tiny_cnn/planned.kir"


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    return shared_snapshot(tmp_path_factory)


@pytest.fixture(scope="module")
def warm_cache(snapshot: Path, tmp_path_factory) -> Path:
    """A cache holding every target of the snapshot (pushed with SCons's --cache-populate)."""
    cache = tmp_path_factory.mktemp("cache") / "kiln-cache"
    repo = clone_snapshot(snapshot, tmp_path_factory.mktemp("populate") / "repo")
    actions, log, _ = run_scons(repo, f"--kiln-cache={cache}", "--cache-populate")
    assert actions == set(), log
    return cache


def cache_copy(warm_cache: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(warm_cache, tmp_path / "cache"))


def env_with(**values: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("KILN_CACHE")}, **values}


def entries(cache: Path) -> dict[str, bytes]:
    return {p.relative_to(cache).as_posix(): p.read_bytes() for p in sorted(cache.rglob("*")) if p.is_file()}


def corrupt_entry_of(cache: Path, artifact: bytes) -> Path:
    """Flip one byte of the content of the cache entry holding `artifact`; returns the entry."""
    found = [p for p in cache.rglob("*") if p.is_file() and p.read_bytes().endswith(b"\n" + artifact)]
    assert len(found) == 1, found
    data = bytearray(found[0].read_bytes())
    data[-len(artifact) // 2] ^= 0x01
    found[0].write_bytes(bytes(data))
    return found[0]


def not_from_cache(actions: set[str]) -> set[str]:
    return {a for a in actions if not a.startswith("cache ")}


def test_fresh_clone_with_warm_cache_runs_nothing_and_gets_the_same_bytes(snapshot, warm_cache, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "elsewhere" / "clone")
    actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=str(warm_cache)))
    assert not_from_cache(actions) == set(), log
    built, expected = build_files(repo), build_files(snapshot)
    assert sorted(built) == sorted(expected)
    assert [p for p in built if built[p] != expected[p]] == []
    assert {a.split(" ", 1)[1] for a in actions} == set(expected)


def test_cache_entries_carry_their_content_hash(warm_cache, snapshot):
    planned = (snapshot / PLANNED).read_bytes()
    holding = [data for data in entries(warm_cache).values() if data.endswith(b"\n" + planned)]
    assert len(holding) == 1 and holding[0].startswith(b"kiln-cache sha256:")


def test_corrupted_entry_is_reported_ignored_and_rebuilt(snapshot, warm_cache, tmp_path):
    cache = cache_copy(warm_cache, tmp_path)
    entry = corrupt_entry_of(cache, (snapshot / PLANNED).read_bytes())
    repo = fresh_clone(snapshot, tmp_path / "clone")
    actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={cache}")
    reports = [line for line in log.splitlines() if "is corrupted" in line]
    assert len(reports) == 1 and entry.name in reports[0] and PLANNED in reports[0], log
    assert not_from_cache(actions) == {"kiln plan tiny_cnn"}, log
    assert build_files(repo) == build_files(snapshot)

    again = fresh_clone(snapshot, tmp_path / "third")
    actions, log, _ = run_scons(again, "-j2", f"--kiln-cache={cache}")
    assert not_from_cache(actions) == set() and "corrupted" not in log, log


@pytest.mark.parametrize("how", ["options", "environment"])
def test_readonly_cache_is_read_and_never_written(snapshot, warm_cache, tmp_path, how):
    cache = cache_copy(warm_cache, tmp_path)
    corrupt_entry_of(cache, (snapshot / PLANNED).read_bytes())
    before = entries(cache)
    repo = fresh_clone(snapshot, tmp_path / "clone")
    if how == "options":
        actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={cache}", "--kiln-cache-readonly", env=env_with())
    else:
        actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=str(cache), KILN_CACHE_READONLY="1"))
    assert "is corrupted" in log and not_from_cache(actions) == {"kiln plan tiny_cnn"}, log
    assert entries(cache) == before
    assert build_files(repo) == build_files(snapshot)


def test_readonly_without_a_cache_folder_is_a_one_line_error(snapshot, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "clone")
    actions, log, status = run_scons(repo, "--kiln-cache-readonly", env=env_with(), check=False)
    errors = [line for line in log.splitlines() if line.startswith("kiln: error:")]
    assert status == 2 and actions == set() and len(errors) == 1 and "needs a cache folder" in errors[0], log
    assert "Traceback" not in log
