/* int8 2-D convolution, NHWC input, OHWI weights, input zero point folded into
 * the bias (a padded position contributes input_zp * w).
 *
 * With scratch (the fast path), four output pixels at a time have their
 * windows widened to int16 into scratch (kiln_gemm.h), the zero point at
 * padded taps, and every output channel is one pass of the 4-pixel product
 * over them. Without scratch, three paths by the size of the window
 * (k_h x k_w x in_c values):
 * - at most KILN_COL_MAX values (first layers, few input channels): each pair
 *   of pixels is gathered once into two small stack columns, the zero point at
 *   padded taps, then every pair of output channels is one contiguous 2x2 dot;
 * - otherwise, at most KILN_TAPS_MAX taps: with dil_w = 1 a kernel row reads
 *   k_w * in_c consecutive input bytes, so pixel pairs read their rows in
 *   place (2 pixels x 2 channels per dot); padded taps add input_zp * sum(w)
 *   from per-tap sums computed once per channel pair;
 * - larger windows still: one output at a time. */
#include "kiln_gemm.h"
#include "kiln_kernels.h"
#include "kiln_simd.h"
#include "kiln_stub_math.h"
#include "kiln_mve.h"

/* Two pixels whose windows lie in the image but for rows outside [ky_lo, ky_hi) (the same for both);
 * x points at pixel 0's tap (ky_lo, 0), pixel 1's is dx further. */
static void kiln_conv_pair(const kiln_conv2d_s8_params_t *p, const int8_t *x, int32_t dx, int32_t ky_lo,
                           int32_t ky_hi, const int8_t *w0, const int8_t *w1, kiln_acc2x2_t *acc)
{
    const int32_t row_len = p->k_w * p->in_c, dy = p->dil_h * p->in_w * p->in_c;
    int32_t ky, kx;
    w0 += ky_lo * row_len;
    w1 += ky_lo * row_len;
    if (p->dil_w == 1) {
        kiln_dot_2x2_rows(acc, x, x + dx, w0, w1, ky_hi - ky_lo, row_len, dy);
        return;
    }
    for (ky = 0; ky < ky_hi - ky_lo; ky++) {
        for (kx = 0; kx < p->k_w; kx++) {
            const int8_t *xt = x + ky * dy + kx * p->dil_w * p->in_c;
            const int32_t wo = ky * row_len + kx * p->in_c;
            kiln_dot_2x2(acc, xt, xt + dx, w0 + wo, w1 + wo, p->in_c);
        }
    }
}

/* input_zp * sum(w) over the taps of a k_h x k_w window outside [range[0], range[1]) x [range[2], range[3]),
 * from the per-tap sums zs. */
static uint32_t kiln_pad_taps(const uint32_t *zs, int32_t k_h, int32_t k_w, const int32_t range[4])
{
    uint32_t s = 0;
    int32_t ky, kx;
    for (ky = 0; ky < k_h; ky++) {
        for (kx = 0; kx < k_w; kx++) {
            if (ky < range[0] || ky >= range[1] || kx < range[2] || kx >= range[3]) {
                s += zs[ky * k_w + kx];
            }
        }
    }
    return s;
}

/* One pixel with window origin (iy0, ix0) in image `img`, in-image taps [range[0], range[1]) x
 * [range[2], range[3]); the padded taps' input_zp * sum(w) come from the per-tap sums zs0, zs1. */
static void kiln_conv_single(const kiln_conv2d_s8_params_t *p, const int8_t *img, int32_t iy0, int32_t ix0,
                             const int32_t range[4], const int8_t *w0, const int8_t *w1, const uint32_t *zs0,
                             const uint32_t *zs1, uint32_t *a0, uint32_t *a1)
{
    const int32_t c = p->in_c, row_len = p->k_w * c, kx_lo = range[2], kx_hi = range[3];
    int32_t ky, kx;
    *a0 += kiln_pad_taps(zs0, p->k_h, p->k_w, range);
    *a1 += kiln_pad_taps(zs1, p->k_h, p->k_w, range);
    for (ky = range[0]; ky < range[1]; ky++) {
        const int8_t *wr0 = w0 + ky * row_len, *wr1 = w1 + ky * row_len;
        const int32_t xr = (iy0 + ky * p->dil_h) * p->in_w + ix0; /* pixel index of tap kx = 0 */
        if (p->dil_w == 1 && kx_hi > kx_lo) {
            kiln_dot_1x2(a0, a1, img + (xr + kx_lo) * c, wr0 + kx_lo * c, wr1 + kx_lo * c, (kx_hi - kx_lo) * c);
            continue;
        }
        for (kx = kx_lo; kx < kx_hi; kx++) {
            kiln_dot_1x2(a0, a1, img + (xr + kx * p->dil_w) * c, wr0 + kx * c, wr1 + kx * c, c);
        }
    }
}

