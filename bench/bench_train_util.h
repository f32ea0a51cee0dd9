/* What the training benchmarks share (bench_train in process, bench_train_pipe over UCX): the
 * model's shape, its weights and one step's tokens at random, and one layer's F, B and W times. */
#ifndef PL_BENCH_BENCH_TRAIN_UTIL_H
#define PL_BENCH_BENCH_TRAIN_UTIL_H

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_layer.h"
#include "common/util.h"
#include "model/model.h"
#include "pipeline/train_local.h"

#include <stdio.h>
#include <stdlib.h>

#define NL 6
#define T 64
#define V 512
#define MB 8
static const pl_cpu_tdims_t g_d = {
    .hidden = 256, .inter = 704, .n_heads = 8, .n_kv = 4, .head_dim = 32, .eps = 1e-5f};

static inline float *s_rand(size_t n, float scale, float off, uint64_t seed)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++)
        p[i] = off + scale * (pl_rand_uniform(seed, i) - 0.5f);
    return p;
}

/* The layers at random (norms near 1), the RoPE frequencies in inv[16], each layer tensor's
 * size in sz[9], and the best of 7 runs of layer 0's forward (*tf), input (*tb) and weight (*tw)
 * backward over T tokens. False when the stash cannot be made. */
static inline bool s_train_layers(pl_cpu_tlayer_t layers[NL], double inv[16], size_t sz[9],
                                  double *tf, double *tb, double *tw)
{
    size_t H = (size_t)g_d.hidden;
    pl_cpu_tlayer_t grad;
    pl_cpu_tlayer_sizes(&g_d, sz);
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < 9; i++)
            *pl_cpu_tlayer_field(&layers[l], i) = (i == 0 || i == 5)
                                                      ? s_rand(sz[i], 0.1f, 1.0f, 100 + l * 9 + i)
                                                      : s_rand(sz[i], 0.1f, 0.0f, 100 + l * 9 + i);
    for (int i = 0; i < 9; i++)
        *pl_cpu_tlayer_field(&grad, i) = calloc(sz[i], sizeof(float));
    pl_model_config_t mc = {.head_dim = g_d.head_dim, .rope_theta = 10000.0f};
    pl_model_rope_inv_freq(&mc, inv);
    int pos[T];
    for (int i = 0; i < T; i++)
        pos[i] = i;
    float ct[T * 16], st[T * 16], *x = s_rand(T * H, 2.0f, 0, 1), *y = malloc(T * H * 4);
    pl_cpu_rope_table(inv, 16, pos, T, ct, st);
    pl_cpu_tstash_t *sh = NULL;
    if (pl_cpu_tstash_create(&g_d, T, false, &sh) != PL_OK)
        return false;
    *tf = *tb = *tw = 1e30;
    for (int r = 0; r < 7; r++) {
        double t0 = pl_now();
        pl_cpu_tlayer_forward(&g_d, &layers[0], ct, st, x, sh, y);
        double t1 = pl_now();
        pl_cpu_tlayer_backward_input(&g_d, &layers[0], ct, st, sh, y, y);
        double t2 = pl_now();
        pl_cpu_tlayer_backward_weight(&g_d, sh, &grad);
        double t3 = pl_now();
        *tf = PL_MIN(*tf, t1 - t0), *tb = PL_MIN(*tb, t2 - t1), *tw = PL_MIN(*tw, t3 - t2);
    }
    return true;
}

/* The rest of the weights at random around `layers`, and one step's tokens (MB x (T + 1)). */
static inline int32_t *s_train_weights(pl_cpu_tlayer_t *layers, pl_train_weights_t *w)
{
    size_t H = (size_t)g_d.hidden;
    float *embed = s_rand(V * H, 1.0f, 0, 7), *norm = s_rand(H, 0.1f, 1.0f, 8);
    float *head = s_rand(V * H, 0.1f, 0, 9);
    *w = (pl_train_weights_t){embed, layers, norm, head};
    int32_t *tok = malloc(sizeof(int32_t) * MB * (T + 1));
    for (int i = 0; i < MB * (T + 1); i++)
        tok[i] = (int32_t)((i * 7 + i / 5) % V);
    return tok;
}

#endif
