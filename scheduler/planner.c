/* pl_plan: ties the cost model, the searches and the microbatch choice into one plan, with its
 * baselines, and explains infeasibility (how much memory is missing and where). */
#include "scheduler/plan_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_GIB (1024.0 * 1024.0 * 1024.0)

typedef struct {
    pl_sched_eval_t *ev;
    pl_plan_options_t opt;
    int devs[PL_SCHED_MAX_DEVICES];
    int n; /* alive candidates, in input order */
    int refused[PL_SCHED_MAX_DEVICES];
    int n_refused; /* alive devices the input refuses (in->refused), in input order */
    const char *const *why;
    int requested_m;
} s_ctx_t;

/* The best split under the current batch (fits_only: any split that fits). */
static pl_status_t s_find(s_ctx_t *c, bool fits_only, pl_sched_split_t *out, const char **how)
{
    const pl_plan_options_t *o = &c->opt;
    if (o->order == PL_SCHED_ORDER_FIXED) {
        *how = "fixed";
        return pl_sched_partition(c->ev, c->devs, c->n, o->allow_skip, o->max_stages, out);
    }
    bool exact = false;
    if (fits_only && pl_sched_exact_ok(c->ev, c->n, o->exact_max_devices)) {
        int order[PL_SCHED_MAX_DEVICES];
        pl_sched_heuristic_order(c->ev, c->devs, c->n, order);
        if (pl_sched_partition(c->ev, order, c->n, o->allow_skip, o->max_stages, out) == PL_OK)
            return PL_OK;
        return pl_sched_search_exact(c->ev, c->devs, c->n, o->allow_skip, o->max_stages, NULL, true,
                                     out);
    }
    pl_status_t st = pl_sched_search(c->ev, c->devs, c->n, o->allow_skip, o->max_stages,
                                     o->exact_max_devices, out, &exact);
    *how = exact ? "exact" : "heuristic";
    return st;
}

static const pl_sched_device_t *s_dev(const s_ctx_t *c, int d)
{
    return &c->ev->devs[d];
}

/* Why nothing fits with one resident sequence: memory missing in total, or where the
 * contiguous layout breaks. The context's batch is (1, 1). */
