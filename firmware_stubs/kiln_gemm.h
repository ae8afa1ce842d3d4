/* The int8 matrix core behind the scratch paths of the conv, 1x1 and
 * fully-connected kernels, and the table add (not part of the kernel ABI).
 *
 * A block is four pixels (rows of the product). Their K input values each are
 * widened into scratch as int16 lanes in groups of four: for K values
 * 4g..4g+3 of pixel p, the words (x[4g], x[4g+2]) and (x[4g+1], x[4g+3]) at
 * word 8g + 2p, zero past K. Those are the lanes SXTB16 makes of a word of
 * four int8 weights, so one weight word, widened once, meets all four pixels:
 * per four values LDR, 2 SXTB16, 2 LDM (the four pixels' lanes) and 8 SMLAD.
 * With KILN_RQ_FAST the lanes and the bias are doubled (the fast
 * requantization takes the doubled accumulator, kiln_simd.h). */
#ifndef KILN_GEMM_H
#define KILN_GEMM_H

#include <stdint.h>

/* The weights and output stage of a product: y[p][o] = out(bias[o] + sum_k x[p][k] * w[o][k]). With
 * KILN_RQ_FAST, `table` holds {2 * bias, mult, round, shift} of every output channel (kiln_rq2_t,
 * kiln_gemm_prepare fills it once per call). */
typedef struct {
    int32_t k, out_c, out_zp, act_min, act_max, requant;
    const int8_t *w; /* [out_c][k] */
    const int32_t *bias, *mult, *shift;
    uint32_t *table;
} kiln_gemm_t;

/* Scratch words of the fast paths: the table, one block of four pixels of K values, one pixel's int8 row. */
#define KILN_GEMM_TABLE_WORDS(out_c) (4 * (out_c))
#define KILN_GEMM_BLOCK_WORDS(k) (2 * (((k) + 3) / 4 * 4))
#define KILN_GEMM_SCRATCH_WORDS(k, out_c) (KILN_GEMM_TABLE_WORDS(out_c) + KILN_GEMM_BLOCK_WORDS(k) + ((k) + 3) / 4)

/* The table of a KILN_RQ_FAST product. */
void kiln_gemm_prepare(const kiln_gemm_t *g);

/* `groups` groups of 4 consecutive int8 values from `in` into one pixel's lanes of a block from `at`
 * (8 words apart), doubled when `twice`. */
void kiln_gemm_widen(uint32_t *at, const int8_t *in, int32_t groups, int32_t twice);

/* `groups` groups of one pixel's lanes from `at` set to the value pair `v2` (a padded tap). */
void kiln_gemm_fill(uint32_t *at, uint32_t v2, int32_t groups);

/* Every output channel of the block `cols` (KILN_GEMM_BLOCK_WORDS(g->k) words): pixel p's outputs go to
 * y + p * g->out_c, for the first `pixels` (1 to 4) pixels. */
void kiln_gemm_block(const kiln_gemm_t *g, const uint32_t *cols, int8_t *y, int32_t pixels);

/* y[i] for i < n from a[i] and b[i] as kiln_add_table_s8 does (a's terms at table[a + 128], b's at
 * table[384 + b]); y may be a or b. The fused conv + add runs it on each block's outputs. */
void kiln_add_table_span(const int8_t *a, const int8_t *b, const int32_t *table, int8_t *y, int32_t n, int32_t mult,
                         int32_t round, int32_t shift, int32_t lo, int32_t hi);

#endif /* KILN_GEMM_H */
