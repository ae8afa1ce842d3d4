"""add, sub, mul, div, maximum, minimum: broadcasting folded into 4-D strides, int8 arithmetic into multipliers."""
from __future__ import annotations

from kiln.ir.graph import Node
from kiln.lower.common import Site, Unsupported, qparams
from kiln.lower.specialize import add_table, mul_facts
from kiln.numerics.params import add_params, mul_multiplier

MAX_RANK = 4


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def broadcast_geometry(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> dict[str, int]:
    """d0..d3 and per-input element strides (0 where broadcast), merging dims that walk memory alike."""
    rank = len(out)
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    dims = [(d, sa if da != 1 else 0, sb if db != 1 else 0)
            for d, da, db, sa, sb in zip(out, a, b, _strides(a), _strides(b)) if d != 1]
    merged: list[tuple[int, int, int]] = []
    for d, sa, sb in reversed(dims):
        if merged:
            inner_d, inner_a, inner_b = merged[-1]
            if sa == inner_a * inner_d and sb == inner_b * inner_d:
                merged[-1] = (d * inner_d, inner_a, inner_b)
                continue
        merged.append((d, sa, sb))
    if len(merged) > MAX_RANK:
        raise Unsupported(f"broadcasting {a} with {b} needs {len(merged)} dimensions, kernels take {MAX_RANK}")
    merged += [(1, 0, 0)] * (MAX_RANK - len(merged))
    geo: dict[str, int] = {}
    for k, (d, sa, sb) in enumerate(reversed(merged)):
        geo[f"d{k}"], geo[f"a_s{k}"], geo[f"b_s{k}"] = d, sa, sb
    return geo


def lower_binary(site: Site) -> list[Node]:
    a, b, y = site.input(0), site.input(1), site.output()
    geo = broadcast_geometry(a.shape, b.shape, y.shape)
    op = site.node.op
    if not site.int8:
        return [site.call(f"kiln_{op}_f32", [a.name, b.name], **geo, **site.act_bits())]
    qa, qb, qy = qparams(a, "input a"), qparams(b, "input b"), qparams(y, "output")
    if op in ("maximum", "minimum"):
        if not qa == qb == qy:
            raise Unsupported(f"{op} compares int8 values: inputs and output need one scale and zero point, got {qa}, {qb}, {qy}")
        return [site.call(f"kiln_{op}_s8", [a.name, b.name], **geo)]
    if op == "mul":
        mult, shift = mul_multiplier(qa[0], qb[0], qy[0])
        act = site.act_range()
        facts = mul_facts(mult, shift, -qa[1], -qb[1], qy[1], act["act_min"], act["act_max"])
        return [site.call("kiln_mul_s8", [a.name, b.name], **geo, a_offset=-qa[1], b_offset=-qb[1], out_mult=mult, out_shift=shift,
                          out_zp=qy[1], **act, requant=facts)]
    if op not in ("add", "sub"):
        raise Unsupported(f"no int8 kernel for {op}")
    p = add_params(qa, qb, qy)
    table = add_table(p, op == "sub") if a.shape == b.shape == y.shape else None
    if table is not None:
        name = site.constant("table", table.table, "int32")
        return [site.call("kiln_add_table_s8", [a.name, b.name, name], size=y.size, out_mult=table.mult,
                          out_round=table.round, out_shift=table.shift, **site.act_range())]
    return [site.call(f"kiln_{op}_s8", [a.name, b.name], **geo, a_offset=p.a_offset, a_mult=p.a_mult, a_shift=p.a_shift,
                      b_offset=p.b_offset, b_mult=p.b_mult, b_shift=p.b_shift, left_shift=p.left_shift,
                      out_mult=p.out_mult, out_shift=p.out_shift, out_zp=p.out_zp, **site.act_range())]
