"""cancel_transposes: consecutive transposes compose; transposes of size-1 dims become reshapes."""
from graphs import Builder, assert_same_values, ops, run_pass, unchanged
from kiln.normalize.passes import cancel_transposes


def test_pairs_compose_and_unit_transposes_become_reshapes() -> None:
    b = Builder()
    x = b.input("x", (2, 3, 4, 5))
    back = b.op("transpose", [b.op("transpose", [x], {"perm": [0, 2, 3, 1]})], {"perm": [0, 3, 1, 2]})
    rotate = b.op("transpose", [b.op("transpose", [x], {"perm": [1, 0, 2, 3]})], {"perm": [0, 2, 1, 3]})
    unit = b.op("transpose", [b.input("p", (2, 1, 1, 4))], {"perm": [0, 3, 1, 2]})
    g = b.output(back, rotate, unit)
    out, changed = run_pass(cancel_transposes, g)
    assert changed and ops(out) == ["transpose", "transpose", "reshape"]
    assert [n.attrs for n in out.nodes] == [{"perm": [0, 1, 2, 3]}, {"perm": [1, 2, 0, 3]}, {"shape": [2, 4, 1, 1]}]
    assert all(n.inputs[0] in ("x", "p") for n in out.nodes)
    assert_same_values(g, out)


def test_leaves_a_single_real_transpose_alone() -> None:
    b = Builder()
    unchanged(cancel_transposes, b.output(b.op("transpose", [b.input("x", (2, 3, 4))], {"perm": [0, 2, 1]})))
