"""The shared build cache: a fresh clone with a warm cache runs nothing and gets the same bytes;
an entry is bound to its key and verified by content hash (and HMAC, given a key) on every
retrieval, so a corrupted, truncated, swapped, forged or planted entry is reported, never used,
and replaced by the rebuilt target; a read-only cache is never written, not even a time stamp."""
from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import stat
from pathlib import Path

import pytest

from scons_matrix import build_files, clone_snapshot, fresh_clone, run_scons, shared_snapshot

PLANNED = "build/host/tiny_cnn/planned.kir"
QUANTIZED = "build/host/{model}/quantized.kir"
SECRET = "a secret only trusted writers have"


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


def tree_state(folder: Path) -> dict[str, tuple]:
    """Every path under `folder` with its kind, mode, modification time and (files) bytes."""
    state = {}
    for p in sorted([folder, *folder.rglob("*")]):
        st = p.lstat()
        data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
        state[p.relative_to(folder).as_posix()] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns, data)
    return state


def entry_of(cache: Path, artifact: bytes) -> Path:
    """The cache entry holding `artifact`."""
    found = [p for p in cache.rglob("*") if p.is_file() and p.read_bytes().endswith(b"\n" + artifact)]
    assert len(found) == 1, found
    return found[0]


def corrupt_entry_of(cache: Path, artifact: bytes) -> Path:
    """Flip one byte of the content of the cache entry holding `artifact`; returns the entry."""
    entry = entry_of(cache, artifact)
    data = bytearray(entry.read_bytes())
    data[-len(artifact) // 2] ^= 0x01
    entry.write_bytes(bytes(data))
    return entry


def header(entry: bytes) -> dict[str, str]:
    head = entry.split(b"\n\n", 1)[0].decode().splitlines()
    assert head[0] == "kiln-cache 2"
    return dict(line.split(" ", 1) for line in head[1:])


def forged(key: str, data: bytes, secret: str | None, mode: int = 0o644) -> bytes:
    """An entry as a writer who knows the format (and `secret`, when given) would make it."""
    fields = f"key {key}\nsha256 {hashlib.sha256(data).hexdigest()}\nmode {mode:o}\n".encode()
    mac = hmac.new(secret.encode(), fields, "sha256").hexdigest() if secret else "-"
    return b"kiln-cache 2\n" + fields + f"hmac {mac}\n\n".encode() + data


def reports(log: str) -> list[str]:
    return [line for line in log.splitlines() if "is corrupted" in line]


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


def test_cache_entries_carry_their_key_and_content_hash(warm_cache, snapshot):
    for artifact in (PLANNED, "build/host/firmware"):
        content = (snapshot / artifact).read_bytes()
        entry = entry_of(warm_cache, content)
        fields = header(entry.read_bytes())
        assert fields["key"] == entry.name and entry.parent.name == entry.name[:2].upper()
        assert fields["sha256"] == hashlib.sha256(content).hexdigest() and fields["hmac"] == "-"
        assert int(fields["mode"], 8) == stat.S_IMODE((snapshot / artifact).stat().st_mode)
        assert not entry.is_symlink()


@pytest.mark.parametrize("damage", ["flip", "truncate", "old format"])
def test_damaged_entry_is_a_miss_reported_once_and_replaced(snapshot, warm_cache, tmp_path, damage):
    cache = cache_copy(warm_cache, tmp_path)
    content = (snapshot / PLANNED).read_bytes()
    entry = entry_of(cache, content)
    raw = entry.read_bytes()
    entry.write_bytes({"flip": raw[:-100] + bytes([raw[-100] ^ 1]) + raw[-99:], "truncate": raw[: len(raw) // 2],
                       "old format": b"kiln-cache sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n" + content}[damage])
    repo = fresh_clone(snapshot, tmp_path / "clone")
    actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={cache}")
    assert len(reports(log)) == 1 and entry.name in reports(log)[0], log
    assert not_from_cache(actions) == {"kiln plan tiny_cnn"}, log
    assert build_files(repo) == build_files(snapshot)
    assert entry.read_bytes() == raw


def test_swapped_entry_is_bound_to_another_key(snapshot, warm_cache, tmp_path):
    """Another model's quantized graph at tiny_cnn's key: a miss, never tiny_cnn built from it."""
    cache = cache_copy(warm_cache, tmp_path)
    mine = entry_of(cache, (snapshot / QUANTIZED.format(model="tiny_cnn")).read_bytes())
    theirs = entry_of(cache, (snapshot / QUANTIZED.format(model="onnx_cnn")).read_bytes())
    original = mine.read_bytes()
    shutil.copy(theirs, mine)
    repo = fresh_clone(snapshot, tmp_path / "clone")
    actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={cache}")
    assert len(reports(log)) == 1 and "bound to another key" in reports(log)[0], log
    assert not_from_cache(actions) == {"kiln quantize tiny_cnn"}, log
    assert build_files(repo) == build_files(snapshot)
    assert mine.read_bytes() == original  # replaced: the next clone hits
    actions, log, _ = run_scons(fresh_clone(snapshot, tmp_path / "third"), "-j2", f"--kiln-cache={cache}")
    assert not_from_cache(actions) == set() and not reports(log), log


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_planted_non_regular_entry_is_never_followed(snapshot, warm_cache, tmp_path, kind):
    cache = cache_copy(warm_cache, tmp_path)
    entry = entry_of(cache, (snapshot / PLANNED).read_bytes())
    original = entry.read_bytes()
    outside = tmp_path / "outside"
    outside.write_bytes(original)  # a perfectly valid entry, but outside the cache
    entry.unlink()
    entry.symlink_to(outside) if kind == "symlink" else os.mkfifo(entry)
    repo = fresh_clone(snapshot, tmp_path / "clone")
    actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={cache}")
    assert len(reports(log)) == 1 and ("a symlink" if kind == "symlink" else "not a regular file") in reports(log)[0], log
    assert not_from_cache(actions) == {"kiln plan tiny_cnn"}, log
    assert build_files(repo) == build_files(snapshot)
    assert not [p for p in (repo / "build").rglob("*") if p.is_symlink()]
    assert not entry.is_symlink() and entry.read_bytes() == original and outside.read_bytes() == original


@pytest.fixture(scope="module")
def signed_cache(snapshot: Path, tmp_path_factory) -> Path:
    """A cache written with an HMAC key."""
    cache = tmp_path_factory.mktemp("signed") / "kiln-cache"
    repo = clone_snapshot(snapshot, tmp_path_factory.mktemp("populate-signed") / "repo")
    run_scons(repo, f"--kiln-cache={cache}", "--cache-populate", env=env_with(KILN_CACHE_HMAC_KEY=SECRET))
    return cache


def test_hmac_key_accepts_its_own_entries_and_refuses_forged_ones(snapshot, signed_cache, tmp_path):
    cache = cache_copy(signed_cache, tmp_path)
    content = (snapshot / PLANNED).read_bytes()
    entry = entry_of(cache, content)
    assert entry.read_bytes() == forged(entry.name, content, SECRET, stat.S_IMODE((snapshot / PLANNED).stat().st_mode))
    actions, log, _ = run_scons(fresh_clone(snapshot, tmp_path / "signed"), "-j2", env=env_with(KILN_CACHE=str(cache), KILN_CACHE_HMAC_KEY=SECRET))
    assert not_from_cache(actions) == set() and not reports(log), log
    # A writer without the key: the right key and content hash, another graph, an HMAC it had to guess.
    other = (snapshot / QUANTIZED.format(model="onnx_cnn")).read_bytes()
    victim = entry_of(cache, (snapshot / QUANTIZED.format(model="tiny_cnn")).read_bytes())
    original = victim.read_bytes()
    for guess in (None, "a guessed key"):
        victim.write_bytes(forged(victim.name, other, guess))
        repo = fresh_clone(snapshot, tmp_path / f"forged-{guess is None}")
        actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=str(cache), KILN_CACHE_HMAC_KEY=SECRET))
        assert len(reports(log)) == 1 and "HMAC" in reports(log)[0], log
        assert not_from_cache(actions) == {"kiln quantize tiny_cnn"}, log
        assert build_files(repo) == build_files(snapshot)
        assert victim.read_bytes() == original


