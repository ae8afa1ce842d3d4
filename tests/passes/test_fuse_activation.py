"""fuse_activation: a clamp narrows its producer's act range, also through single-use reshapes/transposes."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import fuse_activation
from kiln.normalize.rewrite import no_act


def _clamp(b: Builder, x: str, lo: float, hi: float) -> str:
    return b.op("clamp", [x], {"act_min": lo, "act_max": hi})


def test_clamps_fuse_into_their_producers() -> None:
    b = Builder()
    x = b.input("x", (1, 5, 5, 2))
    conv = b.op("conv2d", [x, b.weight("w", 3, 3, 3, 2)], {"strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1], **no_act()}, name="conv")
    relu6 = _clamp(b, conv, 0.0, 6.0)
    added = b.op("add", [relu6, b.weight("c", 3)], {"act_min": -1.0, "act_max": 4.0}, name="add")
    clipped = _clamp(b, added, 0.5, np.inf)
    fc = b.op("fully_connected", [b.input("v", (2, 4)), b.weight("f", 3, 4)], no_act(), name="fc")
    moved = b.op("transpose", [b.op("reshape", [fc], {"shape": [3, 2]})], {"perm": [1, 0]})
    g = b.output(clipped, _clamp(b, moved, 0.0, np.inf))
    out, changed = run_pass(fuse_activation, g)
    assert changed and "clamp" not in ops(out)
    ranges = {n.name: (n.attrs["act_min"], n.attrs["act_max"]) for n in out.nodes if "act_min" in n.attrs}
    assert ranges == {"conv": (0.0, 6.0), "add": (0.5, 4.0), "fc": (0.0, np.inf)}
    assert_same_values(g, out)


def test_leaves_shared_results_disjoint_ranges_and_other_producers_alone() -> None:
    b = Builder()
    x = b.input("x", (2, 3))
    shared = b.op("add", [x, x], no_act())
    disjoint = b.op("mul", [x, x], {"act_min": 0.0, "act_max": 1.0})
    unchanged(fuse_activation, b.output(_clamp(b, shared, 0.0, 6.0), shared, _clamp(b, disjoint, 2.0, 3.0), _clamp(b, b.op("sigmoid", [x]), 0.0, 0.5)))
