"""The integer reference executor for quantized graphs.

`run(graph, feeds, table=INT8_IMPLS)` executes every int8 op with exactly the
integer arithmetic of TFLite's reference kernels (input offsets applied, bias
added, CMSIS-NN requantization, output offset, clamp), deriving multipliers
from the graph's quantization parameters via `kiln.numerics`. Float ops
of float islands run their float implementations; `quantize`/`dequantize`
join the two. The generated C must match this bit for bit.
"""
from kiln.reference import float_ops, int8_conv, int8_ops  # noqa: F401  (register implementations)
from kiln.reference.int8_common import INT8_IMPLS, Int8Table

__all__ = ["INT8_IMPLS", "Int8Table"]
