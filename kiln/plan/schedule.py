"""Candidate schedules: other valid topological orders of the same nodes.

The given order, a greedy order that runs whichever ready node frees the most
bytes, and depth-first orders that finish one branch before starting the
next (producers visited in input order, and in reverse). Every order keeps
the writers of a multi-writer tensor (concat parts) in their given order, so
the first part still starts the tensor's life. Ties always go to the lower
node index, so the orders are deterministic.
"""
from __future__ import annotations

from kiln.ir.graph import Graph


def dependencies(g: Graph) -> list[list[int]]:
    """For each node index, the indices of the nodes that must run before it."""
    writers = _writers(g)
    deps: list[list[int]] = []
    for i, n in enumerate(g.nodes):
        before = {w for t in n.inputs if t for w in writers.get(t, [])}
        before |= {w for o in n.outputs for w in writers[o] if w < i}
        deps.append(sorted(before))
    return deps


def candidate_orders(g: Graph) -> list[tuple[str, list[int]]]:
    """Named candidate orders (lists of node indices), duplicates removed, the given order first."""
    deps = dependencies(g)
    found: list[tuple[str, list[int]]] = []
    for name, order in (("given", list(range(len(g.nodes)))), ("greedy", _greedy(g, deps)),
                        ("depth_first", _depth_first(g, deps, reverse=False)),
                        ("depth_first_reversed", _depth_first(g, deps, reverse=True))):
        if all(order != o for _, o in found):
            found.append((name, order))
    return found


def _alias_root(g: Graph) -> dict[str, str]:
    root: dict[str, str] = {}
    for n in g.nodes:
        if n.attrs.get("kernel") == "" and n.inputs and not g.tensors[n.inputs[0]].is_constant:
            root[n.outputs[0]] = root.get(n.inputs[0], n.inputs[0])
    return root


def _greedy(g: Graph, deps: list[list[int]]) -> list[int]:
    """Among ready nodes, run the one with the smallest (bytes allocated - bytes freed)."""
    root = _alias_root(g)
    readers: dict[str, set[int]] = {}
    for i, n in enumerate(g.nodes):
        for t in n.inputs:
            if t and not g.tensors[t].is_constant:
                readers.setdefault(root.get(t, t), set()).add(i)
    pinned = {root.get(t, t) for t in g.outputs}
    allocated: set[str] = {root.get(t, t) for t in g.inputs}
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in g.nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    while ready:
        best = min(ready, key=lambda i: (_net_bytes(g, i, root, readers, pinned, allocated), i))
        ready.remove(best)
        order.append(best)
        for o in g.nodes[best].outputs:
            allocated.add(root.get(o, o))
        for t in g.nodes[best].inputs:  # `best` reads only these buffers
            if root.get(t, t) in readers:
                readers[root.get(t, t)].discard(best)
        for u in users[best]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return order


def _net_bytes(g: Graph, i: int, root: dict[str, str], readers: dict[str, set[int]], pinned: set[str],
               allocated: set[str]) -> int:
    node = g.nodes[i]
    grows = sum(g.tensors[o].nbytes for o in node.outputs if root.get(o, o) not in allocated)
    frees = sum(g.tensors[b].nbytes for b in {root.get(t, t) for t in node.inputs if t and not g.tensors[t].is_constant}
                if readers.get(b) == {i} and b not in pinned)
    return grows - frees


def _depth_first(g: Graph, deps: list[list[int]], reverse: bool) -> list[int]:
    """Post-order from the graph outputs: each producer subtree is finished before the next one starts."""
    writers = _writers(g)
    done: set[int] = set()
    order: list[int] = []
    for start in [w for t in g.outputs for w in writers.get(t, [])] + list(range(len(g.nodes))):
        stack: list[tuple[int, list[int]]] = [(start, _producers(g, start, deps, writers, reverse))]
        while stack:
            node, pending = stack[-1]
            nxt = next((d for d in pending if d not in done), None)
            if node in done:
                stack.pop()
            elif nxt is None:
                stack.pop()
                done.add(node)
                order.append(node)
            else:
                pending.remove(nxt)
                stack.append((nxt, _producers(g, nxt, deps, writers, reverse)))
    return order


def _writers(g: Graph) -> dict[str, list[int]]:
    writers: dict[str, list[int]] = {}
    for i, n in enumerate(g.nodes):
        for o in n.outputs:
            writers.setdefault(o, []).append(i)
    return writers


def _producers(g: Graph, i: int, deps: list[list[int]], writers: dict[str, list[int]], reverse: bool) -> list[int]:
    """The dependencies of node `i`: earlier writers of its outputs first, then producers by input position."""
    by_input = [w for t in g.nodes[i].inputs if t for w in writers.get(t, [])]
    by_input = list(dict.fromkeys(reversed(by_input) if reverse else by_input))
    return [d for d in deps[i] if d not in by_input] + by_input

