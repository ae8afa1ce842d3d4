/* Kiln kernel ABI: every symbol generated code may call.
 *
 * Every kernel has the signature
 *     void kiln_xxx(const kiln_xxx_params_t *p, const T *in0, ..., T *out0, ...);
 * with a flat struct of int32_t fields that the lower stage folds at compile
 * time. Float parameters travel as their IEEE-754 binary32 bit pattern in an
 * int32_t field (`*_bits`), so every struct is plain integers.
 *
 * Conventions:
 * - activations are NHWC; conv weights OHWI, depthwise weights 1HWC (channel
 *   index = input channel * ch_mult + m), fully-connected weights [out][in];
 * - int8 conv/depthwise/fc: `bias` already holds bias - input_zp * sum(w)
 *   over the whole kernel window, so the input zero point is never
 *   subtracted; a padded input position takes the value `input_zp` instead
 *   of being skipped. `mult`/`shift` are per output channel (Q31 multiplier
 *   and shift of arm_nn_requantize, double rounding); accumulation is int32
 *   modulo 2^32;
 * - every int8 multiplier/shift pair (conv, fc, add, sub, mul) is what the
 *   lower stage's QuantizeMultiplier gives: 0 <= mult < 2^31 and
 *   -31 <= shift <= 30; the kernels fold both roundings into one 64-bit
 *   multiply-add, exact on that domain only;
 * - `act_min`/`act_max` of int8 kernels are int8 clamp bounds applied after
 *   the output zero point (max first, then min);
 * - pooling windows never count padded positions;
 * - broadcasting binary ops see 4-D shapes [d0][d1][d2][d3]; `a_s*`/`b_s*`
 *   are element strides of each input per output dimension (0 broadcasts);
 * - dtype-agnostic data movement kernels take `elem_size` in bytes;
 * - the int8 conv, depthwise, fully-connected and mul kernels get `requant`, the
 *   KILN_RQ_* facts the lower stage proved about the layer (0 claims
 *   nothing and is always correct);
 * - a kernel declared with a trailing `void *scratch` gets `scratch_bytes`
 *   bytes of the arena there, live during the call only (the plan stage
 *   places them). Its fast path needs the amount stated with the kernel;
 *   given less (0 included) it takes a path without scratch, same results.
 *
 * The portable implementations live in firmware_stubs/; a firmware may
 * supply optimized ones with identical results.
 */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KILN_RQ_FAST: every output channel's shift lies in [-23, -1] with a multiplier above 0, and every
 * accumulator (the folded bias plus any partial sum of products, for any int8 input) lies in
 * (-2^30, 2^30): requantization can run on the doubled accumulator in 32 bits (kiln_simd.h).
 * KILN_RQ_FULL: act_min = -128 and act_max = 127, so saturating to int8 is the whole clamp.
 * KILN_RQ_UNIFORM (fully connected layers): every output channel has the same multiplier and shift. */
#define KILN_RQ_FAST 1
#define KILN_RQ_FULL 2
#define KILN_RQ_UNIFORM 4

/* ---- convolution and fully connected, int8 ------------------------------ */

/* General 2-D convolution. Pads bottom/right follow from out_h/out_w. Its fast path widens the windows
 * of four output pixels at a time to int16 in scratch (zero point at padded taps) and needs
 *     16 * out_c + 9 * K4 + 3 bytes,  K4 = k_h * k_w * in_c rounded up to a multiple of 4. */
typedef struct {
    int32_t n, in_h, in_w, in_c, out_h, out_w, out_c;
    int32_t k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int32_t input_zp, out_zp, act_min, act_max, requant, scratch_bytes;
} kiln_conv2d_s8_params_t;
void kiln_conv2d_s8(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                    const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y, void *scratch);

/* kiln_conv2d_s8 whose output feeds an add or sub of the same shape, fused by the lower stage: the conv's
 * int8 result v (its own out_zp, act_min, act_max) meets the other operand r as in kiln_add_table_s8,
 * v's terms at table[v + 128] and r's at table[384 + r]; the add's requantization and activation range
 * are the add_* fields. y may be r (each r element is read before its y element is written). Its fast
 * path needs the conv's scratch plus the conv outputs of 16 pixels (64 below 16 channels): 16 * out_c bytes
 * (64 * out_c). */
