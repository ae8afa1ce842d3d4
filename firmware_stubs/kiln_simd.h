/* The multiply-accumulate primitives of the int8 conv, depthwise and matrix
 * kernels, in portable C or, when __ARM_FEATURE_DSP is defined (Cortex-M4,
 * M7, M33...), with the Arm DSP instructions: SXTB16 widens the even and the
 * odd bytes of a word to two int16 lanes, SMLAD multiplies both lane pairs
 * and adds them to an accumulator, SMLABB/SMLATT multiply one lane pair.
 * The kernels are written around these primitives only, so the host builds
 * (and their sanitizers) run the same blocking, bounds and padding logic that
 * the firmware runs. Every accumulation wraps modulo 2^32 on both paths. */
#ifndef KILN_SIMD_H
#define KILN_SIMD_H

#include <stdint.h>
#include <string.h>

#include "kiln_stub_math.h"

/* The DSP blocks are inline assembly that needs up to 14 registers: the
 * compiler must be optimizing and free to use r7 (no -fno-omit-frame-pointer;
 * such builds define KILN_PORTABLE_KERNELS and get the portable C). */
#if defined(__ARM_FEATURE_DSP) && defined(__OPTIMIZE__) && !defined(KILN_PORTABLE_KERNELS)
#include <arm_acle.h>
#define KILN_SIMD_DSP 1
/* A function holding an assembly block: never inlined, so no caller's live values compete for its registers. */
#define KILN_ASM_BLOCK static __attribute__((noinline, unused)) void
#endif

/* The scratch paths (inputs widened to int16 lanes in scratch, kiln_gemm.h and the depthwise strips) and
 * kiln_mul_s8's lanes (binary.c) pay only with the DSP's paired instructions: without them the widening is
 * extra work and the products are the same MULs, so the portable builds (M0, M3, RISC-V) keep the direct
 * int8 loops. The host tests define KILN_SCRATCH_PATHS_ALWAYS to run the scratch paths' and the lanes'
 * shared C (blocking, bounds, padding) under the sanitizers too. */
#if defined(KILN_SIMD_DSP) || defined(KILN_SCRATCH_PATHS_ALWAYS)
#define KILN_SCRATCH_PATHS 1
#else
#define KILN_SCRATCH_PATHS 0
#endif

/* A function kept out of line: its callers' loops keep their registers. */
#if defined(__GNUC__)
#define KILN_NOINLINE __attribute__((noinline))
#else
#define KILN_NOINLINE
#endif

/* A function inlined into each caller, so the constant arguments of each call specialise its loops. */
#if defined(__GNUC__)
#define KILN_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define KILN_ALWAYS_INLINE static inline
#endif

/* The int8 output of a requantized value v: clamp to [lo - zp, hi - zp] (max
 * first, then min, as kiln_output_s8) then add zp, all in 32 bits. When the
 * bounds are the whole int8 range (`full`), SSAT does it in one instruction
 * after a saturating add. */
typedef struct {
    int32_t zp, lo, hi, full;
} kiln_out_t;

static inline kiln_out_t kiln_out_range(int32_t out_zp, int32_t act_min, int32_t act_max)
{
    kiln_out_t o;
    o.zp = out_zp;
    o.lo = act_min - out_zp;
    o.hi = act_max - out_zp;
    o.full = act_min == -128 && act_max == 127;
    return o;
}

static inline int8_t kiln_out_s8(const kiln_out_t *o, int32_t v)
{
#ifdef KILN_SIMD_DSP
    if (o->full) {
        return (int8_t)__ssat(__qadd(v, o->zp), 8);
    }
#endif
    v = v < o->lo ? o->lo : v;
    v = v > o->hi ? o->hi : v;
    return (int8_t)(v + o->zp);
}

/* Accumulators of a 2-pixel x 2-channel block: a<pixel><channel>. */
typedef struct {
    uint32_t a00, a01, a10, a11;
} kiln_acc2x2_t;

/* Accumulators of 4 output channels of one pixel. */
typedef struct {
    uint32_t a0, a1, a2, a3;
} kiln_acc4_t;

/* Requantize a 2x2 block and store it: pixel 0's channels at y0[c0], y0[c1], pixel 1's at y1[c0], y1[c1].
 * The requantizers come by value and every result is computed before the first store, so the
 * compiler keeps them in registers (an int8 store may alias anything reached through a pointer). */
