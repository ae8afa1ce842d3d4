/* Semihosting calls (Arm's "Semihosting for AArch32 and AArch64" ABI,
 * version 2, which RISC-V's semihosting adopts for RV32): the operation and a
 * pointer to its parameter block go in r0/r1 (a0/a1), the result comes back
 * in r0 (a0). The trap is `bkpt 0xab` on Cortex-M and, on RISC-V, an ebreak
 * between two marker instructions, uncompressed and in one page. */
#include "semihost.h"

enum {
    SYS_OPEN = 0x01,
    SYS_WRITE = 0x05,
    SYS_READ = 0x06,
    SYS_GET_CMDLINE = 0x15,
    SYS_EXIT_EXTENDED = 0x20
};

/* Open modes of ":tt": "r" is stdin, "w" stdout, "a" stderr. */
static const uint32_t k_tt_modes[3] = {0u, 4u, 8u};
static long g_handles[3] = {-1, -1, -1};

#if defined(__riscv)
/* A function of its own, 16-byte aligned: the three trap instructions never straddle a page. */
__asm__(".section .text.kiln_semihost_trap,\"ax\",@progbits\n"
        ".balign 16\n"
        "kiln_semihost_trap:\n"
        ".option push\n"
        ".option norvc\n"
        "slli x0, x0, 0x1f\n"
        "ebreak\n"
        "srai x0, x0, 7\n"
        ".option pop\n"
        "ret\n"
        ".text\n");
long kiln_semihost_trap(uint32_t op, const void *args);

static long semihost_call(uint32_t op, const void *args)
{
    __asm__ volatile("" ::: "memory"); /* the host reads and writes the parameter block */
    return (long)(int32_t)kiln_semihost_trap(op, args);
}
#else
static long semihost_call(uint32_t op, const void *args)
{
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = args;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return (long)(int32_t)r0;
}
#endif

static long stream_handle(semihost_stream_t stream)
{
    if (g_handles[stream] < 0) {
        uint32_t args[3];
        args[0] = (uint32_t)(uintptr_t)":tt";
        args[1] = k_tt_modes[stream];
        args[2] = 3u;
        g_handles[stream] = semihost_call(SYS_OPEN, args);
    }
    return g_handles[stream];
}

int semihost_write(semihost_stream_t stream, const void *buf, size_t len)
{
    uint32_t args[3];
    long handle = stream_handle(stream);
    if (handle < 0) {
        return -1;
    }
    args[0] = (uint32_t)handle;
    args[1] = (uint32_t)(uintptr_t)buf;
    args[2] = (uint32_t)len;
    /* SYS_WRITE returns the number of bytes NOT written. */
    return semihost_call(SYS_WRITE, args) == 0 ? 0 : -1;
}

int semihost_puts(semihost_stream_t stream, const char *text)
{
    size_t len = 0;
    while (text[len] != '\0') {
        ++len;
    }
    return semihost_write(stream, text, len);
}

long semihost_read_stdin(void *buf, size_t len)
{
    uint8_t *dst = (uint8_t *)buf;
    size_t done = 0;
    long handle = stream_handle(SEMIHOST_STDIN);
    if (handle < 0) {
        return -1;
    }
    while (done < len) {
        uint32_t args[3];
        long left;
        args[0] = (uint32_t)handle;
        args[1] = (uint32_t)(uintptr_t)(dst + done);
        args[2] = (uint32_t)(len - done);
        /* SYS_READ returns the number of bytes NOT read: all of them at end of input. */
        left = semihost_call(SYS_READ, args);
        if (left < 0 || (size_t)left > len - done) {
            return -1;
        }
        if ((size_t)left == len - done) {
            break;
        }
        done = len - (size_t)left;
    }
    return (long)done;
}

int semihost_cmdline(char *buf, size_t len)
{
    uint32_t args[2];
    args[0] = (uint32_t)(uintptr_t)buf;
    args[1] = (uint32_t)len;
    return semihost_call(SYS_GET_CMDLINE, args) == 0 ? 0 : -1;
}

void semihost_exit(int status)
{
    /* ADP_Stopped_ApplicationExit with a status: SYS_EXIT_EXTENDED, since the
     * AArch32 SYS_EXIT cannot carry one. */
    uint32_t args[2];
    args[0] = 0x20026u;
    args[1] = (uint32_t)status;
    semihost_call(SYS_EXIT_EXTENDED, args);
    for (;;) {
    }
}
