/* int8 depthwise convolution, NHWC input, 1HWC weights, input zero point folded
 * into the bias (a padded position contributes input_zp * w).
 *
 * With scratch (the fast path), output channels go four at a time. For each
 * group the kernel widens strips of padded input rows into scratch, as int16
 * lanes ((c0, c2), (c1, c3) per column, kiln_simd.h) with the zero point in
 * their padding columns and in rows outside the image, so every output pixel,
 * border or not, takes the same code: per tap one LDRD of input, one of
 * weights (widened once per group) and four SMLAxy. Each input row is widened
 * once per group and strip (the rows two strips share, twice). 3x3 windows with stride 1 or 2 run a whole output
 * row in one assembly block (accumulators, row pointers and requantizers in
 * registers). Channel multipliers above 1, odd channel counts and every other
 * window take the same rows through a C loop over the taps.
 *
 * A channel multiplier that is a multiple of 4 takes no scratch: four output
 * channels per input value, each tap one value times four weights (faster
 * than strips that would widen each value into four lanes). Without scratch,
 * ch_mult = 1 goes four channels along the NHWC axis per word, border pixels
 * reading a zero-point-padded patch on the stack; the rest takes the
 * one-channel loop. */
#include "kiln_kernels.h"
#include "kiln_simd.h"
#include "kiln_stub_math.h"
#include "kiln_mve.h"

/* The k_h x k_w taps of 4 channels of one pixel: x at tap (0, 0), taps dx and rows dy bytes apart,
 * weights w at tap (0, 0), taps ch bytes apart. */
static void kiln_dw_window(const int8_t *x, int32_t dx, int32_t dy, const int8_t *w, int32_t ch, int32_t k_h,
                           int32_t k_w, kiln_acc4_t *acc)
{
    kiln_acc4_t a = *acc; /* a local: int8 loads may alias *acc, which would force stores per tap */
    int32_t ky, kx;
    if (k_h == 3 && k_w == 3) {
        kiln_mac_4ch_3x3(&a, x, dx, dy, w, ch);
    } else {
        for (ky = 0; ky < k_h; ky++) {
            for (kx = 0; kx < k_w; kx++) {
                kiln_mac_4ch(&a, x + ky * dy + kx * dx, w + (ky * k_w + kx) * ch);
            }
        }
    }
    *acc = a;
}

/* Requantize and store 4 channels. */
static void kiln_dw_store4(const kiln_acc4_t *acc, const kiln_rq_t q[4], const kiln_out_t *out, int8_t *y)
{
    const int8_t v0 = kiln_out_s8(out, kiln_rq_apply(&q[0], kiln_wrap_s32(acc->a0)));
    const int8_t v1 = kiln_out_s8(out, kiln_rq_apply(&q[1], kiln_wrap_s32(acc->a1)));
    const int8_t v2 = kiln_out_s8(out, kiln_rq_apply(&q[2], kiln_wrap_s32(acc->a2)));
    const int8_t v3 = kiln_out_s8(out, kiln_rq_apply(&q[3], kiln_wrap_s32(acc->a3)));
    y[0] = v0; /* every result before the first store: an int8 store may alias the requantizers */
    y[1] = v1;
    y[2] = v2;
    y[3] = v3;
}

/* A border pixel's window of 4 channels, copied into `patch` (4 bytes per tap, taps in row-major
 * order) with the input zero point at padded taps; x at image row `row` (of tap (0, 0)), channel c. */
static void kiln_dw_patch(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, int32_t row,
                          const int32_t range[4], int8_t *patch)
{
    int32_t ky, kx;
    for (ky = 0; ky < p->k_h; ky++) {
        for (kx = 0; kx < p->k_w; kx++, patch += 4) {
            const int valid = ky >= range[0] && ky < range[1] && kx >= range[2] && kx < range[3];
            if (valid) {
                memcpy(patch, x + (row + ky * p->dil_h * p->in_w + kx * p->dil_w) * p->in_c, 4);
            } else {
                memset(patch, p->input_zp, 4);
            }
        }
    }
}

