/* Kiln runtime: the model descriptor every generated model exports, status
 * codes, and the per-layer hook type. C99, no allocation. */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KILN_OK = 0,
    KILN_ERR_NULL = 1,          /* a required pointer is NULL */
    KILN_ERR_ARENA_SIZE = 2,    /* the arena is smaller than the model needs */
    KILN_ERR_ARENA_ALIGN = 3,   /* the arena is not aligned as the model needs */
    KILN_ERR_DECOMPRESS = 4     /* compressed weights failed to decode */
} kiln_status_t;

typedef enum { KILN_INT8 = 0, KILN_FLOAT32 = 1, KILN_UINT8 = 2 } kiln_dtype_t;

#define KILN_MAX_RANK 6

typedef struct {
    const char *name;
    int32_t dtype;                 /* kiln_dtype_t */
    int32_t rank;
    int32_t shape[KILN_MAX_RANK];
    int32_t bytes;
    float scale;                   /* quantization of int8 tensors, for the caller's convenience */
    int32_t zero_point;
} kiln_tensor_info_t;

/* Called before (phase 0) and after (phase 1) each layer when given to invoke. */
typedef void (*kiln_layer_hook_t)(void *user, int32_t layer, const char *name, int32_t phase,
                                  const void *output, int32_t output_bytes);

typedef kiln_status_t (*kiln_invoke_fn)(const void *const *inputs, void *const *outputs,
                                        void *arena, size_t arena_size,
                                        kiln_layer_hook_t hook, void *user);

typedef struct {
    const char *name;
    uint32_t arena_size;           /* bytes the caller provides */
    uint32_t arena_align;          /* required alignment of the arena */
    uint32_t weight_bytes;
    int32_t n_inputs;
    int32_t n_outputs;
    int32_t n_layers;
    const kiln_tensor_info_t *inputs;
    const kiln_tensor_info_t *outputs;
    kiln_invoke_fn invoke;
} kiln_model_t;

/* A readable name for a status code. */
const char *kiln_status_str(kiln_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_H */
