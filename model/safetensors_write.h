/* The safetensors writer beside the reader (safetensors.h), one home for the format: a shard of
 * f32 tensors written whole or not at all, and the Hugging Face shard index naming each tensor's. */
#ifndef PL_MODEL_SAFETENSORS_WRITE_H
#define PL_MODEL_SAFETENSORS_WRITE_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

/* One tensor to write: f32 values, row-major, shape[0..ndim) (1..4 dims). Borrowed. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data;
} pl_st_out_t;

/* Write n tensors to `path` as one safetensors file (F32, in the order given, 8-byte aligned
 * data, `__metadata__` {"format": "pt"}): first to path + ".tmp", then renamed over path, so a
 * reader never sees half a file. Names must be 1..PL_ST_MAX_NAME bytes and unique; shapes
 * positive (PL_ERR_INVALID naming the tensor). */
pl_status_t pl_st_write(const char *path, const pl_st_out_t *t, size_t n);

/* Write model.safetensors.index.json in dir: {"metadata": {"total_size": total_bytes},
 * "weight_map": {names[i]: shards[i]}} (atomically, as pl_st_write). */
pl_status_t pl_st_index_write(const char *dir, const char *const *names,
                              const char *const *shards, size_t n, uint64_t total_bytes);

#endif
