/* Writing safetensors shards and their index (safetensors_write.h): the JSON header through
 * jansson, padded with spaces to 8 bytes, the data little-endian, a temporary file renamed. */
#include "model/safetensors_write.h"

#include "common/util.h"
#include "model/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pl_status_t s_header(const char *path, const pl_st_out_t *t, size_t n, char **text_p)
{
    json_t *hdr = json_object();
    uint64_t off = 0;
    if (!hdr)
        return pl_error(PL_ERR_NOMEM, "safetensors header");
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    for (size_t i = 0; i < n; i++) {
        size_t len = t[i].name ? strlen(t[i].name) : 0;
        uint64_t numel = 1;
        bool bad = len == 0 || len > PL_ST_MAX_NAME || t[i].ndim < 1 || t[i].ndim > 4 ||
                   !t[i].data || strcmp(t[i].name, "__metadata__") == 0;
        for (int d = 0; !bad && d < t[i].ndim; d++)
            bad = t[i].shape[d] < 1 || __builtin_mul_overflow(numel, (uint64_t)t[i].shape[d],
                                                              &numel);
        if (!bad && json_object_get(hdr, t[i].name)) {
            json_decref(hdr);
            return pl_error(PL_ERR_INVALID, "%s: tensor '%s' named twice", path, t[i].name);
        }
        if (bad || numel > UINT64_MAX / 4 - off) {
            json_decref(hdr);
            return pl_error(PL_ERR_INVALID, "%s: tensor %zu ('%s'): bad name, shape or data",
                            path, i, t[i].name ? t[i].name : "(null)");
        }
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + numel * 4)));
        off += numel * 4;
    }
    *text_p = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    return *text_p ? PL_OK : pl_error(PL_ERR_NOMEM, "safetensors header");
}

static pl_status_t s_put_f32(FILE *f, const char *path, const float *v, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (fwrite(v, sizeof(float), n, f) != n)
        return pl_error(PL_ERR_IO, "%s: write: %s", path, strerror(errno));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        unsigned char b[4];
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            b[k] = (unsigned char)(u >> (8 * k));
        if (fwrite(b, 1, 4, f) != 4)
            return pl_error(PL_ERR_IO, "%s: write: %s", path, strerror(errno));
    }
#endif
    return PL_OK;
}

/* fill writes the file into path + ".tmp", renamed over path on success, removed otherwise. */
typedef pl_status_t (*s_fill_fn)(FILE *f, const char *path, const void *arg);

static pl_status_t s_atomic(const char *path, s_fill_fn fill, const void *arg)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return pl_error(PL_ERR_INVALID, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return pl_error(PL_ERR_IO, "%s: %s", tmp, strerror(errno));
    pl_status_t rc = fill(f, tmp, arg);
    if (fflush(f) != 0 && rc == PL_OK)
        rc = pl_error(PL_ERR_IO, "%s: write: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == PL_OK)
        rc = pl_error(PL_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (rc == PL_OK && rename(tmp, path) != 0)
        rc = pl_error(PL_ERR_IO, "%s: rename to %s: %s", tmp, path, strerror(errno));
    if (rc != PL_OK)
        remove(tmp);
    return rc;
}

typedef struct {
    const char *text;
    const pl_st_out_t *t;
    size_t n;
} s_shard_t;

static pl_status_t s_fill_shard(FILE *f, const char *path, const void *arg)
{
    const s_shard_t *s = arg;
    size_t tl = strlen(s->text);
    uint64_t hlen = (tl + 7) / 8 * 8; /* spaces pad the header so the data is 8-byte aligned */
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)(hlen >> (8 * i));
    if (fwrite(prefix, 1, 8, f) != 8 || fwrite(s->text, 1, tl, f) != tl)
        return pl_error(PL_ERR_IO, "%s: write: %s", path, strerror(errno));
    for (uint64_t i = tl; i < hlen; i++)
        if (fputc(' ', f) == EOF)
            return pl_error(PL_ERR_IO, "%s: write: %s", path, strerror(errno));
    for (size_t i = 0; i < s->n; i++) {
        size_t numel = 1;
        for (int d = 0; d < s->t[i].ndim; d++)
            numel *= (size_t)s->t[i].shape[d];
        pl_status_t rc = s_put_f32(f, path, s->t[i].data, numel);
        if (rc != PL_OK)
            return rc;
    }
    return PL_OK;
}

pl_status_t pl_st_write(const char *path, const pl_st_out_t *t, size_t n)
{
    if (n > PL_ST_MAX_TENSORS)
        return pl_error(PL_ERR_INVALID, "%s: %zu tensors (at most %u)", path, n,
                        PL_ST_MAX_TENSORS);
    char *text = NULL;
    pl_status_t rc = s_header(path, t, n, &text);
    if (rc != PL_OK)
        return rc;
    if (strlen(text) > PL_ST_MAX_HEADER) {
        free(text);
        return pl_error(PL_ERR_INVALID, "%s: header over %u bytes", path, PL_ST_MAX_HEADER);
    }
    s_shard_t s = {text, t, n};
    rc = s_atomic(path, s_fill_shard, &s);
    free(text);
    return rc;
}

static pl_status_t s_fill_json(FILE *f, const char *path, const void *arg)
{
    if (json_dumpf(arg, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 || fputc('\n', f) == EOF)
        return pl_error(PL_ERR_IO, "%s: write: %s", path, strerror(errno));
    return PL_OK;
}

pl_status_t pl_st_index_write(const char *dir, const char *const *names,
                              const char *const *shards, size_t n, uint64_t total_bytes)
{
    char path[4096];
    pl_status_t rc = pl_path_join(dir, "model.safetensors.index.json", path, sizeof(path));
    if (rc != PL_OK)
        return rc;
    json_t *map = json_object();
    for (size_t i = 0; map && i < n; i++)
        if (!names[i] || !shards[i] || json_object_get(map, names[i]) ||
            json_object_set_new(map, names[i], json_string(shards[i])) != 0) {
            json_decref(map);
            return pl_error(PL_ERR_INVALID, "%s: entry %zu ('%s') is missing or named twice",
                            path, i, names[i] ? names[i] : "(null)");
        }
    json_t *idx = map ? json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
                                  (json_int_t)total_bytes, "weight_map", map)
                      : NULL;
    if (!idx)
        return pl_error(PL_ERR_NOMEM, "%s", path);
    rc = s_atomic(path, s_fill_json, idx);
    json_decref(idx);
    return rc;
}