typedef struct {
    int32_t n, in_h, in_w, in_c, out_h, out_w, out_c;
    int32_t k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int32_t input_zp, out_zp, act_min, act_max, requant, scratch_bytes;
    int32_t add_mult, add_round, add_shift, add_min, add_max;
} kiln_conv2d_add_s8_params_t;
void kiln_conv2d_add_s8(const kiln_conv2d_add_s8_params_t *p, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, const int8_t *r,
                        const int32_t *table, int8_t *y, void *scratch);

/* 1x1 convolution, stride 1, no padding: a matrix product over pixels. Its fast path widens four pixels
 * at a time in scratch and needs 16 * out_c + 9 * K4 + 3 bytes, K4 = in_c rounded up to a multiple of 4. */
typedef struct {
    int32_t pixels, in_c, out_c, out_zp, act_min, act_max, requant, scratch_bytes;
} kiln_conv2d_1x1_s8_params_t;
void kiln_conv2d_1x1_s8(const kiln_conv2d_1x1_s8_params_t *p, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y,
                        void *scratch);

/* Depthwise convolution with channel multiplier ch_mult (out_c = in_c * ch_mult). Its fast path widens
 * strips of padded input rows of four channels to int16 in scratch: a strip of R rows takes
 *     4 * (2 * k_h * k_w + 24) + 3 + 8 * cols * R bytes,
 * cols = (out_w - 1) * stride_w + (k_w - 1) * dil_w + 1 (the padded columns the windows reach); R is at
 * least one window's (k_h - 1) * dil_h + 1 rows, and all (out_h - 1) * stride_h + (k_h - 1) * dil_h + 1
 * padded rows are widened once each (a shorter strip widens the rows strips share again). A ch_mult that
 * is a multiple of 4 takes no scratch: its path without it is the fast one. */
typedef struct {
    int32_t n, in_h, in_w, in_c, out_h, out_w, ch_mult;
    int32_t k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int32_t input_zp, out_zp, act_min, act_max, requant, scratch_bytes;
} kiln_depthwise_conv2d_s8_params_t;
void kiln_depthwise_conv2d_s8(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                              const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y,
                              void *scratch);

/* y[b][o] = requantize(bias[o] + sum_i x[b][i] * w[o][i]). */
typedef struct {
    int32_t batches, in_features, out_features, out_zp, act_min, act_max, requant;
} kiln_fully_connected_s8_params_t;
void kiln_fully_connected_s8(const kiln_fully_connected_s8_params_t *p, const int8_t *x, const int8_t *w,
                             const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y);

/* The same product for at most 16 input features with KILN_RQ_FAST (both required): the input row
 * widened once into registers and each weight row read as whole words. A symbol of its own so that only
 * images with such a layer link its code. */
typedef struct {
    int32_t batches, in_features, out_features, out_zp, act_min, act_max, requant;
} kiln_fully_connected_few_s8_params_t;
void kiln_fully_connected_few_s8(const kiln_fully_connected_few_s8_params_t *p, const int8_t *x, const int8_t *w,
                                 const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y);

/* y[b] = requantize((a[b] + a_offset) x (b[b] + b_offset)) for batches of
 * [m][k] by [k][n] matrices: a product of two activations (attention), as
 * TFLite's BATCH_MATMUL. */
typedef struct {
    int32_t batches, m, k, n, a_offset, b_offset, out_mult, out_shift, out_zp, act_min, act_max;
} kiln_batch_matmul_s8_params_t;
void kiln_batch_matmul_s8(const kiln_batch_matmul_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);

/* ---- convolution and fully connected, float ----------------------------- */

typedef struct {
    int32_t n, in_h, in_w, in_c, out_h, out_w, out_c;
    int32_t k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int32_t act_min_bits, act_max_bits;
} kiln_conv2d_f32_params_t;
void kiln_conv2d_f32(const kiln_conv2d_f32_params_t *p, const float *x, const float *w, const float *bias, float *y);

