"""model.toml `[model]` keys, read by the import stage."""
from toolchain.config import Key

CONFIG = {
    "source": Key("source", str, "model.py",
                  "The model source, relative to the model folder: a model.py (torch nn.Module factory), a .pt2 or an .onnx file."),
}
