"""model.toml `[model]` keys, read by the import stage."""
from pathlib import PurePosixPath

from ..config import Key


def _relative_paths(value: list) -> str | None:
    for item in value:
        if not isinstance(item, str) or not item:
            return f"expected a list of file paths, got {item!r} in it"
        if PurePosixPath(item).is_absolute():
            return f"{item!r} is absolute; give it relative to the model folder"
    return None


def _inside_folder(value: str) -> str | None:
    """The build tracks the model folder's files: a source elsewhere would not rebuild when it changes."""
    path = PurePosixPath(value)
    if value and not path.is_absolute() and ".." not in path.parts and "\\" not in value:
        return None
    return (f"{value!r} is not a path inside the model folder; the build tracks only the folder's files, so keep the "
            "source there (a model.py there may load shared files that model.depends lists)")


CONFIG = {
    "source": Key("source", str, "model.py",
                  "The model source, relative to the model folder and inside it: a model.py (torch nn.Module factory), "
                  "a .pt2, an .onnx or a .tflite file.", _inside_folder),
    "depends": Key("depends", list, [],
                   "Files outside the model folder that the source reads (e.g. a module shared by several model.py files), "
                   "relative to the model folder; the import stage re-runs when one changes.", _relative_paths),
}

