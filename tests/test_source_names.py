"""Layers keep the source model's names from import to the generated C.

A PyTorch model's nodes are named by the modules that ran them (torch.export's
`nn_module_stack`), an ONNX model's by its node names (`<OpType>_<index>` for an
unnamed one); every stage keeps the name, and a node fused into another takes the
main layer's. `kiln inspect`, `kiln report`, error messages, the build report and
the generated C's per-layer names (what the layer hook gets) show it. (TFLite's: the
converter's files in tests/test_tflite_converter.py.)
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_models import make_model
from kiln.ir import load
from kiln.names import c_text

MODEL_PY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv2(self.relu(self.bn1(self.conv1(x)))) + x)  # one ReLU module, called twice


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), Block(8))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def model():
    torch.manual_seed(0)
    return Net().eval()


def example_inputs():
    return (torch.randn(1, 3, 8, 8),)


def calibration_data():
    return torch.randn(8, 1, 3, 8, 8)
'''


def kiln(*args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kiln", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert not ok or proc.returncode == 0, proc.stderr
    return proc


def kernel_layers(out: Path) -> list[tuple[str, str]]:
    """(op, source name) of each planned node that runs code, in schedule order."""
    return [(n.op, n.source_name) for n in load(out / "planned.kir").nodes if n.attrs.get("kernel")]


def test_pytorch_layers_are_named_by_their_modules_through_every_stage(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "model.py").write_text(MODEL_PY)
    out = tmp_path / "root" / "net"
    kiln("compile", "net/model.py", "-o", str(out), cwd=tmp_path)
    imported = load(out / "imported.kir")
    by_op = [(n.op, n.source_name) for n in imported.nodes]
    # The second call of the block's ReLU module is its own layer, `@1`; an op of Net.forward itself has its FX name.
    assert ("Relu", "features.3.relu") in by_op and ("Relu", "features.3.relu@1") in by_op
    assert ("BatchNormalization", "features.1") in by_op and ("Add", "features.3") in by_op
    assert [s for op, s in by_op if op == "ReduceMean"] == ["mean"]
    # Batch norms and ReLUs fold into their convs, the residual add into the conv before it: each fused node
    # keeps its conv's name, and the rest keep theirs.
    assert kernel_layers(out) == [("transpose", "features.0"), ("conv2d", "features.0"), ("conv2d", "features.3.conv1"),
                                  ("conv2d", "features.3.conv2"), ("global_avg_pool", "mean"), ("fully_connected", "head")]
    for level in ("normalized", "quantized", "lowered"):
        names = {n.source_name for n in load(out / f"{level}.kir").nodes}
        assert names <= {s for _, s in by_op}, level  # no stage makes a name up

    # The generated C names each layer so: the hook's name and the comment over each call.
    c = (out / "net.c").read_text()
    for op, name in kernel_layers(out):
        assert f'"{c_text(f"{name} ({op})")}"' in c
    assert "/* 3: features.3.conv2 (conv2d) */" in c

    printed = kiln("inspect", str(out / "planned.kir"), cwd=tmp_path).stdout
    assert re.search(r"\] convolution_2 \(layer 'features.3.conv2'\) conv2d ", printed), printed
    described = json.loads(kiln("inspect", "--json", str(out / "planned.kir"), cwd=tmp_path).stdout)
    assert [n["source_name"] for n in described["nodes"]] == [n.source_name for n in load(out / "planned.kir").nodes]

    kiln("build-report", "root", "-o", "page.html", cwd=tmp_path)
    page = (tmp_path / "page.html").read_text()
    accuracy = kiln("report", str(out), cwd=tmp_path).stdout  # each compared tensor with the layer that writes it
    assert re.search(r"^\S+ +features.3.conv2 +conv2d ", accuracy, re.M) and re.search(r"^\S+ +head +fully_connected ", accuracy, re.M)
    cells = re.findall(r'<td class="layer-name">([^<]*)</td><td class="node-name">([^<]*)</td>', page)
    assert cells == [(n.source_name, n.name) for n in load(out / "planned.kir").nodes]
    assert '<text class="step-name" x=' in page and ">features.3.conv2 (conv2d)</text>" in page


def test_errors_name_the_layer(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "model.py").write_text(textwrap.dedent('''
        import torch
        from torch import nn


        class Gate(nn.Module):
            def forward(self, x):
                return x / (torch.sigmoid(x) + 1.0)


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem, self.gate = nn.Conv2d(3, 4, 3), Gate()

            def forward(self, x):
                return self.gate(self.stem(x))


        def model():
            return Net().eval()


        def example_inputs():
            return (torch.randn(1, 3, 8, 8),)


        def calibration_data():
            return torch.randn(4, 1, 3, 8, 8)
    '''))
    proc = kiln("compile", "net/model.py", "-o", "out", cwd=tmp_path, ok=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert re.search(r"node \d+ 'div' \(div\) in layer 'gate' at model.py: return x / \(torch.sigmoid\(x\) \+ 1.0\): no int8 kernel",
                     proc.stderr), proc.stderr


def onnx_net() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="/features/features.0/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="/features/features.1/Relu"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[0, 0, 0, 0]),  # no name: Conv_2
             helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="pool */ \"x\"")]
    consts = {"w1": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b1": np.zeros(4, np.float32),
              "w2": rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "b2": np.zeros(4, np.float32)}
    return make_model(nodes, {"x": ([1, 3, 6, 6], TensorProto.FLOAT)}, consts, ["y"], 17)


def test_onnx_layers_keep_their_node_names_and_are_deterministic(tmp_path):
    onnx.save(onnx_net(), tmp_path / "net.onnx")
    np.save(tmp_path / "c.npy", np.random.default_rng(1).standard_normal((8, 1, 3, 6, 6)).astype(np.float32))
    for out in ("a", "b"):
        kiln("compile", "net.onnx", "--calibration", "c.npy", "-o", out, cwd=tmp_path)
    assert kernel_layers(tmp_path / "a") == [("transpose", "/features/features.0/Conv"), ("conv2d", "/features/features.0/Conv"),
                                             ("conv2d", "Conv_2"), ("global_avg_pool", 'pool */ "x"')]
    for artifact in ("planned.kir", "net.c", "net.h"):  # the same source, the same bytes
        assert (tmp_path / "a" / artifact).read_bytes() == (tmp_path / "b" / artifact).read_bytes()
    c = (tmp_path / "a" / "net.c").read_text()
    assert '"/features/features.0/Conv (conv2d)"' in c and '"pool _/ _x_ (global_avg_pool)"' in c  # nothing escapes
