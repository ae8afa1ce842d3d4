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

/* int8 mul: out_zp + requantize((a + a_offset) * (b + b_offset)), clamped. The broadcast walk hands each
 * innermost row, with the rows of the next dimension out, to kiln_mul_rows: rows of both operands, or of
 * one operand times a single value of the other (a map times a per-channel vector or a scalar). With
 * KILN_RQ_FAST the products (below 2^16 in magnitude) take the fast requantization of kiln_simd.h on
 * their doubles, t = 2 (a + a_offset)(b + b_offset): SMMLAR, SUB, ASR, the zero point riding in the
 * rounding term. */
typedef struct {
    int32_t fast, full, mult, round, shift, zp, lo, hi;
    kiln_rq_t rq;
    kiln_out_t out;
} kiln_mul_rq_t;

#if KILN_SCRATCH_PATHS
/* 4 values at a time (n a multiple of 4): the offsets added by SXTAB16 to the even and odd bytes of a word,
 * b's lanes doubled (|2 (b + b_offset)| <= 510), the four products by SMULBB/SMULTT, requantized (each
 * result below 2^15 in magnitude: |t| < 2^17, the multiplier below 1, e >= 1), paired into int16 lanes and
 * saturated by SSAT16, then packed and stored as one word; `clamp` 1 raises the bytes to lo4 by SSUB8/SEL
 * (a ReLU: the upper bound is 127); `clamp` 2 (both bounds) has the results come d = 127 - hi too high (d
 * folded into the rounding term with the zero point: zp + d <= 127 when hi >= zp, as for every range
 * reaching up to zero, so the bounds above hold), so SSAT16 makes the upper bound, raises them to
 * lo4 = lo + d and takes d4 from every byte (USUB8: the bytes are in [lo + d, 127], no byte wraps). A
 * `scalar` b is one value: bb holds its doubled sum in both lanes. The portable builds keep the loop of one value at a time (kiln_mul_rows):
 * these lanes pay only with the DSP's paired instructions. */
KILN_ALWAYS_INLINE void kiln_mul_lanes(const int8_t *a, uint32_t oa, const int8_t *b, uint32_t ob, uint32_t bb, int8_t *y,
                                       int32_t n, int32_t mult, int32_t round, int32_t shift, uint32_t lo4, uint32_t d4,
                                       int scalar, int clamp)
{
    const int8_t *end = a + n;
    for (; a < end; a += 4, y += 4) {
        const uint32_t av = kiln_load4(a);
        const uint32_t ae = kiln_lanes_even_add(oa, av), ao = kiln_lanes_odd_add(oa, av);
        uint32_t be = bb, bo = bb, w;
        if (!scalar) {
            const uint32_t bv = kiln_load4(b);
            be = kiln_lanes_even_add(ob, bv);
            bo = kiln_lanes_odd_add(ob, bv);
            be = kiln_add16(be, be);
            bo = kiln_add16(bo, bo);
            b += 4;
        }
        {
            const int32_t v0 = kiln_rq2_apply(mult, round, shift, kiln_smulbb(ae, be));
            const int32_t v1 = kiln_rq2_apply(mult, round, shift, kiln_smulbb(ao, bo));
            const int32_t v2 = kiln_rq2_apply(mult, round, shift, kiln_smultt(ae, be));
            const int32_t v3 = kiln_rq2_apply(mult, round, shift, kiln_smultt(ao, bo));
            w = kiln_bytes4(kiln_sat8x2(kiln_pkhbt(v0, v2)), kiln_sat8x2(kiln_pkhbt(v1, v3)));
        }
        if (clamp) {
            w = kiln_max8x4(w, lo4);
        }
        if (clamp == 2) {
            w = kiln_sub8x4(w, d4);
        }
        kiln_store4(y, w);
    }
}

/* kiln_mul_rows' fast path over `rows` rows: the lanes for each row's multiple of 4, then its rest. */
KILN_ALWAYS_INLINE void kiln_mul_fast_rows(const kiln_mul_rq_t *r, const int8_t *a, int32_t a_off, int32_t a_row,
                                           const int8_t *b, int32_t b_off, int32_t b_row, int8_t *y, int32_t n,
                                           int32_t rows, int scalar, int clamp)
{
    const int32_t mult = r->mult, round = r->round, shift = r->shift, lo = r->lo, hi = r->hi;
    const int32_t d = clamp == 2 ? 127 - hi : 0, n4 = clamp == 2 && hi < r->zp ? 0 : n & ~3;
    const int32_t lanes_round = round + (int32_t)((uint32_t)d << shift);
    const uint32_t oa = kiln_pack16(a_off, a_off), ob = kiln_pack16(b_off, b_off);
    const uint32_t lo4 = (uint8_t)((lo > hi ? hi : lo) + d) * 0x01010101u, d4 = (uint8_t)d * 0x01010101u; /* lo > hi: all hi */
    int32_t row, i;
    for (row = 0; row < rows; row++, a += a_row, b += b_row, y += n) {
        const int32_t bs = scalar ? 2 * (b[0] + b_off) : 0;
        kiln_mul_lanes(a, oa, b, ob, kiln_pack16(bs, bs), y, n4, mult, lanes_round, shift, lo4, d4, scalar, clamp);
        for (i = n4; i < n; i++) {
            const int32_t t = 2 * (a[i] + a_off) * (b[scalar ? 0 : i] + b_off);
            y[i] = kiln_clamp8(kiln_rq2_apply(mult, round, shift, t), lo, hi);
        }
    }
}
#endif

