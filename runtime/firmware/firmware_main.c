/* Firmware harness: runs a linked model on samples read from host stdin
 * through semihosting, and reports each inference's outputs and instruction
 * count on host stdout — the firmware counterpart of host_main.c, with the
 * same input stream (each sample: the model's inputs back to back).
 *
 *   args: [--list] [--layers | --tensors] [MODEL]   (the semihosting command line)
 *
 * stdout, one line each:
 *   kiln-firmware inputs=N outputs=N arena=BYTES layers=N model=NAME
 *   sample=I instructions=N out0=HEX [out1=HEX ...]
 *   layer sample=I index=K instructions=N name=TEXT        (with --layers)
 *   tensor sample=I index=K hex=HEX    (with --tensors: a layer's output as the per-layer
 *                                       hook sees it after the layer, written at once)
 *   kiln-firmware end samples=N stack=BYTES
 * Instructions are the target's counter ticks converted (exact to one tick
 * under QEMU -icount shift=0: 40 instructions on MPS2, 1 on RISC-V); with
 * --layers, the hook's own work counts in the totals. The stack figure is
 * the peak use during the run. Exit statuses are the KILN_EXIT_* codes of
 * firmware.h. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "firmware.h"
#include "kiln_runtime.h"
#include "semihost.h"

#define MAX_TENSORS 16
#define IO_ALIGN 16u
#define STACK_PAINT 0x6b6c6e21u

typedef struct {
    char text[256];
    size_t len;
} line_t;

typedef struct {
    int32_t count;
    int overflow;
} layer_log_t;

typedef struct {
    uint32_t sample;
} tensor_log_t;

static line_t g_line;

static void flush(void)
{
    semihost_write(SEMIHOST_STDOUT, g_line.text, g_line.len);
    g_line.len = 0;
}

static void put_char(char c)
{
    if (g_line.len == sizeof g_line.text) {
        flush();
    }
    g_line.text[g_line.len++] = c;
    if (c == '\n') {
        flush();
    }
}

static void put_text(const char *text)
{
    while (*text != '\0') {
        put_char(*text++);
    }
}

static void put_u64(uint64_t value)
{
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + (int)(value % 10u));
        value /= 10u;
    } while (value != 0u);
    while (n > 0) {
        put_char(digits[--n]);
    }
}

static void put_field(const char *name, uint64_t value)
{
    put_char(' ');
    put_text(name);
    put_char('=');
    put_u64(value);
}

static void put_hex(const uint8_t *bytes, int32_t count)
{
    int32_t i;
    for (i = 0; i < count; ++i) {
        put_char("0123456789abcdef"[bytes[i] >> 4]);
        put_char("0123456789abcdef"[bytes[i] & 0xFu]);
    }
}

static int fail(int status, const kiln_model_t *m, const char *what)
{
    semihost_puts(SEMIHOST_STDERR, "kiln-firmware: ");
    if (m != NULL) {
        semihost_puts(SEMIHOST_STDERR, m->name);
        semihost_puts(SEMIHOST_STDERR, ": ");
    }
    semihost_puts(SEMIHOST_STDERR, what);
    semihost_puts(SEMIHOST_STDERR, "\n");
    return status;
}

static void record_layer(void *user, int32_t layer, const char *name, int32_t phase, const void *output,
                         int32_t output_bytes)
{
    layer_log_t *log = (layer_log_t *)user;
    uint64_t now = kiln_ticks();
    (void)output;
    (void)output_bytes;
    if (log->count >= kiln_layer_capacity) {
        log->overflow = 1;
        return;
    }
    if (phase == 0) {
        kiln_layer_records[log->count].layer = layer;
        kiln_layer_records[log->count].name = name;
        kiln_layer_records[log->count].start = now;
    } else {
        kiln_layer_records[log->count].ticks = now - kiln_layer_records[log->count].start;
        log->count++;
    }
}

/* The per-layer hook of --tensors: a layer's output as it is when the layer ends (a later
 * layer may write over it), so it is written out now. */