@pytest.mark.parametrize("how", ["options", "environment", "no config"])
def test_readonly_cache_is_read_and_never_written(snapshot, warm_cache, tmp_path, how):
    """Not an entry, a config, a CACHEDIR.TAG, a lock or a time stamp: the folder stays as it was."""
    cache = cache_copy(warm_cache, tmp_path)
    corrupt_entry_of(cache, (snapshot / PLANNED).read_bytes())
    if how == "no config":  # a folder of entries only: SCons would create config, its lock and the tag
        (cache / "config").unlink()
        (cache / "CACHEDIR.TAG").unlink()
    os.utime(cache, ns=(1, 10**18))  # distinct times: a touch of any file or folder shows
    for p in cache.rglob("*"):
        os.utime(p, ns=(1, 10**18), follow_symlinks=False)
    before = tree_state(cache)
    repo = fresh_clone(snapshot, tmp_path / "clone")
    if how == "environment":
        actions, log, _ = run_scons(repo, "-j2", env=env_with(KILN_CACHE=str(cache), KILN_CACHE_READONLY="1"))
    else:
        actions, log, _ = run_scons(repo, "-j2", f"--kiln-cache={cache}", "--kiln-cache-readonly", env=env_with())
    assert "is corrupted" in log and not_from_cache(actions) == {"kiln plan tiny_cnn"}, log
    assert tree_state(cache) == before
    assert build_files(repo) == build_files(snapshot)


def test_readonly_without_a_cache_folder_is_a_one_line_error(snapshot, tmp_path):
    repo = fresh_clone(snapshot, tmp_path / "clone")
    actions, log, status = run_scons(repo, "--kiln-cache-readonly", env=env_with(), check=False)
    errors = [line for line in log.splitlines() if line.startswith("kiln: error:")]
    assert status == 2 and actions == set() and len(errors) == 1 and "needs a cache folder" in errors[0], log
    assert "Traceback" not in log