/* Output channels o and o1 = o + c1 (c1 = 0 for an odd last channel) of every pixel, y0 at channel o
 * of the first pixel, for windows of at most KILN_TAPS_MAX taps. Pixel pairs whose windows lie in
 * the image but for whole rows take kiln_conv_pair, the others go one at a time. */
#define KILN_TAPS_MAX 25

static void kiln_conv_channels(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w0,
                               const int8_t *w1, uint32_t bias0, uint32_t bias1, const kiln_rq_t *q0,
                               const kiln_rq_t *q1, const kiln_out_t *out, int8_t *y0, int32_t c1)
{
    const int32_t oc_n = p->out_c, dx = p->stride_w * p->in_c;
    uint32_t zs[2][KILN_TAPS_MAX];
    int32_t b, oy, ox, t, range[4], next[4];
    for (t = 0; t < p->k_h * p->k_w; t++) {
        zs[0][t] = (uint32_t)p->input_zp * kiln_sum_s8(w0 + t * p->in_c, p->in_c);
        zs[1][t] = (uint32_t)p->input_zp * kiln_sum_s8(w1 + t * p->in_c, p->in_c);
    }
    for (b = 0; b < p->n; b++) {
        const int8_t *img = x + b * p->in_h * p->in_w * p->in_c;
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            const int32_t out_row = (b * p->out_h + oy) * p->out_w;
            kiln_tap_range(iy0, p->dil_h, p->k_h, p->in_h, &range[0], &range[1]);
            for (ox = 0; ox < p->out_w;) {
                const int32_t ix0 = ox * p->stride_w - p->pad_left, at = (out_row + ox) * oc_n;
                kiln_tap_range(ix0, p->dil_w, p->k_w, p->in_w, &range[2], &range[3]);
                kiln_tap_range(ix0 + p->stride_w, p->dil_w, p->k_w, p->in_w, &next[2], &next[3]);
                if (range[1] > range[0] && ox + 1 < p->out_w && range[2] == 0 && range[3] == p->k_w &&
                    next[2] == 0 && next[3] == p->k_w) {
                    const int32_t lo = range[0], hi = range[1];
                    kiln_acc2x2_t acc;
                    acc.a00 = acc.a10 = bias0 + (lo > 0 || hi < p->k_h ? kiln_pad_taps(zs[0], p->k_h, p->k_w, range) : 0);
                    acc.a01 = acc.a11 = bias1 + (lo > 0 || hi < p->k_h ? kiln_pad_taps(zs[1], p->k_h, p->k_w, range) : 0);
                    kiln_conv_pair(p, img + ((iy0 + lo * p->dil_h) * p->in_w + ix0) * p->in_c, dx, lo, hi, w0, w1,
                                   &acc);
                    kiln_store_2x2(&acc, *q0, *q1, *out, y0 + at, y0 + at + oc_n, 0, c1);
                    ox += 2;
                } else {
                    uint32_t a0 = bias0, a1 = bias1;
                    kiln_conv_single(p, img, iy0, ix0, range, w0, w1, zs[0], zs[1], &a0, &a1);
                    const int8_t v0 = kiln_out_s8(out, kiln_rq_apply(q0, kiln_wrap_s32(a0)));
                    y0[at + c1] = kiln_out_s8(out, kiln_rq_apply(q1, kiln_wrap_s32(a1)));
                    y0[at] = v0;
                    ox += 1;
                }
            }
        }
    }
}

/* n copies of v at dst. */
static void kiln_fill_s8(int8_t *dst, int32_t n, int8_t v)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        dst[i] = v;
    }
}

