/* Uneven prefill chunks (TeraPipe, Li et al. 2021): a long prompt's pieces, cut so that a piece
 * costs about the same wherever it lies although attention grows with its position, and the
 * predicted prefill time of any schedule through the stages in order. */
#include "scheduler/plan_impl.h"

#include <math.h>
#include <stdlib.h>

/* Time of one piece of `len` tokens per sequence after `start` (of the longest prompt, P_max;
 * shorter prompts take the share p_avg / p_max of every term) on stage [a, e) of device d
 * sending to device n (-1: none), last: the piece that ends the prompts (the LM head runs on it
 * alone). As pl_sched_prefill_call for one chunk, its attention and KV those of its place. */
static void s_piece(const pl_sched_eval_t *ev, int d, int a, int e, int n, double start, double len,
                    bool last, double *comp_s, double *xfer_s)
{
    double q = ev->p_max > 0 ? (double)ev->p_avg / ev->p_max : 1.0;
    double w = ev->pw[e] - ev->pw[a], f = ev->pf[e] - ev->pf[a];
    double at = ev->pa[e] - ev->pa[a], k = ev->pk[e] - ev->pk[a];
    double tok = ev->b * q * len, pairs = ev->b * q * (len * start + len * (len + 1.0) / 2.0);
    double fp = tok * f, fa = pairs * at;
    double bp = w + 2.0 * tok * k + ev->b * q * start * k; /* its own KV, the prefix read */
    if (a == 0)
        bp += tok * ev->embed_tok;
    if (e == ev->L && last) {
        fp += ev->pre_headf;
        bp += ev->head_w;
    }
    bool rows = ev->inv_dec[d] > 0 && q * len < PL_SCHED_ROW_TOKENS;
    double fl = pl_sched_pre_flop_s(ev, d, rows, fp, fa, ev->b, w);
    *comp_s = pl_sched_phase(rows, fl, bp * ev->inv_bw[d]);
    if (n < 0) {
        *xfer_s = 0.0;
    } else {
        size_t i = (size_t)d * ev->n_dev + n;
        *xfer_s = ev->lat[i] + tok * ev->act_tok * ev->inv_link[i];
    }
}

/* The most pieces times stages a prediction's flow shop runs (M K S): beyond, the planner keeps
 * the equal chunks and their closed-form prediction (plan.h), which the searches can afford. */
#define S_FLOW_MAX 4e6

static int s_stage_end(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int i)
{
    return i + 1 < s->n_stages ? s->first[i + 1] : ev->L;
}

/* The slowest stage's time (transfer included) of piece [x0, x1); last: it ends the prompts. */
static double s_piece_max(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int x0, int x1,
                          bool last)
{
    double m = 0.0;
    for (int i = 0; i < s->n_stages; i++) {
        double c, x;
        int next = i + 1 < s->n_stages ? s->device[i + 1] : -1;
        s_piece(ev, s->device[i], s->first[i], s_stage_end(ev, s, i), next, x0, x1 - x0, last, &c,
                &x);
        m = c + x > m ? c + x : m;
    }
    return m;
}

/* The flow shop over pieces bounded by x[0..K] (x[0] = 0, x[K] = P_max): M microbatches of K
 * pieces each, in that order, through the stages; a stage starts a piece once it finished the
 * one before and the stage before sent it. NAN when out of memory. */
static double s_flow(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M, const int *x,
                     int K, double *busy_max_p)
{
    int S = s->n_stages;
    double *comp = malloc(sizeof(double) * (size_t)S * (size_t)K * 2 + sizeof(double) * S);
    if (!comp)
        return NAN;
    double *xfer = comp + (size_t)S * K, *free_at = xfer + (size_t)S * K, busy_max = 0.0;
    for (int i = 0; i < S; i++) {
        int next = i + 1 < S ? s->device[i + 1] : -1;
        double busy = 0.0;
        for (int k = 0; k < K; k++) {
            size_t at = (size_t)i * K + k;
            s_piece(ev, s->device[i], s->first[i], s_stage_end(ev, s, i), next, x[k],
                    x[k + 1] - x[k], k == K - 1, &comp[at], &xfer[at]);
            busy += comp[at];
        }
        busy_max = M * busy > busy_max ? M * busy : busy_max;
        free_at[i] = 0.0;
    }
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double ready = 0.0;
            for (int i = 0; i < S; i++) {
                size_t at = (size_t)i * K + k;
                double begin = ready > free_at[i] ? ready : free_at[i];
                free_at[i] = begin + comp[at];
                ready = free_at[i] + xfer[at];
            }
        }
    double t = free_at[S - 1];
    free(comp);
    if (busy_max_p)
        *busy_max_p = busy_max;
    return t;
}

