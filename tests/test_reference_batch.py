"""run_batch: many samples at once give, sample for sample, exactly what `run` gives for each alone."""
from __future__ import annotations

import numpy as np
import pytest

from test_quantize import NO_ACT, RELU, Builder, conv_attrs, rules_graph, samples
from kiln.quantize import quantize
from kiln.quantize.config import CONFIG
from kiln.reference.batch import run_batch
from kiln.reference.executor import run
from kiln.reference.int8 import INT8_IMPLS

DEFAULTS = {k: v.default for k, v in CONFIG.items()}


def mixed_graph():
    """Foldable ops next to ones that mix axis 0: a reshape that moves the batch, a transpose of axis 0,
    a concat and a slice along axis 0, and an add whose operands differ in rank."""
    b = Builder("mixed")
    x = b.input("x", (1, 6, 6, 2))
    v = b.input("v", (1, 4))
    c = b.op("conv2d", [x, b.weights("w", (4, 3, 3, 2)), b.weights("bias", (4,))], "c", **conv_attrs(), **RELU)
    p = b.op("max_pool2d", [c], "p", window=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], **NO_ACT)
    rows = b.op("reshape", [p], "rows", shape=[9, 4])  # the batch axis becomes 9 rows
    fc = b.op("fully_connected", [rows, b.weights("wf", (4, 4))], "fc", **NO_ACT)
    t = b.op("transpose", [fc], "t", perm=[1, 0])
    top = b.op("slice", [fc], "top", starts=[0, 0], ends=[3, 4], steps=[1, 1])
    both = b.op("concat", [top, v], "both", axis=0)
    flat = b.op("reshape", [p], "flat", shape=[1, 36])
    s = b.op("sigmoid", [flat], "s")
    g = b.op("global_avg_pool", [c], "g")
    gv = b.op("reshape", [g], "gv", shape=[4])
    add = b.op("add", [fc, gv], "add", **NO_ACT)  # (9, 4) + (4,): operands of different rank
    sm = b.op("softmax", [s], "sm", beta=1.0)
    return b.done(t, both, add, sm)


def per_sample(graph, feeds, table=None):
    count = len(next(iter(feeds.values())))
    rows = [run(graph, {n: a[i] for n, a in feeds.items()}, table=table) for i in range(count)]
    return {n: np.stack([r[n] for r in rows]) for n in graph.outputs}


@pytest.mark.parametrize("build", [mixed_graph, rules_graph])
def test_float_batches_equal_samples_one_by_one(build):
    graph = build()
    feeds = samples(graph, n=9, seed=2)
    got = run_batch(graph, feeds)
    want = per_sample(graph, feeds)
    for name in graph.outputs:
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name]), name


@pytest.mark.parametrize("build", [mixed_graph, rules_graph])
def test_int8_batches_equal_samples_one_by_one(build):
    graph = build()
    q = quantize(graph, DEFAULTS, samples(graph, n=16))
    rng = np.random.default_rng(3)
    feeds = {n: rng.integers(-128, 128, (7, *q.tensors[n].shape)).astype(np.int8) for n in q.inputs}
    got = run_batch(q, feeds, table=INT8_IMPLS)
    want = per_sample(q, feeds, table=INT8_IMPLS)
    for name in q.outputs:
        assert np.array_equal(got[name], want[name]), name


def test_visit_sees_every_value_with_its_sample_axis():
    graph = mixed_graph()
    feeds = samples(graph, n=5)
    seen = {}
    run_batch(graph, feeds, visit=lambda name, v: seen.setdefault(name, v.shape))
    assert seen == {n: (5, *t.shape) for n, t in graph.tensors.items() if t.data is None}
