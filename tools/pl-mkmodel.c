/* pl-mkmodel: write a deterministic random-weight decoder (Llama, Mistral, Qwen2, Qwen3) in the
 * Hugging Face layout (config.json, safetensors shards, index), for tests and benchmarks. */
#include "common/status.h"
#include "common/util.h"
#include "model/gguf_model.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "model/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_CHUNK 65536 /* elements generated and written at a time */

typedef enum { S_PROJ, S_EMBED, S_NORM, S_BIAS } s_kind_t;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    s_kind_t kind;
    uint64_t idx; /* position in the canonical order: keys the random stream */
    int shard;
} s_tensor_t;

typedef struct {
    const char *out;
    int layers, hidden, inter, heads, kv_heads, head_dim, vocab, max_pos, shards;
    pl_dtype_t dtype;
    pl_model_family_t family;
    bool gguf;        /* --format gguf: --out is a .gguf file */
    pl_wtype_t wtype; /* --type: the matrices' type in a GGUF file */
    uint64_t seed;
    bool tie, rope_llama3;
    int n_eos, eos[PL_MODEL_MAX_EOS];
    const char *tokenizer; /* --tokenizer DIR: its files are copied in, vocab and BOS/EOS follow */
    bool eos_given;
    int bos; /* -2: 1 (the default layout), -1: none */
} s_opts_t;

static int s_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int s_fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pl-mkmodel: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static bool s_parse_int(const char *s, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return false;
    *out = (int)v;
    return true;
}

static bool s_parse_eos(const char *s, s_opts_t *o)
{
    char buf[256], *save, *tok;
    if (strlen(s) >= sizeof(buf))
        return false;
    strcpy(buf, s);
    o->n_eos = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->n_eos == PL_MODEL_MAX_EOS || !s_parse_int(tok, 0, 1 << 22, &o->eos[o->n_eos]))
            return false;
        o->n_eos++;
    }
    return o->n_eos > 0;
}

static const char *s_torch_dtype(pl_dtype_t dt)
{
    return dt == PL_DT_F32 ? "float32" : dt == PL_DT_F16 ? "float16" : "bfloat16";
}

static json_t *s_config_json(const s_opts_t *o)
{
    json_t *c = json_object(), *eos;
    static const char *const archs[PL_FAMILY_COUNT] = {
        [PL_FAMILY_LLAMA] = "LlamaForCausalLM", [PL_FAMILY_MISTRAL] = "MistralForCausalLM",
        [PL_FAMILY_QWEN2] = "Qwen2ForCausalLM", [PL_FAMILY_QWEN3] = "Qwen3ForCausalLM"};
    json_object_set_new(c, "architectures", json_pack("[s]", archs[o->family]));
    json_object_set_new(c, "model_type", json_string(pl_model_family_name(o->family)));
    json_object_set_new(c, "torch_dtype", json_string(s_torch_dtype(o->dtype)));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    if (o->family != PL_FAMILY_QWEN2) /* Qwen2's q/k/v biases come with the family */
        json_object_set_new(c, "attention_bias", json_false());
    if (o->family == PL_FAMILY_QWEN2 || o->family == PL_FAMILY_QWEN3)
        json_object_set_new(c, "use_sliding_window", json_false());
    if (o->family == PL_FAMILY_MISTRAL)
        json_object_set_new(c, "sliding_window", json_null()); /* v0.2 and later */
    json_object_set_new(c, "mlp_bias", json_false());
    json_object_set_new(c, "hidden_size", json_integer(o->hidden));
    json_object_set_new(c, "intermediate_size", json_integer(o->inter));
    json_object_set_new(c, "num_hidden_layers", json_integer(o->layers));
    json_object_set_new(c, "num_attention_heads", json_integer(o->heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(o->kv_heads));
    json_object_set_new(c, "head_dim", json_integer(o->head_dim));
    json_object_set_new(c, "vocab_size", json_integer(o->vocab));
    json_object_set_new(c, "max_position_embeddings", json_integer(o->max_pos));
    json_object_set_new(c, "rms_norm_eps", json_real(1e-5));
    json_object_set_new(c, "rope_theta", json_real(o->rope_llama3 ? 500000.0 : 10000.0));
    if (o->rope_llama3)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:f, s:f, s:f, s:i, s:s}", "factor", 8.0,
                                      "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                                      "original_max_position_embeddings", 8192, "rope_type",
                                      "llama3"));
    else
        json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(o->tie));
    if (o->bos != -1)
        json_object_set_new(c, "bos_token_id",
                            json_integer(o->bos >= 0 ? o->bos : o->vocab > 1 ? 1 : 0));
    if (o->n_eos == 1) {
        eos = json_integer(o->eos[0]);
    } else {
        eos = json_array();
        for (int i = 0; i < o->n_eos; i++)
            json_array_append_new(eos, json_integer(o->eos[i]));
    }
    json_object_set_new(c, "eos_token_id", eos);
    return c;
}

