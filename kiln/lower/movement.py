"""Data movement: reshape (alias), transpose, concat, split, slice, pad, resize_nearest.

Kernels see at most 4 dimensions; size-1 dimensions are dropped and
neighbouring dimensions that move together are merged first, so most
higher-rank cases still fit.
"""
from __future__ import annotations

import math

import numpy as np

from kiln.ir.graph import DTYPES, Node, Tensor
from kiln.ir.ops import norm_axis
from kiln.lower.common import Site, Unsupported, four_d, qparams, require_same_quant, same_quant
from kiln.numerics.fixedpoint import INT8_MAX, INT8_MIN, float_bits, quantize_value
from kiln.numerics.params import requant_multiplier

MAX_RANK = 4


def _elem_size(t: Tensor) -> int:
    return DTYPES[t.dtype].itemsize


def _prod(dims) -> int:
    return math.prod(int(d) for d in dims)


def _pad_rank(dims: list[int], what: str, fill: int = 1) -> list[int]:
    if len(dims) > MAX_RANK:
        raise Unsupported(f"{what} needs {len(dims)} dimensions, kernels take {MAX_RANK}")
    return [fill] * (MAX_RANK - len(dims)) + dims


def lower_reshape(site: Site) -> list[Node]:
    x = site.input(0)
    if x.dtype == "int8":
        require_same_quant(site)
    if x.is_constant:
        return [_copy(site, x, 1, x.size, x.size, 0, x.size, 0, None)]
    return [site.alias()]


def lower_transpose(site: Site) -> list[Node]:
    x = site.input(0)
    if x.dtype == "int8":
        require_same_quant(site)
    shape, perm = list(x.shape), list(site.attr("perm"))
    kept = [i for i in range(len(shape)) if shape[i] != 1]
    order = [kept.index(p) for p in perm if shape[p] != 1]
    groups: list[list[int]] = []  # runs of input dims that stay adjacent, in output order
    for p in order:
        if groups and p == groups[-1][-1] + 1:
            groups[-1].append(p)
        else:
            groups.append([p])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    dims = [_prod(shape[kept[i]] for i in groups[g]) for g in by_input]
    new_perm = [by_input.index(g) for g in range(len(groups))]
    if new_perm == sorted(new_perm) and not x.is_constant:
        return [site.alias()]
    dims = _pad_rank(dims, "transpose")
    lead = MAX_RANK - len(new_perm)
    full_perm = list(range(lead)) + [p + lead for p in new_perm]
    params = {f"in_d{k}": d for k, d in enumerate(dims)} | {f"perm{k}": p for k, p in enumerate(full_perm)}
    return [site.call("kiln_transpose", [x.name], elem_size=_elem_size(x), **params)]


def _copy(site: Site, x: Tensor, outer: int, inner: int, in_stride: int, in_offset: int, out_stride: int, out_offset: int,
          part: int | None, output: str | None = None, y: Tensor | None = None) -> Node:
    """One strided copy of `x` into the node's output (requantizing int8 values whose parameters differ)."""
    y = y or site.output()
    geo = dict(outer=outer, inner=inner, in_stride=in_stride, in_offset=in_offset, out_stride=out_stride, out_offset=out_offset)
    outputs = [output or y.name]
    if x.dtype == "int8" and not same_quant(x, y):
        (in_scale, in_zp), (out_scale, out_zp) = qparams(x, "input"), qparams(y, "output")
        mult, shift = requant_multiplier(in_scale, out_scale)
        return site.call("kiln_requantize_s8", [x.name], outputs, part, **geo, in_zp=in_zp, mult=mult, shift=shift, out_zp=out_zp)
    return site.call("kiln_copy_part", [x.name], outputs, part, elem_size=_elem_size(x), **geo)


def lower_concat(site: Site) -> list[Node]:
    y = site.output()
    axis = norm_axis(site.attr("axis"), len(y.shape))
    outer, out_stride = _prod(y.shape[:axis]), _prod(y.shape[axis:])
    row = _prod(y.shape[axis + 1:])
    calls, offset = [], 0
    for i, name in enumerate(site.node.inputs):
        x = site.graph.tensors[name]
        inner = _prod(x.shape[axis:])
        if inner:
            calls.append(_copy(site, x, outer, inner, inner, 0, out_stride, offset * row, len(calls)))
        offset += x.shape[axis]
    return calls


