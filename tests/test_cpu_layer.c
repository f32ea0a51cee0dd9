/* Tests of the CPU executor on small models written by the test (Llama, Mistral, Qwen2 with q/k/v
 * biases, Qwen3 with q/k norms; f32, f16 and bf16 weights): whole-stage forward against a scalar
 * double-precision reference, KV-cache decode, stage splits, batch invariance, rejected inputs
 * and load failures. */
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

static float rnd(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static shape_t g_shape; /* the model being made: its dtype */

static float *rnd_tensor(size_t n, float scale, float offset, bool bf16)
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

static void write_safetensors(const char *path, tensor_t *t, int n, bool bf16)
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

static void add_tensor(tensor_t *t, int *n, const char *name, float *data, int64_t d0, int64_t d1)
{
    snprintf(t[*n].name, sizeof(t[*n].name), "%s", name);
    t[*n].ndim = d1 ? 2 : 1;
    t[*n].shape[0] = d0;
    t[*n].shape[1] = d1;
    t[*n].data = data;
    (*n)++;
}

static void tmodel_make(tmodel_t *m, shape_t s, uint64_t seed)
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

static void tmodel_free(tmodel_t *m)
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

/* ---- the scalar reference, in double ---- */

static void ref_rmsnorm(const double *x, const float *w, int n, double *y)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * r * w[i];
}

static void ref_linear_b(const double *x, const float *w, const float *b, int in, int out,
                         double *y)
{
    for (int o = 0; o < out; o++) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < in; i++)
            s += x[i] * w[(size_t)o * in + i];
        y[o] = s;
    }
}

static void ref_linear(const double *x, const float *w, int in, int out, double *y)
{
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++)
            s += x[i] * w[(size_t)o * in + i];
        y[o] = s;
    }
}

static double ref_inv_freq(const shape_t *s, int i)
{
    double f = pow(10000.0, -2.0 * i / s->head_dim);
    if (!s->llama3)
        return f;
    double wavelen = 2 * M_PI / f, factor = 4, low = 1, high = 4, orig = 64;
    if (wavelen < orig / high)
        return f;
    if (wavelen > orig / low)
        return f / factor;
    double smooth = (orig / wavelen - low) / (high - low);
    return (1 - smooth) * f / factor + smooth * f;
}

static void ref_rope(const shape_t *s, double *v, int pos)
{
    int half = s->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double a = pos * ref_inv_freq(s, i), x1 = v[i], x2 = v[i + half];
        v[i] = x1 * cos(a) - x2 * sin(a);
        v[i + half] = x2 * cos(a) + x1 * sin(a);
    }
}

/* Hidden states after all layers for tokens[0..n) at positions 0..n-1 (hid [n][H]) and the
 * logits of the last token (logits [vocab]); either may be NULL. */