static void s_add(s_tensor_t *t, size_t *n, const char *name, int ndim, int64_t d0, int64_t d1,
                  s_kind_t kind, int shard)
{
    s_tensor_t *e = &t[*n];
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->kind = kind;
    e->idx = *n;
    e->shard = shard;
    (*n)++;
}

/* The canonical tensor list; the order fixes each tensor's random stream. */
static s_tensor_t *s_tensor_list(const s_opts_t *o, size_t *n_p)
{
    int64_t h = o->hidden, q = (int64_t)o->heads * o->head_dim;
    int64_t kv = (int64_t)o->kv_heads * o->head_dim, f = o->inter;
    s_tensor_t *t = calloc((size_t)o->layers * 14 + 3, sizeof(*t));
    size_t n = 0;
    char name[96];

    if (!t)
        return NULL;
    s_add(t, &n, "model.embed_tokens.weight", 2, o->vocab, h, S_EMBED, 0);
    for (int l = 0; l < o->layers; l++) {
        int sh = (int)((int64_t)l * o->shards / o->layers);
        const struct {
            const char *suffix;
            int ndim;
            int64_t d0, d1;
            s_kind_t kind;
        } per[] = {{"input_layernorm", 1, h, 0, S_NORM},
                   {"self_attn.q_proj", 2, q, h, S_PROJ},
                   {"self_attn.k_proj", 2, kv, h, S_PROJ},
                   {"self_attn.v_proj", 2, kv, h, S_PROJ},
                   {"self_attn.o_proj", 2, h, q, S_PROJ},
                   {"post_attention_layernorm", 1, h, 0, S_NORM},
                   {"mlp.gate_proj", 2, f, h, S_PROJ},
                   {"mlp.up_proj", 2, f, h, S_PROJ},
                   {"mlp.down_proj", 2, h, f, S_PROJ}};
        for (size_t i = 0; i < PL_ARRAY_SIZE(per); i++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s.weight", l, per[i].suffix);
            s_add(t, &n, name, per[i].ndim, per[i].d0, per[i].d1, per[i].kind, sh);
        }
        /* after a layer's Llama tensors, so a Llama model's random streams never move */
        for (int i = 1; o->family == PL_FAMILY_QWEN2 && i <= 3; i++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s.bias", l, per[i].suffix);
            s_add(t, &n, name, 1, per[i].d0, 0, S_BIAS, sh);
        }
        for (int i = 0; o->family == PL_FAMILY_QWEN3 && i < 2; i++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s_norm.weight", l,
                     i ? "k" : "q");
            s_add(t, &n, name, 1, o->head_dim, 0, S_NORM, sh);
        }
    }
    s_add(t, &n, "model.norm.weight", 1, h, 0, S_NORM, o->shards - 1);
    if (!o->tie)
        s_add(t, &n, "lm_head.weight", 2, o->vocab, h, S_PROJ, o->shards - 1);
    *n_p = n;
    return t;
}

