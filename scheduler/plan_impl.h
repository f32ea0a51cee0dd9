/* Internal to scheduler/: the evaluation context's layout and the inline stage-cost kernels the
 * searches share, so every comparison uses the same floating-point expression. */
#ifndef PL_SCHEDULER_PLAN_IMPL_H
#define PL_SCHEDULER_PLAN_IMPL_H

#include "scheduler/plan.h"

struct pl_sched_eval {
    int L, n_dev;
    const pl_sched_device_t *devs; /* borrowed from the input */
    /* prefix sums over layers, L + 1 entries each */
    double *pw, *pf, *pa, *pk;
    /* edge costs */
    double embed_w, embed_tok, head_w, head_f, tied, act_tok, work_tok, logits_seq, score_pair;
    /* job */
    int n_seqs, p_avg, p_max, n_new, ctx;
    double w_pre, w_dec;
    /* batch-dependent scalars (set_batch) */
    int R, b;
    double pre_tok, pre_pos, pre_kv, dec_tok, dec_pos, dec_kv;
    double pre_headf, dec_headf, pre_embed, dec_embed;
    double pre_act, dec_act, kv_slots, work, logits;
    /* per device */
    double *inv_rate, *inv_bw, *cap;
    double *inv_dec;  /* 1 / (dec_gflops * 1e9); 0: no decode row rate (decode's at gflops) */
    double *inv_pass; /* 1 / (pass_gbps * 1e9); 0: no pass per sequence */
    double *inv_attn; /* 1 / (attn_gflops * 1e9); 0: prefill's attention at the phase's rate */
    /* per (from, to) device pair */
    double *gbps, *lat, *inv_link; /* inv_link: 1 / (gbps * 1e9) */
    unsigned char *same_host;
    /* per (device, start layer), batch-dependent: the largest end e <= L - 1 whose memory fits
     * (e == a: not even one layer), whether [a, L) fits, and the cost of [a, L) */
    int *emax;
    unsigned char *fin_ok;
    double *cost_last;
    int tables_R, tables_b; /* the batch the three tables above were built for */
    int req_chunk; /* the job's prefill_chunk (0: pl_sched_prefill_chunk chooses) */
};

/* A phase's time from its compute and memory terms: the larger, or on decode's kernels (rows)
 * the larger plus PL_SCHED_ROW_OVERLAP of the smaller (plan.h). */
static inline double pl_sched_phase(bool rows, double flop_s, double mem_s)
{
    double hi = flop_s > mem_s ? flop_s : mem_s, lo = flop_s > mem_s ? mem_s : flop_s;
    return rows ? hi + PL_SCHED_ROW_OVERLAP * lo : hi;
}

/* Compute time of prefill flops on device d: dense (products, head) and attention flops at the
 * rate of the kernels they run on (decode's rows when rows, else sgemm's), attention at its own
 * rate when the device measured one, plus `passes` sequence passes over w bytes of weights
 * (products on sgemm only). */
static inline double pl_sched_pre_flop_s(const struct pl_sched_eval *ev, int d, bool rows,
                                         double dense, double attn, double passes, double w)
{
    double ir = rows ? ev->inv_dec[d] : ev->inv_rate[d], ia = ev->inv_attn[d];
    double t = ia > 0 ? dense * ir + attn * ia : (dense + attn) * ir;
    return rows ? t : t + passes * w * ev->inv_pass[d];
}

/* Prefill messages per microbatch for prompt chunks of `chunk` tokens: ceil(P_max / chunk),
 * 1 when chunk <= 0 or the prompts are no longer. */
int pl_sched_chunks(const struct pl_sched_eval *ev, int chunk);

/* One prefill message of stage [a, e) on device d sending to device n (-1: the last stage):
 * a microbatch's prefill cut into K chunks, the chunks taken as equal (1/K of its
 * tokens, attention and activations), each reading the stage's weights once plus its share of
 * the KV cache so far. *flop_s and *mem_s are the two terms (compute with its weight passes, or
 * on decode's kernels *rows_p), *comp_s their combination (pl_sched_phase), *xfer_s the send.
 * With one chunk *comp_s + *xfer_s is the stage's prefill time. */
