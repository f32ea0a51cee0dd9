/* Microbatches and predictions: how many sequences stay resident (KV cache), how they are cut
 * into microbatches so the pipeline stays full, and the resulting throughput and bubble. */
#include "scheduler/plan_impl.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>

int pl_sched_mb_size(int resident, int m)
{
    assert(resident >= 1 && m >= 1);
    return (resident + m - 1) / m;
}

int pl_sched_prefill_chunk(int requested, int stages, int mb_size, int prompt_max, int prompt_avg,
                           double t_prefill_max)
{
    if (requested > 0)
        return requested;
    int64_t b = mb_size > 0 ? mb_size : 1;
    int64_t c_min = (PL_SCHED_CHUNK_MIN + b - 1) / b;
    if (c_min < PL_SCHED_CHUNK_MIN_TOKENS)
        c_min = PL_SCHED_CHUNK_MIN_TOKENS;
    int64_t n_max =
        4 * (int64_t)stages > PL_SCHED_CHUNKS_MAX ? 4 * (int64_t)stages : PL_SCHED_CHUNKS_MAX;
    int64_t c_few = ((int64_t)prompt_max + n_max - 1) / n_max; /* a long prompt's chunks */
    if (c_min < c_few)
        c_min = c_few;
    if (stages <= 1 || prompt_max <= c_min)
        return 0;
    int64_t c = ((int64_t)prompt_max + 2 * stages - 1) / (2 * stages);
    if (t_prefill_max > 0) {
        double c_time = floor(PL_SCHED_CHUNK_TARGET_S * prompt_avg / t_prefill_max);
        if (c_time < (double)c)
            c = (int64_t)c_time;
    }
    if (c < c_min)
        c = c_min;
    return (int)c; /* below prompt_max: ceil(P / 2S) < P and the floor is too */
}

int pl_sched_default_m(int requested, int resident, int stages)
{
    int m = requested > 0 ? requested : stages;
    if (m > resident)
        m = resident;
    return m < 1 ? 1 : m;
}

int pl_sched_chunks(const pl_sched_eval_t *ev, int chunk)
{
    return chunk > 0 && ev->p_max > chunk ? (ev->p_max + chunk - 1) / chunk : 1;
}

void pl_sched_prefill_call(const pl_sched_eval_t *ev, int d, int a, int e, int n, int chunks,
                           double *flop_s, double *mem_s, bool *rows_p, double *comp_s,
                           double *xfer_s)
{
    double K = chunks > 1 ? chunks : 1;
    double w = ev->pw[e] - ev->pw[a], f = ev->pf[e] - ev->pf[a];
    double at = ev->pa[e] - ev->pa[a], k = ev->pk[e] - ev->pk[a];
    double fp = ev->pre_tok * f, fa = ev->pre_pos * at;
    /* a chunk writes its own KV and reads, on average, half the prompt's cached before it */
    double kv_read = K > 1 ? ev->b * (double)ev->p_avg * (K - 1.0) / (2.0 * K) * k : 0.0;
    double bp = w + ev->pre_kv * k / K + kv_read;
    if (a == 0)
        bp += ev->pre_embed / K;
    if (e == ev->L) {
        fp += ev->pre_headf;
        bp += ev->head_w / K; /* the head runs on each sequence's last chunk only */
    }
    /* each sequence's share of a message: its own products, each passing over the weights once;
     * fewer tokens than PL_SCHED_ROW_TOKENS go on decode's kernels */
    bool rows = ev->inv_dec[d] > 0 && ev->p_avg / K < PL_SCHED_ROW_TOKENS;
    *flop_s = pl_sched_pre_flop_s(ev, d, rows, fp / K, fa / K, ev->b, w);
    *mem_s = bp * ev->inv_bw[d];
    *rows_p = rows;
    *comp_s = pl_sched_phase(rows, *flop_s, *mem_s);
    if (n < 0) {
        *xfer_s = 0.0;
    } else {
        size_t i = (size_t)d * ev->n_dev + n;
        *xfer_s = ev->lat[i] + ev->pre_act / K * ev->inv_link[i];
    }
}

static int s_end(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int i)
{
    return i + 1 < s->n_stages ? s->first[i + 1] : ev->L;
}

bool pl_sched_split_fits(const pl_sched_eval_t *ev, const pl_sched_split_t *s)
{
    for (int i = 0; i < s->n_stages; i++) {
        int a = s->first[i], e = s_end(ev, s, i);
        if (pl_sched_mem(ev, a, e) > ev->cap[s->device[i]])
            return false;
    }
    return true;
}

