"""max_pool2d, avg_pool2d: int8 versions keep the input's quantization; global_avg_pool and TFLite Micro's int8
mean requantize (TFLite's MEAN, 1/count folded into the multiplier)."""
from __future__ import annotations

from kiln.ir.graph import Node
from kiln.ir.kernel_ops import mean_split
from kiln.lower.common import Site, Unsupported, four_d, qparams, require_same_quant
from kiln.numerics.params import mean_multiplier


def lower_pool(site: Site) -> list[Node]:
    n, in_h, in_w, c = four_d(site.input(0).shape, "input")
    _, out_h, out_w, _ = site.output().shape
    kh, kw = site.attr("window")
    sh, sw = site.attr("strides", [1, 1])
    pt, pl, pb, pr = site.attr("pads", [0, 0, 0, 0])
    if max(pt, pb) >= kh or max(pl, pr) >= kw:
        raise Unsupported(f"pads {[pt, pl, pb, pr]} leave windows of kernel {[kh, kw]} entirely in padding")
    geo = dict(n=n, in_h=in_h, in_w=in_w, c=c, out_h=out_h, out_w=out_w, k_h=kh, k_w=kw, stride_h=sh, stride_w=sw, pad_top=pt, pad_left=pl)
    if not site.int8:
        return [site.call(f"kiln_{site.node.op}_f32", [site.input(0).name], **geo, **site.act_bits())]
    require_same_quant(site)
    return [site.call(f"kiln_{site.node.op}_s8", [site.input(0).name], **geo, **site.act_range())]


def lower_global_avg_pool(site: Site) -> list[Node]:
    n, h, w, c = four_d(site.input(0).shape, "input")
    if not site.int8:
        return [site.call("kiln_global_avg_pool_f32", [site.input(0).name], n=n, hw=h * w, c=c)]
    (in_scale, in_zp), (out_scale, out_zp) = qparams(site.input(0), "input"), qparams(site.output(), "output")
    mult, shift = mean_multiplier(in_scale, out_scale, h * w)
    return [site.call("kiln_global_avg_pool_s8", [site.input(0).name], n=n, hw=h * w, c=c, input_zp=in_zp, mult=mult, shift=shift, out_zp=out_zp)]


def lower_mean(site: Site) -> list[Node]:
    """TFLite Micro's int8 MEAN: the sum over one run of axes, 1/count folded into the requantization."""
    x = site.input(0)
    outer, reduce, inner = mean_split(x.shape, site.attr("axes"))
    (in_scale, in_zp), (out_scale, out_zp) = qparams(x, "input"), qparams(site.output(), "output")
    mult, shift = mean_multiplier(in_scale, out_scale, reduce)
    return [site.call("kiln_mean_s8", [x.name], outer=outer, reduce=reduce, inner=inner, input_zp=in_zp, mult=mult, shift=shift, out_zp=out_zp)]
