"""model.toml `[normalize]` keys, read by the normalize stage."""
from ..config import Key, one_of

CONFIG = {
    "disable": Key("disable", list, [], "Names of normalization passes to turn off."),
    "input_layout": Key("input_layout", str, "source",
                        "Layout of the compiled model's 4-D inputs: 'source' keeps the source's (NCHW for PyTorch/ONNX), 'NHWC' takes NHWC directly. Outputs keep the source's layout.",
                        one_of("source", "NHWC")),
}