void pl_sched_predict(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M,
                      pl_sched_pred_t *p)
{
    assert(s->n_stages >= 1 && M >= 1);
    *p = (pl_sched_pred_t){.S = s->n_stages, .R = ev->R, .b = ev->b, .bottleneck = -1.0};
    /* M microbatches of at most b sequences (sizes differ by at most one); every one is
     * charged as a full b, which is conservative when b does not divide R */
    p->M = M < ev->R ? M : ev->R;
    for (int i = 0; i < s->n_stages; i++) {
        int a = s->first[i], e = s_end(ev, s, i);
        int next = i + 1 < s->n_stages ? s->device[i + 1] : -1;
        double tp, td;
        pl_sched_stage_times(ev, s->device[i], a, e - a, next, &tp, &td);
        double c = pl_sched_stage_cost(ev, s->device[i], a, e - a, next);
        if (c > p->bottleneck) {
            p->bottleneck = c;
            p->bottleneck_stage = i;
        }
        p->sum_pre += tp;
        p->sum_dec += td;
        if (tp > p->t_pre_max)
            p->t_pre_max = tp;
        if (td > p->t_dec_max)
            p->t_dec_max = td;
    }
    /* the chunk follows from the whole-prompt stage times (the job's own when it set one) */
    p->chunk = pl_sched_prefill_chunk(ev->req_chunk, s->n_stages, ev->b, ev->p_max, ev->p_avg,
                                      p->t_pre_max);
    p->K = pl_sched_chunks(ev, p->chunk);
    for (int i = 0; i < s->n_stages; i++) {
        int a = s->first[i], e = s_end(ev, s, i);
        int next = i + 1 < s->n_stages ? s->device[i + 1] : -1;
        double cf, cm, cc, cx;
        bool rows;
        pl_sched_prefill_call(ev, s->device[i], a, e, next, p->K, &cf, &cm, &rows, &cc, &cx);
        double tc = cc + cx;
        p->sum_call += tc;
        if (tc > p->t_call_max)
            p->t_call_max = tc;
    }
    if (s->n_stages > 1) {
        /* token ids (4 bytes per sequence) from the last stage back to the first */
        int last = s->device[s->n_stages - 1], first = s->device[0];
        size_t li = (size_t)last * ev->n_dev + first;
        p->ring = ev->lat[li] + 4.0 * ev->b * ev->inv_link[li];
    }
    double busy_dec = p->M * p->t_dec_max, cycle = p->sum_dec + p->ring;
    p->decode_period = busy_dec > cycle ? busy_dec : cycle;
    /* prefill: M * K messages (K chunks of each microbatch) through the stages in order */
    double items = (double)p->M * p->K;
    p->prefill_time = p->sum_call + (items - 1) * p->t_call_max;
    p->decode_tok_s = p->decode_period > 0 ? p->R / p->decode_period : 0.0;
    p->prefill_tok_s = p->prefill_time > 0 ? (double)p->R * ev->p_avg / p->prefill_time : 0.0;
    p->bubble_dec = p->decode_period > 0 ? 1.0 - busy_dec / p->decode_period : 0.0;
    p->bubble_pre = p->prefill_time > 0 ? 1.0 - items * p->t_call_max / p->prefill_time : 0.0;
    if (p->bubble_dec < 0)
        p->bubble_dec = 0;
    if (p->bubble_pre < 0)
        p->bubble_pre = 0;
    p->wave_time = p->prefill_time + (ev->n_new - 1) * p->decode_period;
    p->waves = (ev->n_seqs + ev->R - 1) / ev->R;
    p->job_time = p->waves * p->wave_time;
    pl_sched_prefill_sched(ev, s, p); /* uneven chunks, when they beat the equal ones */
}

int pl_sched_choose_m(pl_sched_eval_t *ev, const pl_sched_split_t *s, int resident)
{
    int S = s->n_stages;
    int lo = S < resident ? S : resident, hi = 2 * S < resident ? 2 * S : resident;
    int best_m = 0, last_b = 0;
    double best_t = 0.0;
    for (int m = lo; m <= hi; m++) {
        int b = pl_sched_mb_size(resident, m);
        if (b == last_b)
            continue; /* same cut as a smaller m */
        last_b = b;
        pl_sched_eval_set_batch_light(ev, resident, b);
        if (!pl_sched_split_fits(ev, s))
            continue;
        pl_sched_pred_t p;
        pl_sched_predict(ev, s, m, &p);
        if (best_m == 0 || p.wave_time < best_t) {
            best_m = m;
            best_t = p.wave_time;
        }
    }
    if (best_m == 0)
        best_m = lo;
    pl_sched_eval_set_batch(ev, resident, pl_sched_mb_size(resident, best_m));
    return best_m;
}

int pl_sched_max_resident(pl_sched_eval_t *ev, const pl_sched_split_t *s, int requested, int r_max)
{
    int lo = 0, hi = r_max; /* lo fits (0: nothing known), answer in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        int m = pl_sched_default_m(requested, mid, s->n_stages);
        pl_sched_eval_set_batch_light(ev, mid, pl_sched_mb_size(mid, m));
        if (pl_sched_split_fits(ev, s))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
