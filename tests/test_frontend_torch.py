"""The PyTorch frontends: model.py modules and .pt2 programs into source-level graphs.

Numerical checks run the float reference executor on the imported graph and
compare with PyTorch eager on seeded inputs, within rtol 1e-4, atol 1e-5
(the reference computes in float64, torch in float32).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from torch_models import CASES, Case
from kiln import ir
from kiln.errors import KilnError
from kiln.frontends import import_model
from kiln.frontends.torch_module import import_module, load_model_py
from kiln.samples import collect
from kiln.ir.verify import verify
from kiln.reference.executor import run

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"
RTOL, ATOL = 1e-4, 1e-5


def _inputs(shapes: tuple[tuple[int, ...], ...], seed: int = 1) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen) for s in shapes)


def _run(graph: ir.Graph, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    out = run(graph, {name: t.numpy() for name, t in zip(graph.inputs, inputs)})
    return [out[name] for name in graph.outputs]


def _eager(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*inputs)
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


def _write_model(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.py"
    path.write_text(textwrap.dedent(body))
    return path


# -- per op: reference executor == torch eager -----------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_matches_eager(case: Case) -> None:
    torch.manual_seed(0)
    module = case.build().eval()
    inputs = _inputs(case.shapes)
    graph = import_module(module, inputs, case.name)
    verify(graph, levels=("source",))
    ops = {n.op for n in graph.nodes}
    assert case.ops <= ops, f"expected {sorted(case.ops)} among {sorted(ops)}"
    for got, want in zip(_run(graph, inputs), _eager(module, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- the shipped example models ----------------------------------------------------------
@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_resnet"])
def test_example_model(model: str) -> None:
    path = MODELS / model / "model.py"
    imported = import_model(path, model, {})
    verify(imported.graph, levels=("source",))
    mod = load_model_py(path)
    inputs = _inputs(tuple(tuple(t.shape) for t in mod.example_inputs()))
    (got,), (want,) = _run(imported.graph, inputs), _eager(mod.model(), inputs)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    (calibration,) = imported.calibration.values()
    assert calibration.dtype == np.float32 and calibration.shape == (32,) + tuple(mod.example_inputs()[0].shape)
    assert len({c.tobytes() for c in calibration}) == 32  # distinct samples, not one repeated


def test_tiny_resnet_batch_norm_statistics_are_not_defaults() -> None:
    graph = import_model(MODELS / "tiny_resnet" / "model.py", "tiny_resnet", {}).graph
    for bn in (n for n in graph.nodes if n.op == "BatchNormalization"):
        mean, var = graph.constant(bn.inputs[3]), graph.constant(bn.inputs[4])
        assert np.abs(mean).max() > 0.05 and np.abs(var - 1).max() > 0.05


# -- one module, three routes: model.py, .pt2, ONNX -------------------------------------------
MIXED = """
import torch
import torch.nn.functional as F
from torch import nn


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.fc = nn.Linear(16, 5)

    def forward(self, image):
        x = F.hardswish(self.bn(self.conv(image)))
        a, b = torch.split(x, [4, 4], dim=1)
        x = torch.cat([F.relu6(a), torch.sigmoid(b) * b], dim=1)
        x = F.max_pool2d(F.pad(self.dw(x), (1, 1, 1, 1)), 2)
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.softmax(self.fc(torch.cat([x, x * 0.5], dim=1)), dim=-1)


def model():
    torch.manual_seed(0)
    net = Mixed()
    with torch.no_grad():
        net.bn.running_mean.copy_(torch.randn(8) * 0.2)
        net.bn.running_var.copy_(torch.rand(8) + 0.5)
    return net.eval()


def example_inputs():
    return (torch.zeros(1, 3, 12, 12),)