/* Output channels [c, c + 4) of ch_mult = 1 over the whole output, for windows of at most
 * KILN_DW_TAPS taps. Interior pixels (window in the image) read it in place, in a tight run per
 * output row; border pixels read a padded patch. */
#define KILN_DW_TAPS 25

static void kiln_dw_4ch(const kiln_depthwise_conv2d_s8_params_t *p, int32_t c, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, const kiln_out_t *out,
                        int8_t *y)
{
    const int32_t ch = p->in_c, dx = p->dil_w * ch, dy = p->dil_h * p->in_w * ch;
    int8_t patch[4 * KILN_DW_TAPS];
    kiln_rq_t q[4];
    kiln_acc4_t b4;
    int32_t b, oy, ox, j, range[4], ox_lo, ox_hi;
    for (j = 0; j < 4; j++) {
        q[j] = kiln_rq_channel(mult[c + j], shift[c + j]);
    }
    b4.a0 = (uint32_t)bias[c];
    b4.a1 = (uint32_t)bias[c + 1];
    b4.a2 = (uint32_t)bias[c + 2];
    b4.a3 = (uint32_t)bias[c + 3];
    kiln_interior(p->out_w, p->in_w, p->k_w, p->stride_w, p->dil_w, p->pad_left, &ox_lo, &ox_hi);
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top, row0 = (b * p->in_h + iy0) * p->in_w - p->pad_left;
            int8_t *yr = y + (b * p->out_h + oy) * p->out_w * ch + c;
            int32_t lo = ox_lo, hi = ox_hi;
            kiln_tap_range(iy0, p->dil_h, p->k_h, p->in_h, &range[0], &range[1]);
            if (range[0] != 0 || range[1] != p->k_h) {
                lo = hi = p->out_w; /* no interior pixel in this row */
            }
            for (ox = lo; ox < hi; ox++) {
                kiln_acc4_t acc = b4;
                kiln_dw_window(x + (row0 + ox * p->stride_w) * ch + c, dx, dy, w + c, ch, p->k_h, p->k_w, &acc);
                kiln_dw_store4(&acc, q, out, yr + ox * ch);
            }
            for (ox = lo > 0 ? 0 : hi; ox < p->out_w; ox = ox + 1 == lo ? hi : ox + 1) { /* the border */
                kiln_acc4_t acc = b4;
                kiln_tap_range(ox * p->stride_w - p->pad_left, p->dil_w, p->k_w, p->in_w, &range[2], &range[3]);
                kiln_dw_patch(p, x + c, row0 + ox * p->stride_w, range, patch);
                kiln_dw_window(patch, 4, 4 * p->k_w, w + c, ch, p->k_h, p->k_w, &acc);
                kiln_dw_store4(&acc, q, out, yr + ox * ch);
            }
        }
    }
}

/* Output channels [oc_begin, in_c * ch_mult), one at a time. */
static void kiln_dw_1ch(const kiln_depthwise_conv2d_s8_params_t *p, int32_t oc_begin, const int8_t *x,
                        const int8_t *w, const int32_t *bias, const int32_t *mult, const int32_t *shift,
                        const kiln_out_t *out, int8_t *y)
{
    const int32_t out_c = p->in_c * p->ch_mult;
    int32_t b, oy, ox, oc, ky, kx, ky_lo, ky_hi, kx_lo, kx_hi;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            kiln_tap_range(iy0, p->dil_h, p->k_h, p->in_h, &ky_lo, &ky_hi);
            for (ox = 0; ox < p->out_w; ox++) {
                const int32_t ix0 = ox * p->stride_w - p->pad_left;
                kiln_tap_range(ix0, p->dil_w, p->k_w, p->in_w, &kx_lo, &kx_hi);
                for (oc = oc_begin; oc < out_c; oc++) {
                    const kiln_rq_t q = kiln_rq_channel(mult[oc], shift[oc]);
                    uint32_t acc = (uint32_t)bias[oc];
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t row = (b * p->in_h + iy0 + ky * p->dil_h) * p->in_w + ix0;
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int valid = ky >= ky_lo && ky < ky_hi && kx >= kx_lo && kx < kx_hi;
                            const int32_t xv = valid ? x[(row + kx * p->dil_w) * p->in_c + oc / p->ch_mult] : p->input_zp;
                            acc += (uint32_t)(xv * w[(ky * p->k_w + kx) * out_c + oc]);
                        }
                    }
                    y[((b * p->out_h + oy) * p->out_w + ox) * out_c + oc] =
                        kiln_out_s8(out, kiln_rq_apply(&q, kiln_wrap_s32(acc)));
                }
            }
        }
    }
}

