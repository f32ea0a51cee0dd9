/* Distributed training over UCX: 1, 2 and 3 stages, each a thread with its own UCX worker and one
 * OpenBLAS thread (as one pipeld daemon per core would run them), per schedule: tokens/s against
 * 1 stage, the measured bubble (1 - busy/wall per stage) beside the schedule's predicted one,
 * and each stage's measured peak stash beside the prediction. Run by bench_train_pipe.sh. */
#include "backends/cpu/cpu_blas_core.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_train_head.h"
#include "backends/cpu/cpu_train_layer.h"
/* only its sgemm reference is used here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "bench/bench_ref.h"
#include "bench/bench_train_util.h"
#include "common/util.h"
#include "model/model.h"
#include "pipeline/train_exec.h"
#include "scheduler/train_sched.h"
#include "tests/train_link_util.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS 3

typedef struct {
    int S, s, l0, l1;
    const pl_train_ops_t *sched;
    const pl_train_local_cfg_t *cfg;
    pl_train_weights_t *w;
    const int32_t *tok;
    pthread_barrier_t *bar;
    char **addr;
    pl_train_exec_step_t best; /* the step of least wall time */
    pl_status_t rc;
    char err[256];
} s_stage_t;

static void *s_stage_main(void *p)
{
    s_stage_t *a = p;
    pl_ucx_t *u = NULL;
    pl_ucx_ep_t *prev = NULL, *next = NULL;
    pl_train_exec_t *x = NULL;
    a->rc = tl_open(a->S, a->s, a->bar, a->addr, &u, &prev, &next);
    pl_train_link_t link = {.ucx = u, .prev = prev, .next = next, .job = 9, .timeout_ms = 120000};
    if (a->rc == PL_OK)
        a->rc = pl_train_exec_create(a->cfg, a->w, a->s, a->S, a->l0, a->l1, a->sched, &link, &x);
    a->best.wall_s = 1e30;
    for (int k = 0; k < REPS && a->rc == PL_OK; k++) {
        pl_train_exec_step_t r;
        if ((a->rc = pl_train_exec_step(x, a->tok, &r)) == PL_OK && r.wall_s < a->best.wall_s)
            a->best = r;
    }
    if (a->rc != PL_OK)
        snprintf(a->err, sizeof(a->err), "%s", pl_error_msg());
    tl_close(a->bar, &x, &u);
    return NULL;
}

int main(int argc, char **argv)
{
    /* on OpenBLAS's tuned kernels, as pipeld computes (it restarts this program when needed) */
    pl_cpu_blas_core_fix(argv);
    (void)argc;
    openblas_set_num_threads(1);
    size_t sz[9];
    pl_cpu_tlayer_t layers[NL];
    double inv[16], tf, tb, tw;
    if (!s_train_layers(layers, inv, sz, &tf, &tb, &tw))
        return 1;
    double ref = s_sgemm_time(T, g_d.inter, g_d.hidden, 5);
    printf("reference: sgemm %dx%dx%d %.2f GFLOP/s on 1 thread; one layer F %.2f ms, B %.2f ms, "
           "W %.2f ms\n",
           T, g_d.inter, g_d.hidden, 2.0 * T * g_d.inter * g_d.hidden / ref / 1e9, tf * 1e3,
           tb * 1e3, tw * 1e3);

    pl_train_weights_t w;
    int32_t *tok = s_train_weights(layers, &w);
    pl_train_local_cfg_t c = {.dims = g_d, .n_layers = NL, .vocab = V, .seq_len = T, .n_mb = MB,
                              .inv_freq = inv, .opt = pl_adamw_cfg_default()};
    c.opt.total_steps = 1000;
    static const int splits[3][3] = {{6}, {3, 3}, {2, 2, 2}};
    double one_tps = 0;
    printf("\n%-6s %-6s %10s %8s %-24s %-24s %s\n", "stages", "sched", "tokens/s", "vs 1",
           "bubble meas / pred", "per stage busy/wall", "peak stash MB meas / pred per stage");
    for (int S = 1; S <= 3; S++)
        for (int k = 0; k < PL_TRAIN_KIND_COUNT; k++) {
            pl_tsched_times_t times[3];
            for (int s = 0; s < S; s++)
                times[s] = (pl_tsched_times_t){splits[S - 1][s] * tf, splits[S - 1][s] * tb,
                                               splits[S - 1][s] * tw};
            pl_train_ops_t *ops = NULL;
            pl_tsched_pred_t p;
            if (pl_tsched_build((pl_train_kind_t)k, S, MB, times, 0, &ops) != PL_OK ||
                pl_tsched_predict(ops, times, 0, &p) != PL_OK) {
                fprintf(stderr, "bench_train_pipe: %s\n", pl_error_msg());
                return 1;
            }
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, (unsigned)S);
            char *addr[3] = {0};
            s_stage_t a[3];
            pthread_t th[3];
            for (int s = 0, l = 0; s < S; l += splits[S - 1][s], s++) {
                a[s] = (s_stage_t){.S = S, .s = s, .l0 = l, .l1 = l + splits[S - 1][s],
                                   .sched = ops, .cfg = &c, .w = &w, .tok = tok, .bar = &bar,
                                   .addr = addr};
                pthread_create(&th[s], NULL, s_stage_main, &a[s]);
            }
            for (int s = 0; s < S; s++)
                pthread_join(th[s], NULL);
            pthread_barrier_destroy(&bar);
            double wall = 0, busy = 0;
            for (int s = 0; s < S; s++) {
                free(addr[s]);
                if (a[s].rc != PL_OK) {
                    fprintf(stderr, "bench_train_pipe: stage %d: %s\n", s, a[s].err);
                    return 1;
                }
                wall = PL_MAX(wall, a[s].best.wall_s);
                busy += a[s].best.busy_s;
            }
            double tps = MB * T / wall;
            if (S == 1 && k == 0)
                one_tps = tps;
            char bub[32], per[64] = "", stash[128] = "";
            snprintf(bub, sizeof(bub), "%.3f / %.3f", 1.0 - busy / (S * wall), p.bubble);
            for (int s = 0, at = 0, at2 = 0; s < S; s++) {
                bool last = s == S - 1;
                double hb = last ? sizeof(float) * (double)T * (3 * g_d.hidden + V) : 0;
                double f = splits[S - 1][s] * (double)pl_cpu_tstash_f_bytes(&g_d, T, false) + hb;
                double b = splits[S - 1][s] * (double)pl_cpu_tstash_b_bytes(&g_d, T, false);
                at += snprintf(per + at, sizeof(per) - (size_t)at, "%s%.2f", s ? " " : "",
                               a[s].best.busy_s / a[s].best.wall_s);
                at2 += snprintf(stash + at2, sizeof(stash) - (size_t)at2, "%s%.1f/%.1f",
                                s ? "  " : "", a[s].best.peak_stash_bytes / 1e6,
                                pl_tsched_stash_bytes(ops, s, f, b) / 1e6);
            }
            printf("%-6d %-6s %10.0f %8.2f %-24s %-24s %s\n", S,
                   pl_train_kind_name((pl_train_kind_t)k), tps, tps / one_tps, bub, per, stash);
            pl_train_ops_destroy(&ops);
        }
    printf("\nbubble meas: 1 - sum(busy) / (S * wall) over the best of %d steps; pred: the "
           "schedule replayed with the layer times above (no link time)\n",
           REPS);
    return 0;
}
