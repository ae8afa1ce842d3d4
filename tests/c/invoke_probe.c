/* Drives the invoke function of the first model in `kiln_models` directly.
 *
 *   probe checks < sample   prints one status code per line: the arena one byte
 *                           short, a misaligned arena, a NULL input, a NULL
 *                           output, then a correct call (whose outputs follow
 *                           on stdout after a line "outputs")
 *   probe hooks < sample    runs once with a layer hook; for every hook call it
 *                           writes int32 layer, int32 phase, int32 bytes, the
 *                           layer name and a NUL, then the output bytes
 *
 * The sample is the model's inputs back to back. Every arena and buffer is
 * allocated with exactly its size, so AddressSanitizer sees any access outside. */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

extern const kiln_model_t *const kiln_models[];

#define MAX_TENSORS 16

typedef struct {
    int calls;
    int bad_user;
} hook_state_t;

static hook_state_t state;

static void hook(void *user, int32_t layer, const char *name, int32_t phase, const void *output, int32_t bytes)
{
    if (user != &state) {
        state.bad_user = 1;
    }
    state.calls++;
    fwrite(&layer, sizeof layer, 1, stdout);
    fwrite(&phase, sizeof phase, 1, stdout);
    fwrite(&bytes, sizeof bytes, 1, stdout);
    fwrite(name, 1, strlen(name) + 1, stdout);
    if (bytes > 0) {
        fwrite(output, 1, (size_t)bytes, stdout);
    }
}

static void *aligned(size_t align, size_t size)
{
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1) != 0) {
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    const kiln_model_t *m = kiln_models[0];
    void *ins[MAX_TENSORS];
    void *outs[MAX_TENSORS];
    uint8_t *arena = (uint8_t *)aligned(m->arena_align, m->arena_size);
    uint8_t *shifted = (uint8_t *)aligned(m->arena_align, (size_t)m->arena_size + 1u);
    int i;
    if (argc != 2 || m->n_inputs > MAX_TENSORS || m->n_outputs > MAX_TENSORS || arena == NULL || shifted == NULL) {
        return 2;
    }
    for (i = 0; i < m->n_inputs; ++i) {
        ins[i] = malloc((size_t)m->inputs[i].bytes);
        if (ins[i] == NULL || fread(ins[i], 1, (size_t)m->inputs[i].bytes, stdin) != (size_t)m->inputs[i].bytes) {
            return 2;
        }
    }
    for (i = 0; i < m->n_outputs; ++i) {
        outs[i] = malloc((size_t)m->outputs[i].bytes);
    }
    if (strcmp(argv[1], "checks") == 0) {
        void *saved;
        printf("%d\n", (int)m->invoke((const void *const *)ins, outs, arena, m->arena_size - 1u, hook, &state));
        printf("%d\n", (int)m->invoke((const void *const *)ins, outs, shifted + 1, m->arena_size, hook, &state));
        saved = ins[0];
        ins[0] = NULL;
        printf("%d\n", (int)m->invoke((const void *const *)ins, outs, arena, m->arena_size, hook, &state));
        ins[0] = saved;
        saved = outs[0];
        outs[0] = NULL;
        printf("%d\n", (int)m->invoke((const void *const *)ins, outs, arena, m->arena_size, hook, &state));
        outs[0] = saved;
        printf("%d\n", state.calls);
        printf("%d\n", (int)m->invoke((const void *const *)ins, outs, arena, m->arena_size, NULL, NULL));
        printf("outputs\n");
        for (i = 0; i < m->n_outputs; ++i) {
            fwrite(outs[i], 1, (size_t)m->outputs[i].bytes, stdout);
        }
    } else if (m->invoke((const void *const *)ins, outs, arena, m->arena_size, hook, &state) != KILN_OK || state.bad_user) {
        return 3;
    }
    for (i = 0; i < m->n_inputs; ++i) {
        free(ins[i]);
    }
    for (i = 0; i < m->n_outputs; ++i) {
        free(outs[i]);
    }
    free(arena);
    free(shifted);
    return 0;
}
