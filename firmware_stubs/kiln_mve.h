/* The Helium (M-profile Vector Extension) paths of the int8 kernels that
 * carry the multiply-accumulates, for cores whose compiler defines
 * __ARM_FEATURE_MVE (Cortex-M55, M85): the kernels' entry points call these
 * first and keep their own (DSP or portable) paths for the shapes these do
 * not take. Every path is bit-exact with the integer reference:
 * - dot products: VMLADAVA multiplies 16 int8 pairs and adds them all to a
 *   scalar int32 accumulator (wrapping, as the reference's int32 sums); one
 *   pixel (row) x four output channels per block, so each input vector feeds
 *   4 of them (more accumulators and GCC spills them to the stack); a tail
 *   shorter than 16 is read with tail-predicated loads (VCTP), zero in the
 *   unused lanes; conv windows are gathered zero-padded to whole vectors;
 * - depthwise: 4 channels per vector, widened to int32 lanes on load, four
 *   pixels sharing each weight vector (VMUL and VADD per tap and pixel),
 *   the rows the windows reach padded in a ring on the stack, 16 channels
 *   per ring column; 3x3 windows in an assembly block (GCC spills the four
 *   accumulators of the C on every tap);
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

/* acc[j] += x . w_j over 16 * n int8 values (0 < n), weight rows w_j = w + j * k: per 16 values one load
 * of x, one of each row and four VMLADAVA. */
static inline __attribute__((always_inline)) void kiln_mve_dot4_blocks(int32_t acc[4], const int8_t *x,
                                                                     const int8_t *w, int32_t k, int32_t n)
{
    const int8_t *w1 = w + k, *w2 = w1 + k, *w3 = w2 + k;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (; n > 0; n--, x += 16, w += 16, w1 += 16, w2 += 16, w3 += 16) {
        const int8x16_t u = vldrbq_s8(x);
        a0 = vmladavaq_s8(a0, u, vldrbq_s8(w));
        a1 = vmladavaq_s8(a1, u, vldrbq_s8(w1));
        a2 = vmladavaq_s8(a2, u, vldrbq_s8(w2));
        a3 = vmladavaq_s8(a3, u, vldrbq_s8(w3));
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* acc[j] += x . w_j over len int8 values, weight rows w_j = w + j * k: whole blocks of 16, then a
 * tail-predicated one (zero in the unused lanes). */
static inline __attribute__((always_inline)) void kiln_mve_dot4(int32_t acc[4], const int8_t *x, const int8_t *w, int32_t k, int32_t len)
{
    const int32_t whole = len & ~15;
    if (whole > 0) {
        kiln_mve_dot4_blocks(acc, x, w, k, whole / 16);
    }
    if (whole < len) {
        const mve_pred16_t p = vctp8q((uint32_t)(len - whole));
        const int8x16_t u = vldrbq_z_s8(x + whole, p);
        acc[0] = vmladavaq_s8(acc[0], u, vldrbq_z_s8(w + whole, p));
        acc[1] = vmladavaq_s8(acc[1], u, vldrbq_z_s8(w + k + whole, p));
        acc[2] = vmladavaq_s8(acc[2], u, vldrbq_z_s8(w + 2 * k + whole, p));
        acc[3] = vmladavaq_s8(acc[3], u, vldrbq_z_s8(w + 3 * k + whole, p));
    }
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

/* Output channels [o, o + 4) of `rows` rows (pixels) x_r = x + r * x_step: y_r[o + j] = requantize(bias[o + j]
 * + x_r . w_{o + j}), y_r = y + r * y_step, weight rows w + (o + j) * k; the dot products over len values
 * (k, or a zero-padded column's length when the weight reads past k stay inside the weights). A last
 * group of fewer than 4 channels (o + 4 > n_c) one dot each, over k. Out of line: the assembly needs
 * the registers its callers' loops hold. */
static __attribute__((noinline, unused)) void kiln_mve_rows4(const kiln_mve_rq_t *q, const int8_t *x, int32_t x_step,
                                                            int32_t rows, const int8_t *w, const int32_t *bias,
                                                            int32_t o, int32_t n_c, int32_t k, int32_t len, int8_t *y,
                                                            int32_t y_step)
{
    int32_t acc[4], r, j;
    for (r = 0; r < rows; r++, x += x_step, y += y_step) {
        if (n_c - o >= 4) {
            acc[0] = bias[o], acc[1] = bias[o + 1], acc[2] = bias[o + 2], acc[3] = bias[o + 3];
            kiln_mve_dot4(acc, x, w + o * k, k, len);
        } else {
            for (j = 0; j < 4; j++) {
                acc[j] = o + j < n_c ? bias[o + j] + kiln_mve_dot(x, w + (o + j) * k, k) : 0;
            }
        }
        kiln_mve_store4(q, acc, y, o, n_c);
    }
}

/* y[r][o] = requantize(bias[o] + x[r] . w[o]) for r < rows, o < cols, vectors of length k: each group of 4
 * weight rows against every row in turn. */
static inline void kiln_mve_matmul_s8(const int8_t *x, const int8_t *w, int32_t rows, int32_t cols, int32_t k,
                                      const int32_t *bias, const int32_t *mult, const int32_t *shift, int32_t out_zp,
                                      int32_t act_min, int32_t act_max, int8_t *y)
{
    int32_t o;
    for (o = 0; o < cols; o += 4) {
        const kiln_mve_rq_t q = kiln_mve_rq(mult, shift, o, cols, out_zp, act_min, act_max);
        kiln_mve_rows4(&q, x, k, rows, w, bias, o, cols, k, k, y, cols);
    }
}

/* Bytes of one gathered conv window the Helium conv path takes, a multiple of 16, and windows gathered at
 * a time (on the stack, as many bytes as the layer's window). */
#define KILN_MVE_COL_MAX 1152
#define KILN_MVE_COLS 4

/* n bytes from src to dst, 16 at a time, the last vector tail-predicated. */
static inline void kiln_mve_copy(int8_t *dst, const int8_t *src, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - i));
        vstrbq_p_s8(dst + i, vldrbq_z_s8(src + i, p), p);
    }
}

