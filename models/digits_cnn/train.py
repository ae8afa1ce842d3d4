"""Train the digits CNN and write its weights to `weights.npz` next to this file.

Running `python train.py` re-creates the committed `weights.npz` byte-for-byte
on the same torch/NumPy versions and the same kind of CPU: the data split,
the initialization and the batch order are seeded, training runs on one CPU
thread with `torch.use_deterministic_algorithms(True)`, and the file is a zip
written without timestamps or compression. `--out DIR` writes elsewhere
(the reproducibility test compares such a copy with the committed file).
"""
from __future__ import annotations

import argparse
import io
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kiln.frontends.torch_module import load_model_py

HERE = Path(__file__).resolve().parent
SEED = 0
EPOCHS = 40
BATCH = 32
LEARNING_RATE = 5e-3
WEIGHT_DECAY = 1e-2


def _model_module():
    return load_model_py(HERE / "model.py", "digits_cnn_model")


def shifted(batch: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The batch moved by up to one pixel each way (one seeded shift per batch): cheap augmentation."""
    dy, dx = torch.randint(0, 3, (2,), generator=gen).tolist()
    return F.pad(batch, (1, 1, 1, 1))[:, :, dy:dy + 8, dx:dx + 8]


def train() -> dict[str, np.ndarray]:
    """Train from scratch; returns the state dict as float32 arrays."""
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    defs = _model_module()
    train_x, _, train_y, _ = defs.split()
    x, y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    net = defs.DigitsCNN()
    opt = torch.optim.AdamW(net.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, EPOCHS)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(SEED)
    net.train()
    for _ in range(EPOCHS):
        for idx in torch.randperm(len(x), generator=gen).split(BATCH):
            opt.zero_grad()
            loss_fn(net(shifted(x[idx], gen)), y[idx]).backward()
            opt.step()
        schedule.step()
    return {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An .npz that np.load reads, with fixed entry order and dates so equal arrays give equal bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            entry = io.BytesIO()
            np.lib.format.write_array(entry, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, entry.getvalue())
    path.write_bytes(buf.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write weights.npz into")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    write_npz(args.out / "weights.npz", train())


if __name__ == "__main__":
    main()