/* The taps [range[0], range[1]) x [range[2], range[3]) of one pixel for 4 output channels that one input
 * channel feeds: x[at] is its tap (0, 0), w its weights there; each adds (x - input_zp) * w. */
static KILN_NOINLINE void kiln_dw_taps_1x4(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, int32_t at,
                                           const int8_t *w, const int32_t range[4], kiln_acc4_t *acc)
{
    const int32_t out_c = p->in_c * p->ch_mult, dx = p->dil_w * p->in_c, dy = p->dil_h * p->in_w * p->in_c;
    const int32_t zp = p->input_zp, kx_lo = range[2], kx_hi = range[3];
    kiln_acc4_t a = *acc; /* a local: int8 loads may alias *acc, which would force stores per tap */
    int32_t ky, kx;
    for (ky = range[0]; ky < range[1]; ky++) {
        const int32_t row = at + ky * dy;
        const int8_t *wr = w + ky * p->k_w * out_c;
        for (kx = kx_lo; kx < kx_hi; kx++) {
            kiln_mac_1x4(&a, x[row + kx * dx] - zp, wr + kx * out_c);
        }
    }
    *acc = a;
}

/* Output channels [o, o + 4) of a channel multiplier that is a multiple of 4, all four fed by input channel
 * o / ch_mult: per tap one input value times four weights. Taps outside the image are skipped rather than
 * padded: the bias gets input_zp times every weight back and each tap inside adds (x - input_zp) * w, the
 * same sum modulo 2^32. */
static void kiln_dw_mult4(const kiln_depthwise_conv2d_s8_params_t *p, int32_t o, const int8_t *x, const int8_t *w,
                          const int32_t *bias, const int32_t *mult, const int32_t *shift, const kiln_out_t *out,
                          int8_t *y)
{
    const int32_t out_c = p->in_c * p->ch_mult, c = o / p->ch_mult;
    uint32_t b4[4];
    kiln_rq_t q[4];
    int32_t b, oy, ox, j, t, range[4];
    for (j = 0; j < 4; j++) {
        b4[j] = (uint32_t)bias[o + j];
        for (t = 0; t < p->k_h * p->k_w; t++) {
            b4[j] += (uint32_t)p->input_zp * (uint32_t)(int32_t)w[t * out_c + o + j];
        }
        q[j] = kiln_rq_channel(mult[o + j], shift[o + j]);
    }
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            kiln_tap_range(iy0, p->dil_h, p->k_h, p->in_h, &range[0], &range[1]);
            for (ox = 0; ox < p->out_w; ox++) {
                const int32_t ix0 = ox * p->stride_w - p->pad_left;
                kiln_acc4_t acc;
                acc.a0 = b4[0];
                acc.a1 = b4[1];
                acc.a2 = b4[2];
                acc.a3 = b4[3];
                kiln_tap_range(ix0, p->dil_w, p->k_w, p->in_w, &range[2], &range[3]);
                kiln_dw_taps_1x4(p, x, ((b * p->in_h + iy0) * p->in_w + ix0) * p->in_c + c, w + o, range, &acc);
                kiln_dw_store4(&acc, q, out, y + ((b * p->out_h + oy) * p->out_w + ox) * out_c + o);
            }
        }
    }
}

/* ---- the strip path (scratch) ------------------------------------------------------------------
 * Scratch holds, from its first 4-aligned byte, the group block (words):
 *   [0, 2T)        the T taps' weights, two words of lanes each (doubled with KILN_RQ_FAST)
 *   [2T, 2T+4)     bias of the four lanes (doubled likewise)
 *   [2T+4, 2T+20)  per lane {mult, round, shift, 0} of the fast requantization
 *   2T+20..2T+23   y_end, row_end, row_bytes, delta: the assembly row loop's bounds
 * then a strip of padded input rows, 2 * cols words each. */
