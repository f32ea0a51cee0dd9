/* pl-mkmodel's Hugging Face layout: safetensors shards in the model's dtype, the shard index,
 * config.json and the tokenizer files copied in. */
#include "tools/mkmodel/mkmodel_int.h"
#include "common/util.h"
#include "model/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int s_write_data(FILE *f, const char *path, const pl_mkmodel_opts_t *o,
                        const pl_mkmodel_tensor_t *t, float *vals, uint16_t *halves)
{
    int64_t n = pl_mkmodel_tensor_numel(t);
    for (int64_t at = 0; at < n; at += PL_MKMODEL_CHUNK) {
        size_t k = (size_t)PL_MIN((int64_t)PL_MKMODEL_CHUNK, n - at);
        const void *buf = vals;
        pl_mkmodel_tensor_values(o, t, at, k, vals);
        if (o->dtype == PL_DT_F16)
            for (size_t i = 0; i < k; i++)
                halves[i] = pl_f32_to_f16(vals[i]);
        else if (o->dtype == PL_DT_BF16)
            for (size_t i = 0; i < k; i++)
                halves[i] = pl_f32_to_bf16(vals[i]);
        if (o->dtype != PL_DT_F32)
            buf = halves;
        if (fwrite(buf, pl_dtype_size(o->dtype), k, f) != k)
            return pl_mkmodel_fail("%s: write: %s", path, strerror(errno));
    }
    return 0;
}

static void s_shard_name(const pl_mkmodel_opts_t *o, int shard, char *out, size_t len)
{
    if (o->shards == 1)
        snprintf(out, len, "model.safetensors");
    else
        snprintf(out, len, "model-%05d-of-%05d.safetensors", shard + 1, o->shards);
}

int pl_mkmodel_shard_write(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, size_t n,
                           int shard, float *vals, uint16_t *halves, uint64_t *bytes_p)
{
    char name[64], path[4096];
    json_t *hdr = json_object();
    uint64_t off = 0, hlen;
    unsigned char prefix[8];
    char *text;
    FILE *f;
    int rc = 1;

    s_shard_name(o, shard, name, sizeof(name));
    if (pl_path_join(o->out, name, path, sizeof(path)))
        return pl_mkmodel_fail("%s", pl_error_msg());
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    for (size_t i = 0; i < n; i++) {
        if (t[i].shard != shard)
            continue;
        uint64_t nb = (uint64_t)pl_mkmodel_tensor_numel(&t[i]) * pl_dtype_size(o->dtype);
        json_t *shape = t[i].ndim == 1 ? json_pack("[I]", (json_int_t)t[i].shape[0])
                                       : json_pack("[I, I]", (json_int_t)t[i].shape[0],
                                                   (json_int_t)t[i].shape[1]);
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", pl_dtype_name(o->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + nb)));
        off += nb;
    }
    text = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    if (!text)
        return pl_mkmodel_fail("out of memory");
    hlen = (strlen(text) + 7) / 8 * 8; /* pad with spaces so the data starts 8-byte aligned */
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)(hlen >> (8 * i));
    f = fopen(path, "wb");
    if (!f) {
        free(text);
        return pl_mkmodel_fail("%s: %s", path, strerror(errno));
    }
    if (fwrite(prefix, 1, 8, f) != 8 || fputs(text, f) < 0) {
        pl_mkmodel_fail("%s: write: %s", path, strerror(errno));
        goto out;
    }
    for (uint64_t i = strlen(text); i < hlen; i++)
        fputc(' ', f);
    for (size_t i = 0; i < n; i++)
        if (t[i].shard == shard && s_write_data(f, path, o, &t[i], vals, halves))
            goto out;
    rc = 0;
out:
    free(text);
    if (fclose(f) != 0 && rc == 0)
        rc = pl_mkmodel_fail("%s: close: %s", path, strerror(errno));
    *bytes_p += off;
    return rc;
}

int pl_mkmodel_json_write(const char *dir, const char *name, json_t *j)
{
    char path[4096];
    if (pl_path_join(dir, name, path, sizeof(path)))
        return pl_mkmodel_fail("%s", pl_error_msg());
    if (json_dump_file(j, path, JSON_INDENT(2)) != 0)
        return pl_mkmodel_fail("%s: cannot write: %s", path, strerror(errno));
    return 0;
}

int pl_mkmodel_index_write(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, size_t n,
                           uint64_t total)
{
    json_t *map = json_object(), *idx;
    char name[64];
    int rc;
    for (size_t i = 0; i < n; i++) {
        s_shard_name(o, t[i].shard, name, sizeof(name));
        json_object_set_new(map, t[i].name, json_string(name));
    }
    idx = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map",
                    map);
    rc = pl_mkmodel_json_write(o->out, "model.safetensors.index.json", idx);
    json_decref(idx);
    return rc;
}

/* A reused directory may hold an index from an earlier sharded run; it would win over
 * model.safetensors when the model is opened. */
int pl_mkmodel_stale_index_remove(const char *dir)
{
    char path[4096];
    if (pl_path_join(dir, "model.safetensors.index.json", path, sizeof(path)))
        return pl_mkmodel_fail("%s", pl_error_msg());
    if (unlink(path) != 0 && errno != ENOENT)
        return pl_mkmodel_fail("%s: %s", path, strerror(errno));
    return 0;
}

/* Copy DIR/name into the model directory; a missing optional file is skipped. */
int pl_mkmodel_file_copy(const char *from_dir, const char *name, const char *to_dir, bool optional)
{
    char src[4096], dst[4096];
    char *buf = NULL;
    size_t len;
    FILE *f;
    pl_status_t st;

    if (pl_path_join(from_dir, name, src, sizeof(src)) ||
        pl_path_join(to_dir, name, dst, sizeof(dst)))
        return pl_mkmodel_fail("%s", pl_error_msg());
    if ((st = pl_file_read(src, PL_TOKENIZER_MAX_FILE_BYTES, &buf, &len)))
        return optional && st == PL_ERR_NOT_FOUND ? 0 : pl_mkmodel_fail("%s", pl_error_msg());
    if (!(f = fopen(dst, "wb")) || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        free(buf);
        return pl_mkmodel_fail("%s: cannot write: %s", dst, strerror(errno));
    }
    free(buf);
    return 0;
}
