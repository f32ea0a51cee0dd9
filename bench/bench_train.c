/* Training on the CPU: one layer's F, B and W times beside OpenBLAS sgemm, then per schedule on
 * 1, 2 and 3 stages the predicted step time, bubble and stash per stage, and the in-process
 * trainer's measured step (one thread, stages run in turn: it shows schedule overhead only). */
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
#include "pipeline/train_local.h"
#include "scheduler/train_sched.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>


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
    double dense = 2.0 * T * (double)(sz[1] + sz[2] + sz[3] + sz[4] + sz[6] + sz[7] + sz[8]);
    double ref = s_sgemm_time(T, g_d.inter, g_d.hidden, 5);
    double ref_gf = 2.0 * T * g_d.inter * g_d.hidden / ref / 1e9;
    printf("one layer (hidden %d, inter %d, %d tokens), 1 thread; shared machine, noisy:\n",
           g_d.hidden, g_d.inter, T);
    printf(
        "  F %.3f ms (%.2f GFLOP/s dense)  B %.3f ms  W %.3f ms  | sgemm %dx%dx%d %.2f GFLOP/s\n",
        tf * 1e3, dense / tf / 1e9, tb * 1e3, tw * 1e3, T, g_d.inter, g_d.hidden, ref_gf);

    pl_train_weights_t w;
    int32_t *tok = s_train_weights(layers, &w);
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
