"""The pass manager: ordered passes run to a fixed point, with checking, logging and dumps.

Fixed-point policy: passes run in their listed order, one full round after
another, until a whole round changes nothing. A pass that changes the graph
does not restart the round: later passes see its result in the same round,
and earlier ones in the next. After `max_rounds` rounds that still change
the graph the manager stops with an error naming the passes that changed it
in the last round, which is how a pair of passes undoing each other's work
shows up (instead of a hang).

After every pass that changed the graph, nodes are put in the canonical order
(`canonicalize`), so the result does not depend on the order in which the
source listed its nodes.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kiln.errors import KilnError
from kiln.ir.graph import Graph, Node
from kiln.ir.serialize import save
from kiln.ir.verify import VerifyError, verify

MAX_ROUNDS = 16


@dataclass(frozen=True)
class Pass:
    """A named rewrite: `run(graph) -> (graph, changed)`, never editing its input."""

    name: str
    run: Callable[[Graph], tuple[Graph, bool]]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def canonicalize(graph: Graph) -> Graph:
    """The same graph with nodes in a canonical topological order and tensors sorted by name.

    The order is a depth-first post-order from the graph outputs (in output
    order), visiting each node's inputs in input order; nodes that reach no
    output follow, seeded by name. It depends only on the graph's structure
    and names, not on how its node list was ordered.
    """
    producer = graph.producers()
    by_name = sorted(graph.nodes, key=lambda n: n.name)
    done: set[str] = set()
    order: list[Node] = []
    roots = [producer[o] for o in graph.outputs if o in producer] + by_name
    for root in roots:
        if root.name in done:
            continue
        stack = [(root, iter(root.inputs))]
        active = {root.name}
        while stack:
            node, pending = stack[-1]
            for name in pending:
                p = producer.get(name)
                if p is not None and p.name not in done and p.name not in active:
                    stack.append((p, iter(p.inputs)))
                    active.add(p.name)
                    break
            else:
                stack.pop()
                done.add(node.name)
                order.append(node)
    return Graph(graph.name, {k: graph.tensors[k] for k in sorted(graph.tensors)}, order, list(graph.inputs), list(graph.outputs), dict(graph.meta))


def run_passes(
    graph: Graph,
    passes: list[Pass],
    *,
    max_rounds: int = MAX_ROUNDS,
    check: bool | None = None,
    log: bool | None = None,
    dump_dir: str | os.PathLike | None = None,
) -> Graph:
    """Run `passes` to a fixed point (see the module docstring).

    `check` runs the verifier after every pass (default: env `KILN_VERIFY=1`),
    `log` writes one line per pass to stderr (default: env `KILN_LOG=1`),
    `dump_dir` saves the graph after every pass as `rRR_PP_<pass>.kir`
    (default: env `KILN_DUMP_DIR`).
    """
    check = env_flag("KILN_VERIFY") if check is None else check
    log = env_flag("KILN_LOG") if log is None else log
    if dump_dir is None:
        dump_dir = os.environ.get("KILN_DUMP_DIR") or None
    changing: list[str] = []
    for round_no in range(1, max_rounds + 1):
        changing = []
        for index, p in enumerate(passes, 1):
            start = time.perf_counter()
            result, changed = p.run(graph)
            if changed:
                result = canonicalize(result)
                changing.append(p.name)
            if log:
                ms = (time.perf_counter() - start) * 1e3
                print(f"kiln: normalize round {round_no} pass {p.name}: {ms:.2f} ms, {'changed' if changed else 'unchanged'}", file=sys.stderr)
            if check:
                try:
                    verify(result)
                except VerifyError as exc:
                    raise VerifyError(f"after pass {p.name} (round {round_no}): {exc}") from None
            if dump_dir is not None:
                save(result, Path(dump_dir) / f"r{round_no:02d}_{index:02d}_{p.name}.kir")
            graph = result
        if not changing:
            return graph
    raise KilnError(f"normalize: no fixed point after {max_rounds} rounds; passes still changing the graph (a rewrite cycle?): {', '.join(changing)}")
