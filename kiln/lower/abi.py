"""The kernel ABI as the lower stage sees it: each symbol's parameter fields and pointer arguments.

This mirrors `runtime/kiln_kernels.h` (tests check the two agree): the
fields in declaration order, then the element type of every pointer argument
(`any` for dtype-agnostic kernels), inputs before outputs, and whether a
trailing `void *scratch` follows (a region of the arena the plan stage places,
`scratch_bytes` long).
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.ir.graph import AttrValue
from kiln.numerics.fixedpoint import INT32_MAX, INT32_MIN


@dataclass(frozen=True)
class Kernel:
    name: str
    fields: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scratch: bool = False

    @property
    def params_type(self) -> str:
        return f"{self.name}_params_t"


def _f(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WINDOW = _f("k_h k_w stride_h stride_w dil_h dil_w pad_top pad_left")
_BCAST = _f("d0 d1 d2 d3 a_s0 a_s1 a_s2 a_s3 b_s0 b_s1 b_s2 b_s3")
_POOL = _f("n in_h in_w c out_h out_w k_h k_w stride_h stride_w pad_top pad_left")
_PAD = _f("in_d0 in_d1 in_d2 in_d3 pre0 pre1 pre2 pre3 out_d0 out_d1 out_d2 out_d3")
_COPY = _f("outer inner in_stride in_offset out_stride out_offset")
_S8, _U8, _S32, _F32, _ANY = "int8", "uint8", "int32", "float32", "any"
_CONV_S8_IO = ((_S8, _S8, _S32, _S32, _S32), (_S8,))
_RQ = _f("requant scratch_bytes")  # the KILN_RQ_* facts and the scratch the kernel is given
_SCRATCH = frozenset({"kiln_conv2d_s8", "kiln_conv2d_add_s8", "kiln_conv2d_1x1_s8", "kiln_depthwise_conv2d_s8"})
_CONV_F32_IO = ((_F32, _F32, _F32), (_F32,))

_TABLE: list[tuple[str, tuple[str, ...], tuple[tuple[str, ...], tuple[str, ...]]]] = [
    ("kiln_conv2d_s8", _f("n in_h in_w in_c out_h out_w out_c") + _WINDOW + _f("input_zp out_zp act_min act_max") + _RQ, _CONV_S8_IO),
    ("kiln_conv2d_add_s8", _f("n in_h in_w in_c out_h out_w out_c") + _WINDOW + _f("input_zp out_zp act_min act_max") + _RQ
     + _f("add_mult add_round add_shift add_min add_max"), ((_S8, _S8, _S32, _S32, _S32, _S8, _S32), (_S8,))),
    ("kiln_conv2d_1x1_s8", _f("pixels in_c out_c out_zp act_min act_max") + _RQ, _CONV_S8_IO),
    ("kiln_depthwise_conv2d_s8", _f("n in_h in_w in_c out_h out_w ch_mult") + _WINDOW + _f("input_zp out_zp act_min act_max") + _RQ, _CONV_S8_IO),
    ("kiln_fully_connected_s8", _f("batches in_features out_features out_zp act_min act_max requant"), _CONV_S8_IO),
    ("kiln_fully_connected_few_s8", _f("batches in_features out_features out_zp act_min act_max requant"), _CONV_S8_IO),
    ("kiln_batch_matmul_s8", _f("batches m k n a_offset b_offset out_mult out_shift out_zp act_min act_max"), ((_S8, _S8), (_S8,))),
    ("kiln_conv2d_f32", _f("n in_h in_w in_c out_h out_w out_c") + _WINDOW + _f("act_min_bits act_max_bits"), _CONV_F32_IO),
    ("kiln_depthwise_conv2d_f32", _f("n in_h in_w in_c out_h out_w ch_mult") + _WINDOW + _f("act_min_bits act_max_bits"), _CONV_F32_IO),
    ("kiln_fully_connected_f32", _f("batches in_features out_features act_min_bits act_max_bits"), _CONV_F32_IO),
    ("kiln_batch_matmul_f32", _f("batches m k n act_min_bits act_max_bits"), ((_F32, _F32), (_F32,))),
    *[(f"kiln_{op}_s8", _BCAST + _f("a_offset a_mult a_shift b_offset b_mult b_shift left_shift out_mult out_shift out_zp act_min act_max"), ((_S8, _S8), (_S8,))) for op in ("add", "sub")],
    ("kiln_add_table_s8", _f("size out_mult out_round out_shift act_min act_max"), ((_S8, _S8, _S32), (_S8,))),
    ("kiln_mul_s8", _BCAST + _f("a_offset b_offset out_mult out_shift out_zp act_min act_max requant"), ((_S8, _S8), (_S8,))),
    *[(f"kiln_{op}_f32", _BCAST + _f("act_min_bits act_max_bits"), ((_F32, _F32), (_F32,))) for op in ("add", "sub", "mul", "div", "maximum", "minimum")],
    *[(f"kiln_{op}_s8", _BCAST, ((_S8, _S8), (_S8,))) for op in ("maximum", "minimum")],
    *[(f"kiln_{op}_s8", _POOL + _f("act_min act_max"), ((_S8,), (_S8,))) for op in ("max_pool2d", "avg_pool2d")],
    *[(f"kiln_{op}_f32", _POOL + _f("act_min_bits act_max_bits"), ((_F32,), (_F32,))) for op in ("max_pool2d", "avg_pool2d")],
    ("kiln_global_avg_pool_s8", _f("n hw c input_zp mult shift out_zp"), ((_S8,), (_S8,))),
    ("kiln_global_avg_pool_f32", _f("n hw c"), ((_F32,), (_F32,))),
    ("kiln_mean_s8", _f("outer reduce inner input_zp mult shift out_zp"), ((_S8,), (_S8,))),
    ("kiln_layer_norm_s8", _f("rows size input_zp eps_hi eps_lo out_shift bias_shift out_zp act_min act_max"), ((_S8, _S32, _S32), (_S8,))),
    ("kiln_layer_norm_f32", _f("rows size eps_bits act_min_bits act_max_bits"), ((_F32, _F32, _F32), (_F32,))),
    ("kiln_softmax_s8", _f("rows row_size mult shift diff_min"), ((_S8,), (_S8,))),
    ("kiln_softmax_f32", _f("rows row_size beta_bits"), ((_F32,), (_F32,))),
    ("kiln_lut_s8", _f("size"), ((_S8, _S8), (_S8,))),
    ("kiln_lut_u8s8", _f("size"), ((_U8, _S8), (_S8,))),
    ("kiln_lut_s8u8", _f("size"), ((_S8, _S8), (_U8,))),
    *[(f"kiln_{op}_f32", _f("size"), ((_F32,), (_F32,))) for op in ("sigmoid", "tanh", "hardswish", "silu")],
    ("kiln_hardsigmoid_f32", _f("size alpha_bits beta_bits"), ((_F32,), (_F32,))),
    ("kiln_gelu_f32", _f("size approximate"), ((_F32,), (_F32,))),
    ("kiln_leaky_relu_f32", _f("size alpha_bits"), ((_F32,), (_F32,))),
    ("kiln_clamp_f32", _f("size min_bits max_bits"), ((_F32,), (_F32,))),
    ("kiln_lrn_scale_f32", _f("size bias_bits alpha_bits beta_bits"), ((_F32,), (_F32,))),
    ("kiln_quantize_s8", _f("size scale_bits zero_point"), ((_F32,), (_S8,))),
    ("kiln_dequantize_s8", _f("size scale_bits zero_point"), ((_S8,), (_F32,))),
    ("kiln_copy_part", ("elem_size",) + _COPY, ((_ANY,), (_ANY,))),
    ("kiln_requantize_s8", _COPY + _f("in_zp mult shift out_zp"), ((_S8,), (_S8,))),
    ("kiln_slice", _f("elem_size in_d1 in_d2 in_d3 start0 start1 start2 start3 step0 step1 step2 step3 out_d0 out_d1 out_d2 out_d3"), ((_ANY,), (_ANY,))),
    ("kiln_transpose", _f("elem_size in_d0 in_d1 in_d2 in_d3 perm0 perm1 perm2 perm3"), ((_ANY,), (_ANY,))),
    ("kiln_pad_s8", _PAD + ("value",), ((_S8,), (_S8,))),
    ("kiln_pad_f32", _PAD + ("value_bits",), ((_F32,), (_F32,))),
    ("kiln_resize_nearest", _f("elem_size n in_h in_w c out_h out_w"), ((_ANY, _S32, _S32), (_ANY,))),
]

KERNELS: dict[str, Kernel] = {name: Kernel(name, fields, io[0], io[1], name in _SCRATCH) for name, fields, io in _TABLE}


def bind(kernel: str, **params: int) -> dict[str, AttrValue]:
    """The lowered-node attributes of a call to `kernel` with `params` (every field, nothing else)."""
    k = KERNELS[kernel]
    missing = [f for f in k.fields if f not in params]
    extra = sorted(set(params) - set(k.fields))
    if missing or extra:
        raise AssertionError(f"{kernel}: missing params {missing}, unknown params {extra}")
    values = [int(params[f]) for f in k.fields]
    for name, v in zip(k.fields, values):
        if not INT32_MIN <= v <= INT32_MAX:
            raise ValueError(f"{kernel} parameter {name} = {v} does not fit int32")
    return {"kernel": kernel, "params_type": k.params_type, "param_names": list(k.fields), "params": values}
