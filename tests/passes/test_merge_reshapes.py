"""merge_reshapes: a chain of reshapes is one reshape."""
from graphs import Builder, assert_same_values, run_pass, unchanged
from kiln.normalize.passes import merge_reshapes


def test_chain_merges_into_one() -> None:
    b = Builder()
    x = b.op("reshape", [b.input("x", (2, 3, 4))], {"shape": [6, 4]})
    x = b.op("reshape", [x], {"shape": [24]})
    g = b.output(b.op("reshape", [x], {"shape": [4, 6]}))
    out, changed = run_pass(merge_reshapes, g)
    assert changed and [(n.op, n.inputs, n.attrs) for n in out.nodes] == [("reshape", ["x"], {"shape": [4, 6]})]
    assert_same_values(g, out)


def test_leaves_a_reshape_of_something_else_alone() -> None:
    b = Builder()
    t = b.op("transpose", [b.input("x", (2, 3))], {"perm": [1, 0]})
    unchanged(merge_reshapes, b.output(b.op("reshape", [t], {"shape": [6]})))