/* A pixel's window (k_h x k_w x in_c, OHWI order) copied to `col`, the input zero point at padded taps and
 * zeros from k up to kp (the next multiple of 16): the zero point first over the whole window, then the
 * in-image taps copied over it (with dilation 1, one run per kernel row). */
static inline void kiln_mve_gather(const kiln_conv2d_s8_params_t *p, const int8_t *img, int32_t iy0, int32_t ix0,
                                   int32_t k, int32_t kp, int8_t *col)
{
    const int32_t c = p->in_c, row_len = p->k_w * c;
    int32_t ky, kx, lo, hi, i;
    kiln_tap_range(ix0, p->dil_w, p->k_w, p->in_w, &lo, &hi);
    for (i = 0; i + 16 <= k; i += 16) {
        vstrbq_s8(col + i, vdupq_n_s8((int8_t)p->input_zp));
    }
    if (i < kp) { /* the last vector: zero point up to k, zeros after */
        vstrbq_s8(col + i, vdupq_m_n_s8(vdupq_n_s8(0), (int8_t)p->input_zp, vctp8q((uint32_t)(k - i))));
    }
    if (hi <= lo) {
        return;
    }
    for (ky = 0; ky < p->k_h; ky++, col += row_len) {
        const int32_t iy = iy0 + ky * p->dil_h;
        if (iy < 0 || iy >= p->in_h) {
            continue;
        }
        if (p->dil_w == 1) {
            kiln_mve_copy(col + lo * c, img + (iy * p->in_w + ix0 + lo) * c, (hi - lo) * c);
        } else {
            for (kx = lo; kx < hi; kx++) {
                kiln_mve_copy(col + kx * c, img + (iy * p->in_w + ix0 + kx * p->dil_w) * c, c);
            }
        }
    }
}