"""


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("mixed")
    path = _write_model(folder, MIXED)
    mod = load_model_py(path)
    module, examples = mod.model(), mod.example_inputs()
    with torch.no_grad():
        torch.export.save(torch.export.export(module, examples), folder / "mixed.pt2")
    return {"folder": folder, "module": module, "inputs": _inputs(tuple(tuple(t.shape) for t in examples))}


def test_model_py_and_pt2_routes_agree(routes: dict[str, object]) -> None:
    folder, inputs = routes["folder"], routes["inputs"]
    from_py = import_model(folder / "model.py", "mixed", {}).graph
    from_pt2 = import_model(folder / "mixed.pt2", "mixed", {}).graph
    (want,) = _eager(routes["module"], inputs)
    for graph in (from_py, from_pt2):
        verify(graph, levels=("source",))
        (got,) = _run(graph, inputs)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert [n.op for n in from_py.nodes] == [n.op for n in from_pt2.nodes]


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_onnx_route_agrees(routes: dict[str, object]) -> None:
    folder, inputs = routes["folder"], routes["inputs"]
    program = torch.onnx.export(routes["module"], inputs, dynamo=True, verbose=False)
    program.save(str(folder / "mixed.onnx"))
    from_onnx = import_model(folder / "mixed.onnx", "mixed", {}).graph
    from_py = import_model(folder / "model.py", "mixed", {}).graph
    verify(from_onnx, levels=("source",))
    (got,), (want,) = _run(from_onnx, inputs), _run(from_py, inputs)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- stable bytes ---------------------------------------------------------------------------
def test_comment_line_leaves_graph_bytes_identical(tmp_path: Path) -> None:
    path = tmp_path / "tiny_cnn" / "model.py"
    path.parent.mkdir()
    text = (MODELS / "tiny_cnn" / "model.py").read_text()
    path.write_text(text)
    before = ir.dumps(import_model(path, "tiny_cnn", {}).graph)
    path.write_text("# Copyright notice added at the top.\n\n" + text)
    after = ir.dumps(import_model(path, "tiny_cnn", {}).graph)
    assert before == after


def test_source_is_the_user_line_without_line_number() -> None:
    graph = import_model(MODELS / "tiny_cnn" / "model.py", "tiny_cnn", {}).graph
    sources = [(n.op, n.source) for n in graph.nodes]
    assert sources[0] == ("Conv", "model.py: x = self.pool(torch.relu(self.conv1(image)))")
    assert sources[3] == ("Conv", "model.py: x = torch.relu(self.conv2(x))")
    assert sources[-1] == ("Gemm", "model.py: return self.fc(x)")


def test_import_is_deterministic_across_runs_and_processes() -> None:
    path = MODELS / "tiny_resnet" / "model.py"
    first = ir.dumps(import_model(path, "tiny_resnet", {}).graph)
    assert first == ir.dumps(import_model(path, "tiny_resnet", {}).graph)
    code = (
        "import hashlib, sys; from pathlib import Path; from kiln import ir; "
        "from kiln.frontends import import_model; "
        "print(hashlib.sha256(ir.dumps(import_model(Path(sys.argv[1]), 'tiny_resnet', {}).graph)).hexdigest())"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert out.stdout.strip() == hashlib.sha256(first).hexdigest()


def test_names_are_stable_and_readable() -> None:
    graph = import_model(MODELS / "tiny_resnet" / "model.py", "tiny_resnet", {}).graph
    assert graph.inputs == ["image"]
    constants = sorted(k for k, t in graph.tensors.items() if t.is_constant and "." in k)
    assert "stem.0.weight" in constants and "block2.1.running_var" in constants and "fc.bias" in constants
    assert all(graph.tensors[k].dtype == "float32" for k in constants)


# -- the model.py contract ---------------------------------------------------------------------------
def test_sibling_files_load_and_nothing_leaks(tmp_path: Path) -> None:
    folder = tmp_path / "sib"
    folder.mkdir()
    (folder / "kiln_test_helpers.py").write_text("import torch\nSCALE = 3.0\n")
    np.save(folder / "weights.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    path = _write_model(folder, """
        from pathlib import Path
        import numpy as np
        import torch
        from kiln_test_helpers import SCALE

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(3, 2)
                with torch.no_grad():
                    self.fc.weight.copy_(torch.from_numpy(np.load(Path(__file__).parent / "weights.npy")))

            def forward(self, x):
                return self.fc(x) * SCALE

        def model():
            return Net().eval()

        def example_inputs():
            return (torch.zeros(1, 3),)
    """)
    path_before, modules_before = list(sys.path), set(sys.modules)
    graph = import_model(path, "sib", {}).graph
    assert sys.path == path_before
    assert "kiln_test_helpers" not in sys.modules
    assert not [m for m in set(sys.modules) - modules_before if "kiln_model" in m]
    np.testing.assert_array_equal(graph.constant("fc.weight"), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_forward_parameter_names_name_the_inputs(tmp_path: Path) -> None:
    path = _write_model(tmp_path / "two", """
        import torch

        class Net(torch.nn.Module):
            def forward(self, audio, gain):
                return audio * gain

        def model():
            return Net().eval()

        def example_inputs():
            return (torch.zeros(1, 8), torch.zeros(1, 1))

        def calibration_data():
            return [(torch.full((1, 8), float(i)), torch.ones(1, 1)) for i in range(4)]
    """)
    imported = import_model(path, "two", {"gain": {"shape": [1, 1], "dtype": "float32"}})
    assert imported.graph.inputs == ["audio", "gain"]
    assert imported.calibration["audio"].shape == (4, 1, 8) and imported.calibration["gain"].shape == (4, 1, 1)
    np.testing.assert_array_equal(imported.calibration["audio"][:, 0, 0], [0, 1, 2, 3])


def test_calibration_forms_normalize_alike() -> None:
    shapes = {"x": (1, 2)}
    samples = np.arange(6, dtype=np.float64).reshape(3, 1, 2)
    forms = [torch.from_numpy(samples), samples, [(torch.from_numpy(s),) for s in samples], {"x": samples}]
    for form in forms:
        out = collect(form, shapes, "model.py: calibration_data()")
        assert list(out) == ["x"] and out["x"].dtype == np.float32
        np.testing.assert_array_equal(out["x"], samples.astype(np.float32))


@pytest.mark.parametrize("bad, message", [
    (np.zeros((3, 3)), "calibration_data() has shape [3, 3], expected [N, 1, 2] or [N, 2]"),
    ({"y": np.zeros((3, 1, 2))}, "calibration_data() has no samples for input(s) 'x' (keys: 'y')"),
    ([np.zeros((1, 2)), np.zeros((2,)), np.zeros((2, 3))], "calibration_data() element 2 input 'x' has shape [2, 3]"),
    ([("a", "b")], "calibration_data() element 0 input 'x' is not an array of real numbers (dtype <U1)"),
])
def test_bad_calibration_data_is_one_line_error(bad: object, message: str) -> None:
    with pytest.raises(KilnError) as err:
        collect(bad, {"x": (1, 2)}, "model.py: calibration_data()")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_input_binding_must_match_example_inputs() -> None:
    path = MODELS / "tiny_cnn" / "model.py"
    with pytest.raises(KilnError, match=r"inputs.image.shape \[1, 1, 32, 32\] does not match the model's \[1, 1, 16, 16\]"):
        import_model(path, "tiny_cnn", {"image": {"shape": [1, 1, 32, 32], "dtype": "float32"}})
    with pytest.raises(KilnError, match=r"inputs.img: the model has no input 'img' \(did you mean 'image'\?\) \(its inputs: image\)"):
        import_model(path, "tiny_cnn", {"img": {"shape": [1, 1, 16, 16]}})
    with pytest.raises(KilnError, match=r"inputs.image.dtype 'int8' does not match"):
        import_model(path, "tiny_cnn", {"image": {"dtype": "int8"}})


# -- bad input: one clear line each ---------------------------------------------------------------------
NET = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)

    def forward(self, x):
        return self.conv(x)

def example_inputs():
    return (torch.zeros(1, 1, 6, 6),)
"""


