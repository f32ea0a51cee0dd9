/* The GPU plugin's exported entry point: this build's backend table (gpu_ops.c). The plugin
 * carries its own copy of pl_common; a failed call's message crosses the library boundary
 * through the exported pl_error_msg, which the host's wrappers (backends/backend.c) read. */
#include "backends/gpu/gpu_internal.h"

#define PL_EXPORT __attribute__((visibility("default")))

/* The plugin entry point the registry looks up by PL_BE_PLUGIN_SYMBOL. */
PL_EXPORT const pl_be_ops_t *pl_be_plugin_ops(void);
PL_EXPORT const pl_be_ops_t *pl_be_plugin_ops(void)
{
    return pl_gpu_ops();
}
