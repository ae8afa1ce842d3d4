"""The one verifier: the invariants every graph between stages satisfies."""
from __future__ import annotations

from kiln.errors import KilnError, node_context
from kiln.ir.graph import DTYPES, Graph
from kiln.ir.ops import OPS, OpError


class VerifyError(KilnError):
    """A graph that breaks an IR invariant: a compiler bug or a malformed input file."""


def verify(graph: Graph, levels: tuple[str, ...] = ("source", "kernel")) -> None:
    """Raise VerifyError on the first broken invariant.

    Checks: tensor metadata (dtype, constant data shape, quant params on
    int8 tensors), single definition before use, known ops at an allowed
    level, legal input dtype, and shapes/dtypes equal to what the op infers.
    A lowered op split into several calls (nodes with a `part` attribute, e.g.
    one copy per concat input) writes its output from each part; the op's
    inference then applies to the op as a whole, so parts skip it.
    """
    problems = []
    for t in graph.tensors.values():
        if t.dtype not in DTYPES:
            problems.append(f"tensor {t.name!r}: unknown dtype {t.dtype!r}")
        if t.data is not None and t.data.shape != t.shape:
            problems.append(f"tensor {t.name!r}: data shape {t.data.shape} != {t.shape}")
        if t.dtype == "int8" and t.quant is None:
            problems.append(f"tensor {t.name!r}: int8 without quantization parameters")
        if t.quant is not None:
            q = t.quant
            want = 1 if q.axis is None else (t.shape[q.axis] if 0 <= q.axis < len(t.shape) else -1)
            if want < 0 or len(q.scale) != want or len(q.zero_point) != want:
                problems.append(f"tensor {t.name!r}: {len(q.scale)} scales/{len(q.zero_point)} zero points for axis {q.axis} of shape {t.shape}")
            elif any(not s > 0 for s in q.scale):
                problems.append(f"tensor {t.name!r}: non-positive quantization scale")
    if problems:
        raise VerifyError(f"graph {graph.name!r}: " + "; ".join(problems))

    defined = {k for k, t in graph.tensors.items() if t.is_constant}
    for name in graph.inputs:
        if name not in graph.tensors:
            raise VerifyError(f"graph {graph.name!r}: input {name!r} has no tensor")
        if name in defined:
            raise VerifyError(f"graph {graph.name!r}: input {name!r} is also a constant")
        defined.add(name)
    names = set()
    for index, node in enumerate(graph.nodes):
        where = node_context(index, node.name, node.op, node.source, node.source_name)
        if node.name in names:
            raise VerifyError(f"{where}: duplicate node name")
        names.add(node.name)
        opdef = OPS.get(node.op)
        if opdef is None or opdef.level not in levels:
            raise VerifyError(f"{where}: op not allowed here (levels {', '.join(levels)})")
        for i in node.inputs:
            if i and i not in defined:
                raise VerifyError(f"{where}: input {i!r} used before it is defined")
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        if "part" in node.attrs:
            _check_part(graph, node, where, defined)
            continue
        if ins and ins[0] is not None and ins[0].dtype not in opdef.dtypes:
            raise VerifyError(f"{where}: input dtype {ins[0].dtype} not legal (expects {', '.join(sorted(opdef.dtypes))})")
        try:
            inferred = opdef.infer(node, ins)
        except (OpError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise VerifyError(f"{where}: {exc}") from None
        if len(inferred) != len(node.outputs):
            raise VerifyError(f"{where}: {len(node.outputs)} outputs, op defines {len(inferred)}")
        for out, (shape, dtype) in zip(node.outputs, inferred):
            t = graph.tensors.get(out)
            if t is None:
                raise VerifyError(f"{where}: output {out!r} has no tensor")
            if out in defined:
                raise VerifyError(f"{where}: output {out!r} is defined twice")
            if t.shape != tuple(shape) or t.dtype != dtype:
                raise VerifyError(f"{where}: output {out!r} is {t.dtype}{list(t.shape)}, op gives {dtype}{list(shape)}")
            defined.add(out)
    for name in graph.outputs:
        if name not in defined:
            raise VerifyError(f"graph {graph.name!r}: output {name!r} is never defined")


def _check_part(graph: Graph, node, where: str, defined: set[str]) -> None:
    for out in node.outputs:
        if out not in graph.tensors:
            raise VerifyError(f"{where}: output {out!r} has no tensor")
        writers = [n for n in graph.nodes if out in n.outputs]
        if any("part" not in w.attrs for w in writers):
            raise VerifyError(f"{where}: output {out!r} is written by a part and by a whole op")
        defined.add(out)
