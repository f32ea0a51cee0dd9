/* What the CPU executor suites share besides the model: a scalar double-precision reference of
 * the forward pass, two shapes, and a stage opened on the CPU backend with its forward calls. */
#ifndef PL_TESTS_CPU_LAYER_UTIL_H
#define PL_TESTS_CPU_LAYER_UTIL_H

#include "cpu_model_util.h"

/* ---- the scalar reference, in double ---- */

static inline void ref_rmsnorm(const double *x, const float *w, int n, double *y)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * r * w[i];
}

static inline void ref_linear_b(const double *x, const float *w, const float *b, int in, int out,
                         double *y)
{
    for (int o = 0; o < out; o++) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < in; i++)
            s += x[i] * w[(size_t)o * in + i];
        y[o] = s;
    }
}

static inline void ref_linear(const double *x, const float *w, int in, int out, double *y)
{
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++)
            s += x[i] * w[(size_t)o * in + i];
        y[o] = s;
    }
}

static inline double ref_inv_freq(const shape_t *s, int i)
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

static inline void ref_rope(const shape_t *s, double *v, int pos)
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
static inline void ref_forward(const tmodel_t *m, const int32_t *tokens, int n, int n_layers, double *hid,
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

/* s as model family f. */
static inline shape_t with_family(shape_t s, family_t f)
{
    s.family = f;
    return s;
}

typedef struct {
    pl_be_device_t *dev;
    pl_be_stage_t *stage;
} exec_t;

static inline pl_status_t exec_open(exec_t *e, tmodel_t *m, int first, int last, bool embed, bool head,
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

static inline void exec_close(exec_t *e)
{
    pl_be_stage_unload(&e->stage);
    pl_be_device_close(&e->dev);
}

static inline pl_status_t fwd(exec_t *e, int n_seq, const int *slot, const int *pos0, const int *n_tok,
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
static inline void fwd1(exec_t *e, int slot, int pos0, int n, const void *in, void *out)
{
    pl_status_t st = fwd(e, 1, &slot, &pos0, &n, in, out);
    cr_assert(st == PL_OK, "forward: %s", pl_error_msg());
}

static inline void expect_logits(const float *got, const double *ref, int vocab, const char *what)
{
    double mx = 0;
    for (int i = 0; i < vocab; i++)
        mx = fmax(mx, fabs(ref[i]));
    for (int i = 0; i < vocab; i++)
        cr_expect(fabs(got[i] - ref[i]) <= 1e-4 * (1 + mx), "%s: logit %d: %.7g want %.7g", what, i,
                  got[i], ref[i]);
}

static inline void tokens_for(int32_t *t, int n, int vocab, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7 + salt * 13 + 3) % vocab);
}

/* ---- tests ---- */

#endif