static pl_status_t s_diagnose(s_ctx_t *c)
{
    const pl_sched_eval_t *ev = c->ev;
    int L = ev->L;
    char constrained_msg[512];
    snprintf(constrained_msg, sizeof(constrained_msg), "%s", pl_error_msg());
    /* Would it fit without the constraints (every device usable, any number of stages)? */
    s_ctx_t relaxed = *c;
    relaxed.opt.allow_skip = true;
    relaxed.opt.max_stages = 0;
    pl_sched_split_t s;
    const char *how = "";
    if ((c->opt.max_stages || !c->opt.allow_skip) && s_find(&relaxed, true, &s, &how) == PL_OK)
        return pl_error(PL_ERR_INFEASIBLE,
                        "no plan meets the placement constraints (%s), though the model fits "
                        "the devices without them: %s",
                        c->opt.max_stages ? "a limit on the number of stages"
                                          : "every device must be used",
                        constrained_msg);

    double usable = 0.0;
    int big = c->devs[0];
    for (int i = 0; i < c->n; i++) {
        usable += ev->cap[c->devs[i]];
        if (ev->cap[c->devs[i]] > ev->cap[big])
            big = c->devs[i];
    }
    /* what the model needs on one stage (the least possible: one workspace, tied table once) */
    double need = pl_sched_mem(ev, 0, L);
    /* the heaviest single layer, with the embedding or head where it would have to sit */
    int worst = 0;
    double worst_b = 0.0;
    for (int a = 0; a < L; a++) {
        double m = pl_sched_mem(ev, a, a + 1);
        if (m > worst_b) {
            worst_b = m;
            worst = a;
        }
    }
    char where[384];
    if (worst_b > ev->cap[big]) {
        snprintf(where, sizeof(where),
                 "layer %d alone needs %.2f GiB%s but the largest device, %s on %s, has %.2f GiB "
                 "usable",
                 worst, worst_b / S_GIB,
                 worst == 0       ? " with the embedding"
                 : worst == L - 1 ? " with the LM head"
                                  : "",
                 s_dev(c, big)->name, s_dev(c, big)->node, ev->cap[big] / S_GIB);
    } else {
        /* fill the devices largest first; report what is left over */
        int order[PL_SCHED_MAX_DEVICES], n = c->n;
        memcpy(order, c->devs, sizeof(int) * (size_t)n);
        for (int i = 1; i < n; i++) {
            int k = order[i], j = i - 1;
            while (j >= 0 && ev->cap[k] > ev->cap[order[j]]) {
                order[j + 1] = order[j];
                j--;
            }
            order[j + 1] = k;
        }
        int a = 0, last = order[0];
        for (int i = 0; i < n && a < L; i++) {
            int d = order[i];
            if (ev->fin_ok[(size_t)d * L + a]) {
                a = L;
            } else if (ev->emax[(size_t)d * L + a] > a) {
                a = ev->emax[(size_t)d * L + a];
                last = d;
            }
        }
        if (a >= L)
            snprintf(where, sizeof(where), "each device needs its own workspace");
        else
            snprintf(where, sizeof(where),
                     "layers %d-%d (%.2f GiB with the LM head) are left after filling every "
                     "device largest first; the last filled, %s on %s, has %.2f GiB usable",
                     a, L - 1, (pl_sched_mem(ev, a, L) - ev->work) / S_GIB, s_dev(c, last)->name,
                     s_dev(c, last)->node, ev->cap[last] / S_GIB);
    }
    if (need > usable)
        return pl_error(PL_ERR_INFEASIBLE,
                        "model needs %.2f GiB but the %d device%s %.2f GiB usable: %.2f GiB "
                        "missing (largest shortfall: %s)",
                        need / S_GIB, c->n, c->n == 1 ? " has" : "s have", usable / S_GIB,
                        (need - usable) / S_GIB, where);
    return pl_error(PL_ERR_INFEASIBLE,
                    "model needs %.2f GiB and the %d device%s %.2f GiB usable, but no "
                    "contiguous split fits (%s)",
                    need / S_GIB, c->n, c->n == 1 ? " has" : "s have", usable / S_GIB, where);
}

/* The alive devices the input does not refuse, and the refused ones; PL_ERR_NO_DEVICE (with the
 * first reason when every alive device is refused) when none is left. */
static pl_status_t s_candidates(const pl_plan_input_t *in, const bool *alive, s_ctx_t *c)
{
    c->why = in->refused;
    for (int i = 0; i < in->n_devices; i++) {
        if (alive && !alive[i])
            continue;
        if (in->refused && in->refused[i])
            c->refused[c->n_refused++] = i;
        else
            c->devs[c->n++] = i;
    }
    if (c->n > 0)
        return PL_OK;
    if (c->n_refused > 0) {
        const pl_sched_device_t *d = &in->devices[c->refused[0]];
        return pl_error(PL_ERR_NO_DEVICE, "plan: no device can hold this model (%s on %s: %s)",
                        d->name, d->node, in->refused[c->refused[0]]);
    }
    return pl_error(PL_ERR_NO_DEVICE, "plan: none of the %d devices is alive", in->n_devices);
}

static void s_ref(const s_ctx_t *c, int d, pl_plan_device_ref_t *r)
{
    r->device = d;
    snprintf(r->device_name, sizeof(r->device_name), "%s", s_dev(c, d)->name);
    snprintf(r->node, sizeof(r->node), "%s", s_dev(c, d)->node);
}