static inline void kiln_store_2x2(const kiln_acc2x2_t *acc, kiln_rq_t q0, kiln_rq_t q1, kiln_out_t out, int8_t *y0,
                                  int8_t *y1, int32_t c0, int32_t c1)
{
    const int8_t v00 = kiln_out_s8(&out, kiln_rq_apply(&q0, kiln_wrap_s32(acc->a00)));
    const int8_t v10 = kiln_out_s8(&out, kiln_rq_apply(&q0, kiln_wrap_s32(acc->a10)));
    const int8_t v01 = kiln_out_s8(&out, kiln_rq_apply(&q1, kiln_wrap_s32(acc->a01)));
    const int8_t v11 = kiln_out_s8(&out, kiln_rq_apply(&q1, kiln_wrap_s32(acc->a11)));
    y0[c0] = v00;
    y1[c0] = v10;
    y0[c1] = v01;
    y1[c1] = v11;
}

/* Four int8 values at any alignment as one little-endian word (an LDR on Cortex-M). */
static inline uint32_t kiln_load4(const int8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One little-endian word as four int8 values at any alignment (an STR on Cortex-M). */
static inline void kiln_store4(int8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

/* Sum of n int8 values, for the weights that meet padded input positions. */
static inline uint32_t kiln_sum_s8(const int8_t *w, int32_t n)
{
    uint32_t s = 0;
    int32_t i;
    for (i = 0; i < n; i++) {
        s += (uint32_t)(int32_t)w[i];
    }
    return s;
}

#ifdef KILN_SIMD_DSP
/* The odd bytes of v as two int16 lanes (SXTB16 with ROR #8, which ACLE lacks). */
static inline int16x2_t kiln_sxtb16_odd(uint32_t v)
{
    int16x2_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
    return r;
}

/* The 2x2 block over `rows` rows of n elements (n a multiple of 4 * REPS),
 * rows of the pixels `stride` bytes apart and rows of weights consecutive.
 * Per 4 elements, 2 pixel words and 2 weight words are widened once and each
 * used twice. The loop bounds live in memory: the block needs every other
 * register (4 accumulators, 4 pointers, 6 lanes). */
#define KILN_DOT2X2_ROWS_ASM(REPS)                                                                              \
    __asm__("1:\n\t"                                                                                           \
            ".rept " #REPS "\n\t"                                                                              \
            "ldr %[t0], [%[x0]], #4\n\t"                                                                       \
            "ldr %[t2], [%[x1]], #4\n\t"                                                                       \
            "ldr %[t4], [%[w0]], #4\n\t"                                                                       \
            "sxtb16 %[t1], %[t0], ror #8\n\t"                                                                  \
            "sxtb16 %[t0], %[t0]\n\t"                                                                          \
            "sxtb16 %[t3], %[t2], ror #8\n\t"                                                                  \
            "sxtb16 %[t2], %[t2]\n\t"                                                                          \
            "sxtb16 %[t5], %[t4], ror #8\n\t"                                                                  \
            "sxtb16 %[t4], %[t4]\n\t"                                                                          \
            "smlad %[a00], %[t0], %[t4], %[a00]\n\t"                                                           \
            "smlad %[a00], %[t1], %[t5], %[a00]\n\t"                                                           \
            "smlad %[a10], %[t2], %[t4], %[a10]\n\t"                                                           \
            "smlad %[a10], %[t3], %[t5], %[a10]\n\t"                                                           \
            "ldr %[t4], [%[w1]], #4\n\t"                                                                       \
            "sxtb16 %[t5], %[t4], ror #8\n\t"                                                                  \
            "sxtb16 %[t4], %[t4]\n\t"                                                                          \
            "smlad %[a01], %[t0], %[t4], %[a01]\n\t"                                                           \
            "smlad %[a01], %[t1], %[t5], %[a01]\n\t"                                                           \
            "smlad %[a11], %[t2], %[t4], %[a11]\n\t"                                                           \
            "smlad %[a11], %[t3], %[t5], %[a11]\n\t"                                                           \
            ".endr\n\t"                                                                                        \
            "ldr %[t0], %[end]\n\t"                                                                            \
            "cmp %[x0], %[t0]\n\t"                                                                             \
            "bne 1b\n\t"                                                                                       \
            "ldr %[t0], %[rows]\n\t"                                                                           \
            "subs %[t0], %[t0], #1\n\t"                                                                        \
            "beq 2f\n\t"                                                                                       \
            "str %[t0], %[rows]\n\t"                                                                           \
            "ldr %[t1], %[skip]\n\t"                                                                           \
            "add %[x0], %[x0], %[t1]\n\t"                                                                      \
            "add %[x1], %[x1], %[t1]\n\t"                                                                      \
            "ldr %[t1], %[n]\n\t"                                                                              \
            "add %[t1], %[x0], %[t1]\n\t"                                                                      \
            "str %[t1], %[end]\n\t"                                                                            \
            "b 1b\n\t"                                                                                         \
            "2:\n\t"                                                                                           \
            : [a00] "+r"(acc->a00), [a01] "+r"(acc->a01), [a10] "+r"(acc->a10), [a11] "+r"(acc->a11),            \
              [x0] "+r"(x0), [x1] "+r"(x1), [w0] "+r"(w0), [w1] "+r"(w1), [t0] "=&r"(t0), [t1] "=&r"(t1),        \
              [t2] "=&r"(t2), [t3] "=&r"(t3), [t4] "=&r"(t4), [t5] "=&r"(t5), [end] "+m"(end), [rows] "+m"(rows) \
            : [skip] "m"(skip), [n] "m"(n)                                                                     \
            : "cc", "memory")

KILN_ASM_BLOCK kiln_dot2x2_rows_dsp(kiln_acc2x2_t *acc, const int8_t *x0, const int8_t *x1, const int8_t *w0,
                                    const int8_t *w1, int32_t rows, int32_t n, int32_t stride)
{
    const int8_t *end = x0 + n;
    const int32_t skip = stride - n;
    uint32_t t0, t1, t2, t3, t4, t5;
    if (n % 8 == 0) {
        KILN_DOT2X2_ROWS_ASM(2);
    } else {
        KILN_DOT2X2_ROWS_ASM(1);
    }
}
#endif

#include "kiln_v6m.h"

/* acc[p][c] += sum_i xp[i] * wc[i] for i < n: two pixels against two weight rows. */
static inline void kiln_dot_2x2(kiln_acc2x2_t *acc, const int8_t *x0, const int8_t *x1, const int8_t *w0,
                                const int8_t *w1, int32_t n)
{
    int32_t i = 0;
#ifdef KILN_V6M
    if (n > 0) {
        kiln_dot_2x2_v6m(acc, x0, x1, w0, w1, n);
        return;
    }
#endif
#ifdef KILN_SIMD_DSP
    if (n >= 4) {
        i = n & ~3;
        kiln_dot2x2_rows_dsp(acc, x0, x1, w0, w1, 1, i, i);
    }
#endif
    if (i < n) { /* local sums: int8 loads may alias *acc, which would force a store per element */
        uint32_t a00 = acc->a00, a01 = acc->a01, a10 = acc->a10, a11 = acc->a11;
        for (; i < n; i++) {
            const int32_t xa = x0[i], xb = x1[i], wa = w0[i], wb = w1[i];
            a00 += (uint32_t)(xa * wa);
            a01 += (uint32_t)(xa * wb);
            a10 += (uint32_t)(xb * wa);
            a11 += (uint32_t)(xb * wb);
        }
        acc->a00 = a00;
        acc->a01 = a01;
        acc->a10 = a10;
        acc->a11 = a11;
    }
}

/* kiln_dot_2x2 over `rows` rows of n elements: pixel rows `stride` bytes apart, weight rows consecutive. */
static inline void kiln_dot_2x2_rows(kiln_acc2x2_t *acc, const int8_t *x0, const int8_t *x1, const int8_t *w0,
                                     const int8_t *w1, int32_t rows, int32_t n, int32_t stride)
{
    int32_t r;
#ifdef KILN_SIMD_DSP
    if (n % 4 == 0 && n > 0 && rows > 0) {
        kiln_dot2x2_rows_dsp(acc, x0, x1, w0, w1, rows, n, stride);
        return;
    }
#endif
    for (r = 0; r < rows; r++) {
        kiln_dot_2x2(acc, x0 + r * stride, x1 + r * stride, w0 + r * n, w1 + r * n, n);
    }
}

/* acc[j] += x . w_j over n elements (n a multiple of 8) for the 4 weight rows w_j = w + j * n: one
 * pixel (a fully connected layer's input) against 4 rows, its words widened once for all 4. */
#ifdef KILN_SIMD_DSP
KILN_ASM_BLOCK kiln_dot_1x4_dsp(kiln_acc4_t *acc, const int8_t *x, const int8_t *w, int32_t n)
{
    const int8_t *end = x + n, *w1 = w + n, *w2 = w1 + n, *w3 = w2 + n;
    uint32_t t0, t1, t2, t3;
    __asm__("1:\n\t"
            ".rept 2\n\t"
            "ldr %[t0], [%[x]], #4\n\t"
            "sxtb16 %[t1], %[t0], ror #8\n\t"
            "sxtb16 %[t0], %[t0]\n\t"
            "ldr %[t2], [%[w0]], #4\n\t"
            "sxtb16 %[t3], %[t2], ror #8\n\t"
            "sxtb16 %[t2], %[t2]\n\t"
            "smlad %[a0], %[t0], %[t2], %[a0]\n\t"
            "smlad %[a0], %[t1], %[t3], %[a0]\n\t"
            "ldr %[t2], [%[w1]], #4\n\t"
            "sxtb16 %[t3], %[t2], ror #8\n\t"
            "sxtb16 %[t2], %[t2]\n\t"
            "smlad %[a1], %[t0], %[t2], %[a1]\n\t"
            "smlad %[a1], %[t1], %[t3], %[a1]\n\t"
            "ldr %[t2], [%[w2]], #4\n\t"
            "sxtb16 %[t3], %[t2], ror #8\n\t"
            "sxtb16 %[t2], %[t2]\n\t"
            "smlad %[a2], %[t0], %[t2], %[a2]\n\t"
            "smlad %[a2], %[t1], %[t3], %[a2]\n\t"
            "ldr %[t2], [%[w3]], #4\n\t"
            "sxtb16 %[t3], %[t2], ror #8\n\t"
            "sxtb16 %[t2], %[t2]\n\t"
            "smlad %[a3], %[t0], %[t2], %[a3]\n\t"
            "smlad %[a3], %[t1], %[t3], %[a3]\n\t"
            ".endr\n\t"
            "ldr %[t0], %[end]\n\t"
            "cmp %[x], %[t0]\n\t"
            "bne 1b\n\t"
            : [a0] "+r"(acc->a0), [a1] "+r"(acc->a1), [a2] "+r"(acc->a2), [a3] "+r"(acc->a3), [x] "+r"(x),
              [w0] "+r"(w), [w1] "+r"(w1), [w2] "+r"(w2), [w3] "+r"(w3), [t0] "=&r"(t0), [t1] "=&r"(t1),
              [t2] "=&r"(t2), [t3] "=&r"(t3)
            : [end] "m"(end)
            : "cc", "memory");
}
#endif

static inline void kiln_dot_1x4(kiln_acc4_t *acc, const int8_t *x, const int8_t *w, int32_t n)
{
#ifdef KILN_SIMD_DSP
    kiln_dot_1x4_dsp(acc, x, w, n);
#else
    int32_t i, j;
    uint32_t a[4];
    a[0] = acc->a0;
    a[1] = acc->a1;
    a[2] = acc->a2;
    a[3] = acc->a3;
    for (j = 0; j < 4; j++) {
        for (i = 0; i < n; i++) {
            a[j] += (uint32_t)(x[i] * w[j * n + i]);
        }
    }
    acc->a0 = a[0];
    acc->a1 = a[1];
    acc->a2 = a[2];
    acc->a3 = a[3];
#endif
}

/* a0 += x . w0, a1 += x . w1 over n elements: one pixel against two weight rows. */
static inline void kiln_dot_1x2(uint32_t *a0, uint32_t *a1, const int8_t *x, const int8_t *w0, const int8_t *w1,
                                int32_t n)
{
    uint32_t s0 = *a0, s1 = *a1;
    int32_t i = 0;
#ifdef KILN_SIMD_DSP
    for (; i + 4 <= n; i += 4) {
        const uint32_t xv = kiln_load4(x + i), wa = kiln_load4(w0 + i), wb = kiln_load4(w1 + i);
        const int16x2_t xe = __sxtb16(xv), xo = kiln_sxtb16_odd(xv);
        s0 = (uint32_t)__smlad(xo, kiln_sxtb16_odd(wa), __smlad(xe, __sxtb16(wa), (int32_t)s0));
        s1 = (uint32_t)__smlad(xo, kiln_sxtb16_odd(wb), __smlad(xe, __sxtb16(wb), (int32_t)s1));
    }
#endif
    for (; i < n; i++) {
        s0 += (uint32_t)(x[i] * w0[i]);
        s1 += (uint32_t)(x[i] * w1[i]);
    }
    *a0 = s0;
    *a1 = s1;
}

/* acc[j] += x[j] * w[j] for the 4 channels j < 4 of one depthwise tap. */
static inline void kiln_mac_4ch(kiln_acc4_t *acc, const int8_t *x, const int8_t *w)
{
#ifdef KILN_SIMD_DSP
    const uint32_t xv = kiln_load4(x), wv = kiln_load4(w);
    const int16x2_t xe = __sxtb16(xv), xo = kiln_sxtb16_odd(xv), we = __sxtb16(wv), wo = kiln_sxtb16_odd(wv);
    acc->a0 = (uint32_t)__smlabb(xe, we, (int32_t)acc->a0);
    acc->a1 = (uint32_t)__smlabb(xo, wo, (int32_t)acc->a1);
    acc->a2 = (uint32_t)__smlatt(xe, we, (int32_t)acc->a2);
    acc->a3 = (uint32_t)__smlatt(xo, wo, (int32_t)acc->a3);
#else
    acc->a0 += (uint32_t)(x[0] * w[0]);
    acc->a1 += (uint32_t)(x[1] * w[1]);
    acc->a2 += (uint32_t)(x[2] * w[2]);
    acc->a3 += (uint32_t)(x[3] * w[3]);
#endif
}

/* acc[j] += v * w[j] for the 4 channels j < 4 that one input value v feeds (a depthwise tap whose channel
 * multiplier is a multiple of 4), -2^15 <= v < 2^15: SMLABB and SMLABT take v from the low lane. */
static inline void kiln_mac_1x4(kiln_acc4_t *acc, int32_t v, const int8_t *w)
{
#ifdef KILN_SIMD_DSP
    const uint32_t wv = kiln_load4(w);
    const int16x2_t we = __sxtb16(wv), wo = kiln_sxtb16_odd(wv);
    acc->a0 = (uint32_t)__smlabb(v, we, (int32_t)acc->a0);
    acc->a2 = (uint32_t)__smlabt(v, we, (int32_t)acc->a2);
    acc->a1 = (uint32_t)__smlabb(v, wo, (int32_t)acc->a1);
    acc->a3 = (uint32_t)__smlabt(v, wo, (int32_t)acc->a3);
#else
    acc->a0 += (uint32_t)(v * w[0]);
    acc->a1 += (uint32_t)(v * w[1]);
    acc->a2 += (uint32_t)(v * w[2]);
    acc->a3 += (uint32_t)(v * w[3]);
#endif
}

/* A 3x3 depthwise window of 4 channels: kiln_mac_4ch at x + ky * dy + kx * dx with weights
 * w + (3 * ky + kx) * ch, for ky, kx < 3. */
#ifdef KILN_SIMD_DSP
KILN_ASM_BLOCK kiln_mac_4ch_3x3_dsp(kiln_acc4_t *acc, const int8_t *x, int32_t dx, int32_t dy, const int8_t *w,
                                    int32_t ch)
{
    const int32_t next_row = dy - dx;
    uint32_t t0, t1, t2, t3;
#define KILN_MAC4(X, W)                                                                                       \
    "ldr %[t0], " X "\n\t"                                                                                     \
    "ldr %[t1], " W "\n\t"                                                                                     \
    "sxtb16 %[t2], %[t0]\n\t"                                                                                  \
    "sxtb16 %[t3], %[t1]\n\t"                                                                                  \
    "smlabb %[a0], %[t2], %[t3], %[a0]\n\t"                                                                    \
    "smlatt %[a2], %[t2], %[t3], %[a2]\n\t"                                                                    \
    "sxtb16 %[t2], %[t0], ror #8\n\t"                                                                          \
    "sxtb16 %[t3], %[t1], ror #8\n\t"                                                                          \
    "smlabb %[a1], %[t2], %[t3], %[a1]\n\t"                                                                    \
    "smlatt %[a3], %[t2], %[t3], %[a3]\n\t"
#define KILN_ROW3                                                                                             \
    KILN_MAC4("[%[x]]", "[%[w]]")                                                                             \
    KILN_MAC4("[%[x], %[dx]]", "[%[w], %[ch]]")                                                               \
    "add %[x], %[x], %[dx]\n\t"                                                                                \
    "add %[w], %[w], %[ch]\n\t" KILN_MAC4("[%[x], %[dx]]", "[%[w], %[ch]]")
    __asm__(KILN_ROW3 "add %[x], %[x], %[nr]\n\t"
                      "add %[w], %[w], %[ch], lsl #1\n\t" KILN_ROW3 "add %[x], %[x], %[nr]\n\t"
                                                                   "add %[w], %[w], %[ch], lsl #1\n\t" KILN_ROW3
            : [a0] "+r"(acc->a0), [a1] "+r"(acc->a1), [a2] "+r"(acc->a2), [a3] "+r"(acc->a3), [x] "+r"(x), [w] "+r"(w),
              [t0] "=&r"(t0), [t1] "=&r"(t1), [t2] "=&r"(t2), [t3] "=&r"(t3)
            : [dx] "r"(dx), [nr] "r"(next_row), [ch] "r"(ch)
            : "memory");
#undef KILN_ROW3
#undef KILN_MAC4
}
#endif

static inline void kiln_mac_4ch_3x3(kiln_acc4_t *acc, const int8_t *x, int32_t dx, int32_t dy, const int8_t *w,
                                    int32_t ch)
{
#ifdef KILN_SIMD_DSP
    kiln_mac_4ch_3x3_dsp(acc, x, dx, dy, w, ch);
#else
    int32_t ky, kx;
    for (ky = 0; ky < 3; ky++) {
        for (kx = 0; kx < 3; kx++) {
            kiln_mac_4ch(acc, x + ky * dy + kx * dx, w + (3 * ky + kx) * ch);
        }
    }
#endif
}

/* ---- int16 lanes and the fast requantization ------------------------------------------------
 * A word holds two int16 lanes (low, high). The row kernels keep activations and weights widened in
 * scratch memory in this form: a word of four int8 channels c0..c3 becomes the lanes (c0, c2) and
 * (c1, c3) (SXTB16 without and with ROR #8), so one LDRD fetches four channels ready to multiply. */

/* The int16 lanes (lo, hi) as one word. */
static inline uint32_t kiln_pack16(int32_t lo, int32_t hi)
{
    return (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16;
}

/* The even bytes of v (bytes 0 and 2) as int16 lanes: SXTB16. */
static inline uint32_t kiln_lanes_even(uint32_t v)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__sxtb16((int8x4_t)v);
#else
    return kiln_pack16((int8_t)(v & 0xFFu), (int8_t)(v >> 16 & 0xFFu));
#endif
}

/* The odd bytes of v (bytes 1 and 3) as int16 lanes: SXTB16 with ROR #8. */
static inline uint32_t kiln_lanes_odd(uint32_t v)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)kiln_sxtb16_odd(v);
#else
    return kiln_pack16((int8_t)(v >> 8 & 0xFFu), (int8_t)(v >> 24));
#endif
}