@pytest.mark.parametrize("body, message", [
    (NET + "def model():\n    return Net()\n", "model.py: model() returned a module in training mode; call .eval()"),
    ("raise RuntimeError('weights.bin is missing')\n", "model.py: import failed: RuntimeError: weights.bin is missing"),
    (NET + "def model():\n    raise ValueError('bad\\nconfig')\n", "model.py: model() raised ValueError: bad"),
    (NET.replace("return (torch.zeros", "return (torch.zeros(1) / 0, torch.zeros") + "def model():\n    return Net().eval()\n",
     "model.py: example_inputs() gives 2 inputs but forward() takes 1"),
    (NET + "def model():\n    return 'not a module'\n", "model.py: model() returned str, not a torch.nn.Module"),
    (NET + "def model():\n    net = Net().eval()\n    net.conv.train()\n    return net\n",
     "model.py: model() returned a module whose submodule 'conv' is in training mode; call .eval()"),
    (NET.replace("return self.conv(x)", "self.calls.add_(1)\n        return self.conv(x)").replace(
        "torch.nn.Conv2d(1, 2, 3)", "torch.nn.Conv2d(1, 2, 3)\n        self.register_buffer('calls', torch.zeros(1))")
     + "def model():\n    return Net().eval()\n",
     "model.py: the model mutates 'calls' in forward(); Kiln models must be pure functions"),
    ("import torch\ndef model():\n    return torch.nn.ReLU().eval()\n", "model.py: defines no example_inputs() function"),
])
def test_bad_model_py_is_one_line_error(tmp_path: Path, body: str, message: str) -> None:
    path = _write_model(tmp_path / "bad", body)
    with pytest.raises(KilnError) as err:
        import_model(path, "bad", {})
    assert str(err.value) == message.replace("model.py", str(path), 1)


def test_every_unsupported_op_is_listed_with_its_source_line(tmp_path: Path) -> None:
    path = _write_model(tmp_path / "unsupported", """
        import torch

        class Net(torch.nn.Module):
            def forward(self, x):
                a = x.abs()
                b = torch.floor(x) + a
                return torch.relu(b)

        def model():
            return Net().eval()

        def example_inputs():
            return (torch.zeros(1, 4),)
    """)
    with pytest.raises(KilnError) as err:
        import_model(path, "unsupported", {})
    lines = str(err.value).splitlines()
    assert lines[0] == f"{path}: 2 unsupported operator(s):"
    assert lines[1].strip() == "node 0 'abs_1' (aten.abs.default) at model.py: a = x.abs(): no Kiln mapping for this operator"
    assert lines[2].strip() == "node 1 'floor' (aten.floor.default) at model.py: b = torch.floor(x) + a: no Kiln mapping for this operator"
    assert len(lines) == 3


