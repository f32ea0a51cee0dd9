/* Tests of model directories: a tiny Llama written by hand (single file and sharded, three
 * dtypes, every missing or misshapen tensor); pl-mkmodel's output is test_mkmodel.c's. */
#include "common/status.h"
#include "model/model.h"

#define SCRATCH_TEMPLATE "/tmp/pl_mo_XXXXXX"
#include "scratch_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_T 64

typedef struct {
    char name[96];
    int ndim;
    int64_t d[2];
} s_t;

typedef struct {
    const char *dtype; /* "F32", "F16", "BF16" */
    int shards;
    bool tie, lm_head, no_index;
    int pad;                /* extra header spaces; odd values misalign the data */
    const char *skip;       /* tensor left out */
    const char *misshape;   /* tensor written with its first dimension + 1 */
    const char *dup;        /* tensor written into every shard */
} s_opts_t;

/* Tiny config: hidden 4, intermediate 6, 2 layers, 2 heads of 2, 1 KV head, vocab 5. */
static const char s_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 4, \"intermediate_size\": 6,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 2, \"vocab_size\": 5, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": %s,"
    " \"eos_token_id\": [3, 4]}";

static void s_write_text(const char *name, const char *text)
{
    FILE *f = fopen(s_path(name), "w");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static size_t s_list(bool lm_head, s_t *t)
{
    static const char *const sfx[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                      "self_attn.v_proj", "self_attn.o_proj",
                                      "post_attention_layernorm", "mlp.gate_proj",
                                      "mlp.up_proj", "mlp.down_proj"};
    static const int64_t dims[][3] = {{1, 4, 0}, {2, 4, 4}, {2, 2, 4}, {2, 2, 4}, {2, 4, 4},
                                      {1, 4, 0}, {2, 6, 4}, {2, 6, 4}, {2, 4, 6}};
    size_t n = 0;
    t[n++] = (s_t){"model.embed_tokens.weight", 2, {5, 4}};
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < 9; i++) {
            snprintf(t[n].name, sizeof(t[n].name), "model.layers.%d.%s.weight", l, sfx[i]);
            t[n].ndim = (int)dims[i][0];
            t[n].d[0] = dims[i][1];
            t[n].d[1] = dims[i][2];
            n++;
        }
    }
    t[n++] = (s_t){"model.norm.weight", 1, {4, 0}};
    if (lm_head)
        t[n++] = (s_t){"lm_head.weight", 2, {5, 4}};
    return n;
}

/* Value i of tensor t: a multiple of 1/16 in [-1, 1], exact in every dtype. */
static float s_val(size_t t, int64_t i)
{
    return (float)((int64_t)(t * 7 + (size_t)i * 3) % 33 - 16) / 16.0f;
}

/* Encode an exactly representable value as f16 / bf16 bits, independently of the library. */
static uint16_t s_enc(const char *dtype, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if (strcmp(dtype, "BF16") == 0)
        return (uint16_t)(u >> 16);
    if (v == 0.0f)
        return 0;
    int e;
    float m = frexpf(fabsf(v), &e); /* |v| = m * 2^e, m in [0.5, 1) */
    uint16_t mant = (uint16_t)((m * 2.0f - 1.0f) * 1024.0f);
    return (uint16_t)((v < 0 ? 0x8000 : 0) | (e - 1 + 15) << 10 | mant);
}

static int s_shard_of(const s_opts_t *o, const s_t *t, size_t n, size_t i)
{
    int l;
    if (sscanf(t[i].name, "model.layers.%d.", &l) == 1)
        return l * o->shards / 2;
    return i == 0 ? 0 : o->shards - 1;
}

static void s_shard_name(const s_opts_t *o, int k, char *out, size_t len)
{
    if (o->shards == 1)
        snprintf(out, len, "model.safetensors");
    else
        snprintf(out, len, "part-%d.safetensors", k);
}

