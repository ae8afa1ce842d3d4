"""model.toml: the schema every key is checked against, and the per-stage views of it.

Each stage package declares the keys of its table as `Key`s (name, type,
default, doc) in its `config.py`; this module gathers them (the registry says
which module declares which table), validates a model.toml against them
(unknown keys name the closest known key) and gives each stage exactly the
tables it reads, in a canonical text that the build signature includes.
Standard library and relative imports only (see `kiln/stages.py`).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .errors import KilnError, did_you_mean
from .stages import PACKAGE, TABLES


@dataclass(frozen=True)
class Key:
    """One model.toml key: `table.name` with its type, default and meaning."""

    name: str
    type: type | tuple[type, ...]
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error text, or None when valid

    def validate(self, value: Any, where: str) -> Any:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if not ok:
            names = " or ".join(t.__name__ for t in types)
            raise KilnError(f"{where}: expected {names}, got {type(value).__name__} {value!r}")
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and has_control_character(text):
                raise KilnError(f"{where}: {text!r} holds a control character")
        problem = self.check(value) if self.check else None
        if problem:
            raise KilnError(f"{where}: {problem}")
        return value


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"{v!r} is not one of {', '.join(map(repr, choices))}"


def config_schema() -> dict[str, dict[str, Key]]:
    """Every model.toml table with its keys, in the registry's order."""
    return {t: (_declaring_module(rel).CONFIG if rel else {}) for t, rel in TABLES.items()}


def _declaring_module(rel: str) -> ModuleType:
    """A table's key declarations (e.g. `normalize/config.py`), loaded without running its stage package's `__init__`.

    Importing `kiln.normalize.config` the usual way would import the whole
    `kiln.normalize` package, so every stage process would run (and its
    build signature would have to include) every other stage's code, and the
    SCons process would need the compiler's dependencies.
    """
    name = f"{__package__}.{rel[:-3].replace('/', '.')}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PACKAGE / rel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def suggest(name: str, known: list[str]) -> str:
    """The closest known names, or all of them when none is close."""
    return did_you_mean(name, known) or f" (known: {', '.join(sorted(known))})"


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Read and validate a model.toml; returns every table with defaults filled in."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KilnError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise KilnError(f"{path}: invalid TOML ({exc})") from None
    return validate(raw, str(path))


def validate(raw: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    schema = config_schema()
    out: dict[str, dict[str, Any]] = {}
    for table, value in raw.items():
        if table not in schema and isinstance(value, dict):
            raise KilnError(f"{where}: unknown table [{table}]{suggest(table, list(schema))}")
        if table not in schema:  # a key written before any table header
            owners = [f"{t}.{table}" for t, keys in schema.items() if table in keys]
            hint = f" (did you mean {' or '.join(map(repr, owners))}?)" if owners else suggest(table, list(schema))
            raise KilnError(f"{where}: unknown key {table!r} outside a table{hint}")
        if not isinstance(value, dict):
            raise KilnError(f"{where}: {table!r} must be a table ([{table}])")
    for table, keys in schema.items():
        given = raw.get(table, {})
        if table == "inputs":  # free-form: input name -> {shape, dtype}
            out[table] = {_input_name(name, where): _input_spec(spec, f"{where}: inputs.{name}") for name, spec in given.items()}
            continue
        for name in given:
            if name not in keys:
                elsewhere = [f"{t}.{name}" for t, other in schema.items() if name in other]  # a key of another table
                hint = (f" (did you mean {' or '.join(map(repr, elsewhere))}?)" if elsewhere else
                        suggest(f"{table}.{name}", [f"{table}.{k}" for k in keys]))
                raise KilnError(f"{where}: unknown key '{table}.{name}'{hint}")
        out[table] = {name: key.validate(given[name], f"{where}: {table}.{name}") if name in given else key.default for name, key in keys.items()}
    return out


def has_control_character(text: str) -> bool:
    """No model.toml string needs one, and one would split the one-line messages that quote it."""
    return any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in text)


def _input_name(name: str, where: str) -> str:
    """Input names match the model's own: any text without control characters (quoted in TOML when needed)."""
    if not name or has_control_character(name):
        raise KilnError(f"{where}: inputs: input name {name!r} is empty or holds a control character")
    return name


def _input_spec(spec: Any, where: str) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise KilnError(f"{where}: expected a table with 'shape' (and optional 'dtype')")
    unknown = set(spec) - {"shape", "dtype"}
    if unknown:
        name = sorted(unknown)[0]
        raise KilnError(f"{where}: unknown key {name!r}{suggest(name, ['shape', 'dtype'])}")
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise KilnError(f"{where}.shape: expected a list of positive integers, got {shape!r}")
    dtype = spec.get("dtype", "float32")
    if dtype != "float32":
        raise KilnError(f"{where}.dtype: only 'float32' model inputs are supported, got {dtype!r}")
    return {"shape": shape, "dtype": dtype}


def check_model_name(name: str, where: str) -> None:
    """A model's name (its folder's) names files, an `#include` line and build folders: printable ASCII without
    quotes, slashes, backslashes or '?' (a trigraph), and never '.' or '..'; anything else works, spaces and
    shell characters included (no stage or compiler command goes through a shell unquoted)."""
    if not name or name in (".", "..") or any(not (" " <= ch <= "~") or ch in '"\\/?' for ch in name):
        raise KilnError(f"{where}: model name {name!r}: use printable ASCII without quotes, slashes, backslashes "
                        "or '?' (it names the generated files and the build folder)")


def canonical(view: dict[str, Any]) -> str:
    """The one text of a config view: sorted keys, no whitespace variation."""
    return json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def view(config: dict[str, dict[str, Any]], tables: tuple[str, ...]) -> dict[str, Any]:
    """The part of a validated config that a stage reads."""
    return {t: config[t] for t in tables}