static void print_tensor(void *user, int32_t layer, const char *name, int32_t phase, const void *output,
                         int32_t output_bytes)
{
    (void)name;
    if (phase != 1 || output == NULL) {
        return;
    }
    put_text("tensor");
    put_field("sample", ((const tensor_log_t *)user)->sample);
    put_field("index", (uint64_t)layer);
    put_text(" hex=");
    put_hex((const uint8_t *)output, output_bytes);
    put_char('\n');
}

/* Points ins/outs into kiln_io; 0 when the model's tensors fit. */
static int place_io(const kiln_model_t *m, void **ins, void **outs)
{
    uint32_t offset = 0;
    int32_t i;
    if (m->n_inputs > MAX_TENSORS || m->n_outputs > MAX_TENSORS) {
        return -1;
    }
    for (i = 0; i < m->n_inputs + m->n_outputs; ++i) {
        const kiln_tensor_info_t *t = i < m->n_inputs ? &m->inputs[i] : &m->outputs[i - m->n_inputs];
        if ((uint32_t)t->bytes > kiln_io_size - offset) {
            return -1;
        }
        if (i < m->n_inputs) {
            ins[i] = kiln_io + offset;
        } else {
            outs[i - m->n_inputs] = kiln_io + offset;
        }
        offset += ((uint32_t)t->bytes + IO_ALIGN - 1u) & ~(IO_ALIGN - 1u);
        if (offset > kiln_io_size) {
            offset = kiln_io_size;
        }
    }
    return 0;
}

/* Reads one sample; 1 when read, 0 at the end of input, -1 on a short read. */
static int read_sample(const kiln_model_t *m, void *const *ins)
{
    int32_t i;
    for (i = 0; i < m->n_inputs; ++i) {
        long got = semihost_read_stdin(ins[i], (size_t)m->inputs[i].bytes);
        if (i == 0 && got == 0) {
            return 0;
        }
        if (got != (long)m->inputs[i].bytes) {
            return -1;
        }
    }
    return 1;
}

static void report_layers(uint32_t sample, const layer_log_t *log)
{
    int32_t i;
    for (i = 0; i < log->count; ++i) {
        put_text("layer");
        put_field("sample", sample);
        put_field("index", (uint64_t)kiln_layer_records[i].layer);
        put_field("instructions", kiln_instructions(kiln_layer_records[i].ticks));
        put_text(" name=");
        put_text(kiln_layer_records[i].name);
        put_char('\n');
    }
}

static uint32_t *stack_pointer(void)
{
    return (uint32_t *)__builtin_frame_address(0);
}

/* Fills the unused stack below the caller's frame, for stack_peak(). */
static void paint_stack(void)
{
    uint32_t *p;
    uint32_t *end = stack_pointer() - 64;
    for (p = kiln_stack_limit(); p < end; ++p) {
        *(volatile uint32_t *)p = STACK_PAINT;
    }
}

/* Bytes of stack used at the deepest point since paint_stack(). */
static uint32_t stack_peak(void)
{
    uint32_t *p = kiln_stack_limit();
    while (*(volatile uint32_t *)p == STACK_PAINT) {
        ++p;
    }
    return (uint32_t)((uintptr_t)kiln_stack_top() - (uintptr_t)p);
}

