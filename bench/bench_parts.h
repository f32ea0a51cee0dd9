/* Where bench_decode's prefill time goes: the backend's kernels other than the matrix products,
 * called as the CPU stage calls them for one sequence of T tokens, over all layers. */
#ifndef PL_BENCH_BENCH_PARTS_H
#define PL_BENCH_BENCH_PARTS_H

#include "backends/cpu/cpu_ops.h"
#include "common/util.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    double att_s, swiglu_s, norm_s, rope_s; /* all layers, best of reps */
} s_parts_t;

static pl_status_t s_prefill_parts(const pl_model_config_t *c, int T, int reps, s_parts_t *r)
{
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t TI = (size_t)T * c->intermediate, half = (size_t)c->head_dim / 2;
    size_t sizes[] = {T * q_dim,
                      T * kv_dim,
                      T * kv_dim,
                      T * q_dim,
                      (size_t)PL_CPU_ATT_ROWS * T,
                      TI,
                      TI,
                      TI,
                      (size_t)T * c->hidden,
                      T * half,
                      T * half};
    float *buf[PL_ARRAY_SIZE(sizes)] = {0};
    double *inv = malloc(half * sizeof(double));
    int *pos = malloc((size_t)T * sizeof(int));
    pl_status_t st = inv && pos ? PL_OK : pl_error(PL_ERR_NOMEM, "prefill part buffers");

    for (size_t i = 0; i < PL_ARRAY_SIZE(sizes) && !st; i++) {
        if (!(buf[i] = malloc(sizes[i] * sizeof(float))))
            st = pl_error(PL_ERR_NOMEM, "prefill part buffers");
        for (size_t j = 0; !st && j < sizes[i]; j++)
            buf[i][j] = pl_rand_uniform(10 + i, j) - 0.5f;
    }
    if (!st) { /* real rotations, so that repeated rope keeps q and k at their size */
        for (int i = 0; i < T; i++)
            pos[i] = i;
        pl_model_rope_inv_freq(c, inv);
        pl_cpu_rope_table(inv, (int)half, pos, T, buf[9], buf[10]);
    }
    r->att_s = r->swiglu_s = r->norm_s = r->rope_s = 1e30;
    for (int rep = 0; rep <= reps && !st; rep++) {
        double att = 0, sw = 0, norm = 0, rope = 0, t0;
        for (int l = 0; l < c->n_layers; l++) {
            t0 = pl_now();
            pl_cpu_rmsnorm(buf[8], buf[6], T, c->hidden, c->rms_eps, buf[8]);
            norm += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_rope_apply(buf[0], T, (int)q_dim, c->n_heads, c->head_dim, buf[9], buf[10]);
            pl_cpu_rope_apply(buf[1], T, (int)kv_dim, c->n_kv_heads, c->head_dim, buf[9], buf[10]);
            rope += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_attention(buf[0], T, 0, buf[1], buf[2], c->n_heads, c->n_kv_heads, c->head_dim,
                             buf[4], buf[3]);
            att += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_rmsnorm(buf[8], buf[6], T, c->hidden, c->rms_eps, buf[8]);
            norm += pl_now() - t0;
            memcpy(buf[5], buf[7], TI * sizeof(float)); /* swiglu works in place: fresh input */
            t0 = pl_now();
            pl_cpu_swiglu(buf[5], buf[6], TI);
            sw += pl_now() - t0;
        }
        if (rep == 0) /* warm-up */
            continue;
        r->att_s = PL_MIN(r->att_s, att);
        r->swiglu_s = PL_MIN(r->swiglu_s, sw);
        r->norm_s = PL_MIN(r->norm_s, norm);
        r->rope_s = PL_MIN(r->rope_s, rope);
    }
    for (size_t i = 0; i < PL_ARRAY_SIZE(sizes); i++)
        free(buf[i]);
    free(inv);
    free(pos);
    return st;
}

#endif
