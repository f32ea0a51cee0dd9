/* Training on the CPU: one layer's F, B and W times beside OpenBLAS sgemm, then per schedule on
 * 1, 2 and 3 stages the predicted step time, bubble and stash per stage, and the in-process
 * trainer's measured step (one thread, stages run in turn: it shows schedule overhead only). */
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_head.h"
#include "backends/cpu/cpu_train_layer.h"
/* only its sgemm reference is used here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "bench/bench_ref.h"
#include "common/util.h"
#include "model/model.h"
#include "pipeline/train_local.h"
#include "scheduler/train_sched.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#define NL 6
#define T 64
#define V 512
#define MB 8
static const pl_cpu_tdims_t g_d = {
    .hidden = 256, .inter = 704, .n_heads = 8, .n_kv = 4, .head_dim = 32, .eps = 1e-5f};

static float *s_rand(size_t n, float scale, float off, uint64_t seed)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p && i < n; i++)
        p[i] = off + scale * (pl_rand_uniform(seed, i) - 0.5f);
    return p;
}

int main(void)
{
    openblas_set_num_threads(1);
    size_t sz[9], H = (size_t)g_d.hidden;
    pl_cpu_tlayer_sizes(&g_d, sz);
    pl_cpu_tlayer_t layers[NL], grad;
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < 9; i++)
            *pl_cpu_tlayer_field(&layers[l], i) = (i == 0 || i == 5)
                                                      ? s_rand(sz[i], 0.1f, 1.0f, 100 + l * 9 + i)
                                                      : s_rand(sz[i], 0.1f, 0.0f, 100 + l * 9 + i);
    for (int i = 0; i < 9; i++)
        *pl_cpu_tlayer_field(&grad, i) = calloc(sz[i], sizeof(float));
    pl_model_config_t mc = {.head_dim = g_d.head_dim, .rope_theta = 10000.0f};
    double inv[16];
    pl_model_rope_inv_freq(&mc, inv);
    int pos[T];
    for (int i = 0; i < T; i++)
        pos[i] = i;
    float ct[T * 16], st[T * 16], *x = s_rand(T * H, 2.0f, 0, 1), *y = malloc(T * H * 4);
    pl_cpu_rope_table(inv, 16, pos, T, ct, st);
    pl_cpu_tstash_t *sh = NULL;
    if (pl_cpu_tstash_create(&g_d, T, false, &sh) != PL_OK)
        return 1;
    double tf = 1e30, tb = 1e30, tw = 1e30;
    for (int r = 0; r < 7; r++) {
        double t0 = pl_now();
        pl_cpu_tlayer_forward(&g_d, &layers[0], ct, st, x, sh, y);
        double t1 = pl_now();
        pl_cpu_tlayer_backward_input(&g_d, &layers[0], ct, st, sh, y, y);
        double t2 = pl_now();
        pl_cpu_tlayer_backward_weight(&g_d, sh, &grad);
        double t3 = pl_now();
        tf = PL_MIN(tf, t1 - t0), tb = PL_MIN(tb, t2 - t1), tw = PL_MIN(tw, t3 - t2);
    }
    double dense = 2.0 * T * (double)(sz[1] + sz[2] + sz[3] + sz[4] + sz[6] + sz[7] + sz[8]);
    double ref = s_sgemm_time(T, g_d.inter, g_d.hidden, 5);
    double ref_gf = 2.0 * T * g_d.inter * g_d.hidden / ref / 1e9;
    printf("one layer (hidden %d, inter %d, %d tokens), 1 thread; shared machine, noisy:\n",
           g_d.hidden, g_d.inter, T);
    printf(
        "  F %.3f ms (%.2f GFLOP/s dense)  B %.3f ms  W %.3f ms  | sgemm %dx%dx%d %.2f GFLOP/s\n",
        tf * 1e3, dense / tf / 1e9, tb * 1e3, tw * 1e3, T, g_d.inter, g_d.hidden, ref_gf);

    float *embed = s_rand(V * H, 1.0f, 0, 7), *norm = s_rand(H, 0.1f, 1.0f, 8);
    float *head = s_rand(V * H, 0.1f, 0, 9);
    pl_train_weights_t w = {embed, layers, norm, head};
    int32_t *tok = malloc(sizeof(int32_t) * MB * (T + 1));
    for (int i = 0; i < MB * (T + 1); i++)
        tok[i] = (int32_t)((i * 7 + i / 5) % V);
    pl_adamw_cfg_t opt = pl_adamw_cfg_default();
    pl_train_local_cfg_t c = {.dims = g_d,
                              .n_layers = NL,
                              .vocab = V,
                              .seq_len = T,
                              .n_mb = MB,
                              .inv_freq = inv,
                              .opt = opt};
    static const int splits[3][3] = {{6}, {3, 3}, {2, 2, 2}};
    double one_stage_meas = 0, one_stage_pred = 0;
    printf("\n%-6s %-6s %12s %12s %8s %12s %12s  %s\n", "stages", "sched", "pred step ms",
           "pred ratio", "bubble", "meas step ms", "meas ratio", "peak stash MB per stage");
    for (int S = 1; S <= 3; S++)
        for (int k = 0; k < PL_TRAIN_KIND_COUNT; k++) {
            pl_tsched_times_t times[3];
            for (int s = 0; s < S; s++) /* the head is small beside the layers: not charged */
                times[s] = (pl_tsched_times_t){splits[S - 1][s] * tf, splits[S - 1][s] * tb,
                                               splits[S - 1][s] * tw};
            pl_train_ops_t *ops = NULL;
            pl_tsched_pred_t p;
            pl_train_local_t *tl = NULL;
            if (pl_tsched_build((pl_train_kind_t)k, S, MB, times, 0, &ops) != PL_OK ||
                pl_tsched_predict(ops, times, 0, &p) != PL_OK ||
                pl_train_local_create(&c, &w, splits[S - 1], S, ops, &tl) != PL_OK) {
                fprintf(stderr, "bench_train: %s\n", pl_error_msg());
                return 1;
            }
            pl_train_step_t r;
            double best = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                double t0 = pl_now();
                if (pl_train_local_step(tl, tok, &r) != PL_OK)
                    return 1;
                best = PL_MIN(best, pl_now() - t0);
            }
            if (S == 1 && k == 0)
                one_stage_meas = best, one_stage_pred = p.makespan;
            printf("%-6d %-6s %12.2f %12.2f %8.3f %12.2f %12.2f  ", S,
                   pl_train_kind_name((pl_train_kind_t)k), p.makespan * 1e3,
                   one_stage_pred / p.makespan, p.bubble, best * 1e3, one_stage_meas / best);
            for (int s = 0; s < S; s++)
                printf("%s%.1f", s ? " / " : "", r.peak_stash_bytes[s] / 1e6);
            printf("\n");
            pl_train_local_destroy(&tl);
            pl_train_ops_destroy(&ops);
        }
    printf("\npred ratio: predicted tokens/s against 1 stage with one core per stage; meas: the "
           "in-process trainer on one core (1.0 = no schedule overhead)\n");
    return 0;
}