static inline int32_t kiln_lane_lo(uint32_t v)
{
    return (int16_t)(uint16_t)(v & 0xFFFFu);
}

static inline int32_t kiln_lane_hi(uint32_t v)
{
    return (int16_t)(uint16_t)(v >> 16);
}

/* acc + lo(a) * lo(b) + hi(a) * hi(b), modulo 2^32: SMLAD. */
static inline uint32_t kiln_smlad(uint32_t a, uint32_t b, uint32_t acc)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__smlad((int16x2_t)a, (int16x2_t)b, (int32_t)acc);
#else
    return acc + (uint32_t)(kiln_lane_lo(a) * kiln_lane_lo(b)) + (uint32_t)(kiln_lane_hi(a) * kiln_lane_hi(b));
#endif
}

/* acc + lo(a) * lo(b) (SMLABB) and acc + hi(a) * hi(b) (SMLATT), modulo 2^32. */
static inline uint32_t kiln_smlabb(uint32_t a, uint32_t b, uint32_t acc)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__smlabb((int32_t)a, (int32_t)b, (int32_t)acc);
#else
    return acc + (uint32_t)(kiln_lane_lo(a) * kiln_lane_lo(b));
#endif
}

static inline uint32_t kiln_smlatt(uint32_t a, uint32_t b, uint32_t acc)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__smlatt((int32_t)a, (int32_t)b, (int32_t)acc);
#else
    return acc + (uint32_t)(kiln_lane_hi(a) * kiln_lane_hi(b));