static int64_t s_numel(const s_tensor_t *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* The f32 values of tensor t from element `at` on; other dtypes store these values rounded.
 * Each tensor's stream is keyed by (seed, canonical index), so sharding never changes a value. */
static void s_values(const s_opts_t *o, const s_tensor_t *t, int64_t at, size_t k, float *out)
{
    uint64_t key = pl_rand_key(o->seed, t->idx, 0x6d6b6d6f64656cULL);
    float scale = t->kind == S_EMBED               ? 0.5f
                  : t->kind == S_NORM || t->kind == S_BIAS ? 0.1f
                                                           : 1.0f / sqrtf((float)t->shape[1]);
    float base = t->kind == S_NORM ? 1.0f : 0.0f;
    for (size_t i = 0; i < k; i++) {
        float u = 2.0f * pl_rand_uniform(key, (uint64_t)at + i) - 1.0f; /* [-1, 1) */
        out[i] = base + scale * u;
    }
}

static int s_write_data(FILE *f, const char *path, const s_opts_t *o, const s_tensor_t *t,
                        float *vals, uint16_t *halves)
{
    int64_t n = s_numel(t);
    for (int64_t at = 0; at < n; at += S_CHUNK) {
        size_t k = (size_t)PL_MIN((int64_t)S_CHUNK, n - at);
        const void *buf = vals;
        s_values(o, t, at, k, vals);
        if (o->dtype == PL_DT_F16)
            for (size_t i = 0; i < k; i++)
                halves[i] = pl_f32_to_f16(vals[i]);
        else if (o->dtype == PL_DT_BF16)
            for (size_t i = 0; i < k; i++)
                halves[i] = pl_f32_to_bf16(vals[i]);
        if (o->dtype != PL_DT_F32)
            buf = halves;
        if (fwrite(buf, pl_dtype_size(o->dtype), k, f) != k)
            return s_fail("%s: write: %s", path, strerror(errno));
    }
    return 0;
}

/* The GGUF file: the family's metadata, matrices in o->wtype (a llama's q/k rows in llama.cpp's
 * rope order), norms and biases in f32, as llama.cpp's converter writes them. Values are the
 * safetensors ones. */
/* GGUF's architecture name: Mistral files use llama's. */
static const char *s_gguf_arch(const s_opts_t *o)
{
    return o->family == PL_FAMILY_QWEN2 ? "qwen2" : o->family == PL_FAMILY_QWEN3 ? "qwen3"
                                                                                : "llama";
}

static pl_status_t s_gguf_meta(pl_gguf_writer_t *w, const s_opts_t *o)
{
    const char *arch = s_gguf_arch(o);
    char k[16][96];
    static const char *const suffix[] = {
        "context_length", "embedding_length", "block_count", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv", "attention.key_length",
        "attention.value_length", "rope.dimension_count", "vocab_size",
        "attention.layer_norm_rms_epsilon", "rope.freq_base"};
    const int v[] = {o->max_pos, o->hidden, o->layers, o->inter, o->heads, o->kv_heads,
                     o->head_dim, o->head_dim, o->head_dim, o->vocab};
    pl_status_t st;

    for (size_t i = 0; i < PL_ARRAY_SIZE(suffix); i++)
        snprintf(k[i], sizeof(k[i]), "%s.%s", arch, suffix[i]);
    if ((st = pl_gguf_writer_str(w, "general.architecture", arch)) ||
        (st = pl_gguf_writer_str(w, "general.name", "pl-mkmodel")))
        return st;
    for (size_t i = 0; i < PL_ARRAY_SIZE(v); i++)
        if ((st = pl_gguf_writer_u32(w, k[i], (uint32_t)v[i])))
            return st;
    if ((st = pl_gguf_writer_f32(w, k[10], 1e-5f)) ||
        (st = pl_gguf_writer_f32(w, k[11], 10000.0f)) ||
        (st = pl_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", o->vocab > 1 ? 1 : 0)) ||
        (st = pl_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)o->eos[0])))
        return st;
    return PL_OK;
}

static pl_wtype_t s_gguf_type(const s_opts_t *o, const s_tensor_t *t)
{
    return t->ndim == 2 ? o->wtype : PL_WT_F32;
}

/* Hugging Face row of GGUF row r: a llama-architecture q or k matrix is stored in llama.cpp's
 * rope order, other rows where they are. */
static int64_t s_hf_row(const s_opts_t *o, const s_tensor_t *t, int64_t r)
{
    bool qk = t->ndim == 2 && strcmp(s_gguf_arch(o), "llama") == 0 &&
              (strstr(t->name, "q_proj") || strstr(t->name, "k_proj"));
    return qk ? pl_gguf_llama_qk_row(r, o->head_dim) : r;
}