double pl_sched_chunks_time(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M,
                            const pl_job_chunks_t *c, double *busy_max_p)
{
    int P = ev->p_max, K = pl_job_chunks_count(c, P);
    int *x = malloc(sizeof(int) * ((size_t)K + 1));
    if (!x)
        return NAN;
    x[0] = 0;
    for (int k = 0; k < K; k++)
        x[k + 1] = x[k] + pl_job_chunks_next(c, P, x[k]);
    double t = s_flow(ev, s, M < ev->R ? M : ev->R, x, K, busy_max_p);
    free(x);
    return t;
}

/* Single boundaries of x[0..K] moved one grid point (g[] the grid, idx[] their grid indices)
 * while the predicted time falls; returns the time of the result. */
static double s_refine(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M, const int *g,
                       int *idx, int *x, int K, int lo, int hi, int first_hi, double t)
{
    for (int round = 0; round < 4 * K; round++) {
        bool better = false;
        for (int b = 1; b < K; b++)
            for (int dir = -1; dir <= 1; dir += 2) {
                int j = idx[b] + dir, x_old = x[b];
                if (j <= idx[b - 1] || j >= idx[b + 1] || g[j] - x[b - 1] < lo ||
                    g[j] - x[b - 1] > (b == 1 ? first_hi : hi) || x[b + 1] - g[j] < lo ||
                    x[b + 1] - g[j] > hi)
                    continue;
                x[b] = g[j];
                double u = s_flow(ev, s, M, x, K, NULL);
                if (u < t * (1.0 - 1e-9)) {
                    t = u;
                    idx[b] = j;
                    better = true;
                } else {
                    x[b] = x_old;
                }
            }
        if (!better)
            break;
    }
    return t;
}