static void s_write_model(const s_opts_t *o)
{
    s_t t[S_MAX_T];
    size_t n = s_list(o->lm_head, t);
    char cfg[1024], name[64], index[16384];
    size_t il = (size_t)snprintf(index, sizeof(index), "{\"weight_map\": {");

    snprintf(cfg, sizeof(cfg), s_config, o->tie ? "true" : "false");
    s_write_text("config.json", cfg);
    for (int k = 0; k < o->shards; k++) {
        char hdr[16384];
        static unsigned char data[65536];
        size_t hl = (size_t)snprintf(hdr, sizeof(hdr), "{"), dl = 0;
        size_t es = strcmp(o->dtype, "F32") == 0 ? 4 : 2;
        for (size_t i = 0; i < n; i++) {
            bool dup = o->dup && strcmp(t[i].name, o->dup) == 0;
            if ((s_shard_of(o, t, n, i) != k && !dup) || (o->skip && !strcmp(t[i].name, o->skip)))
                continue;
            int64_t d0 = t[i].d[0] + (o->misshape && !strcmp(t[i].name, o->misshape));
            int64_t numel = t[i].ndim == 1 ? d0 : d0 * t[i].d[1];
            char shape[64];
            if (t[i].ndim == 1)
                snprintf(shape, sizeof(shape), "[%lld]", (long long)d0);
            else
                snprintf(shape, sizeof(shape), "[%lld,%lld]", (long long)d0,
                         (long long)t[i].d[1]);
            hl += (size_t)snprintf(hdr + hl, sizeof(hdr) - hl,
                                   "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,"
                                   "\"data_offsets\":[%zu,%zu]}",
                                   hl > 1 ? "," : "", t[i].name, o->dtype, shape, dl,
                                   dl + (size_t)numel * es);
            for (int64_t j = 0; j < numel; j++, dl += es) {
                float v = s_val(i, j);
                uint16_t h = s_enc(o->dtype, v);
                memcpy(data + dl, es == 4 ? (void *)&v : (void *)&h, es);
            }
            if (!dup || s_shard_of(o, t, n, i) == k)
                il += (size_t)snprintf(index + il, sizeof(index) - il, "%s\"%s\": \"part-%d"
                                       ".safetensors\"", il > 16 ? ", " : "", t[i].name, k);
        }
        hl += (size_t)snprintf(hdr + hl, sizeof(hdr) - hl, "}");
        hl += (size_t)snprintf(hdr + hl, sizeof(hdr) - hl, "%*s", (int)((8 - hl % 8) % 8) + o->pad,
                               ""); /* 8-byte aligned data unless pad says otherwise */
        s_shard_name(o, k, name, sizeof(name));
        FILE *f = fopen(s_path(name), "wb");
        cr_assert_not_null(f);
        for (int b = 0; b < 8; b++)
            fputc((int)((uint64_t)hl >> (8 * b)) & 0xff, f);
        cr_assert_eq(fwrite(hdr, 1, hl, f), hl);
        cr_assert_eq(fwrite(data, 1, dl, f), dl);
        cr_assert_eq(fclose(f), 0);
    }
    snprintf(index + il, sizeof(index) - il, "}}");
    if (o->shards > 1 && !o->no_index)
        s_write_text("model.safetensors.index.json", index);
}

static void s_open_fails(pl_status_t want, const char *part)
{
    pl_model_t *m = NULL;
    pl_status_t st = pl_model_open(s_dir, &m);
    cr_assert_eq(st, want, "status %d, want %d: %s", st, want, pl_error_msg());
    cr_assert_null(m);
    cr_assert_not_null(strstr(pl_error_msg(), part), "message '%s' lacks '%s'", pl_error_msg(),
                       part);
}