static int s_write_gguf(const s_opts_t *o, const s_tensor_t *t, size_t n, uint64_t *bytes_p)
{
    pl_gguf_writer_t *w = NULL;
    FILE *f = NULL;
    float *row = NULL;
    unsigned char *q = NULL;
    char gname[128];
    int64_t max_in = PL_MAX(o->hidden, o->inter);
    size_t row_bytes;
    pl_status_t st;
    int rc = 1;

    if ((st = pl_gguf_writer_new(&w)) || (st = s_gguf_meta(w, o)))
        goto out_err;
    for (size_t i = 0; i < n; i++) {
        int64_t ne[2] = {t[i].ndim == 1 ? t[i].shape[0] : t[i].shape[1], t[i].shape[0]};
        if (!pl_gguf_name_of(t[i].name, gname, sizeof(gname))) {
            st = pl_error(PL_ERR_INVALID, "no GGUF name for tensor '%s'", t[i].name);
            goto out_err;
        }
        if ((st = pl_gguf_writer_tensor(w, gname, s_gguf_type(o, &t[i]), t[i].ndim, ne)))
            goto out_err;
    }
    row = malloc((size_t)PL_MAX(max_in, o->vocab) * sizeof(float));
    q = malloc((size_t)PL_MAX(max_in, o->vocab) * sizeof(float));
    if (!row || !q || !(f = fopen(o->out, "wb"))) {
        s_fail("%s: %s", o->out, row && q ? strerror(errno) : "out of memory");
        goto out;
    }
    if ((st = pl_gguf_writer_header(w, f)))
        goto out_err;
    for (size_t i = 0; i < n; i++) {
        int64_t in = t[i].ndim == 1 ? t[i].shape[0] : t[i].shape[1];
        int64_t rows = t[i].ndim == 1 ? 1 : t[i].shape[0];
        pl_wtype_t dt = s_gguf_type(o, &t[i]);
        if ((st = pl_wtype_row_bytes(dt, in, &row_bytes)))
            goto out_err;
        for (int64_t r = 0; r < rows; r++) {
            s_values(o, &t[i], s_hf_row(o, &t[i], r) * in, (size_t)in, row);
            pl_wtype_from_f32(dt, row, (size_t)in, q);
            if ((st = pl_gguf_writer_data(w, f, q, row_bytes)))
                goto out_err;
        }
        *bytes_p += (uint64_t)rows * row_bytes;
    }
    rc = pl_gguf_writer_done(w) ? 0 : s_fail("%s: tensors incomplete", o->out);
    goto out;
out_err:
    s_fail("%s: %s", o->out, pl_error_msg());
out:
    if (f && fclose(f) != 0 && rc == 0)
        rc = s_fail("%s: close: %s", o->out, strerror(errno));
    free(row);
    free(q);
    pl_gguf_writer_destroy(&w);
    return rc;
}

static void s_shard_name(const s_opts_t *o, int shard, char *out, size_t len)
{
    if (o->shards == 1)
        snprintf(out, len, "model.safetensors");
    else
        snprintf(out, len, "model-%05d-of-%05d.safetensors", shard + 1, o->shards);
}

static int s_write_shard(const s_opts_t *o, const s_tensor_t *t, size_t n, int shard,
                         float *vals, uint16_t *halves, uint64_t *bytes_p)
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
        return s_fail("%s", pl_error_msg());
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    for (size_t i = 0; i < n; i++) {
        if (t[i].shard != shard)
            continue;
        uint64_t nb = (uint64_t)s_numel(&t[i]) * pl_dtype_size(o->dtype);
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
        return s_fail("out of memory");
    hlen = (strlen(text) + 7) / 8 * 8; /* pad with spaces so the data starts 8-byte aligned */
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)(hlen >> (8 * i));
    f = fopen(path, "wb");
    if (!f) {
        free(text);
        return s_fail("%s: %s", path, strerror(errno));
    }
    if (fwrite(prefix, 1, 8, f) != 8 || fputs(text, f) < 0) {
        s_fail("%s: write: %s", path, strerror(errno));
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
        rc = s_fail("%s: close: %s", path, strerror(errno));
    *bytes_p += off;
    return rc;
}

