/* The Helium (M-profile Vector Extension) paths of the int8 kernels that
 * carry the multiply-accumulates, for cores whose compiler defines
 * __ARM_FEATURE_MVE (Cortex-M55, M85): the kernels' entry points call these
 * first and keep their own (DSP or portable) paths for the shapes these do
 * not take. Every path is bit-exact with the integer reference:
 * - dot products: VMLADAVA multiplies 16 int8 pairs and adds them all to a
 *   scalar int32 accumulator (wrapping, as the reference's int32 sums); two
 *   pixels (rows) x four output channels per block, so each input vector
 *   feeds 4 and each weight vector 2 of them; a tail shorter than 16 is read
 *   with tail-predicated loads (VCTP), zero in the unused lanes;
 * - depthwise: 4 channels per vector, widened to int32 lanes on load, a
 *   VMUL and a VADD per tap;
 * - add and sub of operands of one shape: 4 elements per vector;
 * - requantization, four values at a time: VQRDMULH is arm_nn_requantize's
 *   doubling high multiply (the multipliers are non-negative, so it never
 *   saturates), and its rounding divide by 2^e (half away from zero) is
 *   VRSHL after subtracting 1 from the negative values that are shifted
 *   (CMSIS-NN's arm_divide_by_power_of_two_mve); then the output zero point
 *   and the activation bounds, and a narrowing store. */
#ifndef KILN_MVE_H
#define KILN_MVE_H

#include <stdint.h>

#if defined(__ARM_FEATURE_MVE) && defined(__OPTIMIZE__) && !defined(KILN_PORTABLE_KERNELS)
#include <arm_mve.h>
#define KILN_MVE 1

/* The requantizers of 4 output channels and the output range, as vectors. */
typedef struct {
    int32x4_t mult, left, right, lo, hi;
    int32_t zp;
} kiln_mve_rq_t;

/* Output channels [c, c + 4) of per-channel (mult, shift), clamped to [act_min, act_max] after adding out_zp. */
static inline kiln_mve_rq_t kiln_mve_rq(const int32_t *mult, const int32_t *shift, int32_t c, int32_t n_c, int32_t out_zp,
                                        int32_t act_min, int32_t act_max)
{
    const mve_pred16_t p = vctp32q((uint32_t)(n_c - c));
    const int32x4_t s = vldrwq_z_s32(shift + c, p), zero = vdupq_n_s32(0);
    kiln_mve_rq_t r;
    r.mult = vldrwq_z_s32(mult + c, p);
    r.left = vmaxq_s32(s, zero);
    r.right = vminq_s32(s, zero); /* a right shift, as VRSHL's negative count */
    r.lo = vdupq_n_s32(act_min - out_zp);
    r.hi = vdupq_n_s32(act_max - out_zp);
    r.zp = out_zp;
    return r;
}

/* One requantizer (mult, shift) for every lane, with no output range (the inputs of an add). */
static inline kiln_mve_rq_t kiln_mve_rq_one(int32_t mult, int32_t shift)
{
    kiln_mve_rq_t r;
    r.mult = vdupq_n_s32(mult);
    r.left = vdupq_n_s32(shift > 0 ? shift : 0);
    r.right = vdupq_n_s32(shift < 0 ? shift : 0);
    r.lo = r.hi = vdupq_n_s32(0);
    r.zp = 0;
    return r;
}

/* arm_nn_requantize of 4 values. */
static inline int32x4_t kiln_mve_requantize_raw(const kiln_mve_rq_t *r, int32x4_t acc)
{
    const int32x4_t high = vqrdmulhq_s32(vshlq_s32(acc, r->left), r->mult);
    const int32x4_t fixup = vshrq_n_s32(vandq_s32(high, r->right), 31);
    return vrshlq_s32(vqaddq_s32(high, fixup), r->right);
}