typedef struct {
    int32_t n, in_h, in_w, in_c, out_h, out_w, ch_mult;
    int32_t k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int32_t act_min_bits, act_max_bits;
} kiln_depthwise_conv2d_f32_params_t;
void kiln_depthwise_conv2d_f32(const kiln_depthwise_conv2d_f32_params_t *p, const float *x, const float *w,
                               const float *bias, float *y);

typedef struct {
    int32_t batches, in_features, out_features, act_min_bits, act_max_bits;
} kiln_fully_connected_f32_params_t;
void kiln_fully_connected_f32(const kiln_fully_connected_f32_params_t *p, const float *x, const float *w,
                              const float *bias, float *y);

typedef struct {
    int32_t batches, m, k, n, act_min_bits, act_max_bits;
} kiln_batch_matmul_f32_params_t;
void kiln_batch_matmul_f32(const kiln_batch_matmul_f32_params_t *p, const float *a, const float *b, float *y);

/* ---- broadcasting binary ops --------------------------------------------- */

/* int8 add/sub as TFLite: each input (x + offset) << left_shift is
 * requantized by its multiplier, the sum/difference by the output one. */
typedef struct {
    int32_t d0, d1, d2, d3, a_s0, a_s1, a_s2, a_s3, b_s0, b_s1, b_s2, b_s3;
    int32_t a_offset, a_mult, a_shift, b_offset, b_mult, b_shift, left_shift;
    int32_t out_mult, out_shift, out_zp, act_min, act_max;
} kiln_add_s8_params_t;
typedef kiln_add_s8_params_t kiln_sub_s8_params_t;
void kiln_add_s8(const kiln_add_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);
void kiln_sub_s8(const kiln_sub_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);

/* int8 add/sub of operands of one shape by table, when the lower stage finds the arithmetic fits:
 * table[a + 128] and table[384 + b] hold twice each operand's rescaled value (kiln_add_s8's
 * requantize((x + offset) << left_shift, mult, shift), negated for a subtrahend), their sum t is
 * requantized as the fast path does (runtime/kiln_kernels.h KILN_RQ_FAST, kiln_simd.h):
 * y = clamp(floor((SMMLAR(t, out_mult, out_round) - [t < 0]) / 2^out_shift), act_min, act_max), with
 * out_shift = -shift in [1, 22] and out_round = 2^(out_shift - 1) + out_zp * 2^out_shift. */
typedef struct {
    int32_t size, out_mult, out_round, out_shift, act_min, act_max;
} kiln_add_table_s8_params_t;
void kiln_add_table_s8(const kiln_add_table_s8_params_t *p, const int8_t *a, const int8_t *b, const int32_t *table,
                       int8_t *y);

/* int8 mul: out_zp + requantize((a + a_offset) * (b + b_offset)), clamped to [act_min, act_max].
 * `requant`: KILN_RQ_FAST (the shift and multiplier as the conv kernels' fact; every product of two
 * offset int8 values lies within it) and KILN_RQ_FULL. */
typedef struct {
    int32_t d0, d1, d2, d3, a_s0, a_s1, a_s2, a_s3, b_s0, b_s1, b_s2, b_s3;
    int32_t a_offset, b_offset, out_mult, out_shift, out_zp, act_min, act_max, requant;
} kiln_mul_s8_params_t;
void kiln_mul_s8(const kiln_mul_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);

typedef struct {
    int32_t d0, d1, d2, d3, a_s0, a_s1, a_s2, a_s3, b_s0, b_s1, b_s2, b_s3;
    int32_t act_min_bits, act_max_bits;
} kiln_add_f32_params_t;
typedef kiln_add_f32_params_t kiln_sub_f32_params_t;
typedef kiln_add_f32_params_t kiln_mul_f32_params_t;
typedef kiln_add_f32_params_t kiln_div_f32_params_t;
void kiln_add_f32(const kiln_add_f32_params_t *p, const float *a, const float *b, float *y);
void kiln_sub_f32(const kiln_sub_f32_params_t *p, const float *a, const float *b, float *y);
void kiln_mul_f32(const kiln_mul_f32_params_t *p, const float *a, const float *b, float *y);
void kiln_div_f32(const kiln_div_f32_params_t *p, const float *a, const float *b, float *y);

