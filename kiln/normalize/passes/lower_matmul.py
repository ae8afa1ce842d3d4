"""MatMul / Gemm with a constant weight become `fully_connected` with [out, in] weights; a MatMul of two
activations (attention's Q.K^T, P.V) becomes `batch_matmul`.

Transposes of the weight and alpha are folded at compile time (a QDQ weight
keeps its integers: alpha > 0 scales its scales); beta * C becomes the bias
when it is one value per output, else an `add` after. transA becomes a
`transpose` of the input. MatMul inputs of rank != 2 are reshaped to
[rows, K] and the result back, since `fully_connected` is 2-D. A product of
activations needs operands of one rank >= 2 with the same batch dims.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node, QuantParams
from kiln.normalize.rewrite import Rewriter, no_act, reshape_quant, transpose_quant


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for node in rw.walk():
        w = rw.tensor(node.inputs[1]) if node.op in ("Gemm", "MatMul") else None
        if w is None or rw.tensor(node.inputs[0]).dtype != "float32":
            continue
        if w.data is None:
            if node.op == "MatMul" and _same_batch(rw.tensor(node.inputs[0]).shape, w.shape) and rw.const(node.inputs[0]) is None:
                rw.replace(node, [node.copy(op="batch_matmul", attrs=no_act())])
            continue
        nodes = _gemm(rw, node) if node.op == "Gemm" else _matmul(rw, node)
        if nodes is not None:
            rw.replace(node, nodes)
    return rw.finish()


def _same_batch(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) >= 2 and a[:-2] == b[:-2]


def _scaled(q: QuantParams | None, factor: float) -> QuantParams | None:
    return q if q is None or factor == 1.0 else QuantParams(tuple(s * factor for s in q.scale), q.zero_point, q.axis)


def _weight(rw: Rewriter, name: str, data: np.ndarray, q: QuantParams | None, factor: float) -> str | None:
    if q is not None and factor <= 0:
        return None
    scaled = data if factor == 1.0 else (factor * data.astype(np.float64)).astype(np.float32)  # x 1.0 is exact: no copy
    return rw.constant(f"{name}/fc", scaled, quant=_scaled(q, factor))


def _gemm(rw: Rewriter, node: Node) -> list[Node] | None:
    a = node.attrs
    b, y = rw.tensor(node.inputs[1]), rw.tensor(node.outputs[0])
    perm = [0, 1] if a.get("transB", 0) else [1, 0]
    w = _weight(rw, b.name, np.transpose(b.data, perm), transpose_quant(b.quant, perm), float(a.get("alpha", 1.0)))
    c = rw.tensor(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    beta, out = float(a.get("beta", 1.0)), y.shape[1]
    if w is None or (c is not None and c.data is None and beta != 1.0):
        return None
    nodes, x = [], node.inputs[0]
    if a.get("transA", 0):
        xt = rw.tensor(x)
        x = rw.tensor_like(f"{x}/transposed", xt.shape[::-1], xt.dtype, transpose_quant(xt.quant, [1, 0]))
        nodes.append(rw.node(f"{node.name}/transpose_a", "transpose", [xt.name], [x], {"perm": [1, 0]}, node))
    inputs, after = [x, w], None
    if c is not None and c.shape == (out,) and c.data is not None and beta == 1.0:
        inputs.append(c.name)
    elif c is not None and c.data is not None and (c.size == 1 or (c.size == out and c.shape[-1:] == (out,))):
        bias = np.broadcast_to(beta * c.data.astype(np.float64).reshape(-1), (out,))
        q = reshape_quant(_scaled(c.quant, beta), c.shape, (c.size,)) if c.size == out else _scaled(c.quant, beta)
        inputs.append(rw.constant(f"{c.name}/bias", bias.astype(np.float32), quant=q))
    elif c is not None:
        after = c.name if c.data is None else rw.constant(f"{c.name}/scaled", (beta * c.data.astype(np.float64)).astype(np.float32), quant=_scaled(c.quant, beta))
    fc_out = y.name if after is None else rw.tensor_like(f"{y.name}/product", y.shape, y.dtype)
    nodes.append(node.copy(op="fully_connected", inputs=inputs, outputs=[fc_out], attrs=no_act()))
    if after is not None:
        nodes.append(rw.node(f"{node.name}/add_c", "add", [fc_out, after], [y.name], no_act(), node))
    return nodes


def _matmul(rw: Rewriter, node: Node) -> list[Node] | None:
    a, b, y = (rw.tensor(n) for n in (*node.inputs, node.outputs[0]))
    if len(b.shape) > 2 and any(d != 1 for d in b.shape[:-2]):
        return None
    shape2d = (b.shape[-2], b.shape[-1]) if len(b.shape) >= 2 else (b.shape[0], 1)
    q = transpose_quant(reshape_quant(b.quant, b.shape, shape2d), [1, 0])
    w = _weight(rw, b.name, b.data.reshape(shape2d).T, q, 1.0)
    rows = int(np.prod(a.shape[:-1]))
    nodes, x = [], a.name
    if a.shape != (rows, shape2d[0]):
        x = rw.tensor_like(f"{a.name}/rows", (rows, shape2d[0]), a.dtype, reshape_quant(a.quant, a.shape, (rows, shape2d[0])))
        nodes.append(rw.node(f"{node.name}/flatten", "reshape", [a.name], [x], {"shape": [rows, shape2d[0]]}, node))
    out2d = (rows, shape2d[1])
    fc_out = y.name if y.shape == out2d else rw.tensor_like(f"{y.name}/rows", out2d, y.dtype, reshape_quant(y.quant, y.shape, out2d))
    nodes.append(node.copy(op="fully_connected", inputs=[x, w], outputs=[fc_out], attrs=no_act()))
    if fc_out != y.name:
        nodes.append(rw.node(f"{node.name}/unflatten", "reshape", [fc_out], [y.name], {"shape": list(y.shape)}, node))
    return nodes
