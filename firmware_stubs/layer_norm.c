/* Layer normalization over the last axis: the integer algorithm of kiln/numerics/layernorm.py
 * (every intermediate bounded below 2^62 for rows of up to 65536 values), and float. */
#include <math.h>

#include "kiln_kernels.h"
#include "kiln_stub_math.h"

/* floor(sqrt(v)), exactly: one result bit per step. */
static uint64_t kiln_isqrt64(uint64_t v)
{
    uint64_t root = 0, bit = (uint64_t)1 << 62;
    while (bit > v) {
        bit >>= 2;
    }
    while (bit != 0) {
        if (v >= root + bit) {
            v -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    return root;
}

static int32_t kiln_bit_length64(uint64_t v)
{
    int32_t n = 0;
    while (v != 0) {
        v >>= 1;
        n++;
    }
    return n;
}

/* (v + 2^(s-1)) / 2^s rounded down: half up, 1 <= s <= 62. */
static int64_t kiln_round_shr64(int64_t v, int32_t s)
{
    return kiln_floor_shr64(v + ((int64_t)1 << (s - 1)), s);
}

void kiln_layer_norm_s8(const kiln_layer_norm_s8_params_t *p, const int8_t *x, const int32_t *gamma, const int32_t *beta,
                        int8_t *y)
{
    const int64_t eps = ((int64_t)p->eps_hi << 31) + p->eps_lo;
    int32_t r, i;
    for (r = 0; r < p->rows; r++) {
        const int8_t *row = x + r * p->size;
        int64_t total = 0, squares = 0, v, inv;
        int32_t f, shift;
        for (i = 0; i < p->size; i++) {
            const int64_t d = row[i] - p->input_zp;
            total += d;
            squares += d * d;
        }
        v = p->size * squares - total * total + eps;
        if (v < 1) {
            v = 1;
        }
        f = (62 - kiln_bit_length64((uint64_t)v)) / 2;
        inv = (int64_t)((((uint64_t)1) << 62) / kiln_isqrt64((uint64_t)v << (2 * f)));
        shift = 62 - f - KILN_LAYER_NORM_FRACTION;
        for (i = 0; i < p->size; i++) {
            const int64_t t = p->size * (int64_t)(row[i] - p->input_zp) - total;
            const int64_t n = kiln_round_shr64(t * inv, shift);
            const int64_t acc = n * gamma[i] + (int64_t)beta[i] * ((int64_t)1 << p->bias_shift);
            int64_t q = kiln_round_shr64(acc, p->out_shift) + p->out_zp;
            q = q < p->act_min ? p->act_min : q;
            q = q > p->act_max ? p->act_max : q;
            y[r * p->size + i] = (int8_t)q;
        }
    }
}

void kiln_layer_norm_f32(const kiln_layer_norm_f32_params_t *p, const float *x, const float *gamma, const float *beta,
                         float *y)
{
    const float eps = kiln_f32_from_bits(p->eps_bits);
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    int32_t r, i;
    for (r = 0; r < p->rows; r++) {
        const float *row = x + r * p->size;
        float mean = 0.0f, var = 0.0f, inv;
        for (i = 0; i < p->size; i++) {
            mean += row[i];
        }
        mean /= (float)p->size;
        for (i = 0; i < p->size; i++) {
            var += (row[i] - mean) * (row[i] - mean);
        }
        inv = 1.0f / sqrtf(var / (float)p->size + eps);
        for (i = 0; i < p->size; i++) {
            y[r * p->size + i] = kiln_clamp_f32_value((row[i] - mean) * inv * gamma[i] + beta[i], lo, hi);
        }
    }
}