#define KILN_DW_BLOCK_WORDS(taps) (2 * (taps) + 24)
#define KILN_DW_BIAS(taps) (2 * (taps))
#define KILN_DW_RQ(taps) (2 * (taps) + 4)
#define KILN_DW_LOOP(taps) (2 * (taps) + 20)

/* Columns of a padded input row that the windows reach. */
static int32_t kiln_dw_cols(const kiln_depthwise_conv2d_s8_params_t *p)
{
    return (p->out_w - 1) * p->stride_w + (p->k_w - 1) * p->dil_w + 1;
}

/* Rows of the strip that scratch_bytes holds (at most every padded row the windows reach), or 0 when it
 * cannot hold one window's rows (runtime/kiln_kernels.h). */
static int32_t kiln_dw_strip(const kiln_depthwise_conv2d_s8_params_t *p, const void *scratch)
{
    const int32_t span = (p->k_h - 1) * p->dil_h + 1, total = (p->out_h - 1) * p->stride_h + span;
    const int32_t room = p->scratch_bytes - 3 - 4 * KILN_DW_BLOCK_WORDS(p->k_h * p->k_w);
    const int32_t rows = room < 0 ? 0 : room / (8 * kiln_dw_cols(p));
    if (!KILN_SCRATCH_PATHS || scratch == NULL || rows < span) {
        return 0;
    }
    return rows < total ? rows : total;
}

/* n words of lanes from [at, at + n): (v0, v2), (v1, v3) per column from four consecutive int8 values at
 * `in`, columns `step` bytes apart; doubled when `twice` (2 * v fits its lane; SADD16 adds lanes apart). */
static void kiln_dw_widen(uint32_t *at, const uint32_t *stop, const int8_t *in, int32_t step, int32_t twice)
{
#ifdef KILN_SIMD_DSP
    uint32_t v, e;
    if (at == stop) {
        return;
    }
#define KILN_DW_WIDEN_ASM(TWICE)                                                                             \
    __asm__ volatile("1:\n\t"                                                                                 \
                     "ldr %[v], [%[in]]\n\t"                                                                  \
                     "add %[in], %[in], %[step]\n\t"                                                          \
                     "sxtb16 %[e], %[v]\n\t"                                                                  \
                     "sxtb16 %[v], %[v], ror #8\n\t" TWICE                                                    \
                     "strd %[e], %[v], [%[at]], #8\n\t"                                                       \
                     "cmp %[at], %[stop]\n\t"                                                                 \
                     "bne 1b\n\t"                                                                             \
                     : [at] "+r"(at), [in] "+r"(in), [v] "=&r"(v), [e] "=&r"(e)                               \
                     : [stop] "r"(stop), [step] "r"(step)                                                     \
                     : "cc", "memory")
    if (twice) {
        KILN_DW_WIDEN_ASM("sadd16 %[e], %[e], %[e]\n\tsadd16 %[v], %[v], %[v]\n\t");
    } else {
        KILN_DW_WIDEN_ASM("");
    }
#undef KILN_DW_WIDEN_ASM
#else
    const uint32_t keep = twice ? 0xFFFEFFFEu : 0xFFFFFFFFu; /* a doubled word drops the bit carried between lanes */
    for (; at < stop; at += 2, in += step) {
        const uint32_t v = kiln_load4(in);
        at[0] = kiln_lanes_even(v) << (twice != 0) & keep;
        at[1] = kiln_lanes_odd(v) << (twice != 0) & keep;
    }
#endif
}

/* Like kiln_dw_widen for a group of `lanes` < 4 lanes or a channel multiplier above 1: lane l of a column
 * takes in[(o0 + l) / mult], lanes past `lanes` zero. */