static void s_fill_stage(const s_ctx_t *c, const pl_sched_split_t *s, int i, int chunks,
                         pl_plan_stage_t *st)
{
    const pl_sched_eval_t *ev = c->ev;
    int d = s->device[i], a = s->first[i];
    int e = i + 1 < s->n_stages ? s->first[i + 1] : ev->L;
    int nx = i + 1 < s->n_stages ? s->device[i + 1] : -1;
    const pl_sched_device_t *dev = s_dev(c, d);
    memset(st, 0, sizeof(*st));
    st->device = d;
    snprintf(st->device_name, sizeof(st->device_name), "%s", dev->name);
    snprintf(st->node, sizeof(st->node), "%s", dev->node);
    snprintf(st->host, sizeof(st->host), "%s", dev->host);
    snprintf(st->backend, sizeof(st->backend), "%s", dev->backend);
    st->device_index = dev->index;
    st->first_layer = a;
    st->last_layer = e - 1;
    st->n_layers = e - a;
    st->has_embed = a == 0;
    st->has_head = e == ev->L;
    st->cost = pl_sched_stage_cost(ev, d, a, e - a, nx);
    pl_sched_stage_times(ev, d, a, e - a, nx, &st->t_prefill, &st->t_decode);
    double cf, cm, cc;
    bool rows;
    pl_sched_prefill_call(ev, d, a, e, nx, chunks, &cf, &cm, &rows, &cc, &st->xfer_prefill_call);
    st->t_prefill_call = cc + st->xfer_prefill_call;
    st->decode_read_bytes = ev->pw[e] - ev->pw[a] + ev->dec_kv * (ev->pk[e] - ev->pk[a]) +
                            (a == 0 ? ev->dec_embed : 0.0) + (e == ev->L ? ev->head_w : 0.0);
    int to = nx >= 0 ? nx : s->device[0];
    size_t li = (size_t)d * ev->n_dev + to;
    st->xfer_prefill = nx >= 0 ? pl_sched_xpre(ev, d, nx) : 0.0;
    st->xfer_decode = nx >= 0 ? pl_sched_xdec(ev, d, nx) : 0.0;
    double w = ev->pw[e] - ev->pw[a] + (a == 0 ? ev->embed_w : 0.0) +
               (e == ev->L ? ev->head_w - (a == 0 ? ev->tied : 0.0) : 0.0);
    double kv = ev->kv_slots * (ev->pk[e] - ev->pk[a]);
    double work = ev->work + (e == ev->L ? ev->logits : 0.0);
    st->mem_weights = (uint64_t)llround(w);
    st->mem_kv = (uint64_t)llround(kv);
    st->mem_work = (uint64_t)llround(work);
    st->mem_used = (uint64_t)llround(pl_sched_mem(ev, a, e));
    st->mem_avail = (uint64_t)ev->cap[d];
    st->next_stage = i + 1 < s->n_stages ? i + 1 : 0;
    if (d != to) {
        st->link = pl_sched_link(ev, d, to);
        st->link_same_host = ev->same_host[li];
    } else {
        st->link = (pl_sched_link_t){0.0, 0.0};
        st->link_same_host = true;
    }
}

/* The even split's layers: equal counts (the first L % n stages one more) over the first
 * n = min(devices, L) candidates in input order. */
static void s_even_layers(const s_ctx_t *c, pl_sched_split_t *s)
{
    int L = c->ev->L, n = c->n < L ? c->n : L;
    *s = (pl_sched_split_t){.n_stages = n};
    for (int i = 0, a = 0; i < n; i++) {
        s->device[i] = c->devs[i];
        s->first[i] = a;
        a += L / n + (i < L % n ? 1 : 0);
    }
}

/* Job time of a baseline split with the largest resident count that fits (*r_p); 0 when none. */
static double s_baseline(s_ctx_t *c, const pl_sched_split_t *s, int *r_p)
{
    int r = pl_sched_max_resident(c->ev, s, c->requested_m, c->ev->n_seqs);
    *r_p = r;
    if (r < 1)
        return 0.0;
    int m = pl_sched_default_m(c->requested_m, r, s->n_stages);
    pl_sched_eval_set_batch_light(c->ev, r, pl_sched_mb_size(r, m));
    pl_sched_pred_t p;
    pl_sched_predict(c->ev, s, m, &p);
    return p.job_time;
}

