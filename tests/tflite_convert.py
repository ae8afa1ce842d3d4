"""Small Keras models written as .tflite files by the TensorFlow Lite converter (not Kiln's exporter).

Runs in the separate TensorFlow environment that scripts/setup.sh creates (`.venv-tf`), as a
subprocess of tests/test_tflite_converter.py:

    .venv-tf/bin/python tests/tflite_convert.py OUT_DIR

Each case is one seeded model, converted in the forms a converter user picks: `int8` (full
integer with `representative_dataset`, int8 model inputs and outputs), `int8_float_io` (the same
with float inputs and outputs: QUANTIZE/DEQUANTIZE at the edges), `uint8` (uint8 inputs and
outputs, QUANTIZE between uint8 and int8 at the edges; two cases), `float`, and `hybrid`
(dynamic-range: int8 weights, float activations; the dense_4d case, whose weights are large
enough). TFLM_MODELS, models in the shapes of TFLite Micro's own example files, are converted
as int8 only. OUT_DIR gets `<case>.<form>.tflite` and `<case>.calibration.npy` (the
representative samples).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

L = tf.keras.layers
SAMPLES = 32


def conv_stack(x):
    """CONV_2D (SAME, stride 2, dilation, RELU6/RELU fused), DEPTHWISE_CONV_2D with multiplier 2, odd SAME totals."""
    x = L.Conv2D(6, 3, strides=2, padding="same", activation="relu6")(x)
    x = L.Conv2D(5, (2, 3), padding="same", dilation_rate=(2, 1), activation="relu")(x)
    x = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same")(x)
    x = L.DepthwiseConv2D((3, 2), strides=(2, 1), padding="valid", activation="relu6")(x)
    return L.Conv2D(4, 1)(x)


def pooling(x):
    """AVERAGE_POOL_2D on non-square windows (SAME and VALID), MAX_POOL_2D, MEAN (GlobalAveragePooling2D), SOFTMAX."""
    x = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = L.AveragePooling2D((2, 3), strides=(2, 2), padding="same")(x)
    x = L.MaxPooling2D((3, 2), strides=(1, 2), padding="valid")(x)
    x = L.AveragePooling2D((3, 3), strides=1, padding="valid")(x)
    x = L.GlobalAveragePooling2D()(x)
    return L.Softmax()(L.Dense(7)(x))


def dense_4d(x):
    """FULLY_CONNECTED on a 4-D input, keeping its dims and (through Flatten) not; RESHAPE; LOGISTIC; TANH.

    The 60 × 24 weights are over the converter's 1024-element threshold for dynamic-range (hybrid) quantization."""
    a = L.Dense(6, activation="tanh")(x)
    b = L.Dense(24, activation="sigmoid")(L.Flatten()(x))
    return L.Concatenate()([L.Flatten()(a), b])


def elementwise(x):
    """ADD/SUB/MUL with broadcasting and fused RELU, LEAKY_RELU, HARD_SWISH, RELU6, MAXIMUM/MINIMUM with a
    constant and of two tensors (broadcast over channels)."""
    y = L.Conv2D(4, 1)(x)
    z = L.Conv2D(4, 3, padding="same")(x)
    s = L.ReLU()(L.Add()([y, z]))
    d = L.Subtract()([y, z])
    m = L.Multiply()([s, L.Lambda(lambda t: tf.reduce_mean(t, axis=[1, 2], keepdims=True))(d)])
    h = L.Activation(tf.nn.relu6)(L.LeakyReLU(negative_slope=0.2)(m))
    w = L.Lambda(lambda t: t * tf.nn.relu6(t + 3.0) / 6.0)(L.Conv2D(4, 1)(h))
    w = L.Lambda(lambda t: tf.minimum(tf.maximum(t, -0.25), 1.5))(w)
    return L.Lambda(lambda ts: tf.minimum(tf.maximum(ts[0], ts[1]), ts[2][:, :, :, :1]))([w, y, z])


