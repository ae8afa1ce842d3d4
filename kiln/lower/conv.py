"""conv2d, depthwise_conv2d and fully_connected: weights stay, bias absorbs the input zero point."""
from __future__ import annotations

import math

import numpy as np

from kiln.ir.graph import Node, Tensor
from kiln.lower.common import Site, Unsupported, constant_data, four_d, qparams
from kiln.lower.specialize import (KILN_RQ_FAST, add_table, conv_add_scratch, depthwise_strip, gemm_scratch, requant_facts,
                                   uniform_fact)
from kiln.numerics.fixedpoint import activation_range, wrap_int32
from kiln.numerics.params import add_params, channel_multipliers, mul_multiplier


def _window(site: Site, w_shape: tuple[int, ...], kh_axis: int) -> dict[str, int]:
    n, in_h, in_w, in_c = four_d(site.input(0).shape, "input")
    _, out_h, out_w, _ = site.output().shape
    sh, sw = site.attr("strides", [1, 1])
    dh, dw = site.attr("dilations", [1, 1])
    pt, pl, _, _ = site.attr("pads", [0, 0, 0, 0])
    return dict(n=n, in_h=in_h, in_w=in_w, in_c=in_c, out_h=out_h, out_w=out_w, k_h=w_shape[kh_axis], k_w=w_shape[kh_axis + 1],
                stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl)


def _weights(site: Site, channel_axis: int) -> tuple[Tensor, np.ndarray]:
    w = site.input(1)
    data = constant_data(w, "weights")
    if w.dtype != "int8" or w.quant is None:
        raise Unsupported(f"weights {w.name!r} must be quantized int8")
    if any(z != 0 for z in w.quant.zero_point):
        raise Unsupported(f"weights {w.name!r} must be symmetric (zero point 0)")
    if w.quant.axis is not None and w.quant.axis != channel_axis:
        raise Unsupported(f"weights {w.name!r} are quantized along axis {w.quant.axis}, the kernel needs axis {channel_axis}")
    return w, data


def _int8_constants(site: Site, channel_axis: int, sum_axes: tuple[int, ...]) -> tuple[list[str], dict[str, int], int]:
    """Folded bias, multipliers and shifts; returns the call inputs, the shared quant params and the KILN_RQ_* facts."""
    x = site.input(0)
    in_scale, in_zp = qparams(x, "input")
    out_scale, out_zp = _output_quant(site)
    w, w_data = _weights(site, channel_axis)
    channels = w.shape[channel_axis]
    bias = site.input(2)
    b = np.zeros(channels, np.int64) if bias is None else constant_data(bias, "bias").astype(np.int64)
    if bias is not None and bias.dtype != "int32":
        raise Unsupported(f"bias {bias.name!r} must be int32, got {bias.dtype}")
    folded = wrap_int32(b - in_zp * w_data.astype(np.int64).sum(axis=sum_axes))
    mult, shift = channel_multipliers(in_scale, w.quant.scale, out_scale, channels)
    inputs = [x.name, w.name, site.constant("bias", folded.astype(np.int32), "int32"),
              site.constant("mult", mult, "int32"), site.constant("shift", shift, "int32")]
    lo, hi = activation_range(float(site.attr("act_min", -math.inf)), float(site.attr("act_max", math.inf)), out_scale, out_zp)
    facts = requant_facts(folded, w_data, channel_axis, mult, shift, lo, hi)
    return inputs, {"out_zp": out_zp, "act_min": lo, "act_max": hi}, facts


def _output_quant(site: Site) -> tuple[float, int]:
    """The layer's own output quantization: a conv fused with the add it feeds keeps its gone tensor's."""
    if "residual" in site.node.attrs:
        return float(site.attr("residual_scale")), int(site.attr("residual_zero_point"))
    return qparams(site.output(), "output")


def _float_inputs(site: Site, channels: int) -> list[str]:
    """x, w and the bias (zeros when absent): the float kernels always add one."""
    x, w, bias = site.input(0), site.input(1), site.input(2)
    for t in (w, bias):
        if t is not None and t.dtype != "float32":
            raise Unsupported(f"float conv/fc operand {t.name!r} is {t.dtype}, expected float32")
    b = bias.name if bias is not None else site.constant("bias", np.zeros(channels, np.float32), "float32")
    return [x.name, w.name, b]


def lower_conv2d(site: Site) -> list[Node]:
    w_shape = site.input(1).shape
    geo = _window(site, w_shape, 1)
    geo["out_c"] = w_shape[0]
    if not site.int8:
        return [site.call("kiln_conv2d_f32", _float_inputs(site, w_shape[0]), **geo, **site.act_bits())]
    inputs, quant, facts = _int8_constants(site, 0, (1, 2, 3))
    pointwise = geo["k_h"] == geo["k_w"] == 1 and geo["stride_h"] == geo["stride_w"] == 1 and not any(site.attr("pads", [0] * 4))
    scratch = gemm_scratch(geo["k_h"] * geo["k_w"] * geo["in_c"], geo["out_c"], site.scratch_limit)
    if "residual" in site.node.attrs:
        return [_conv_add(site, inputs, geo, quant, facts)]
    if pointwise:
        pixels = geo["n"] * geo["in_h"] * geo["in_w"]
        return [site.call("kiln_conv2d_1x1_s8", inputs, pixels=pixels, in_c=geo["in_c"], out_c=geo["out_c"], **quant,
                          requant=facts, scratch_bytes=scratch)]
    return [site.call("kiln_conv2d_s8", inputs, **geo, input_zp=qparams(site.input(0), "input")[1], **quant, requant=facts,
                      scratch_bytes=scratch)]