/* Elementwise maximum/minimum (TFLite's MAXIMUM/MINIMUM): int8 compares the values, which share one
 * scale and zero point; the float versions ignore their activation fields (always +-inf). */
typedef struct {
    int32_t d0, d1, d2, d3, a_s0, a_s1, a_s2, a_s3, b_s0, b_s1, b_s2, b_s3;
} kiln_maximum_s8_params_t;
typedef kiln_maximum_s8_params_t kiln_minimum_s8_params_t;
typedef kiln_add_f32_params_t kiln_maximum_f32_params_t;
typedef kiln_add_f32_params_t kiln_minimum_f32_params_t;
void kiln_maximum_s8(const kiln_maximum_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);
void kiln_minimum_s8(const kiln_minimum_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y);
void kiln_maximum_f32(const kiln_maximum_f32_params_t *p, const float *a, const float *b, float *y);
void kiln_minimum_f32(const kiln_minimum_f32_params_t *p, const float *a, const float *b, float *y);

/* ---- pooling --------------------------------------------------------------- */

/* Max pool (clamped to the activation range) and average pool (sum of the
 * in-image positions divided by their count, rounded half away from zero). */
typedef struct {
    int32_t n, in_h, in_w, c, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left;
    int32_t act_min, act_max;
} kiln_pool2d_s8_params_t;
typedef kiln_pool2d_s8_params_t kiln_max_pool2d_s8_params_t;
typedef kiln_pool2d_s8_params_t kiln_avg_pool2d_s8_params_t;
void kiln_max_pool2d_s8(const kiln_max_pool2d_s8_params_t *p, const int8_t *x, int8_t *y);
void kiln_avg_pool2d_s8(const kiln_avg_pool2d_s8_params_t *p, const int8_t *x, int8_t *y);

typedef struct {
    int32_t n, in_h, in_w, c, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left;
    int32_t act_min_bits, act_max_bits;
} kiln_pool2d_f32_params_t;
typedef kiln_pool2d_f32_params_t kiln_max_pool2d_f32_params_t;
typedef kiln_pool2d_f32_params_t kiln_avg_pool2d_f32_params_t;
void kiln_max_pool2d_f32(const kiln_max_pool2d_f32_params_t *p, const float *x, float *y);
void kiln_avg_pool2d_f32(const kiln_avg_pool2d_f32_params_t *p, const float *x, float *y);

/* Mean over hw = H*W positions per (batch, channel). int8 as TFLite's MEAN:
 * y = clamp(out_zp + requantize(sum(x - input_zp), mult, shift)), 1/hw folded
 * into mult/shift, so the output has its own quantization. */
typedef struct {
    int32_t n, hw, c, input_zp, mult, shift, out_zp;
} kiln_global_avg_pool_s8_params_t;
typedef struct {
    int32_t n, hw, c;
} kiln_global_avg_pool_f32_params_t;
void kiln_global_avg_pool_s8(const kiln_global_avg_pool_s8_params_t *p, const int8_t *x, int8_t *y);
void kiln_global_avg_pool_f32(const kiln_global_avg_pool_f32_params_t *p, const float *x, float *y);

/* TFLite Micro's int8 MEAN (QuantizedMeanOrSum): x viewed as [outer][reduce][inner], each
 * output the sum over `reduce` less reduce * input_zp, requantized by mult/shift (1/reduce
 * folded in), plus out_zp, saturated. */
typedef struct {
    int32_t outer, reduce, inner, input_zp, mult, shift, out_zp;
} kiln_mean_s8_params_t;
void kiln_mean_s8(const kiln_mean_s8_params_t *p, const int8_t *x, int8_t *y);

/* ---- layer normalization (over the last axis) ------------------------------ */

/* int8, in integers only: with d = x - input_zp over a row, S = sum d and
 * V = size * sum d^2 - S^2 + eps (eps = eps_hi * 2^31 + eps_lo, the epsilon in
 * input steps), s = isqrt(V * 4^F) in [2^30, 2^31), inv = floor(2^62 / s),
 * n = round((size * d - S) * inv / 2^(62 - F - KILN_LAYER_NORM_FRACTION)),
 * y = clamp(out_zp + round((n * gamma + beta * 2^bias_shift) / 2^out_shift)),
 * roundings half up, in int64; gamma and beta int32 per element of the row. */
