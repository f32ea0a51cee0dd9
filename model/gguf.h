/* GGUF (v2 and v3) files: the header, the typed metadata and the tensor infos, each count, size,
 * offset and alignment checked before use; the file is mapped so only touched pages are read. */
#ifndef PL_MODEL_GGUF_H
#define PL_MODEL_GGUF_H

#include "common/status.h"
#include "model/wtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_GGUF_MAGIC "GGUF"
#define PL_GGUF_DEFAULT_ALIGNMENT 32
#define PL_GGUF_MAX_KVS (1u << 20)
#define PL_GGUF_MAX_TENSORS (1u << 20)
#define PL_GGUF_MAX_KEY 65535
#define PL_GGUF_MAX_NAME 255
#define PL_GGUF_MAX_ALIGNMENT (1u << 20)

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum {
    PL_GGUF_U8 = 0, PL_GGUF_I8 = 1, PL_GGUF_U16 = 2, PL_GGUF_I16 = 3, PL_GGUF_U32 = 4,
    PL_GGUF_I32 = 5, PL_GGUF_F32 = 6, PL_GGUF_BOOL = 7, PL_GGUF_STR = 8, PL_GGUF_ARR = 9,
    PL_GGUF_U64 = 10, PL_GGUF_I64 = 11, PL_GGUF_F64 = 12,
} pl_gguf_vtype_t;
#define PL_GGUF_VTYPE_COUNT 13

/* One metadata entry. Values stay in the file; offsets are from the start of the buffer. */
typedef struct {
    char *key;
    pl_gguf_vtype_t type;
    pl_gguf_vtype_t elem;  /* arrays: the element type */
    uint64_t n;            /* arrays: the element count; strings: the byte length */
    uint64_t off;          /* the value, the string's bytes, or the array's first element */
    uint64_t *str_offs;    /* string arrays: where each element's bytes start (n of them) */
} pl_gguf_kv_t;

/* One tensor info. ne[0] is the row length (ggml order, the reverse of a safetensors shape). */
typedef struct {
    char *name;
    pl_wtype_t wtype;
    int ndim;
    int64_t ne[4];
    int64_t numel;
    uint64_t off;     /* from the start of the data section */
    uint64_t nbytes;
} pl_gguf_tensor_t;

typedef struct pl_gguf {
    const unsigned char *buf; /* the whole file */
    size_t len;
    uint32_t version;
    pl_gguf_kv_t *kvs;        /* in file order */
    size_t n_kvs;
    pl_gguf_tensor_t *tensors; /* in file order */
    size_t n_tensors;
    uint64_t alignment;
    uint64_t data_off;        /* where the data section starts */
    pl_gguf_kv_t **kv_by_key; /* sorted, for lookups */
    pl_gguf_tensor_t **t_by_name;
    char *label;              /* the file name every error starts with */
    void *map;                /* set when pl_gguf_open mapped the file */
    size_t map_len;
} pl_gguf_t;

/* Parse a whole GGUF file held in buf (borrowed: must outlive *g_p). Every error names `label`
 * and the field. */
pl_status_t pl_gguf_parse(const char *label, const void *buf, size_t len, pl_gguf_t **g_p);
/* Map path read-only and parse it; the weights' pages are read only when touched. */
pl_status_t pl_gguf_open(const char *path, pl_gguf_t **g_p);
/* Free (and unmap); sets *g_p to NULL; safe on NULL. */
void pl_gguf_free(pl_gguf_t **g_p);
/* True when the file at path starts with the GGUF magic. */
bool pl_gguf_is_file(const char *path);

/* The entry for key, or NULL. */
const pl_gguf_kv_t *pl_gguf_find(const pl_gguf_t *g, const char *key);
/* The tensor named name, or NULL. */
const pl_gguf_tensor_t *pl_gguf_tensor(const pl_gguf_t *g, const char *name);
/* The first byte of a tensor's data. */
const void *pl_gguf_tensor_data(const pl_gguf_t *g, const pl_gguf_tensor_t *t);

/* Typed getters: PL_ERR_NOT_FOUND when the key is absent (no message), PL_ERR_INVALID naming the
 * key when its type is wrong or its value outside [min, max]. Any integer type is accepted for
 * an integer, f32 or f64 for a number. */
pl_status_t pl_gguf_get_int(const pl_gguf_t *g, const char *key, int64_t min, int64_t max,
                            int64_t *v_p);
pl_status_t pl_gguf_get_num(const pl_gguf_t *g, const char *key, double *v_p);
pl_status_t pl_gguf_get_bool(const pl_gguf_t *g, const char *key, bool *v_p);
/* A string value: borrowed bytes (not NUL-terminated) and their length. */
pl_status_t pl_gguf_get_str(const pl_gguf_t *g, const char *key, const char **s_p,
                            size_t *len_p);
/* An array of element type elem. */
pl_status_t pl_gguf_get_arr(const pl_gguf_t *g, const char *key, pl_gguf_vtype_t elem,
                            const pl_gguf_kv_t **kv_p);
/* Element i (< kv->n) of a checked array. */
void pl_gguf_arr_str(const pl_gguf_t *g, const pl_gguf_kv_t *kv, uint64_t i, const char **s_p,
                     size_t *len_p);
float pl_gguf_arr_f32(const pl_gguf_t *g, const pl_gguf_kv_t *kv, uint64_t i);
int64_t pl_gguf_arr_int(const pl_gguf_t *g, const pl_gguf_kv_t *kv, uint64_t i);

/* ggml's type number of a tensor to a weight type; PL_ERR_UNSUPPORTED naming the type. */
pl_status_t pl_gguf_wtype(uint32_t ggml_type, pl_wtype_t *dt_p);
/* The ggml type number of a weight type (for writers). */
uint32_t pl_gguf_ggml_type(pl_wtype_t dt);

#endif