static void kiln_dw_gather(uint32_t *at, const uint32_t *stop, const int8_t *in, int32_t step, int32_t twice,
                           int32_t o0, int32_t lanes, int32_t mult)
{
    int32_t v[4], l;
    for (; at < stop; at += 2, in += step) {
        for (l = 0; l < 4; l++) {
            v[l] = l < lanes ? in[(o0 + l) / mult] * (twice ? 2 : 1) : 0;
        }
        at[0] = kiln_pack16(v[0], v[2]);
        at[1] = kiln_pack16(v[1], v[3]);
    }
}

/* The group block for output channels [o0, o0 + lanes): weights widened to lanes, doubled with
 * KILN_RQ_FAST (which requantizes the doubled accumulator), the bias doubled likewise, the fast
 * requantizers; lanes past `lanes` hold zero. */
static KILN_NOINLINE void kiln_dw_block(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *w, const int32_t *bias,
                          const int32_t *mult, const int32_t *shift, int32_t o0, int32_t lanes, uint32_t *blk)
{
    const int32_t out_c = p->in_c * p->ch_mult, taps = p->k_h * p->k_w, fast = (p->requant & KILN_RQ_FAST) != 0;
    uint32_t *end = blk + 2 * taps, *rq = blk + KILN_DW_RQ(taps);
    int32_t l;
    if (lanes == 4) {
        kiln_dw_widen(blk, end, w + o0, out_c, fast);
    } else {
        kiln_dw_gather(blk, end, w, out_c, fast, o0, lanes, 1);
    }
    for (l = 0; l < lanes; l++, rq += 4) {
        end[l] = (uint32_t)bias[o0 + l] << fast;
        if (fast) {
            const kiln_rq2_t q = kiln_rq2_channel(mult[o0 + l], shift[o0 + l], p->out_zp);
            rq[0] = (uint32_t)q.mult;
            rq[1] = (uint32_t)q.round;
            rq[2] = (uint32_t)q.shift;
        }
    }
    for (; l < 4; l++) {
        end[l] = 0;
    }
}

/* n words of the zero point pair from d. */
static void kiln_dw_pad(uint32_t *d, int32_t n, uint32_t zp2)
{
    uint32_t *end = d + n;
    for (; d < end; d++) {
        *d = zp2;
    }
}

/* Where a strip's rows take the image from: columns [j0, j1) of every strip row are image columns; the
 * rest are padding, which holds the zero point from the start of the call and is never written. */
typedef struct {
    int32_t j0, width, row_words, in_row, first;
    uint32_t zp2;
} kiln_dw_geo_t;

static kiln_dw_geo_t kiln_dw_geo(const kiln_depthwise_conv2d_s8_params_t *p)
{
    kiln_dw_geo_t g;
    const int32_t cols = kiln_dw_cols(p);
    const int32_t j0 = p->pad_left < cols ? p->pad_left : cols;
    const int32_t j1 = p->pad_left + p->in_w < cols ? p->pad_left + p->in_w : cols;
    g.j0 = j0;
    g.width = j1 > j0 ? 2 * (j1 - j0) : 0;
    g.row_words = 2 * cols;
    g.in_row = p->in_w * p->in_c;
    g.first = (j0 - p->pad_left) * p->in_c; /* byte offset of column j0 in an input row */
    g.zp2 = kiln_pack16(p->input_zp, p->input_zp);
    return g;
}

/* Input rows [iy, iy + n) of image b, channels [o0, o0 + lanes), widened into consecutive strip rows
 * from `rows`, the zero point in rows outside the image. */
static KILN_NOINLINE void kiln_dw_fill(const kiln_depthwise_conv2d_s8_params_t *p, const kiln_dw_geo_t *g, const int8_t *x,
                         int32_t b, int32_t iy, int32_t n, int32_t o0, int32_t lanes, uint32_t *rows)
{
    const int32_t in_h = p->in_h, in_c = p->in_c, in_row = g->in_row, width = g->width, step = g->row_words;
    const int32_t whole = p->ch_mult == 1 && lanes == 4, mult = p->ch_mult;
    const uint32_t zp2 = g->zp2;
    int32_t from = (b * in_h + iy) * in_row + g->first + (whole ? o0 : 0);
    uint32_t *d = rows + 2 * g->j0, *end = d + step * n;
    for (; width && d < end; d += step, iy++, from += in_row) { /* locals: stores may alias *p */
        if (iy < 0 || iy >= in_h) {
            kiln_dw_pad(d, width, zp2);
        } else if (whole) {
            kiln_dw_widen(d, d + width, x + from, in_c, 0);
        } else {
            kiln_dw_gather(d, d + width, x + from, in_c, 0, o0, lanes, mult);
        }
    }
}

