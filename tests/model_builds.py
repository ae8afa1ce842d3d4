"""Every model in models/, compiled once per test process; plan and codegen variants built on top.

The front of the chain (import .. lower) is what takes time, so it runs once
per model (and once more from `quantize` on for the float path); the plan and
codegen variants a test asks for (LZ4, I/O in the arena, another prefix) are
re-planned from the cached lowered graph in their own folder. Under
pytest-xdist the workers share one folder and take turns through a file lock,
so a model is compiled once per test session, not once per worker.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from kiln import config as model_config
from kiln.runner import run_stage

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted(p.parent.name for p in (ROOT / "models").glob("*/model.toml"))
# Models whose source is a quantized .tflite file: int8 from the import on, with no float path (quant.mode = "none").
TFLITE_INT8 = sorted(m for m in MODELS if model_config.load(ROOT / "models" / m / "model.toml")["model"]["source"].endswith(".tflite"))
FLOAT_CAPABLE = [m for m in MODELS if m not in TFLITE_INT8]
FRONT = ("import", "normalize", "quantize", "lower")
FROM_QUANTIZE = ("quantize", "lower")
BACK = ("plan", "codegen")


def shared_root(basetemp: Path, name: str) -> Path:
    """A folder every xdist worker of this session sees (the session's base folder, not the worker's)."""
    return (basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp) / name


@contextmanager
def _locked(folder: Path) -> Iterator[bool]:
    """Hold `folder`'s lock; yields whether an earlier holder finished building it."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield (folder / ".done").exists()
        (folder / ".done").touch()


class ModelBuilds:
    """Builds in `root`, shared by every test module (and worker) of one session."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def config(self, model: str, mode: str = "int8", **tables: dict[str, Any]) -> dict[str, dict[str, Any]]:
        cfg = model_config.load(ROOT / "models" / model / "model.toml")
        cfg["quant"]["mode"] = mode
        for table, values in tables.items():
            unknown = set(values) - set(cfg[table])
            assert not unknown, f"[{table}] has no key {sorted(unknown)}"  # an override must not be silently ignored
            cfg[table].update(values)
        return cfg

    def front(self, model: str, mode: str = "int8", normalize: dict | None = None) -> Path:
        """The folder holding the model's artifacts up to `lowered.kir` (int8 or float; `normalize`: overrides)."""
        tag = "".join(f"-{key}-{value}" for key, value in sorted((normalize or {}).items()))
        out = self.root / f"{model}-{mode}{tag}-front"
        int8 = self.front(model, normalize=normalize) if mode != "int8" else None
        with _locked(out) as done:
            if not done:
                stages = FRONT
                if int8 is not None:
                    for artifact in ("imported.kir", "normalized.kir", "calibration.npz"):
                        shutil.copy2(int8 / artifact, out / artifact)
                    stages = FROM_QUANTIZE
                cfg = self.config(model, mode, normalize=normalize or {})
                for name in stages:
                    run_stage(name, model, ROOT / "models" / model, cfg, out)
        return out

    def complete(self, model: str) -> Path:
        """Every artifact `kiln compile` writes with the model's own config: the front's folder, planned and generated."""
        out = self.front(model)
        with _locked(self.root / f"{model}-int8-complete") as done:
            if not done:
                for name in BACK:
                    run_stage(name, model, ROOT / "models" / model, self.config(model), out)
        return out

    def variant(self, model: str, tag: str, mode: str = "int8", plan: dict | None = None,
                codegen: dict | None = None) -> Path:
        """Plan and generate C for `model` with config overrides, in a folder named by `tag`."""
        front = self.front(model, mode)
        out = self.root / f"{model}-{mode}-{tag}"
        with _locked(out) as done:
            if not done:
                for artifact in ("quantized.kir", "lowered.kir", "samples.npz"):
                    shutil.copy2(front / artifact, out / artifact)
                cfg = self.config(model, mode, plan=plan or {}, codegen=codegen or {})
                for name in BACK:
                    run_stage(name, model, ROOT / "models" / model, cfg, out)
        return out