#endif
}

/* The requantization of KILN_RQ_FAST layers (runtime/kiln_kernels.h): with e = -shift in [1, 23], a
 * multiplier m > 0 and the accumulator doubled, t = 2 * acc (|acc| < 2^30),
 *     out = floor((round + floor((t * m + 2^31) / 2^32) - [t < 0]) / 2^e),  round = 2^(e-1) + zp * 2^e,
 * is arm_nn_requantize(acc, m, shift) + zp: SMMULR(2 * acc, m) is the doubling high multiply; the
 * rounding divide adds 2^(e-1) less one for negative values (whose sign is the accumulator's whenever
 * it is not zero, and a zero takes either); the zero point rides in the same sum. SMMLAR adds `round`,
 * so the whole of it is SMMLAR, SUB, ASR; SSAT clamps to int8. No intermediate leaves int32. */
typedef struct {
    int32_t mult, round, shift; /* shift: the right shift e >= 1 */
} kiln_rq2_t;

static inline kiln_rq2_t kiln_rq2_channel(int32_t mult, int32_t shift, int32_t out_zp)
{
    kiln_rq2_t r;
    r.mult = mult;
    r.shift = -shift;
    r.round = (int32_t)((uint32_t)1 << (-shift - 1)) + out_zp * (int32_t)((uint32_t)1 << -shift);
    return r;
}