static void ref_forward(const tmodel_t *m, const int32_t *tokens, int n, int n_layers, double *hid,
                        double *logits)
{
    const shape_t *s = &m->s;
    int H = s->hidden, hd = s->head_dim, Q = s->n_heads * hd, KV = s->n_kv * hd, F = s->inter;
    double *x = calloc((size_t)n * H, sizeof(double)), *xn = calloc((size_t)H, sizeof(double));
    double *q = calloc((size_t)n * Q, sizeof(double)), *k = calloc((size_t)n * KV, sizeof(double));
    double *v = calloc((size_t)n * KV, sizeof(double)), *att = calloc((size_t)Q, sizeof(double));
    double *o = calloc((size_t)H, sizeof(double)), *g = calloc((size_t)F, sizeof(double));
    double *u = calloc((size_t)F, sizeof(double)), *sc = calloc((size_t)n, sizeof(double));

    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++)
            x[t * H + i] = m->embed[(size_t)tokens[t] * H + i];
    for (int l = 0; l < n_layers; l++) {
        const ref_layer_t *L = &m->layers[l];
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(x + t * H, L->attn_norm, H, xn);
            ref_linear_b(xn, L->wq, L->bq, H, Q, q + t * Q);
            ref_linear_b(xn, L->wk, L->bk, H, KV, k + t * KV);
            ref_linear_b(xn, L->wv, L->bv, H, KV, v + t * KV);
            for (int h = 0; L->qn && h < s->n_heads; h++) /* qwen3: each head normalised */
                ref_rmsnorm(q + t * Q + h * hd, L->qn, hd, q + t * Q + h * hd);
            for (int h = 0; L->kn && h < s->n_kv; h++)
                ref_rmsnorm(k + t * KV + h * hd, L->kn, hd, k + t * KV + h * hd);
            for (int h = 0; h < s->n_heads; h++)
                ref_rope(s, q + t * Q + h * hd, t);
            for (int h = 0; h < s->n_kv; h++)
                ref_rope(s, k + t * KV + h * hd, t);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < s->n_heads; h++) {
                int kh = h / (s->n_heads / s->n_kv);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += q[t * Q + h * hd + i] * k[j * KV + kh * hd + i];
                    sc[j] = d / sqrt(hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++)
                        a += sc[j] / sum * v[j * KV + kh * hd + i];
                    att[h * hd + i] = a;
                }
            }
            ref_linear(att, L->wo, Q, H, o);
            for (int i = 0; i < H; i++)
                x[t * H + i] += o[i];
        }
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(x + t * H, L->ffn_norm, H, xn);
            ref_linear(xn, L->wg, H, F, g);
            ref_linear(xn, L->wu, H, F, u);
            for (int i = 0; i < F; i++)
                g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_linear(g, L->wd, F, H, o);
            for (int i = 0; i < H; i++)
                x[t * H + i] += o[i];
        }
    }
    if (hid)
        memcpy(hid, x, (size_t)n * H * sizeof(double));
    if (logits) {
        ref_rmsnorm(x + (size_t)(n - 1) * H, m->norm, H, xn);
        ref_linear(xn, m->head, H, s->vocab, logits);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(o), free(g), free(u), free(sc);
}

/* ---- helpers around the executor ---- */

static const shape_t k_small = {
    .hidden = 32, .inter = 48, .n_layers = 2, .n_heads = 4, .n_kv = 4, .head_dim = 8, .vocab = 50};
/* GQA, head_dim != hidden / n_heads, llama3 rope scaling with every regime present */
static const shape_t k_gqa = {.hidden = 32,
                              .inter = 40,
                              .n_layers = 3,
                              .n_heads = 4,
                              .n_kv = 2,
                              .head_dim = 12,
                              .vocab = 40,
                              .llama3 = true};

typedef struct {
    pl_be_device_t *dev;
    pl_be_stage_t *stage;
} exec_t;

static pl_status_t exec_open(exec_t *e, tmodel_t *m, int first, int last, bool embed, bool head,
                             int max_seqs, int max_ctx, int max_tokens)
{
    pl_be_stage_params_t p = {.first_layer = first,
                              .last_layer = last,
                              .has_embed = embed,
                              .has_head = head,
                              .max_seqs = max_seqs,
                              .max_ctx = max_ctx,
                              .max_tokens = max_tokens};
    cr_assert(pl_be_device_open(pl_be_cpu(), 0, 2, &e->dev) == PL_OK, "open: %s",
              pl_error_msg());
    e->stage = NULL;
    return pl_be_stage_load(e->dev, m->model, &p, &e->stage);
}

static void exec_close(exec_t *e)
{
    pl_be_stage_unload(&e->stage);
    pl_be_device_close(&e->dev);
}

static pl_status_t fwd(exec_t *e, int n_seq, const int *slot, const int *pos0, const int *n_tok,
                       const void *in, void *out)
{
    int total = 0;
    for (int i = 0; i < n_seq; i++)
        total += n_tok[i];
    pl_be_batch_t b = {
        .n_seq = n_seq, .n_tokens = total, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    return pl_be_stage_forward(e->stage, &b, in, out);
}

/* One sequence's whole prompt in one call. */
static void fwd1(exec_t *e, int slot, int pos0, int n, const void *in, void *out)
{
    pl_status_t st = fwd(e, 1, &slot, &pos0, &n, in, out);
    cr_assert(st == PL_OK, "forward: %s", pl_error_msg());
}

static void expect_logits(const float *got, const double *ref, int vocab, const char *what)
{
    double mx = 0;
    for (int i = 0; i < vocab; i++)
        mx = fmax(mx, fabs(ref[i]));
    for (int i = 0; i < vocab; i++)
        cr_expect(fabs(got[i] - ref[i]) <= 1e-4 * (1 + mx), "%s: logit %d: %.7g want %.7g", what, i,
                  got[i], ref[i]);
}

static void tokens_for(int32_t *t, int n, int vocab, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7 + salt * 13 + 3) % vocab);
}

