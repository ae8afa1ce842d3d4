"""Calibration data in every form users hold it compiles the same quantized graph, byte for byte.

Forms: calibration_data() returning arrays shaped [N, *input_shape] or [N, *input_shape[1:]], lists,
tuples, generators, iterables, DataLoaders (tensors, tuples, dicts, (inputs, labels) pairs); the same
arrays as quant.calibration files and as `kiln compile --calibration`; `kiln run --input` and `kiln
report` reading [N, C, H, W] data. Every wrong shape is one line naming both accepted shapes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.cli import main, resolve_source
from kiln.errors import KilnError
from kiln.runner import run_stage

NET = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, image):
        x = nn.functional.max_pool2d(torch.relu(self.conv(image)), 2)
        return self.fc(torch.flatten(x, 1))

def model():
    torch.manual_seed(0)
    return Net().eval()

def example_inputs():
    return (torch.zeros(1, 3, 8, 8),)

def _data():
    return torch.randn(12, 3, 8, 8, generator=torch.Generator().manual_seed(3))
"""

TWO_INPUTS = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(4, 4)

    def forward(self, x, h):
        return torch.tanh(self.a(x) + self.b(h))

def model():
    torch.manual_seed(0)
    return Net().eval()

def example_inputs():
    return (torch.zeros(1, 8), torch.zeros(1, 4))

def _data():
    g = torch.Generator().manual_seed(4)
    return torch.randn(10, 8, generator=g), torch.randn(10, 4, generator=g)
"""

# calibration_data() bodies for NET; "canonical" is the reference form [N, *input_shape].
SINGLE_FORMS = {
    "canonical": "return _data().reshape(12, 1, 3, 8, 8)",
    "batch_nchw": "return _data()",
    "numpy_nchw": "return _data().numpy()",
    "dict_nchw": "return {'image': _data()}",
    "list_of_samples": "return list(_data())",
    "list_of_batched_samples": "return [s[None] for s in _data()]",
    "tuple_of_batches": "return tuple(_data().split(4))",
    "generator_of_batches": "for batch in _data().split(5):\n        yield batch",
    "iterable": "class Samples:\n        def __iter__(self):\n            return iter(_data().split(7))\n    return Samples()",
    "list_of_pairs": "return [(s, torch.tensor(i)) for i, s in enumerate(_data())]",
    "dataloader": ("from torch.utils.data import DataLoader, TensorDataset\n"
                   "    return DataLoader(TensorDataset(_data()), batch_size=4)"),
    "dataloader_pairs": ("from torch.utils.data import DataLoader, TensorDataset\n"
                         "    return DataLoader(TensorDataset(_data(), torch.arange(12)), batch_size=5)"),
    "dataloader_dicts": ("from torch.utils.data import DataLoader\n"
                         "    data = _data()\n"
                         "    return DataLoader([{'image': s, 'label': i} for i, s in enumerate(data)], batch_size=5)"),
}

TWO_INPUT_FORMS = {
    "canonical": "x, h = _data()\n    return {'x': x[:, None], 'h': h[:, None]}",
    "dict_batchless": "x, h = _data()\n    return {'x': x, 'h': h}",
    "tuple_of_arrays": "return _data()",
    "list_of_tuples": "x, h = _data()\n    return list(zip(x, h))",
    "list_of_dicts": "x, h = _data()\n    return [{'x': a, 'h': b, 'label': 0} for a, b in zip(x, h)]",
    "generator_of_pairs": "x, h = _data()\n    for a, b in zip(x.split(3), h.split(3)):\n        yield (a, b), torch.zeros(len(a))",
    "dataloader": ("from torch.utils.data import DataLoader, TensorDataset\n"
                   "    x, h = _data()\n"
                   "    return DataLoader(TensorDataset(x, h, torch.arange(10)), batch_size=4)"),
}


def write_model(folder: Path, source: str, body: str, toml: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(source + "\ndef calibration_data():\n    " + body + "\n")
    (folder / "model.toml").write_text('[model]\nsource = "model.py"\n' + toml)
    return folder


def quantized(folder: Path, out: Path, calibration: list[Path] | None = None) -> bytes:
    """Run import, normalize and quantize on a model folder; the quantized graph's bytes."""
    name, model_dir, cfg = resolve_source(folder, None)
    if calibration:
        cfg["quant"]["calibration"] = [str(p.resolve()) for p in calibration]
    out.mkdir(parents=True, exist_ok=True)
    for stage in ("import", "normalize", "quantize"):
        run_stage(stage, name, model_dir, cfg, out)
    return (out / "quantized.kir").read_bytes()