#ifdef KILN_SIMD_DSP
/* Output rows of a 3x3 window (dilation 1) for a full group, KILN_RQ_FAST and KILN_RQ_FULL: per pixel
 * the bias, 9 taps x (LDRD input, LDRD weights, 4 SMLAxy), then per lane SMMLAR, SUB, ASR, SSAT, STRB.
 * r0..r2 are the strip rows of the first output row's window, at its first column; a column's lanes are
 * 8 bytes, so stride S advances them 8 * S bytes per pixel and the block's `delta` per output row. y
 * (lane 0 of the first pixel) moves y_step bytes per pixel: output rows are consecutive in y, ending at
 * `row_end`, which moves `row_bytes` per row, until y reaches `y_end`. */
#define KILN_DW_TAP(R, X, W)                                                                                 \
    "ldrd %[xe], %[xo], " X "\n\t"                                                                            \
    "ldrd %[we], %[wo], [%[blk], #" W "]\n\t"                                                                 \
    "smlabb %[a0], %[xe], %[we], %[a0]\n\t"                                                                   \
    "smlatt %[a2], %[xe], %[we], %[a2]\n\t"                                                                   \
    "smlabb %[a1], %[xo], %[wo], %[a1]\n\t"                                                                   \
    "smlatt %[a3], %[xo], %[wo], %[a3]\n\t"
#define KILN_DW_ROW3(R, W, STEP, AT1, AT2)                                                                   \
    KILN_DW_TAP(R, "[" R "], #" STEP, W) KILN_DW_TAP(R, "[" R ", #" AT1 "]", W "+8")                          \
        KILN_DW_TAP(R, "[" R ", #" AT2 "]", W "+16")
#define KILN_DW_RQ4(A, AT, J)                                                                                \
    "ldrd %[xe], %[xo], [%[blk], #" AT "]\n\t"                                                                \
    "ldr %[we], [%[blk], #" AT "+8]\n\t"                                                                      \
    "smmlar %[xo], " A ", %[xe], %[xo]\n\t"                                                                   \
    "sub %[xo], %[xo], " A ", lsr #31\n\t"                                                                    \
    "asr %[xo], %[xo], %[we]\n\t"                                                                             \
    "ssat %[xo], #8, %[xo]\n\t"                                                                               \
    "strb %[xo], [%[y], #" J "]\n\t"
#define KILN_DW3X3_ASM(STEP, AT1, AT2)                                                                       \
    __asm__ volatile("1:\n\t"                                                                                 \
                     "ldrd %[a0], %[a1], [%[blk], #72]\n\t"                                                   \
                     "ldrd %[a2], %[a3], [%[blk], #80]\n\t" KILN_DW_ROW3("%[r0]", "0", STEP, AT1, AT2)        \
                         KILN_DW_ROW3("%[r1]", "24", STEP, AT1, AT2) KILN_DW_ROW3("%[r2]", "48", STEP, AT1, AT2) \
                             KILN_DW_RQ4("%[a0]", "88", "0") KILN_DW_RQ4("%[a1]", "104", "1")                 \
                                 KILN_DW_RQ4("%[a2]", "120", "2") KILN_DW_RQ4("%[a3]", "136", "3")            \
                     "add %[y], %[y], %[ys]\n\t"                                                              \
                     "ldr %[xe], [%[blk], #156]\n\t"                                                          \
                     "cmp %[y], %[xe]\n\t"                                                                    \
                     "bne 1b\n\t"                                                                             \
                     "ldr %[xo], [%[blk], #164]\n\t"                                                          \
                     "add %[r0], %[r0], %[xo]\n\t"                                                            \
                     "add %[r1], %[r1], %[xo]\n\t"                                                            \
                     "add %[r2], %[r2], %[xo]\n\t"                                                            \
                     "ldr %[xo], [%[blk], #160]\n\t"                                                          \
                     "add %[xe], %[xe], %[xo]\n\t"                                                            \
                     "str %[xe], [%[blk], #156]\n\t"                                                          \
                     "ldr %[xo], [%[blk], #152]\n\t"                                                          \
                     "cmp %[y], %[xo]\n\t"                                                                    \
                     "bne 1b\n\t"                                                                             \
                     : [a0] "=&r"(a0), [a1] "=&r"(a1), [a2] "=&r"(a2), [a3] "=&r"(a3), [xe] "=&r"(xe),         \
                       [xo] "=&r"(xo), [we] "=&r"(we), [wo] "=&r"(wo), [r0] "+r"(r0), [r1] "+r"(r1),             \
                       [r2] "+r"(r2), [y] "+r"(y)                                                             \
                     : [blk] "r"(blk), [ys] "r"(y_step)                                                       \
                     : "cc", "memory")

