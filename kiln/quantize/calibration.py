"""Calibration data: where it comes from, which samples are used, and the observed ranges.

Samples come from the import stage's `calibration.npz` (the model's
`calibration_data()`), or from the files that `quant.calibration` lists, which
take precedence. A file holds each input's samples as (N, *input_shape) or,
when the batch dimension is 1, (N, *input_shape[1:]) (`kiln.samples`);
they are read as (N, *input_shape). The float reference runs the samples in
batches and each tensor's observer records its values.
"""
from __future__ import annotations

import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from kiln.errors import ConfigError, KilnError, did_you_mean, node_context
from kiln.ir.graph import Graph
from kiln.quantize.observers import Observer, make_observer
from kiln.reference.batch import run_batch
from kiln.samples import stacked
from kiln.stages import PROGRESS_FD_ENV

PROGRESS_ENV = "KILN_PROGRESS"  # "1": show calibration progress at once, "0": never
PROGRESS_DELAY_S = 2.0  # calibrations shorter than this print nothing
CHUNK_ELEMENTS = 1 << 20  # elements of the largest tensor per batch through the float reference
MAX_CHUNK = 256


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
    left out). A bad file is a `ConfigError` of `quant.calibration` naming it.
    """
    if config["mode"] == "none":
        return {}
    if config["calibration"]:
        samples = _merge([_read_file(model_dir / rel, rel, graph) for rel in config["calibration"]], graph)
    else:
        samples = _source_shaped(graph, _read_npz(imported_npz, str(imported_npz)), str(imported_npz))
    if not samples and graph.meta.get("quantized_source") not in ("qdq", "tflite"):
        raise missing_calibration_error(graph)
    return {name: _to_input_layout(graph, name, arr) for name, arr in samples.items()}


def _source_shape(graph: Graph, name: str) -> tuple[int, ...]:
    """An input's shape as the source takes it: NCHW for an input that normalization made NHWC."""
    t = graph.tensors[name]
    if t.layout == "NHWC" and len(t.shape) == 4:
        n, h, w, c = t.shape
        return (n, c, h, w)
    return t.shape


def _source_shaped(graph: Graph, samples: dict[str, np.ndarray], shown: str) -> dict[str, np.ndarray]:
    """Each input's samples as (N, *source shape), from either accepted form, and finite."""
    out = {}
    for name, arr in samples.items():
        if name in graph.tensors:
            arr = stacked(arr, _source_shape(graph, name), f"{shown}: input {name!r}")
        if not np.issubdtype(arr.dtype, np.number) or not np.isfinite(arr).all():
            raise KilnError(f"{shown}: the samples for input {name!r} must be finite numbers")
        out[name] = arr
    return out


def _to_input_layout(graph: Graph, name: str, samples: np.ndarray) -> np.ndarray:
    """(N, *NCHW shape) samples of an input the model takes as NHWC, transposed to (N, *NHWC shape)."""
    t = graph.tensors.get(name)
    if t is None or t.layout != "NHWC" or samples.ndim != 5:
        return samples
    return np.ascontiguousarray(samples.transpose(0, 1, 3, 4, 2))


def _read_file(path: Path, shown: str, graph: Graph) -> dict[str, np.ndarray]:
    """One `quant.calibration` file's samples; what is wrong with it is a ConfigError naming the key and the file."""
    try:
        return _read_samples(path, shown, graph)
    except KilnError as exc:
        raise ConfigError("quant.calibration", str(exc)) from None


def _read_samples(path: Path, shown: str, graph: Graph) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise KilnError(f"{shown}: no such file")
    if path.suffix == ".npz":
        samples = _read_npz(path, shown)
        unknown = sorted(set(samples) - set(graph.inputs))
        if unknown:
            raise KilnError(f"{shown}: array {unknown[0]!r} is not a model input{did_you_mean(unknown[0], graph.inputs)} "
                            f"(inputs: {', '.join(graph.inputs)})")
        return _source_shaped(graph, samples, shown)
    if len(graph.inputs) != 1:
        raise KilnError(f"{shown}: a .npy file calibrates a single-input model; this one has inputs "
                        f"{', '.join(graph.inputs)} (use an .npz with one array per input name)")
    try:
        arr = _non_empty({graph.inputs[0]: np.load(path, allow_pickle=False)}, shown)[graph.inputs[0]]
    except (OSError, ValueError) as exc:
        raise KilnError(f"{shown}: not a readable .npy file ({exc})") from None
    return _source_shaped(graph, {graph.inputs[0]: arr}, shown)


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
        raise ConfigError("quant.calibration", f"no samples for input(s) {', '.join(missing)}")
    return {n: np.concatenate(merged[n]) if len(merged[n]) > 1 else merged[n][0] for n in graph.inputs}


def check_samples(graph: Graph, samples: dict[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]]:
    """Validate shapes and values against the graph inputs; the sample count N and each input's (N, *shape) samples."""
    counts, out = set(), {}
    for name in graph.inputs:
        if name not in samples:
            raise KilnError(f"calibration data has no samples for input {name!r}")
        arr = stacked(np.asarray(samples[name]), graph.tensors[name].shape, f"calibration data for input {name!r}")
        if not np.issubdtype(arr.dtype, np.number) or not np.isfinite(arr).all():
            raise KilnError(f"calibration data for input {name!r} must be finite numbers")
        if arr.shape[0] == 0:
            raise KilnError(f"calibration data for input {name!r} has no samples (N=0)")
        counts.add(arr.shape[0])
        out[name] = arr
    if len(counts) != 1:
        raise KilnError(f"calibration data gives {sorted(counts)} samples per input; every input needs the same count")
    return counts.pop(), out


