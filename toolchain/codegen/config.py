"""model.toml `[codegen]` keys, read by the codegen stage."""
import re

from toolchain.config import Key


def _identifier(v: str) -> str | None:
    return None if v == "" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) else f"{v!r} is not a C identifier"


CONFIG = {
    "prefix": Key("prefix", str, "", "Prefix of every exported C symbol and macro; empty means the model name.", _identifier),
    "weights_section": Key("weights_section", str, "", "Linker section for the constant weights (e.g. '.rodata.kiln'); empty leaves them in .rodata."),
}
