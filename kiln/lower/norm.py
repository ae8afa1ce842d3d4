"""layer_norm: the integer constants of kiln.numerics.layernorm folded at compile time."""
from __future__ import annotations

from kiln.ir.graph import Node
from kiln.lower.common import Site, Unsupported, constant_data, qparams
from kiln.numerics.fixedpoint import float_bits
from kiln.numerics.layernorm import layer_norm_params


def lower_layer_norm(site: Site) -> list[Node]:
    x, gamma, beta = site.input(0), site.input(1), site.input(2)
    size = x.shape[-1]
    rows = x.size // size
    epsilon = float(site.attr("epsilon", 1e-5))
    if not site.int8:
        return [site.call("kiln_layer_norm_f32", [x.name, gamma.name, beta.name], rows=rows, size=size,
                          eps_bits=float_bits(epsilon), **site.act_bits())]
    try:
        p = layer_norm_params(constant_data(gamma, "gamma"), constant_data(beta, "beta"), epsilon, qparams(x, "input"),
                              qparams(site.output(), "output"))
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    g = site.constant("gamma", p.gamma, "int32")
    b = site.constant("beta", p.beta, "int32")
    return [site.call("kiln_layer_norm_s8", [x.name, g, b], rows=rows, size=size, input_zp=p.input_zp,
                      eps_hi=p.eps_term >> 31, eps_lo=p.eps_term & (2**31 - 1), out_shift=p.out_shift,
                      bias_shift=p.bias_shift, out_zp=p.out_zp, **site.act_range())]
