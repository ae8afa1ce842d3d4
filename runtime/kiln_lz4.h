/* LZ4 block decoder for compressed model weights. C99, no allocation.
 *
 * Decodes one raw LZ4 block (the format of LZ4's "Block Format Description":
 * sequences of a token, literals, a 2-byte little-endian match offset and a
 * match length; the last sequence holds literals only) with no size header.
 * Every read stays inside src[0, src_size) and every write inside
 * dst[0, dst_capacity), whatever the input bytes are. */
#ifndef KILN_LZ4_H
#define KILN_LZ4_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_LZ4_ERROR (-1)

/* Returns the number of bytes written to dst, or KILN_LZ4_ERROR when src is
 * not a well-formed block, refers before the start of the output, or does not
 * fit in dst_capacity bytes (at most INT32_MAX). */
int32_t kiln_lz4_decompress(const uint8_t *src, uint32_t src_size, uint8_t *dst, uint32_t dst_capacity);

#ifdef __cplusplus
}
#endif

#endif /* KILN_LZ4_H */
