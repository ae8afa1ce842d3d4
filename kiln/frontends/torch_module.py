"""The model.py frontend: a torch.nn.Module factory file into a source-level Kiln graph.

The model.py contract:

- `model()` returns the `nn.Module` to compile, in eval mode (`.eval()`).
- `example_inputs()` returns a tuple of tensors, one per forward() input,
  batch dimension included; they fix the graph's input shapes.
- `calibration_data()` (optional) returns calibration samples in any form
  `kiln.samples` reads: a tensor or array shaped (N, *input_shape) or
  (N, *input_shape[1:]), a dict by input name, or any iterable (list,
  generator, DataLoader) of samples, batches, tuples, dicts or
  (inputs, labels) pairs.

Graph inputs are named after forward()'s parameters. The model.toml `inputs`
table, when it names an input, must agree with example_inputs() in shape and
dtype. The file is loaded by path under a private module name with its
folder importable (for sibling modules and weight files), and sys.path and
sys.modules are restored afterwards. Files it loads from outside its folder
(a module shared by several models) must be listed in model.toml's
`model.depends`, which the build tracks.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import os
import site
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np
import torch

from kiln import samples
from kiln.errors import KilnError
from kiln.frontends.imported import Imported
from kiln.frontends.torch_graph import check_bindings, convert, describe, quiet_torch
from kiln.ir.graph import Graph


def import_module_file(source: Path, name: str, inputs: dict[str, Any], depends: tuple[Path, ...] | None = None) -> Imported:
    """Import model.py `source` as graph `name`; `inputs` is the model.toml inputs table.

    `depends` are its model.depends files; None (no model.toml to hold
    them) skips the check that nothing else outside the folder is loaded.
    """
    where = str(source)
    source = Path(source).resolve()
    declared = None if depends is None else frozenset(Path(d).resolve() for d in depends)
    with _single_threaded(), _loaded(source, where, declared) as module:
        module_obj = _call(module, "model", where)
        examples = _examples(_call(module, "example_inputs", where), where)
        graph = import_module(module_obj, examples, name, inputs, where, source.parent)
        shapes = {n: graph.tensors[n].shape for n in graph.inputs}
        calibration = _calibration(module, shapes, where) if hasattr(module, "calibration_data") else {}
    return Imported(graph, calibration)


def import_module(module: Any, examples: tuple[torch.Tensor, ...], name: str, inputs: dict[str, Any] | None = None,
                  where: str = "<module>", folder: Path | None = None) -> Graph:
    """An eval-mode nn.Module, exported at `examples`, as a source-level graph named `name`."""
    if not isinstance(module, torch.nn.Module):
        raise KilnError(f"{where}: model() returned {type(module).__name__}, not a torch.nn.Module")
    _check_eval(module, where)
    names = _input_names(module, len(examples), where)
    check_bindings(inputs or {}, {n: (tuple(t.shape), t.dtype) for n, t in zip(names, examples)}, where)
    return convert(_export(module, examples, where), name, where, folder=folder, input_names=names)


def load_model_py(source: Path, module_name: str | None = None) -> ModuleType:
    """A model.py loaded as the import stage loads it, for code that calls its functions itself (tests, benchmarks,
    exporters): by path, its folder importable while it runs, as module `module_name` (default: a private name)."""
    source = Path(source).resolve()
    with _loaded(source, str(source), None, module_name) as module:
        return module


@contextlib.contextmanager
def _single_threaded() -> Iterator[None]:
    """Run the user's model code on one thread: a float reduction's order, hence its bits, then does
    not depend on how many cores the building machine has (weights or calibration samples computed
    in model.py stay byte-identical across machines, so cache entries are shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _loaded(source: Path, where: str, depends: frozenset[Path] | None, module_name: str | None = None) -> Iterator[ModuleType]:
    """model.py as a module, its folder on sys.path; everything it added to sys.path/sys.modules removed after.

    A model.py may load files from outside its folder only when model.toml
    lists them in `model.depends` (the build tracks only the folder and
    those): loading any other file that is not part of the Python
    installation or of Kiln is an error. A module of a `depends` file that
    an earlier import left loaded is set aside, so the file is read afresh.
    """
    folder = source.parent
    checked, depends = depends is not None, depends or frozenset()
    module_name = module_name or "_kiln_model_" + hashlib.sha256(str(source).encode()).hexdigest()[:16]
    saved_path = list(sys.path)
    set_aside = {key: m for key, m in sys.modules.items() if depends and _file_of(m) in depends}
    for key in set_aside:
        del sys.modules[key]
    before = set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(module_name, source)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise KilnError(f"{where}: import failed: {describe(exc)}") from None
        yield module
        if checked:
            _check_declared(sorted(set(sys.modules) - before), folder, depends, where)
    finally:
        sys.path[:] = saved_path
        for key in set(sys.modules) - before:
            if key == module_name or _file_inside(sys.modules[key], folder) or _file_of(sys.modules[key]) in depends:
                del sys.modules[key]
        sys.modules.update(set_aside)


def _file_of(module: ModuleType) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _file_inside(module: ModuleType, folder: Path) -> bool:
    file = _file_of(module)
    return file is not None and file.is_relative_to(folder)


def _installed_roots() -> list[Path]:
    """Folders whose modules belong to the environment, not to a model: the Python installation and Kiln."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, site.getusersitepackages()}
    roots.update(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    roots.add(str(Path(__file__).resolve().parents[1]))  # the kiln package
    return [Path(r).resolve() for r in sorted(roots)]


def _check_declared(loaded: list[str], folder: Path, depends: frozenset[Path], where: str) -> None:
    """Refuse a model.py that loaded a file from outside its folder which model.depends does not list."""
    roots = _installed_roots()
    for key in loaded:
        file = _file_of(sys.modules[key])
        if file is None or file.is_relative_to(folder) or file in depends or any(file.is_relative_to(r) for r in roots):
            continue
        rel = os.path.relpath(file, folder)
        raise KilnError(f"{where}: loads {rel} from outside the model folder, which model.toml's model.depends does not "
                        f"list (the build would not re-run import when it changes): add \"{rel}\" to model.depends")


def _call(module: ModuleType, fn_name: str, where: str) -> Any:
    fn: Callable[[], Any] | None = getattr(module, fn_name, None)
    if not callable(fn):
        raise KilnError(f"{where}: defines no {fn_name}() function")
    try:
        with torch.no_grad():
            return fn()
    except Exception as exc:
        raise KilnError(f"{where}: {fn_name}() raised {describe(exc)}") from None


def _check_eval(module: torch.nn.Module, where: str) -> None:
    if module.training:
        raise KilnError(f"{where}: model() returned a module in training mode; call .eval()")
    for sub_name, sub in module.named_modules():
        if sub.training:
            raise KilnError(f"{where}: model() returned a module whose submodule {sub_name!r} is in training mode; call .eval()")


def _examples(value: Any, where: str) -> tuple[torch.Tensor, ...]:
    examples = (value,) if isinstance(value, torch.Tensor) else value
    if not isinstance(examples, (tuple, list)) or not examples or not all(isinstance(t, torch.Tensor) for t in examples):
        raise KilnError(f"{where}: example_inputs() must return a tuple of tensors, one per forward() input")
    return tuple(examples)


def _input_names(module: torch.nn.Module, count: int, where: str) -> list[str]:
    """forward()'s parameter names, the graph's input names; `*args` inputs are `args_0`, `args_1`, ..."""
    params = list(inspect.signature(module.forward).parameters.values())
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    if star is not None:
        names += [f"{star}_{i}" for i in range(max(count - len(names), 0))]
    if len(names) < count:
        raise KilnError(f"{where}: example_inputs() gives {count} inputs but forward() takes {len(names)}")
    return names[:count]


def _export(module: torch.nn.Module, examples: tuple[torch.Tensor, ...], where: str) -> torch.export.ExportedProgram:
    try:
        with torch.no_grad(), quiet_torch():
            return torch.export.export(module, examples)
    except Exception as exc:  # torch.export raises many exception types for untraceable code
        raise KilnError(f"{where}: torch.export failed: {describe(exc)}") from None


def _calibration(module: ModuleType, shapes: dict[str, tuple[int, ...]], where: str) -> dict[str, np.ndarray]:
    """calibration_data() in any form `kiln.samples` accepts, as {input name: float32 (N, *input_shape)}.

    Runs while model.py is loaded, single-threaded and without autograd: a
    generator or DataLoader executes the user's code only as it is read.
    """
    what = f"{where}: calibration_data()"
    with torch.no_grad():
        arrays = samples.collect(_call(module, "calibration_data", where), shapes, what)
    for n, a in arrays.items():
        if not np.isfinite(a).all():
            raise KilnError(f"{what} for {n!r} contains NaN or infinity")
    return arrays
