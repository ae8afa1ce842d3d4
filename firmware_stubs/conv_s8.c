/* Portable int8 convolution and fully-connected kernels (TFLite reference
 * arithmetic with the input zero point folded into the bias). */
#include "kiln_kernels.h"
#include "kiln_stub_math.h"

void kiln_conv2d_s8(const kiln_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                    const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
    int32_t b, oy, ox, oc, ky, kx, c;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int8_t *out = y + ((b * p->out_h + oy) * p->out_w + ox) * p->out_c;
                for (oc = 0; oc < p->out_c; oc++) {
                    uint32_t acc = (uint32_t)bias[oc];
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
                            const int8_t *wp = w + ((oc * p->k_h + ky) * p->k_w + kx) * p->in_c;
                            if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
                                for (c = 0; c < p->in_c; c++) {
                                    acc = kiln_mac_u32(acc, p->input_zp, wp[c]);
                                }
                            } else {
                                const int8_t *xp = x + ((b * p->in_h + iy) * p->in_w + ix) * p->in_c;
                                for (c = 0; c < p->in_c; c++) {
                                    acc = kiln_mac_u32(acc, xp[c], wp[c]);
                                }
                            }
                        }
                    }
                    out[oc] = kiln_output_s8(kiln_requantize(kiln_wrap_s32(acc), mult[oc], shift[oc]),
                                             p->out_zp, p->act_min, p->act_max);
                }
            }
        }
    }
}

/* One row of a matrix product: bias + x . w over `len` elements, requantized. */
static void kiln_matvec_s8(const int8_t *x, const int8_t *w, int32_t len, int32_t rows, const int32_t *bias,
                           const int32_t *mult, const int32_t *shift, int32_t out_zp, int32_t act_min,
                           int32_t act_max, int8_t *y)
{
    int32_t o, i;
    for (o = 0; o < rows; o++) {
        const int8_t *wp = w + o * len;
        uint32_t acc = (uint32_t)bias[o];
        for (i = 0; i < len; i++) {
            acc = kiln_mac_u32(acc, x[i], wp[i]);
        }
        y[o] = kiln_output_s8(kiln_requantize(kiln_wrap_s32(acc), mult[o], shift[o]), out_zp, act_min, act_max);
    }
}

void kiln_conv2d_1x1_s8(const kiln_conv2d_1x1_s8_params_t *p, const int8_t *x, const int8_t *w,
                        const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
    int32_t px;
    for (px = 0; px < p->pixels; px++) {
        kiln_matvec_s8(x + px * p->in_c, w, p->in_c, p->out_c, bias, mult, shift, p->out_zp, p->act_min,
                       p->act_max, y + px * p->out_c);
    }
}

void kiln_fully_connected_s8(const kiln_fully_connected_s8_params_t *p, const int8_t *x, const int8_t *w,
                             const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
    int32_t b;
    for (b = 0; b < p->batches; b++) {
        kiln_matvec_s8(x + b * p->in_features, w, p->in_features, p->out_features, bias, mult, shift, p->out_zp,
                       p->act_min, p->act_max, y + b * p->out_features);
    }
}

void kiln_depthwise_conv2d_s8(const kiln_depthwise_conv2d_s8_params_t *p, const int8_t *x, const int8_t *w,
                              const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *y)
{
    const int32_t out_c = p->in_c * p->ch_mult;
    int32_t b, oy, ox, oc, ky, kx;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int8_t *out = y + ((b * p->out_h + oy) * p->out_w + ox) * out_c;
                for (oc = 0; oc < out_c; oc++) {
                    const int32_t ic = oc / p->ch_mult;
                    uint32_t acc = (uint32_t)bias[oc];
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
                            const int32_t wv = w[(ky * p->k_w + kx) * out_c + oc];
                            const int32_t xv = (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w)
                                                   ? p->input_zp
                                                   : x[((b * p->in_h + iy) * p->in_w + ix) * p->in_c + ic];
                            acc = kiln_mac_u32(acc, xv, wv);
                        }
                    }
                    out[oc] = kiln_output_s8(kiln_requantize(kiln_wrap_s32(acc), mult[oc], shift[oc]),
                                             p->out_zp, p->act_min, p->act_max);
                }
            }
        }
    }
}
