"""reduce_mean_to_gap: spatial means become GlobalAveragePool, other means global_avg_pool on a reshaped view."""
import numpy as np

from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import reduce_mean_to_gap


def _mean(shape: tuple[int, ...], axes: list[int], keepdims: int):
    b = Builder()
    return b.output(b.op("ReduceMean", [b.input("x", shape), b.const("axes", np.asarray(axes, np.int64))], {"keepdims": keepdims}))


def test_spatial_means_become_global_average_pools() -> None:
    for shape, axes, keep, want in (((2, 3, 4, 5), [-1, 2], 1, ["GlobalAveragePool"]), ((2, 3, 4, 5), [2, 3], 0, ["GlobalAveragePool", "reshape"]),
                                    ((2, 3, 7), [2], 1, ["GlobalAveragePool"])):
        g = _mean(shape, axes, keep)
        out, changed = run_pass(reduce_mean_to_gap, g)
        assert changed and ops(out) == want
        assert_same_values(g, out)


def test_other_means_pool_over_a_reshaped_view() -> None:
    for shape, axes, want in (((2, 3, 4, 5), [1], ["reshape", "global_avg_pool", "reshape"]),
                              ((2, 3, 4, 5), [1, 3], ["transpose", "reshape", "global_avg_pool", "reshape"]),
                              ((6, 5), [0, 1], ["reshape", "global_avg_pool", "reshape"])):
        for keep in (0, 1):
            g = _mean(shape, axes, keep)
            out, _ = run_pass(reduce_mean_to_gap, g)
            assert ops(out) == want
            assert_same_values(g, out)


def test_leaves_an_empty_noop_mean_alone() -> None:
    b = Builder()
    unchanged(reduce_mean_to_gap, b.output(b.op("ReduceMean", [b.input("x", (2, 3))], {"noop_with_empty_axes": 1})))
