/* What the training suites share: a tiny Llama model made from a seed (grad_util.h's generator),
 * its tensors in model order, the trainer's settings, each step's tokens, the in-process
 * trainer's run and a plain loop on the CPU kernels, whose gradients test_train_local checks
 * against finite differences. */
#ifndef PL_TESTS_TRAIN_UTIL_H
#define PL_TESTS_TRAIN_UTIL_H

#include "backends/cpu/cpu_backward.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_head.h"
#include "grad_util.h" /* first: the macros below would rename its parameters */
#include "model/model.h"
#include "pipeline/train_local.h"
#include "scheduler/train_sched.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L 3
#define T 8
#define V 12
#define MB 4
static const pl_cpu_tdims_t g_d = {
    .hidden = 16, .inter = 32, .n_heads = 4, .n_kv = 2, .head_dim = 4, .eps = 1e-5f};
static double g_inv_freq[2];

typedef struct {
    float *embed, *norm, *head;
    pl_cpu_tlayer_t layers[L];
    pl_train_weights_t w;
} model_t;

/* n values off + scale * U(-1, 1) in f32 (rnd()'s values are exact in f32). */
static inline float *rnd_arr(size_t n, float scale, float off)
{
    float *p = malloc(n * sizeof(float));
    cr_assert(p);
    for (size_t i = 0; i < n; i++)
        p[i] = off + scale * (float)rnd();
    return p;
}

static inline void model_make(model_t *m, uint64_t seed)
{
    size_t sz[9], H = (size_t)g_d.hidden;
    g_rng = seed;
    pl_cpu_tlayer_sizes(&g_d, sz);
    m->embed = rnd_arr(V * H, 1.0f, 0);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++) {
            bool norm = i == 0 || i == 5;
            size_t in = i == 4   ? (size_t)g_d.n_heads * g_d.head_dim
                        : i == 8 ? (size_t)g_d.inter
                                 : H;
            *pl_cpu_tlayer_field(&m->layers[l], i) =
                norm ? rnd_arr(sz[i], 0.1f, 1.0f) : rnd_arr(sz[i], 1.7f / sqrtf((float)in), 0);
        }
    m->norm = rnd_arr(H, 0.1f, 1.0f);
    m->head = rnd_arr(V * H, 1.7f / sqrtf((float)H), 0);
    m->w = (pl_train_weights_t){m->embed, m->layers, m->norm, m->head};
}

static inline void model_free(model_t *m)
{
    free(m->embed);
    free(m->norm);
    free(m->head);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++)
            free(*pl_cpu_tlayer_field(&m->layers[l], i));
}

/* Every weight of the model in order: (pointer, floats, decay). */
static inline int model_tensors(model_t *m, float **p, size_t *n, bool *decay)
{
    size_t sz[9], H = (size_t)g_d.hidden;
    int k = 0;
    pl_cpu_tlayer_sizes(&g_d, sz);
    p[k] = m->embed, n[k] = V * H, decay[k++] = true;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++)
            p[k] = *pl_cpu_tlayer_field(&m->layers[l], i), n[k] = sz[i],
            decay[k++] = !(i == 0 || i == 5);
    p[k] = m->norm, n[k] = H, decay[k++] = false;
    p[k] = m->head, n[k] = V * H, decay[k++] = true;
    return k;
}

static inline bool model_equal(model_t *a, model_t *b)
{
    float *pa[64], *pb[64];
    size_t na[64], nb[64];
    bool da[64], db[64];
    int k = model_tensors(a, pa, na, da);
    model_tensors(b, pb, nb, db);
    for (int i = 0; i < k; i++)
        if (memcmp(pa[i], pb[i], na[i] * sizeof(float)))
            return false;
    return true;
}

/* A model directory of the test model's shape made by pl-mkmodel in dir (a mkdtemp template):
 * the source whose config.json a checkpoint is written beside. */
static inline void model_dir_make(char *dir)
{
    char cmd[1024];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "%s/pl-mkmodel --out %s --layers %d --hidden %d --intermediate %d --heads %d "
             "--kv-heads %d --head-dim %d --vocab %d >/dev/null",
             PL_BIN_DIR, dir, L, g_d.hidden, g_d.inter, g_d.n_heads, g_d.n_kv, g_d.head_dim, V);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static inline pl_train_local_cfg_t cfg_make(float clip, bool recompute)
{
    rope_train_cfg(g_inv_freq);
    pl_adamw_cfg_t o = pl_adamw_cfg_default();
    o.lr = 0.01f, o.min_lr = 0.001f, o.warmup_steps = 2, o.total_steps = 6;
    o.weight_decay = 0.05f, o.clip_norm = clip;
    return (pl_train_local_cfg_t){.dims = g_d,
                                  .n_layers = L,
                                  .vocab = V,
                                  .seq_len = T,
                                  .n_mb = MB,
                                  .inv_freq = g_inv_freq,
                                  .recompute = recompute,
                                  .opt = o};
}

static inline void tokens_make(int step, int32_t *tok)
{
    for (int m = 0; m < MB; m++)
        for (int i = 0; i <= T; i++)
            tok[m * (T + 1) + i] = (int32_t)((step * 7 + m * 5 + i * i + 3 * i) % V);
}

#define K 5

