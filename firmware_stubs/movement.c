/* Portable data movement kernels: strided copies (concat/split parts, with
 * int8 requantization), slice, transpose, pad and nearest resize. */
#include <string.h>

#include "kiln_kernels.h"
#include "kiln_stub_math.h"

void kiln_copy_part(const kiln_copy_part_params_t *p, const void *x, void *y)
{
    const unsigned char *src = (const unsigned char *)x;
    unsigned char *dst = (unsigned char *)y;
    const size_t es = (size_t)p->elem_size;
    int32_t o;
    for (o = 0; o < p->outer; o++) {
        memcpy(dst + ((size_t)o * (size_t)p->out_stride + (size_t)p->out_offset) * es,
               src + ((size_t)o * (size_t)p->in_stride + (size_t)p->in_offset) * es, (size_t)p->inner * es);
    }
}

void kiln_requantize_s8(const kiln_requantize_s8_params_t *p, const int8_t *x, int8_t *y)
{
    int32_t o, i;
    for (o = 0; o < p->outer; o++) {
        const int8_t *src = x + o * p->in_stride + p->in_offset;
        int8_t *dst = y + o * p->out_stride + p->out_offset;
        for (i = 0; i < p->inner; i++) {
            dst[i] = kiln_output_s8(kiln_requantize(src[i] - p->in_zp, p->mult, p->shift), p->out_zp, -128, 127);
        }
    }
}

void kiln_slice(const kiln_slice_params_t *p, const void *x, void *y)
{
    const unsigned char *src = (const unsigned char *)x;
    unsigned char *dst = (unsigned char *)y;
    const size_t es = (size_t)p->elem_size;
    int32_t i0, i1, i2, i3;
    size_t out_index = 0;
    for (i0 = 0; i0 < p->out_d0; i0++) {
        const int32_t s0 = p->start0 + i0 * p->step0;
        for (i1 = 0; i1 < p->out_d1; i1++) {
            const int32_t s1 = s0 * p->in_d1 + p->start1 + i1 * p->step1;
            for (i2 = 0; i2 < p->out_d2; i2++) {
                const int32_t s2 = s1 * p->in_d2 + p->start2 + i2 * p->step2;
                for (i3 = 0; i3 < p->out_d3; i3++) {
                    const int32_t s3 = s2 * p->in_d3 + p->start3 + i3 * p->step3;
                    memcpy(dst + out_index * es, src + (size_t)s3 * es, es);
                    out_index++;
                }
            }
        }
    }
}

void kiln_transpose(const kiln_transpose_params_t *p, const void *x, void *y)
{
    const unsigned char *src = (const unsigned char *)x;
    unsigned char *dst = (unsigned char *)y;
    const size_t es = (size_t)p->elem_size;
    const int32_t in_dims[4] = {p->in_d0, p->in_d1, p->in_d2, p->in_d3};
    const int32_t perm[4] = {p->perm0, p->perm1, p->perm2, p->perm3};
    int32_t in_strides[4], stride[4], out_dims[4], i[4], k;
    size_t out_index = 0;
    in_strides[3] = 1;
    for (k = 2; k >= 0; k--) {
        in_strides[k] = in_strides[k + 1] * in_dims[k + 1];
    }
    for (k = 0; k < 4; k++) {
        out_dims[k] = in_dims[perm[k]];
        stride[k] = in_strides[perm[k]];
    }
    for (i[0] = 0; i[0] < out_dims[0]; i[0]++) {
        for (i[1] = 0; i[1] < out_dims[1]; i[1]++) {
            for (i[2] = 0; i[2] < out_dims[2]; i[2]++) {
                const int32_t s = i[0] * stride[0] + i[1] * stride[1] + i[2] * stride[2];
                if (es == 1) { /* the inner walk inlined for bytes: no call per element */
                    for (i[3] = 0; i[3] < out_dims[3]; i[3]++) {
                        dst[out_index++] = src[s + i[3] * stride[3]];
                    }
                    continue;
                }
                for (i[3] = 0; i[3] < out_dims[3]; i[3]++) {
                    memcpy(dst + out_index * es, src + (size_t)(s + i[3] * stride[3]) * es, es);
                    out_index++;
                }
            }
        }
    }
}

