"""model.toml `[codegen]` keys, read by the codegen stage (and `lz4` by the plan stage, which sizes the scratch regions)."""
import re

from toolchain.config import Key


def _identifier(v: str) -> str | None:
    return None if v == "" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) else f"{v!r} is not a C identifier"


CONFIG = {
    "prefix": Key("prefix", str, "", "Prefix of every exported C symbol and macro; empty means the model name.", _identifier),
    "lz4": Key("lz4", bool, False, "Store constants LZ4-compressed (when that makes them smaller) and decompress each layer's into an arena scratch region just before it runs."),
    "weights_section": Key("weights_section", str, "", "Linker section for the constant weights (e.g. '.rodata.kiln'); empty leaves them in .rodata."),
}
