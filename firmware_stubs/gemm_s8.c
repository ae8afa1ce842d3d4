/* The int8 matrix core of the scratch paths (kiln_gemm.h): four pixels
 * against one output channel at a time, the pixels' widened values read
 * from scratch, each weight word widened once for all four. */
#include "kiln_gemm.h"
#include "kiln_kernels.h"
#include "kiln_simd.h"
#include "kiln_stub_math.h"

void kiln_gemm_widen(uint32_t *at, const int8_t *in, int32_t groups, int32_t twice)
{
#ifdef KILN_SIMD_DSP
    const int8_t *end = in + 4 * groups;
    uint32_t v, e;
    if (groups <= 0) {
        return;
    }
#define KILN_GEMM_WIDEN_ASM(TWICE)                                                                           \
    __asm__ volatile("1:\n\t"                                                                                 \
                     "ldr %[v], [%[in]], #4\n\t"                                                              \
                     "sxtb16 %[e], %[v]\n\t"                                                                  \
                     "sxtb16 %[v], %[v], ror #8\n\t" TWICE                                                    \
                     "strd %[e], %[v], [%[at]], #32\n\t"                                                      \
                     "cmp %[in], %[end]\n\t"                                                                  \
                     "bne 1b\n\t"                                                                             \
                     : [at] "+r"(at), [in] "+r"(in), [v] "=&r"(v), [e] "=&r"(e)                               \
                     : [end] "r"(end)                                                                         \
                     : "cc", "memory")
    if (twice) {
        KILN_GEMM_WIDEN_ASM("sadd16 %[e], %[e], %[e]\n\tsadd16 %[v], %[v], %[v]\n\t");
    } else {
        KILN_GEMM_WIDEN_ASM("");
    }
#undef KILN_GEMM_WIDEN_ASM
#else
    const uint32_t keep = twice ? 0xFFFEFFFEu : 0xFFFFFFFFu; /* a doubled word drops the bit carried between lanes */
    int32_t g;
    for (g = 0; g < groups; g++, at += 8, in += 4) {
        const uint32_t word = kiln_load4(in);
        at[0] = kiln_lanes_even(word) << (twice != 0) & keep;
        at[1] = kiln_lanes_odd(word) << (twice != 0) & keep;
    }
#endif
}

void kiln_gemm_fill(uint32_t *at, uint32_t v2, int32_t groups)
{
    uint32_t *end = at + 8 * groups;
    for (; at < end; at += 8) {
        at[0] = at[1] = v2;
    }
}

#ifdef KILN_SIMD_DSP
/* One group: a weight word widened, met by the four pixels' lanes at px. r4, r5, r6, r8 take LDM's lanes
 * (ascending registers, avoiding the frame pointer r7). */
#define KILN_GEMM4_GROUP                                                                                     \
    "ldr %[wo], [%[w]], #4\n\t"                                                                               \
    "sxtb16 %[we], %[wo]\n\t"                                                                                 \
    "sxtb16 %[wo], %[wo], ror #8\n\t"                                                                         \
    "ldm %[px]!, {r4, r5, r6, r8}\n\t"                                                                        \
    "smlad %[a0], r4, %[we], %[a0]\n\t"                                                                       \
    "smlad %[a0], r5, %[wo], %[a0]\n\t"                                                                       \
    "smlad %[a1], r6, %[we], %[a1]\n\t"                                                                       \
    "smlad %[a1], r8, %[wo], %[a1]\n\t"                                                                       \
    "ldm %[px]!, {r4, r5, r6, r8}\n\t"                                                                        \
    "smlad %[a2], r4, %[we], %[a2]\n\t"                                                                       \
    "smlad %[a2], r5, %[wo], %[a2]\n\t"                                                                       \
    "smlad %[a3], r6, %[we], %[a3]\n\t"                                                                       \
    "smlad %[a3], r8, %[wo], %[a3]\n\t"

