/* The firmware's own entry point: runs the gesture model once on a fixed int8 input
 * and prints the int8 scores and the winning class. */
#include <stdint.h>
#include <stdio.h>

#include "gesture.h"

static int8_t input[GESTURE_INPUT0_BYTES];
static int8_t scores[GESTURE_OUTPUT0_BYTES];
static uint8_t arena_memory[GESTURE_ARENA_SIZE + GESTURE_ARENA_ALIGN];

int main(void)
{
    const void *const inputs[] = {input};
    void *const outputs[] = {scores};
    uint8_t *arena = arena_memory + (GESTURE_ARENA_ALIGN - (uintptr_t)arena_memory % GESTURE_ARENA_ALIGN) % GESTURE_ARENA_ALIGN;
    kiln_status_t status;
    int best = 0;
    int i;

    for (i = 0; i < GESTURE_INPUT0_BYTES; ++i) {
        input[i] = (int8_t)((i * 37) % 256 - 128);
    }
    status = gesture_invoke(inputs, outputs, arena, GESTURE_ARENA_SIZE, NULL, NULL);
    if (status != KILN_OK) {
        fprintf(stderr, "gesture: %s\n", kiln_status_str(status));
        return 1;
    }
    printf("scores:");
    for (i = 0; i < GESTURE_OUTPUT0_BYTES; ++i) {
        printf(" %d", scores[i]);
        if (scores[i] > scores[best]) {
            best = i;
        }
    }
    printf("\nclass: %d\n", best);
    return 0;
}