def movement(x):
    """PAD, PADV2, CONCATENATION, TRANSPOSE, STRIDED_SLICE, SPLIT, RESIZE_NEAREST_NEIGHBOR, RESHAPE, SQUEEZE."""
    x = L.Conv2D(6, 3, padding="same", activation="relu")(x)
    p = L.ZeroPadding2D(((1, 0), (2, 1)))(x)
    q = L.Lambda(lambda t: tf.pad(t, [[0, 0], [0, 1], [1, 2], [0, 0]], constant_values=0.75))(x)
    a, b = L.Lambda(lambda t: tf.split(t, 2, axis=3))(p)
    c = L.Concatenate(axis=3)([b, a, q[:, :, :, :2]])
    c = L.Lambda(lambda t: t[:, 1::2, ::-1, 1:5])(c)
    c = L.Lambda(lambda t: tf.image.resize(t, (5, 7), method="nearest"))(c)
    c = L.Lambda(lambda t: tf.compat.v1.image.resize_nearest_neighbor(t, (7, 4), align_corners=True))(c)
    c = L.Permute((2, 1, 3))(c)
    c = L.Lambda(lambda t: tf.squeeze(t[:, :1], axis=1))(c)
    return L.Reshape((-1,))(c)


def micro_speech(x):
    """TFLM's micro_speech example: DEPTHWISE_CONV_2D 10x8, depth multiplier 8, stride 2, SAME, ReLU, then
    FULLY_CONNECTED 4000 -> 4 and SOFTMAX (its file has no RESHAPE before the FULLY_CONNECTED; the tests take
    out the one the converter writes)."""
    x = L.DepthwiseConv2D((10, 8), strides=2, padding="same", depth_multiplier=8, activation="relu")(x)
    return L.Softmax()(L.Dense(4)(L.Flatten()(x)))


def person_detect(x):
    """TFLM's person_detect benchmark model: MobileNetV1 with alpha 0.25 on a 96x96 grayscale image, two classes."""
    return tf.keras.applications.MobileNet(input_tensor=x, alpha=0.25, weights=None, classes=2).output


CASES = {
    "conv_stack": ((13, 11, 3), conv_stack),
    "pooling": ((14, 12, 2), pooling),
    "dense_4d": ((4, 5, 3), dense_4d),
    "elementwise": ((6, 7, 3), elementwise),
    "movement": ((5, 6, 3), movement),
}
# TFLite Micro's own example models, in the shapes of its files (seeded weights): int8 only, as TFLM has them.
TFLM_MODELS = {"micro_speech": ((49, 40, 1), micro_speech), "person_detect": ((96, 96, 1), person_detect)}
FORMS = ("int8", "int8_float_io", "float")
HYBRID = ("dense_4d",)  # the converter quantizes only weights over 1024 elements dynamically
UINT8_IO = ("conv_stack", "pooling")


def build(name: str) -> tuple[tf.keras.Model, np.ndarray]:
    shape, body = {**CASES, **TFLM_MODELS}[name]
    seed = sum(map(ord, name))
    tf.keras.utils.set_random_seed(seed)
    inp = tf.keras.Input(shape, batch_size=1)
    model = tf.keras.Model(inp, body(inp))
    samples = np.random.default_rng(seed).normal(0.0, 1.0, (SAMPLES, 1, *shape)).astype(np.float32)
    for layer in model.layers:  # untrained batch norms get the samples' statistics, so activations keep their scale
        if isinstance(layer, L.BatchNormalization):
            x = tf.keras.Model(model.input, layer.input)(samples[:, 0]).numpy()
            gamma, beta, _, _ = layer.get_weights()
            layer.set_weights([gamma, beta, x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))])
    return model, samples


def convert(model: tf.keras.Model, samples: np.ndarray, form: str) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if form in ("int8", "int8_float_io", "uint8", "hybrid"):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if form.startswith("int8") or form == "uint8":
        converter.representative_dataset = lambda: ([s] for s in samples)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if form in ("int8", "uint8"):
        converter.inference_input_type = getattr(tf, form)
        converter.inference_output_type = getattr(tf, form)
    return converter.convert()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        model, samples = build(name)
        np.save(out / f"{name}.calibration.npy", samples)
        for form in FORMS + (("hybrid",) if name in HYBRID else ()) + (("uint8",) if name in UINT8_IO else ()):
            (out / f"{name}.{form}.tflite").write_bytes(convert(model, samples, form))
    for name in TFLM_MODELS:
        model, samples = build(name)
        np.save(out / f"{name}.calibration.npy", samples)
        (out / f"{name}.int8.tflite").write_bytes(convert(model, samples, "int8"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