/* a0..a3 (pixels 0..3) += the block's groups [px, end) times the weights from w (one word per group). */
#define KILN_GEMM4_ASM(REPS)                                                                                 \
    __asm__ volatile("1:\n\t"                                                                                 \
                     ".rept " #REPS "\n\t"                                                                    \
                     KILN_GEMM4_GROUP                                                                         \
                     ".endr\n\t"                                                                              \
                     "cmp %[px], %[end]\n\t"                                                                  \
                     "bne 1b\n\t"                                                                             \
                     : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [w] "+r"(dot_w),            \
                       [px] "+r"(dot_px), [we] "=&r"(we), [wo] "=&r"(wo)                                      \
                     : [end] "r"(dot_end)                                                                     \
                     : "r4", "r5", "r6", "r8", "cc", "memory")
#endif

/* a0..a3 += sum over the first 4 * groups values of pixel p's lanes from px times the weights from w. */
#define KILN_GEMM_DOT4(px, w, groups)                                                                        \
    do {                                                                                                     \
        if ((groups) > 0) {                                                                                  \
            KILN_GEMM_DOT4_BODY(px, w, groups);                                                              \
        }                                                                                                    \
    } while (0)
#ifdef KILN_SIMD_DSP
#define KILN_GEMM_DOT4_BODY(px_, w_, groups_)                                                                \
    do {                                                                                                     \
        const uint32_t *dot_px = (px_), *dot_end = dot_px + 8 * (groups_);                                  \
        const int8_t *dot_w = (w_);                                                                          \
        uint32_t we, wo;                                                                                     \
        if ((groups_) % 2 == 0) {                                                                            \
            KILN_GEMM4_ASM(2);                                                                               \
        } else {                                                                                             \
            KILN_GEMM4_ASM(1);                                                                               \
        }                                                                                                    \
    } while (0)
#else
#define KILN_GEMM_DOT4_BODY(px_, w_, groups_)                                                                \
    do {                                                                                                     \
        const uint32_t *dot_px = (px_), *dot_end = dot_px + 8 * (groups_);                                  \
        const int8_t *dot_w = (w_);                                                                          \
        for (; dot_px < dot_end; dot_px += 8, dot_w += 4) {                                                  \
            const uint32_t word = kiln_load4(dot_w), we = kiln_lanes_even(word), wo = kiln_lanes_odd(word);   \
            a0 = kiln_smlad(dot_px[1], wo, kiln_smlad(dot_px[0], we, a0));                                   \
            a1 = kiln_smlad(dot_px[3], wo, kiln_smlad(dot_px[2], we, a1));                                   \
            a2 = kiln_smlad(dot_px[5], wo, kiln_smlad(dot_px[4], we, a2));                                   \
            a3 = kiln_smlad(dot_px[7], wo, kiln_smlad(dot_px[6], we, a3));                                   \
        }                                                                                                    \
    } while (0)
#endif

/* The lanes of the last k % 4 weights of a row at w, the lanes past k zero (read one by one: the row
 * may end the array). */
static void kiln_gemm_tail(const int8_t *w, int32_t rest, uint32_t *we, uint32_t *wo)
{
    int8_t last[4] = {0, 0, 0, 0};
    int32_t i;
    uint32_t word;
    for (i = 0; i < rest; i++) {
        last[i] = w[i];
    }
    word = kiln_load4(last);
    *we = kiln_lanes_even(word);
    *wo = kiln_lanes_odd(word);
}

void kiln_gemm_prepare(const kiln_gemm_t *g)
{
    uint32_t *t = g->table;
    int32_t o;
    for (o = 0; o < g->out_c; o++, t += 4) {
        const kiln_rq2_t q = kiln_rq2_channel(g->mult[o], g->shift[o], g->out_zp);
        t[0] = (uint32_t)g->bias[o] << 1;
        t[1] = (uint32_t)q.mult;
        t[2] = (uint32_t)q.round;
        t[3] = (uint32_t)q.shift;
    }
}

#ifdef KILN_SIMD_DSP
/* Channels [0, n) of four whole pixels with KILN_RQ_FAST and KILN_RQ_FULL, in one assembly loop: per
 * channel the doubled bias from the table, the dot product over `groups` groups (the weights row
 * continues where the last one ended, moved by `adjust` bytes), then SMMLAR, SUB, ASR, SSAT and STRB per
 * pixel (pixels `c` bytes apart in y). The accumulators, weights and table pointers and y live in
 * registers; the block start, loop bounds and pixel offsets on the stack. */
