"""The .pt2 frontend: a `torch.export.save`d ExportedProgram into a source-level Kiln graph.

Loading a .pt2 unpickles data, so it must only be done on trusted files. To
narrow what a file can make the loader do, the archive is checked before
torch sees it: only the members `torch.export.save` writes for one plain
program are allowed (JSON graph and configs, raw weight and constant
payloads, the sample-inputs pickle); pickled weights, custom or opaque
objects, AOTInductor binaries and extra files are refused. The sample-inputs
pickle must load with `weights_only=True`, and torch then loads the checked
bytes (not the file again) with weights-only unpickling forced.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.export.graph_signature import InputKind

from kiln.errors import KilnError
from kiln.frontends.imported import Imported
from kiln.frontends.torch_graph import check_bindings, convert, describe, quiet_torch

_MEMBER_PATTERNS = [re.compile(p) for p in (
    r"archive_format",
    r"archive_version",
    r"byteorder",
    r"\.data/version",
    r"\.data/serialization_id",
    r"models/(?P<model>[A-Za-z0-9_]+)\.json",
    r"data/weights/(?P<model>[A-Za-z0-9_]+)_weights_config\.json",
    r"data/weights/weight_\d+",
    r"data/constants/(?P<model>[A-Za-z0-9_]+)_constants_config\.json",
    r"data/constants/tensor_\d+",
    r"data/sample_inputs/(?P<model>[A-Za-z0-9_]+)\.pt",
)]
_PAYLOAD_PREFIX = {"weights": "weight_", "constants": "tensor_"}


def import_pt2(source: Path, name: str, inputs: dict[str, Any]) -> Imported:
    """Import a .pt2 file as graph `name`; `inputs` is the model.toml inputs table."""
    where = str(source)
    data = Path(source).read_bytes()
    check_archive(data, where)
    try:
        with _weights_only(), quiet_torch():
            ep = torch.export.load(io.BytesIO(data))
    except Exception as exc:  # a corrupt or incompatible archive fails anywhere inside torch
        raise KilnError(f"{where}: cannot load the exported program: {describe(exc)}") from None
    ep = _specialize(ep, inputs, where)
    check_bindings(inputs, _user_inputs(ep), where)
    return Imported(convert(ep, name, where))


def _user_inputs(ep: torch.export.ExportedProgram) -> dict[str, tuple[tuple[Any, ...], torch.dtype]]:
    vals = {n.name: n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"}
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    return {u: (tuple(vals[u].shape), vals[u].dtype) for u in user}


def _specialize(ep: torch.export.ExportedProgram, bindings: dict[str, Any], where: str) -> torch.export.ExportedProgram:
    """A program with dynamic input dimensions, re-exported at the shapes model.toml gives."""
    actual = _user_inputs(ep)
    if all(isinstance(d, int) for shape, _ in actual.values() for d in shape):
        return ep
    missing = [n for n in actual if "shape" not in (bindings.get(n) or {})]
    if missing:
        raise KilnError(f"{where}: the program has dynamic input dimensions; give inputs.{missing[0]}.shape in model.toml")
    examples = tuple(torch.zeros([int(d) for d in bindings[n]["shape"]], dtype=dtype) for n, (_, dtype) in actual.items())
    try:
        with torch.no_grad(), quiet_torch():
            return torch.export.export(ep.module(), examples)
    except Exception as exc:  # shapes outside the program's constraints fail in many ways
        raise KilnError(f"{where}: cannot specialize the program to the model.toml input shapes: {describe(exc)}") from None


def check_archive(data: bytes, where: str) -> None:
    """Refuse any archive that holds more than one plain exported program's members, or a member twice."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise KilnError(f"{where}: not a .pt2 archive (not a zip file)") from None
    with archive:
        names = archive.namelist()
        seen: set[str] = set()
        for member in names:  # readers disagree on which copy of a duplicate they read (and on case): refuse both
            if member.lower() in seen:
                raise KilnError(f"{where}: refusing duplicate archive member {member!r}")
            seen.add(member.lower())
        roots = {n.split("/", 1)[0] for n in names}
        if len(roots) != 1 or any("/" not in n for n in names):
            raise KilnError(f"{where}: not a .pt2 archive (members must share one top folder)")
        root = roots.pop() + "/"
        models = set()
        for member in names:
            match = _match(member[len(root):])
            if match is None:
                raise KilnError(f"{where}: refusing unexpected archive member {member!r} (only plain torch.export.save programs are loaded)")
            if match.groupdict().get("model"):
                models.add(match["model"])
        if len(models) != 1:
            raise KilnError(f"{where}: expected one exported program, found {sorted(models) or 'none'}")
        model = models.pop()
        if archive.read(root + "archive_format").decode(errors="replace") != "pt2":
            raise KilnError(f"{where}: not a .pt2 archive (archive_format is not 'pt2')")
        for kind, prefix in _PAYLOAD_PREFIX.items():
            _check_payload_config(archive, f"{root}data/{kind}/{model}_{kind}_config.json", prefix, where)
        _check_sample_inputs(archive, f"{root}data/sample_inputs/{model}.pt", where)


def _match(member: str) -> re.Match[str] | None:
    for pattern in _MEMBER_PATTERNS:
        m = pattern.fullmatch(member)
        if m:
            return m
    return None


def _check_payload_config(archive: zipfile.ZipFile, member: str, prefix: str, where: str) -> None:
    """Every weight/constant must be a raw tensor payload, never a pickle."""
    if member not in archive.namelist():
        return
    try:
        config = json.loads(archive.read(member))["config"]
    except (ValueError, KeyError, TypeError):
        raise KilnError(f"{where}: malformed archive member {member!r}") from None
    for fqn, meta in sorted(config.items()):
        if not isinstance(meta, dict) or meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(prefix):
            raise KilnError(f"{where}: refusing {fqn!r} in {member!r}: only raw tensor payloads are loaded, not pickled objects")


def _check_sample_inputs(archive: zipfile.ZipFile, member: str, where: str) -> None:
    if member not in archive.namelist():
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.load(io.BytesIO(archive.read(member)), weights_only=True)
    except Exception as exc:  # the weights-only unpickler rejects anything beyond tensors and containers
        raise KilnError(f"{where}: refusing {member!r}: it does not load with weights_only=True ({describe(exc)})") from None


@contextlib.contextmanager
def _weights_only() -> Iterator[None]:
    """Force weights-only unpickling for every torch.load inside, even where torch asks for less."""
    saved = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = saved
