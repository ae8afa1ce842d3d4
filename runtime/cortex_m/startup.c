/* Cortex-M startup for the Kiln firmware harness, for every Arm target of
 * kiln/target/targets.py (Armv6-M, Armv7-M, Armv8-M and Armv8.1-M): the
 * vector table, the reset handler (FPU and MVE on, .data copied, .bss zeroed,
 * MPU stack guard where the core has an MPU, SysTick started, then main), and
 * fault handlers that report the fault on host stderr and exit through
 * semihosting with status 128 + exception number, so a crash is a quick,
 * readable failure rather than a hung core. The target's SysTick clock comes
 * from the build as KILN_CLOCK_HZ. */
#include <stdint.h>

#include "firmware.h"
#include "semihost.h"

extern uint32_t __kiln_data_start[], __kiln_data_end[], __kiln_data_load[];
extern uint32_t __kiln_bss_start[], __kiln_bss_end[];
extern uint32_t __kiln_stack_limit[], __kiln_stack_top[];

int main(void);
void kiln_reset_handler(void) __attribute__((noreturn));
void kiln_fault_report(const uint32_t *frame, uint32_t exception) __attribute__((noreturn, used));
void kiln_systick_handler(void);

#define REG(addr) (*(volatile uint32_t *)(addr))
#define SCB_CPACR REG(0xE000ED88u)
#define SCB_SHCSR REG(0xE000ED24u)
#define SCB_CFSR REG(0xE000ED28u)
#define SCB_HFSR REG(0xE000ED2Cu)
#define SCB_MMFAR REG(0xE000ED34u)
#define SCB_BFAR REG(0xE000ED38u)
#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
#define MPU_CTRL REG(0xE000ED94u)
#define MPU_RNR REG(0xE000ED98u)
#define MPU_RBAR REG(0xE000ED9Cu)
#define MPU_RASR REG(0xE000EDA0u)

#define CFSR_STACKING_ERRORS 0x00001010u /* MSTKERR | STKERR: the frame is unreadable */
/* SysTick's reload value: the full 24 bits (a wrap every 2^24 ticks) unless a
 * build sets a smaller one, as the tests of the wrap logic do. */
#ifndef KILN_SYSTICK_RELOAD
#define KILN_SYSTICK_RELOAD 0x00FFFFFFu
#endif

static volatile uint32_t g_systick_wraps;
/* Fault handlers run on their own stack, so a stack overflow can still be reported. */
#define FAULT_STACK_WORDS 128
#define STRINGIFY(x) #x
#define TO_TEXT(x) STRINGIFY(x)
uint32_t kiln_fault_stack[FAULT_STACK_WORDS];

static inline void barrier(void)
{
    __asm__ volatile("dsb\n\tisb" ::: "memory");
}

#define GUARD_BYTES 0x00100000u

#if defined(__ARM_ARCH_6M__)
/* Armv6-M: no configurable faults and no MPU on the nRF51; an overflow runs below RAM, into unmapped memory. */
#define FAULT_REGISTERS 0
static void guard_stack(void)
{
}
#else
#define FAULT_REGISTERS 1
static void enable_faults(void)
{
    SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18); /* MemManage, BusFault, UsageFault */
    barrier();
}
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define MPU_RLAR REG(0xE000EDA0u)
#define MPU_MAIR0 REG(0xE000EDC0u)
/* Armv8-M: one region over the 1 MB below the stack, read-only for privileged code and never executable, so a
 * push there is a MemManage fault; the default memory map stays in force everywhere else (PRIVDEFENA). */
static void guard_stack(void)
{
    const uint32_t base = (uint32_t)(uintptr_t)__kiln_stack_limit - GUARD_BYTES;
    MPU_MAIR0 = 0x44u; /* attribute 0: normal memory, non-cacheable */
    MPU_RNR = 0u;
    MPU_RBAR = base | (2u << 1) /* AP: read-only, privileged */ | 1u /* XN */;
    MPU_RLAR = ((base + GUARD_BYTES - 1u) & ~0x1Fu) | 1u /* enable, attribute 0 */;
    MPU_CTRL = (1u << 2) /* PRIVDEFENA */ | 1u /* ENABLE */;
    enable_faults();
}
#else
/* Armv7-M: one no-access region over the 1 MB below the stack; the default memory map stays in force everywhere
 * else (PRIVDEFENA). */
static void guard_stack(void)
{
    MPU_RNR = 0u;
    MPU_RBAR = (uint32_t)(uintptr_t)__kiln_stack_limit - GUARD_BYTES;
    MPU_RASR = (1u << 28) /* XN */ | (19u << 1) /* 2^(19+1) bytes */ | 1u /* enable */;
    MPU_CTRL = (1u << 2) /* PRIVDEFENA */ | 1u /* ENABLE */;
    enable_faults();
}
#endif
#endif