/* A pixel's window (k_h x k_w x in_c, OHWI order) copied to `col`, the input zero point at padded taps. */
static void kiln_conv_gather(const kiln_conv2d_s8_params_t *p, const int8_t *img, int32_t iy0, int32_t ix0,
                             int8_t *col)
{
    const int32_t c = p->in_c, row_len = p->k_w * c;
    const int8_t zp = (int8_t)p->input_zp;
    int32_t ky, kx, lo, hi;
    kiln_tap_range(ix0, p->dil_w, p->k_w, p->in_w, &lo, &hi);
    for (ky = 0; ky < p->k_h; ky++, col += row_len) {
        const int32_t iy = iy0 + ky * p->dil_h;
        if (iy < 0 || iy >= p->in_h) {
            kiln_fill_s8(col, row_len, zp);
            continue;
        }
        kiln_fill_s8(col, lo * c, zp);
        if (p->dil_w == 1 && hi > lo) {
            memcpy(col + lo * c, img + (iy * p->in_w + ix0 + lo) * c, (size_t)((hi - lo) * c));
        } else {
            for (kx = lo; kx < hi; kx++) {
                memcpy(col + kx * c, img + (iy * p->in_w + ix0 + kx * p->dil_w) * c, (size_t)c);
            }
        }
        kiln_fill_s8(col + hi * c, row_len - hi * c, zp);
    }
}

/* Windows of at most KILN_COL_MAX values: the gathered columns (2 * KILN_COL_MAX bytes of stack) make
 * every pixel, border ones included, one contiguous kiln_dot_2x2 per channel pair. */
#define KILN_COL_MAX 160

static void kiln_conv_columns(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, const kiln_out_t *out, int8_t *y)
{
    const int32_t k = p->k_h * p->k_w * p->in_c, oc_n = p->out_c;
    int8_t col[2][KILN_COL_MAX];
    int32_t b, oy, ox, o;
    for (b = 0; b < p->n; b++) {
        const int8_t *img = x + b * p->in_h * p->in_w * p->in_c;
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            for (ox = 0; ox < p->out_w; ox += 2) {
                const int32_t ix0 = ox * p->stride_w - p->pad_left, two = ox + 1 < p->out_w;
                int8_t *y0 = y + ((b * p->out_h + oy) * p->out_w + ox) * oc_n, *y1 = two ? y0 + oc_n : y0;
                kiln_conv_gather(p, img, iy0, ix0, col[0]);
                kiln_conv_gather(p, img, iy0, two ? ix0 + p->stride_w : ix0, col[1]);
                for (o = 0; o < oc_n; o += 2) {
                    const int32_t o1 = o + 1 < oc_n ? o + 1 : o; /* an odd last channel pairs with itself */
                    const kiln_rq_t q0 = kiln_rq_channel(mult[o], shift[o]), q1 = kiln_rq_channel(mult[o1], shift[o1]);
                    kiln_acc2x2_t acc;
                    acc.a00 = acc.a10 = (uint32_t)bias[o];
                    acc.a01 = acc.a11 = (uint32_t)bias[o1];
                    kiln_dot_2x2(&acc, col[0], col[1], w + o * k, w + o1 * k, k);
                    kiln_store_2x2(&acc, q0, q1, *out, y0, y1, o, o1);
                }
            }
        }
    }
}

/* Windows of more than KILN_TAPS_MAX taps and KILN_COL_MAX values (large kernels over many channels):
 * one output at a time, padded taps multiplying input_zp. */
static void kiln_conv_large(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, const kiln_out_t *out, int8_t *y)
{
    const int32_t c = p->in_c;
    int32_t b, oy, ox, oc, ky, kx, i;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                for (oc = 0; oc < p->out_c; oc++) {
                    const kiln_rq_t q = kiln_rq_channel(mult[oc], shift[oc]);
                    uint32_t acc = (uint32_t)bias[oc];
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
                            const int8_t *wp = w + ((oc * p->k_h + ky) * p->k_w + kx) * c;
                            const int in_image = iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w;
                            for (i = 0; i < c; i++) {
                                const int32_t xv = in_image ? x[((b * p->in_h + iy) * p->in_w + ix) * c + i] : p->input_zp;
                                acc += (uint32_t)(xv * wp[i]);
                            }
                        }
                    }
                    y[((b * p->out_h + oy) * p->out_w + ox) * p->out_c + oc] =
                        kiln_out_s8(out, kiln_rq_apply(&q, kiln_wrap_s32(acc)));
                }
            }
        }
    }
}

