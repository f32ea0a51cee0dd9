/* Tests of the safetensors writer: a shard read back by our reader and by an independent one
 * (tests/st_check.py: python3's json and struct), the index's JSON, and refused inputs leaving
 * no file behind. */
#include "model/safetensors.h"
#include "model/safetensors_write.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static void s_tmpdir(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/pl_stw_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
}

static float *s_vals(int i, size_t n)
{
    float *v = malloc(n * sizeof(float));
    for (size_t j = 0; j < n; j++)
        v[j] = (float)i + 0.25f * (float)j;
    return v;
}

Test(safetensors_write, shard_reads_back_in_both_readers)
{
    s_tmpdir();
    char path[128];
    snprintf(path, sizeof(path), "%s/model-00001-of-00002.safetensors", g_dir);
    float *a = s_vals(0, 6), *b = s_vals(1, 5), *c = s_vals(2, 24);
    pl_st_out_t t[3] = {{"model.embed_tokens.weight", 2, {3, 2}, a},
                        {"model.norm.weight", 1, {5}, b},
                        {"model.layers.0.self_attn.q_proj.weight", 3, {2, 3, 4}, c}};
    cr_assert_eq(pl_st_write(path, t, 3), PL_OK, "%s", pl_error_msg());
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    cr_assert_neq(access(tmp, F_OK), 0, "no temporary file left");

    pl_st_file_t *f = NULL;
    cr_assert_eq(pl_st_open(path, &f), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(f->hdr.n_entries, 3);
    const unsigned char *data;
    cr_assert_eq(pl_st_data(f, &data), PL_OK);
    for (size_t i = 0; i < 3; i++) {
        const pl_st_entry_t *e = NULL;
        for (size_t k = 0; k < 3; k++)
            if (!strcmp(f->hdr.entries[k].name, t[i].name))
                e = &f->hdr.entries[k];
        cr_assert_not_null(e, "%s", t[i].name);
        cr_assert_eq(e->dtype, PL_DT_F32);
        cr_assert_eq(e->ndim, t[i].ndim);
        cr_assert_eq(memcmp(data + e->begin, t[i].data, (size_t)e->numel * 4), 0);
    }
    pl_st_close(&f);

    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "python3 %s/tests/st_check.py %s '[[\"model.embed_tokens.weight\",[3,2]],"
             "[\"model.norm.weight\",[5]],"
             "[\"model.layers.0.self_attn.q_proj.weight\",[2,3,4]]]'",
             PL_SOURCE_DIR, path);
    cr_assert_eq(system(cmd), 0, "the independent reader refuses %s", path);
    free(a), free(b), free(c);
}

Test(safetensors_write, index_names_each_tensors_shard)
{
    s_tmpdir();
    const char *names[3] = {"a.weight", "b.weight", "c.weight"};
    const char *shards[3] = {"model-00001-of-00002.safetensors", "model-00001-of-00002.safetensors",
                             "model-00002-of-00002.safetensors"};
    cr_assert_eq(pl_st_index_write(g_dir, names, shards, 3, 1234), PL_OK, "%s", pl_error_msg());
    char path[128];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", g_dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "metadata"), "total_size")),
                 1234);
    json_t *map = json_object_get(j, "weight_map");
    cr_assert_eq(json_object_size(map), 3);
    for (int i = 0; i < 3; i++)
        cr_assert_str_eq(json_string_value(json_object_get(map, names[i])), shards[i]);
    json_decref(j);
    const char *dup[2] = {"a.weight", "a.weight"};
    cr_assert_eq(pl_st_index_write(g_dir, dup, shards, 2, 0), PL_ERR_INVALID);
}

Test(safetensors_write, refuses_bad_tensors_and_leaves_no_file)
{
    s_tmpdir();
    char path[128];
    snprintf(path, sizeof(path), "%s/x.safetensors", g_dir);
    float v[4] = {0};
    pl_st_out_t dup[2] = {{"w", 1, {4}, v}, {"w", 1, {4}, v}};
    cr_assert_eq(pl_st_write(path, dup, 2), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "twice"), "%s", pl_error_msg());
    pl_st_out_t zero = {"w", 2, {4, 0}, v}, nodims = {"w", 0, {0}, v}, noname = {"", 1, {4}, v};
    pl_st_out_t meta = {"__metadata__", 1, {4}, v}, nodata = {"w", 1, {4}, NULL};
    cr_assert_eq(pl_st_write(path, &zero, 1), PL_ERR_INVALID);
    cr_assert_eq(pl_st_write(path, &nodims, 1), PL_ERR_INVALID);
    cr_assert_eq(pl_st_write(path, &noname, 1), PL_ERR_INVALID);
    cr_assert_eq(pl_st_write(path, &meta, 1), PL_ERR_INVALID);
    cr_assert_eq(pl_st_write(path, &nodata, 1), PL_ERR_INVALID);
    cr_assert_neq(access(path, F_OK), 0);
    cr_assert_eq(pl_st_write("/nonexistent_dir_pl/x.safetensors", dup, 1), PL_ERR_IO);
    cr_assert(strstr(pl_error_msg(), "nonexistent_dir_pl"), "%s", pl_error_msg());
    /* zero tensors is a valid, empty shard */
    cr_assert_eq(pl_st_write(path, NULL, 0), PL_OK, "%s", pl_error_msg());
    pl_st_file_t *f = NULL;
    cr_assert_eq(pl_st_open(path, &f), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(f->hdr.n_entries, 0);
    pl_st_close(&f);
}
