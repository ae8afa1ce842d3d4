"""The normalize stage: source-level graphs (ONNX ops, NCHW) to kernel-level graphs (snake_case ops, NHWC).

`normalize(graph, config)` runs `PASSES` to a fixed point with the pass
manager, then checks that only kernel ops remain. `config` is the model.toml
`[normalize]` table: `disable` (pass names to turn off) and `input_layout`
("source" or "NHWC"); see docs/normalize.md.
"""
from __future__ import annotations

import os

from kiln.config import suggest
from kiln.errors import ConfigError, KilnError, did_you_mean
from kiln.ir.graph import Graph
from kiln.ir.verify import verify
from kiln.normalize import input_layout, kernel_form
from kiln.normalize.passes import (
    cancel_transposes,
    clamp_into_concat,
    conv1d_to_conv2d,
    eliminate_dead,
    fold_batchnorm,
    fold_bias_add,
    fold_constants,
    fold_flatten_transpose,
    fold_pad,
    fuse_activation,
    fuse_gelu,
    fuse_silu,
    lower_activations,
    lower_arithmetic,
    lower_conv_transpose,
    lower_layer_norm,
    lower_lrn,
    lower_matmul,
    lower_shapes,
    lower_slicing,
    merge_reshapes,
    reduce_mean_to_gap,
    relabel_depthwise,
    remove_noops,
    sink_transposes,
    split_groups,
    to_nhwc,
)
from kiln.normalize.config import CONFIG
from kiln.normalize.manager import MAX_ROUNDS, Pass, canonicalize, run_passes

# One round, in order. Cleanups first, then fusions that match source
# patterns, then lowering to kernel ops, then the layout passes that remove
# the transposes lowering introduced, and activation fusion last.
PASSES: tuple[Pass, ...] = tuple(
    Pass(m.__name__.rsplit(".", 1)[1], m.run)
    for m in (
        fold_constants,
        remove_noops,
        eliminate_dead,
        fold_batchnorm,
        fuse_silu,
        fuse_gelu,
        reduce_mean_to_gap,
        conv1d_to_conv2d,
        relabel_depthwise,
        split_groups,
        lower_conv_transpose,
        to_nhwc,
        lower_matmul,
        lower_activations,
        lower_layer_norm,
        lower_lrn,
        lower_arithmetic,
        lower_shapes,
        lower_slicing,
        sink_transposes,
        cancel_transposes,
        fold_flatten_transpose,
        merge_reshapes,
        fold_pad,
        fold_bias_add,
        clamp_into_concat,
        fuse_activation,
    )
)
PASS_NAMES = tuple(p.name for p in PASSES)


def normalize(
    graph: Graph,
    config: dict | None = None,
    *,
    check: bool | None = None,
    log: bool | None = None,
    dump_dir: str | os.PathLike | None = None,
    max_rounds: int = MAX_ROUNDS,
) -> Graph:
    """The kernel-level form of `graph`; the input graph is not modified.

    `check`, `log` and `dump_dir` go to the pass manager (defaults from the
    environment: KILN_VERIFY, KILN_LOG, KILN_DUMP_DIR).
    """
    disabled, layout = _config(config or {})
    if graph.meta.get("quantized_source") == "tflite":
        # A quantized TFLite file is in kernel form already, and every rewrite would risk changing
        # what TFLite Micro computes from it (docs/tflite.md): it is only put in canonical order.
        result = canonicalize(graph)
        verify(result, levels=("kernel",))
        return result
    passes = [p for p in PASSES if p.name not in disabled]
    start = canonicalize(input_layout.apply(graph, layout))
    result = run_passes(start, passes, max_rounds=max_rounds, check=check, log=log, dump_dir=dump_dir)
    kernel_form.check(result, graph, disabled)
    verify(result, levels=("kernel",))
    return result


def _config(config: dict) -> tuple[list[str], str]:
    for key in sorted(config):
        if key not in CONFIG:
            raise KilnError(f"normalize: unknown key 'normalize.{key}'{suggest(key, list(CONFIG))}")
    values = {k: CONFIG[k].validate(config[k], f"normalize.{k}") if k in config else CONFIG[k].default for k in CONFIG}
    disabled = list(values["disable"])
    for name in disabled:
        if name not in PASS_NAMES:
            raise ConfigError("normalize.disable", f"unknown pass {name!r}{did_you_mean(name, PASS_NAMES)} "
                                                   f"(known passes: {', '.join(PASS_NAMES)})")
    return disabled, values["input_layout"]