/* kiln_conv2d_s8 for windows of at most KILN_MVE_COL_MAX values: KILN_MVE_COLS pixels at a time gathered
 * into columns (zero-padded to a multiple of 16, so the groups whose weight reads past k stay inside the
 * weights take whole blocks only), each group of 4 output channels against all of them. Returns 0 when
 * the window is larger (the caller's paths take it). */
static inline int kiln_mve_conv2d_s8(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                                     const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
    const int32_t k = p->k_h * p->k_w * p->in_c, kp = (k + 15) & ~15, oc_n = p->out_c, pixels = p->out_h * p->out_w;
    int32_t b, i, j, o, n;
    if (k > KILN_MVE_COL_MAX) {
        return 0;
    }
    int8_t col[KILN_MVE_COLS][kp]; /* sized to the layer, bounded just above */
    for (b = 0; b < p->n; b++) {
        const int8_t *img = x + b * p->in_h * p->in_w * p->in_c;
        for (i = 0; i < pixels; i += KILN_MVE_COLS) {
            n = pixels - i < KILN_MVE_COLS ? pixels - i : KILN_MVE_COLS;
            for (j = 0; j < n; j++) {
                kiln_mve_gather(p, img, ((i + j) / p->out_w) * p->stride_h - p->pad_top,
                                ((i + j) % p->out_w) * p->stride_w - p->pad_left, k, kp, col[j]);
            }
            for (o = 0; o < oc_n; o += 4) {
                const kiln_mve_rq_t q = kiln_mve_rq(mult, shift, o, oc_n, p->out_zp, p->act_min, p->act_max);
                kiln_mve_rows4(&q, col[0], kp, n, w, bias, o, oc_n, k, (o + 3) * k + kp <= oc_n * k ? kp : k,
                               y + (b * pixels + i) * oc_n, oc_n);
            }
        }
    }
    return 1;
}

/* The Helium depthwise path: channels in blocks of 16 (a ring column), each computed as 4 groups of 4
 * (int32 lanes). KILN_MVE_DW_RING bytes of stack hold a block's ring of padded input rows, taken up to
 * KILN_MVE_DW_TAPS taps; larger layers keep the DSP paths. */
#define KILN_MVE_DW_RING 8192
#define KILN_MVE_DW_TAPS 64

/* Input row iy (image row, or padding) of the channels [c, c + n) (n <= 16) into ring rows `row` and
 * `twin` (the same row `span` slots further): `cols` columns of 16 bytes, column j image column j -
 * pad_left, the zero point at padded columns and rows and in the lanes past n. */
static inline void kiln_mve_dw_fill(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *img, int32_t iy, int32_t c,
                                    int32_t n, int32_t cols, int8_t *row, int8_t *twin)
{
    const int32_t ch = p->in_c;
    const int32_t j0 = p->pad_left < cols ? p->pad_left : cols;
    const int32_t j1 = p->pad_left + p->in_w < cols ? p->pad_left + p->in_w : cols;
    const int8x16_t zp = vdupq_n_s8((int8_t)p->input_zp);
    int32_t j = 0;
    if (iy >= 0 && iy < p->in_h) {
        const int8_t *from = img + (iy * p->in_w + j0 - p->pad_left) * ch + c;
        for (; j < j0; j++) {
            vstrbq_s8(row + 16 * j, zp);
            vstrbq_s8(twin + 16 * j, zp);
        }
        if (n == 16) {
            for (; j < j1; j++, from += ch) {
                const int8x16_t v = vldrbq_s8(from);
                vstrbq_s8(row + 16 * j, v);
                vstrbq_s8(twin + 16 * j, v);
            }
        } else {
            const mve_pred16_t lanes = vctp8q((uint32_t)n);
            for (; j < j1; j++, from += ch) {
                const int8x16_t v = vpselq_s8(vldrbq_z_s8(from, lanes), zp, lanes);
                vstrbq_s8(row + 16 * j, v);
                vstrbq_s8(twin + 16 * j, v);
            }
        }
    }
    for (; j < cols; j++) {
        vstrbq_s8(row + 16 * j, zp);
        vstrbq_s8(twin + 16 * j, zp);
    }
}