/* acc + floor((a * b + 2^31) / 2^32): SMMLAR (no overflow on the KILN_RQ_FAST domain). */
static inline int32_t kiln_smmlar(int32_t a, int32_t b, int32_t acc)
{
#ifdef KILN_SIMD_DSP
    int32_t r;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
    return r;
#else
    return acc + (int32_t)kiln_floor_shr64((int64_t)a * b + ((int64_t)1 << 31), 32);
#endif
}

/* The requantized value plus the zero point (before clamping) of a doubled accumulator t. */
static inline int32_t kiln_rq2_apply(int32_t mult, int32_t round, int32_t shift, int32_t t)
{
    const int32_t u = kiln_smmlar(t, mult, round) - (int32_t)((uint32_t)t >> 31);
#ifdef KILN_SIMD_DSP
    return u >> shift; /* GCC shifts signed values arithmetically */
#else
    return kiln_asr32(u, shift);
#endif
}

/* The same requantization with the parameters as the kernel gets them, each in one instruction: with
 * e1 = e - 1 = ~shift and zp21 = 2 * zp + 1, round = zp21 * 2^e1, and the shift by e is one by e1 then
 * one by 1, which SSAT takes as its operand shift (floor divisions compose). Returns the int8-saturated
 * value. */
static inline int32_t kiln_rq2_sat8(int32_t mult, int32_t e1, int32_t zp21, int32_t t)
{
    const int32_t u = kiln_smmlar(t, mult, (int32_t)((uint32_t)zp21 << e1)) - (int32_t)((uint32_t)t >> 31);
#ifdef KILN_SIMD_DSP
    int32_t r;
    __asm__("ssat %0, #8, %1, asr #1" : "=r"(r) : "r"(u >> e1));
    return r;
#else
    const int32_t v = kiln_asr32(kiln_asr32(u, e1), 1);
    return v < -128 ? -128 : v > 127 ? 127 : v;
#endif
}

