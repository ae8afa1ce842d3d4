/* Products of two activations, [m][k] by [k][n] per batch (attention's Q.K^T and P.V). */
#include "kiln_kernels.h"
#include "kiln_stub_math.h"

void kiln_batch_matmul_s8(const kiln_batch_matmul_s8_params_t *p, const int8_t *a, const int8_t *b, int8_t *y)
{
    int32_t t, i, j, c;
    for (t = 0; t < p->batches; t++) {
        const int8_t *at = a + t * p->m * p->k;
        const int8_t *bt = b + t * p->k * p->n;
        int8_t *yt = y + t * p->m * p->n;
        for (i = 0; i < p->m; i++) {
            for (j = 0; j < p->n; j++) {
                uint32_t acc = 0; /* int32 modulo 2^32 */
                for (c = 0; c < p->k; c++) {
                    acc += (uint32_t)((at[i * p->k + c] + p->a_offset) * (bt[c * p->n + j] + p->b_offset));
                }
                yt[i * p->n + j] = kiln_output_s8(kiln_requantize(kiln_wrap_s32(acc), p->out_mult, p->out_shift), p->out_zp,
                                                  p->act_min, p->act_max);
            }
        }
    }
}

void kiln_batch_matmul_f32(const kiln_batch_matmul_f32_params_t *p, const float *a, const float *b, float *y)
{
    const float lo = kiln_f32_from_bits(p->act_min_bits);
    const float hi = kiln_f32_from_bits(p->act_max_bits);
    int32_t t, i, j, c;
    for (t = 0; t < p->batches; t++) {
        const float *at = a + t * p->m * p->k;
        const float *bt = b + t * p->k * p->n;
        float *yt = y + t * p->m * p->n;
        for (i = 0; i < p->m; i++) {
            for (j = 0; j < p->n; j++) {
                float acc = 0.0f;
                for (c = 0; c < p->k; c++) {
                    acc += at[i * p->k + c] * bt[c * p->n + j];
                }
                yt[i * p->n + j] = kiln_clamp_f32_value(acc, lo, hi);
            }
        }
    }
}
