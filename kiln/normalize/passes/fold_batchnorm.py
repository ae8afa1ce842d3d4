"""BatchNorm folding: into the preceding Conv / Gemm / 2-D MatMul / fully_connected, else a scale and shift.

BN(y) = (y - mean) * s + bias with s = scale / sqrt(var + eps), so a producer
that is linear per output channel absorbs it: weights scale by s, the bias
becomes (b - mean) * s + bias. The producer must feed only the BN and hold
constant weights without QDQ parameters (rescaling a weight the source
quantized would invent new integers). Any other BN becomes a per-channel
scale and shift: a 1x1 depthwise Conv on N-C-spatial inputs, Mul + Add on
N-C inputs.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.graph import Graph, Node
from kiln.normalize.rewrite import INF, Rewriter, act_range


def run(graph: Graph) -> tuple[Graph, bool]:
    rw = Rewriter(graph)
    for bn in rw.walk():
        if bn.op != "BatchNormalization" or len(bn.outputs) != 1 or any(rw.const(i) is None for i in bn.inputs[1:5]):
            continue
        scale, bias, mean, var = (rw.const(i).astype(np.float64) for i in bn.inputs[1:5])
        s = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        producer = rw.producer(bn.inputs[0])
        if producer is not None and rw.only_user(bn.inputs[0], bn) and _fold(rw, producer, bn, s, bias - mean * s):
            continue
        _standalone(rw, bn, s, bias - mean * s)
    return rw.finish()


def _fold(rw: Rewriter, p: Node, bn: Node, s: np.ndarray, shift: np.ndarray) -> bool:
    weights = [i for i in p.inputs[1:3] if i]
    if not weights or any(rw.const(i) is None or rw.tensor(i).quant is not None for i in weights):
        return False
    w = rw.const(p.inputs[1]).astype(np.float64)
    b = rw.const(p.inputs[2]).astype(np.float64) if len(p.inputs) > 2 and p.inputs[2] else np.zeros(len(s))
    attrs = dict(p.attrs)
    if p.op == "Conv" or (p.op == "fully_connected" and act_range(p) == (-INF, INF)):
        w = w * s.reshape((-1,) + (1,) * (w.ndim - 1))
    elif p.op == "Gemm":
        w = w * (s[:, None] if p.attrs.get("transB", 0) else s[None, :])
        b, attrs["beta"] = p.attrs.get("beta", 1.0) * b, 1.0
    elif p.op == "MatMul" and w.ndim == 2 and len(rw.tensor(p.inputs[0]).shape) == 2:
        w, attrs, p = w * s[None, :], {}, p.copy(op="Gemm")
    else:
        return False
    wname = rw.constant(f"{bn.name}/weight", w.astype(np.float32))
    bname = rw.constant(f"{bn.name}/bias", (b * s + shift).astype(np.float32))
    rw.remove(rw.producer(bn.inputs[0]))
    rw.replace(bn, [p.copy(inputs=[p.inputs[0], wname, bname], outputs=list(bn.outputs), attrs=attrs)])
    return True


def _standalone(rw: Rewriter, bn: Node, s: np.ndarray, shift: np.ndarray) -> None:
    x = rw.tensor(bn.inputs[0])
    c = len(s)
    if len(x.shape) >= 3:
        w = rw.constant(f"{bn.name}/scale", s.reshape((c, 1) + (1,) * (len(x.shape) - 2)).astype(np.float32))
        b = rw.constant(f"{bn.name}/shift", shift.astype(np.float32))
        rw.replace(bn, [bn.copy(op="Conv", inputs=[x.name, w, b], attrs={"group": c})])
        return
    w = rw.constant(f"{bn.name}/scale", s.astype(np.float32))
    b = rw.constant(f"{bn.name}/shift", shift.astype(np.float32))
    mid = rw.tensor_like(f"{bn.outputs[0]}/scaled", x.shape, x.dtype)
    mul = bn.copy(op="Mul", inputs=[x.name, w], outputs=[mid], attrs={})
    add = rw.node(bn.name + "/shift", "Add", [mid, b], list(bn.outputs), {}, bn)
    rw.replace(bn, [mul, add])