/* Requantize the 4 lanes of one pixel and store them (`lanes` of them when not `full`). */
static inline __attribute__((always_inline)) void kiln_mve_dw_store(const kiln_mve_rq_t *q, int32x4_t acc, int8_t *y,
                                                                  int full, mve_pred16_t lanes)
{
    if (full) {
        vstrbq_s32(y, kiln_mve_requantize(q, acc));
    } else {
        vstrbq_p_s32(y, kiln_mve_requantize(q, acc), lanes);
    }
}

/* One tap of the 3x3 blocks: weights at wg + W, each pixel's input at its row pointer + X. */
#define KILN_MVE_DW3_MAC(A, P, X)                                                                            \
    "vldrb.s32 %q[t], [%[" P "], #" X "]\n\t"                                                                 \
    "vmul.i32 %q[t], %q[t], %q[wv]\n\t"                                                                       \
    "vadd.i32 %q[" A "], %q[" A "], %q[t]\n\t"
#define KILN_MVE_DW3_TAP4(W, X)                                                                              \
    "vldrb.s32 %q[wv], [%[wg], #" W "]\n\t" KILN_MVE_DW3_MAC("a0", "p0", X) KILN_MVE_DW3_MAC("a1", "p1", X)  \
        KILN_MVE_DW3_MAC("a2", "p2", X) KILN_MVE_DW3_MAC("a3", "p3", X)
#define KILN_MVE_DW3_TAP1(W, X) "vldrb.s32 %q[wv], [%[wg], #" W "]\n\t" KILN_MVE_DW3_MAC("a0", "p0", X)
#define KILN_MVE_DW3_DOWN(P) "add %[" P "], %[" P "], %[dy]\n\t"
#define KILN_MVE_DW3_DOWN4 KILN_MVE_DW3_DOWN("p0") KILN_MVE_DW3_DOWN("p1") KILN_MVE_DW3_DOWN("p2") KILN_MVE_DW3_DOWN("p3")
/* The three taps of a window row: ring columns 16 bytes apart, weights 4. */
#define KILN_MVE_DW3_ROW(TAP, W0, W1, W2) TAP(W0, "0") TAP(W1, "16") TAP(W2, "32")

/* The 3x3 windows (dilation 1) of 4 pixels added to a0..a3: x pixel 0's tap (0, 0) in the ring, pixels sx
 * and window rows dy bytes apart, wg the 9 taps' weights (4 bytes each). Assembly: GCC spills the four
 * accumulators of the same C to the stack on every tap. Per tap 5 loads, 4 VMUL, 4 VADD for 16 MACs. */
static inline __attribute__((always_inline)) void kiln_mve_dw3x3_px4(int32x4_t *a0, int32x4_t *a1, int32x4_t *a2,
                                                                   int32x4_t *a3, const int8_t *x, int32_t sx,
                                                                   int32_t dy, const int8_t *wg)
{
    const int8_t *p0 = x, *p1 = x + sx, *p2 = x + 2 * sx, *p3 = x + 3 * sx;
    int32x4_t t, wv;
    __asm__(KILN_MVE_DW3_ROW(KILN_MVE_DW3_TAP4, "0", "4", "8") KILN_MVE_DW3_DOWN4
            KILN_MVE_DW3_ROW(KILN_MVE_DW3_TAP4, "12", "16", "20") KILN_MVE_DW3_DOWN4
            KILN_MVE_DW3_ROW(KILN_MVE_DW3_TAP4, "24", "28", "32")
            : [a0] "+w"(*a0), [a1] "+w"(*a1), [a2] "+w"(*a2), [a3] "+w"(*a3), [t] "=&w"(t), [wv] "=&w"(wv),
              [p0] "+r"(p0), [p1] "+r"(p1), [p2] "+r"(p2), [p3] "+r"(p3)
            : [wg] "r"(wg), [dy] "r"(dy)
            : "memory");
}

