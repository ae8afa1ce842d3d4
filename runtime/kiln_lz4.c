#include "kiln_lz4.h"

#include <stddef.h>

/* Adds the extension bytes of a 15 length nibble (each byte added, 255 meaning
 * "another byte follows") to *len, which may not exceed limit. */
static int kiln_lz4_length(const uint8_t *src, uint32_t src_size, uint32_t *ip, uint32_t limit, uint32_t *len)
{
    uint32_t b;
    if (*len > limit) {
        return -1;
    }
    do {
        if (*ip >= src_size) {
            return -1;
        }
        b = src[(*ip)++];
        if (b > limit - *len) {
            return -1;
        }
        *len += b;
    } while (b == 255u);
    return 0;
}

int32_t kiln_lz4_decompress(const uint8_t *src, uint32_t src_size, uint8_t *dst, uint32_t dst_capacity)
{
    uint32_t ip = 0u;
    uint32_t op = 0u;
    if (src == NULL || src_size == 0u || (dst == NULL && dst_capacity > 0u) || dst_capacity > (uint32_t)INT32_MAX) {
        return KILN_LZ4_ERROR;
    }
    for (;;) {
        const uint32_t token = src[ip++];
        uint32_t literals = token >> 4;
        uint32_t match = token & 15u;
        uint32_t offset;
        uint32_t i;
        if (literals == 15u && kiln_lz4_length(src, src_size, &ip, dst_capacity, &literals) != 0) {
            return KILN_LZ4_ERROR;
        }
        if (literals > src_size - ip || literals > dst_capacity - op) {
            return KILN_LZ4_ERROR;
        }
        for (i = 0u; i < literals; ++i) {
            dst[op++] = src[ip++];
        }
        if (ip == src_size) {
            return (int32_t)op; /* the last sequence: literals only */
        }
        if (src_size - ip < 2u) {
            return KILN_LZ4_ERROR;
        }
        offset = (uint32_t)src[ip] | ((uint32_t)src[ip + 1u] << 8);
        ip += 2u;
        if (offset == 0u || offset > op) {
            return KILN_LZ4_ERROR;
        }
        if (match == 15u && kiln_lz4_length(src, src_size, &ip, dst_capacity, &match) != 0) {
            return KILN_LZ4_ERROR;
        }
        match += 4u; /* the minimum match */
        if (match > dst_capacity - op) {
            return KILN_LZ4_ERROR;
        }
        for (i = 0u; i < match; ++i) { /* byte by byte: a match may overlap its own output */
            dst[op] = dst[op - offset];
            ++op;
        }
        if (ip == src_size) {
            return KILN_LZ4_ERROR; /* a block ends with literals, never with a match */
        }
    }
}
