"""Float/int8 sample files for `kiln run`: .npy for one tensor, .npz by name; one sample or N stacked."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from toolchain.errors import KilnError
from toolchain.ir.graph import DTYPES, Graph
from toolchain.ir.serialize import write_atomic
from toolchain.quantize.scheme import dequantize_array, quantize_array


def read_samples(path: Path, graph: Graph) -> tuple[list[list[np.ndarray]], bool]:
    """Samples as one list of input arrays each, and whether the file stacked them on a leading axis."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise KilnError(f"{path}: cannot read samples ({exc})") from None
    if isinstance(loaded, np.ndarray):
        if len(graph.inputs) != 1:
            raise KilnError(f"{path}: the model has {len(graph.inputs)} inputs; give an .npz with one array per input name")
        arrays = {graph.inputs[0]: loaded}
    else:
        missing = [n for n in graph.inputs if n not in loaded.files]
        if missing:
            raise KilnError(f"{path}: no array for input(s) {', '.join(missing)} (has {', '.join(loaded.files)})")
        arrays = {n: loaded[n] for n in graph.inputs}
    stacked = None
    per_input = []
    for name in graph.inputs:
        a, shape = arrays[name], graph.tensors[name].shape
        if a.shape == shape:
            is_stacked = False
            a = a[None]
        elif a.shape[1:] == shape:
            is_stacked = True
        else:
            raise KilnError(f"{path}: input {name!r} has shape {a.shape}; expected {shape} or (N, *{shape})")
        if stacked is not None and stacked != is_stacked:
            raise KilnError(f"{path}: inputs mix single and stacked samples")
        stacked = is_stacked
        per_input.append(a)
    counts = {len(a) for a in per_input}
    if len(counts) != 1:
        raise KilnError(f"{path}: inputs hold different numbers of samples: {sorted(counts)}")
    return [[a[i] for a in per_input] for i in range(counts.pop())], bool(stacked)


def check_values(path: Path, graph: Graph, samples: list[list[np.ndarray]], raw: bool) -> None:
    """Refuse samples that have no faithful int8 (or raw) value: none at all, non-real dtypes, NaN, and,
    with `raw`, any dtype but the input's own (a float file would be cast silently)."""
    if not samples:
        raise KilnError(f"{path}: no samples (the file holds N=0)")
    for index, name in enumerate(graph.inputs):
        want = graph.tensors[name].dtype
        got = np.asarray(samples[0][index]).dtype
        if raw and got != DTYPES[want]:
            raise KilnError(f"{path}: input {name!r} holds {got} data; --raw feeds the model's {want} tensor as it is, "
                            f"so give {want} data (or drop --raw to quantize float samples)")
        if not raw and got.kind not in "fiu":
            raise KilnError(f"{path}: input {name!r} holds {got} data; give real numbers (float or integer samples)")
        if not raw and want == "int8" and got.kind == "f":
            for i, sample in enumerate(samples):
                if np.isnan(sample[index]).any():
                    raise KilnError(f"{path}: input {name!r}, sample {i}: NaN has no int8 value")


def quantize_inputs(graph: Graph, samples: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Float samples into the int8 inputs the model takes (TFLite rounding: half away from zero)."""
    out = []
    for sample in samples:
        row = []
        for name, a in zip(graph.inputs, sample):
            t = graph.tensors[name]
            if t.dtype == "float32":
                row.append(np.asarray(a, np.float32))
                continue
            row.append(quantize_array(a, t.quant, t.dtype, f"input {name!r}"))
        out.append(row)
    return out


def dequantize_outputs(graph: Graph, samples: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    out = []
    for sample in samples:
        row = []
        for name, a in zip(graph.outputs, sample):
            q = graph.tensors[name].quant
            row.append(np.asarray(a, np.float32) if q is None else dequantize_array(a, q).astype(np.float32))
        out.append(row)
    return out


def write_samples(path: Path, graph: Graph, samples: list[list[np.ndarray]], stacked: bool) -> None:
    per_output = [np.stack([s[i] for s in samples]) if stacked else samples[0][i] for i in range(len(graph.outputs))]
    buf = io.BytesIO()
    if path.suffix == ".npz":
        np.savez(buf, **dict(zip(graph.outputs, per_output)))
    elif len(per_output) == 1:
        np.save(buf, per_output[0])
    else:
        raise KilnError(f"{path}: the model has {len(per_output)} outputs; write an .npz")
    write_atomic(path, buf.getvalue())
