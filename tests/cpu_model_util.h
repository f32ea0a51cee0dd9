/* The small models the CPU executor suites run: Llama, Mistral, Qwen2 (q/k/v biases) and Qwen3
 * (q/k norms) shapes with f32, f16 or bf16 weights, written as safetensors + config.json. */
#ifndef PL_TESTS_CPU_MODEL_UTIL_H
#define PL_TESTS_CPU_MODEL_UTIL_H

#include "backends/backend.h"

#include "common/util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a small model: shape, weights (kept for the reference), and its files ---- */

typedef enum { F_LLAMA, F_MISTRAL, F_QWEN2, F_QWEN3 } family_t;

typedef struct {
    int hidden, inter, n_layers, n_heads, n_kv, head_dim, vocab;
    bool llama3, tied, bf16, f16;
    family_t family;
    int window; /* mistral's sliding_window; 0: null */
} shape_t;

typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd;
    float *bq, *bk, *bv, *qn, *kn; /* NULL unless the family has them */
} ref_layer_t;

typedef struct {
    shape_t s;
    float *embed, *norm, *head;
    ref_layer_t *layers;
    char dir[64];
    pl_model_t *model;
} tmodel_t;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    float *data;
} tensor_t;

static uint64_t g_rng;

static inline float rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static shape_t g_shape; /* the model being made: its dtype */

static inline float *rnd_tensor(size_t n, float scale, float offset, bool bf16)
{
    float *p = malloc(n * sizeof(float));
    cr_assert(p);
    for (size_t i = 0; i < n; i++) {
        p[i] = offset + scale * rnd();
        if (bf16) /* the reference sees exactly what the file holds */
            p[i] = pl_bf16_to_f32(pl_f32_to_bf16(p[i]));
        else if (g_shape.f16)
            p[i] = pl_f16_to_f32(pl_f32_to_f16(p[i]));
    }
    return p;
}

static inline void write_safetensors(const char *path, tensor_t *t, int n, bool bf16)
{
    char *hdr = malloc(65536);
    bool f16 = g_shape.f16;
    size_t len = 0, off = 0, esz = bf16 || f16 ? 2 : 4;
    cr_assert(hdr);
    len += (size_t)sprintf(hdr + len, "{");
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
        len +=
            (size_t)sprintf(hdr + len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", i ? "," : "",
                            t[i].name, bf16 ? "BF16" : f16 ? "F16" : "F32",
                            (long long)t[i].shape[0]);
        if (t[i].ndim == 2)
            len += (size_t)sprintf(hdr + len, ",%lld", (long long)t[i].shape[1]);
        len += (size_t)sprintf(hdr + len, "],\"data_offsets\":[%zu,%zu]}", off, off + numel * esz);
        off += numel * esz;
    }
    len += (size_t)sprintf(hdr + len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
        for (size_t j = 0; j < numel; j++) {
            if (bf16 || f16) {
                uint16_t b = bf16 ? pl_f32_to_bf16(t[i].data[j]) : pl_f32_to_f16(t[i].data[j]);
                fwrite(&b, 2, 1, f);
            } else {
                fwrite(&t[i].data[j], 4, 1, f);
            }
        }
    }
    fclose(f);
    free(hdr);
}

static inline void add_tensor(tensor_t *t, int *n, const char *name, float *data, int64_t d0, int64_t d1)
{
    snprintf(t[*n].name, sizeof(t[*n].name), "%s", name);
    t[*n].ndim = d1 ? 2 : 1;
    t[*n].shape[0] = d0;
    t[*n].shape[1] = d1;
    t[*n].data = data;
    (*n)++;
}

