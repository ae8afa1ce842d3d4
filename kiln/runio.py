"""Float/int8 sample files for `kiln run`: .npy for one tensor, .npz by name.

An input's array is one sample shaped like the input, or N samples shaped
[N, *input_shape] or, when the batch dimension is 1, [N, *input_shape[1:]]
(`kiln.samples`). Outputs are written in the form the inputs came in:
one sample, [N, *output_shape], or [N, *output_shape[1:]].
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from kiln.errors import KilnError
from kiln.ir.graph import DTYPES, Graph
from kiln.atomic import write_atomic
from kiln.quantize.scheme import dequantize_array, quantize_array
from kiln.samples import accepted, stacked as as_stacked

SINGLE, STACKED, BATCHLESS = "single", "stacked", "batchless"  # how a sample file holds its samples


def read_samples(path: Path, graph: Graph) -> tuple[list[list[np.ndarray]], str]:
    """Samples as one list of input arrays each, and the form the file held them in (SINGLE, STACKED, BATCHLESS)."""
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
    forms = set()
    per_input = []
    for name in graph.inputs:
        a, shape = arrays[name], graph.tensors[name].shape
        if a.shape == shape:
            forms.add(SINGLE)
            a = a[None]
        else:
            try:
                a = as_stacked(a, shape, f"{path}: input {name!r}")
            except KilnError:
                raise KilnError(f"{path}: input {name!r} has shape {list(a.shape)}; expected one sample {list(shape)}, "
                                f"or samples {accepted(shape)}") from None
            forms.add(STACKED if arrays[name].ndim == len(shape) + 1 else BATCHLESS)
        per_input.append(a)
    if len(forms) != 1:
        raise KilnError(f"{path}: inputs mix sample forms ({', '.join(sorted(forms))}); give every input in the same form")
    counts = {len(a) for a in per_input}
    if len(counts) != 1:
        raise KilnError(f"{path}: inputs hold different numbers of samples: {sorted(counts)}")
    return [[a[i] for a in per_input] for i in range(counts.pop())], forms.pop()


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


def _in_form(arrays: list[np.ndarray], shape: tuple[int, ...], form: str) -> np.ndarray:
    if form == SINGLE:
        return arrays[0]
    out = np.stack(arrays)
    return out.reshape(len(arrays), *shape[1:]) if form == BATCHLESS and shape[:1] == (1,) else out


def write_samples(path: Path, graph: Graph, samples: list[list[np.ndarray]], form: str) -> None:
    """The outputs of every sample, in the form (SINGLE, STACKED, BATCHLESS) the inputs came in."""
    per_output = [_in_form([s[i] for s in samples], graph.tensors[name].shape, form) for i, name in enumerate(graph.outputs)]
    buf = io.BytesIO()
    if path.suffix == ".npz":
        np.savez(buf, **dict(zip(graph.outputs, per_output)))
    elif len(per_output) == 1:
        np.save(buf, per_output[0])
    else:
        raise KilnError(f"{path}: the model has {len(per_output)} outputs; write an .npz")
    write_atomic(path, buf.getvalue())
