"""The calibration samples a build keeps for its reports: `samples.npz`, written beside `quantized.kir`.

(How users hand calibration data over, in every form, is `kiln/samples.py`.)

The quantize stage keeps the first `KEPT` of the samples it calibrated with
(float32, in the normalized graph's input layout) and a line saying where
they came from. `kiln report`, `kiln build-report` and `kiln check` read them
from the build folder, so they measure on the model's own data wherever they
run, and say so. A build that was calibrated with nothing (a QDQ source
without samples) keeps none, and the reports say they use seeded random
inputs instead.
"""
from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.graph import Graph
from kiln.quantize.calibration import check_samples, select

ARTIFACT = "samples.npz"
KEPT = 16
_SOURCE = "source"
_INPUT = "input/"


@dataclass(frozen=True)
class Samples:
    """Samples per graph input, each (N, *input_shape) float32, and where they came from ("" for none)."""

    inputs: dict[str, np.ndarray]
    source: str

    @property
    def count(self) -> int:
        return min((len(a) for a in self.inputs.values()), default=0)


def _source(config: dict[str, Any], calibration: dict[str, np.ndarray]) -> str:
    """Where the quantize stage's samples came from, by file name only (no machine paths in artifacts)."""
    if not calibration:
        return ""
    if config["calibration"]:
        return "quant.calibration " + ", ".join(Path(p).name for p in config["calibration"])
    return "the model's calibration_data()"


def pack(graph: Graph, calibration: dict[str, np.ndarray], config: dict[str, Any]) -> bytes:
    """`samples.npz`: the first KEPT samples that calibration used (`config`: the quant table), in its order."""
    arrays: dict[str, np.ndarray] = {_SOURCE: np.array(_source(config, calibration))}
    if calibration:
        count, shaped = check_samples(graph, calibration)
        chosen = select(count, config["max_samples"], config["seed"])[:KEPT]
        arrays |= {_INPUT + n: np.ascontiguousarray(shaped[n][chosen], np.float32) for n in graph.inputs}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def load_samples(build: Path) -> Samples:
    """The samples kept in `build` (a model's build folder or `kiln compile` output)."""
    path = build / ARTIFACT
    if not path.is_file():
        raise KilnError(f"{path}: missing (an older or partial build: rebuild the model's quantize stage)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            source = str(npz[_SOURCE])
            inputs = {k[len(_INPUT):]: npz[k] for k in sorted(npz.files) if k.startswith(_INPUT)}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise KilnError(f"{path}: not a samples file written by the quantize stage ({exc})") from None
    return Samples(inputs, source if inputs else "")


def report_inputs(graph: Graph, kept: Samples, count: int | None = None, seed: int = 0) -> tuple[dict[str, np.ndarray], str]:
    """Up to `count` samples per input for a report, and the words that say what they are.

    The kept calibration samples when there are any; otherwise seeded normal
    noise, which the description names as such. Every report measures on all
    the samples kept (KEPT of noise) unless told otherwise, so their figures agree.
    """
    count = KEPT if count is None else count
    if kept.count:
        n = min(count, kept.count)
        taken = {name: kept.inputs[name][:n] for name in graph.inputs}
        return taken, f"{n} calibration sample{'s' if n != 1 else ''} (from {kept.source})"
    rng = np.random.default_rng(seed)
    noise = {name: rng.standard_normal((count, *graph.tensors[name].shape)).astype(np.float32) for name in graph.inputs}
    return noise, f"{count} seeded random input{'s' if count != 1 else ''} (the build keeps no calibration samples)"
