/* Where bench_decode's prefill and decode time goes: the backend's kernels other than the matrix
 * products, called as the CPU stage calls them (one sequence of T tokens; one decode token), and
 * the table of a batch-1 decode step's parts beside the step measured whole. */
#ifndef PL_BENCH_BENCH_PARTS_H
#define PL_BENCH_BENCH_PARTS_H

#include "backends/cpu/cpu_ops.h"
#include "common/util.h"
#include "model/model.h"
#include "model/sample.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double att_s, swiglu_s, norm_s, rope_s; /* all layers, best of reps */
} s_parts_t;

/* The parts of a T-token prefill outside the matrix products, attention on the pool as a stage
 * with weights as stored runs it (pl_cpu_attention_seq), the rest on the caller. */
static pl_status_t s_prefill_parts(const pl_model_config_t *c, int T, int reps, pl_cpu_pool_t *pool,
                                   s_parts_t *r)
{
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t TI = (size_t)T * c->intermediate, half = (size_t)c->head_dim / 2;
    size_t sizes[] = {T * q_dim,
                      T * kv_dim,
                      T * kv_dim,
                      T * q_dim,
                      (size_t)pl_cpu_pool_size(pool) * PL_CPU_ATT_ROWS * T,
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
            pl_cpu_attention_seq(pool, buf[0], T, 0, buf[1], buf[2], c->n_heads, c->n_kv_heads,
                                 c->head_dim, buf[4], buf[3]);
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

/* One decode token's work outside the matrix products, over all layers, in seconds (best of
 * reps): the stage's own parts, then what the pipeline does once per token beside it. */
typedef struct {
    double norm_s, rope_s, kv_s, att_s, swiglu_s, add_s; /* the stage, all layers */
    double alloc_s;   /* malloc + free of one quantized activation row, per job (x jobs) */
    double greedy_s, sample_s; /* pl_sample over the vocabulary: argmax; temperature/top-k/p */
} s_dparts_t;

/* The token at position pos (attention over pos + 1 cache rows) with the pool's threads, as
 * the stage runs it; `x_bytes` the size of a quantized activation row (0: none). */
static pl_status_t s_decode_parts(const pl_model_config_t *c, int pos, pl_cpu_pool_t *pool,
                                  size_t x_bytes, int reps, s_dparts_t *r)
{
    size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t ctx = (size_t)pos + 1, half = (size_t)c->head_dim / 2, V = (size_t)c->vocab;
    size_t sizes[] = {q_dim,    kv_dim,           ctx * kv_dim, ctx * kv_dim, q_dim,
                      (size_t)PL_CPU_ATT_ROWS * ctx, c->intermediate, c->intermediate,
                      c->hidden, c->hidden, half, half, 2 * V, V};
    float *buf[PL_ARRAY_SIZE(sizes)] = {0};
    double *inv = malloc(half * sizeof(double));
    pl_status_t st = inv ? PL_OK : pl_error(PL_ERR_NOMEM, "decode part buffers");
    pl_sample_params_t greedy = {.temperature = 0}, temp = {.temperature = 0.8f, .top_k = 40,
                                                          .top_p = 0.95f, .seed = 1};
    int sink = 0;

    for (size_t i = 0; i < PL_ARRAY_SIZE(sizes) && !st; i++) {
        if (!(buf[i] = malloc(sizes[i] * sizeof(float))))
            st = pl_error(PL_ERR_NOMEM, "decode part buffers");
        for (size_t j = 0; !st && j < sizes[i]; j++)
            buf[i][j] = pl_rand_uniform(30 + i, j) - 0.5f;
    }
    if (!st)
        pl_model_rope_inv_freq(c, inv);
    *r = (s_dparts_t){1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    for (int rep = 0; rep <= reps && !st; rep++) {
        double p[9] = {0}, t0;
        pl_cpu_att_row_t row = {.q = buf[0], .k = buf[2], .v = buf[3], .out = buf[4], .pos = pos};
        t0 = pl_now();
        pl_cpu_rope_table(inv, (int)half, &pos, 1, buf[10], buf[11]);
        p[1] += pl_now() - t0;
        for (int l = 0; l < c->n_layers; l++) {
            t0 = pl_now();
            pl_cpu_rmsnorm(buf[8], buf[9], 1, c->hidden, c->rms_eps, buf[9]);
            p[0] += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_rope_apply(buf[0], 1, (int)q_dim, c->n_heads, c->head_dim, buf[10], buf[11]);
            pl_cpu_rope_apply(buf[1], 1, (int)kv_dim, c->n_kv_heads, c->head_dim, buf[10],
                              buf[11]);
            p[1] += pl_now() - t0;
            t0 = pl_now();
            memcpy(buf[2] + (size_t)pos * kv_dim, buf[1], kv_dim * sizeof(float));
            memcpy(buf[3] + (size_t)pos * kv_dim, buf[1], kv_dim * sizeof(float));
            p[2] += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_attention_decode(pool, &row, 1, c->n_heads, c->n_kv_heads, c->head_dim, buf[5],
                                    ctx);
            p[3] += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_add(buf[8], buf[9], (size_t)c->hidden);
            p[5] += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_rmsnorm(buf[8], buf[9], 1, c->hidden, c->rms_eps, buf[9]);
            p[0] += pl_now() - t0;
            memcpy(buf[6], buf[7], (size_t)c->intermediate * sizeof(float)); /* fresh input */
            t0 = pl_now();
            pl_cpu_swiglu(buf[6], buf[7], (size_t)c->intermediate);
            p[4] += pl_now() - t0;
            t0 = pl_now();
            pl_cpu_add(buf[8], buf[9], (size_t)c->hidden);
            p[5] += pl_now() - t0;
            for (size_t i = 0; i < (size_t)c->hidden; i++) /* keep x at its size */
                buf[8][i] *= 0.5f;
        }
        t0 = pl_now();
        pl_cpu_rmsnorm(buf[8], buf[9], 1, c->hidden, c->rms_eps, buf[9]); /* the final norm */
        p[0] += pl_now() - t0;
        t0 = pl_now();
        for (int j = 0; j < 4 * c->n_layers + 1 && x_bytes; j++) { /* one per product job */
            unsigned char *m = malloc(x_bytes);
            if (m)
                m[0] = (unsigned char)j, sink += m[x_bytes / 2] != 0;
            free(m);
        }
        p[6] = pl_now() - t0;
        t0 = pl_now();
        sink += pl_sample(buf[13], c->vocab, &greedy, 0, (uint64_t)rep, buf[12]);
        p[7] = pl_now() - t0;
        t0 = pl_now();
        sink += pl_sample(buf[13], c->vocab, &temp, 0, (uint64_t)rep, buf[12]);
        p[8] = pl_now() - t0;
        if (rep == 0) /* warm-up */
            continue;
        double *out[9] = {&r->norm_s,  &r->rope_s,  &r->kv_s,     &r->att_s,   &r->swiglu_s,
                          &r->add_s,   &r->alloc_s, &r->greedy_s, &r->sample_s};
        for (int i = 0; i < 9; i++)
            *out[i] = PL_MIN(*out[i], p[i]);
    }
    for (size_t i = 0; i < PL_ARRAY_SIZE(sizes); i++)
        free(buf[i]);
    free(inv);
    (void)sink;
    return st;
}

/* The thread counts one run compares, at most. */
#define S_MAX_TLIST 4

/* One decode cell: best seconds per step in wall time and in CPU time per thread (process CPU
 * seconds / threads, spinning included), and the read reference timed in the same rounds (one
 * read of its buffer before each round of steps), best of each. */
typedef struct {
    double step_s, step_cpu, ref_s, ref_cpu;
    /* the pools' counters per timed step (pl_cpu_pool_stats) */
    double jobs, wakes, waits, sleeps, wait_s;
} s_cell_t;

/* Where a batch-1 decode step goes: the parts outside the matrix products timed alone (as the
 * stage calls them, at the cells' middle position), the pool's barrier waits counted in the
 * stage's own steps, and the products as the rest; cell[t] the batch-1 cell of threads[t]. */
static void s_print_parts(const pl_model_config_t *c, int pos, int n_threads, const int *threads,
                          const s_dparts_t *dparts, const s_cell_t *cell)
{
    int L = c->n_layers;
    printf("| a batch-1 decode step, position %d: us per token (share of the step, wall) |", pos);
    for (int t = 0; t < n_threads; t++)
        printf(" %d thread(s) |", threads[t]);
    printf("\n| --- |");
    for (int t = 0; t < n_threads; t++)
        printf(" ---: |");
    printf("\n");
    struct {
        const char *pre, *post;
        int count;
        size_t off;
    } rows[] = {
        {"rmsnorm (", " rows: 2 a layer + the final one)", 2 * L + 1,
         offsetof(s_dparts_t, norm_s)},
        {"rope (the table once, q and k in ", " layers)", L, offsetof(s_dparts_t, rope_s)},
        {"kv cache writes (", " layers)", L, offsetof(s_dparts_t, kv_s)},
        {"attention (", " layers, on the pool)", L, offsetof(s_dparts_t, att_s)},
        {"swiglu (", " layers)", L, offsetof(s_dparts_t, swiglu_s)},
        {"residual adds (", ")", 2 * L, offsetof(s_dparts_t, add_s)},
        {"activation buffers of the quantized products (", " malloc + free)", 4 * L + 1,
         offsetof(s_dparts_t, alloc_s)}};
    double sum[S_MAX_TLIST] = {0};
    for (size_t i = 0; i < PL_ARRAY_SIZE(rows); i++) {
        printf("| %s%d%s |", rows[i].pre, rows[i].count, rows[i].post);
        for (int t = 0; t < n_threads; t++) {
            double v = *(const double *)((const char *)&dparts[t] + rows[i].off);
            sum[t] += v;
            printf(" %.1f (%.1f%%) |", v * 1e6, 100 * v / cell[t].step_s);
        }
        printf("\n");
    }
    printf("| the pool: jobs per step, and the caller's waits for a worker after its last chunk "
           "(the barrier): waits, us in all |");
    for (int t = 0; t < n_threads; t++) {
        const s_cell_t *cl = &cell[t];
        sum[t] += cl->wait_s;
        printf(" %.0f jobs, %.1f waits, %.1f (%.1f%%) |", cl->jobs, cl->waits, cl->wait_s * 1e6,
               100 * cl->wait_s / cl->step_s);
    }
    printf("\n| the pool: workers woken from sleep, waits that slept, per step |");
    for (int t = 0; t < n_threads; t++)
        printf(" %.2f woken, %.2f slept |", cell[t].wakes, cell[t].sleeps);
    printf("\n| **all of the above** |");
    for (int t = 0; t < n_threads; t++)
        printf(" **%.1f (%.1f%%)** |", sum[t] * 1e6, 100 * sum[t] / cell[t].step_s);
    printf("\n| the matrix products and the rest (the step less the above) |");
    for (int t = 0; t < n_threads; t++)
        printf(" %.1f (%.1f%%) |", (cell[t].step_s - sum[t]) * 1e6,
               100 * (cell[t].step_s - sum[t]) / cell[t].step_s);
    printf("\n| beside the stage, once per token: pl_sample greedy; temperature 0.8, top-k 40, "
           "top-p 0.95 (vocab %d) |",
           c->vocab);
    for (int t = 0; t < n_threads; t++)
        printf(" %.1f; %.1f |", dparts[t].greedy_s * 1e6, dparts[t].sample_s * 1e6);
    printf("\n\n");
}

#endif
