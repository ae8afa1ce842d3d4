/* Broadcasting binary kernels: int8 add/sub/mul (TFLite arithmetic, with the
 * requantizers prepared once per call), the int8 add/sub by table, and float
 * add/sub/mul/div. */
#include "kiln_gemm.h"
#include "kiln_kernels.h"
#include "kiln_simd.h"
#include "kiln_stub_math.h"
#include "kiln_mve.h"

/* Walks the 4-D output; runs `body` with out_index and the element offsets ai, bi of a and b. */
#define KILN_BROADCAST_LOOP(p, body)                                                                         \
    do {                                                                                                     \
        int32_t i0, i1, i2, i3, out_index = 0;                                                               \
        for (i0 = 0; i0 < (p)->d0; i0++) {                                                                   \
            for (i1 = 0; i1 < (p)->d1; i1++) {                                                               \
                for (i2 = 0; i2 < (p)->d2; i2++) {                                                           \
                    for (i3 = 0; i3 < (p)->d3; i3++) {                                                       \
                        const int32_t ai = i0 * (p)->a_s0 + i1 * (p)->a_s1 + i2 * (p)->a_s2 + i3 * (p)->a_s3; \
                        const int32_t bi = i0 * (p)->b_s0 + i1 * (p)->b_s1 + i2 * (p)->b_s2 + i3 * (p)->b_s3; \
                        body;                                                                                \
                        out_index++;                                                                         \
                    }                                                                                        \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

/* The requantizers of an int8 add/sub, prepared once per call. */
typedef struct {
    kiln_rq_t a, b, y;
    kiln_out_t out;
} kiln_add_rq_t;

static kiln_add_rq_t kiln_add_rq(const kiln_add_s8_params_t *p)
{
    kiln_add_rq_t r;
    r.a = kiln_rq_channel(p->a_mult, p->a_shift);
    r.b = kiln_rq_channel(p->b_mult, p->b_shift);
    r.y = kiln_rq_channel(p->out_mult, p->out_shift);
    r.out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    return r;
}

static int8_t kiln_add_sub_s8_one(const kiln_add_s8_params_t *p, const kiln_add_rq_t *r, int32_t a, int32_t b,
                                  int subtract)
{
    const int32_t sa = kiln_rq_apply(&r->a, kiln_wrap_s32((uint32_t)(a + p->a_offset) << p->left_shift));
    const int32_t sb = kiln_rq_apply(&r->b, kiln_wrap_s32((uint32_t)(b + p->b_offset) << p->left_shift));
    return kiln_out_s8(&r->out, kiln_rq_apply(&r->y, subtract ? sa - sb : sa + sb));
}

void kiln_add_s8(const kiln_add_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
#ifdef KILN_MVE
    if (kiln_mve_add_s8(p, a, b, y, 0)) {
        return;
    }
#endif
    const kiln_add_rq_t r = kiln_add_rq(p);
    KILN_BROADCAST_LOOP(p, y[out_index] = kiln_add_sub_s8_one(p, &r, a[ai], b[bi], 0));
}

void kiln_sub_s8(const kiln_sub_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
#ifdef KILN_MVE
    if (kiln_mve_add_s8(p, a, b, y, 1)) {
        return;
    }
#endif
    const kiln_add_rq_t r = kiln_add_rq(p);
    KILN_BROADCAST_LOOP(p, y[out_index] = kiln_add_sub_s8_one(p, &r, a[ai], b[bi], 1));
}

#ifdef KILN_SIMD_DSP
/* One element of the table add: LDRSB both, two table loads, ADD, SMMLAR, SUB, then the shift and SSAT
 * (one instruction when the shift is a constant: SSAT shifts first), STRB. */
#define KILN_ADD_TABLE_ONE(SHIFT_SAT)                                                                        \
    "ldrsb %[u], [%[a]], #1\n\t"                                                                              \
    "ldrsb %[v], [%[b]], #1\n\t"                                                                              \
    "ldr %[u], [%[ta], %[u], lsl #2]\n\t"                                                                     \
    "ldr %[v], [%[tb], %[v], lsl #2]\n\t"                                                                     \
    "add %[u], %[u], %[v]\n\t"                                                                                \
    "smmlar %[v], %[u], %[m], %[k]\n\t"                                                                       \
    "sub %[v], %[v], %[u], lsr #31\n\t" SHIFT_SAT                                                             \
    "strb %[v], [%[y]], #1\n\t"
#define KILN_ADD_TABLE_LOOP(SHIFT_SAT)                                                                       \
    __asm__ volatile("1:\n\t" KILN_ADD_TABLE_ONE(SHIFT_SAT) KILN_ADD_TABLE_ONE(SHIFT_SAT)                     \
                         KILN_ADD_TABLE_ONE(SHIFT_SAT) KILN_ADD_TABLE_ONE(SHIFT_SAT)                          \
                     "cmp %[y], %[stop]\n\t"                                                                  \
                     "bne 1b\n\t"                                                                             \
                     : [a] "+r"(a), [b] "+r"(b), [y] "+r"(y), [u] "=&r"(u), [v] "=&r"(v)                      \
                     : [ta] "r"(ta), [tb] "r"(tb), [m] "r"(mult), [k] "r"(round), [e] "r"(shift), [stop] "r"(stop) \
                     : "cc", "memory")
#define KILN_ADD_TABLE_CASE(E)                                                                               \
    case E:                                                                                                  \
        KILN_ADD_TABLE_LOOP("ssat %[v], #8, %[v], asr #" #E "\n\t");                                         \
        break;
#endif

void kiln_add_table_span(const int8_t *a, const int8_t *b, const int32_t *table, int8_t *y, int32_t n, int32_t mult,
                         int32_t round, int32_t shift, int32_t lo, int32_t hi)
{
    const int32_t *ta = table + 128, *tb = table + 384; /* indexed by the signed values */
    int8_t *end = y + n;
#ifdef KILN_SIMD_DSP
    if (lo == -128 && hi == 127 && n >= 4) {
        const int8_t *stop = y + (n & ~3);
        uint32_t u, v;
        switch (shift) { /* the output shifts TFLite's add gives (2 * input scale / 2^20 over the output scale) */
            KILN_ADD_TABLE_CASE(14)
            KILN_ADD_TABLE_CASE(15)
            KILN_ADD_TABLE_CASE(16)
            KILN_ADD_TABLE_CASE(17)
            KILN_ADD_TABLE_CASE(18)
            KILN_ADD_TABLE_CASE(19)
            KILN_ADD_TABLE_CASE(20)
            KILN_ADD_TABLE_CASE(21)
            KILN_ADD_TABLE_CASE(22)
        default:
            KILN_ADD_TABLE_LOOP("asr %[v], %[v], %[e]\n\tssat %[v], #8, %[v]\n\t");
            break;
        }
    }
#endif
    for (; y < end; y++, a++, b++) {
        const int32_t t = kiln_wrap_s32((uint32_t)ta[*a] + (uint32_t)tb[*b]);
        *y = kiln_clamp8(kiln_sat8(kiln_rq2_apply(mult, round, shift, t)), lo, hi);
    }
}

void kiln_add_table_s8(const kiln_add_table_s8_params_t *p, const int8_t *a, const int8_t *b, const int32_t *table,
                       int8_t *y)
{
    kiln_add_table_span(a, b, table, y, p->size, p->out_mult, p->out_round, p->out_shift, p->act_min, p->act_max);
}

void kiln_mul_s8(const kiln_mul_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
    const kiln_rq_t r = kiln_rq_channel(p->out_mult, p->out_shift);
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    KILN_BROADCAST_LOOP(p, {
        const int32_t prod = (a[ai] + p->a_offset) * (b[bi] + p->b_offset);
        y[out_index] = kiln_out_s8(&out, kiln_rq_apply(&r, prod));
    });
}

#define KILN_BINARY_F32(name, expr)                                                                   \
    void name(const kiln_add_f32_params_t *p, const float *a, const float *b, float *y)              \
    {                                                                                                \
        const float lo = kiln_f32_from_bits(p->act_min_bits);                                        \
        const float hi = kiln_f32_from_bits(p->act_max_bits);                                        \
        KILN_BROADCAST_LOOP(p, {                                                                     \
            const float av = a[ai];                                                                  \
            const float bv = b[bi];                                                                  \
            y[out_index] = kiln_clamp_f32_value(expr, lo, hi);                                       \
        });                                                                                          \
    }

KILN_BINARY_F32(kiln_add_f32, av + bv)
KILN_BINARY_F32(kiln_sub_f32, av - bv)
KILN_BINARY_F32(kiln_mul_f32, av * bv)
KILN_BINARY_F32(kiln_div_f32, av / bv)
KILN_BINARY_F32(kiln_maximum_f32, (av > bv || av != av) ? av : bv)
KILN_BINARY_F32(kiln_minimum_f32, (av < bv || av != av) ? av : bv)

void kiln_maximum_s8(const kiln_maximum_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
    KILN_BROADCAST_LOOP(p, y[out_index] = a[ai] > b[bi] ? a[ai] : b[bi]);
}

void kiln_minimum_s8(const kiln_minimum_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
    KILN_BROADCAST_LOOP(p, y[out_index] = a[ai] < b[bi] ? a[ai] : b[bi]);
}
