/* Runs the fast requantization of firmware_stubs/kiln_simd.h (the portable
 * path the host build compiles) on cases read from stdin, each five
 * little-endian int32: the doubled accumulator t, mult, round, the right
 * shift e, the output zero point (round's); writes for each kiln_rq2_apply's
 * int32 result and kiln_rq2_sat8's (from the kernel's shift -e and zp). */
#include <stdio.h>

#include "kiln_simd.h"

static int read_i32(int32_t *v)
{
    unsigned char b[4];
    if (fread(b, 1, 4, stdin) != 4) {
        return 0;
    }
    *v = kiln_wrap_s32((uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24));
    return 1;
}

int main(void)
{
    int32_t t, mult, round, shift, zp;
    while (read_i32(&t) && read_i32(&mult) && read_i32(&round) && read_i32(&shift) && read_i32(&zp)) {
        const int32_t r[2] = {kiln_rq2_apply(mult, round, shift, t), kiln_rq2_sat8(mult, ~(-shift), 2 * zp + 1, t)};
        if (fwrite(r, sizeof r[0], 2, stdout) != 2) {
            return 1;
        }
    }
    return 0;
}
