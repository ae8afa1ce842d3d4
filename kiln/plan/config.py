"""model.toml `[plan]` keys, read by the plan stage."""
from ..config import Key


MAX_ALIGNMENT = 4096  # a page: beyond it an aligned() constant wastes flash and gcc refuses large values


def alignment_problem(v: int) -> str | None:
    return None if 0 < v <= MAX_ALIGNMENT and v & (v - 1) == 0 else f"{v} is not a power of two from 1 to {MAX_ALIGNMENT}"


def _non_negative(v: int) -> str | None:
    return None if v >= 0 else f"{v} is negative"


CONFIG = {
    "alignment": Key("alignment", int, 16, "Alignment in bytes of every arena buffer (and of the arena itself): a power of two, at most 4096.", alignment_problem),
    "budget": Key("budget", int, 0, "SRAM budget for the arena in bytes (inputs and outputs included with io_in_arena); 0 means none. Over it, the plan "
                  "gives kernels less scratch, runs its leading layers tile by tile and runs layers in pieces over their own input, "
                  "whichever fits adding the least work (`docs/ir.md`); "
                  "a budget nothing meets fails with the smallest arena reached and what limits it.", _non_negative),
    "reorder": Key("reorder", bool, True, "Let the planner run the nodes in another valid order when that lowers the peak of live bytes."),
    "in_place": Key("in_place", bool, True, "Let element-wise kernels write over an input that dies at them (only kernels proven safe in place)."),
    "lz4": Key("lz4", bool, False,
               "Store constants LZ4-compressed (when that makes them smaller) and decompress each layer's into an arena "
               "scratch region just before it runs: the plan sizes the regions, codegen emits the blocks it planned."),
    "io_in_arena": Key("io_in_arena", bool, False, "Place model inputs and outputs inside the arena instead of caller buffers."),
}