/* v clamped to the int8 range: SSAT. */
static inline int32_t kiln_sat8(int32_t v)
{
#ifdef KILN_SIMD_DSP
    return __ssat(v, 8);
#else
    return v < -128 ? -128 : v > 127 ? 127 : v;
#endif
}

/* v clamped to [lo, hi] (max first, then min), lo and hi int8: the activation range. */
static inline int8_t kiln_clamp8(int32_t v, int32_t lo, int32_t hi)
{
    v = v < lo ? lo : v;
    return (int8_t)(v > hi ? hi : v);
}

/* off + the even bytes of v (bytes 0 and 2), lane by lane modulo 2^16: SXTAB16. */
static inline uint32_t kiln_lanes_even_add(uint32_t off, uint32_t v)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__sxtab16((int16x2_t)off, (int8x4_t)v);
#else
    return kiln_pack16(kiln_lane_lo(off) + (int8_t)(v & 0xFFu), kiln_lane_hi(off) + (int8_t)(v >> 16 & 0xFFu));
#endif
}

/* off + the odd bytes of v (bytes 1 and 3), lane by lane modulo 2^16: SXTAB16 with ROR #8. */
static inline uint32_t kiln_lanes_odd_add(uint32_t off, uint32_t v)
{
#ifdef KILN_SIMD_DSP
    uint32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(off), "r"(v));
    return r;