static int s_write_json(const char *dir, const char *name, json_t *j)
{
    char path[4096];
    if (pl_path_join(dir, name, path, sizeof(path)))
        return s_fail("%s", pl_error_msg());
    if (json_dump_file(j, path, JSON_INDENT(2)) != 0)
        return s_fail("%s: cannot write: %s", path, strerror(errno));
    return 0;
}

static int s_write_index(const s_opts_t *o, const s_tensor_t *t, size_t n, uint64_t total)
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
    rc = s_write_json(o->out, "model.safetensors.index.json", idx);
    json_decref(idx);
    return rc;
}

/* A reused directory may hold an index from an earlier sharded run; it would win over
 * model.safetensors when the model is opened. */
static int s_remove_stale_index(const char *dir)
{
    char path[4096];
    if (pl_path_join(dir, "model.safetensors.index.json", path, sizeof(path)))
        return s_fail("%s", pl_error_msg());
    if (unlink(path) != 0 && errno != ENOENT)
        return s_fail("%s: %s", path, strerror(errno));
    return 0;
}

/* --tokenizer: the tokenizer must load; it sizes the vocabulary and names BOS and EOS. */
static int s_tokenizer_opts(s_opts_t *o)
{
    pl_tokenizer_t *tok = NULL;
    const int *eos;
    int n_eos;

    if (pl_tokenizer_load(o->tokenizer, &tok))
        return s_fail("--tokenizer: %s", pl_error_msg());
    o->vocab = pl_tokenizer_vocab_size(tok);
    o->bos = pl_tokenizer_bos(tok);
    n_eos = pl_tokenizer_eos(tok, &eos);
    if (!o->eos_given && n_eos > 0) {
        o->n_eos = PL_MIN(n_eos, PL_MODEL_MAX_EOS);
        memcpy(o->eos, eos, (size_t)o->n_eos * sizeof(int));
    }
    pl_tokenizer_destroy(&tok);
    return 0;
}

/* Copy DIR/name into the model directory; a missing optional file is skipped. */
static int s_copy_file(const char *from_dir, const char *name, const char *to_dir, bool optional)
{
    char src[4096], dst[4096];
    char *buf = NULL;
    size_t len;
    FILE *f;
    pl_status_t st;

    if (pl_path_join(from_dir, name, src, sizeof(src)) ||
        pl_path_join(to_dir, name, dst, sizeof(dst)))
        return s_fail("%s", pl_error_msg());
    if ((st = pl_file_read(src, PL_TOKENIZER_MAX_FILE_BYTES, &buf, &len)))
        return optional && st == PL_ERR_NOT_FOUND ? 0 : s_fail("%s", pl_error_msg());
    if (!(f = fopen(dst, "wb")) || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        free(buf);
        return s_fail("%s: cannot write: %s", dst, strerror(errno));
    }
    free(buf);
    return 0;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: pl-mkmodel --out DIR [--layers 4] [--hidden 256] [--intermediate 688]\n"
               "       [--heads 8] [--kv-heads 4] [--head-dim N] [--vocab 512]\n"
               "       [--dtype f32|f16|bf16] [--family llama|mistral|qwen2|qwen3]\n"
               "       [--seed 1] [--shards 1] [--tie] [--rope-llama3]\n"
               "       [--max-pos 2048] [--eos 2[,ID...]] [--tokenizer DIR]\n"
               "       [--format safetensors|gguf] [--type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k]\n"
               "  --tokenizer DIR: copy DIR's tokenizer.json and tokenizer_config.json in; the\n"
               "       vocabulary size, BOS and EOS come from them\n"
               "  --format gguf writes one GGUF file at --out, its matrices in --type (f32)\n");
}

