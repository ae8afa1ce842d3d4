/* Portable pooling kernels: max, average (padding never counted) and global average. */
#include "kiln_kernels.h"
#include "kiln_stub_math.h"

/* The in-image window of output (oy, ox): [*y0, *y1) x [*x0, *x1). */
static void kiln_pool_window(int32_t oy, int32_t ox, int32_t stride_h, int32_t stride_w, int32_t pad_top,
                             int32_t pad_left, int32_t k_h, int32_t k_w, int32_t in_h, int32_t in_w, int32_t *y0,
                             int32_t *y1, int32_t *x0, int32_t *x1)
{
    const int32_t top = oy * stride_h - pad_top;
    const int32_t left = ox * stride_w - pad_left;
    *y0 = top < 0 ? 0 : top;
    *y1 = top + k_h > in_h ? in_h : top + k_h;
    *x0 = left < 0 ? 0 : left;
    *x1 = left + k_w > in_w ? in_w : left + k_w;
}

#define KILN_POOL_LOOP(p, body)                                                                              \
    do {                                                                                                     \
        int32_t b, oy, ox, ch, iy, ix, y0, y1, x0, x1;                                                       \
        for (b = 0; b < (p)->n; b++) {                                                                       \
            for (oy = 0; oy < (p)->out_h; oy++) {                                                            \
                for (ox = 0; ox < (p)->out_w; ox++) {                                                        \
                    kiln_pool_window(oy, ox, (p)->stride_h, (p)->stride_w, (p)->pad_top, (p)->pad_left,      \
                                     (p)->k_h, (p)->k_w, (p)->in_h, (p)->in_w, &y0, &y1, &x0, &x1);         \
                    for (ch = 0; ch < (p)->c; ch++) {                                                        \
                        const int32_t out_index = ((b * (p)->out_h + oy) * (p)->out_w + ox) * (p)->c + ch;   \
                        body;                                                                                \
                    }                                                                                        \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

#define KILN_AT(p, b, iy, ix, ch) ((((b) * (p)->in_h + (iy)) * (p)->in_w + (ix)) * (p)->c + (ch))

void kiln_max_pool2d_s8(const kiln_max_pool2d_s8_params_t *p, const int8_t *x, int8_t *y)
{
    KILN_POOL_LOOP(p, {
        int32_t m = -128;
        for (iy = y0; iy < y1; iy++) {
            for (ix = x0; ix < x1; ix++) {
                const int32_t v = x[KILN_AT(p, b, iy, ix, ch)];
                m = v > m ? v : m;
            }
        }
        y[out_index] = kiln_output_s8(m, 0, p->act_min, p->act_max);
    });
}

void kiln_avg_pool2d_s8(const kiln_avg_pool2d_s8_params_t *p, const int8_t *x, int8_t *y)
{
    KILN_POOL_LOOP(p, {
        int32_t sum = 0;
        for (iy = y0; iy < y1; iy++) {
            for (ix = x0; ix < x1; ix++) {
                sum += x[KILN_AT(p, b, iy, ix, ch)];
            }
        }
        y[out_index] = kiln_output_s8(kiln_rounded_mean(sum, (y1 - y0) * (x1 - x0)), 0, p->act_min, p->act_max);
    });
}

void kiln_max_pool2d_f32(const kiln_max_pool2d_f32_params_t *p, const float *x, float *y)
{
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    KILN_POOL_LOOP(p, {
        float m = x[KILN_AT(p, b, y0, x0, ch)];
        for (iy = y0; iy < y1; iy++) {
            for (ix = x0; ix < x1; ix++) {
                const float v = x[KILN_AT(p, b, iy, ix, ch)];
                m = v > m ? v : m;
            }
        }
        y[out_index] = kiln_clamp_f32_value(m, lo, hi);
    });
}

void kiln_avg_pool2d_f32(const kiln_avg_pool2d_f32_params_t *p, const float *x, float *y)
{
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    KILN_POOL_LOOP(p, {
        float sum = 0.0f;
        for (iy = y0; iy < y1; iy++) {
            for (ix = x0; ix < x1; ix++) {
                sum += x[KILN_AT(p, b, iy, ix, ch)];
            }
        }
        y[out_index] = kiln_clamp_f32_value(sum / (float)((y1 - y0) * (x1 - x0)), lo, hi);
    });
}

void kiln_global_avg_pool_s8(const kiln_global_avg_pool_s8_params_t *p, const int8_t *x, int8_t *y)
{
    int32_t b, i, ch;
    for (b = 0; b < p->n; b++) {
        for (ch = 0; ch < p->c; ch++) {
            int32_t sum = 0;
            for (i = 0; i < p->hw; i++) {
                sum += x[(b * p->hw + i) * p->c + ch] - p->input_zp;
            }
            y[b * p->c + ch] = kiln_output_s8(kiln_requantize(sum, p->mult, p->shift), p->out_zp, -128, 127);
        }
    }
}

void kiln_mean_s8(const kiln_mean_s8_params_t *p, const int8_t *x, int8_t *y)
{
    int32_t o, r, i;
    for (o = 0; o < p->outer; o++) {
        for (i = 0; i < p->inner; i++) {
            int64_t sum = 0;
            int32_t v;
            for (r = 0; r < p->reduce; r++) {
                sum += x[((int64_t)o * p->reduce + r) * p->inner + i];
            }
            sum -= (int64_t)p->input_zp * p->reduce;
            v = kiln_requantize(kiln_wrap_s32((uint32_t)(uint64_t)sum), p->mult, p->shift) + p->out_zp;
            y[o * p->inner + i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
        }
    }
}

void kiln_global_avg_pool_f32(const kiln_global_avg_pool_f32_params_t *p, const float *x, float *y)
{
    int32_t b, i, ch;
    for (b = 0; b < p->n; b++) {
        for (ch = 0; ch < p->c; ch++) {
            float sum = 0.0f;
            for (i = 0; i < p->hw; i++) {
                sum += x[(b * p->hw + i) * p->c + ch];
            }
            y[b * p->c + ch] = sum / (float)p->hw;
        }
    }
}
