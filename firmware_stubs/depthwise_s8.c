/* int8 depthwise convolution, NHWC input, 1HWC weights, input zero point folded
 * into the bias (a padded position contributes input_zp * w).
 *
 * With ch_mult = 1, channels go four at a time along the NHWC channel axis:
 * one word of input and one of weights per tap feed four accumulators, 3x3
 * windows in one unrolled block (kiln_simd.h), and the four channels'
 * requantizers are prepared once for the whole image. Pixels whose window
 * lies in the image read it in place; border pixels first copy theirs into a
 * small patch with the zero point at padded taps, so both take the same code.
 * Remaining channels, channel multipliers above 1 and windows of more than
 * KILN_DW_TAPS taps take the one-channel loop. */
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

void kiln_depthwise_conv2d_s8(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                              const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
#ifdef KILN_MVE
    if (kiln_mve_depthwise_conv2d_s8(p, x, w, bias, mult, shift, y)) {
        return;
    }
#endif
    const kiln_out_t out = kiln_out_range(p->out_zp, p->act_min, p->act_max);
    int32_t c = 0;
    if (p->ch_mult == 1 && p->k_h * p->k_w <= KILN_DW_TAPS) {
        for (; c + 4 <= p->in_c; c += 4) {
            kiln_dw_4ch(p, c, x, w, bias, mult, shift, &out, y);
        }
    }
    kiln_dw_1ch(p, c, x, w, bias, mult, shift, &out, y);
}