static int s_parse_args(int argc, char **argv, s_opts_t *o)
{
    static const struct option s_long[] = {
        {"out", required_argument, 0, 'o'},    {"layers", required_argument, 0, 'l'},
        {"hidden", required_argument, 0, 'H'}, {"intermediate", required_argument, 0, 'i'},
        {"heads", required_argument, 0, 'a'},  {"kv-heads", required_argument, 0, 'k'},
        {"head-dim", required_argument, 0, 'd'}, {"vocab", required_argument, 0, 'v'},
        {"dtype", required_argument, 0, 't'},  {"seed", required_argument, 0, 's'},
        {"shards", required_argument, 0, 'n'}, {"tie", no_argument, 0, 'T'},
        {"rope-llama3", no_argument, 0, 'r'},  {"max-pos", required_argument, 0, 'm'},
        {"eos", required_argument, 0, 'e'},    {"help", no_argument, 0, 'h'},
        {"family", required_argument, 0, 'f'},
        {"format", required_argument, 0, 'F'}, {"type", required_argument, 0, 'W'},
        {"tokenizer", required_argument, 0, 'z'}, {0, 0, 0, 0}};
    int c, li = 0, *target;
    char *end;

    opterr = 0; /* one line of our own instead of getopt's message plus usage */
    while ((c = getopt_long(argc, argv, "", s_long, &li)) != -1) {
        target = NULL;
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'l': target = &o->layers; break;
        case 'H': target = &o->hidden; break;
        case 'i': target = &o->inter; break;
        case 'a': target = &o->heads; break;
        case 'k': target = &o->kv_heads; break;
        case 'd': target = &o->head_dim; break;
        case 'v': target = &o->vocab; break;
        case 'n': target = &o->shards; break;
        case 'm': target = &o->max_pos; break;
        case 'T': o->tie = true; break;
        case 'r': o->rope_llama3 = true; break;
        case 'h': s_usage(stdout); exit(0);
        case 't':
            if (strcmp(optarg, "f32") == 0)
                o->dtype = PL_DT_F32;
            else if (strcmp(optarg, "f16") == 0)
                o->dtype = PL_DT_F16;
            else if (strcmp(optarg, "bf16") == 0)
                o->dtype = PL_DT_BF16;
            else
                return s_fail("--dtype: '%s' is not f32, f16 or bf16", optarg);
            break;
        case 'f': {
            int f = 0;
            while (f < PL_FAMILY_COUNT && strcmp(optarg, pl_model_family_name(f)) != 0)
                f++;
            if (f == PL_FAMILY_COUNT)
                return s_fail("--family: '%s' is not llama, mistral, qwen2 or qwen3", optarg);
            o->family = (pl_model_family_t)f;
            break;
        }
        case 'F':
            if (strcmp(optarg, "gguf") != 0 && strcmp(optarg, "safetensors") != 0)
                return s_fail("--format: '%s' is not safetensors or gguf", optarg);
            o->gguf = strcmp(optarg, "gguf") == 0;
            break;
        case 'W':
            if (pl_wtype_parse(optarg, &o->wtype))
                return s_fail("--type: %s", pl_error_msg());
            break;
        case 's':
            errno = 0;
            o->seed = strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end || optarg[0] == '-')
                return s_fail("--seed: '%s' is not a non-negative integer", optarg);
            break;
        case 'z': o->tokenizer = optarg; break;
        case 'e':
            o->eos_given = true;
            if (!s_parse_eos(optarg, o))
                return s_fail("--eos: '%s' is not a comma-separated list of up to %d ids",
                              optarg, PL_MODEL_MAX_EOS);
            break;
        default: return s_fail("bad option '%s' (see --help)", argv[optind - 1]);
        }
        if (target && !s_parse_int(optarg, 1, 1 << 24, target))
            return s_fail("--%s: '%s' is not an integer in [1, %d]", s_long[li].name, optarg,
                          1 << 24);
    }
    if (optind < argc)
        return s_fail("unexpected argument '%s'", argv[optind]);
    if (!o->out)
        return s_fail("--out DIR is required");
    if (o->head_dim == 0) {
        if (o->hidden % o->heads != 0)
            return s_fail("--hidden %d is not a multiple of --heads %d; give --head-dim",
                          o->hidden, o->heads);
        o->head_dim = o->hidden / o->heads;
    }
    if (o->shards > o->layers)
        return s_fail("--shards %d is more than --layers %d", o->shards, o->layers);
    if (o->gguf && o->tokenizer)
        return s_fail("--tokenizer writes tokenizer.json beside safetensors; a GGUF file's "
                      "vocabulary (tokenizer.ggml.*) is not written yet");
    if (o->tokenizer && s_tokenizer_opts(o))
        return 1;
    if (o->gguf && (o->shards != 1 || o->rope_llama3 || o->n_eos != 1))
        return s_fail("--format gguf writes one file with one eos id and no llama3 rope scaling "
                      "(--shards, --rope-llama3 and a list of --eos are for safetensors)");
    if (o->gguf) {
        int blk = pl_wtype_info(o->wtype)->block;
        if (o->hidden % blk || o->inter % blk || ((int64_t)o->heads * o->head_dim) % blk)
            return s_fail("--type %s: --hidden, --intermediate and heads * head_dim must be "
                          "multiples of %d", pl_wtype_name(o->wtype), blk);
    }
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos[i] >= o->vocab)
            return s_fail("--eos %d is not below --vocab %d", o->eos[i], o->vocab);
    return 0;
}