void kiln_reset_handler(void)
{
    uint32_t *src = __kiln_data_load;
    uint32_t *dst;
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    SCB_CPACR |= 0xFu << 20; /* full access to CP10 and CP11: the FPU and Helium */
    barrier();
#endif
    for (dst = __kiln_data_start; dst < __kiln_data_end; ++dst, ++src) {
        *dst = *src;
    }
    for (dst = __kiln_bss_start; dst < __kiln_bss_end; ++dst) {
        *dst = 0u;
    }
    guard_stack();
    SYST_RVR = KILN_SYSTICK_RELOAD;
    SYST_CVR = 0u;
    SYST_CSR = 7u; /* processor clock, interrupt on wrap, enable */
    while (SYST_CVR == 0u) {
        /* until the first reload, which starts the count */
    }
    kiln_exit(main());
}

/* Ends the program with main's status: semihosting's exit. A firmware with its own main links
 * runtime/app/syscalls.c, whose kiln_exit runs the C library's exit (flushing stdio) first. */
__attribute__((weak, noreturn)) void kiln_exit(int status)
{
    semihost_exit(status);
}

void kiln_systick_handler(void)
{
    g_systick_wraps = g_systick_wraps + 1u;
}

/* SysTick counts down from the reload value to 0, where the handler counts a
 * wrap, and reloads on the next tick; ticks are counted from the first reload. */
uint64_t kiln_ticks(void)
{
    uint32_t wraps, value;
    do {
        wraps = g_systick_wraps;
        value = SYST_CVR;
    } while (wraps != g_systick_wraps);
    if (value == 0u) {
        return (uint64_t)wraps * (KILN_SYSTICK_RELOAD + 1u) - 1u;
    }
    return (uint64_t)wraps * (KILN_SYSTICK_RELOAD + 1u) + (KILN_SYSTICK_RELOAD - value);
}

uint64_t kiln_instructions(uint64_t ticks)
{
    return ticks * 1000000000u / KILN_CLOCK_HZ;
}

uint32_t *kiln_stack_top(void)
{
    return __kiln_stack_top;
}

uint32_t *kiln_stack_limit(void)
{
    return __kiln_stack_limit;
}

static const char *exception_name(uint32_t exception)
{
    switch (exception) {
    case 2u: return "NMI";
    case 3u: return "HardFault";
    case 4u: return "MemManage";
    case 5u: return "BusFault";
    case 6u: return "UsageFault";
    case 11u: return "SVCall";
    case 14u: return "PendSV";
    default: return "interrupt";
    }
}

static void put_field(const char *name, uint32_t value)
{
    char text[12];
    int i;
    text[0] = ' ';
    text[1] = '0';
    text[2] = 'x';
    for (i = 0; i < 8; ++i) {
        text[3 + i] = "0123456789abcdef"[(value >> (28 - 4 * i)) & 0xFu];
    }
    text[11] = '\0';
    semihost_puts(SEMIHOST_STDERR, " ");
    semihost_puts(SEMIHOST_STDERR, name);
    semihost_puts(SEMIHOST_STDERR, "=");
    semihost_puts(SEMIHOST_STDERR, text + 1);
}

void kiln_fault_report(const uint32_t *frame, uint32_t exception)
{
#if FAULT_REGISTERS
    uint32_t cfsr = SCB_CFSR;
    MPU_CTRL = 0u;
    barrier();
#else
    const uint32_t cfsr = 0u;
#endif
    semihost_puts(SEMIHOST_STDERR, "kiln fault: ");
    semihost_puts(SEMIHOST_STDERR, exception_name(exception));
    put_field("exception", exception);
    if ((cfsr & CFSR_STACKING_ERRORS) == 0u && frame >= kiln_stack_limit() && frame + 8 <= kiln_stack_top()) {
        put_field("pc", frame[6]);
        put_field("lr", frame[5]);
    }
#if FAULT_REGISTERS
    put_field("cfsr", cfsr);
    put_field("hfsr", SCB_HFSR);
    put_field("mmfar", SCB_MMFAR);
    put_field("bfar", SCB_BFAR);
#endif
    semihost_puts(SEMIHOST_STDERR, "\n");
    semihost_exit(KILN_EXIT_FAULT + (int)exception);
}

/* Every fault and unexpected interrupt: switch to the fault stack and report. */
__attribute__((naked)) static void fault_entry(void)
{
    __asm__("mrs r0, msp\n\t"
            "mrs r1, ipsr\n\t"
            "ldr r2, =kiln_fault_stack + 4 * " TO_TEXT(FAULT_STACK_WORDS) "\n\t"
            "mov sp, r2\n\t"
            "ldr r2, =kiln_fault_report\n\t"
            "bx r2\n\t"
            ".ltorg");
}

typedef union {
    void (*handler)(void);
    const void *stack;
} vector_t;

#define FAULT {.handler = fault_entry}
#define FAULT8 FAULT, FAULT, FAULT, FAULT, FAULT, FAULT, FAULT, FAULT

/* 16 system exceptions and 96 interrupts (the most any target's board wires). */
__attribute__((section(".vectors"), used)) static const vector_t k_vectors[112] = {
    [0] = {.stack = __kiln_stack_top},
    [1] = {.handler = kiln_reset_handler},
    FAULT, FAULT, FAULT, FAULT, FAULT,
    [11] = FAULT,
    [12] = FAULT,
    [14] = FAULT,
    [15] = {.handler = kiln_systick_handler},
    FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8, FAULT8,
};