void pl_sched_prefill_call(const struct pl_sched_eval *ev, int d, int a, int e, int n, int K,
                           double *flop_s, double *mem_s, bool *rows_p, double *comp_s,
                           double *xfer_s);

/* Set R and b without rebuilding the per-(device, start) tables: enough for predictions and
 * memory checks of a given split, not for the searches. */
void pl_sched_eval_set_batch_light(struct pl_sched_eval *ev, int resident, int mb_size);

/* Whether the searches' tables match the current batch. */
static inline bool pl_sched_tables_ok(const struct pl_sched_eval *ev)
{
    return ev->tables_R == ev->R && ev->tables_b == ev->b;
}

/* The roofline part of a stage's objective cost (no transfer). */
static inline double pl_sched_comp(const struct pl_sched_eval *ev, int d, int a, int e)
{
    double w = ev->pw[e] - ev->pw[a], f = ev->pf[e] - ev->pf[a];
    double at = ev->pa[e] - ev->pa[a], k = ev->pk[e] - ev->pk[a];
    double fp = ev->pre_tok * f, fa = ev->pre_pos * at, fd = ev->dec_tok * f + ev->dec_pos * at;
    double bp = w + ev->pre_kv * k, bd = w + ev->dec_kv * k;
    if (a == 0) {
        bp += ev->pre_embed;
        bd += ev->dec_embed;
    }
    if (e == ev->L) {
        fp += ev->pre_headf;
        fd += ev->dec_headf;
        bp += ev->head_w;
        bd += ev->head_w;
    }
    double ir = ev->inv_rate[d], ib = ev->inv_bw[d], idr = ev->inv_dec[d];
    bool rows = idr > 0 && ev->p_avg < PL_SCHED_ROW_TOKENS; /* short prompts: decode's kernels */
    double cp = pl_sched_pre_flop_s(ev, d, rows, fp, fa, ev->b, w);
    double tp = pl_sched_phase(rows, cp, bp * ib);
    double td = pl_sched_phase(idr > 0, fd * (idr > 0 ? idr : ir), bd * ib);
    return ev->w_pre * tp + ev->w_dec * td;
}

/* Prefill and decode transfer times of one microbatch from device d to device n. */
static inline double pl_sched_xpre(const struct pl_sched_eval *ev, int d, int n)
{
    size_t i = (size_t)d * ev->n_dev + n;
    return ev->lat[i] + ev->pre_act * ev->inv_link[i];
}

static inline double pl_sched_xdec(const struct pl_sched_eval *ev, int d, int n)
{
    size_t i = (size_t)d * ev->n_dev + n;
    return ev->lat[i] + ev->dec_act * ev->inv_link[i];
}

/* Transfer part of the objective cost from device d to device n (n < 0: last stage, none). */
static inline double pl_sched_xfer(const struct pl_sched_eval *ev, int d, int n)
{
    if (n < 0)
        return 0.0;
    return ev->w_pre * pl_sched_xpre(ev, d, n) + ev->w_dec * pl_sched_xdec(ev, d, n);
}

/* Memory of layers [a, e) on device d (any device: memory does not depend on the device). */
static inline double pl_sched_mem(const struct pl_sched_eval *ev, int a, int e)
{
    double m = (ev->pw[e] - ev->pw[a]) + ev->kv_slots * (ev->pk[e] - ev->pk[a]) + ev->work;
    if (a == 0)
        m += ev->embed_w;
    if (e == ev->L) {
        m += ev->head_w + ev->logits;
        if (a == 0)
            m -= ev->tied;
    }
    return m;
}

/* Options with the defaults filled in for every field not in field_mask; checks ranges. */
pl_status_t pl_sched_options_resolve(const pl_plan_options_t *in, pl_plan_options_t *out);