#else
    return kiln_pack16(kiln_lane_lo(off) + (int8_t)(v >> 8 & 0xFFu), kiln_lane_hi(off) + (int8_t)(v >> 24));
#endif
}

/* a + b lane by lane modulo 2^16: SADD16 (GE flags unused). */
static inline uint32_t kiln_add16(uint32_t a, uint32_t b)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__sadd16((int16x2_t)a, (int16x2_t)b);
#else
    return kiln_pack16(kiln_lane_lo(a) + kiln_lane_lo(b), kiln_lane_hi(a) + kiln_lane_hi(b));
#endif
}

/* lo(a) * lo(b) (SMULBB) and hi(a) * hi(b) (SMULTT). */
static inline int32_t kiln_smulbb(uint32_t a, uint32_t b)
{
#ifdef KILN_SIMD_DSP
    int32_t r;
    __asm__("smulbb %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return kiln_lane_lo(a) * kiln_lane_lo(b);
#endif
}

static inline int32_t kiln_smultt(uint32_t a, uint32_t b)
{
#ifdef KILN_SIMD_DSP
    int32_t r;
    __asm__("smultt %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return kiln_lane_hi(a) * kiln_lane_hi(b);
#endif
}

/* Both int16 lanes of v clamped to the int8 range: SSAT16. */
static inline uint32_t kiln_sat8x2(uint32_t v)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__ssat16((int16x2_t)v, 8);
#else
    const int32_t lo = kiln_lane_lo(v), hi = kiln_lane_hi(v);
    return kiln_pack16(lo < -128 ? -128 : lo > 127 ? 127 : lo, hi < -128 ? -128 : hi > 127 ? 127 : hi);
#endif
}

/* The int16 lanes (lo, hi) of two values each within int16 as one word: PKHBT. */
static inline uint32_t kiln_pkhbt(int32_t lo, int32_t hi)
{
#ifdef KILN_SIMD_DSP
    uint32_t r;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
    return r;
#else
    return kiln_pack16(lo, hi);
#endif
}

/* The four int8 lanes of the int16 lanes e = (v0, v2) and o = (v1, v3), each in [-128, 127], as one
 * word v0 v1 v2 v3 (little-endian): UXTB16, UXTB16, ORR with a shifted operand. */
static inline uint32_t kiln_bytes4(uint32_t e, uint32_t o)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__uxtb16((int8x4_t)e) | (uint32_t)__uxtb16((int8x4_t)o) << 8;
#else
    return (e & 0x00FF00FFu) | (o & 0x00FF00FFu) << 8;
#endif
}