/* ---- tests ---- */

static void check_prefill(shape_t s, int n)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[64];
    float *logits = calloc((size_t)s.vocab, sizeof(float));
    double *ref = calloc((size_t)s.vocab, sizeof(double));
    tmodel_make(&m, s, 42);
    cr_assert(exec_open(&e, &m, 0, s.n_layers - 1, true, true, 2, 64, 64) == PL_OK, "load: %s",
              pl_error_msg());
    tokens_for(tok, n, s.vocab, 1);
    fwd1(&e, 1, 0, n, tok, logits);
    ref_forward(&m, tok, n, s.n_layers, NULL, ref);
    expect_logits(logits, ref, s.vocab, "prefill");
    exec_close(&e);
    tmodel_free(&m);
    free(logits);
    free(ref);
}

Test(cpu_layer, prefill_matches_reference)
{
    check_prefill(k_small, 7);
}

Test(cpu_layer, prefill_gqa_head_dim_llama3_matches_reference)
{
    check_prefill(k_gqa, 45); /* more rows than one attention chunk, positions past orig/high */
}

Test(cpu_layer, tied_bf16_matches_reference)
{
    shape_t s = k_gqa;
    s.tied = true;
    s.bf16 = true; /* converted (owned) tensors on the load path */
    check_prefill(s, 9);
}

static shape_t with_family(shape_t s, family_t f)
{
    s.family = f;
    return s;
}

/* Qwen2: q/k/v biases, on the short-sequence path (9 tokens) and the sgemm one (45). */
Test(cpu_layer, qwen2_biases_match_reference)
{
    check_prefill(with_family(k_gqa, F_QWEN2), 9);
    check_prefill(with_family(k_gqa, F_QWEN2), 45);
}

/* Qwen3: per-head q/k RMSNorm before RoPE; tied bf16 as small Qwen3 models ship. */
Test(cpu_layer, qwen3_qk_norm_matches_reference)
{
    shape_t s = with_family(k_gqa, F_QWEN3);
    check_prefill(s, 9);
    check_prefill(s, 45);
    s.tied = s.bf16 = true;
    check_prefill(s, 33);
}

/* Mistral: Llama's layer; a context within the sliding window loads and matches, one past it is
 * refused rather than computed with full attention. */