def _conv_add(site: Site, inputs: list[str], geo: dict[str, int], quant: dict[str, int], facts: int) -> Node:
    """A conv fused with the add or sub it feeds (kiln.lower.fuse_residual): kiln_conv2d_add_s8."""
    conv_out = (site.attr("residual_scale"), site.attr("residual_zero_point"))
    other, y = site.input(3), site.output()
    operands = [conv_out, qparams(other, "residual operand")]
    if site.attr("residual_operand") == 1:
        operands.reverse()
    p = add_params(operands[0], operands[1], qparams(y, "output"))
    table = add_table(p, site.attr("residual") == "sub")
    if table is None:
        raise Unsupported("the fused add's arithmetic does not fit its table")
    terms = table.table.reshape(2, 256)
    if site.attr("residual_operand") == 1:  # the kernel takes the conv's terms first
        terms = terms[::-1]
    lo, hi = activation_range(float(site.attr("residual_act_min")), float(site.attr("residual_act_max")), *qparams(y, "output"))
    k = geo["k_h"] * geo["k_w"] * geo["in_c"]
    return site.call("kiln_conv2d_add_s8", inputs + [other.name, site.constant("table", terms.reshape(-1), "int32")], **geo,
                     input_zp=qparams(site.input(0), "input")[1], **quant, requant=facts,
                     scratch_bytes=conv_add_scratch(k, geo["out_c"], site.scratch_limit), add_mult=table.mult,
                     add_round=table.round, add_shift=table.shift, add_min=lo, add_max=hi)


def lower_depthwise(site: Site) -> list[Node]:
    w_shape = site.input(1).shape
    geo = _window(site, w_shape, 1)
    geo["ch_mult"] = int(site.attr("depth_multiplier", 1))
    if not site.int8:
        return [site.call("kiln_depthwise_conv2d_f32", _float_inputs(site, w_shape[3]), **geo, **site.act_bits())]
    inputs, quant, facts = _int8_constants(site, 3, (0, 1, 2))
    return [site.call("kiln_depthwise_conv2d_s8", inputs, **geo, input_zp=qparams(site.input(0), "input")[1], **quant,
                      requant=facts, scratch_bytes=depthwise_strip(geo, site.scratch_limit))]


def lower_batch_matmul(site: Site) -> list[Node]:
    """[..., M, K] @ [..., K, N], the batch dims flattened; int8 as TFLite's BATCH_MATMUL (both operands offset)."""
    a, b, y = site.input(0), site.input(1), site.output()
    batches, m, k, n = int(np.prod(a.shape[:-2], dtype=np.int64)), a.shape[-2], a.shape[-1], b.shape[-1]
    if not site.int8:
        return [site.call("kiln_batch_matmul_f32", [a.name, b.name], batches=batches, m=m, k=k, n=n, **site.act_bits())]
    (sa, za), (sb, zb), (sy, zy) = qparams(a, "input"), qparams(b, "input"), qparams(y, "output")
    mult, shift = mul_multiplier(sa, sb, sy)
    return [site.call("kiln_batch_matmul_s8", [a.name, b.name], batches=batches, m=m, k=k, n=n, a_offset=-za, b_offset=-zb,
                      out_mult=mult, out_shift=shift, out_zp=zy, **site.act_range())]


FEW_INPUTS = 16  # KILN_FC_FEW_MAX of firmware_stubs/fc_few_s8.c


def fully_connected_kernel(in_features: int, requant: int) -> str:
    """kiln_fully_connected_few_s8 where its path applies (at most 16 inputs, KILN_RQ_FAST), a symbol of its
    own so that only images with such a layer link its code; kiln_fully_connected_s8 otherwise."""
    few = in_features <= FEW_INPUTS and requant & KILN_RQ_FAST
    return "kiln_fully_connected_few_s8" if few else "kiln_fully_connected_s8"


def lower_fully_connected(site: Site) -> list[Node]:
    (batches, in_features), out_features = site.input(0).shape, site.input(1).shape[0]
    dims = dict(batches=batches, in_features=in_features, out_features=out_features)
    if not site.int8:
        return [site.call("kiln_fully_connected_f32", _float_inputs(site, out_features), **dims, **site.act_bits())]
    inputs, quant, facts = _int8_constants(site, 0, (1,))
    mult, shift = (constant_data(site.graph.tensors[name], name) for name in inputs[3:5])
    requant = facts | uniform_fact(mult, shift)
    return [site.call(fully_connected_kernel(in_features, requant), inputs, **dims, **quant, requant=requant)]
