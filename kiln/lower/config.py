"""model.toml `[kernels]` keys, read by the lower stage."""
from ..config import Key


def _non_negative(v: int) -> str | None:
    return None if v >= 0 else f"{v} is negative"


CONFIG = {
    "profile": Key("profile", str, "portable", "Kernel profile: which set of kernel symbols the generated code calls."),
    "scratch_limit": Key("scratch_limit", int, 8192, "Most arena bytes one layer's kernel may get as scratch for its fast path (live during that layer only, placed by the plan); "
                         "0 gives none: the smallest arena, about twice the Cortex-M4 instructions (`docs/cortex-m.md`, \"Kernel scratch\"). "
                         "A depthwise strip takes only the rows it needs and never more than its layer's maps.", _non_negative),
}
