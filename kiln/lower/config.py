"""model.toml `[kernels]` keys, read by the lower stage."""
from ..config import Key

CONFIG = {
    "profile": Key("profile", str, "portable", "Kernel profile: which set of kernel symbols the generated code calls."),
}