/* Pixel (b, oy, ox)'s window, k_h x k_w x in_c values in OHWI order, as its lanes in a block from `at`
 * (the block's first group at the pixel's lanes). With dilation 1 a kernel row's in-image taps are one
 * run of input bytes. Channel counts that are a multiple of 4 widen straight from the input; others
 * gather the window into the int8 row first (groups of 4 then straddle taps). */
static void kiln_conv_lanes(const kiln_conv2d_s8_params_t *p, const int8_t *x, int32_t b, int32_t oy, int32_t ox,
                            int32_t twice, uint32_t *at, int8_t *row)
{
    /* locals: an int8 store may alias *p */
    const int32_t c_n = p->in_c, in_h = p->in_h, in_w = p->in_w, k_h = p->k_h, k_w = p->k_w;
    const int32_t dil_h = p->dil_h, dil_w = p->dil_w, iy0 = oy * p->stride_h - p->pad_top;
    const int32_t ix0 = ox * p->stride_w - p->pad_left, k = k_h * k_w * c_n, aligned = c_n % 4 == 0;
    const int8_t zp = (int8_t)p->input_zp;
    const uint32_t zp2 = kiln_pack16(zp * (twice ? 2 : 1), zp * (twice ? 2 : 1));
    const int8_t *image = x + b * in_h * in_w * c_n;
    int32_t ky, kx, lo, hi, c;
    int8_t *r = row;
    kiln_tap_range(ix0, dil_w, k_w, in_w, &lo, &hi);
    for (ky = 0; ky < k_h; ky++) {
        const int32_t iy = iy0 + ky * dil_h;
        const int8_t *line;
        if (iy < 0 || iy >= in_h || hi <= lo) {
            if (aligned) {
                kiln_gemm_fill(at, zp2, k_w * c_n / 4);
                at += 2 * k_w * c_n;
            } else {
                kiln_fill_s8(r, k_w * c_n, zp);
                r += k_w * c_n;
            }
            continue;
        }
        line = image + (iy * in_w + ix0 + lo * dil_w) * c_n;
        if (aligned) {
            kiln_gemm_fill(at, zp2, lo * c_n / 4);
            at += 2 * lo * c_n;
            if (dil_w == 1) {
                kiln_gemm_widen(at, line, (hi - lo) * c_n / 4, twice);
                at += 2 * (hi - lo) * c_n;
            } else {
                for (kx = lo; kx < hi; kx++, line += dil_w * c_n, at += 2 * c_n) {
                    kiln_gemm_widen(at, line, c_n / 4, twice);
                }
            }
            kiln_gemm_fill(at, zp2, (k_w - hi) * c_n / 4);
            at += 2 * (k_w - hi) * c_n;
        } else {
            kiln_fill_s8(r, lo * c_n, zp);
            r += lo * c_n;
            if (dil_w == 1) { /* one run: words, then the last bytes */
                const int8_t *end = line + (hi - lo) * c_n;
                for (; line + 4 <= end; line += 4, r += 4) {
                    const uint32_t v = kiln_load4(line);
                    memcpy(r, &v, 4);
                }
                while (line < end) {
                    *r++ = *line++;
                }
            }
            for (kx = dil_w == 1 ? hi : lo; kx < hi; kx++, line += dil_w * c_n) {
                for (c = 0; c < c_n; c++) {
                    *r++ = line[c];
                }
            }
            kiln_fill_s8(r, (k_w - hi) * c_n, zp);
            r += (k_w - hi) * c_n;
        }
    }
    if (!aligned) {
        for (c = k; c % 4 != 0; c++) {
            *r++ = 0;
        }
        kiln_gemm_widen(at, row, (k + 3) / 4, twice);
    }
}

/* The add or sub a fused conv's output feeds (kiln_conv2d_add_s8), run over the conv outputs of this many
 * pixels at a time (a multiple of the 4 of a block; more when they have few channels). */
#define KILN_RESIDUAL_PIXELS(out_c) ((out_c) < 16 ? 64 : 16)

typedef struct {
    const int8_t *r;
    const int32_t *table;
    int32_t mult, round, shift, lo, hi;
} kiln_residual_t;

/* The whole layer through blocks of four output pixels in scratch s (kiln_gemm.h); with a residual, each
 * block's conv outputs go to scratch and the add writes y. */
