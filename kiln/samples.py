"""Sample data as users hold it, into the arrays every stage takes: per input, (N, *input_shape).

For an input of shape S, an array of N samples is `[N, *S]`, or `[N, *S[1:]]`
when S's batch dimension is 1 (a data set shaped `[N, C, H, W]` for a model
that takes `[1, C, H, W]`). The two differ in rank, so the reading is never
ambiguous; any other shape is an error that shows both.

`calibration_data()` may also return any iterable — a list, a tuple, a
generator, a `torch.utils.data.DataLoader` — whose elements are samples or
batches, in one of these forms:

- an array or tensor (single-input models): one sample shaped `S` or `S[1:]`,
  or a batch `[B, *S]` or `[B, *S[1:]]`;
- a tuple or list: its first k items are the k inputs in forward() order;
  further items (labels, weights) are ignored. When its first item is itself
  a tuple, list or dict, that item holds the inputs: `(inputs, labels)` pairs;
- a dict by input name; other keys (labels) are ignored.

or a dict input name -> array of samples, or (multi-input models) a tuple of
one array of samples per input.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from kiln.errors import KilnError

Shape = tuple[int, ...]


def _dims(shape: Shape, lead: str) -> str:
    return "[" + ", ".join([lead, *map(str, shape)]) + "]"


def accepted(shape: Shape, lead: str = "N") -> str:
    """The accepted shapes of stacked samples of an input shaped `shape`, for error messages."""
    forms = [_dims(shape, lead)] + ([_dims(shape[1:], lead)] if shape and shape[0] == 1 else [])
    return " or ".join(forms)


def stacked(a: np.ndarray, shape: Shape, what: str) -> np.ndarray:
    """Samples of an input shaped `shape`, given as [N, *shape] or [N, *shape[1:]], as [N, *shape] (any dtype)."""
    shape = tuple(shape)
    if a.ndim == len(shape) + 1 and tuple(a.shape[1:]) == shape:
        return a
    if shape and shape[0] == 1 and a.ndim == len(shape) and tuple(a.shape[1:]) == shape[1:]:
        return a.reshape(a.shape[0], *shape)
    raise KilnError(f"{what} has shape {list(a.shape)}, expected {accepted(shape)}")


def batch(a: np.ndarray, shape: Shape, what: str) -> np.ndarray:
    """One element of an iterable: a sample (`shape` or `shape[1:]`) or a batch, as [B, *shape]."""
    shape = tuple(shape)
    if tuple(a.shape) == shape or (shape and shape[0] == 1 and tuple(a.shape) == shape[1:]):
        return a.reshape(1, *shape)
    if a.ndim in (len(shape), len(shape) + 1):
        try:
            return stacked(a, shape, what)
        except KilnError:
            pass
    one = " or ".join([str(list(shape))] + ([str(list(shape[1:]))] if shape and shape[0] == 1 else []))
    raise KilnError(f"{what} has shape {list(a.shape)}, expected one sample {one} or a batch {accepted(shape, 'B')}")


def float_array(value: Any, what: str) -> np.ndarray:
    """A tensor, array or nested list of real numbers as a contiguous float32 array."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch here
        value = value.detach().cpu().numpy()
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise KilnError(f"{what} is not numeric: {exc}") from None
    if a.dtype.kind not in "biuf":
        raise KilnError(f"{what} is not an array of real numbers (dtype {a.dtype})")
    return np.ascontiguousarray(a, dtype=np.float32)


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (hasattr(value, "detach") and hasattr(value, "shape"))


def _is_numbers(value: Any) -> bool:
    """A nested list of numbers (an array written as Python lists)."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_is_numbers(v) for v in value)
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def _element_inputs(element: Any, names: list[str], what: str) -> dict[str, Any]:
    """The input arrays of one iterable element, by input name."""
    if _is_array(element) or _is_numbers(element):
        if len(names) == 1:
            return {names[0]: element}
        raise KilnError(f"{what} is one array; a {len(names)}-input model needs a tuple ({', '.join(names)}) or a dict by input name")
    if isinstance(element, Mapping):
        missing = [n for n in names if n not in element]
        if missing:
            raise KilnError(f"{what} is a dict without input(s) {', '.join(map(repr, missing))} (keys: {', '.join(map(repr, element))})")
        return {n: element[n] for n in names}
    if isinstance(element, (tuple, list)):
        if element and isinstance(element[0], (tuple, list, Mapping)) and not _is_numbers(element[0]):
            return _element_inputs(element[0], names, what)  # (inputs, labels)
        if len(element) < len(names):
            raise KilnError(f"{what} has {len(element)} item(s); the model takes {len(names)} inputs ({', '.join(names)})")
        return dict(zip(names, element))
    raise KilnError(f"{what} is a {type(element).__name__}, not an array, tuple or dict")


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def collect(value: Any, shapes: dict[str, Shape], what: str = "calibration_data()") -> dict[str, np.ndarray]:
    """Any accepted form of calibration samples as {input name: float32 (N, *input_shape)}."""
    names = list(shapes)
    if _is_array(value):
        if len(names) != 1:
            raise KilnError(f"{what} is one array; a {len(names)}-input model needs a dict by input name or samples as tuples")
        return _same_count({names[0]: stacked(float_array(value, what), shapes[names[0]], what)}, what)
    if isinstance(value, Mapping):
        missing = [n for n in names if n not in value]
        if missing:
            raise KilnError(f"{what} has no samples for input(s) {', '.join(map(repr, missing))} (keys: {', '.join(map(repr, value))})")
        out = {n: stacked(float_array(value[n], f"{what}[{n!r}]"), shapes[n], f"{what}[{n!r}]") for n in names}
        return _same_count(out, what)
    if len(names) > 1 and isinstance(value, (tuple, list)) and len(value) == len(names) and all(map(_is_array, value)):
        return _same_count({n: stacked(float_array(v, f"{what} array {n!r}"), shapes[n], f"{what} array {n!r}")
                            for n, v in zip(names, value)}, what)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise KilnError(f"{what} returned {type(value).__name__}: expected an array, a dict by input name, "
                        "or an iterable (list, generator, DataLoader) of samples or batches")
    return _from_iterable(value, shapes, what)


def _from_iterable(value: Iterable, shapes: dict[str, Shape], what: str) -> dict[str, np.ndarray]:
    names = list(shapes)
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    iterator = iter(value)
    index = 0
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            break
        except Exception as exc:  # the user's generator or DataLoader failed
            raise KilnError(f"{what} raised {_one_line(exc)} while giving element {index}") from None
        where = f"{what} element {index}"
        arrays = {n: batch(float_array(a, f"{where} input {n!r}"), shapes[n], f"{where} input {n!r}")
                  for n, a in _element_inputs(element, names, where).items()}
        counts = {len(a) for a in arrays.values()}
        if len(counts) != 1:
            raise KilnError(f"{where} gives {sorted(counts)} samples per input; every input needs the same count")
        for n, a in arrays.items():
            parts[n].append(a)
        index += 1
    if not index:
        raise KilnError(f"{what} gave no samples")
    return {n: np.concatenate(parts[n]) if len(parts[n]) > 1 else parts[n][0] for n in names}


def _same_count(arrays: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    counts = {len(a) for a in arrays.values()}
    if len(counts) != 1 or 0 in counts:
        raise KilnError(f"{what} gives {sorted(counts)} samples per input; every input needs the same N >= 1")
    return arrays