@pytest.fixture(scope="module")
def canonical(tmp_path_factory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("canonical")
    return {kind: quantized(write_model(root / kind / "net", source, forms["canonical"]), root / kind / "out")
            for kind, source, forms in (("single", NET, SINGLE_FORMS), ("two", TWO_INPUTS, TWO_INPUT_FORMS))}


@pytest.mark.parametrize("form", sorted(set(SINGLE_FORMS) - {"canonical"}))
def test_calibration_data_form_compiles_like_the_canonical_form(form: str, canonical, tmp_path: Path) -> None:
    folder = write_model(tmp_path / "net", NET, SINGLE_FORMS[form])
    assert quantized(folder, tmp_path / "out") == canonical["single"]


@pytest.mark.parametrize("form", sorted(set(TWO_INPUT_FORMS) - {"canonical"}))
def test_two_input_calibration_data_form_compiles_like_the_canonical_form(form: str, canonical, tmp_path: Path) -> None:
    folder = write_model(tmp_path / "net", TWO_INPUTS, TWO_INPUT_FORMS[form])
    assert quantized(folder, tmp_path / "out") == canonical["two"]


def _nchw_samples() -> np.ndarray:
    import torch

    return torch.randn(12, 3, 8, 8, generator=torch.Generator().manual_seed(3)).numpy()


@pytest.mark.parametrize("how", ["quant.calibration", "--calibration"])
@pytest.mark.parametrize("layout", ["npy_nchw", "npy_canonical", "npz_nchw", "two_files"])
def test_calibration_files_compile_like_the_canonical_form(how: str, layout: str, canonical, tmp_path: Path) -> None:
    data = _nchw_samples()
    folder = tmp_path / "net"
    files = {"npy_nchw": {"calib.npy": data}, "npy_canonical": {"calib.npy": data[:, None]},
             "npz_nchw": {"calib.npz": {"image": data}},
             "two_files": {"a.npy": data[:5], "b.npz": {"image": data[5:, None]}}}[layout]
    toml = "[quant]\ncalibration = [" + ", ".join(f'"{f}"' for f in files) + "]\n" if how == "quant.calibration" else ""
    write_model(folder, NET, "return None", toml)
    (folder / "model.py").write_text(NET)  # no calibration_data(): the files are the only samples
    for file, arrays in files.items():
        np.savez(folder / file, **arrays) if file.endswith(".npz") else np.save(folder / file, arrays)
    given = [folder / f for f in files] if how == "--calibration" else None
    assert quantized(folder, tmp_path / "out", given) == canonical["single"]


@pytest.mark.parametrize("body, message", [
    ("return _data().reshape(12, 3, 64)", "calibration_data() has shape [12, 3, 64], expected [N, 1, 3, 8, 8] or [N, 3, 8, 8]"),
    ("return [s[:2] for s in _data()]", "calibration_data() element 0 input 'image' has shape [2, 8, 8], expected one sample "
                                        "[1, 3, 8, 8] or [3, 8, 8] or a batch [B, 1, 3, 8, 8] or [B, 3, 8, 8]"),
    ("return iter([])", "calibration_data() gave no samples"),
    ("return _data() * float('nan')", "calibration_data() for 'image' contains NaN or infinity"),
    ("return 3", "calibration_data() returned int: expected an array, a dict by input name, or an iterable"),
    ("yield _data()\n    raise RuntimeError('disk gone')", "calibration_data() raised RuntimeError: disk gone while giving element 1"),
    ("return [{'label': 1}]", "calibration_data() element 0 is a dict without input(s) 'image' (keys: 'label')"),
])
def test_bad_calibration_data_is_one_line(body: str, message: str, tmp_path: Path) -> None:
    folder = write_model(tmp_path / "net", NET, body)
    with pytest.raises(KilnError) as err:
        quantized(folder, tmp_path / "out")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_calibration_file_shape_is_one_line(tmp_path: Path, capsys) -> None:
    folder = write_model(tmp_path / "net", NET, "return _data()", '[quant]\ncalibration = ["calib.npy"]\n')
    np.save(folder / "calib.npy", np.zeros((4, 8, 8, 3), np.float32))
    assert main(["compile", str(folder), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err == (f"kiln: error: {folder / 'model.toml'}: quant.calibration: calib.npy: input 'image' has shape "
                   "[4, 8, 8, 3], expected [N, 1, 3, 8, 8] or [N, 3, 8, 8]\n")


def test_run_and_report_take_nchw_batches(tmp_path: Path, capsys) -> None:
    data = _nchw_samples()
    folder = write_model(tmp_path / "net", NET, "return _data()", '[quant]\ncalibration = ["calib.npy"]\n')
    np.save(folder / "calib.npy", data)
    out = tmp_path / "out"
    assert main(["compile", str(folder), "-o", str(out)]) == 0
    np.save(tmp_path / "nchw.npy", data[:5])
    np.save(tmp_path / "stacked.npy", data[:5, None])
    np.save(tmp_path / "one.npy", data[:1])
    for name in ("nchw", "stacked", "one"):
        assert main(["run", str(out), "--input", str(tmp_path / f"{name}.npy"), "--output", str(tmp_path / f"{name}_y.npy")]) == 0
    nchw, stacked, one = (np.load(tmp_path / f"{n}_y.npy") for n in ("nchw", "stacked", "one"))
    assert nchw.shape == (5, 3) and stacked.shape == (5, 1, 3) and one.shape == (1, 3)  # outputs mirror the input form
    np.testing.assert_array_equal(nchw, stacked[:, 0])
    np.testing.assert_array_equal(one, nchw[:1])
    np.save(tmp_path / "bad.npy", data[:5, :2])
    capsys.readouterr()
    assert main(["run", str(out), "--input", str(tmp_path / "bad.npy"), "--output", str(tmp_path / "bad_y.npy")]) == 1
    err = capsys.readouterr().err
    assert "input 'image' has shape [5, 2, 8, 8]; expected one sample [1, 3, 8, 8], or samples [N, 1, 3, 8, 8] or [N, 3, 8, 8]" in err
    assert err.count("\n") == 1
    assert main(["report", str(out), "--samples", "12"]) == 0  # the [N, C, H, W] file's samples, kept by the build
    assert "over 12 calibration samples (from quant.calibration calib.npy)" in capsys.readouterr().out
