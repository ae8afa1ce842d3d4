"""Calibration data: where it comes from, which samples are used, and the observed ranges.

Samples come from the import stage's `calibration.npz` (the model's
`calibration_data()`), or from the files that `quant.calibration` lists, which
take precedence. Each input's samples are shaped (N, *input_shape). The float
reference runs every sample and each tensor's observer records its values.
"""
from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from toolchain.errors import KilnError, node_context
from toolchain.ir.graph import Graph
from toolchain.quantize.observers import Observer, make_observer
from toolchain.reference.executor import run

PROGRESS_ENV = "KILN_PROGRESS"  # "1" shows the calibration progress bar even when stderr is not a terminal
PROGRESS_MIN_RUNS = 32


def missing_calibration_error(graph: Graph) -> KilnError:
    return KilnError(
        f"model {graph.name!r}: a float model needs calibration data to be quantized to int8; define "
        "calibration_data() in model.py, or list sample files in model.toml (quant.calibration = [\"calib.npy\"])")


def load_calibration(graph: Graph, config: dict[str, Any], model_dir: Path, imported_npz: Path) -> dict[str, np.ndarray]:
    """The calibration samples per graph input, each (N, *input_shape) float32.

    Files in `quant.calibration` replace the imported samples. Samples are in
    the source's layout, as the source model takes them; an input that
    normalization turned NHWC (`normalize.input_layout`) gets its samples
    transposed to match. A float source without any samples is an error; a
    QDQ source needs none (it may still use them to fill parameters the source
    left out).
    """
    if config["mode"] == "none":
        return {}
    if config["calibration"]:
        samples = _merge([_read_file(model_dir / rel, rel, graph) for rel in config["calibration"]], graph)
    else:
        samples = _read_npz(imported_npz, imported_npz.name)
    if not samples and graph.meta.get("quantized_source") not in ("qdq", "tflite"):
        raise missing_calibration_error(graph)
    return {name: _to_input_layout(graph, name, arr) for name, arr in samples.items()}


def _to_input_layout(graph: Graph, name: str, samples: np.ndarray) -> np.ndarray:
    """(N, *NCHW shape) samples of an input the model takes as NHWC, transposed to (N, *NHWC shape)."""
    t = graph.tensors.get(name)
    if t is None or t.layout != "NHWC" or samples.ndim != 5:
        return samples
    return np.ascontiguousarray(samples.transpose(0, 1, 3, 4, 2))


def _read_file(path: Path, shown: str, graph: Graph) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise KilnError(f"quant.calibration: {shown}: no such file")
    if path.suffix == ".npz":
        samples = _read_npz(path, shown)
        unknown = sorted(set(samples) - set(graph.inputs))
        if unknown:
            raise KilnError(f"{shown}: arrays {unknown} are not model inputs (inputs: {', '.join(graph.inputs)})")
        return samples
    if len(graph.inputs) != 1:
        raise KilnError(f"{shown}: a .npy file calibrates a single-input model; this one has inputs "
                        f"{', '.join(graph.inputs)} (use an .npz with one array per input name)")
    try:
        return _non_empty({graph.inputs[0]: np.load(path, allow_pickle=False)}, shown)
    except (OSError, ValueError) as exc:
        raise KilnError(f"{shown}: not a readable .npy file ({exc})") from None