def select(count: int, max_samples: int, seed: int) -> np.ndarray:
    """Indices of the samples to use: all, or a seeded choice of `max_samples`, in data order."""
    if max_samples == 0 or count <= max_samples:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, size=max_samples, replace=False))


def chunk_size(graph: Graph) -> int:
    """Samples per batch through the float reference: as many as keep the largest value near CHUNK_ELEMENTS."""
    largest = max((t.size for t in graph.tensors.values() if t.data is None), default=1)
    return int(min(MAX_CHUNK, max(1, CHUNK_ELEMENTS // max(largest, 1))))


def observe_ranges(graph: Graph, samples: dict[str, np.ndarray], names: Iterable[str], config: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Run the float reference on the chosen samples, a batch at a time; each tensor in `names` gets its observer's range."""
    count, samples = check_samples(graph, samples)
    indices = select(count, config["max_samples"], config["seed"])
    _check_constants(graph)
    observers: dict[str, Observer] = {n: make_observer(config) for n in sorted(names)}
    passes = max((o.passes for o in observers.values()), default=1)
    step = chunk_size(graph)
    progress = Progress(graph.name, len(indices), passes)
    for pass_index in range(passes):
        watched = {n: o for n, o in observers.items() if pass_index < o.passes}

        def visit(name: str, values: np.ndarray) -> None:
            if name in watched:
                if not np.isfinite(values).all():
                    raise KilnError(f"tensor {name!r}: NaN or infinity in the float model's values during calibration")
                watched[name].observe_batch(values, pass_index)

        for start in range(0, len(indices), step):
            chosen = indices[start:start + step]
            run_batch(graph, {n: samples[n][chosen] for n in graph.inputs}, visit=visit)
            progress.update(pass_index, start + len(chosen))
    progress.close()
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
                raise KilnError(f"constant {name!r} (an input of {node_context(index, node.name, node.op, node.source, node.source_name)}) "
                                f"holds {bad}; the float model has no finite range to calibrate")


class Progress:
    """Calibration progress: to the build's progress display when the build passes a descriptor for it, else on stderr.

    Run by the build (`KILN_PROGRESS_FD` names a pipe, `kiln/stages.py`), a
    calibration writes `calibrate DONE SAMPLES PASS PASSES` lines to it, a
    few a second at most, and draws nothing: the SCons process shows every
    model's progress in one display (`kiln/progress.py`). Run alone (`kiln
    compile`), it reports on stderr once a run has taken PROGRESS_DELAY_S
    (KILN_PROGRESS=1: at once, =0: never): on a terminal, one line redrawn in
    place; in a log, a line at every tenth of the work, never one per sample,
    each naming the model.
    """

    REPORT_EVERY_S = 0.1

    def __init__(self, model: str, samples: int, passes: int, clock: Callable[[], float] = time.monotonic) -> None:
        setting = os.environ.get(PROGRESS_ENV)
        self.model, self.samples, self.passes, self.clock = model, samples, passes, clock
        self.channel = _channel()
        self.on = samples > 0 and (self.channel is not None or setting != "0")
        self.delay = 0.0 if setting == "1" or self.channel is not None else PROGRESS_DELAY_S
        self.tty = sys.stderr.isatty()
        self.start = clock()
        self.reported = -self.REPORT_EVERY_S
        self.tenths = 0
        self.drawn = False

    def update(self, pass_index: int, done: int) -> None:
        """`done` samples of pass `pass_index` are through."""
        now = self.clock()
        if not self.on or now - self.start < self.delay:
            return
        if self.channel is not None:
            last = pass_index + 1 == self.passes and done == self.samples
            if last or now - self.reported >= self.REPORT_EVERY_S:
                self.reported = now
                self._report(f"calibrate {done} {self.samples} {pass_index + 1} {self.passes}\n")
            return
        work = (pass_index * self.samples + done) / (self.samples * self.passes)
        where = f" pass {pass_index + 1}/{self.passes}," if self.passes > 1 else ""
        if self.tty:
            bar = "#" * int(30 * work)
            sys.stderr.write(f"\rkiln: calibrating {self.model}{where} [{bar:.<30}] {done}/{self.samples} samples")
            self.drawn = True
        elif int(10 * work) > self.tenths:
            self.tenths = int(10 * work)
            sys.stderr.write(f"kiln: calibrating {self.model}:{where} {done}/{self.samples} samples ({int(100 * work)}%)\n")
        sys.stderr.flush()

    def _report(self, line: str) -> None:
        """One line to the build's display; never blocks the calibration, and a display that went away ends reporting."""
        try:
            os.write(self.channel, line.encode())
        except BlockingIOError:
            pass  # the display is behind: this report is dropped, a later one says more
        except OSError:
            self.on = False

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _channel() -> int | None:
    """The build's progress descriptor (`KILN_PROGRESS_FD`), set non-blocking; None outside the build or when invalid."""
    value = os.environ.get(PROGRESS_FD_ENV, "")
    if not value.isdigit() or int(value) < 3:  # never the standard streams
        return None
    try:
        os.set_blocking(int(value), False)
    except OSError:
        return None
    return int(value)