KILN_ASM_BLOCK kiln_dw3x3_rows_dsp(const uint32_t *r0, const uint32_t *r1, const uint32_t *r2, uint32_t *blk,
                                   int8_t *y, int32_t y_step, int32_t stride)
{
    uint32_t a0, a1, a2, a3, xe, xo, we, wo;
    if (stride == 1) {
        KILN_DW3X3_ASM("8", "0", "8");
    } else {
        KILN_DW3X3_ASM("16", "-8", "0");
    }
}
#endif

/* One output row for the group [o0, o0 + lanes) through the C loop over the taps: `row` is the strip row
 * of its window's top, `down` the words from one window row to the next; q holds the lanes' requantizers
 * when the layer is not KILN_RQ_FAST. */
static void kiln_dw_row_c(const kiln_depthwise_conv2d_s8_params_t *p, const uint32_t *row, int32_t down,
                          const uint32_t *blk, const kiln_rq_t *q, int32_t lanes, int8_t *y)
{
    const int32_t taps = p->k_h * p->k_w, out_c = p->in_c * p->ch_mult, fast = (p->requant & KILN_RQ_FAST) != 0;
    const uint32_t *bias = blk + KILN_DW_BIAS(taps), *rq = blk + KILN_DW_RQ(taps);
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    int32_t ox, ky, kx, l;
    for (ox = 0; ox < p->out_w; ox++) {
        uint32_t a[4];
        a[0] = bias[0];
        a[1] = bias[1];
        a[2] = bias[2];
        a[3] = bias[3];
        for (ky = 0; ky < p->k_h; ky++) {
            const uint32_t *xr = row + ky * down + 2 * ox * p->stride_w, *wr = blk + 2 * ky * p->k_w;
            for (kx = 0; kx < p->k_w; kx++) {
                const uint32_t *xt = xr + 2 * kx * p->dil_w, *wt = wr + 2 * kx;
                a[0] = kiln_smlabb(xt[0], wt[0], a[0]);
                a[2] = kiln_smlatt(xt[0], wt[0], a[2]);
                a[1] = kiln_smlabb(xt[1], wt[1], a[1]);
                a[3] = kiln_smlatt(xt[1], wt[1], a[3]);
            }
        }
        for (l = 0; l < lanes; l++) {
            const uint32_t *r = rq + 4 * l;
            y[ox * out_c + l] = fast ? kiln_clamp8(kiln_sat8(kiln_rq2_apply((int32_t)r[0], (int32_t)r[1], (int32_t)r[2],
                                                                           kiln_wrap_s32(a[l]))),
                                                   p->act_min, p->act_max)
                                     : kiln_out_s8(&out, kiln_rq_apply(&q[l], kiln_wrap_s32(a[l])));
        }
    }
}

/* The whole layer through strips of `strip` padded input rows in scratch s. Each strip holds the
 * windows of as many consecutive output rows as fit; the rows two strips share are widened again. */