typedef struct {
    double even_t, single_t;
    int single_dev, single_r;
} s_base_t;

/* The baselines: an even split over every alive device in input order, each single device. */
static void s_baselines(s_ctx_t *c, s_base_t *b)
{
    const pl_sched_eval_t *ev = c->ev;
    int r;
    *b = (s_base_t){.single_dev = -1};
    if (ev->L >= c->n) {
        pl_sched_split_t even;
        s_even_layers(c, &even);
        b->even_t = s_baseline(c, &even, &r);
    }
    for (int i = 0; i < c->n; i++) {
        pl_sched_split_t one = {.n_stages = 1, .device = {c->devs[i]}, .first = {0}};
        double t = s_baseline(c, &one, &r);
        if (t > 0 && (b->single_dev < 0 || t < b->single_t)) {
            b->single_t = t;
            b->single_dev = c->devs[i];
            b->single_r = r;
        }
    }
}

static pl_status_t s_build(s_ctx_t *c, const pl_sched_split_t *s, int R, int M, const char *how,
                           const s_base_t *base, pl_plan_t **plan_p)
{
    pl_sched_eval_t *ev = c->ev;
    int S = s->n_stages, left = c->n - S + c->n_refused;
    pl_plan_t *p = calloc(1, sizeof(*p) + sizeof(pl_plan_stage_t) * (size_t)S +
                                 sizeof(pl_plan_device_ref_t) * (size_t)(left > 0 ? left : 1));
    if (!p)
        return pl_error(PL_ERR_NOMEM, "plan: out of memory");
    p->stages = (pl_plan_stage_t *)(p + 1);
    p->left_out = (pl_plan_device_ref_t *)(p->stages + S);
    pl_sched_eval_set_batch_light(ev, R, pl_sched_mb_size(R, M));
    pl_sched_pred_t pr;
    pl_sched_predict(ev, s, M, &pr);
    p->prefill_chunk = pr.chunk;
    p->prefill_sched = pr.sched;
    p->prefill_time_even = pr.t_even;
    p->n_stages = S;
    for (int i = 0; i < S; i++)
        s_fill_stage(c, s, i, pr.K, &p->stages[i]);
    for (int i = 0; i < c->n; i++) {
        bool used = false;
        for (int j = 0; j < S; j++)
            used |= s->device[j] == c->devs[i];
        if (!used)
            s_ref(c, c->devs[i], &p->left_out[p->n_left_out++]);
    }
    for (int i = 0; i < c->n_refused; i++) {
        pl_plan_device_ref_t *r = &p->left_out[p->n_left_out++];
        s_ref(c, c->refused[i], r);
        snprintf(r->why, sizeof(r->why), "%s", c->why[c->refused[i]]);
    }
    p->objective = c->opt.objective;
    p->search = how;
    p->bottleneck_stage = pr.bottleneck_stage;
    p->bottleneck = pr.bottleneck;
    p->n_seqs = ev->n_seqs;
    p->resident_seqs = R;
    p->waves = pr.waves;
    p->microbatches = pr.M;
    p->microbatch_size = pr.b;
    p->ctx = ev->ctx;
    p->max_tokens = pr.b * ev->p_max;
    p->prefill_time = pr.prefill_time;
    p->decode_period = pr.decode_period;
    p->ring_s = pr.ring;
    p->wave_time = pr.wave_time;
    p->job_time = pr.job_time;
    p->prefill_tok_s = pr.prefill_tok_s;
    p->decode_tok_s = pr.decode_tok_s;
    p->bubble_prefill = pr.bubble_pre;
    p->bubble_decode = pr.bubble_dec;

    p->even_job_time = base->even_t;
    p->single_job_time = base->single_t;
    p->single.device = -1;
    if (base->single_dev >= 0)
        s_ref(c, base->single_dev, &p->single);
    if (p->job_time > 0) {
        p->speedup_even = p->even_job_time > 0 ? p->even_job_time / p->job_time : 0.0;
        p->speedup_single = p->single_job_time > 0 ? p->single_job_time / p->job_time : 0.0;
    }
    *plan_p = p;
    return PL_OK;
}