/* arm_nn_requantize of 4 accumulators, the output zero point added and clamped: the int8 results in int32 lanes. */
static inline int32x4_t kiln_mve_requantize(const kiln_mve_rq_t *r, int32x4_t acc)
{
    const int32x4_t v = vminq_s32(vmaxq_s32(kiln_mve_requantize_raw(r, acc), r->lo), r->hi);
    return vaddq_n_s32(v, r->zp);
}

/* Requantize 4 accumulators (channels c..c+3 of n_c) and store the int8 results at y[c..]. */
static inline void kiln_mve_store4(const kiln_mve_rq_t *r, const int32_t acc[4], int8_t *y, int32_t c, int32_t n_c)
{
    vstrbq_p_s32(y + c, kiln_mve_requantize(r, vldrwq_s32(acc)), vctp32q((uint32_t)(n_c - c)));
}

/* acc[p * 4 + j] += x_p . w_j over k int8 values, for pixels x_0 = x0, x_1 = x1 and weight rows w_j = w + j * k. */
static inline void kiln_mve_dot_2x4(int32_t acc[8], const int8_t *x0, const int8_t *x1, const int8_t *w, int32_t k)
{
    const int8_t *w1 = w + k, *w2 = w1 + k, *w3 = w2 + k;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3], b0 = acc[4], b1 = acc[5], b2 = acc[6], b3 = acc[7];
    int32_t i;
    for (i = 0; i + 16 <= k; i += 16) {
        const int8x16_t u = vldrbq_s8(x0 + i), v = vldrbq_s8(x1 + i);
        int8x16_t wv = vldrbq_s8(w + i);
        a0 = vmladavaq_s8(a0, u, wv);
        b0 = vmladavaq_s8(b0, v, wv);
        wv = vldrbq_s8(w1 + i);
        a1 = vmladavaq_s8(a1, u, wv);
        b1 = vmladavaq_s8(b1, v, wv);
        wv = vldrbq_s8(w2 + i);
        a2 = vmladavaq_s8(a2, u, wv);
        b2 = vmladavaq_s8(b2, v, wv);
        wv = vldrbq_s8(w3 + i);
        a3 = vmladavaq_s8(a3, u, wv);
        b3 = vmladavaq_s8(b3, v, wv);
    }
    if (i < k) {
        const mve_pred16_t p = vctp8q((uint32_t)(k - i));
        const int8x16_t u = vldrbq_z_s8(x0 + i, p), v = vldrbq_z_s8(x1 + i, p);
        int8x16_t wv = vldrbq_z_s8(w + i, p);
        a0 = vmladavaq_s8(a0, u, wv);
        b0 = vmladavaq_s8(b0, v, wv);
        wv = vldrbq_z_s8(w1 + i, p);
        a1 = vmladavaq_s8(a1, u, wv);
        b1 = vmladavaq_s8(b1, v, wv);
        wv = vldrbq_z_s8(w2 + i, p);
        a2 = vmladavaq_s8(a2, u, wv);
        b2 = vmladavaq_s8(b2, v, wv);
        wv = vldrbq_z_s8(w3 + i, p);
        a3 = vmladavaq_s8(a3, u, wv);
        b3 = vmladavaq_s8(b3, v, wv);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = b0, acc[5] = b1, acc[6] = b2, acc[7] = b3;
}