#define KILN_LAYER_NORM_FRACTION 16
typedef struct {
    int32_t rows, size, input_zp, eps_hi, eps_lo, out_shift, bias_shift, out_zp, act_min, act_max;
} kiln_layer_norm_s8_params_t;
void kiln_layer_norm_s8(const kiln_layer_norm_s8_params_t *p, const int8_t *x, const int32_t *gamma, const int32_t *beta,
                        int8_t *y);

typedef struct {
    int32_t rows, size, eps_bits, act_min_bits, act_max_bits;
} kiln_layer_norm_f32_params_t;
void kiln_layer_norm_f32(const kiln_layer_norm_f32_params_t *p, const float *x, const float *gamma, const float *beta,
                         float *y);

/* ---- softmax --------------------------------------------------------------- */

/* arm_softmax_s8: mult/shift scale input differences into Q5.26, differences
 * below diff_min give -128. Output scale 1/256, zero point -128. */
typedef struct {
    int32_t rows, row_size, mult, shift, diff_min;
} kiln_softmax_s8_params_t;
void kiln_softmax_s8(const kiln_softmax_s8_params_t *p, const int8_t *x, int8_t *y);

typedef struct {
    int32_t rows, row_size, beta_bits;
} kiln_softmax_f32_params_t;
void kiln_softmax_f32(const kiln_softmax_f32_params_t *p, const float *x, float *y);

/* ---- elementwise ----------------------------------------------------------- */

/* int8 elementwise function by table: y[i] = table[x[i] + 128]. */
typedef struct {
    int32_t size;
} kiln_lut_s8_params_t;
void kiln_lut_s8(const kiln_lut_s8_params_t *p, const int8_t *x, const int8_t *table, int8_t *y);
/* The same table lookup at a uint8 model input or output (a TFLite file's QUANTIZE): entry i is the
 * output byte for input byte i ^ 0x80, as for kiln_lut_s8. */
typedef kiln_lut_s8_params_t kiln_lut_u8s8_params_t;
typedef kiln_lut_s8_params_t kiln_lut_s8u8_params_t;
void kiln_lut_u8s8(const kiln_lut_u8s8_params_t *p, const uint8_t *x, const int8_t *table, int8_t *y);
void kiln_lut_s8u8(const kiln_lut_s8u8_params_t *p, const int8_t *x, const int8_t *table, uint8_t *y);

typedef struct {
    int32_t size;
} kiln_unary_f32_params_t;
typedef kiln_unary_f32_params_t kiln_sigmoid_f32_params_t;
typedef kiln_unary_f32_params_t kiln_tanh_f32_params_t;
typedef kiln_unary_f32_params_t kiln_hardswish_f32_params_t;
typedef kiln_unary_f32_params_t kiln_silu_f32_params_t;
void kiln_sigmoid_f32(const kiln_sigmoid_f32_params_t *p, const float *x, float *y);
void kiln_tanh_f32(const kiln_tanh_f32_params_t *p, const float *x, float *y);
void kiln_hardswish_f32(const kiln_hardswish_f32_params_t *p, const float *x, float *y);
void kiln_silu_f32(const kiln_silu_f32_params_t *p, const float *x, float *y);

/* clip(alpha * x + beta, 0, 1) */
typedef struct {
    int32_t size, alpha_bits, beta_bits;
} kiln_hardsigmoid_f32_params_t;
void kiln_hardsigmoid_f32(const kiln_hardsigmoid_f32_params_t *p, const float *x, float *y);

/* approximate: 0 exact (erf), 1 tanh approximation */
typedef struct {
    int32_t size, approximate;
} kiln_gelu_f32_params_t;
void kiln_gelu_f32(const kiln_gelu_f32_params_t *p, const float *x, float *y);

typedef struct {
    int32_t size, alpha_bits;
} kiln_leaky_relu_f32_params_t;
void kiln_leaky_relu_f32(const kiln_leaky_relu_f32_params_t *p, const float *x, float *y);