/* What every planner starts with: the options resolved, an evaluator for the job, the candidate
 * devices and the job's requested microbatches and chunk. On error nothing is left to free. */
static pl_status_t s_ctx_begin(const pl_plan_input_t *in, const bool *alive, pl_plan_t **plan_p,
                               s_ctx_t *c)
{
    pl_status_t st;
    if (!in || !plan_p)
        return pl_error(PL_ERR_INVALID, "plan: missing input");
    if ((st = pl_sched_options_resolve(&in->options, &c->opt)))
        return st;
    int N = in->job.n_seqs;
    if ((st = pl_sched_eval_new(in, N > 0 ? N : 1, 1, &c->ev)))
        return st;
    if ((st = s_candidates(in, alive, c))) {
        pl_sched_eval_destroy(&c->ev);
        return st;
    }
    c->requested_m = in->job.microbatches;
    return PL_OK;
}

static pl_status_t s_plan(const pl_plan_input_t *in, const bool *alive, pl_plan_t **plan_p)
{
    s_ctx_t c = {0};
    pl_status_t st;
    if ((st = s_ctx_begin(in, alive, plan_p, &c)))
        return st;
    int N = in->job.n_seqs;
    int expect_s = c.opt.max_stages > 0 && c.opt.max_stages < c.n ? c.opt.max_stages : c.n;
    int R = N, M = pl_sched_default_m(c.requested_m, R, expect_s);
    pl_sched_split_t s;
    const char *how = "";
    pl_sched_eval_set_batch(c.ev, R, pl_sched_mb_size(R, M));
    if ((st = s_find(&c, true, &s, &how)) != PL_OK) {
        if (st != PL_ERR_INFEASIBLE)
            goto out;
        /* the KV cache of every sequence does not fit: find the most that do */
        int lo = 0, hi = N - 1;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            int m = pl_sched_default_m(c.requested_m, mid, expect_s);
            pl_sched_eval_set_batch(c.ev, mid, pl_sched_mb_size(mid, m));
            if (s_find(&c, true, &s, &how) == PL_OK)
                lo = mid;
            else
                hi = mid - 1;
        }
        if (lo == 0) {
            pl_sched_eval_set_batch(c.ev, 1, 1);
            st = s_diagnose(&c);
            goto out;
        }
        R = lo;
        M = pl_sched_default_m(c.requested_m, R, expect_s);
        pl_sched_eval_set_batch(c.ev, R, pl_sched_mb_size(R, M));
    }
    if ((st = s_find(&c, false, &s, &how)))
        goto out;
    /* fit the microbatch count to the stages found; re-plan when the cut changes */
    for (int it = 0; it < 3 && c.requested_m == 0; it++) {
        int m2 = pl_sched_choose_m(c.ev, &s, R); /* s fits with m2 */
        bool same_cut = pl_sched_mb_size(R, m2) == pl_sched_mb_size(R, M);
        M = m2;
        if (same_cut)
            break;
        pl_sched_split_t s2;
        const char *how2 = how;
        if (s_find(&c, false, &s2, &how2) != PL_OK)
            break;
        pl_sched_pred_t old_p, new_p;
        pl_sched_predict(c.ev, &s, M, &old_p);
        pl_sched_predict(c.ev, &s2, M, &new_p);
        if (!(new_p.wave_time < old_p.wave_time))
            break;
        s = s2;
        how = how2;
    }
    /* never slower than the fastest single device that fits: with at least one microbatch per
     * stage, a device holding many layers reads its weights once per microbatch, which can cost
     * more in memory-bound decode than the stages gain */
    s_base_t base;
    s_baselines(&c, &base);
    pl_sched_pred_t pr;
    pl_sched_eval_set_batch_light(c.ev, R, pl_sched_mb_size(R, M));
    pl_sched_predict(c.ev, &s, M, &pr);
    if (c.opt.allow_skip && base.single_dev >= 0 && base.single_t < pr.job_time) {
        s = (pl_sched_split_t){.n_stages = 1, .device = {base.single_dev}, .first = {0}};
        R = base.single_r;
        M = pl_sched_default_m(c.requested_m, R, 1);
        how = "single";
    }
    pl_error_clear();
    st = s_build(&c, &s, R, M, how, &base, plan_p);
