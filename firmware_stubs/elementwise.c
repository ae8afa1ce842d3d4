/* Portable elementwise kernels: int8 by table, float activations by formula,
 * and the quantize/dequantize boundaries of float islands. */
#include <math.h>

#include "kiln_kernels.h"
#include "kiln_stub_math.h"

void kiln_lut_s8(const kiln_lut_s8_params_t *p, const int8_t *x, const int8_t *table, int8_t *y)
{
    int32_t i;
    for (i = 0; i < p->size; i++) {
        y[i] = table[x[i] + 128];
    }
}

void kiln_lut_u8s8(const kiln_lut_u8s8_params_t *p, const uint8_t *x, const int8_t *table, int8_t *y)
{
    int32_t i;
    for (i = 0; i < p->size; i++) {
        y[i] = table[x[i] ^ 0x80u];
    }
}

void kiln_lut_s8u8(const kiln_lut_s8u8_params_t *p, const int8_t *x, const int8_t *table, uint8_t *y)
{
    int32_t i;
    for (i = 0; i < p->size; i++) {
        y[i] = (uint8_t)table[x[i] + 128];
    }
}

static float kiln_sigmoid(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

static float kiln_hardsigmoid(float v, float alpha, float beta)
{
    return kiln_clamp_f32_value(alpha * v + beta, 0.0f, 1.0f);
}

#define KILN_UNARY_F32(name, params_t, expr)                      \
    void name(const params_t *p, const float *x, float *y)       \
    {                                                             \
        int32_t i;                                                \
        for (i = 0; i < p->size; i++) {                           \
            const float v = x[i];                                 \
            y[i] = (expr);                                        \
        }                                                         \
    }

KILN_UNARY_F32(kiln_sigmoid_f32, kiln_sigmoid_f32_params_t, kiln_sigmoid(v))
KILN_UNARY_F32(kiln_tanh_f32, kiln_tanh_f32_params_t, tanhf(v))
KILN_UNARY_F32(kiln_hardswish_f32, kiln_hardswish_f32_params_t, v * kiln_hardsigmoid(v, 1.0f / 6.0f, 0.5f))
KILN_UNARY_F32(kiln_silu_f32, kiln_silu_f32_params_t, v * kiln_sigmoid(v))
KILN_UNARY_F32(kiln_hardsigmoid_f32, kiln_hardsigmoid_f32_params_t,
               kiln_hardsigmoid(v, kiln_f32_from_bits(p->alpha_bits), kiln_f32_from_bits(p->beta_bits)))
KILN_UNARY_F32(kiln_leaky_relu_f32, kiln_leaky_relu_f32_params_t, v >= 0.0f ? v : v * kiln_f32_from_bits(p->alpha_bits))
KILN_UNARY_F32(kiln_clamp_f32, kiln_clamp_f32_params_t,
               kiln_clamp_f32_value(v, kiln_f32_from_bits(p->min_bits), kiln_f32_from_bits(p->max_bits)))
KILN_UNARY_F32(kiln_lrn_scale_f32, kiln_lrn_scale_f32_params_t,
               powf(kiln_f32_from_bits(p->bias_bits) + kiln_f32_from_bits(p->alpha_bits) * v, -kiln_f32_from_bits(p->beta_bits)))
KILN_UNARY_F32(kiln_gelu_f32, kiln_gelu_f32_params_t,
               p->approximate ? 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))
                              : 0.5f * v * (1.0f + erff(v * 0.70710678118f)))

void kiln_quantize_s8(const kiln_quantize_s8_params_t *p, const float *x, int8_t *y)
{
    const float scale = kiln_f32_from_bits(p->scale_bits);
    int32_t i;
    for (i = 0; i < p->size; i++) {
        float r = roundf(x[i] / scale);
        r = (r >= -256.0f) ? r : -256.0f; /* also maps NaN to the bottom */
        r = r > 256.0f ? 256.0f : r;
        y[i] = kiln_output_s8((int32_t)r, p->zero_point, -128, 127);
    }
}

void kiln_dequantize_s8(const kiln_dequantize_s8_params_t *p, const int8_t *x, float *y)
{
    const float scale = kiln_f32_from_bits(p->scale_bits);
    int32_t i;
    for (i = 0; i < p->size; i++) {
        y[i] = scale * (float)(x[i] - p->zero_point);
    }
}