Test(cpu_layer, mistral_matches_reference_within_its_window)
{
    shape_t s = with_family(k_gqa, F_MISTRAL);
    s.window = 64;
    check_prefill(s, 40);
    tmodel_t m;
    exec_t e;
    tmodel_make(&m, s, 3);
    cr_expect(exec_open(&e, &m, 0, s.n_layers - 1, true, true, 1, 65, 8) == PL_ERR_UNSUPPORTED);
    cr_expect(strstr(pl_error_msg(), "sliding window of 64") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    tmodel_free(&m);
}

/* f16 weights as stored: converted in registers (decode rows) and by tiles (sgemm). */
Test(cpu_layer, f16_matches_reference)
{
    shape_t s = k_gqa;
    s.f16 = true;
    check_prefill(s, 9);
    check_prefill(s, 45);
}

/* Every family and weight type: 2 and 3 stages give bitwise the 1-stage logits, in prefill
 * (short and long sequences) and in the decode steps after it. */
Test(cpu_layer, families_and_types_split_equal_single_stage)
{
    static const family_t fams[] = {F_LLAMA, F_MISTRAL, F_QWEN2, F_QWEN3};
    int V = k_gqa.vocab, H = k_gqa.hidden;
    for (size_t fi = 0; fi < sizeof(fams) / sizeof(fams[0]); fi++) {
        for (int dt = 0; dt < 3; dt++) {
            shape_t s = with_family(k_gqa, fams[fi]);
            s.f16 = dt == 1;
            s.bf16 = dt == 2;
            tmodel_t m;
            exec_t one, a2, b2, a3, b3, c3;
            int32_t tok[40];
            static float hid[40 * 32], hid2[40 * 32], l1[64], l2[64], l3[64];
            tmodel_make(&m, s, 20 + fi * 3 + (unsigned)dt);
            cr_assert(exec_open(&one, &m, 0, 2, true, true, 1, 48, 40) == PL_OK, "%s",
                      pl_error_msg());
            cr_assert(exec_open(&a2, &m, 0, 1, true, false, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&b2, &m, 2, 2, false, true, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&a3, &m, 0, 0, true, false, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&b3, &m, 1, 1, false, false, 1, 48, 40) == PL_OK);
            cr_assert(exec_open(&c3, &m, 2, 2, false, true, 1, 48, 40) == PL_OK);
            for (int n = 5, pos = 0; pos + n <= 40; pos += n, n = n == 5 ? 34 : 1) {
                tokens_for(tok, 40, V, (int)fi + dt);
                fwd1(&one, 0, pos, n, tok + pos, l1);
                fwd1(&a2, 0, pos, n, tok + pos, hid);
                fwd1(&b2, 0, pos, n, hid, l2);
                fwd1(&a3, 0, pos, n, tok + pos, hid);
                fwd1(&b3, 0, pos, n, hid, hid2);
                fwd1(&c3, 0, pos, n, hid2, l3);
                cr_expect(memcmp(l1, l2, (size_t)V * 4) == 0 && memcmp(l1, l3, (size_t)V * 4) == 0,
                          "family %d dtype %d: %d tokens at %d: split stages differ", (int)fi, dt,
                          n, pos);
            }
            (void)H;
            exec_close(&one), exec_close(&a2), exec_close(&b2);
            exec_close(&a3), exec_close(&b3), exec_close(&c3);
            tmodel_free(&m);
        }
    }
}

/* Prefill 6 tokens then decode one at a time: each step's logits equal the reference over the
 * whole prefix, i.e. what one full-sequence prefill gives. */
Test(cpu_layer, decode_after_prefill_matches_full_prefill)
{
    tmodel_t m;
    exec_t e, full;
    int32_t tok[16];
    float logits[64], full_logits[64];
    double ref[64];
    int n = 14;
    tmodel_make(&m, k_gqa, 7);
    cr_assert(exec_open(&e, &m, 0, k_gqa.n_layers - 1, true, true, 3, 32, 8) == PL_OK);
    cr_assert(exec_open(&full, &m, 0, k_gqa.n_layers - 1, true, true, 1, 32, 32) == PL_OK);
    tokens_for(tok, n, k_gqa.vocab, 2);
    fwd1(&e, 2, 0, 6, tok, logits);
    for (int p = 6; p <= n; p++) {
        if (p > 6)
            fwd1(&e, 2, p - 1, 1, tok + p - 1, logits);
        ref_forward(&m, tok, p, k_gqa.n_layers, NULL, ref);
        expect_logits(logits, ref, k_gqa.vocab, "decode");
        fwd1(&full, 0, 0, p, tok, full_logits);
        for (int i = 0; i < k_gqa.vocab; i++)
            cr_expect(fabsf(logits[i] - full_logits[i]) <= 1e-4f * (1 + fabsf(full_logits[i])),
                      "step %d logit %d: decode %g, full prefill %g", p, i, logits[i],
                      full_logits[i]);
    }
    exec_close(&e);
    exec_close(&full);
    tmodel_free(&m);
}

/* The same sequence in batches of different composition (alone, after others, before others,
 * other slots) gives bitwise-identical logits, in prefill and in decode, for a short sequence
 * (batch-invariant GEMM) and a long one (its own sgemm). */
Test(cpu_layer, batch_composition_does_not_change_logits)
{
    tmodel_t m;
    exec_t a, b;
    int V = k_gqa.vocab;
    static int32_t tok[5][48], in[128];
    static float alone[3][64], mixed[5 * 64];
    tmodel_make(&m, k_gqa, 9);
    for (int i = 0; i < 5; i++)
        tokens_for(tok[i], 48, V, 10 + i);
    cr_assert(exec_open(&a, &m, 0, k_gqa.n_layers - 1, true, true, 4, 48, 96) == PL_OK);
    cr_assert(exec_open(&b, &m, 0, k_gqa.n_layers - 1, true, true, 4, 48, 96) == PL_OK);
    /* alone: sequence 0 (5 tokens, then one decode step) and sequence 2 (34 tokens) */
    fwd1(&a, 0, 0, 5, tok[0], alone[0]);
    fwd1(&a, 0, 5, 1, tok[0] + 5, alone[1]);
    fwd1(&a, 1, 0, 34, tok[2], alone[2]);
    /* prefill among others: 3 tokens, ours (5), ours (34), 40 tokens; other slots */
    {
        int slot[4] = {1, 3, 0, 2}, pos0[4] = {0, 0, 0, 0}, n_tok[4] = {3, 5, 34, 40}, k = 0;
        const int32_t *src[4] = {tok[1], tok[0], tok[2], tok[3]};
        for (int i = 0; i < 4; i++)
            memcpy(in + k, src[i], (size_t)n_tok[i] * sizeof(int32_t)), k += n_tok[i];
        cr_assert(fwd(&b, 4, slot, pos0, n_tok, in, mixed) == PL_OK, "%s", pl_error_msg());
        cr_expect(memcmp(mixed + V, alone[0], (size_t)V * sizeof(float)) == 0,
                  "short prefill logits depend on the batch");
        cr_expect(memcmp(mixed + 2 * V, alone[2], (size_t)V * sizeof(float)) == 0,
                  "long prefill logits depend on the batch");
    }
    /* decode: a new 4-token prompt first, then one token each for three sequences, ours last */
    {
        int slot[4] = {2, 1, 0, 3}, pos0[4] = {40, 3, 34, 5}, n_tok[4] = {4, 1, 1, 1};
        int32_t din[7] = {tok[3][40], tok[3][41], tok[3][42], tok[3][43],
                          tok[1][3],  tok[2][34], tok[0][5]};
        cr_assert(fwd(&b, 4, slot, pos0, n_tok, din, mixed) == PL_OK, "%s", pl_error_msg());
        cr_expect(memcmp(mixed + 3 * V, alone[1], (size_t)V * sizeof(float)) == 0,
                  "decode logits depend on the batch");
    }
    exec_close(&a);
    exec_close(&b);
    tmodel_free(&m);
}

/* Two stages (embed + layer 0 | layers 1..2 + head) give the one-stage logits, and the first
 * stage's hidden output equals the reference hidden state after one layer. */
Test(cpu_layer, split_stages_match_single_stage)
{
    tmodel_t m;
    exec_t s0, s1, all;
    int n = 6, H = k_gqa.hidden, V = k_gqa.vocab;
    int32_t tok[8];
    float hid[8 * 32], logits[64], one[64];
    double ref_hid[8 * 32];
    tmodel_make(&m, k_gqa, 11);
    tokens_for(tok, n, V, 5);
    cr_assert(exec_open(&s0, &m, 0, 0, true, false, 2, 16, 16) == PL_OK);
    cr_assert(exec_open(&s1, &m, 1, 2, false, true, 2, 16, 16) == PL_OK);
    cr_assert(exec_open(&all, &m, 0, 2, true, true, 2, 16, 16) == PL_OK);
    fwd1(&s0, 1, 0, n, tok, hid);
    ref_forward(&m, tok, n, 1, ref_hid, NULL);
    for (int i = 0; i < n * H; i++)
        cr_expect(fabs(hid[i] - ref_hid[i]) <= 1e-4 * (1 + fabs(ref_hid[i])), "hidden %d", i);
    fwd1(&s1, 1, 0, n, hid, logits);
    fwd1(&all, 0, 0, n, tok, one);
    cr_expect(memcmp(logits, one, (size_t)V * sizeof(float)) == 0, "split differs from single");
    exec_close(&s0);
    exec_close(&s1);
    exec_close(&all);
    tmodel_free(&m);
}

/* A stage with no layers: embedding straight into the head. */
Test(cpu_layer, no_layer_stage)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[3] = {4, 9, 1};
    float logits[64];
    double ref[64];
    tmodel_make(&m, k_small, 3);
    cr_assert(exec_open(&e, &m, 0, -1, true, true, 1, 8, 8) == PL_OK, "%s", pl_error_msg());
    fwd1(&e, 0, 0, 3, tok, logits);
    ref_forward(&m, tok, 3, 0, NULL, ref);
    expect_logits(logits, ref, k_small.vocab, "no layers");
    exec_close(&e);
    tmodel_free(&m);
}

