/* The firmware's own entry point: runs the gesture model once on a fixed int8 input and leaves the
 * winning class in `gesture_class` (a debugger reads it; a real firmware would feed sensor data). */
#include <stdint.h>

#include "gesture.h"

static int8_t input[GESTURE_INPUT0_BYTES];
static int8_t scores[GESTURE_OUTPUT0_BYTES];
static uint8_t arena[GESTURE_ARENA_SIZE] __attribute__((aligned(GESTURE_ARENA_ALIGN)));
volatile int gesture_class = -1;

int main(void)
{
    const void *const inputs[] = {input};
    void *const outputs[] = {scores};
    int i;

    for (i = 0; i < GESTURE_INPUT0_BYTES; ++i) {
        input[i] = (int8_t)((i * 37) % 256 - 128);
    }
    if (gesture_invoke(inputs, outputs, arena, sizeof arena, NULL, NULL) == KILN_OK) {
        int best = 0;
        for (i = 1; i < GESTURE_OUTPUT0_BYTES; ++i) {
            if (scores[i] > scores[best]) {
                best = i;
            }
        }
        gesture_class = best;
    }
    for (;;) {
    }
}
