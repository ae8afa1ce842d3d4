"""An index of who produces and who reads every tensor, kept up to date while a graph is edited.

Rewrites that look up a tensor's producer or readers after every edit would
rebuild these maps each time, or scan the node list, and so take time
quadratic in the graph; `Uses` is updated node by node instead (`drop` a node
before changing or removing it, `add` it after), so each lookup and edit
costs time in what it touches.
"""
from __future__ import annotations

from typing import Iterable

from kiln.ir.graph import Node


class Uses:
    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.producers: dict[str, Node] = {}  # the last node added that writes a tensor
        self._readers: dict[str, dict[int, tuple[Node, int]]] = {}  # tensor -> id(node) -> (node, inputs reading it)
        for node in nodes:
            self.add(node)

    def add(self, node: Node) -> None:
        for o in node.outputs:
            if o:
                self.producers[o] = node
        for i in node.inputs:
            if i:
                readers = self._readers.setdefault(i, {})
                readers[id(node)] = (node, readers.get(id(node), (node, 0))[1] + 1)

    def drop(self, node: Node) -> None:
        for o in node.outputs:
            if o and self.producers.get(o) is node:
                del self.producers[o]
        for i in node.inputs:
            if i:
                readers = self._readers[i]
                times = readers[id(node)][1] - 1
                if times:
                    readers[id(node)] = (node, times)
                else:
                    del readers[id(node)]

    def readers(self, name: str) -> list[Node]:
        """The nodes reading tensor `name`, each once."""
        return [node for node, _ in self._readers.get(name, {}).values()]

    def reads(self, name: str) -> list[Node]:
        """The nodes reading tensor `name`, one entry per input that reads it."""
        return [node for node, times in self._readers.get(name, {}).values() for _ in range(times)]

    def only_reader(self, name: str, node: Node) -> bool:
        """Whether `node` reads tensor `name` through one input and no other node reads it."""
        readers = self._readers.get(name, {})
        return len(readers) == 1 and readers.get(id(node), (None, 0))[1] == 1
