/* Integer helpers shared by the portable kernels: CMSIS-NN's requantization
 * arithmetic written without undefined behaviour (no signed overflow, no
 * shifts of negative values), plus float parameter decoding. */
#ifndef KILN_STUB_MATH_H
#define KILN_STUB_MATH_H

#include <stdint.h>
#include <string.h>

/* The int32 holding u modulo 2^32 (two's complement wrap, portably). */
static inline int32_t kiln_wrap_s32(uint32_t u)
{
    if (u <= (uint32_t)INT32_MAX) {
        return (int32_t)u;
    }
    return -(int32_t)(UINT32_MAX - u) - 1;
}

/* floor(v / 2^s) for 0 <= s <= 62. */
static inline int64_t kiln_floor_shr64(int64_t v, int32_t s)
{
    if (v >= 0) {
        return v >> s;
    }
    return -((-(v + 1)) >> s) - 1;
}

/* arm_nn_doubling_high_mult_no_sat: (a * b + 2^30) >> 31, wrapped to int32. */
static inline int32_t kiln_doubling_high_mult_no_sat(int32_t a, int32_t b)
{
    int64_t prod = (int64_t)a * (int64_t)b + ((int64_t)1 << 30);
    return kiln_wrap_s32((uint32_t)(uint64_t)kiln_floor_shr64(prod, 31));
}

/* arm_nn_divide_by_power_of_two: x / 2^e rounded half away from zero, 0 <= e <= 62. */
static inline int32_t kiln_divide_by_pow2(int32_t x, int32_t e)
{
    const int64_t mask = ((int64_t)1 << e) - 1;
    const int64_t remainder = (int64_t)x & mask;
    int64_t result = kiln_floor_shr64(x, e);
    const int64_t threshold = (mask >> 1) + (result < 0 ? 1 : 0);
    if (remainder > threshold) {
        result++;
    }
    return (int32_t)result;
}

/* arm_nn_requantize (double rounding); the left shift wraps modulo 2^32. */
static inline int32_t kiln_requantize(int32_t val, int32_t mult, int32_t shift)
{
    const int32_t left = shift > 0 ? shift : 0;
    const int32_t right = shift > 0 ? 0 : -shift;
    const int32_t shifted = kiln_wrap_s32((uint32_t)val << left);
    return kiln_divide_by_pow2(kiln_doubling_high_mult_no_sat(shifted, mult), right);
}

/* out_zp + v clamped to [lo, hi] (max first, then min), as an int8. */
static inline int8_t kiln_output_s8(int32_t v, int32_t out_zp, int32_t lo, int32_t hi)
{
    int64_t r = (int64_t)v + out_zp;
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    return (int8_t)r;
}

/* Half-away-from-zero rounded a / count for count > 0 (TFLite average pooling). */
static inline int32_t kiln_rounded_mean(int32_t sum, int32_t count)
{
    return sum > 0 ? (sum + count / 2) / count : (sum - count / 2) / count;
}

static inline float kiln_f32_from_bits(int32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float kiln_clamp_f32_value(float v, float lo, float hi)
{
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* Accumulate a * b modulo 2^32 (int32 accumulators that may wrap); a, b are int8-range values. */
static inline uint32_t kiln_mac_u32(uint32_t acc, int32_t a, int32_t b)
{
    return acc + (uint32_t)(a * b);
}

#endif /* KILN_STUB_MATH_H */