typedef struct {
    int32_t size, min_bits, max_bits;
} kiln_clamp_f32_params_t;
void kiln_clamp_f32(const kiln_clamp_f32_params_t *p, const float *x, float *y);

/* LRN's factor (bias + alpha * x)^-beta, alpha already divided by the window size */
typedef struct {
    int32_t size, bias_bits, alpha_bits, beta_bits;
} kiln_lrn_scale_f32_params_t;
void kiln_lrn_scale_f32(const kiln_lrn_scale_f32_params_t *p, const float *x, float *y);

/* ---- quantization boundaries ------------------------------------------------ */

/* y = clamp(round_half_away(x / scale) + zero_point, -128, 127) */
typedef struct {
    int32_t size, scale_bits, zero_point;
} kiln_quantize_s8_params_t;
void kiln_quantize_s8(const kiln_quantize_s8_params_t *p, const float *x, int8_t *y);

/* y = scale * (float)(x - zero_point) */
typedef struct {
    int32_t size, scale_bits, zero_point;
} kiln_dequantize_s8_params_t;
void kiln_dequantize_s8(const kiln_dequantize_s8_params_t *p, const int8_t *x, float *y);

/* ---- data movement ------------------------------------------------------------ */

/* For o < outer, i < inner (elements):
 *     y[o * out_stride + out_offset + i] = x[o * in_stride + in_offset + i]
 * One call per concat input (or split output). */
typedef struct {
    int32_t elem_size, outer, inner, in_stride, in_offset, out_stride, out_offset;
} kiln_copy_part_params_t;
void kiln_copy_part(const kiln_copy_part_params_t *p, const void *x, void *y);

/* The copy_part geometry on int8 values, each rescaled to other quantization:
 * y = clamp(out_zp + requantize(x - in_zp, mult, shift), -128, 127). */
typedef struct {
    int32_t outer, inner, in_stride, in_offset, out_stride, out_offset;
    int32_t in_zp, mult, shift, out_zp;
} kiln_requantize_s8_params_t;
void kiln_requantize_s8(const kiln_requantize_s8_params_t *p, const int8_t *x, int8_t *y);

/* 4-D strided slice: y[i0][i1][i2][i3] = x[start_k + i_k * step_k ...],
 * steps may be negative. */
typedef struct {
    int32_t elem_size, in_d1, in_d2, in_d3;
    int32_t start0, start1, start2, start3, step0, step1, step2, step3;
    int32_t out_d0, out_d1, out_d2, out_d3;
} kiln_slice_params_t;
void kiln_slice(const kiln_slice_params_t *p, const void *x, void *y);

/* 4-D transpose: output dimension k is input dimension perm_k. */
typedef struct {
    int32_t elem_size, in_d0, in_d1, in_d2, in_d3, perm0, perm1, perm2, perm3;
} kiln_transpose_params_t;
void kiln_transpose(const kiln_transpose_params_t *p, const void *x, void *y);

/* 4-D constant pad: pre_k elements before dimension k, the rest after up to out_d_k. */
typedef struct {
    int32_t in_d0, in_d1, in_d2, in_d3, pre0, pre1, pre2, pre3;
    int32_t out_d0, out_d1, out_d2, out_d3, value;
} kiln_pad_s8_params_t;
void kiln_pad_s8(const kiln_pad_s8_params_t *p, const int8_t *x, int8_t *y);

typedef struct {
    int32_t in_d0, in_d1, in_d2, in_d3, pre0, pre1, pre2, pre3;
    int32_t out_d0, out_d1, out_d2, out_d3, value_bits;
} kiln_pad_f32_params_t;
void kiln_pad_f32(const kiln_pad_f32_params_t *p, const float *x, float *y);

/* Nearest resize of NHWC data: output row r reads input row rows[r], column c cols[c]. */
typedef struct {
    int32_t elem_size, n, in_h, in_w, c, out_h, out_w;
} kiln_resize_nearest_params_t;
void kiln_resize_nearest(const kiln_resize_nearest_params_t *p, const void *x, const int32_t *rows,
                         const int32_t *cols, void *y);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNELS_H */