static void kiln_conv_gemm(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                           const int32_t *mult, const int32_t *shift, int8_t *y, uint32_t *s, const kiln_residual_t *res)
{
    const int32_t k = p->k_h * p->k_w * p->in_c, total = p->n * p->out_h * p->out_w, out_c = p->out_c;
    const int32_t twice = (p->requant & KILN_RQ_FAST) != 0, words = KILN_GEMM_BLOCK_WORDS(k);
    const int32_t group = KILN_RESIDUAL_PIXELS(out_c);
    uint32_t *cols = s + KILN_GEMM_TABLE_WORDS(out_c);
    int8_t *row = (int8_t *)(cols + words), *block = (int8_t *)(s + KILN_GEMM_SCRATCH_WORDS(k, out_c));
    kiln_gemm_t g;
    int32_t q, i, b = 0, oy = 0, ox = 0;
    g.k = k;
    g.out_c = out_c;
    g.out_zp = p->out_zp;
    g.act_min = p->act_min;
    g.act_max = p->act_max;
    g.requant = p->requant;
    g.w = w;
    g.bias = bias;
    g.mult = mult;
    g.shift = shift;
    g.table = s;
    if (twice) {
        kiln_gemm_prepare(&g);
    }
    for (q = 0; q < total; q += 4) {
        const int32_t pixels = total - q < 4 ? total - q : 4;
        for (i = 0; i < 4; i++) {
            if (i >= pixels) { /* a missing pixel: zero lanes, no output */
                kiln_gemm_fill(cols + 2 * i, 0, words / 8);
                continue;
            }
            kiln_conv_lanes(p, x, b, oy, ox, twice, cols + 2 * i, row);
            if (++ox == p->out_w) {
                ox = 0;
                if (++oy == p->out_h) {
                    oy = 0;
                    b++;
                }
            }
        }
        if (res == NULL) {
            kiln_gemm_block(&g, cols, y + q * out_c, pixels);
            continue;
        }
        kiln_gemm_block(&g, cols, block + q % group * out_c, pixels);
        if ((q + 4) % group == 0 || q + 4 >= total) { /* the add over the blocks gathered */
            const int32_t first = q - q % group;
            kiln_add_table_span(block, res->r + first * out_c, res->table, y + first * out_c, (q + pixels - first) * out_c,
                                res->mult, res->round, res->shift, res->lo, res->hi);
        }
    }
}

void kiln_conv2d_s8(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                    const int32_t *mult, const int32_t *shift, int8_t *y, void *scratch)
{
#ifdef KILN_MVE
    if (kiln_mve_conv2d_s8(p, x, w, bias, mult, shift, y)) {
        return;
    }
#endif
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    const int32_t k = p->k_h * p->k_w * p->in_c;
    int32_t o;
    if (KILN_SCRATCH_PATHS && scratch != NULL && p->scratch_bytes >= 4 * KILN_GEMM_SCRATCH_WORDS(k, p->out_c) + 3) {
        kiln_conv_gemm(p, x, w, bias, mult, shift, y, (uint32_t *)(((uintptr_t)scratch + 3u) & ~(uintptr_t)3u), NULL);
        return;
    }
    if (k <= KILN_COL_MAX) {
        kiln_conv_columns(p, x, w, bias, mult, shift, &out, y);
        return;
    }
    if (p->k_h * p->k_w > KILN_TAPS_MAX) {
        kiln_conv_large(p, x, w, bias, mult, shift, &out, y);
        return;
    }
    for (o = 0; o < p->out_c; o += 2) {
        const int32_t o1 = o + 1 < p->out_c ? o + 1 : o; /* an odd last channel pairs with itself */
        const kiln_rq_t q0 = kiln_rq_channel(mult[o], shift[o]), q1 = kiln_rq_channel(mult[o1], shift[o1]);
        kiln_conv_channels(p, x, w + o * k, w + o1 * k, (uint32_t)bias[o], (uint32_t)bias[o1], &q0, &q1, &out,
                           y + o, o1 - o);
    }
}

/* Without the scratch paths: the conv of bands of whole output rows into scratch `band` (its direct paths,
 * the band's rows as a layer of their own: pad_top moved by the rows above), the add after each band.
 * Returns 0 when scratch cannot hold one output row. */