static void expect_reject(exec_t *e, pl_status_t want, const char *needle, int n_seq,
                          const int *slot, const int *pos0, const int *n_tok, int n_tokens,
                          const void *in)
{
    float out[4 * 64];
    pl_be_batch_t b = {
        .n_seq = n_seq, .n_tokens = n_tokens, .slot = slot, .pos0 = pos0, .n_tok = n_tok};
    pl_error_clear();
    pl_status_t st = pl_be_stage_forward(e->stage, &b, in, out);
    cr_expect(st == want, "want %s, got %s (%s)", pl_status_str(want), pl_status_str(st),
              pl_error_msg());
    cr_expect(strstr(pl_error_msg(), needle) != NULL, "message '%s' lacks '%s'", pl_error_msg(),
              needle);
}

Test(cpu_layer, bad_batches_rejected_and_state_kept)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, bad_tok[2] = {1, 50};
    float before[64], after[64];
    double ref[64];
    tmodel_make(&m, k_small, 5);
    cr_assert(exec_open(&e, &m, 0, 1, true, true, 2, 8, 6) == PL_OK);
    fwd1(&e, 0, 0, 3, tok, before);
    int s0[2] = {0, 1}, s_big[1] = {2}, s_neg[1] = {-1}, s_dup[2] = {1, 1};
    int p0[2] = {0, 0}, p3[1] = {3}, p_far[1] = {5}, p_end[1] = {7}, p_neg[1] = {-2};
    int n1[1] = {1}, n2[1] = {2}, n11[2] = {1, 1}, n7[1] = {7}, n0[1] = {0};
    expect_reject(&e, PL_ERR_RANGE, "slot 2", 1, s_big, p0, n1, 1, tok);
    expect_reject(&e, PL_ERR_RANGE, "slot -1", 1, s_neg, p0, n1, 1, tok);
    expect_reject(&e, PL_ERR_INVALID, "used twice", 2, s_dup, p0, n11, 2, tok);
    expect_reject(&e, PL_ERR_RANGE, "max_ctx", 1, s0, p_end, n2, 2, tok);
    expect_reject(&e, PL_ERR_RANGE, "positions", 1, s0, p_neg, n1, 1, tok);
    expect_reject(&e, PL_ERR_RANGE, "max_tokens", 1, s0, p0, n7, 7, tok);
    expect_reject(&e, PL_ERR_RANGE, "n_tok 0", 1, s0, p0, n0, 1, tok);
    expect_reject(&e, PL_ERR_INVALID, "sum to 2", 2, s0, p0, n11, 3, tok);
    expect_reject(&e, PL_ERR_RANGE, "id 50", 1, s0, p3, n2, 2, bad_tok);
    expect_reject(&e, PL_ERR_INVALID, "holds only", 1, s0, p_far, n1, 1, tok);
    expect_reject(&e, PL_ERR_RANGE, "n_seq 3", 3, s0, p0, n11, 2, tok);
    expect_reject(&e, PL_ERR_RANGE, "n_seq 0", 0, s0, p0, n11, 0, tok);
    expect_reject(&e, PL_ERR_INVALID, "NULL", 1, s0, NULL, n1, 1, tok);
    expect_reject(&e, PL_ERR_INVALID, "NULL", 1, s0, p0, n1, 1, NULL);
    /* nothing above touched slot 0: decoding continues as if they never happened */
    fwd1(&e, 0, 3, 1, tok + 3, after);
    ref_forward(&m, tok, 4, 2, NULL, ref);
    expect_logits(after, ref, k_small.vocab, "after rejects");
    (void)before;
    exec_close(&e);
    tmodel_free(&m);
}

