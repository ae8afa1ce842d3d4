/* Portable softmax kernels: int8 as CMSIS-NN's arm_softmax_s8 (gemmlowp
 * fixed-point exp, 12 accumulation bits), float directly. */
#include <math.h>

#include "kiln_kernels.h"
#include "kiln_stub_math.h"

#define KILN_ACCUM_BITS 12

/* arm_nn_doubling_high_mult: saturating, rounding (a * b) / 2^31 toward zero. */
static int32_t kiln_mul_sat(int32_t a, int32_t b)
{
    const int64_t nudge = ((a < 0) != (b < 0)) ? 1 - ((int64_t)1 << 30) : ((int64_t)1 << 30);
    const int64_t total = (int64_t)a * (int64_t)b + nudge;
    if (a == INT32_MIN && b == INT32_MIN) {
        return INT32_MAX;
    }
    return (int32_t)(total / ((int64_t)1 << 31));
}

/* arm_nn_mult_by_power_of_two: x * 2^e saturated to int32, 1 <= e <= 2. */
static int32_t kiln_mul_pow2_sat(int32_t x, int32_t e)
{
    const int32_t thresh = (int32_t)(((int64_t)1 << (31 - e)) - 1);
    if (x > thresh) {
        return INT32_MAX;
    }
    if (x < -thresh) {
        return INT32_MIN;
    }
    return (int32_t)((int64_t)x * ((int64_t)1 << e));
}

/* arm_nn_exp_on_negative_values: exp of a Q5.26 value <= 0, as Q0.31. */
static int32_t kiln_exp_on_negative(int32_t val)
{
    static const int32_t factors[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
    const int32_t mod_minus_quarter = kiln_wrap_s32(((uint32_t)val & ((1u << 24) - 1u)) - (1u << 24));
    const int32_t remainder = mod_minus_quarter - val;
    const int32_t x = mod_minus_quarter * 32 + (1 << 28);
    const int32_t x2 = kiln_mul_sat(x, x);
    const int32_t poly = kiln_divide_by_pow2(
        kiln_mul_sat(kiln_divide_by_pow2(kiln_mul_sat(x2, x2), 2) + kiln_mul_sat(x2, x), 715827883) + x2, 1);
    int32_t result = 1895147668 + kiln_mul_sat(1895147668, x + poly);
    int32_t bit;
    if (val == 0) {
        return INT32_MAX;
    }
    for (bit = 0; bit < 7; bit++) {
        if ((uint32_t)remainder & (1u << (24 + bit))) {
            result = kiln_mul_sat(result, factors[bit]);
        }
    }
    return result;
}

/* arm_nn_one_over_one_plus_x_for_x_in_0_1 */
static int32_t kiln_one_over_one_plus_x(int32_t val)
{
    const int64_t sum = (int64_t)val + INT32_MAX;
    const int32_t half_denominator = (int32_t)((sum + (sum >= 0 ? 1 : -1)) / 2);
    int32_t x = 1515870810 + kiln_mul_sat(half_denominator, -1010580540);
    int32_t i;
    for (i = 0; i < 3; i++) {
        x += kiln_mul_pow2_sat(kiln_mul_sat(x, (1 << 29) - kiln_mul_sat(half_denominator, x)), 2);
    }
    return kiln_mul_pow2_sat(x, 1);
}

static int32_t kiln_count_leading_zeros(uint32_t v)
{
    int32_t n = 0;
    while (n < 32 && !(v & 0x80000000u)) {
        v <<= 1;
        n++;
    }
    return n;
}

void kiln_softmax_s8(const kiln_softmax_s8_params_t *p, const int8_t *x, int8_t *y)
{
    int32_t row, col;
    for (row = 0; row < p->rows; row++) {
        const int8_t *in = x + row * p->row_size;
        int8_t *out = y + row * p->row_size;
        int32_t max = in[0];
        int32_t sum = 0;
        int32_t headroom, shifted_scale, bits_over_unit;
        for (col = 1; col < p->row_size; col++) {
            max = in[col] > max ? in[col] : max;
        }
        for (col = 0; col < p->row_size; col++) {
            const int32_t diff = in[col] - max;
            if (diff >= p->diff_min) {
                const int32_t scaled = (int32_t)((int64_t)diff * ((int64_t)1 << p->shift));
                sum += kiln_divide_by_pow2(kiln_exp_on_negative(kiln_mul_sat(scaled, p->mult)), KILN_ACCUM_BITS);
            }
        }
        headroom = kiln_count_leading_zeros((uint32_t)sum);
        shifted_scale = kiln_one_over_one_plus_x(kiln_wrap_s32(((uint32_t)sum << headroom) - 0x80000000u));
        bits_over_unit = KILN_ACCUM_BITS - headroom + 23;
        for (col = 0; col < p->row_size; col++) {
            const int32_t diff = in[col] - max;
            if (diff >= p->diff_min) {
                const int32_t scaled = (int32_t)((int64_t)diff * ((int64_t)1 << p->shift));
                const int32_t e = kiln_exp_on_negative(kiln_mul_sat(scaled, p->mult));
                out[col] = kiln_output_s8(kiln_divide_by_pow2(kiln_mul_sat(shifted_scale, e), bits_over_unit), -128,
                                          -128, 127);
            } else {
                out[col] = -128;
            }
        }
    }
}

void kiln_softmax_f32(const kiln_softmax_f32_params_t *p, const float *x, float *y)
{
    const float beta = kiln_f32_from_bits(p->beta_bits);
    int32_t row, col;
    for (row = 0; row < p->rows; row++) {
        const float *in = x + row * p->row_size;
        float *out = y + row * p->row_size;
        float max = beta * in[0];
        float sum = 0.0f;
        for (col = 1; col < p->row_size; col++) {
            const float v = beta * in[col];
            max = v > max ? v : max;
        }
        for (col = 0; col < p->row_size; col++) {
            out[col] = expf(beta * in[col] - max);
            sum += out[col];
        }
        for (col = 0; col < p->row_size; col++) {
            out[col] /= sum;
        }
    }
}
