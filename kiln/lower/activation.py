"""Elementwise functions (int8 by table, float by formula), softmax, and quantize/dequantize boundaries."""
from __future__ import annotations

import math

import numpy as np

from kiln.ir.graph import Node
from kiln.lower.common import Site, Unsupported, qparams
from kiln.numerics.fixedpoint import float_bits
from kiln.numerics.lut import op_table
from kiln.numerics.softmax import MAX_ROW_SIZE, OUTPUT_SCALE, OUTPUT_ZERO_POINT, softmax_params


def _float_params(site: Site) -> dict[str, int]:
    op, attr = site.node.op, site.attr
    if op == "hardsigmoid":
        return {"alpha_bits": float_bits(attr("alpha", 1.0 / 6.0)), "beta_bits": float_bits(attr("beta", 0.5))}
    if op == "gelu":
        approximate = attr("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise Unsupported(f"gelu approximate={approximate!r} (expected 'none' or 'tanh')")
        return {"approximate": int(approximate == "tanh")}
    if op == "leaky_relu":
        return {"alpha_bits": float_bits(attr("alpha"))}
    if op == "clamp":
        return {"min_bits": float_bits(attr("act_min", -math.inf)), "max_bits": float_bits(attr("act_max", math.inf))}
    if op == "lrn_scale":
        return {"bias_bits": float_bits(attr("bias")), "alpha_bits": float_bits(attr("alpha_over_size")), "beta_bits": float_bits(attr("beta"))}
    return {}


def lower_elementwise(site: Site) -> list[Node]:
    x, y = site.input(0), site.output()
    if "uint8" in (x.dtype, y.dtype):  # a TFLite file's uint8 input or output: its table moves the bytes
        kernel = "kiln_lut_u8s8" if x.dtype == "uint8" else "kiln_lut_s8u8"
        return [site.call(kernel, [x.name, site.constant("lut", np.asarray(site.attr("lut"), np.int8), "int8", y.quant)], size=x.size)]
    if not site.int8:
        return [site.call(f"kiln_{site.node.op}_f32", [x.name], size=x.size, **_float_params(site))]
    in_scale, in_zp = qparams(x, "input")
    out_scale, out_zp = qparams(y, "output")
    if "lut" in site.node.attrs:  # the table the source fixed (a TFLite file: TFLM's values)
        table = np.asarray(site.attr("lut"), np.int8)
    else:
        table = op_table(site.node.op, site.node.attrs, in_scale, in_zp, out_scale, out_zp)
    return [site.call("kiln_lut_s8", [x.name, site.constant("lut", table, "int8", site.output().quant)], size=x.size)]


def lower_softmax(site: Site) -> list[Node]:
    x, y = site.input(0), site.output()
    row_size = x.shape[-1] if x.shape else 1
    rows = x.size // row_size if row_size else 0
    beta = float(site.attr("beta", 1.0))
    if not site.int8:
        return [site.call("kiln_softmax_f32", [x.name], rows=rows, row_size=row_size, beta_bits=float_bits(beta))]
    if row_size > MAX_ROW_SIZE:
        raise Unsupported(f"int8 softmax over {row_size} values: at most {MAX_ROW_SIZE}")
    if qparams(y, "output") != (OUTPUT_SCALE, OUTPUT_ZERO_POINT):
        raise Unsupported(f"int8 softmax output must have scale 1/256 and zero point -128, got {qparams(y, 'output')}")
    mult, shift, diff_min = softmax_params(beta, qparams(x, "input")[0])
    return [site.call("kiln_softmax_s8", [x.name], rows=rows, row_size=row_size, mult=mult, shift=shift, diff_min=diff_min)]


def lower_quantize(site: Site) -> list[Node]:
    x, y = site.input(0), site.output()
    if y.dtype != "int8":
        raise Unsupported(f"quantize to {y.dtype}: only int8")
    scale, zp = qparams(y, "output")
    return [site.call("kiln_quantize_s8", [x.name], size=x.size, scale_bits=float_bits(scale), zero_point=zp)]


def lower_dequantize(site: Site) -> list[Node]:
    x = site.input(0)
    if x.dtype != "int8":
        raise Unsupported(f"dequantize from {x.dtype}: only int8")
    scale, zp = qparams(x, "input")
    return [site.call("kiln_dequantize_s8", [x.name], size=x.size, scale_bits=float_bits(scale), zero_point=zp)]
