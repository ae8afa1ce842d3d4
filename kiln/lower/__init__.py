"""The lower stage: bind every node to a kernel symbol with its parameters folded.

A conv2d whose output only feeds an add or sub first becomes one fused node
(`kiln.lower.fuse_residual`). Input is a quantized graph (or a float kernel-level graph when quantization is
off); output follows "Lowered graphs" in docs/ir.md: each node carries
`kernel`, `params_type`, `param_names` and `params`, and its inputs are the
kernel's pointer arguments in call order (activations, then weights, folded
bias, multipliers, shifts, tables). Reshape-like nodes become aliases
(`kernel == ""`). A concat becomes one copy call per input, all writing the
concat's output tensor (the first call defines it); a split becomes one call
per output.
"""
from __future__ import annotations

from kiln.config import suggest
from kiln.errors import ConfigError, KilnError, node_context
from kiln.ir.graph import Graph
from kiln.lower import activation, binary, conv, fuse_residual, movement, norm, pool
from kiln.lower.common import Rule, Site
from kiln.lower.config import CONFIG
from kiln.numerics.functions import ELEMENTWISE_OPS

PORTABLE: dict[str, Rule] = {
    "conv2d": conv.lower_conv2d,
    "depthwise_conv2d": conv.lower_depthwise,
    "fully_connected": conv.lower_fully_connected,
    "batch_matmul": conv.lower_batch_matmul,
    "add": binary.lower_binary,
    "sub": binary.lower_binary,
    "mul": binary.lower_binary,
    "div": binary.lower_binary,
    "maximum": binary.lower_binary,
    "minimum": binary.lower_binary,
    "max_pool2d": pool.lower_pool,
    "avg_pool2d": pool.lower_pool,
    "global_avg_pool": pool.lower_global_avg_pool,
    "mean": pool.lower_mean,
    "reshape": movement.lower_reshape,
    "transpose": movement.lower_transpose,
    "concat": movement.lower_concat,
    "split": movement.lower_split,
    "slice": movement.lower_slice,
    "pad": movement.lower_pad,
    "resize_nearest": movement.lower_resize_nearest,
    "softmax": activation.lower_softmax,
    "layer_norm": norm.lower_layer_norm,
    "quantize": activation.lower_quantize,
    "dequantize": activation.lower_dequantize,
    **{op: activation.lower_elementwise for op in ELEMENTWISE_OPS},
}

PROFILES: dict[str, dict[str, Rule]] = {"portable": PORTABLE}


def lower(graph: Graph, config: dict) -> Graph:
    """Lower `graph` with the kernel profile `config["profile"]` (the model.toml `kernels` table)."""
    profile = config.get("profile", "portable")
    rules = PROFILES.get(profile)
    if rules is None:
        raise ConfigError("kernels.profile", f"unknown profile {profile!r}{suggest(profile, list(PROFILES))}")
    limit = int(config.get("scratch_limit", CONFIG["scratch_limit"].default))
    g, _ = fuse_residual.run(graph, limit)
    lowered = []
    for index, node in enumerate(g.nodes):
        rule = rules.get(node.op)
        where = node_context(index, node.name, node.op, node.source, node.source_name)
        if rule is None:
            raise KilnError(f"{where}: no kernel for this op in profile {profile!r}")
        try:
            lowered.extend(rule(Site(g, node, limit)))
        except ValueError as exc:
            raise KilnError(f"{where}: {exc}") from None
    g.nodes = lowered
    g.remove_unused_tensors()
    return g