Test(cpu_layer, free_seq_forgets_slot)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    float a[64], b[64];
    tmodel_make(&m, k_small, 6);
    cr_assert(exec_open(&e, &m, 0, 1, true, true, 2, 8, 8) == PL_OK);
    fwd1(&e, 1, 0, 4, tok, a);
    pl_be_stage_free_seq(e.stage, 1);
    pl_be_stage_free_seq(e.stage, 99); /* out of range: ignored */
    int slot = 1, pos0 = 4, n = 1;
    cr_expect(fwd(&e, 1, &slot, &pos0, &n, tok + 4, b) == PL_ERR_INVALID);
    fwd1(&e, 1, 0, 4, tok, b); /* reused from scratch: same result */
    cr_expect(memcmp(a, b, sizeof(float) * (size_t)k_small.vocab) == 0);
    exec_close(&e);
    tmodel_free(&m);
}

Test(cpu_layer, load_failures)
{
    tmodel_t m;
    exec_t e;
    tmodel_make(&m, k_small, 8);
    cr_expect(exec_open(&e, &m, 1, 2, true, true, 1, 8, 8) == PL_ERR_RANGE);
    cr_expect(strstr(pl_error_msg(), "layers 1..2") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    cr_expect(exec_open(&e, &m, 0, 1, true, true, 1, 0, 8) == PL_ERR_INVALID);
    pl_be_device_close(&e.dev);
    cr_expect(exec_open(&e, &m, 0, 1, true, true, 1, 8, -1) == PL_ERR_INVALID);
    pl_be_device_close(&e.dev);
    /* 2^30 slots x 2^30 positions: the KV cache size overflows or exceeds memory */
    cr_expect(exec_open(&e, &m, 0, 1, false, false, 1 << 30, 1 << 30, 8) == PL_ERR_NOMEM);
    cr_expect(strstr(pl_error_msg(), "kv cache") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    /* a cache that fits no machine, without overflow: the message says how many bytes */
    cr_expect(exec_open(&e, &m, 0, 1, false, false, 1 << 20, 1 << 20, 8) == PL_ERR_NOMEM);
    cr_expect(strstr(pl_error_msg(), "bytes") != NULL, "%s", pl_error_msg());
    pl_be_device_close(&e.dev);
    exec_close(&(exec_t){.dev = NULL, .stage = NULL}); /* unload and close accept NULL */
    tmodel_free(&m);
}

/* An earlier prefill chunk asks for no logits: the head is skipped (out untouched), the chunk's
 * KV is kept, and the last chunk's logits equal the reference over the whole prompt; between
 * layers the hook runs once per layer boundary. */
static void s_count(void *arg)
{
    (*(int *)arg)++;
}

Test(cpu_layer, no_logits_skips_the_head_and_keeps_the_kv)
{
    tmodel_t m;
    exec_t e;
    int32_t tok[7] = {5, 3, 8, 1, 9, 2, 6};
    float out[64], logits[64];
    double ref[64];
    int calls = 0;
    tmodel_make(&m, k_gqa, 7);
    cr_assert(exec_open(&e, &m, 0, k_gqa.n_layers - 1, true, true, 1, 8, 8) == PL_OK, "%s",
              pl_error_msg());
    for (int i = 0; i < 64; i++)
        out[i] = (float)i + 0.5f;
    int slot = 0, pos0 = 0, n = 4;
    pl_be_batch_t b = {.n_seq = 1,
                       .n_tokens = 4,
                       .slot = &slot,
                       .pos0 = &pos0,
                       .n_tok = &n,
                       .no_logits = true,
                       .between_layers = s_count,
                       .between_arg = &calls};
    cr_assert(pl_be_stage_forward(e.stage, &b, tok, out) == PL_OK, "%s", pl_error_msg());
    for (int i = 0; i < 64; i++)
        cr_assert_eq(out[i], (float)i + 0.5f, "out[%d] written although no logits were asked", i);
    cr_expect_eq(calls, k_gqa.n_layers - 1, "between-layers hook ran %d times", calls);
    fwd1(&e, 0, 4, 3, tok + 4, logits);
    ref_forward(&m, tok, 7, k_gqa.n_layers, NULL, ref);
    expect_logits(logits, ref, k_gqa.vocab, "after a chunk without logits");
    exec_close(&e);
    tmodel_free(&m);
}
