"""The ONNX frontend: an .onnx file (float or QDQ) into a source-level Kiln graph.

Tensor names are the ONNX names; node names are the ONNX names, or
`<OpType>_<index>` for unnamed nodes. Shapes are static: free input
dimensions come from the model.toml `inputs` table. QDQ pairs become
quantization parameters on float tensors (see `qdq`), and such graphs carry
`meta["quantized_source"] = "qdq"`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from kiln.errors import KilnError
from kiln.frontends.imported import Imported
from kiln.frontends.onnx import qdq  # noqa: F401  (registers the Q/DQ handlers)
from kiln.frontends.onnx.context import Converter, Unsupported
from kiln.frontends.onnx.convert import convert_nodes, named_nodes, static_problems
from kiln.frontends.onnx.load import bind_inputs, default_opset, onnx_shapes, read_model
from kiln.ir.graph import Graph, Node, Tensor
from kiln.ir.verify import verify


def import_onnx(source: Path, name: str, inputs: dict[str, Any]) -> Imported:
    """Import `source` as graph `name`; `inputs` is the model.toml `inputs` table."""
    model = read_model(source)
    opset = default_opset(model, source)
    bound = bind_inputs(model, inputs, source)
    g = model.graph
    nodes = named_nodes(g)
    constants = {t.name for t in g.initializer}
    problems = static_problems(nodes, constants, opset)
    shapes = onnx_shapes(model, source, quiet=bool(problems))
    reserved = constants | {vi.name for vi in g.input} | {o for n in g.node for o in n.output} | {n.name for n in nodes}
    cx = Converter(Graph(name), opset, reserved)
    for t in g.initializer:
        cx.values[t.name] = onnx.numpy_helper.to_array(t)
    for input_name, shape, dtype in bound:
        cx.graph.add_tensor(Tensor(input_name, shape, dtype))
        cx.graph.inputs.append(input_name)
    problems += convert_nodes(cx, nodes, {index for index, _ in problems}, shapes)
    if problems:
        lines = [line for _, line in sorted(problems)]
        raise KilnError(f"{source}: {len(lines)} operator(s) cannot be imported:\n" + "\n".join(lines))
    _set_outputs(cx, [o.name for o in g.output], source)
    verify(cx.graph, levels=("source",))
    return Imported(cx.graph)


def _set_outputs(cx: Converter, names: list[str], source: Path) -> None:
    """Graph outputs keep their ONNX names, also when a folded Q/DQ pair made them aliases."""
    graph = cx.graph
    for out in names:
        key = cx.resolve(out)
        if key not in graph.tensors:
            try:
                graph.add_tensor(cx.tensor(out).copy(name=key))
            except Unsupported as exc:
                raise KilnError(f"{source}: graph output {out!r}: {exc}") from None
        if key != out:
            if key in graph.inputs or key in names or key in graph.outputs:
                t = graph.tensors[key]
                graph.add_tensor(Tensor(out, t.shape, t.dtype, quant=t.quant))
                graph.nodes.append(Node(cx.fresh(f"{out}/identity"), "Identity", [key], [out]))
            else:
                _rename(graph, key, out)
        graph.outputs.append(out)


def _rename(graph: Graph, old: str, new: str) -> None:
    graph.tensors[new] = graph.tensors.pop(old).copy(name=new)
    for n in graph.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
        n.outputs = [new if o == old else o for o in n.outputs]
