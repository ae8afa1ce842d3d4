#include "kiln_runtime.h"

const char *kiln_status_str(kiln_status_t status)
{
    switch (status) {
    case KILN_OK: return "ok";
    case KILN_ERR_NULL: return "null pointer";
    case KILN_ERR_ARENA_SIZE: return "arena too small";
    case KILN_ERR_ARENA_ALIGN: return "arena misaligned";
    case KILN_ERR_DECOMPRESS: return "weights failed to decompress";
    }
    return "unknown status";
}