static void kiln_dw_strips(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                           const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y, uint32_t *s,
                           int32_t strip)
{
    const int32_t out_c = p->in_c * p->ch_mult, cols = kiln_dw_cols(p), taps = p->k_h * p->k_w;
    const int32_t span = (p->k_h - 1) * p->dil_h + 1, per = (strip - span) / p->stride_h + 1;
    const int32_t row_bytes = p->out_w * out_c;
    uint32_t *blk = s, *rows = s + KILN_DW_BLOCK_WORDS(taps);
    kiln_rq_t q[4];
    int32_t b, o0, oy0, i, l;
    const kiln_dw_geo_t geo = kiln_dw_geo(p);
    kiln_dw_pad(rows, 2 * cols * strip, geo.zp2); /* the padding columns, for good */
#ifdef KILN_SIMD_DSP
    const int32_t asm3x3 = (p->requant & (KILN_RQ_FAST | KILN_RQ_FULL)) == (KILN_RQ_FAST | KILN_RQ_FULL) &&
                           p->k_h == 3 && p->k_w == 3 && p->dil_h == 1 && p->dil_w == 1 &&
                           (p->stride_w == 1 || p->stride_w == 2);
#endif
    for (b = 0; b < p->n; b++) {
        for (o0 = 0; o0 < out_c; o0 += 4) {
            const int32_t lanes = out_c - o0 < 4 ? out_c - o0 : 4;
            kiln_dw_block(p, w, bias, mult, shift, o0, lanes, blk);
            for (l = 0; l < lanes && !(p->requant & KILN_RQ_FAST); l++) {
                q[l] = kiln_rq_channel(mult[o0 + l], shift[o0 + l]);
            }
            for (oy0 = 0; oy0 < p->out_h; oy0 += per) {
                const int32_t n = p->out_h - oy0 < per ? p->out_h - oy0 : per;
                int8_t *yr = y + (b * p->out_h + oy0) * row_bytes + o0;
                kiln_dw_fill(p, &geo, x, b, oy0 * p->stride_h - p->pad_top, (n - 1) * p->stride_h + span, o0, lanes, rows);
#ifdef KILN_SIMD_DSP
                if (asm3x3 && lanes == 4) {
                    uint32_t *loop = blk + KILN_DW_LOOP(9);
                    loop[0] = (uint32_t)(uintptr_t)(yr + n * row_bytes);
                    loop[1] = (uint32_t)(uintptr_t)(yr + row_bytes);
                    loop[2] = (uint32_t)row_bytes;
                    loop[3] = (uint32_t)(8 * (p->stride_h * cols - p->out_w * p->stride_w));
                    kiln_dw3x3_rows_dsp(rows, rows + 2 * cols, rows + 4 * cols, blk, yr, out_c, p->stride_w);
                    continue;
                }
#endif
                for (i = 0; i < n; i++) {
                    kiln_dw_row_c(p, rows + 2 * cols * i * p->stride_h, 2 * cols * p->dil_h, blk, q, lanes, yr + i * row_bytes);
                }
            }
        }
    }
}

void kiln_depthwise_conv2d_s8(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                              const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y, void *scratch)
{
#ifdef KILN_MVE
    if (kiln_mve_depthwise_conv2d_s8(p, x, w, bias, mult, shift, y)) {
        return;
    }
#endif
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    const int32_t strip = p->ch_mult % 4 == 0 ? 0 : kiln_dw_strip(p, scratch);
    int32_t c = 0;
    if (p->ch_mult % 4 == 0) { /* faster than the strips, which would widen each value into four lanes */
        for (; c < p->in_c * p->ch_mult; c += 4) {
            kiln_dw_mult4(p, c, x, w, bias, mult, shift, &out, y);
        }
        return;
    }
    if (strip > 0) {
        kiln_dw_strips(p, x, w, bias, mult, shift, y, (uint32_t *)(((uintptr_t)scratch + 3u) & ~(uintptr_t)3u), strip);
        return;
    }
    if (p->ch_mult == 1 && p->k_h * p->k_w <= KILN_DW_TAPS) {
        for (; c + 4 <= p->in_c; c += 4) {
            kiln_dw_4ch(p, c, x, w, bias, mult, shift, &out, y);
        }
    }
    kiln_dw_1ch(p, c, x, w, bias, mult, shift, &out, y);
}
