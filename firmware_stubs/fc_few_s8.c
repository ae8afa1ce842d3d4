/* int8 fully connected with at most 16 input features (kiln_fully_connected_few_s8): a kernel of its own,
 * in its own file, so that an image links it only when its model has such a layer (the lower stage picks
 * it for in_features <= 16 with KILN_RQ_FAST; every other fully connected layer calls
 * kiln_fully_connected_s8 in matmul_s8.c). */
#include "kiln_kernels.h"
#include "kiln_simd.h"
#include "kiln_stub_math.h"
#include "kiln_mve.h"

/* Fully connected with at most 16 input features and KILN_RQ_FAST: each input row widened once into
 * G = ceil(k / 4) pairs of lane words (zero past k), then per output channel G weight words (the row
 * read on into the next one where k % 4 != 0, meeting zero lanes), 2 SXTB16 and 2 SMLAD each, the
 * doubled accumulator requantized with kiln_rq2_sat8. The last channels, whose words would read past
 * the weights, go through a zero-padded copy. On the DSP path, with k <= 8 and KILN_RQ_FULL, pairs of
 * channels run in one assembly loop with the input lanes in registers (and with KILN_RQ_UNIFORM the
 * multiplier, shift and rounding term too); elsewhere four channels at a time are stored as one word. */
#define KILN_FC_FEW_MAX 16

typedef struct {
    const int8_t *x, *w;
    const int32_t *bias, *mult, *shift;
    int8_t *y;
    int32_t rows, cols, k, zp21, act_min, act_max, uniform, full;
} kiln_fc_few_t;

/* Output channel o of the row whose lanes are xl, its weights at w. */
static int32_t kiln_fc_few_out(const kiln_fc_few_t *f, const uint32_t *xl, const int8_t *w, int32_t o, int32_t groups)
{
    const int32_t c = f->uniform ? 0 : o;
    uint32_t acc = (uint32_t)f->bias[o];
    int32_t g, v;
    for (g = 0; g < groups; g++) {
        const uint32_t word = kiln_load4(w + 4 * g);
        acc = kiln_smlad(xl[2 * g + 1], kiln_lanes_odd(word), kiln_smlad(xl[2 * g], kiln_lanes_even(word), acc));
    }
    v = kiln_rq2_sat8(f->mult[c], ~f->shift[c], f->zp21, kiln_wrap_s32(acc << 1));
    return f->full ? v : kiln_clamp8(v, f->act_min, f->act_max);
}

#ifdef KILN_SIMD_DSP
/* One channel of the assembly loop: the bias, G groups (DOT), the weights pointer moved on to the next
 * row (ADJUST), the doubled accumulator requantized (RQ) and stored. */
#define KILN_FC_GROUP(XE, XO)                                                                                \
    "ldr %[wo], [%[w]], #4\n\t"                                                                               \
    "sxtb16 %[we], %[wo]\n\t"                                                                                 \
    "sxtb16 %[wo], %[wo], ror #8\n\t"                                                                         \
    "smlad %[acc], %[" XE "], %[we], %[acc]\n\t"                                                              \
    "smlad %[acc], %[" XO "], %[wo], %[acc]\n\t"
#define KILN_FC_RQ_CHANNEL                                                                                   \
    "ldr %[wo], [%[mult]], #4\n\t"                                                                            \
    "ldr %[we], [%[shift]], #4\n\t"                                                                           \
    "mvn %[we], %[we]\n\t"                                                                                    \
    "lsl %[rt], %[zp21], %[we]\n\t"                                                                           \
    "smmlar %[rt], %[acc], %[wo], %[rt]\n\t"                                                                  \
    "sub %[rt], %[rt], %[acc], lsr #31\n\t"                                                                   \
    "asr %[rt], %[rt], %[we]\n\t"                                                                             \
    "ssat %[rt], #8, %[rt], asr #1\n\t"                                                                       \
    "strb %[rt], [%[y]], #1\n\t"
#define KILN_FC_RQ_UNIFORM                                                                                   \
    "smmlar %[rt], %[acc], %[m], %[rnd]\n\t"                                                                  \
    "sub %[rt], %[rt], %[acc], lsr #31\n\t"                                                                   \
    "asr %[rt], %[rt], %[e1]\n\t"                                                                             \
    "ssat %[rt], #8, %[rt], asr #1\n\t"                                                                       \
    "strb %[rt], [%[y]], #1\n\t"
#define KILN_FC_CHANNEL(DOT, ADJUST, RQ)                                                                     \
    "ldr %[acc], [%[bias]], #4\n\t" DOT ADJUST "lsl %[acc], %[acc], #1\n\t" RQ
#define KILN_FC_LOOP(DOT, ADJUST, RQ)                                                                        \
    "0:\n\t" KILN_FC_CHANNEL(DOT, ADJUST, RQ) KILN_FC_CHANNEL(DOT, ADJUST, RQ) "ldr %[wo], %[yend]\n\t"       \
    "cmp %[y], %[wo]\n\t"                                                                                     \
    "bne 0b\n\t"
#define KILN_FC_ASM_CHANNEL(DOT, ADJUST)                                                                     \
    __asm__ volatile(KILN_FC_LOOP(DOT, ADJUST, KILN_FC_RQ_CHANNEL)                                            \
                     : [acc] "=&r"(acc), [we] "=&r"(we), [wo] "=&r"(wo), [rt] "=&r"(rt), [w] "+r"(w), [y] "+r"(y), \
                       [bias] "+r"(bias), [mult] "+r"(mult), [shift] "+r"(shift)                              \
                     : [x0] "r"(xl[0]), [x1] "r"(xl[1]), [x2] "r"(xl[2]), [x3] "r"(xl[3]), [zp21] "r"(zp21),   \
                       [yend] "m"(yend), [adjust] "m"(adjust)                                                 \
                     : "cc", "memory")
