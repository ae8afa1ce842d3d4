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

/* The kernel taps k < k_n with 0 <= origin + k * dil < size: [*lo, *hi). */
static inline void kiln_tap_range(int32_t origin, int32_t dil, int32_t k_n, int32_t size, int32_t *lo, int32_t *hi)
{
    *lo = origin >= 0 ? 0 : (-origin + dil - 1) / dil;
    *hi = origin + (k_n - 1) * dil < size ? k_n : (size - origin + dil - 1) / dil;
    if (*hi < *lo) {
        *hi = *lo;
    }
}

/* The outputs [*lo, *hi) of `out_n` whose whole window (k_n taps, dilation dil, stride, pad) lies
 * in an input of `size`: the interior, where kernels check no bounds. */
static inline void kiln_interior(int32_t out_n, int32_t size, int32_t k_n, int32_t stride, int32_t dil, int32_t pad,
                                 int32_t *lo, int32_t *hi)
{
    const int32_t last = size - 1 - (k_n - 1) * dil + pad; /* the window fits while o * stride <= last */
    *lo = (pad + stride - 1) / stride;
    *hi = last < 0 ? 0 : last / stride + 1;
    *hi = *hi > out_n ? out_n : *hi;
    *lo = *lo > *hi ? *hi : *lo;
}

/* floor(v / 2^s) for 0 <= s <= 31 (an arithmetic shift, written without shifting a negative value). */
static inline int32_t kiln_asr32(int32_t v, int32_t s)
{
    return v >= 0 ? v >> s : ~(~v >> s);
}

/* arm_nn_requantize of one output channel, prepared once for many values.
 * With a right shift e >= 1 both roundings fold into one 64-bit multiply-add:
 * floor((v*m + 2^30 + 2^(30+e) - [v*m < 0] * 2^31) / 2^(31+e)), where the
 * 2^31 correction (ties away from zero) only ever borrows from the high word.
 * Exact for the lower stage's multipliers: m in [0, 2^31), -31 <= shift <= 30. */
typedef struct {
    int32_t mult, left, right_m1; /* right_m1 = right shift - 1, or -1 with no right shift */
    uint32_t round_lo, round_hi;  /* 2^30 + 2^(30 + right shift) (just 2^30 with no right shift) */
} kiln_rq_t;

static inline kiln_rq_t kiln_rq_channel(int32_t mult, int32_t shift)
{
    kiln_rq_t r;
    r.mult = mult;
    r.left = shift > 0 ? shift : 0;
    r.right_m1 = shift < 0 ? -shift - 1 : -1;
    r.round_lo = shift == -1 ? 0xC0000000u : 0x40000000u;
    r.round_hi = shift < -1 ? (uint32_t)1 << (-shift - 2) : 0;
    return r;
}

static inline int32_t kiln_rq_apply(const kiln_rq_t *r, int32_t val)
{
    const int32_t s = r->right_m1 < 0 ? kiln_wrap_s32((uint32_t)val << r->left) : val;
    uint32_t lo = r->round_lo, hi = r->round_hi;
#if defined(__ARM_FEATURE_DSP) && defined(__OPTIMIZE__)
    /* one SMLAL: GCC otherwise sometimes widens mult to 64 bits and multiplies 64 x 64 */
    __asm__("smlal %0, %1, %2, %3" : "+r"(lo), "+r"(hi) : "r"(s), "r"(r->mult));
#else
    const uint64_t x = (uint64_t)((int64_t)s * r->mult) + ((uint64_t)hi << 32 | lo);
    lo = (uint32_t)x;
    hi = (uint32_t)(x >> 32);
#endif
    if (r->right_m1 < 0) {
        return kiln_wrap_s32(hi << 1 | lo >> 31);
    } else {
        const uint32_t borrow = ((uint32_t)(s ^ r->mult) & ~lo) >> 31;
        return kiln_asr32(kiln_wrap_s32(hi - borrow), r->right_m1);
    }
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