/* Pads 4-D data: every output element outside the input gets fill_value; the input part of an
 * innermost row is one copy. */
#define KILN_PAD_BODY(p, x, y, fill_value)                                                                 \
    do {                                                                                                   \
        int32_t i0, i1, i2, i3, out_index = 0;                                                             \
        for (i0 = 0; i0 < (p)->out_d0; i0++) {                                                             \
            const int32_t j0 = i0 - (p)->pre0;                                                             \
            for (i1 = 0; i1 < (p)->out_d1; i1++) {                                                         \
                const int32_t j1 = i1 - (p)->pre1;                                                         \
                for (i2 = 0; i2 < (p)->out_d2; i2++) {                                                     \
                    const int32_t j2 = i2 - (p)->pre2;                                                     \
                    const int inside = j0 >= 0 && j0 < (p)->in_d0 && j1 >= 0 && j1 < (p)->in_d1 &&         \
                                       j2 >= 0 && j2 < (p)->in_d2;                                         \
                    const int32_t lo = inside ? kiln_clamp_index((p)->pre3, (p)->out_d3) : (p)->out_d3;    \
                    const int32_t hi = inside ? kiln_clamp_index((p)->pre3 + (p)->in_d3, (p)->out_d3) : lo; \
                    for (i3 = 0; i3 < lo; i3++) {                                                          \
                        (y)[out_index++] = (fill_value);                                                   \
                    }                                                                                      \
                    if (hi > lo) {                                                                         \
                        memcpy((y) + out_index,                                                            \
                               (x) + ((j0 * (p)->in_d1 + j1) * (p)->in_d2 + j2) * (p)->in_d3 + lo - (p)->pre3, \
                               (size_t)(hi - lo) * sizeof *(y));                                           \
                        out_index += hi - lo;                                                              \
                    }                                                                                      \
                    for (i3 = hi; i3 < (p)->out_d3; i3++) {                                                \
                        (y)[out_index++] = (fill_value);                                                   \
                    }                                                                                      \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    } while (0)

/* v clamped to [0, n]. */
static int32_t kiln_clamp_index(int32_t v, int32_t n)
{
    return v < 0 ? 0 : v > n ? n : v;
}

void kiln_pad_s8(const kiln_pad_s8_params_t *p, const int8_t *x, int8_t *y)
{
    const int8_t value = (int8_t)p->value;
    KILN_PAD_BODY(p, x, y, value);
}

void kiln_pad_f32(const kiln_pad_f32_params_t *p, const float *x, float *y)
{
    const float value = kiln_f32_from_bits(p->value_bits);
    KILN_PAD_BODY(p, x, y, value);
}

void kiln_resize_nearest(const kiln_resize_nearest_params_t *p, const void *x, const int32_t *rows,
                         const int32_t *cols, void *y)
{
    const unsigned char *src = (const unsigned char *)x;
    unsigned char *dst = (unsigned char *)y;
    const size_t pixel = (size_t)p->c * (size_t)p->elem_size;
    int32_t b, r, c;
    for (b = 0; b < p->n; b++) {
        for (r = 0; r < p->out_h; r++) {
            for (c = 0; c < p->out_w; c++) {
                const size_t from = ((size_t)b * (size_t)p->in_h + (size_t)rows[r]) * (size_t)p->in_w + (size_t)cols[c];
                const size_t to = ((size_t)b * (size_t)p->out_h + (size_t)r) * (size_t)p->out_w + (size_t)c;
                memcpy(dst + to * pixel, src + from * pixel, pixel);
            }
        }
    }
}