#define KILN_GEMM_RQ(A)                                                                                      \
    "smmlar %[we], " A ", r4, r5\n\t"                                                                         \
    "sub %[we], %[we], " A ", lsr #31\n\t"                                                                    \
    "asr %[we], %[we], r6\n\t"                                                                                \
    "ssat %[we], #8, %[we]\n\t"
#define KILN_GEMM_ROWS_ASM(REPS, ADJUST)                                                                     \
    __asm__ volatile("0:\n\t"                                                                                 \
                     "ldr %[a0], [%[tbl]], #4\n\t"                                                            \
                     "mov %[a1], %[a0]\n\t"                                                                   \
                     "mov %[a2], %[a0]\n\t"                                                                   \
                     "mov %[a3], %[a0]\n\t"                                                                   \
                     "ldr %[px], %[cols]\n\t"                                                                 \
                     "1:\n\t"                                                                                 \
                     ".rept " #REPS "\n\t"                                                                    \
                     KILN_GEMM4_GROUP                                                                         \
                     ".endr\n\t"                                                                              \
                     "ldr %[wo], %[dend]\n\t"                                                                 \
                     "cmp %[px], %[wo]\n\t"                                                                   \
                     "bne 1b\n\t" ADJUST                                                                      \
                     "ldm %[tbl]!, {r4, r5, r6}\n\t" KILN_GEMM_RQ("%[a0]")                                    \
                     "strb %[we], [%[y]]\n\t" KILN_GEMM_RQ("%[a1]")                                           \
                     "ldr %[wo], %[c]\n\t"                                                                    \
                     "strb %[we], [%[y], %[wo]]\n\t" KILN_GEMM_RQ("%[a2]")                                    \
                     "strb %[we], [%[y], %[wo], lsl #1]\n\t" KILN_GEMM_RQ("%[a3]")                            \
                     "ldr %[wo], %[c3]\n\t"                                                                   \
                     "strb %[we], [%[y], %[wo]]\n\t"                                                          \
                     "add %[y], %[y], #1\n\t"                                                                 \
                     "ldr %[wo], %[yend]\n\t"                                                                 \
                     "cmp %[y], %[wo]\n\t"                                                                    \
                     "bne 0b\n\t"                                                                             \
                     : [a0] "=&r"(a0), [a1] "=&r"(a1), [a2] "=&r"(a2), [a3] "=&r"(a3), [we] "=&r"(we),         \
                       [wo] "=&r"(wo), [px] "=&r"(px), [w] "+r"(w), [tbl] "+r"(tbl), [y] "+r"(y)                \
                     : [cols] "m"(cols), [dend] "m"(dend), [c] "m"(c), [c3] "m"(c3), [yend] "m"(yend),         \
                       [adjust] "m"(adjust)                                                                   \
                     : "r4", "r5", "r6", "r8", "cc", "memory")

KILN_ASM_BLOCK kiln_gemm_rows_dsp(const uint32_t *cols, int32_t groups, const int8_t *w, int32_t adjust,
                                  const uint32_t *tbl, int8_t *y, int32_t c, int32_t n)
{
    const uint32_t *dend = cols + 8 * groups, *px;
    const int8_t *yend = y + n;
    const int32_t c3 = 3 * c;
    uint32_t a0, a1, a2, a3, we, wo;
    if (adjust == 0 && groups % 2 == 0) {
        KILN_GEMM_ROWS_ASM(2, "");
    } else if (adjust == 0) {
        KILN_GEMM_ROWS_ASM(1, "");
    } else {
        KILN_GEMM_ROWS_ASM(1, "ldr %[wo], %[adjust]\n\tadd %[w], %[w], %[wo]\n\t");
    }
}
#endif

/* Four whole pixels, KILN_RQ_FAST and KILN_RQ_FULL: every channel's accumulators in registers. A row's
 * last group reads up to 3 weights of the rows after it, which meet the block's zero lanes past k; the
 * last rows, where that would pass the end of the array, take their last values one by one. */