/* Check a device list: indices in range, none twice, 1..PL_SCHED_MAX_DEVICES of them. */
pl_status_t pl_sched_check_list(const struct pl_sched_eval *ev, const int *devs, int n);

/* Exact order and selection over devs[0..n), n <= PL_SCHED_EXACT_MAX (order.c). seed (may be
 * NULL) is a known plan; with fits_only, any plan that fits is returned without optimising. */
pl_status_t pl_sched_search_exact(const struct pl_sched_eval *ev, const int *devs, int n,
                                  bool allow_skip, int max_stages, const pl_sched_split_t *seed,
                                  bool fits_only, pl_sched_split_t *out);

/* Whether the exact subset search is used for n devices (n <= exact_max, tables small enough). */
bool pl_sched_exact_ok(const struct pl_sched_eval *ev, int n, int exact_max);

/* Predictions for a split under the context's current (R, b) with M microbatches (plan.h). */
typedef struct {
    int S, M, b, R, waves, bottleneck_stage;
    double bottleneck, t_pre_max, t_dec_max, sum_pre, sum_dec, ring;
    int chunk, K; /* the prefill chunk (pl_sched_prefill_chunk; 0: whole), messages per mb */
    double t_call_max, sum_call; /* one prefill message: the slowest stage's, all stages' */
    double prefill_time, decode_period, wave_time, job_time;
    double prefill_tok_s, decode_tok_s, bubble_pre, bubble_dec;
    pl_job_chunks_t sched; /* uneven prefill chunks (pl_sched_prefill_sched; n 0: none) */
    double t_even;         /* the equal chunks' prefill time in the same flow shop (0: none) */
} pl_sched_pred_t;

void pl_sched_predict(const struct pl_sched_eval *ev, const pl_sched_split_t *s, int M,
                      pl_sched_pred_t *p);
/* The prefill schedule of a prediction whose chunk the planner chose (none when the job set one
 * or prompts go whole, p unchanged then), the last step of pl_sched_predict: the uneven pieces
 * of pl_sched_chunks_plan, as many as the equal chunks, each at least the rule's floor of rows
 * (PL_SCHED_CHUNK_MIN over b, at least PL_SCHED_CHUNK_MIN_TOKENS) and at most twice the equal
 * chunk, in p->sched when the flow shop predicts them faster than the equal chunks (n 0
 * otherwise). p's prefill time, tokens/s, bubble, wave and job times become the flow shop's of
 * what runs; p->t_even the equal chunks'. */
void pl_sched_prefill_sched(const struct pl_sched_eval *ev, const pl_sched_split_t *s,
                            pl_sched_pred_t *p);
/* Whether every stage of the split fits its device under the current (R, b). */
bool pl_sched_split_fits(const struct pl_sched_eval *ev, const pl_sched_split_t *s);
/* The microbatch count for R resident sequences: requested (capped at R), else min(S, R)
 * where S is the expected stage count. */
int pl_sched_default_m(int requested, int resident, int stages);
/* Microbatch size for R sequences in M microbatches. */
int pl_sched_mb_size(int resident, int m);
/* The M in [min(S,R), min(R,2S)] with the shortest wave time for this split (ties: smaller M);
 * leaves the context's batch at R and that M's microbatch size. */
int pl_sched_choose_m(struct pl_sched_eval *ev, const pl_sched_split_t *s, int resident);
/* Largest R in [1, r_max] for which the split fits with M = pl_sched_default_m(requested, R, S);
 * 0 when even R = 1 does not fit. Leaves the context's batch changed. */
int pl_sched_max_resident(struct pl_sched_eval *ev, const pl_sched_split_t *s, int requested,
                          int r_max);
/* Recompute a split's bottleneck from its stages. */
double pl_sched_split_bottleneck(const struct pl_sched_eval *ev, const pl_sched_split_t *s);

#endif