/* The 3x3 window (dilation 1) of one pixel added to a0, as kiln_mve_dw3x3_px4. */
static inline __attribute__((always_inline)) void kiln_mve_dw3x3_px1(int32x4_t *a0, const int8_t *x, int32_t dy,
                                                                   const int8_t *wg)
{
    const int8_t *p0 = x;
    int32x4_t t, wv;
    __asm__(KILN_MVE_DW3_ROW(KILN_MVE_DW3_TAP1, "0", "4", "8") KILN_MVE_DW3_DOWN("p0")
            KILN_MVE_DW3_ROW(KILN_MVE_DW3_TAP1, "12", "16", "20") KILN_MVE_DW3_DOWN("p0")
            KILN_MVE_DW3_ROW(KILN_MVE_DW3_TAP1, "24", "28", "32")
            : [a0] "+w"(*a0), [t] "=&w"(t), [wv] "=&w"(wv), [p0] "+r"(p0)
            : [wg] "r"(wg), [dy] "r"(dy)
            : "memory");
}

/* One output row of a 4-channel group: x the window of pixel 0 at tap (0, 0) in the ring, window rows dy
 * bytes apart, taps dx bytes apart in a row, pixels sx bytes apart; wg the group's weights (4 bytes per
 * tap); output pixels ystep bytes apart. Four pixels at a time share each weight vector; 3x3 windows of
 * dilation 1 (k3 set, k_h = k_w = 3, dx = 16) take the assembly blocks. */
static inline __attribute__((always_inline)) void kiln_mve_dw_row(const int8_t *x, int32_t dy, const int8_t *wg,
                                                                int32_t k_h, int32_t k_w, int32_t dx, int32_t sx,
                                                                int k3, int32_t out_w, int32x4_t bias4,
                                                                const kiln_mve_rq_t *q, int8_t *y, int32_t ystep,
                                                                int full, mve_pred16_t lanes)
{
    int32_t ox, ky, kx;
    for (ox = 0; ox + 4 <= out_w; ox += 4, x += 4 * sx, y += 4 * ystep) {
        int32x4_t a0 = bias4, a1 = bias4, a2 = bias4, a3 = bias4;
        if (k3) {
            kiln_mve_dw3x3_px4(&a0, &a1, &a2, &a3, x, sx, dy, wg);
        } else {
            const int8_t *wt = wg;
            for (ky = 0; ky < k_h; ky++) {
                const int8_t *xr = x + ky * dy;
                for (kx = 0; kx < k_w; kx++, xr += dx, wt += 4) {
                    const int32x4_t wv = vldrbq_s32(wt);
                    a0 = vaddq_s32(a0, vmulq_s32(vldrbq_s32(xr), wv));
                    a1 = vaddq_s32(a1, vmulq_s32(vldrbq_s32(xr + sx), wv));
                    a2 = vaddq_s32(a2, vmulq_s32(vldrbq_s32(xr + 2 * sx), wv));
                    a3 = vaddq_s32(a3, vmulq_s32(vldrbq_s32(xr + 3 * sx), wv));
                }
            }
        }
        kiln_mve_dw_store(q, a0, y, full, lanes);
        kiln_mve_dw_store(q, a1, y + ystep, full, lanes);
        kiln_mve_dw_store(q, a2, y + 2 * ystep, full, lanes);
        kiln_mve_dw_store(q, a3, y + 3 * ystep, full, lanes);
    }
    for (; ox < out_w; ox++, x += sx, y += ystep) {
        int32x4_t a = bias4;
        if (k3) {
            kiln_mve_dw3x3_px1(&a, x, dy, wg);
        } else {
            const int8_t *wt = wg;
            for (ky = 0; ky < k_h; ky++) {
                const int8_t *xr = x + ky * dy;
                for (kx = 0; kx < k_w; kx++, xr += dx, wt += 4) {
                    a = vaddq_s32(a, vmulq_s32(vldrbq_s32(xr), vldrbq_s32(wt)));
                }
            }
        }
        kiln_mve_dw_store(q, a, y, full, lanes);
    }
}