double pl_sched_chunks_plan(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M, int K,
                            int lo, int hi, int first_hi, pl_job_chunks_t *out)
{
    int P = ev->p_max;
    out->n = 0;
    if (K < 2 || K > PL_JOB_MAX_CHUNKS || lo < 1 || hi < lo || first_hi < lo ||
        (int64_t)K * lo > P || (int64_t)(K - 1) * hi + (first_hi < hi ? first_hi : hi) < P)
        return INFINITY;
    M = M < ev->R ? M : ev->R;
    /* the grid: P_max and every step of `step` tokens back from it, then 0 */
    /* at most PL_SCHED_GRID_MAX points, fewer for many stages (the table holds N^2 S pieces) */
    int n_max = (int)sqrt((double)(1 << 20) / s->n_stages);
    n_max = n_max < PL_SCHED_GRID_MAX ? n_max : PL_SCHED_GRID_MAX;
    int step = (P + n_max - 1) / n_max;
    step = step > PL_SCHED_GRID_TOKENS ? step : PL_SCHED_GRID_TOKENS;
    int G = (P - 1) / step, N = G + 2; /* points 0, P - G step, ..., P - step, P */
    int *g = malloc(sizeof(int) * ((size_t)N + 2 * ((size_t)K + 1) + (size_t)N * (K + 1)));
    double *cost = malloc(sizeof(double) * ((size_t)N * N + (size_t)N * (K + 1)));
    double t = INFINITY;
    if (!g || !cost)
        goto out;
    int *idx = g + N, *x = idx + K + 1, *par = x + K + 1;
    double *D = cost + (size_t)N * N;
    g[0] = 0;
    for (int m = G; m >= 0; m--)
        g[G + 1 - m] = P - m * step;
    /* TeraPipe's objective for K pieces: the shortest slowest piece (a DP over the last
     * boundary), within [lo, hi] tokens each */
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            int len = g[j] - g[i];
            cost[(size_t)i * N + j] = len < lo || len > (i == 0 ? first_hi : hi)
                                          ? INFINITY
                                          : s_piece_max(ev, s, g[i], g[j], j == N - 1);
        }
    for (size_t i = 0; i < (size_t)N * (K + 1); i++)
        D[i] = INFINITY;
    D[0] = 0.0;
    for (int k = 1; k <= K; k++)
        for (int j = 1; j < N; j++)
            for (int i = 0; i < j; i++) {
                double v = D[(size_t)(k - 1) * N + i], c = cost[(size_t)i * N + j];
                v = v > c ? v : c;
                if (v < D[(size_t)k * N + j]) {
                    D[(size_t)k * N + j] = v;
                    par[(size_t)k * N + j] = i;
                }
            }
    if (!isfinite(D[(size_t)K * N + N - 1]))
        goto out;
    idx[K] = N - 1;
    for (int k = K; k > 0; k--)
        idx[k - 1] = par[(size_t)k * N + idx[k]];
    for (int k = 0; k <= K; k++)
        x[k] = g[idx[k]];
    t = s_flow(ev, s, M, x, K, NULL);
    /* the stages differ (the embedding, the head on the last piece, their layers): the flow
     * shop's own time decides the last moves, where it is small enough to evaluate often */
    if ((int64_t)K * s->n_stages <= 4096)
        t = s_refine(ev, s, M, g, idx, x, K, lo, hi, first_hi, t);
    out->n = K;
    for (int k = 0; k < K; k++)
        out->len[k] = x[k + 1] - x[k];
out:
    free(g);
    free(cost);
    return isnan(t) ? INFINITY : t;
}

void pl_sched_prefill_sched(const pl_sched_eval_t *ev, const pl_sched_split_t *s,
                            pl_sched_pred_t *p)
{
    pl_job_chunks_t *sched = &p->sched;
    sched->n = 0;
    p->t_even = 0.0;
    if (ev->req_chunk > 0 || p->chunk <= 0 || p->K < 2)
        return; /* the job's own chunk, or whole prompts: today's prediction stands */
    if ((double)p->M * p->K * s->n_stages > S_FLOW_MAX)
        return; /* a flow shop too large to run at every prediction: the equal chunks' formula */
    pl_job_chunks_t even = {.n = 1, .len = {p->chunk}}, un;
    double busy, t = pl_sched_chunks_time(ev, s, p->M, &even, &busy);
    if (!isfinite(t))
        return;
    p->t_even = t;
    int lo = (PL_SCHED_CHUNK_MIN + ev->b - 1) / ev->b;
    lo = lo > PL_SCHED_CHUNK_MIN_TOKENS ? lo : PL_SCHED_CHUNK_MIN_TOKENS;
    lo = lo < p->chunk ? lo : p->chunk;
    /* the first piece no larger than the equal chunk, so that the later stages start no later
     * than they would: the last stage, which also samples, measured a few percent slower per
     * message than the stage before it on like cores (bench_pipeline: 1.92 s against 1.87 s), and
     * then its wait for the first piece plus its own work is the whole prefill */
    double t_un = pl_sched_chunks_plan(ev, s, p->M, p->K, lo, 2 * p->chunk, p->chunk, &un);
    if (t_un < t) {
        *sched = un;
        t = pl_sched_chunks_time(ev, s, p->M, &un, &busy);
    }
    p->prefill_time = t;
    p->prefill_tok_s = t > 0 ? (double)p->R * ev->p_avg / t : 0.0;
    p->bubble_pre = t > 0 && busy < t ? 1.0 - busy / t : 0.0;
    p->wave_time = p->prefill_time + (ev->n_new - 1) * p->decode_period;
    p->job_time = p->waves * p->wave_time;
}