static int run(const kiln_model_t *m, int layers, int tensors)
{
    void *ins[MAX_TENSORS];
    void *outs[MAX_TENSORS];
    uint32_t sample;
    int32_t i;
    if (m->n_inputs < 1) {
        return fail(KILN_EXIT_USAGE, m, "the model has no inputs to read");
    }
    if (m->arena_size > kiln_arena_size || m->arena_align == 0u || ((uintptr_t)kiln_arena % m->arena_align) != 0u) {
        return fail(KILN_EXIT_MEMORY, m, "the arena does not fit the firmware's arena buffer");
    }
    if (place_io(m, ins, outs) != 0) {
        return fail(KILN_EXIT_MEMORY, m, "the inputs and outputs do not fit the firmware's I/O buffer");
    }
    put_text("kiln-firmware");
    put_field("inputs", (uint64_t)m->n_inputs);
    put_field("outputs", (uint64_t)m->n_outputs);
    put_field("arena", m->arena_size);
    put_field("layers", (uint64_t)m->n_layers);
    put_text(" model=");
    put_text(m->name);
    put_char('\n');
    paint_stack();
    for (sample = 0;; ++sample) {
        layer_log_t log = {0, 0};
        tensor_log_t printed;
        kiln_status_t st;
        uint64_t start, ticks;
        int got = read_sample(m, ins);
        if (got == 0) {
            break;
        }
        if (got < 0) {
            return fail(KILN_EXIT_INPUT, m, "short read of a sample on stdin");
        }
        printed.sample = sample;
        start = kiln_ticks();
        if (tensors) {
            st = m->invoke((const void *const *)ins, outs, kiln_arena, m->arena_size, print_tensor, &printed);
        } else {
            st = m->invoke((const void *const *)ins, outs, kiln_arena, m->arena_size, layers ? record_layer : NULL, &log);
        }
        ticks = kiln_ticks() - start;
        if (st != KILN_OK) {
            return fail(KILN_EXIT_INVOKE, m, kiln_status_str(st));
        }
        if (log.overflow) {
            return fail(KILN_EXIT_MEMORY, m, "more layers than the layer log holds");
        }
        put_text("sample=");
        put_u64(sample);
        put_field("instructions", kiln_instructions(ticks));
        for (i = 0; i < m->n_outputs; ++i) {
            put_text(" out");
            put_u64((uint64_t)i);
            put_char('=');
            put_hex((const uint8_t *)outs[i], m->outputs[i].bytes);
        }
        put_char('\n');
        report_layers(sample, &log);
    }
    put_text("kiln-firmware end");
    put_field("samples", sample);
    put_field("stack", stack_peak());
    put_char('\n');
    return KILN_EXIT_OK;
}

static void list_models(void)
{
    int i;
    for (i = 0; i < kiln_model_count; ++i) {
        const kiln_model_t *m = kiln_models[i];
        put_text(m->name);
        put_field("arena", m->arena_size);
        put_field("weights", m->weight_bytes);
        put_field("inputs", (uint64_t)m->n_inputs);
        put_field("outputs", (uint64_t)m->n_outputs);
        put_field("layers", (uint64_t)m->n_layers);
        put_char('\n');
    }
}

int main(void)
{
    static char cmdline[512];
    const kiln_model_t *m = kiln_model_count == 1 ? kiln_models[0] : NULL;
    const char *name = NULL;
    int layers = 0, tensors = 0, first, i;
    char *p;
    if (semihost_cmdline(cmdline, sizeof cmdline) != 0) {
        cmdline[0] = '\0';
    }
    for (p = cmdline, first = 1; *p != '\0'; first = 0) {
        char *arg;
        while (*p == ' ') {
            ++p;
        }
        for (arg = p; *p != '\0' && *p != ' '; ++p) {
        }
        if (*p != '\0') {
            *p++ = '\0';
        }
        if (first || arg[0] == '\0') {
            continue; /* the program name */
        }
        if (strcmp(arg, "--list") == 0) {
            list_models();
            return KILN_EXIT_OK;
        }
        if (strcmp(arg, "--layers") == 0) {
            layers = 1;
        } else if (strcmp(arg, "--tensors") == 0) {
            tensors = 1;
        } else {
            name = arg;
        }
    }
    if (name != NULL) {
        m = NULL;
        for (i = 0; i < kiln_model_count; ++i) {
            if (strcmp(kiln_models[i]->name, name) == 0) {
                m = kiln_models[i];
            }
        }
    }
    if (m == NULL) {
        return fail(KILN_EXIT_USAGE, NULL, "usage: [--list] [--layers | --tensors] MODEL (name a linked model)");
    }
    return run(m, layers, tensors);
}