/* Each int8 lane of w raised to the one of lo4 (max): SSUB8 sets the GE flags of the bytes where its first
 * operand is not below its second, SEL picks by them. */
static inline uint32_t kiln_max8x4(uint32_t w, uint32_t lo4)
{
#ifdef KILN_SIMD_DSP
    uint32_t t;
    __asm__("ssub8 %1, %0, %2\n\t"
            "sel %0, %0, %2"
            : "+r"(w), "=&r"(t)
            : "r"(lo4)
            : "cc");
    return w;
#else
    uint32_t r = 0;
    int32_t k;
    for (k = 0; k < 32; k += 8) {
        const int8_t v = (int8_t)(w >> k & 0xFFu), lo = (int8_t)(lo4 >> k & 0xFFu);
        r |= (uint32_t)(uint8_t)(v < lo ? lo : v) << k;
    }
    return r;
#endif
}

/* w - d4 byte by byte modulo 2^8: USUB8 (GE flags unused). */
static inline uint32_t kiln_sub8x4(uint32_t w, uint32_t d4)
{
#ifdef KILN_SIMD_DSP
    return (uint32_t)__usub8((uint8x4_t)w, (uint8x4_t)d4);
#else
    return ((w | 0x80808080u) - (d4 & 0x7F7F7F7Fu)) ^ ((w ^ ~d4) & 0x80808080u);
#endif
}

#endif /* KILN_SIMD_H */
