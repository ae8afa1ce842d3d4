/* int8 matrix products: 1x1 convolution (pixels x in_c by out_c x in_c) and
 * fully connected (batches x in_features by out_features x in_features).
 * Blocks of 2 rows x 2 output channels use every widened word twice
 * (kiln_simd.h); a single row (batch-1 fully connected) goes against 4 weight
 * rows at a time. A last odd channel pairs with itself, a last odd row takes
 * one row x 2 channels. */
#include "kiln_gemm.h"
#include "kiln_kernels.h"
#include "kiln_simd.h"
#include "kiln_stub_math.h"
#include "kiln_mve.h"

/* Four outputs of one row from their accumulators as one word: with KILN_RQ_FAST through kiln_rq2_sat8
 * (the activation range applied unless KILN_RQ_FULL), otherwise the general requantization. */
static void kiln_matmul_store4(const kiln_acc4_t *acc, const int32_t *mult, const int32_t *shift, const kiln_out_t *out,
                               int32_t requant, int8_t *y)
{
    const uint32_t a[4] = {acc->a0, acc->a1, acc->a2, acc->a3};
    uint32_t word = 0;
    int32_t j, v;
    for (j = 0; j < 4; j++) {
        if (requant & KILN_RQ_FAST) {
            v = kiln_rq2_sat8(mult[j], ~shift[j], 2 * out->zp + 1, kiln_wrap_s32(a[j] << 1));
            v = requant & KILN_RQ_FULL ? v : kiln_clamp8(v, out->lo + out->zp, out->hi + out->zp);
        } else {
            const kiln_rq_t q = kiln_rq_channel(mult[j], shift[j]);
            v = kiln_out_s8(out, kiln_rq_apply(&q, kiln_wrap_s32(a[j])));
        }
        word |= (uint32_t)(uint8_t)v << (8 * j);
    }
    kiln_store4(y, word);
}

/* y[r][o] = requantize(bias[o] + x[r] . w[o]) for r < rows, o < cols, vectors of length k. */
static void kiln_matmul_s8(const int8_t *x, const int8_t *w, int32_t rows, int32_t cols, int32_t k,
                           const int32_t *bias, const int32_t *mult, const int32_t *shift, const kiln_out_t *out,
                           int32_t requant, int8_t *y)
{
    int32_t r, o = 0;
    if (rows == 1 && k % 8 == 0) { /* one input vector: 4 weight rows at a time */
        for (; o + 4 <= cols; o += 4) {
            kiln_acc4_t acc;
            acc.a0 = (uint32_t)bias[o];
            acc.a1 = (uint32_t)bias[o + 1];
            acc.a2 = (uint32_t)bias[o + 2];
            acc.a3 = (uint32_t)bias[o + 3];
            kiln_dot_1x4(&acc, x, w + o * k, k);
            kiln_matmul_store4(&acc, mult + o, shift + o, out, requant, y + o);
        }
    }
    for (; o < cols; o += 2) {
        const int32_t o1 = o + 1 < cols ? o + 1 : o; /* an odd last channel pairs with itself */
        const kiln_rq_t q0 = kiln_rq_channel(mult[o], shift[o]), q1 = kiln_rq_channel(mult[o1], shift[o1]);
        const int8_t *w0 = w + o * k, *w1 = w + o1 * k;
        for (r = 0; r + 1 < rows; r += 2) {
            kiln_acc2x2_t acc;
            int8_t *y0 = y + r * cols, *y1 = y0 + cols;
            acc.a00 = acc.a10 = (uint32_t)bias[o];
            acc.a01 = acc.a11 = (uint32_t)bias[o1];
            kiln_dot_2x2(&acc, x + r * k, x + (r + 1) * k, w0, w1, k);
            kiln_store_2x2(&acc, q0, q1, *out, y0, y1, o, o1);
        }
        if (r < rows) {
            uint32_t a0 = (uint32_t)bias[o], a1 = (uint32_t)bias[o1];
            kiln_dot_1x2(&a0, &a1, x + r * k, w0, w1, k);
            y[r * cols + o] = kiln_out_s8(out, kiln_rq_apply(&q0, kiln_wrap_s32(a0)));
            y[r * cols + o1] = kiln_out_s8(out, kiln_rq_apply(&q1, kiln_wrap_s32(a1)));
        }
    }
}

/* With scratch, blocks of four pixels widened in scratch s (kiln_gemm.h). */
static void kiln_matmul_gemm(const int8_t *x, int32_t rows, kiln_gemm_t *g, int8_t *y, uint32_t *s)
{
    const int32_t k = g->k, twice = (g->requant & KILN_RQ_FAST) != 0;
    uint32_t *cols = s + KILN_GEMM_TABLE_WORDS(g->out_c);
    int8_t *row = (int8_t *)(cols + KILN_GEMM_BLOCK_WORDS(k));
    int32_t r, i, c;
    g->table = s;
    if (twice) {
        kiln_gemm_prepare(g);
    }
    for (r = 0; r < rows; r += 4) {
        const int32_t pixels = rows - r < 4 ? rows - r : 4;
        for (i = 0; i < 4; i++) {
            const int8_t *src = x + (r + i) * k;
            if (i >= pixels) { /* a missing pixel: zero lanes, no output */
                kiln_gemm_fill(cols + 2 * i, 0, (k + 3) / 4);
                continue;
            }
            if (k % 4 != 0) {
                for (c = 0; c < k; c++) {
                    row[c] = src[c];
                }
                for (; c % 4 != 0; c++) {
                    row[c] = 0;
                }
                src = row;
            }
            kiln_gemm_widen(cols + 2 * i, src, (k + 3) / 4, twice);
        }
        kiln_gemm_block(g, cols, y + r * g->out_c, pixels);
    }
}

void kiln_conv2d_1x1_s8(const kiln_conv2d_1x1_s8_params_t *p, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y, void *scratch)
{
#ifdef KILN_MVE
    kiln_mve_matmul_s8(x, w, p->pixels, p->out_c, p->in_c, bias, mult, shift, p->out_zp, p->act_min, p->act_max, y);
    return;
#endif
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    if (KILN_SCRATCH_PATHS && scratch != NULL && p->scratch_bytes >= 4 * KILN_GEMM_SCRATCH_WORDS(p->in_c, p->out_c) + 3) {
        kiln_gemm_t g;
        g.k = p->in_c;
        g.out_c = p->out_c;
        g.out_zp = p->out_zp;
        g.act_min = p->act_min;
        g.act_max = p->act_max;
        g.requant = p->requant;
        g.w = w;
        g.bias = bias;
        g.mult = mult;
        g.shift = shift;
        kiln_matmul_gemm(x, p->pixels, &g, y, (uint32_t *)(((uintptr_t)scratch + 3u) & ~(uintptr_t)3u));
        return;
    }
    kiln_matmul_s8(x, w, p->pixels, p->out_c, p->in_c, bias, mult, shift, &out, p->requant, y);
}

void kiln_fully_connected_s8(const kiln_fully_connected_s8_params_t *p, const int8_t *x, const int8_t *w,
                             const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
#ifdef KILN_MVE
    kiln_mve_matmul_s8(x, w, p->batches, p->out_features, p->in_features, bias, mult, shift, p->out_zp, p->act_min,
                       p->act_max, y);
    return;
#endif
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    kiln_matmul_s8(x, w, p->batches, p->out_features, p->in_features, bias, mult, shift, &out, p->requant, y);
}