/* acc[j] += x . w_j over k int8 values, for the weight rows w_j = w + j * k. */
static inline void kiln_mve_dot_1x4(int32_t acc[4], const int8_t *x, const int8_t *w, int32_t k)
{
    const int8_t *w1 = w + k, *w2 = w1 + k, *w3 = w2 + k;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int32_t i;
    for (i = 0; i + 16 <= k; i += 16) {
        const int8x16_t u = vldrbq_s8(x + i);
        a0 = vmladavaq_s8(a0, u, vldrbq_s8(w + i));
        a1 = vmladavaq_s8(a1, u, vldrbq_s8(w1 + i));
        a2 = vmladavaq_s8(a2, u, vldrbq_s8(w2 + i));
        a3 = vmladavaq_s8(a3, u, vldrbq_s8(w3 + i));
    }
    if (i < k) {
        const mve_pred16_t p = vctp8q((uint32_t)(k - i));
        const int8x16_t u = vldrbq_z_s8(x + i, p);
        a0 = vmladavaq_s8(a0, u, vldrbq_z_s8(w + i, p));
        a1 = vmladavaq_s8(a1, u, vldrbq_z_s8(w1 + i, p));
        a2 = vmladavaq_s8(a2, u, vldrbq_z_s8(w2 + i, p));
        a3 = vmladavaq_s8(a3, u, vldrbq_z_s8(w3 + i, p));
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* x . w over k int8 values. */
static inline int32_t kiln_mve_dot(const int8_t *x, const int8_t *w, int32_t k)
{
    int32_t a = 0, i;
    for (i = 0; i + 16 <= k; i += 16) {
        a = vmladavaq_s8(a, vldrbq_s8(x + i), vldrbq_s8(w + i));
    }
    if (i < k) {
        const mve_pred16_t p = vctp8q((uint32_t)(k - i));
        a = vmladavaq_s8(a, vldrbq_z_s8(x + i, p), vldrbq_z_s8(w + i, p));
    }
    return a;
}

/* y[r][o] = requantize(bias[o] + x[r] . w[o]) for r < rows, o < cols, vectors of length k: pairs of rows
 * against groups of 4 weight rows, a last odd row alone; a last group of fewer than 4 channels one dot each. */
static inline void kiln_mve_matmul_s8(const int8_t *x, const int8_t *w, int32_t rows, int32_t cols, int32_t k,
                                      const int32_t *bias, const int32_t *mult, const int32_t *shift, int32_t out_zp,
                                      int32_t act_min, int32_t act_max, int8_t *y)
{
    int32_t r, o, j;
    for (o = 0; o < cols; o += 4) {
        const kiln_mve_rq_t q = kiln_mve_rq(mult, shift, o, cols, out_zp, act_min, act_max);
        const int32_t n = cols - o < 4 ? cols - o : 4;
        for (r = 0; r < rows; r += 2) {
            int32_t acc[8];
            for (j = 0; j < 4; j++) {
                acc[j] = acc[4 + j] = bias[o + (j < n ? j : n - 1)];
            }
            if (n == 4 && r + 1 < rows) {
                kiln_mve_dot_2x4(acc, x + r * k, x + (r + 1) * k, w + o * k, k);
            } else if (n == 4) {
                kiln_mve_dot_1x4(acc, x + r * k, w + o * k, k);
            } else {
                for (j = 0; j < n; j++) {
                    acc[j] += kiln_mve_dot(x + r * k, w + (o + j) * k, k);
                    acc[4 + j] += r + 1 < rows ? kiln_mve_dot(x + (r + 1) * k, w + (o + j) * k, k) : 0;
                }
            }
            if (r + 1 < rows) {
                kiln_mve_store4(&q, acc + 4, y + (r + 1) * cols, o, cols);
            }
            kiln_mve_store4(&q, acc, y + r * cols, o, cols);
        }
    }
}

/* Bytes of one gathered conv window the Helium conv path takes (two of them on the stack). */
#define KILN_MVE_COL_MAX 1152

/* A pixel's window (k_h x k_w x in_c, OHWI order) copied to `col`, the input zero point at padded taps. */
static inline void kiln_mve_gather(const kiln_conv2d_s8_params_t *p, const int8_t *img, int32_t iy0, int32_t ix0,
                                   int8_t *col)
{
    const int32_t c = p->in_c;
    int32_t ky, kx;
    for (ky = 0; ky < p->k_h; ky++) {
        const int32_t iy = iy0 + ky * p->dil_h;
        for (kx = 0; kx < p->k_w; kx++, col += c) {
            const int32_t ix = ix0 + kx * p->dil_w;
            if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
                memset(col, p->input_zp, (size_t)c);
            } else {
                memcpy(col, img + (iy * p->in_w + ix) * c, (size_t)c);
            }
        }
    }
}

/* kiln_conv2d_s8 for windows of at most KILN_MVE_COL_MAX values: pairs of pixels gathered into two columns,
 * each against 4 output channels at a time. Returns 0 when the window is larger (the caller's paths take it). */
static inline int kiln_mve_conv2d_s8(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                                     const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
    const int32_t k = p->k_h * p->k_w * p->in_c, oc_n = p->out_c, pixels = p->out_h * p->out_w;
    int8_t col[2][KILN_MVE_COL_MAX];
    int32_t b, i, o, j;
    if (k > KILN_MVE_COL_MAX) {
        return 0;
    }
    for (b = 0; b < p->n; b++) {
        const int8_t *img = x + b * p->in_h * p->in_w * p->in_c;
        for (i = 0; i < pixels; i += 2) {
            const int32_t i1 = i + 1 < pixels ? i + 1 : i;
            int8_t *y0 = y + (b * pixels + i) * oc_n, *y1 = y + (b * pixels + i1) * oc_n;
            kiln_mve_gather(p, img, (i / p->out_w) * p->stride_h - p->pad_top, (i % p->out_w) * p->stride_w - p->pad_left,
                            col[0]);
            kiln_mve_gather(p, img, (i1 / p->out_w) * p->stride_h - p->pad_top,
                            (i1 % p->out_w) * p->stride_w - p->pad_left, col[1]);
            for (o = 0; o < oc_n; o += 4) {
                const kiln_mve_rq_t q = kiln_mve_rq(mult, shift, o, oc_n, p->out_zp, p->act_min, p->act_max);
                const int32_t n = oc_n - o < 4 ? oc_n - o : 4;
                int32_t acc[8];
                for (j = 0; j < 4; j++) {
                    acc[j] = acc[4 + j] = bias[o + (j < n ? j : n - 1)];
                }
                if (n == 4) {
                    kiln_mve_dot_2x4(acc, col[0], col[1], w + o * k, k);
                } else {
                    for (j = 0; j < n; j++) {
                        acc[j] += kiln_mve_dot(col[0], w + (o + j) * k, k);
                        acc[4 + j] += kiln_mve_dot(col[1], w + (o + j) * k, k);
                    }
                }
                kiln_mve_store4(&q, acc + 4, y1, o, oc_n);
                kiln_mve_store4(&q, acc, y0, o, oc_n);
            }
        }
    }
    return 1;
}

/* kiln_depthwise_conv2d_s8 with ch_mult = 1: 4 channels per vector (a last group tail-predicated), x * w per
 * in-image tap and, at the border, input_zp * w per padded tap. Returns 0 for ch_mult > 1. */
static inline int kiln_mve_depthwise_conv2d_s8(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x,
                                               const int8_t *w, const int32_t *bias, const int32_t *mult,
                                               const int32_t *shift, int8_t *y)
{
    const int32_t ch = p->in_c, dx = p->dil_w * ch, dy = p->dil_h * p->in_w * ch;
    int32_t c, b, oy, ox, ky, kx, ky_lo, ky_hi, kx_lo, kx_hi;
    if (p->ch_mult != 1) {
        return 0;
    }
    for (c = 0; c < ch; c += 4) {
        const kiln_mve_rq_t q = kiln_mve_rq(mult, shift, c, ch, p->out_zp, p->act_min, p->act_max);
        const mve_pred16_t lanes = vctp32q((uint32_t)(ch - c));
        const int32x4_t bias4 = vldrwq_z_s32(bias + c, lanes);
        for (b = 0; b < p->n; b++) {
            for (oy = 0; oy < p->out_h; oy++) {
                const int32_t iy0 = oy * p->stride_h - p->pad_top;
                int8_t *yr = y + (b * p->out_h + oy) * p->out_w * ch + c;
                kiln_tap_range(iy0, p->dil_h, p->k_h, p->in_h, &ky_lo, &ky_hi);
                for (ox = 0; ox < p->out_w; ox++) {
                    const int32_t ix0 = ox * p->stride_w - p->pad_left;
                    const int32_t at = ((b * p->in_h + iy0) * p->in_w + ix0) * ch + c; /* tap (0, 0), maybe padded */
                    int32x4_t acc = bias4;
                    kiln_tap_range(ix0, p->dil_w, p->k_w, p->in_w, &kx_lo, &kx_hi);
                    for (ky = ky_lo; ky < ky_hi; ky++) {
                        const int8_t *xr = x + at + ky * dy + kx_lo * dx, *wr = w + (ky * p->k_w + kx_lo) * ch + c;
                        for (kx = kx_lo; kx < kx_hi; kx++, xr += dx, wr += ch) {
                            acc = vaddq_s32(acc, vmulq_s32(vldrbq_z_s32(xr, lanes), vldrbq_z_s32(wr, lanes)));
                        }
                    }
                    if (ky_lo > 0 || ky_hi < p->k_h || kx_lo > 0 || kx_hi < p->k_w) {
                        for (ky = 0; ky < p->k_h; ky++) {
                            for (kx = 0; kx < p->k_w; kx++) {
                                if (ky < ky_lo || ky >= ky_hi || kx < kx_lo || kx >= kx_hi) {
                                    const int8_t *wt = w + (ky * p->k_w + kx) * ch + c;
                                    acc = vmlaq_n_s32(acc, vldrbq_z_s32(wt, lanes), p->input_zp);
                                }
                            }
                        }
                    }
                    vstrbq_p_s32(yr + ox * ch, kiln_mve_requantize(&q, acc), lanes);
                }
            }
        }
    }
    return 1;
}
/* kiln_add_s8 (or, with `subtract`, kiln_sub_s8) of two operands of the output's shape (no broadcasting),
 * 4 elements per vector: each input (x + offset) << left_shift requantized, the sum requantized to the output.
 * Returns 0 when an operand broadcasts. */
static inline int kiln_mve_add_s8(const kiln_add_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y,
                                  int subtract)
{
    const int32_t s2 = p->d3, s1 = p->d2 * s2, s0 = p->d1 * s1, n = p->d0 * s0;
    kiln_mve_rq_t ra, rb, ry;
    int32_t i;
    if (p->a_s3 != 1 || p->a_s2 != s2 || p->a_s1 != s1 || p->a_s0 != s0 || p->b_s3 != 1 || p->b_s2 != s2 ||
        p->b_s1 != s1 || p->b_s0 != s0) {
        return 0;
    }
    ra = kiln_mve_rq_one(p->a_mult, p->a_shift);
    rb = kiln_mve_rq_one(p->b_mult, p->b_shift);
    ry = kiln_mve_rq_one(p->out_mult, p->out_shift);
    ry.lo = vdupq_n_s32(p->act_min - p->out_zp);
    ry.hi = vdupq_n_s32(p->act_max - p->out_zp);
    ry.zp = p->out_zp;
    for (i = 0; i < n; i += 4) {
        const mve_pred16_t lanes = vctp32q((uint32_t)(n - i));
        const int32x4_t left = vdupq_n_s32(p->left_shift);
        const int32x4_t va = vshlq_s32(vaddq_n_s32(vldrbq_z_s32(a + i, lanes), p->a_offset), left);
        const int32x4_t vb = vshlq_s32(vaddq_n_s32(vldrbq_z_s32(b + i, lanes), p->b_offset), left);
        const int32x4_t sa = kiln_mve_requantize_raw(&ra, va), sb = kiln_mve_requantize_raw(&rb, vb);
        vstrbq_p_s32(y + i, kiln_mve_requantize(&ry, subtract ? vsubq_s32(sa, sb) : vaddq_s32(sa, sb)), lanes);
    }
    return 1;
}
#endif

#endif /* KILN_MVE_H */