static int kiln_conv_add_rows(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w, const int32_t *bias,
                              const int32_t *mult, const int32_t *shift, const kiln_residual_t *res, int8_t *y,
                              int8_t *band)
{
    const int32_t row = p->out_w * p->out_c, rows = p->scratch_bytes / row, image = p->out_h * row;
    kiln_conv2d_s8_params_t c = *p;
    int32_t b, oy;
    if (rows == 0) {
        return 0;
    }
    c.n = 1;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy += rows) {
            const int32_t at = b * image + oy * row;
            c.out_h = p->out_h - oy < rows ? p->out_h - oy : rows;
            c.pad_top = p->pad_top - oy * p->stride_h;
            kiln_conv2d_s8(&c, x + b * p->in_h * p->in_w * p->in_c, w, bias, mult, shift, band, NULL);
            kiln_add_table_span(band, res->r + at, res->table, y + at, c.out_h * row, res->mult, res->round, res->shift,
                                res->lo, res->hi);
        }
    }
    return 1;
}

void kiln_conv2d_add_s8(const kiln_conv2d_add_s8_params_t *p, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, const int8_t *r,
                        const int32_t *table, int8_t *y, void *scratch)
{
    const int32_t k = p->k_h * p->k_w * p->in_c;
    kiln_conv2d_s8_params_t c;
    kiln_residual_t res;
    c.n = p->n;
    c.in_h = p->in_h;
    c.in_w = p->in_w;
    c.in_c = p->in_c;
    c.out_h = p->out_h;
    c.out_w = p->out_w;
    c.out_c = p->out_c;
    c.k_h = p->k_h;
    c.k_w = p->k_w;
    c.stride_h = p->stride_h;
    c.stride_w = p->stride_w;
    c.dil_h = p->dil_h;
    c.dil_w = p->dil_w;
    c.pad_top = p->pad_top;
    c.pad_left = p->pad_left;
    c.input_zp = p->input_zp;
    c.out_zp = p->out_zp;
    c.act_min = p->act_min;
    c.act_max = p->act_max;
    c.requant = p->requant;
    c.scratch_bytes = p->scratch_bytes;
    res.r = r;
    res.table = table;
    res.mult = p->add_mult;
    res.round = p->add_round;
    res.shift = p->add_shift;
    res.lo = p->add_min;
    res.hi = p->add_max;
    const int32_t need = 4 * KILN_GEMM_SCRATCH_WORDS(k, p->out_c) + KILN_RESIDUAL_PIXELS(p->out_c) * p->out_c + 3;
    if (KILN_SCRATCH_PATHS && scratch != NULL && p->scratch_bytes >= need) {
        kiln_conv_gemm(&c, x, w, bias, mult, shift, y, (uint32_t *)(((uintptr_t)scratch + 3u) & ~(uintptr_t)3u), &res);
        return;
    }
    if (!KILN_SCRATCH_PATHS && scratch != NULL && kiln_conv_add_rows(&c, x, w, bias, mult, shift, &res, y, (int8_t *)scratch)) {
        return;
    }
    {   /* without scratch: one output value at a time, the add right after it */
        const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
        const int32_t total = p->n * p->out_h * p->out_w;
        int32_t q, o, ky, kx, i;
        for (q = 0; q < total; q++) {
            const int32_t b = q / (p->out_h * p->out_w), oy = q / p->out_w % p->out_h, ox = q % p->out_w;
            for (o = 0; o < p->out_c; o++) {
                const kiln_rq_t rq = kiln_rq_channel(mult[o], shift[o]);
                uint32_t acc = (uint32_t)bias[o];
                int8_t v;
                for (ky = 0; ky < p->k_h; ky++) {
                    const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
                    for (kx = 0; kx < p->k_w; kx++) {
                        const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
                        const int8_t *wp = w + ((o * p->k_h + ky) * p->k_w + kx) * p->in_c;
                        const int in_image = iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w;
                        for (i = 0; i < p->in_c; i++) {
                            const int32_t xv = in_image ? x[((b * p->in_h + iy) * p->in_w + ix) * p->in_c + i] : p->input_zp;
                            acc += (uint32_t)(xv * wp[i]);
                        }
                    }
                }
                v = kiln_out_s8(&out, kiln_rq_apply(&rq, kiln_wrap_s32(acc)));
                kiln_add_table_span(&v, r + q * p->out_c + o, table, y + q * p->out_c + o, 1, p->add_mult, p->add_round,
                                    p->add_shift, p->add_min, p->add_max);
            }
        }
    }
}
