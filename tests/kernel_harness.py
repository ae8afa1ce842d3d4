"""Shared test helpers for the numerics: an independent big-integer model of the
fixed-point arithmetic, builders of single-node quantized graphs, and a ctypes
runner that executes a lowered graph on the C kernels in firmware_stubs/."""
from __future__ import annotations

import ctypes
import math
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np

from kiln.ir.graph import DTYPES, Graph, Node, QuantParams, Tensor
from kiln.lower.abi import KERNELS

ROOT = Path(__file__).resolve().parents[1]
STUBS = ROOT / "firmware_stubs"
RUNTIME = ROOT / "runtime"
STRICT_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


# -- independent big-integer model --------------------------------------------
def wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def model_requantize(val: int, mult: int, shift: int) -> int:
    """arm_nn_requantize on Python ints: shift-wrap, doubling high mul (+2^30, floor), rounding divide."""
    left, right = max(shift, 0), max(-shift, 0)
    x = wrap32(wrap32(val) * 2**left)
    high = wrap32((x * mult + 2**30) // 2**31)
    if right == 0:
        return high
    q, r = divmod(high, 2**right)  # floor division, 0 <= r < 2^right
    half = 2 ** (right - 1)
    return q + 1 if (r > half or (r == half and high >= 0)) else q


def model_quantize_multiplier(real: float) -> tuple[int, int]:
    """The Q31 significand and shift of `real`, by exact rational arithmetic."""
    if real == 0:
        return 0, 0
    exact = Fraction(real)
    shift = 0
    while exact >= 1:
        exact /= 2
        shift += 1
    while exact < Fraction(1, 2):
        exact *= 2
        shift -= 1
    scaled = exact * 2**31
    q = int(scaled) + (1 if scaled - int(scaled) >= Fraction(1, 2) else 0)
    if q == 2**31:
        q, shift = 2**30, shift + 1
    if shift < -31:
        return 0, 0
    return q, shift


def round_half_away(v: float) -> int:
    f = Fraction(v)
    n = int(abs(f) + Fraction(1, 2))
    return n if f >= 0 else -n


def model_activation_range(lo: float, hi: float, scale: float, zp: int) -> tuple[int, int]:
    """TFLite's clamp bounds: zp + round(bound / scale) with a float32 division, within int8."""
    def quant(v: float) -> int:
        return zp + round_half_away(float(np.float32(v) / np.float32(scale)))

    return (max(-128, quant(lo)) if lo > -math.inf else -128, min(127, quant(hi)) if hi < math.inf else 127)


def model_output(acc: int, real_multiplier: float, zp: int, lo: int = -128, hi: int = 127) -> int:
    """requantize by `real_multiplier`, add the zero point, clamp (max first, then min)."""
    mult, shift = model_quantize_multiplier(real_multiplier)
    return min(max(model_requantize(acc, mult, shift) + zp, lo), hi)


# -- graph builders ----------------------------------------------------------------
def q(scale: float, zp: int) -> QuantParams:
    return QuantParams((scale,), (zp,))


def act(name: str, shape, quant: QuantParams | None = None, dtype: str = "int8") -> Tensor:
    return Tensor(name, tuple(shape), dtype, quant=quant)


def single_node(op: str, inputs: list[Tensor], outputs: list[Tensor], attrs: dict | None = None, name: str = "g") -> Graph:
    """A graph of one node; non-constant inputs become graph inputs."""
    g = Graph(name)
    for t in inputs + outputs:
        if t.name not in g.tensors:
            g.add_tensor(t)
    g.nodes.append(Node("n", op, [t.name for t in inputs], [t.name for t in outputs], dict(attrs or {})))
    g.inputs = [t.name for t in inputs if not t.is_constant and t.name not in g.inputs]
    g.outputs = [t.name for t in outputs]
    return g


def random_int8(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)


# -- the C kernels through ctypes ------------------------------------------------------
def build_library(out_dir: Path, sanitize: str = "undefined", defines: tuple[str, ...] = ()) -> Path:
    """Compile every firmware_stubs/*.c into one shared library (strict warnings, sanitized), with -D `defines`."""
    lib = out_dir / "libkiln_stubs.so"
    sources = sorted(str(p) for p in STUBS.glob("*.c"))
    cmd = ["gcc", *STRICT_FLAGS, *(f"-D{d}" for d in defines), "-O1", "-g", "-fPIC", "-shared", f"-I{RUNTIME}", f"-I{STUBS}",
           f"-fsanitize={sanitize}", "-fno-sanitize-recover=all", "-o", str(lib), *sources, "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return lib


_STRUCTS: dict[str, type] = {}


def params_struct(kernel: str) -> type:
    if kernel not in _STRUCTS:
        fields = [(f, ctypes.c_int32) for f in KERNELS[kernel].fields]
        _STRUCTS[kernel] = type(f"{kernel}_params", (ctypes.Structure,), {"_fields_": fields})
    return _STRUCTS[kernel]


GUARD = 64


class Buffer:
    """An array with guard bytes on both sides, to catch writes out of bounds."""

    def __init__(self, shape, dtype: str, rng: np.random.Generator):
        nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        self.raw = rng.integers(0, 256, size=nbytes + 2 * GUARD, dtype=np.uint8)
        self.pattern = self.raw.copy()
        self.array = self.raw[GUARD:GUARD + nbytes].view(DTYPES[dtype]).reshape(shape)

    def check_guards(self, what: str) -> None:
        assert np.array_equal(self.raw[:GUARD], self.pattern[:GUARD]), f"{what}: write before the buffer"
        assert np.array_equal(self.raw[-GUARD:], self.pattern[-GUARD:]), f"{what}: write after the buffer"


def run_lowered(lib: ctypes.CDLL, graph: Graph, feeds: dict[str, np.ndarray], seed: int = 0,
                scratch_used: list[bool] | None = None) -> dict[str, np.ndarray]:
    """Execute a lowered graph on the C kernels, as generated code would: one call per node.

    Kernels that take scratch get exactly the `scratch_bytes` the lower stage sized, with guard bytes
    around it; `scratch_used` collects, per such call, whether the kernel wrote its scratch.
    """
    rng = np.random.default_rng(seed)
    scratch_used = [] if scratch_used is None else scratch_used
    values: dict[str, np.ndarray] = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    for name in graph.inputs:
        values[name] = np.ascontiguousarray(feeds[name], dtype=DTYPES[graph.tensors[name].dtype])
    buffers: dict[str, Buffer] = {}
    for node in graph.nodes:
        kernel = node.attrs["kernel"]
        if kernel == "":
            values[node.outputs[0]] = values[node.inputs[0]].reshape(graph.tensors[node.outputs[0]].shape)
            continue
        spec = KERNELS[kernel]
        assert node.attrs["params_type"] == spec.params_type and list(node.attrs["param_names"]) == list(spec.fields)
        params = params_struct(kernel)(*node.attrs["params"])
        args = []
        for name, want in zip(node.inputs, spec.inputs, strict=True):
            arr = np.ascontiguousarray(values[name])
            assert want == "any" or DTYPES[want] == arr.dtype, f"{kernel}: input {name} is {arr.dtype}, ABI says {want}"
            values[name] = arr
            args.append(arr.ctypes.data)
        for name, want in zip(node.outputs, spec.outputs, strict=True):
            t = graph.tensors[name]
            assert want == "any" or want == t.dtype
            if name not in buffers:
                buffers[name] = Buffer(t.shape, t.dtype, rng)
                values[name] = buffers[name].array
            args.append(buffers[name].array.ctypes.data)
        scratch = None
        if spec.scratch:  # the bytes the lower stage sized, guarded, filled with noise as the arena would be
            scratch = Buffer((int(node.attrs["scratch_bytes"]),), "uint8", rng)
            args.append(scratch.array.ctypes.data if scratch.array.size else None)
        fn = getattr(lib, kernel)
        fn.argtypes = [ctypes.POINTER(params_struct(kernel))] + [ctypes.c_void_p] * len(args)
        fn.restype = None
        fn(ctypes.byref(params), *args)
        for name in node.outputs:
            buffers[name].check_guards(f"{node.name} ({kernel})")
        if scratch is not None:
            scratch.check_guards(f"{node.name} ({kernel}) scratch")
            scratch_used.append(bool(scratch.array.size) and not np.array_equal(scratch.raw, scratch.pattern))
    return {name: np.array(values[name]) for name in graph.outputs}