static inline void run_pipelined(pl_train_kind_t kind, const int *counts, int S, float clip,
                                 bool recompute, double *losses, model_t *m, bool check_stash)
{
    pl_train_local_cfg_t c = cfg_make(clip, recompute);
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(kind, S, MB, NULL, 0, &sched), PL_OK);
    pl_train_local_t *tl = NULL;
    model_make(m, 42);
    cr_assert_eq(pl_train_local_create(&c, &m->w, counts, S, sched, &tl), PL_OK, "%s",
                 pl_error_msg());
    for (int k = 0; k < K; k++) {
        int32_t tok[MB * (T + 1)];
        tokens_make(k, tok);
        pl_train_step_t r;
        cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_OK, "%s", pl_error_msg());
        losses[k] = r.loss;
        if (clip > 0)
            cr_assert_lt(r.clip, 1.0f, "clipping engaged");
        for (int s = 0; check_stash && s < S; s++) {
            bool last = s == S - 1;
            double head = last ? sizeof(float) * (double)T * (3 * g_d.hidden + V) : 0;
            double f = counts[s] * (double)pl_cpu_tstash_f_bytes(&g_d, T, recompute) + head;
            double b = counts[s] * (double)pl_cpu_tstash_b_bytes(&g_d, T, recompute);
            cr_assert_eq((double)r.peak_stash_bytes[s], pl_tsched_stash_bytes(sched, s, f, b),
                         "%s stage %d: measured %zu", pl_train_kind_name(kind), s,
                         r.peak_stash_bytes[s]);
        }
    }
    pl_train_local_destroy(&tl);
    cr_assert_null(tl);
    pl_train_ops_destroy(&sched);
}

/* One step's gradients of the plain loop, added to g[] (model_tensors' order): per microbatch the
 * whole model forward, the loss, the backward on the CPU kernels. Returns the step's mean loss. */
static inline double ref_step_grads(model_t *m, const int32_t *tok, float **g)
{
    pl_cpu_tlayer_t gl[L];
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++)
            *pl_cpu_tlayer_field(&gl[l], i) = g[1 + l * 9 + i];
    int pos[T], nt = 1 + 9 * L + 2;
    float ct[T * 2], st[T * 2], x[T * 16], y[T * 16];
    for (int i = 0; i < T; i++)
        pos[i] = i;
    pl_cpu_rope_table(g_inv_freq, 2, pos, T, ct, st);
    pl_cpu_tstash_t *sh[L];
    pl_cpu_thead_t *hd = NULL;
    for (int l = 0; l < L; l++)
        cr_assert_eq(pl_cpu_tstash_create(&g_d, T, false, &sh[l]), PL_OK);
    cr_assert_eq(pl_cpu_thead_create(T, 16, V, g_d.eps, &hd), PL_OK);
    double loss = 0;
    for (int mb = 0; mb < MB; mb++) {
        const int32_t *tk = tok + mb * (T + 1);
        double lm;
        cr_assert_eq(pl_cpu_tembed_forward(m->embed, V, 16, tk, T, x), PL_OK);
        for (int l = 0; l < L; l++) {
            cr_assert_eq(pl_cpu_tlayer_forward(&g_d, &m->layers[l], ct, st, x, sh[l], y), PL_OK);
            memcpy(x, y, sizeof(x));
        }
        cr_assert_eq(pl_cpu_thead_forward(hd, m->norm, m->head, x, tk + 1, 1.0f / (T * MB), &lm),
                     PL_OK);
        loss += lm;
        cr_assert_eq(pl_cpu_thead_backward_input(hd, m->norm, m->head, x), PL_OK);
        pl_cpu_thead_backward_weight(hd, g[nt - 2], g[nt - 1]);
        for (int l = L - 1; l >= 0; l--) {
            cr_assert_eq(pl_cpu_tlayer_backward_input(&g_d, &m->layers[l], ct, st, sh[l], x, x),
                         PL_OK);
            pl_cpu_tlayer_backward_weight(&g_d, sh[l], &gl[l]);
        }
        pl_cpu_embed_bwd_weight(tk, x, T, 16, g[0]);
    }
    for (int l = 0; l < L; l++)
        pl_cpu_tstash_destroy(&sh[l]);
    pl_cpu_thead_destroy(&hd);
    return loss / (T * MB);
}

/* The plain loop: ref_step_grads each step, then AdamW written here. */
static inline void run_reference(double *losses, model_t *m)
{
    pl_train_local_cfg_t c = cfg_make(0, false);
    model_make(m, 42);
    float *p[64], *g[64], *mo[64], *ve[64];
    size_t n[64];
    bool decay[64];
    int nt = model_tensors(m, p, n, decay);
    for (int i = 0; i < nt; i++) {
        g[i] = calloc(n[i], sizeof(float));
        mo[i] = calloc(n[i], sizeof(float));
        ve[i] = calloc(n[i], sizeof(float));
    }
    for (int k = 0; k < K; k++) {
        int32_t tok[MB * (T + 1)];
        tokens_make(k, tok);
        losses[k] = ref_step_grads(m, tok, g);
        /* AdamW, as torch.optim.AdamW (no clipping in this run) */
        const pl_adamw_cfg_t *o = &c.opt;
        int t = k + 1;
        float lr = (float)pl_adamw_lr(o, k);
        float bc1 = (float)(1.0 - pow(o->beta1, t)), bc2 = (float)(1.0 - pow(o->beta2, t));
        for (int i = 0; i < nt; i++)
            for (size_t j = 0; j < n[i]; j++) {
                float gj = g[i][j];
                mo[i][j] = o->beta1 * mo[i][j] + (1.0f - o->beta1) * gj;
                ve[i][j] = o->beta2 * ve[i][j] + (1.0f - o->beta2) * gj * gj;
                float w = p[i][j] * (decay[i] ? 1.0f - lr * o->weight_decay : 1.0f);
                p[i][j] = w - lr * (mo[i][j] / bc1) / (sqrtf(ve[i][j] / bc2) + o->eps);
                g[i][j] = 0;
            }
    }
    for (int i = 0; i < nt; i++)
        free(g[i]), free(mo[i]), free(ve[i]);
}

#endif