/* Open the hand-written model and compare every tensor with s_val. */
static void s_check_values(const s_opts_t *o, bool want_owned)
{
    pl_model_t *m = NULL;
    s_t t[S_MAX_T];
    size_t n = s_list(o->lm_head, t);
    uint64_t bytes = 0;

    cr_assert_eq(pl_model_open(s_dir, &m), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(pl_model_dir(m), s_dir);
    const pl_model_config_t *c = pl_model_config(m);
    cr_assert_eq(c->n_layers, 2);
    cr_assert_eq(c->n_eos, 2);
    for (size_t i = 0; i < n; i++) {
        float *data;
        bool owned;
        pl_tensor_view_t v;
        cr_assert_eq(pl_model_tensor_f32(m, t[i].name, t[i].ndim, t[i].d, &data, &owned), PL_OK,
                     "%s", pl_error_msg());
        cr_assert_eq(owned, want_owned, "%s", t[i].name);
        cr_assert_eq(pl_model_tensor(m, t[i].name, &v), PL_OK);
        for (int64_t j = 0; j < v.numel; j++)
            cr_assert_eq(data[j], s_val(i, j), "%s[%lld]: %g != %g", t[i].name, (long long)j,
                         data[j], s_val(i, j));
        bytes += v.nbytes;
        if (owned)
            free(data);
    }
    cr_assert_eq(pl_model_weight_bytes(m), bytes);
    pl_model_destroy(&m);
    cr_assert_null(m);
    pl_model_destroy(&m);
}

TestSuite(model_open, .init = s_mkdir, .fini = s_rmdir);

Test(model_open, tiny_each_dtype)
{
    static const char *const dts[] = {"F32", "F16", "BF16"};
    for (int i = 0; i < 3; i++) {
        s_opts_t o = {.dtype = dts[i], .shards = 1, .lm_head = true};
        s_write_model(&o);
        s_check_values(&o, i != 0);
    }
}

Test(model_open, misaligned_f32_is_copied)
{
    s_opts_t o = {.dtype = "F32", .shards = 1, .lm_head = true, .pad = 1};
    s_write_model(&o);
    s_check_values(&o, true);
}

Test(model_open, sharded)
{
    s_opts_t o = {.dtype = "BF16", .shards = 3, .lm_head = true};
    s_write_model(&o);
    s_check_values(&o, true);
}

Test(model_open, tensor_lookup_errors)
{
    s_opts_t o = {.dtype = "F32", .shards = 1, .lm_head = true};
    pl_model_t *m = NULL;
    pl_tensor_view_t v;
    float *data = NULL;
    bool owned;
    int64_t wrong[2] = {4, 5};

    s_write_model(&o);
    cr_assert_eq(pl_model_open(s_dir, &m), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_model_tensor(m, "model.layers.2.mlp.up_proj.weight", &v), PL_ERR_NOT_FOUND);
    cr_assert_not_null(strstr(pl_error_msg(), "model.layers.2.mlp.up_proj.weight"));
    cr_assert_eq(pl_model_tensor_shaped(m, "lm_head.weight", 2, wrong, &v), PL_ERR_INVALID);
    cr_assert_not_null(strstr(pl_error_msg(), "[5, 4], expected [4, 5]"), "%s", pl_error_msg());
    cr_assert_eq(pl_model_tensor_f32(m, "model.norm.weight", 2, wrong, &data, &owned),
                 PL_ERR_INVALID);
    cr_assert_null(data);
    cr_assert_eq(pl_model_tensor_shaped(m, "model.norm.weight", 1, wrong, &v), PL_OK);
    cr_assert_eq(v.ndim, 1);
    cr_assert_eq(v.numel, 4);
    cr_assert_eq(v.nbytes, 16);
    cr_assert_eq(v.dtype, PL_DT_F32);
    pl_model_destroy(&m);
}

Test(model_open, missing_and_misshapen_tensors)
{
    s_opts_t o = {.dtype = "F32", .shards = 1, .lm_head = true,
                  .skip = "model.layers.1.mlp.up_proj.weight"};
    s_write_model(&o);
    s_open_fails(PL_ERR_INVALID, "'model.layers.1.mlp.up_proj.weight' is missing");

    o.skip = NULL;
    o.misshape = "model.layers.0.self_attn.k_proj.weight";
    s_write_model(&o);
    s_open_fails(PL_ERR_INVALID, "'model.layers.0.self_attn.k_proj.weight' has shape [3, 4], "
                                 "expected [2, 4]");

    o.misshape = "model.embed_tokens.weight";
    s_write_model(&o);
    s_open_fails(PL_ERR_INVALID, "model.embed_tokens.weight");
}

Test(model_open, tied_embeddings)
{
    s_opts_t o = {.dtype = "F16", .shards = 1, .tie = true};
    s_write_model(&o);
    s_check_values(&o, true);
    o.tie = false;
    s_write_model(&o);
    s_open_fails(PL_ERR_INVALID, "'lm_head.weight' is missing");
}

Test(model_open, missing_files)
{
    s_open_fails(PL_ERR_NOT_FOUND, "config.json");
    s_opts_t o = {.dtype = "F32", .shards = 1, .lm_head = true};
    s_write_model(&o);
    unlink(s_path("model.safetensors"));
    s_open_fails(PL_ERR_NOT_FOUND, "model.safetensors");
    s_write_text("config.json", "{\"model_type\": \"gpt2\", \"n_embd\": 768}");
    s_open_fails(PL_ERR_UNSUPPORTED, "model family 'gpt2' (model_type) is not supported");
}

Test(model_open, index_errors)
{
    s_opts_t o = {.dtype = "F32", .shards = 2, .lm_head = true};
    s_write_model(&o);
    unlink(s_path("part-1.safetensors"));
    s_open_fails(PL_ERR_NOT_FOUND, "part-1.safetensors");

    s_write_model(&o);
    s_write_text("model.safetensors.index.json",
                 "{\"weight_map\": {\"model.norm.weight\": \"../part-0.safetensors\"}}");
    s_open_fails(PL_ERR_INVALID, "../part-0.safetensors");
    s_write_text("model.safetensors.index.json",
                 "{\"weight_map\": {\"model.norm.weight\": \"sub/part-0.safetensors\"}}");
    s_open_fails(PL_ERR_INVALID, "not a plain file name");
    s_write_text("model.safetensors.index.json", "{\"weight_map\": {}}");
    s_open_fails(PL_ERR_INVALID, "empty");
    s_write_text("model.safetensors.index.json", "{\"weight_map\": [1]}");
    s_open_fails(PL_ERR_INVALID, "weight_map");
    s_write_text("model.safetensors.index.json", "{\"weight_map\": {\"x\": 5}}");
    s_open_fails(PL_ERR_INVALID, "weight_map");
    s_write_text("model.safetensors.index.json", "{\"weight_map\": ");
    s_open_fails(PL_ERR_INVALID, "model.safetensors.index.json");
    /* the index names a tensor in a shard that does not hold it */
    s_write_text("model.safetensors.index.json",
                 "{\"weight_map\": {\"model.norm.weight\": \"part-0.safetensors\", "
                 "\"model.embed_tokens.weight\": \"part-1.safetensors\"}}");
    s_open_fails(PL_ERR_INVALID, "'model.norm.weight' is listed in part-0.safetensors");
}

Test(model_open, duplicate_across_shards)
{
    s_opts_t o = {.dtype = "F32", .shards = 2, .lm_head = true, .dup = "model.norm.weight"};
    s_write_model(&o);
    s_open_fails(PL_ERR_INVALID, "'model.norm.weight' appears in both");
}

static void *s_thread_get(void *arg)
{
    float *data = NULL;
    bool owned;
    int64_t shape[2] = {5, 4};
    if (pl_model_tensor_f32(arg, "lm_head.weight", 2, shape, &data, &owned) != PL_OK || owned)
        return NULL;
    return data;
}

Test(model_open, concurrent_first_access)
{
    s_opts_t o = {.dtype = "F32", .shards = 1, .lm_head = true};
    pl_model_t *m = NULL;
    pthread_t th[4];
    void *got[4];
    s_write_model(&o);
    cr_assert_eq(pl_model_open(s_dir, &m), PL_OK, "%s", pl_error_msg());
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, s_thread_get, m), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], &got[i]);
        cr_assert_not_null(got[i]);
        cr_assert_eq(got[i], got[0], "every thread sees the one mapping");
    }
    pl_model_destroy(&m);
}
