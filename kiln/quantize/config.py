"""model.toml `[quant]` keys, read by the quantize stage."""
from __future__ import annotations

from typing import Any

from ..config import Key, one_of

OBSERVERS = ("minmax", "moving_average", "percentile", "mse")


def _fraction_open(v: Any) -> str | None:
    return None if 0.0 < v < 1.0 else f"must be between 0 and 1 (exclusive), got {v!r}"


def _percentile(v: Any) -> str | None:
    return None if 50.0 < v <= 100.0 else f"must be in (50, 100], got {v!r}"


def _non_negative(v: Any) -> str | None:
    return None if v >= 0 else f"must be >= 0, got {v!r}"


def _calibration_files(v: Any) -> str | None:
    for item in v:
        if not isinstance(item, str) or not item.endswith((".npy", ".npz")):
            return f"expects a list of .npy/.npz file paths, got {item!r}"
    return None


CONFIG: dict[str, Key] = {
    "mode": Key("mode", str, "int8",
                "\"int8\" quantizes the graph (TFLite/CMSIS-NN int8 scheme); \"none\" keeps it in float for the float C path.",
                one_of("int8", "none")),
    "observer": Key("observer", str, "minmax",
                    "How calibration picks each activation range: \"minmax\", \"moving_average\" (min/max averaged over batches of 32 samples), "
                    "\"percentile\" (clips outliers) or \"mse\" (the range with the least quantization error).",
                    one_of(*OBSERVERS)),
    "percentile": Key("percentile", (int, float), 99.99,
                      "The \"percentile\" observer keeps values between the (100 - p)th and the pth percentile.", _percentile),
    "averaging_constant": Key("averaging_constant", (int, float), 0.01,
                              "The \"moving_average\" observer's weight of each new batch's min/max (after the first 1/c batches, which weigh equally).", _fraction_open),
    "per_channel": Key("per_channel", bool, True,
                       "Conv and fully connected weights get one scale per output channel (false: one per tensor)."),
    "calibration": Key("calibration", list, [],
                       "Calibration files relative to the model folder (.npy: a single-input model's samples shaped "
                       "[N, *input_shape] or [N, *input_shape[1:]]; .npz: one such array per input name); when given they "
                       "replace calibration_data().",
                       _calibration_files),
    "max_samples": Key("max_samples", int, 256,
                       "At most this many calibration samples are used (a seeded choice); 0 uses them all.", _non_negative),
    "seed": Key("seed", int, 0, "Seed of the calibration sample choice.", _non_negative),
}
