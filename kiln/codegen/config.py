"""model.toml `[codegen]` keys, read by the codegen stage."""
import re

from ..config import Key


# Both values are pasted into C (symbol names, `__attribute__((section("...")))`), so only these grammars pass.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
SECTION = re.compile(r"[A-Za-z_.][A-Za-z0-9_.]{0,63}")


def identifier_problem(v: str) -> str | None:
    """Why `v` cannot be a symbol prefix (a C identifier of at most 32 characters), or None."""
    return None if v == "" or IDENTIFIER.fullmatch(v) else f"{v!r} is not a C identifier of at most 32 characters"


def section_problem(v: str) -> str | None:
    """Why `v` cannot be a linker section name (letters, digits, '_' and '.', at most 64), or None."""
    if v == "" or SECTION.fullmatch(v):
        return None
    return f"{v!r} is not a section name (letters, digits, '_' and '.', not starting with a digit, at most 64 characters)"


CONFIG = {
    "prefix": Key("prefix", str, "", "Prefix of every exported C symbol and macro; empty means the model name.", identifier_problem),
    "weights_section": Key("weights_section", str, "", "Linker section for the constant weights (e.g. '.rodata.kiln'); empty leaves them in .rodata.", section_problem),
}