out:
    pl_sched_eval_destroy(&c.ev);
    return st;
}

/* PL_ERR_INFEASIBLE naming the first stage of the even split s that does not fit. */
static pl_status_t s_even_check(const s_ctx_t *c, const pl_sched_split_t *s)
{
    const pl_sched_eval_t *ev = c->ev;
    for (int i = 0; i < s->n_stages; i++) {
        int a = s->first[i], e = i + 1 < s->n_stages ? s->first[i + 1] : ev->L, d = s->device[i];
        double mem = pl_sched_mem(ev, a, e);
        if (mem > ev->cap[d])
            return pl_error(PL_ERR_INFEASIBLE,
                            "even split: stage %d (%s on %s, layers %d-%d) needs %.2f GiB but "
                            "%.2f GiB are usable",
                            i, s_dev(c, d)->name, s_dev(c, d)->node, a, e - 1, mem / S_GIB,
                            ev->cap[d] / S_GIB);
    }
    return PL_OK;
}

pl_status_t pl_plan_even(const pl_plan_input_t *in, const bool *alive, pl_plan_t **plan_p)
{
    s_ctx_t c = {0};
    pl_status_t st;
    if ((st = s_ctx_begin(in, alive, plan_p, &c)))
        return st;
    pl_sched_split_t s;
    s_even_layers(&c, &s);
    /* every sequence resident, or as pl_plan lowers them when their KV cache does not fit: the
     * most that do (a deployment's kv_slots; a batch job is refused for it by its caller) */
    int R = pl_sched_max_resident(c.ev, &s, c.requested_m, c.ev->n_seqs);
    int M = pl_sched_default_m(c.requested_m, R < 1 ? 1 : R, s.n_stages);
    pl_sched_eval_set_batch(c.ev, R < 1 ? 1 : R, pl_sched_mb_size(R < 1 ? 1 : R, M));
    if (R < 1) { /* not one sequence: the stage that does not fit, and by how much */
        if ((st = s_even_check(&c, &s)) == PL_OK) /* max_resident saw one not fit */
            st = pl_error(PL_ERR_INFEASIBLE, "even split: one sequence does not fit");
        goto out;
    }
    s.bottleneck = pl_sched_split_bottleneck(c.ev, &s);
    /* the baselines over the same devices: even is this plan itself, single its own */
    s_base_t base;
    s_baselines(&c, &base);
    pl_sched_pred_t pr;
    pl_sched_eval_set_batch_light(c.ev, R, pl_sched_mb_size(R, M));
    pl_sched_predict(c.ev, &s, M, &pr);
    base.even_t = pr.job_time;
    pl_error_clear();
    st = s_build(&c, &s, R, M, "even", &base, plan_p);
out:
    pl_sched_eval_destroy(&c.ev);
    return st;
}

pl_status_t pl_plan(const pl_plan_input_t *in, pl_plan_t **plan_p)
{
    return s_plan(in, NULL, plan_p);
}

pl_status_t pl_replan(const pl_plan_input_t *in, const bool *alive, pl_plan_t **plan_p)
{
    if (!alive)
        return pl_error(PL_ERR_INVALID, "replan: missing alive mask");
    return s_plan(in, alive, plan_p);
}

void pl_plan_destroy(pl_plan_t **plan_p)
{
    if (!plan_p || !*plan_p)
        return;
    free(*plan_p);
    *plan_p = NULL;
}
