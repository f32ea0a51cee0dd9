/* Internal to model/: one safetensors shard, its validated header and its lazy read-only mapping.
 * Layout: u64 little-endian header length N, N bytes of JSON header, then the tensor data. */
#ifndef PL_MODEL_SAFETENSORS_H
#define PL_MODEL_SAFETENSORS_H

#include "common/status.h"
#include "model/model.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_ST_MAX_HEADER (100u * 1000u * 1000u)
#define PL_ST_MAX_NAME 512
#define PL_ST_MAX_TENSORS (1u << 20)

/* One tensor as described by the header; offsets are relative to the start of the data. */
typedef struct {
    char *name;
    pl_dtype_t dtype;
    int ndim;
    int64_t shape[4];
    int64_t numel;
    uint64_t begin, end;
} pl_st_entry_t;

typedef struct {
    pl_st_entry_t *entries;
    size_t n_entries;
    uint64_t data_off; /* 8 + N: where the data starts in the file */
} pl_st_header_t;

typedef struct {
    char *path;
    int fd;            /* open until mapped */
    uint64_t file_size;
    pl_st_header_t hdr;
    pthread_mutex_t lock; /* guards the lazy mapping */
    void *map;
    size_t map_len;
} pl_st_file_t;

/* Parse and validate the JSON header text given the data size that follows it. `label` (a file
 * name) prefixes every error. On success *hdr owns its entries (free with pl_st_header_free). */
pl_status_t pl_st_header_parse(const char *label, const char *json, size_t json_len,
                               uint64_t data_size, pl_st_header_t *hdr);
/* Validate a whole safetensors file held in memory (length prefix, header, sizes). */
pl_status_t pl_st_parse_buffer(const char *label, const void *buf, size_t len,
                               pl_st_header_t *hdr);
void pl_st_header_free(pl_st_header_t *hdr);

/* Open a shard and read only its header; the data is not touched. */
pl_status_t pl_st_open(const char *path, pl_st_file_t **file_p);
/* Map the shard read-only if not yet mapped (thread-safe) and return the start of its data. */
pl_status_t pl_st_data(pl_st_file_t *file, const unsigned char **data_p);
/* Unmap, close and free; sets *file_p to NULL; safe on NULL. */
void pl_st_close(pl_st_file_t **file_p);

/* "F32" / "F16" / "BF16" to a dtype; anything else is PL_ERR_UNSUPPORTED. */
pl_status_t pl_dtype_parse(const char *name, pl_dtype_t *dt_p);
/* Convert n elements of dtype dt at src (any alignment, little-endian) to f32. */
void pl_dtype_to_f32(pl_dtype_t dt, const void *src, size_t n, float *dst);

#endif