/* kiln_depthwise_conv2d_s8 with ch_mult = 1. Per block of 16 channels, the rows the windows reach sit in a
 * ring on the stack, padded with the zero point, each input row copied once (into its slot and the slot
 * `span` rows further, so a window's rows are always consecutive ring rows); border and interior pixels
 * take the same code. Each output row then runs the block's groups of 4 channels in turn. Returns 0 for
 * ch_mult > 1, more than KILN_MVE_DW_TAPS taps or a ring over KILN_MVE_DW_RING bytes. */
static inline int kiln_mve_depthwise_conv2d_s8(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x,
                                               const int8_t *w, const int32_t *bias, const int32_t *mult,
                                               const int32_t *shift, int8_t *y)
{
    const int32_t ch = p->in_c, k_h = p->k_h, k_w = p->k_w, taps = k_h * k_w, span = (k_h - 1) * p->dil_h + 1;
    const int32_t cols = (p->out_w - 1) * p->stride_w + (k_w - 1) * p->dil_w + 1, row_bytes = 16 * cols;
    const int32_t sx = 16 * p->stride_w, dx = 16 * p->dil_w, dy = p->dil_h * row_bytes;
    const int k3 = k_h == 3 && k_w == 3 && p->dil_w == 1;
    kiln_mve_rq_t q[4];
    int32x4_t bias4[4];
    int32_t c, b, oy, t, l, g, groups, loaded, slot;
    if (p->ch_mult != 1 || taps > KILN_MVE_DW_TAPS || 2 * span * row_bytes > KILN_MVE_DW_RING) {
        return 0;
    }
    int8_t ring[2 * span * row_bytes], wg[4][4 * taps]; /* sized to the layer, bounded just above */
    for (c = 0; c < ch; c += 16) {
        const int32_t n16 = ch - c < 16 ? ch - c : 16;
        groups = (n16 + 3) / 4;
        for (g = 0; g < groups; g++) {
            const int32_t n = n16 - 4 * g < 4 ? n16 - 4 * g : 4;
            q[g] = kiln_mve_rq(mult, shift, c + 4 * g, ch, p->out_zp, p->act_min, p->act_max);
            bias4[g] = vldrwq_z_s32(bias + c + 4 * g, vctp32q((uint32_t)n));
            for (t = 0; t < taps; t++) {
                for (l = 0; l < 4; l++) {
                    wg[g][4 * t + l] = l < n ? w[t * ch + c + 4 * g + l] : 0;
                }
            }
        }
        for (b = 0; b < p->n; b++) {
            const int8_t *img = x + b * p->in_h * p->in_w * ch;
            loaded = -p->pad_top; /* the next input row the ring takes, into `slot` (row iy's: (iy + pad_top) % span) */
            slot = 0;
            for (oy = 0; oy < p->out_h; oy++) {
                const int32_t iy0 = oy * p->stride_h - p->pad_top;
                const int8_t *window;
                if (loaded < iy0) {
                    slot = (iy0 + p->pad_top) % span;
                    loaded = iy0;
                }
                for (; loaded < iy0 + span; loaded++, slot = slot + 1 == span ? 0 : slot + 1) {
                    kiln_mve_dw_fill(p, img, loaded, c, n16, cols, ring + slot * row_bytes, ring + (slot + span) * row_bytes);
                }
                window = ring + slot * row_bytes; /* the slot after the last row taken: the window's first row */
                for (g = 0; g < groups; g++) {
                    const int32_t n = n16 - 4 * g < 4 ? n16 - 4 * g : 4;
                    const mve_pred16_t lanes = vctp32q((uint32_t)n);
                    int8_t *yr = y + (b * p->out_h + oy) * p->out_w * ch + c + 4 * g;
                    if (k3) {
                        kiln_mve_dw_row(window + 4 * g, dy, wg[g], 3, 3, 16, sx, 1, p->out_w, bias4[g], &q[g], yr, ch,
                                        n == 4, lanes);
                    } else {
                        kiln_mve_dw_row(window + 4 * g, dy, wg[g], k_h, k_w, dx, sx, 0, p->out_w, bias4[g], &q[g], yr,
                                        ch, n == 4, lanes);
                    }
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