def lower_split(site: Site) -> list[Node]:
    x = site.input(0)
    axis = norm_axis(site.attr("axis"), len(x.shape))
    outer, in_stride = _prod(x.shape[:axis]), _prod(x.shape[axis:])
    row = _prod(x.shape[axis + 1:])
    calls, offset = [], 0
    for j, name in enumerate(site.node.outputs):
        y = site.graph.tensors[name]
        inner = _prod(y.shape[axis:])
        calls.append(_copy(site, x, outer, inner, in_stride, offset * row, inner, 0, j, name, y))
        offset += y.shape[axis]
    return calls


def lower_slice(site: Site) -> list[Node]:
    x, y = site.input(0), site.output()
    if x.dtype == "int8":
        require_same_quant(site)
    axes = []
    for d, s, e, st, n in zip(x.shape, site.attr("starts"), site.attr("ends"), site.attr("steps"), y.shape):
        idx = range(s, e, st)
        if n and not (0 <= idx[0] < d and 0 <= idx[-1] < d):
            raise Unsupported(f"slice {s}:{e}:{st} reaches outside a dimension of size {d}")
        if d != 1:
            axes.append([d, s if n else 0, st, n])
    merged: list[list[int]] = []
    for d, s, st, n in reversed(axes):
        inner = merged[-1] if merged else None
        if inner and s == 0 and st == 1 and n == d and inner[1] == 0 and inner[2] == 1 and inner[3] == inner[0]:
            inner[0] *= d
            inner[3] *= d
        else:
            merged.append([d, s, st, n])
    merged.reverse()
    if len(merged) > MAX_RANK:
        raise Unsupported(f"slice needs {len(merged)} dimensions, kernels take {MAX_RANK}")
    merged = [[1, 0, 1, 1]] * (MAX_RANK - len(merged)) + merged
    params = {f"in_d{k}": merged[k][0] for k in (1, 2, 3)}
    params |= {f"start{k}": m[1] for k, m in enumerate(merged)} | {f"step{k}": m[2] for k, m in enumerate(merged)}
    params |= {f"out_d{k}": m[3] for k, m in enumerate(merged)}
    return [site.call("kiln_slice", [x.name], elem_size=_elem_size(x), **params)]


def lower_pad(site: Site) -> list[Node]:
    x, y = site.input(0), site.output()
    rank = len(x.shape)
    pads = site.attr("pads")
    if any(p < 0 for p in pads):
        raise Unsupported(f"negative pads {pads} (cropping) are not supported")
    dims = [[d, pads[i], d + pads[i] + pads[i + rank]] for i, d in enumerate(x.shape)]
    merged: list[list[int]] = []
    for d, pre, out in reversed(dims):
        inner = merged[-1] if merged else None
        if inner and pre == 0 and out == d and inner[1] == 0 and inner[2] == inner[0]:
            inner[0] *= d
            inner[2] *= d
        elif d != 1 or pre or out != 1:
            merged.append([d, pre, out])
    merged.reverse()
    if len(merged) > MAX_RANK:
        raise Unsupported(f"pad needs {len(merged)} dimensions, kernels take {MAX_RANK}")
    merged = [[1, 0, 1]] * (MAX_RANK - len(merged)) + merged
    params = {f"in_d{k}": m[0] for k, m in enumerate(merged)} | {f"pre{k}": m[1] for k, m in enumerate(merged)}
    params |= {f"out_d{k}": m[2] for k, m in enumerate(merged)}
    value = float(site.attr("value", 0.0))
    if x.dtype == "int8":
        require_same_quant(site)
        scale, zp = qparams(y, "output")
        q = min(max(quantize_value(value, scale, zp), INT8_MIN), INT8_MAX)
        return [site.call("kiln_pad_s8", [x.name], **params, value=q)]
    if x.dtype != "float32":
        raise Unsupported(f"no pad kernel for {x.dtype}")
    return [site.call("kiln_pad_f32", [x.name], **params, value_bits=float_bits(value))]


def lower_resize_nearest(site: Site) -> list[Node]:
    x, y = site.input(0), site.output()
    n, in_h, in_w, c = four_d(x.shape, "input")
    if x.dtype == "int8":
        require_same_quant(site)
    rows = site.constant("rows", np.asarray(site.attr("rows"), np.int32), "int32")
    cols = site.constant("cols", np.asarray(site.attr("cols"), np.int32), "int32")
    return [site.call("kiln_resize_nearest", [x.name, rows, cols], elem_size=_elem_size(x), n=n, in_h=in_h, in_w=in_w, c=c,
                      out_h=y.shape[1], out_w=y.shape[2])]
