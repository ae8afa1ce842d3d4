/* Runs kiln_lz4_decompress on cases read from stdin, each
 *     uint32 src_size, uint32 dst_capacity, src bytes
 * (little-endian), and writes for each: int32 result, then the decoded bytes.
 * Every buffer is allocated with exactly its size, so AddressSanitizer stops
 * the program at the first byte read or written outside one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_lz4.h"

static int read_u32(uint32_t *v)
{
    unsigned char b[4];
    if (fread(b, 1, 4, stdin) != 4) {
        return 0;
    }
    *v = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
    return 1;
}

int main(void)
{
    uint32_t src_size, capacity;
    while (read_u32(&src_size) && read_u32(&capacity)) {
        uint8_t *src = (uint8_t *)malloc(src_size ? src_size : 1u);
        uint8_t *dst = (uint8_t *)malloc(capacity ? capacity : 1u);
        int32_t result;
        if (src == NULL || dst == NULL || fread(src, 1, src_size, stdin) != src_size) {
            fprintf(stderr, "bad case\n");
            return 2;
        }
        result = kiln_lz4_decompress(src_size ? src : NULL, src_size, dst, capacity);
        fwrite(&result, sizeof result, 1, stdout);
        if (result > 0) {
            fwrite(dst, 1, (size_t)result, stdout);
        }
        free(src);
        free(dst);
    }
    return 0;
}