def test_unsupported_arguments_are_reported(tmp_path: Path) -> None:
    path = _write_model(tmp_path / "args", """
        import torch
        import torch.nn.functional as F

        class Net(torch.nn.Module):
            def forward(self, x):
                return F.avg_pool2d(x, 2, divisor_override=3)

        def model():
            return Net().eval()

        def example_inputs():
            return (torch.zeros(1, 1, 4, 4),)
    """)
    with pytest.raises(KilnError, match=r"\(aten.avg_pool2d.default\) at model.py: return F.avg_pool2d\(x, 2, divisor_override=3\): "
                                        r"avg_pool2d with divisor_override is not supported"):
        import_model(path, "args", {})


# -- .pt2 files ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pt2_bytes() -> bytes:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()).eval()
    buf = io.BytesIO()
    with torch.no_grad():
        torch.export.save(torch.export.export(module, (torch.zeros(1, 1, 5, 5),)), buf)
    return buf.getvalue()


def _rewrite(data: bytes, edit) -> bytes:
    """A copy of the archive with `edit(name, bytes) -> bytes | None` applied to each member (None drops it)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            content = edit(info.filename, src.read(info.filename))
            if content is not None:
                dst.writestr(info.filename, content)
    return out.getvalue()


def test_pt2_imports(tmp_path: Path, pt2_bytes: bytes) -> None:
    path = tmp_path / "net.pt2"
    path.write_bytes(pt2_bytes)
    graph = import_model(path, "net", {"input": {"shape": [1, 1, 5, 5]}}).graph
    assert [n.op for n in graph.nodes] == ["Conv", "Relu"]


def _root(data: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.namelist()[0].split("/")[0]


def _pickled_weights(name: str, content: bytes) -> bytes:
    if not name.endswith("_weights_config.json"):
        return content
    config = json.loads(content)
    for meta in config["config"].values():
        meta["use_pickle"] = True
    return json.dumps(config).encode()


@pytest.mark.parametrize("tamper, message", [
    (lambda data: _rewrite(data, lambda n, c: c) + b"", None),
    (lambda data: _extra_member(data, "extra/payload.pkl"), "refusing unexpected archive member '{root}/extra/payload.pkl'"),
    (lambda data: _extra_member(data, "data/constants/custom_obj_0"), "refusing unexpected archive member '{root}/data/constants/custom_obj_0'"),
    (lambda data: _rewrite(data, _pickled_weights), "only raw tensor payloads are loaded, not pickled objects"),
    (lambda data: _rewrite(data, lambda n, c: pickle.dumps(print) if n.endswith("sample_inputs/model.pt") else c),
     "does not load with weights_only=True"),
    (lambda data: b"not a zip", "not a .pt2 archive (not a zip file)"),
])
def test_tampered_pt2_is_refused(tmp_path: Path, pt2_bytes: bytes, tamper, message: str | None) -> None:
    path = tmp_path / "net.pt2"
    path.write_bytes(tamper(pt2_bytes))
    if message is None:  # the untampered rewrite still loads: the checks are not just refusing rewritten zips
        assert import_model(path, "net", {}).graph.nodes
        return
    with pytest.raises(KilnError) as err:
        import_model(path, "net", {})
    assert str(err.value).startswith(f"{path}: ") and message.format(root=_root(pt2_bytes)) in str(err.value)
    assert "\n" not in str(err.value)


def _extra_member(data: bytes, member: str) -> bytes:
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a") as z:
        z.writestr(f"{_root(data)}/{member}", pickle.dumps({"x": 1}))
    return out.getvalue()


def test_pt2_with_dynamic_shapes_needs_and_uses_input_shapes(tmp_path: Path) -> None:
    module = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU()).eval()
    side = torch.export.Dim("side", min=4, max=64)
    with torch.no_grad():
        ep = torch.export.export(module, (torch.zeros(1, 1, 8, 8),), dynamic_shapes=({2: side, 3: side},))
    path = tmp_path / "dyn.pt2"
    torch.export.save(ep, path)
    with pytest.raises(KilnError, match=r"dyn.pt2: the program has dynamic input dimensions; give inputs.input.shape in model.toml"):
        import_model(path, "dyn", {})
    graph = import_model(path, "dyn", {"input": {"shape": [1, 1, 16, 16]}}).graph
    assert graph.tensors[graph.outputs[0]].shape == (1, 2, 16, 16)
    inputs = _inputs(((1, 1, 16, 16),))
    (got,), (want,) = _run(graph, inputs), _eager(module, inputs)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
