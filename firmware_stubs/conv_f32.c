/* Portable float convolution and fully-connected kernels (padding contributes nothing). */
#include "kiln_kernels.h"
#include "kiln_stub_math.h"

void kiln_conv2d_f32(const kiln_conv2d_f32_params_t *p, const float *x, const float *w, const float *bias, float *y)
{
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    int32_t b, oy, ox, oc, ky, kx, c;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                float *out = y + ((b * p->out_h + oy) * p->out_w + ox) * p->out_c;
                for (oc = 0; oc < p->out_c; oc++) {
                    float acc = bias[oc];
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
                        if (iy < 0 || iy >= p->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
                            const float *wp = w + ((oc * p->k_h + ky) * p->k_w + kx) * p->in_c;
                            const float *xp;
                            if (ix < 0 || ix >= p->in_w) {
                                continue;
                            }
                            xp = x + ((b * p->in_h + iy) * p->in_w + ix) * p->in_c;
                            for (c = 0; c < p->in_c; c++) {
                                acc += xp[c] * wp[c];
                            }
                        }
                    }
                    out[oc] = kiln_clamp_f32_value(acc, lo, hi);
                }
            }
        }
    }
}

void kiln_depthwise_conv2d_f32(const kiln_depthwise_conv2d_f32_params_t *p, const float *x, const float *w,
                               const float *bias, float *y)
{
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    const int32_t out_c = p->in_c * p->ch_mult;
    int32_t b, oy, ox, oc, ky, kx;
    for (b = 0; b < p->n; b++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                float *out = y + ((b * p->out_h + oy) * p->out_w + ox) * out_c;
                for (oc = 0; oc < out_c; oc++) {
                    const int32_t ic = oc / p->ch_mult;
                    float acc = bias[oc];
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
                            if (iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w) {
                                acc += x[((b * p->in_h + iy) * p->in_w + ix) * p->in_c + ic] *
                                       w[(ky * p->k_w + kx) * out_c + oc];
                            }
                        }
                    }
                    out[oc] = kiln_clamp_f32_value(acc, lo, hi);
                }
            }
        }
    }
}

void kiln_fully_connected_f32(const kiln_fully_connected_f32_params_t *p, const float *x, const float *w,
                              const float *bias, float *y)
{
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    int32_t b, o, i;
    for (b = 0; b < p->batches; b++) {
        for (o = 0; o < p->out_features; o++) {
            const float *xp = x + b * p->in_features;
            const float *wp = w + o * p->in_features;
            float acc = bias[o];
            for (i = 0; i < p->in_features; i++) {
                acc += xp[i] * wp[i];
            }
            y[b * p->out_features + o] = kiln_clamp_f32_value(acc, lo, hi);
        }
    }
}
