/* The 2 x 2 multiply-accumulate block of the int8 kernels on Armv6-M
 * (Cortex-M0/M0+), which the portable C leaves to the compiler badly: with
 * only eight low registers, four accumulators, four row pointers and an
 * index spill to the stack on every element. Here the accumulators live in
 * the high registers r8-r11 (ADD reaches them), the rows are indexed by one
 * register counting up to zero, and each element costs 4 LDRSB, 4 MULS,
 * 4 ADD, one register copy and the loop's ADDS/BNE: 3.75 instructions per
 * multiply-accumulate. Byte loads only (Armv6-M has no unaligned word
 * access); the sums wrap modulo 2^32 as the portable C's. */
#ifndef KILN_V6M_H
#define KILN_V6M_H

#include <stdint.h>

#if defined(__ARM_ARCH_6M__) && defined(__OPTIMIZE__) && !defined(KILN_PORTABLE_KERNELS)
#define KILN_V6M 1

/* acc[p][c] += sum_i xp[i] * wc[i] for 0 < n: two pixels against two weight rows. */
static inline void kiln_dot_2x2_v6m(kiln_acc2x2_t *acc, const int8_t *x0, const int8_t *x1, const int8_t *w0,
                                    const int8_t *w1, int32_t n)
{
    uint32_t a00 = acc->a00, a01 = acc->a01, a10 = acc->a10, a11 = acc->a11, t0, t1;
    int32_t i = -n; /* the rows are read at end + i, i running up to 0 */
    x0 += n, x1 += n, w0 += n, w1 += n;
    __asm__(".syntax unified\n\t"
            "1:\n\t"
            "ldrsb %[t0], [%[x0], %[i]]\n\t"
            "ldrsb %[t1], [%[w0], %[i]]\n\t"
            "mov ip, %[t1]\n\t"
            "muls %[t1], %[t0]\n\t"
            "add %[a00], %[t1]\n\t"
            "ldrsb %[t1], [%[w1], %[i]]\n\t"
            "muls %[t0], %[t1]\n\t"
            "add %[a01], %[t0]\n\t"
            "ldrsb %[t0], [%[x1], %[i]]\n\t"
            "muls %[t1], %[t0]\n\t"
            "add %[a11], %[t1]\n\t"
            "mov %[t1], ip\n\t"
            "muls %[t0], %[t1]\n\t"
            "add %[a10], %[t0]\n\t"
            "adds %[i], %[i], #1\n\t"
            "bne 1b\n\t"
            : [a00] "+h"(a00), [a01] "+h"(a01), [a10] "+h"(a10), [a11] "+h"(a11), [i] "+l"(i), [t0] "=&l"(t0),
              [t1] "=&l"(t1)
            : [x0] "l"(x0), [x1] "l"(x1), [w0] "l"(w0), [w1] "l"(w1)
            : "ip", "cc", "memory");
    acc->a00 = a00, acc->a01 = a01, acc->a10 = a10, acc->a11 = a11;
}
#endif

#endif /* KILN_V6M_H */