int main(int argc, char **argv)
{
    s_opts_t o = {.layers = 4, .hidden = 256, .inter = 688, .heads = 8, .kv_heads = 4,
                  .vocab = 512, .max_pos = 2048, .shards = 1, .dtype = PL_DT_F32, .seed = 1,
                  .n_eos = 1, .eos = {2}, .bos = -2};
    pl_model_config_t cfg;
    s_tensor_t *t;
    size_t n;
    uint64_t bytes = 0;
    int64_t params = 0;
    json_t *config;
    char *text;
    float *vals = NULL;
    uint16_t *halves = NULL;
    int rc = 1;

    if (s_parse_args(argc, argv, &o))
        return 1;
    config = s_config_json(&o);
    text = json_dumps(config, JSON_COMPACT);
    /* The reader's own validation is the authority on what a valid model is. */
    if (!text || pl_model_config_parse(text, strlen(text), &cfg) != PL_OK) {
        s_fail("invalid model shape: %s", pl_error_msg());
        goto err_config;
    }
    if (o.gguf) {
        t = s_tensor_list(&o, &n);
        if (!t) {
            s_fail("out of memory");
            goto err_config;
        }
        if (s_write_gguf(&o, t, n, &bytes) == 0) {
            printf("pl-mkmodel: %s: %d layers, hidden %d, %llu bytes GGUF %s\n", o.out, o.layers,
                   o.hidden, (unsigned long long)bytes, pl_wtype_name(o.wtype));
            rc = 0;
        }
        free(t);
        goto err_config;
    }
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        s_fail("%s: %s", o.out, strerror(errno));
        goto err_config;
    }
    if (s_write_json(o.out, "config.json", config))
        goto err_config;
    if (o.tokenizer && (s_copy_file(o.tokenizer, "tokenizer.json", o.out, false) ||
                        s_copy_file(o.tokenizer, "tokenizer_config.json", o.out, true)))
        goto err_config;
    t = s_tensor_list(&o, &n);
    vals = malloc(S_CHUNK * sizeof(*vals));
    halves = malloc(S_CHUNK * sizeof(*halves));
    if (!t || !vals || !halves) {
        s_fail("out of memory");
        goto err_buf;
    }
    for (int s = 0; s < o.shards; s++)
        if (s_write_shard(&o, t, n, s, vals, halves, &bytes))
            goto err_buf;
    if (o.shards > 1 && s_write_index(&o, t, n, bytes))
        goto err_buf;
    if (o.shards == 1 && s_remove_stale_index(o.out))
        goto err_buf;
    for (size_t i = 0; i < n; i++)
        params += s_numel(&t[i]);
    printf("pl-mkmodel: %s: %s, %d layers, hidden %d, %lld params, %llu bytes %s in %d shard(s)\n",
           o.out, pl_model_family_name(o.family), o.layers, o.hidden, (long long)params, (unsigned long long)bytes,
           pl_dtype_name(o.dtype), o.shards);
    rc = 0;
err_buf:
    free(vals);
    free(halves);
    free(t);
err_config:
    free(text);
    json_decref(config);
    return rc;
}