def _read_npz(path: Path, shown: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return _non_empty({name: npz[name] for name in sorted(npz.files)}, shown)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise KilnError(f"{shown}: not a readable .npz file ({exc})") from None


def _non_empty(samples: dict[str, np.ndarray], shown: str) -> dict[str, np.ndarray]:
    for name, arr in samples.items():
        if arr.ndim == 0 or len(arr) == 0:
            raise KilnError(f"{shown}: no samples for input {name!r} (N=0; samples are stacked on the leading axis)")
    return samples


def _merge(parts: list[dict[str, np.ndarray]], graph: Graph) -> dict[str, np.ndarray]:
    """Concatenate the files' samples per input; every input must be covered."""
    merged: dict[str, list[np.ndarray]] = {}
    for part in parts:
        for name, arr in part.items():
            merged.setdefault(name, []).append(arr)
    missing = [n for n in graph.inputs if n not in merged]
    if missing:
        raise KilnError(f"quant.calibration: no samples for input(s) {', '.join(missing)}")
    return {n: np.concatenate(merged[n]) if len(merged[n]) > 1 else merged[n][0] for n in graph.inputs}


def check_samples(graph: Graph, samples: dict[str, np.ndarray]) -> int:
    """Validate shapes and values against the graph inputs; returns the sample count N."""
    counts = set()
    for name in graph.inputs:
        if name not in samples:
            raise KilnError(f"calibration data has no samples for input {name!r}")
        arr = samples[name]
        shape = graph.tensors[name].shape
        if arr.ndim != len(shape) + 1 or tuple(arr.shape[1:]) != shape:
            raise KilnError(f"calibration data for input {name!r} has shape {list(arr.shape)}, expected [N, {', '.join(map(str, shape))}]")
        if not np.issubdtype(arr.dtype, np.number) or not np.isfinite(arr).all():
            raise KilnError(f"calibration data for input {name!r} must be finite numbers")
        if arr.shape[0] == 0:
            raise KilnError(f"calibration data for input {name!r} has no samples (N=0)")
        counts.add(arr.shape[0])
    if len(counts) != 1:
        raise KilnError(f"calibration data gives {sorted(counts)} samples per input; every input needs the same count")
    return counts.pop()


def select(count: int, max_samples: int, seed: int) -> np.ndarray:
    """Indices of the samples to use: all, or a seeded choice of `max_samples`, in data order."""
    if max_samples == 0 or count <= max_samples:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, size=max_samples, replace=False))


def observe_ranges(graph: Graph, samples: dict[str, np.ndarray], names: Iterable[str], config: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Run the float reference on the chosen samples; each tensor in `names` gets its observer's range."""
    indices = select(check_samples(graph, samples), config["max_samples"], config["seed"])
    _check_constants(graph)
    observers: dict[str, Observer] = {n: make_observer(config) for n in sorted(names)}
    passes = max((o.passes for o in observers.values()), default=1)
    bar = _Progress(len(indices) * passes)
    for pass_index in range(passes):
        for i in indices:
            values = run(graph, {n: samples[n][i] for n in graph.inputs}, keep=True)
            for name, obs in observers.items():
                if pass_index < obs.passes:
                    _observe(obs, name, values[name], pass_index)
            bar.step()
    bar.close()
    for name, obs in observers.items():
        if not obs.seen:
            shape = graph.tensors[name].shape
            raise KilnError(f"tensor {name!r} has no elements (shape {list(shape)}): nothing to calibrate, and an empty "
                            "tensor has no int8 form")
    return {n: obs.range() for n, obs in observers.items()}


def _check_constants(graph: Graph) -> None:
    """A NaN or infinity in a constant would surface in the first activation it reaches; name the constant."""
    for index, node in enumerate(graph.nodes):
        for name in node.inputs:
            t = graph.tensors.get(name)
            if t is not None and t.is_constant and t.dtype == "float32" and not np.isfinite(t.data).all():
                bad = "NaN" if np.isnan(t.data).any() else "infinity"
                raise KilnError(f"constant {name!r} (an input of {node_context(index, node.name, node.op, node.source)}) "
                                f"holds {bad}; the float model has no finite range to calibrate")


def _observe(obs: Observer, name: str, value: np.ndarray, pass_index: int) -> None:
    if not np.isfinite(value).all():
        raise KilnError(f"tensor {name!r}: NaN or infinity in the float model's values during calibration")
    obs.observe(value, pass_index)


class _Progress:
    """A one-line progress bar on stderr, only on a terminal or when KILN_PROGRESS=1 (build logs stay clean)."""

    def __init__(self, total: int) -> None:
        wanted = os.environ.get(PROGRESS_ENV) == "1" or sys.stderr.isatty()
        self.total = total
        self.done = 0
        self.on = wanted and total >= PROGRESS_MIN_RUNS

    def step(self) -> None:
        self.done += 1
        if self.on:
            filled = 30 * self.done // self.total
            sys.stderr.write(f"\rcalibrating [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.on:
            sys.stderr.write("\n")
            sys.stderr.flush()