static void kiln_gemm_fast4(const kiln_gemm_t *g, const uint32_t *cols, int8_t *y)
{
    const int32_t k = g->k, groups = k / 4, rest = k % 4, out_c = g->out_c;
    const int32_t over = rest ? out_c - (4 - rest + k - 1) / k : out_c; /* rows whose last group may read on */
    const uint32_t *tail = cols + 8 * groups, *t = g->table;
    const int8_t *w = g->w;
    int32_t o = 0;
#ifdef KILN_SIMD_DSP
    if (over > 0) {
        kiln_gemm_rows_dsp(cols, groups + (rest != 0), w, rest ? rest - 4 : 0, t, y, out_c, over);
        o = over;
        w += o * k;
        t += 4 * o;
    }
#endif
    for (; o < out_c; o++, w += k, t += 4) {
        uint32_t a0 = t[0], a1 = a0, a2 = a0, a3 = a0;
        const int32_t last = o >= over;
        KILN_GEMM_DOT4(cols, w, groups + (rest != 0 && !last));
        if (rest && last) {
            uint32_t we, wo;
            kiln_gemm_tail(w + 4 * groups, rest, &we, &wo);
            a0 = kiln_smlad(tail[1], wo, kiln_smlad(tail[0], we, a0));
            a1 = kiln_smlad(tail[3], wo, kiln_smlad(tail[2], we, a1));
            a2 = kiln_smlad(tail[5], wo, kiln_smlad(tail[4], we, a2));
            a3 = kiln_smlad(tail[7], wo, kiln_smlad(tail[6], we, a3));
        }
        y[o] = (int8_t)kiln_sat8(kiln_rq2_apply((int32_t)t[1], (int32_t)t[2], (int32_t)t[3], kiln_wrap_s32(a0)));
        y[out_c + o] = (int8_t)kiln_sat8(kiln_rq2_apply((int32_t)t[1], (int32_t)t[2], (int32_t)t[3], kiln_wrap_s32(a1)));
        y[2 * out_c + o] = (int8_t)kiln_sat8(kiln_rq2_apply((int32_t)t[1], (int32_t)t[2], (int32_t)t[3], kiln_wrap_s32(a2)));
        y[3 * out_c + o] = (int8_t)kiln_sat8(kiln_rq2_apply((int32_t)t[1], (int32_t)t[2], (int32_t)t[3], kiln_wrap_s32(a3)));
    }
}

void kiln_gemm_block(const kiln_gemm_t *g, const uint32_t *cols, int8_t *y, int32_t pixels)
{
    const int32_t k = g->k, groups = k / 4, rest = k % 4, fast = (g->requant & KILN_RQ_FAST) != 0;
    const uint32_t *tail = cols + 8 * groups;
    const kiln_out_t out = kiln_out_range(g->out_zp, g->act_min, g->act_max);
    const int8_t *w = g->w;
    int32_t o, p;
    if (pixels == 4 && (g->requant & (KILN_RQ_FAST | KILN_RQ_FULL)) == (KILN_RQ_FAST | KILN_RQ_FULL)) {
        kiln_gemm_fast4(g, cols, y);
        return;
    }
    for (o = 0; o < g->out_c; o++, w += k) {
        const uint32_t *t = g->table + 4 * o;
        uint32_t a0 = fast ? t[0] : (uint32_t)g->bias[o], a1 = a0, a2 = a0, a3 = a0, a[4];
        int32_t v;
        KILN_GEMM_DOT4(cols, w, groups);
        if (rest) {
            uint32_t we, wo;
            kiln_gemm_tail(w + 4 * groups, rest, &we, &wo);
            a0 = kiln_smlad(tail[1], wo, kiln_smlad(tail[0], we, a0));
            a1 = kiln_smlad(tail[3], wo, kiln_smlad(tail[2], we, a1));
            a2 = kiln_smlad(tail[5], wo, kiln_smlad(tail[4], we, a2));
            a3 = kiln_smlad(tail[7], wo, kiln_smlad(tail[6], we, a3));
        }
        a[0] = a0;
        a[1] = a1;
        a[2] = a2;
        a[3] = a3;
        for (p = 0; p < pixels; p++) {
            if (fast) {
                v = kiln_clamp8(kiln_sat8(kiln_rq2_apply((int32_t)t[1], (int32_t)t[2], (int32_t)t[3], kiln_wrap_s32(a[p]))),
                                g->act_min, g->act_max);
            } else {
                const kiln_rq_t q = kiln_rq_channel(g->mult[o], g->shift[o]);
                v = kiln_out_s8(&out, kiln_rq_apply(&q, kiln_wrap_s32(a[p])));
            }
            y[p * g->out_c + o] = (int8_t)v;
        }
    }
}