#define KILN_FC_ASM_UNIFORM(DOT, ADJUST)                                                                     \
    __asm__ volatile(KILN_FC_LOOP(DOT, ADJUST, KILN_FC_RQ_UNIFORM)                                            \
                     : [acc] "=&r"(acc), [we] "=&r"(we), [wo] "=&r"(wo), [rt] "=&r"(rt), [w] "+r"(w), [y] "+r"(y), \
                       [bias] "+r"(bias)                                                                      \
                     : [x0] "r"(xl[0]), [x1] "r"(xl[1]), [x2] "r"(xl[2]), [x3] "r"(xl[3]), [m] "r"(m),         \
                       [e1] "r"(e1), [rnd] "r"(rnd), [yend] "m"(yend), [adjust] "m"(adjust)                   \
                     : "cc", "memory")
#define KILN_FC_DOT2 KILN_FC_GROUP("x0", "x1") KILN_FC_GROUP("x2", "x3")
#define KILN_FC_ADJUST "ldr %[wo], %[adjust]\n\tadd %[w], %[w], %[wo]\n\t"

/* Channels [0, n) (n even, > 0) of one row, k <= 8, KILN_RQ_FULL: two groups (a row of up to 4 values reads
 * on into its successor, meeting zero lanes), the pointer moved back by 8 - k after each. */
KILN_ASM_BLOCK kiln_fc_few_dsp(const kiln_fc_few_t *f, const uint32_t *xl, int8_t *y, int32_t n)
{
    const int8_t *w = f->w, *yend = y + n;
    const int32_t *bias = f->bias, *mult = f->mult, *shift = f->shift;
    const int32_t adjust = f->k - 8, zp21 = f->zp21;
    uint32_t acc, we, wo, rt;
    if (f->uniform) {
        const int32_t m = mult[0], e1 = ~shift[0], rnd = (int32_t)((uint32_t)zp21 << e1);
        if (adjust == 0) {
            KILN_FC_ASM_UNIFORM(KILN_FC_DOT2, "");
        } else {
            KILN_FC_ASM_UNIFORM(KILN_FC_DOT2, KILN_FC_ADJUST);
        }
    } else if (adjust == 0) {
        KILN_FC_ASM_CHANNEL(KILN_FC_DOT2, "");
    } else {
        KILN_FC_ASM_CHANNEL(KILN_FC_DOT2, KILN_FC_ADJUST);
    }
}
#endif

static void kiln_fc_few(const kiln_fc_few_t *f)
{
    const int32_t k = f->k, cols = f->cols, groups = (k + 3) / 4;
    const int32_t safe = cols - (4 * groups - 1) / k; /* channels whose last word ends inside w */
    int32_t r, o, i;
    for (r = 0; r < f->rows; r++) {
        int8_t row[KILN_FC_FEW_MAX] = {0};
        uint32_t xl[2 * KILN_FC_FEW_MAX / 4] = {0};
        int8_t *y = f->y + r * cols;
        for (i = 0; i < k; i++) {
            row[i] = f->x[r * k + i];
        }
        for (i = 0; i < groups; i++) {
            const uint32_t word = kiln_load4(row + 4 * i);
            xl[2 * i] = kiln_lanes_even(word);
            xl[2 * i + 1] = kiln_lanes_odd(word);
        }
        o = 0;
#ifdef KILN_SIMD_DSP
        if (f->full && k <= 8 && cols - 7 / k >= 2) {
            o = (cols - 7 / k) & ~1; /* the channels whose 8 bytes end inside w */
            kiln_fc_few_dsp(f, xl, y, o);
        }
#endif
        for (; o + 4 <= safe; o += 4) {
            const int8_t *w = f->w + o * k;
            const uint32_t v0 = (uint8_t)kiln_fc_few_out(f, xl, w, o, groups);
            const uint32_t v1 = (uint8_t)kiln_fc_few_out(f, xl, w + k, o + 1, groups);
            const uint32_t v2 = (uint8_t)kiln_fc_few_out(f, xl, w + 2 * k, o + 2, groups);
            const uint32_t v3 = (uint8_t)kiln_fc_few_out(f, xl, w + 3 * k, o + 3, groups);
            kiln_store4(y + o, v0 | v1 << 8 | v2 << 16 | v3 << 24);
        }
        for (; o < cols; o++) {
            int8_t last[KILN_FC_FEW_MAX] = {0};
            const int8_t *w = f->w + o * k;
            if (o >= safe) {
                for (i = 0; i < k; i++) {
                    last[i] = w[i];
                }
                w = last;
            }
            y[o] = (int8_t)kiln_fc_few_out(f, xl, w, o, groups);
        }
    }
}

void kiln_fully_connected_few_s8(const kiln_fully_connected_few_s8_params_t *p, const int8_t *x, const int8_t *w,
                                 const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
#ifdef KILN_MVE
    kiln_mve_matmul_s8(x, w, p->batches, p->out_features, p->in_features, bias, mult, shift, p->out_zp, p->act_min,
                       p->act_max, y);
    return;
#endif
    kiln_fc_few_t f;
    f.x = x;
    f.w = w;
    f.bias = bias;
    f.mult = mult;
    f.shift = shift;
    f.y = y;
    f.rows = p->batches;
    f.cols = p->out_features;
    f.k = p->in_features;
    f.zp21 = 2 * p->out_zp + 1;
    f.act_min = p->act_min;
    f.act_max = p->act_max;
    f.uniform = (p->requant & KILN_RQ_UNIFORM) != 0;
    f.full = (p->requant & KILN_RQ_FULL) != 0;
    kiln_fc_few(&f);
}