/* `rows` rows of n values of y, rows of a a_row apart and of b b_row apart, y's consecutive: y[i] from
 * a[i] and b[i * b_step] (b_step 0: one value of b for the whole row). */
static KILN_NOINLINE void kiln_mul_rows(const kiln_mul_rq_t *r, const int8_t *a, int32_t a_off, int32_t a_row,
                                        const int8_t *b, int32_t b_off, int32_t b_step, int32_t b_row, int8_t *y,
                                        int32_t n, int32_t rows)
{
    int32_t row, i;
    if (!r->fast) {
        for (row = 0; row < rows; row++, a += a_row, b += b_row, y += n) {
            for (i = 0; i < n; i++) {
                y[i] = kiln_out_s8(&r->out, kiln_rq_apply(&r->rq, (a[i] + a_off) * (b[i * b_step] + b_off)));
            }
        }
        return;
    }
#if KILN_SCRATCH_PATHS
    {
        const int clamp = r->full ? 0 : r->hi == 127 ? 1 : 2;
        if (b_step && clamp == 0) {
            kiln_mul_fast_rows(r, a, a_off, a_row, b, b_off, b_row, y, n, rows, 0, 0);
        } else if (b_step && clamp == 1) {
            kiln_mul_fast_rows(r, a, a_off, a_row, b, b_off, b_row, y, n, rows, 0, 1);
        } else if (b_step) {
            kiln_mul_fast_rows(r, a, a_off, a_row, b, b_off, b_row, y, n, rows, 0, 2);
        } else if (clamp == 0) {
            kiln_mul_fast_rows(r, a, a_off, a_row, b, b_off, b_row, y, n, rows, 1, 0);
        } else if (clamp == 1) {
            kiln_mul_fast_rows(r, a, a_off, a_row, b, b_off, b_row, y, n, rows, 1, 1);
        } else {
            kiln_mul_fast_rows(r, a, a_off, a_row, b, b_off, b_row, y, n, rows, 1, 2);
        }
    }
#else
    {
        const int32_t mult = r->mult, round = r->round, shift = r->shift, lo = r->lo, hi = r->hi;
        for (row = 0; row < rows; row++, a += a_row, b += b_row, y += n) {
            for (i = 0; i < n; i++) {
                const int32_t t = 2 * (a[i] + a_off) * (b[i * b_step] + b_off);
                y[i] = kiln_clamp8(kiln_rq2_apply(mult, round, shift, t), lo, hi);
            }
        }
    }
#endif
}

void kiln_mul_s8(const kiln_mul_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
    kiln_mul_rq_t r;
    int32_t i0, i1, i3, out_index = 0;
    const int32_t n = p->d3, rows = p->d2, row = n * rows;
    r.fast = (p->requant & KILN_RQ_FAST) != 0;
    r.full = (p->requant & KILN_RQ_FULL) != 0;
    r.rq = kiln_rq_channel(p->out_mult, p->out_shift);
    r.out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    r.zp = p->out_zp;
    r.lo = p->act_min;
    r.hi = p->act_max;
    if (r.fast) {
        const kiln_rq2_t q = kiln_rq2_channel(p->out_mult, p->out_shift, p->out_zp);
        r.mult = q.mult;
        r.round = q.round;
        r.shift = q.shift;
    }
    for (i0 = 0; i0 < p->d0; i0++) {
        for (i1 = 0; i1 < p->d1; i1++, out_index += row) {
            const int8_t *ar = a + i0 * p->a_s0 + i1 * p->a_s1;
            const int8_t *br = b + i0 * p->b_s0 + i1 * p->b_s1;
            if (p->a_s3 == 0 && p->b_s3 == 1) { /* a is the single value of each row: the product commutes */
                kiln_mul_rows(&r, br, p->b_offset, p->b_s2, ar, p->a_offset, 0, p->a_s2, y + out_index, n, rows);
            } else if (p->a_s3 == 1) {
                kiln_mul_rows(&r, ar, p->a_offset, p->a_s2, br, p->b_offset, p->b_s3, p->b_s2, y + out_index, n, rows);
            } else { /* (no merged geometry has it: every output dimension is some operand's) */
                for (i3 = 0; i3 < row; i3++) {
                    kiln_mul_rows(&r, ar + i3 / n * p->a_s2 + i3 % n * p->a_s3, p->a_offset, 0,
                                  br + i3 / n * p->b_s2 + i3 % n * p->b_s3, p->b_offset, 0, 0, y + out_index + i3, 1, 1);
                }
            }
        }
    }
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