static inline void tmodel_make(tmodel_t *m, shape_t s, uint64_t seed)
{
    int H = s.hidden, Q = s.n_heads * s.head_dim, KV = s.n_kv * s.head_dim, F = s.inter;
    tensor_t *t = calloc((size_t)(14 * s.n_layers + 3), sizeof(tensor_t));
    int n = 0;
    char name[96], path[128];

    memset(m, 0, sizeof(*m));
    m->s = s;
    g_shape = s;
    g_rng = seed;
    snprintf(m->dir, sizeof(m->dir), "/tmp/pl_cpu_layer_XXXXXX");
    cr_assert(mkdtemp(m->dir));
    m->embed = rnd_tensor((size_t)s.vocab * H, 1.0f, 0.0f, s.bf16);
    m->norm = rnd_tensor((size_t)H, 0.2f, 1.0f, s.bf16);
    m->head = s.tied ? m->embed : rnd_tensor((size_t)s.vocab * H, 1.0f / sqrtf(H), 0.0f, s.bf16);
    add_tensor(t, &n, "model.embed_tokens.weight", m->embed, s.vocab, H);
    add_tensor(t, &n, "model.norm.weight", m->norm, H, 0);
    if (!s.tied)
        add_tensor(t, &n, "lm_head.weight", m->head, s.vocab, H);
    m->layers = calloc((size_t)s.n_layers, sizeof(ref_layer_t));
    for (int l = 0; l < s.n_layers; l++) {
        ref_layer_t *L = &m->layers[l];
        L->attn_norm = rnd_tensor((size_t)H, 0.2f, 1.0f, s.bf16);
        L->wq = rnd_tensor((size_t)Q * H, 2.0f / sqrtf(H), 0.0f, s.bf16);
        L->wk = rnd_tensor((size_t)KV * H, 2.0f / sqrtf(H), 0.0f, s.bf16);
        L->wv = rnd_tensor((size_t)KV * H, 1.0f / sqrtf(H), 0.0f, s.bf16);
        L->wo = rnd_tensor((size_t)H * Q, 1.0f / sqrtf(Q), 0.0f, s.bf16);
        L->ffn_norm = rnd_tensor((size_t)H, 0.2f, 1.0f, s.bf16);
        L->wg = rnd_tensor((size_t)F * H, 1.5f / sqrtf(H), 0.0f, s.bf16);
        L->wu = rnd_tensor((size_t)F * H, 1.5f / sqrtf(H), 0.0f, s.bf16);
        L->wd = rnd_tensor((size_t)H * F, 1.0f / sqrtf(F), 0.0f, s.bf16);
#define S_ADD(field, suffix, d0, d1)                                                               \
    snprintf(name, sizeof(name), "model.layers.%d.%s.weight", l, suffix);                          \
    add_tensor(t, &n, name, L->field, d0, d1)
        S_ADD(attn_norm, "input_layernorm", H, 0);
        S_ADD(wq, "self_attn.q_proj", Q, H);
        S_ADD(wk, "self_attn.k_proj", KV, H);
        S_ADD(wv, "self_attn.v_proj", KV, H);
        S_ADD(wo, "self_attn.o_proj", H, Q);
        S_ADD(ffn_norm, "post_attention_layernorm", H, 0);
        S_ADD(wg, "mlp.gate_proj", F, H);
        S_ADD(wu, "mlp.up_proj", F, H);
        S_ADD(wd, "mlp.down_proj", H, F);
        if (s.family == F_QWEN2) { /* biases big enough to matter */
            L->bq = rnd_tensor((size_t)Q, 0.5f, 0.0f, s.bf16);
            L->bk = rnd_tensor((size_t)KV, 0.5f, 0.0f, s.bf16);
            L->bv = rnd_tensor((size_t)KV, 0.5f, 0.0f, s.bf16);
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.q_proj.bias", l);
            add_tensor(t, &n, name, L->bq, Q, 0);
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.k_proj.bias", l);
            add_tensor(t, &n, name, L->bk, KV, 0);
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.v_proj.bias", l);
            add_tensor(t, &n, name, L->bv, KV, 0);
        }
        if (s.family == F_QWEN3) {
            L->qn = rnd_tensor((size_t)s.head_dim, 0.4f, 1.0f, s.bf16);
            L->kn = rnd_tensor((size_t)s.head_dim, 0.4f, 1.0f, s.bf16);
            S_ADD(qn, "self_attn.q_norm", s.head_dim, 0);
            S_ADD(kn, "self_attn.k_norm", s.head_dim, 0);
        }
#undef S_ADD
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", m->dir);
    write_safetensors(path, t, n, s.bf16);
    free(t);
    snprintf(path, sizeof(path), "%s/config.json", m->dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    static const char *const types[] = {"llama", "mistral", "qwen2", "qwen3"};
    fprintf(f,
            "{\"model_type\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d, "
            "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
            "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
            "\"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5, "
            "\"rope_theta\": 10000.0, \"tie_word_embeddings\": %s, \"eos_token_id\": 2",
            types[s.family], H, F, s.n_layers, s.n_heads, s.n_kv, s.head_dim, s.vocab, s.tied ? "true" : "false");
    if (s.family == F_MISTRAL && s.window)
        fprintf(f, ", \"sliding_window\": %d", s.window);
    if (s.llama3)
        fprintf(f, ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 4.0, "
                   "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                   "\"original_max_position_embeddings\": 64}");
    fprintf(f, "}\n");
    fclose(f);
    pl_status_t st = pl_model_open(m->dir, &m->model);
    cr_assert(st == PL_OK, "pl_model_open: %s", pl_error_msg());
}

static inline void tmodel_free(tmodel_t *m)
{
    char path[128];
    pl_model_destroy(&m->model);
    snprintf(path, sizeof(path), "%s/model.safetensors", m->dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/config.json", m->dir);
    unlink(path);
    rmdir(m->dir);
    for (int l = 0; l < m->s.n_layers; l++) {
        ref_layer_t *L = &m->layers[l];
        float *all[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->ffn_norm, L->wg,
                        L->wu,        L->wd, L->bq, L->bk, L->bv, L->qn,       L->kn};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            free(all[i]);
    }
    free(m->layers);
    if (!m->s.tied)
        free(m->head);
    free(m->embed);
    free(m->norm);
}

#endif
