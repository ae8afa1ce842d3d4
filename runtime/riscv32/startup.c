/* RISC-V (RV32, machine mode) startup for the Kiln firmware harness on QEMU's
 * virt board: the entry point (stack and global pointers, trap vector), the
 * reset code (.data copied, .bss zeroed, the read-only part write-protected,
 * the thread pointer set for the C library's thread-local errno, then main), the instruction counter
 * (minstret) and a trap handler that reports a fault on host stderr and exits
 * through semihosting with status 128 + mcause. */
#include <stdint.h>

#include "firmware.h"
#include "semihost.h"

extern uint32_t __kiln_data_start[], __kiln_data_end[], __kiln_data_load[];
extern uint32_t __kiln_bss_start[], __kiln_bss_end[];
extern uint32_t __kiln_stack_limit[], __kiln_stack_top[];
extern uint8_t __kiln_tls_start[];
extern uint8_t __kiln_flash_start[], __kiln_flash_size[];

int main(void);
void kiln_reset(void) __attribute__((noreturn, used));
void kiln_trap_report(void) __attribute__((noreturn, used));

#define FAULT_STACK_WORDS 128
uint32_t kiln_fault_stack[FAULT_STACK_WORDS];

/* QEMU's virt board jumps to the start of DRAM in machine mode: the image's first instruction. */
__asm__(".section .text.start,\"ax\",@progbits\n"
        ".globl _start\n"
        "_start:\n"
        ".option push\n"
        ".option norelax\n"
        "la gp, __global_pointer$\n"
        ".option pop\n"
        "la sp, __kiln_stack_top\n"
        "la t0, kiln_trap_entry\n"
        "csrw mtvec, t0\n"
        "j kiln_reset\n"
        ".balign 4\n"
        "kiln_trap_entry:\n"
        "la sp, kiln_fault_stack + 4 * 128\n"
        "j kiln_trap_report\n"
        ".text\n");

/* One locked PMP region (which binds machine mode too) makes the read-only part below RAM, a power of two in
 * size, readable and executable but not writable: a stack overflow, which runs into it first, or a stray store
 * is a StoreAccessFault instead of corrupting code or weights. Everything else stays open to machine mode. */
static void protect_flash(void)
{
    const uint32_t base = (uint32_t)(uintptr_t)__kiln_flash_start, size = (uint32_t)(uintptr_t)__kiln_flash_size;
    const uint32_t napot = (base >> 2) | ((size >> 3) - 1u);
    __asm__ volatile("csrw pmpaddr0, %0" : : "r"(napot));
    __asm__ volatile("csrw pmpcfg0, %0" : : "r"(0x80u /* L */ | 0x18u /* NAPOT */ | 0x4u /* X */ | 0x1u /* R */));
}

void kiln_reset(void)
{
    uint32_t *src = __kiln_data_load;
    uint32_t *dst;
    for (dst = __kiln_data_start; dst < __kiln_data_end; ++dst, ++src) {
        *dst = *src;
    }
    for (dst = __kiln_bss_start; dst < __kiln_bss_end; ++dst) {
        *dst = 0u;
    }
    protect_flash();
    __asm__ volatile("mv tp, %0" : : "r"(__kiln_tls_start));
    kiln_exit(main());
}

/* Ends the program with main's status: semihosting's exit. A firmware with its own main links
 * runtime/app/syscalls.c, whose kiln_exit runs the C library's exit (flushing stdio) first. */
__attribute__((weak, noreturn)) void kiln_exit(int status)
{
    semihost_exit(status);
}

uint64_t kiln_ticks(void)
{
    uint32_t hi, lo, again;
    do {
        __asm__ volatile("csrr %0, minstreth" : "=r"(hi));
        __asm__ volatile("csrr %0, minstret" : "=r"(lo));
        __asm__ volatile("csrr %0, minstreth" : "=r"(again));
    } while (hi != again);
    return ((uint64_t)hi << 32) | lo;
}

uint64_t kiln_instructions(uint64_t ticks)
{
    return ticks;
}

uint32_t *kiln_stack_top(void)
{
    return __kiln_stack_top;
}

uint32_t *kiln_stack_limit(void)
{
    return __kiln_stack_limit;
}

static void put_field(const char *name, uint32_t value)
{
    char text[11];
    int i;
    text[0] = '0';
    text[1] = 'x';
    for (i = 0; i < 8; ++i) {
        text[2 + i] = "0123456789abcdef"[(value >> (28 - 4 * i)) & 0xFu];
    }
    text[10] = '\0';
    semihost_puts(SEMIHOST_STDERR, " ");
    semihost_puts(SEMIHOST_STDERR, name);
    semihost_puts(SEMIHOST_STDERR, "=");
    semihost_puts(SEMIHOST_STDERR, text);
}

static const char *cause_name(uint32_t cause)
{
    switch (cause) {
    case 0u: return "InstructionMisaligned";
    case 1u: return "InstructionAccessFault";
    case 2u: return "IllegalInstruction";
    case 3u: return "Breakpoint";
    case 4u: return "LoadMisaligned";
    case 5u: return "LoadAccessFault";
    case 6u: return "StoreMisaligned";
    case 7u: return "StoreAccessFault";
    default: return "Trap";
    }
}

void kiln_trap_report(void)
{
    uint32_t cause, epc, tval;
    __asm__ volatile("csrr %0, mcause" : "=r"(cause));
    __asm__ volatile("csrr %0, mepc" : "=r"(epc));
    __asm__ volatile("csrr %0, mtval" : "=r"(tval));
    semihost_puts(SEMIHOST_STDERR, "kiln fault: ");
    semihost_puts(SEMIHOST_STDERR, cause_name(cause));
    put_field("exception", cause);
    put_field("pc", epc);
    put_field("mtval", tval);
    semihost_puts(SEMIHOST_STDERR, "\n");
    semihost_exit(KILN_EXIT_FAULT + (int)(cause & 0x3Fu));
}
