/* The cost model: per-layer costs of a Llama-family model, input validation, and the evaluation
 * context (prefix sums, link times, memory limits) every search reads. Formulas: plan.h. */
#include "scheduler/plan_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_SEQS 10000000
#define S_MAX_TOKENS (1 << 24)

pl_status_t pl_sched_costs_from_model(const pl_sched_model_t *m, pl_sched_costs_t **costs_p)
{
    if (!m)
        return pl_error(PL_ERR_INVALID, "model: missing");
    const struct {
        const char *name;
        int v, max;
    } ints[] = {
        {"n_layers", m->n_layers, PL_SCHED_MAX_LAYERS},
        {"hidden", m->hidden, 1 << 20},
        {"intermediate", m->intermediate, 1 << 22},
        {"n_heads", m->n_heads, 1 << 12},
        {"n_kv_heads", m->n_kv_heads, 1 << 12},
        {"head_dim", m->head_dim, 1 << 14},
        {"vocab", m->vocab, 1 << 24},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (ints[i].v < 1 || ints[i].v > ints[i].max)
            return pl_error(PL_ERR_RANGE, "model.%s: %d not in [1, %d]", ints[i].name, ints[i].v,
                            ints[i].max);
    if (m->n_heads % m->n_kv_heads)
        return pl_error(PL_ERR_INVALID, "model.n_kv_heads: %d does not divide n_heads %d",
                        m->n_kv_heads, m->n_heads);
    if (!(m->weight_bytes > 0 && m->weight_bytes <= 8))
        return pl_error(PL_ERR_RANGE, "model.weight_bytes: %g not in (0, 8]", m->weight_bytes);
    if (!(m->kv_bytes > 0 && m->kv_bytes <= 8))
        return pl_error(PL_ERR_RANGE, "model.kv_bytes: %g not in (0, 8]", m->kv_bytes);
    if (!(m->act_bytes >= 0 && m->act_bytes <= 8))
        return pl_error(PL_ERR_RANGE, "model.act_bytes: %g not in [0, 8] (0: 4)", m->act_bytes);

    size_t n = (size_t)m->n_layers;
    pl_sched_costs_t *c = calloc(1, sizeof(*c) + n * sizeof(pl_sched_layer_cost_t));
    if (!c)
        return pl_error(PL_ERR_NOMEM, "model costs: out of memory");
    pl_sched_layer_cost_t *layers = (pl_sched_layer_cost_t *)(c + 1);
    double h = m->hidden, inter = m->intermediate, v = m->vocab, wb = m->weight_bytes;
    double q = (double)m->n_heads * m->head_dim, kv = (double)m->n_kv_heads * m->head_dim;
    double act = m->act_bytes > 0 ? m->act_bytes : 4.0;
    /* q, k, v, o projections and the gated MLP; two RMS norms of hidden weights */
    double matmul = h * q + 2.0 * h * kv + q * h + 3.0 * h * inter;
    for (size_t i = 0; i < n; i++) {
        layers[i].weight_bytes = (matmul + 2.0 * h) * wb;
        layers[i].flops_per_token = 2.0 * matmul;
        layers[i].attn_flops_per_pos = 4.0 * q;
        layers[i].kv_bytes_per_token = 2.0 * kv * m->kv_bytes;
    }
    c->n_layers = m->n_layers;
    c->layers = layers;
    c->embed_weight_bytes = v * h * wb;
    c->embed_bytes_per_token = h * wb;
    c->head_weight_bytes = (v * h + h) * wb;
    c->head_flops_per_seq = 2.0 * v * h;
    c->tied_bytes = m->tie_embeddings ? v * h * wb : 0.0;
    c->act_bytes_per_token = h * act;
    /* x, residual, q, k, v, attention output, gate and up rows in flight inside a layer */
    c->work_bytes_per_token = (2.0 * h + 2.0 * q + 2.0 * kv + 2.0 * inter) * act;
    c->logits_bytes_per_seq = v * 4.0;
    c->score_bytes_per_pair = act;
    *costs_p = c;
    return PL_OK;
}

void pl_sched_costs_destroy(pl_sched_costs_t **costs_p)
{
    if (!costs_p || !*costs_p)
        return;
    free(*costs_p);
    *costs_p = NULL;
}

static bool s_finite_nonneg(double x)
{
    return isfinite(x) && x >= 0;
}

static pl_status_t s_check_costs(const pl_sched_costs_t *c)
{
    if (c->n_layers < 1 || c->n_layers > PL_SCHED_MAX_LAYERS)
        return pl_error(PL_ERR_RANGE, "costs.n_layers: %d not in [1, %d]", c->n_layers,
                        PL_SCHED_MAX_LAYERS);
    if (!c->layers)
        return pl_error(PL_ERR_INVALID, "costs.layers: missing");
    for (int i = 0; i < c->n_layers; i++) {
        const pl_sched_layer_cost_t *l = &c->layers[i];
        if (!s_finite_nonneg(l->weight_bytes) || !s_finite_nonneg(l->flops_per_token) ||
            !s_finite_nonneg(l->attn_flops_per_pos) || !s_finite_nonneg(l->kv_bytes_per_token))
            return pl_error(PL_ERR_RANGE, "costs.layers[%d]: costs must be finite and >= 0", i);
    }
    const double edge[] = {c->embed_weight_bytes,   c->embed_bytes_per_token,
                           c->head_weight_bytes,    c->head_flops_per_seq,
                           c->tied_bytes,           c->act_bytes_per_token,
                           c->work_bytes_per_token, c->logits_bytes_per_seq,
                           c->score_bytes_per_pair};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
        if (!s_finite_nonneg(edge[i]))
            return pl_error(PL_ERR_RANGE, "costs: edge cost %zu must be finite and >= 0", i);
    if (c->tied_bytes > c->embed_weight_bytes || c->tied_bytes > c->head_weight_bytes)
        return pl_error(PL_ERR_RANGE, "costs.tied_bytes: larger than the embedding or head");
    return PL_OK;
}

static pl_status_t s_check_name(const char *field, int i, const char *s, size_t cap)
{
    if (!memchr(s, '\0', cap))
        return pl_error(PL_ERR_INVALID, "devices[%d].%s: not NUL-terminated", i, field);
    return PL_OK;
}

static pl_status_t s_check_devices(const pl_plan_input_t *in)
{
    if (!in->devices || in->n_devices < 1 || in->n_devices > PL_SCHED_MAX_DEVICES)
        return pl_error(PL_ERR_RANGE, "n_devices: %d not in [1, %d]", in->n_devices,
                        PL_SCHED_MAX_DEVICES);
    for (int i = 0; i < in->n_devices; i++) {
        const pl_sched_device_t *d = &in->devices[i];
        pl_status_t st;
        if ((st = s_check_name("name", i, d->name, sizeof(d->name))) ||
            (st = s_check_name("node", i, d->node, sizeof(d->node))) ||
            (st = s_check_name("host", i, d->host, sizeof(d->host))) ||
            (st = s_check_name("backend", i, d->backend, sizeof(d->backend))))
            return st;
        if (!(isfinite(d->gflops) && d->gflops > 0))
            return pl_error(PL_ERR_RANGE, "devices[%d].gflops: %g must be > 0", i, d->gflops);
        if (!(isfinite(d->mem_gbps) && d->mem_gbps > 0))
            return pl_error(PL_ERR_RANGE, "devices[%d].mem_gbps: %g must be > 0", i, d->mem_gbps);
        if (!s_finite_nonneg(d->dec_gflops))
            return pl_error(PL_ERR_RANGE, "devices[%d].dec_gflops: %g must be >= 0 (0: none)", i,
                            d->dec_gflops);
        if (!s_finite_nonneg(d->pass_gbps))
            return pl_error(PL_ERR_RANGE, "devices[%d].pass_gbps: %g must be >= 0 (0: none)", i,
                            d->pass_gbps);
        if (!s_finite_nonneg(d->attn_gflops))
            return pl_error(PL_ERR_RANGE, "devices[%d].attn_gflops: %g must be >= 0 (0: none)", i,
                            d->attn_gflops);
        if (!s_finite_nonneg(d->host_gbps))
            return pl_error(PL_ERR_RANGE, "devices[%d].host_gbps: %g must be >= 0 (0: none)", i,
                            d->host_gbps);
    }
    if (in->links) {
        for (int i = 0; i < in->n_devices * in->n_devices; i++) {
            const pl_sched_link_t *l = &in->links[i];
            if (!isfinite(l->gbps) || (l->gbps > 0 && !s_finite_nonneg(l->latency_s)))
                return pl_error(PL_ERR_RANGE, "links[%d][%d]: bandwidth %g / latency %g invalid",
                                i / in->n_devices, i % in->n_devices, l->gbps, l->latency_s);
        }
    }
    return PL_OK;
}

static pl_status_t s_check_job(const pl_sched_job_t *j)
{
    if (j->n_seqs < 1 || j->n_seqs > S_MAX_SEQS)
        return pl_error(PL_ERR_RANGE, "job.n_seqs: %d not in [1, %d]", j->n_seqs, S_MAX_SEQS);
    if (j->prompt_avg < 1 || j->prompt_avg > S_MAX_TOKENS)
        return pl_error(PL_ERR_RANGE, "job.prompt_avg: %d not in [1, %d]", j->prompt_avg,
                        S_MAX_TOKENS);
    if (j->prompt_max < j->prompt_avg || j->prompt_max > S_MAX_TOKENS)
        return pl_error(PL_ERR_RANGE, "job.prompt_max: %d not in [prompt_avg %d, %d]",
                        j->prompt_max, j->prompt_avg, S_MAX_TOKENS);
    if (j->max_new_tokens < 1 || j->max_new_tokens > S_MAX_TOKENS)
        return pl_error(PL_ERR_RANGE, "job.max_new_tokens: %d not in [1, %d]", j->max_new_tokens,
                        S_MAX_TOKENS);
    if (j->microbatches < 0 || j->microbatches > S_MAX_SEQS)
        return pl_error(PL_ERR_RANGE, "job.microbatches: %d not in [0, %d]", j->microbatches,
                        S_MAX_SEQS);
    if (j->prefill_chunk < 0 || j->prefill_chunk > PL_JOB_MAX_PREFILL_CHUNK)
        return pl_error(PL_ERR_RANGE, "job.prefill_chunk: %d not in [0, %d]", j->prefill_chunk,
                        PL_JOB_MAX_PREFILL_CHUNK);
    if (j->ctx < 0 || j->ctx > 2 * S_MAX_TOKENS)
        return pl_error(PL_ERR_RANGE, "job.ctx: %d not in [0, %d]", j->ctx, 2 * S_MAX_TOKENS);
    if (j->ctx > 0 && j->ctx < j->prompt_max + j->max_new_tokens)
        return pl_error(PL_ERR_INVALID,
                        "job.ctx: %d positions cannot hold prompt_max %d + max_new_tokens %d",
                        j->ctx, j->prompt_max, j->max_new_tokens);
    return PL_OK;
}

pl_status_t pl_sched_options_resolve(const pl_plan_options_t *in, pl_plan_options_t *out)
{
    pl_plan_options_t o = {
        .field_mask = 0,
        .order = PL_SCHED_ORDER_SEARCH,
        .allow_skip = true,
        .objective = PL_SCHED_OBJ_JOB,
        .exact_max_devices = 12,
        .max_stages = 0,
        .same_host = {10.0, 5e-6},
        .cross_host = {1.25, 50e-6},
    };
    uint64_t f = in->field_mask;
    if (f & PL_PLAN_OPT_ORDER)
        o.order = in->order;
    if (f & PL_PLAN_OPT_ALLOW_SKIP)
        o.allow_skip = in->allow_skip;
    if (f & PL_PLAN_OPT_OBJECTIVE)
        o.objective = in->objective;
    if (f & PL_PLAN_OPT_EXACT_MAX)
        o.exact_max_devices = in->exact_max_devices;
    if (f & PL_PLAN_OPT_MAX_STAGES)
        o.max_stages = in->max_stages;
    if (f & PL_PLAN_OPT_SAME_HOST)
        o.same_host = in->same_host;
    if (f & PL_PLAN_OPT_CROSS_HOST)
        o.cross_host = in->cross_host;
    if (o.order != PL_SCHED_ORDER_SEARCH && o.order != PL_SCHED_ORDER_FIXED)
        return pl_error(PL_ERR_INVALID, "options.order: unknown value %d", (int)o.order);
    if (o.objective < PL_SCHED_OBJ_JOB || o.objective > PL_SCHED_OBJ_PREFILL)
        return pl_error(PL_ERR_INVALID, "options.objective: unknown value %d", (int)o.objective);
    if (o.exact_max_devices < 0 || o.exact_max_devices > PL_SCHED_EXACT_MAX)
        return pl_error(PL_ERR_RANGE, "options.exact_max_devices: %d not in [0, %d]",
                        o.exact_max_devices, PL_SCHED_EXACT_MAX);
    if (o.max_stages < 0 || o.max_stages > PL_SCHED_MAX_DEVICES)
        return pl_error(PL_ERR_RANGE, "options.max_stages: %d not in [0, %d]", o.max_stages,
                        PL_SCHED_MAX_DEVICES);
    const pl_sched_link_t *dl[2] = {&o.same_host, &o.cross_host};
    for (int i = 0; i < 2; i++)
        if (!(isfinite(dl[i]->gbps) && dl[i]->gbps > 0) || !s_finite_nonneg(dl[i]->latency_s))
            return pl_error(PL_ERR_RANGE, "options.%s: bandwidth %g / latency %g invalid",
                            i ? "cross_host" : "same_host", dl[i]->gbps, dl[i]->latency_s);
    o.field_mask = f;
    *out = o;
    return PL_OK;
}

void pl_sched_eval_destroy(pl_sched_eval_t **ev_p)
{
    if (!ev_p || !*ev_p)
        return;
    pl_sched_eval_t *ev = *ev_p;
    free(ev->pw);
    free(ev->inv_rate);
    free(ev->gbps);
    free(ev->same_host);
    free(ev->emax);
    free(ev->fin_ok);
    free(ev->cost_last);
    free(ev);
    *ev_p = NULL;
}

pl_status_t pl_sched_eval_new(const pl_plan_input_t *in, int resident, int mb_size,
                              pl_sched_eval_t **ev_p)
{
    pl_status_t st;
    pl_plan_options_t opt;
    pl_sched_costs_t *owned = NULL;
    if (!in)
        return pl_error(PL_ERR_INVALID, "plan input: missing");
    if ((st = pl_sched_options_resolve(&in->options, &opt)) || (st = s_check_devices(in)) ||
        (st = s_check_job(&in->job)))
        return st;
    if (resident < 1 || mb_size < 1 || mb_size > resident)
        return pl_error(PL_ERR_RANGE, "resident %d / microbatch %d: need 1 <= b <= R", resident,
                        mb_size);
    const pl_sched_costs_t *c = in->costs;
    if (!c) {
        if ((st = pl_sched_costs_from_model(in->model, &owned)))
            return st;
        c = owned;
    }
    if ((st = s_check_costs(c)))
        goto err_costs;

    st = PL_ERR_NOMEM;
    pl_sched_eval_t *ev = calloc(1, sizeof(*ev));
    if (!ev)
        goto err_costs;
    int L = c->n_layers, n = in->n_devices;
    size_t nn = (size_t)n * n, nl = (size_t)n * L;
    ev->L = L;
    ev->n_dev = n;
    ev->devs = in->devices;
    ev->pw = malloc(4 * (size_t)(L + 1) * sizeof(double));
    ev->inv_rate = malloc(6 * (size_t)n * sizeof(double));
    ev->gbps = malloc(3 * nn * sizeof(double));
    ev->same_host = malloc(nn);
    ev->emax = malloc(nl * sizeof(int));
    ev->fin_ok = malloc(nl);
    ev->cost_last = malloc(nl * sizeof(double));
    if (!ev->pw || !ev->inv_rate || !ev->gbps || !ev->same_host || !ev->emax || !ev->fin_ok ||
        !ev->cost_last)
        goto err_ev;
    ev->pf = ev->pw + (L + 1);
    ev->pa = ev->pf + (L + 1);
    ev->pk = ev->pa + (L + 1);
    ev->pw[0] = ev->pf[0] = ev->pa[0] = ev->pk[0] = 0.0;
    for (int i = 0; i < L; i++) {
        ev->pw[i + 1] = ev->pw[i] + c->layers[i].weight_bytes;
        ev->pf[i + 1] = ev->pf[i] + c->layers[i].flops_per_token;
        ev->pa[i + 1] = ev->pa[i] + c->layers[i].attn_flops_per_pos;
        ev->pk[i + 1] = ev->pk[i] + c->layers[i].kv_bytes_per_token;
    }
    ev->embed_w = c->embed_weight_bytes;
    ev->embed_tok = c->embed_bytes_per_token;
    ev->head_w = c->head_weight_bytes;
    ev->head_f = c->head_flops_per_seq;
    ev->tied = c->tied_bytes;
    ev->act_tok = c->act_bytes_per_token;
    ev->work_tok = c->work_bytes_per_token;
    ev->logits_seq = c->logits_bytes_per_seq;
    ev->score_pair = c->score_bytes_per_pair;

    const pl_sched_job_t *j = &in->job;
    ev->n_seqs = j->n_seqs;
    ev->p_avg = j->prompt_avg;
    ev->p_max = j->prompt_max;
    ev->n_new = j->max_new_tokens;
    ev->ctx = j->ctx > 0 ? j->ctx : j->prompt_max + j->max_new_tokens;
    ev->req_chunk = j->prefill_chunk;
    ev->w_pre = opt.objective == PL_SCHED_OBJ_DECODE ? 0.0 : 1.0;
    ev->w_dec = opt.objective == PL_SCHED_OBJ_PREFILL  ? 0.0
                : opt.objective == PL_SCHED_OBJ_DECODE ? 1.0
                                                       : (double)(j->max_new_tokens - 1);

    ev->inv_bw = ev->inv_rate + n;
    ev->cap = ev->inv_bw + n;
    ev->inv_dec = ev->cap + n;
    ev->inv_pass = ev->inv_dec + n;
    ev->inv_attn = ev->inv_pass + n;
    for (int d = 0; d < n; d++) {
        const pl_sched_device_t *dev = &in->devices[d];
        ev->inv_rate[d] = 1.0 / (dev->gflops * 1e9);
        ev->inv_bw[d] = 1.0 / (dev->mem_gbps * 1e9);
        ev->inv_dec[d] = dev->dec_gflops > 0 ? 1.0 / (dev->dec_gflops * 1e9) : 0.0;
        ev->inv_pass[d] = dev->pass_gbps > 0 ? 1.0 / (dev->pass_gbps * 1e9) : 0.0;
        ev->inv_attn[d] = dev->attn_gflops > 0 ? 1.0 / (dev->attn_gflops * 1e9) : 0.0;
        ev->cap[d] = dev->mem_bytes > dev->reserve_bytes
                         ? (double)(dev->mem_bytes - dev->reserve_bytes)
                         : 0.0;
    }
    ev->lat = ev->gbps + nn;
    ev->inv_link = ev->lat + nn;
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            size_t i = (size_t)a * n + b;
            bool same = strcmp(in->devices[a].host, in->devices[b].host) == 0;
            pl_sched_link_t l = same ? opt.same_host : opt.cross_host;
            if (in->links && in->links[i].gbps > 0)
                l = in->links[i];
            ev->same_host[i] = same;
            ev->gbps[i] = l.gbps;
            ev->lat[i] = l.latency_s;
            ev->inv_link[i] = 1.0 / (l.gbps * 1e9);
        }
    }
    pl_sched_eval_set_batch(ev, resident, mb_size);
    pl_sched_costs_destroy(&owned);
    *ev_p = ev;
    return PL_OK;

err_ev:
    pl_sched_eval_destroy(&ev);
    pl_error(st, "planner: out of memory");
err_costs:
    pl_sched_costs_destroy(&owned);
    return st;
}

void pl_sched_eval_set_batch_light(pl_sched_eval_t *ev, int resident, int mb_size)
{
    assert(resident >= 1 && mb_size >= 1);
    double b = mb_size, p = ev->p_avg, pm = ev->p_max;
    double c = p + ev->n_new / 2.0;
    ev->R = resident;
    ev->b = mb_size;
    ev->pre_tok = b * p;
    ev->pre_pos = b * p * (p + 1.0) / 2.0;
    ev->pre_kv = 2.0 * b * p;
    ev->dec_tok = b;
    ev->dec_pos = b * c;
    ev->dec_kv = b * (c + 1.0);
    ev->pre_headf = b * ev->head_f;
    ev->dec_headf = b * ev->head_f;
    ev->pre_embed = b * p * ev->embed_tok;
    ev->dec_embed = b * ev->embed_tok;
    ev->pre_act = b * p * ev->act_tok;
    ev->dec_act = b * ev->act_tok;
    ev->kv_slots = (double)resident * ev->ctx;
    ev->work = b * pm * (2.0 * ev->act_tok + ev->work_tok) + pm * ev->ctx * ev->score_pair;
    ev->logits = b * ev->logits_seq;
}

void pl_sched_eval_set_batch(pl_sched_eval_t *ev, int resident, int mb_size)
{
    pl_sched_eval_set_batch_light(ev, resident, mb_size);
    int n = ev->n_dev, L = ev->L;
    ev->tables_R = resident;
    ev->tables_b = mb_size;
    for (int d = 0; d < n; d++) {
        int *emax = ev->emax + (size_t)d * L;
        unsigned char *fin = ev->fin_ok + (size_t)d * L;
        double *last = ev->cost_last + (size_t)d * L;
        double cap = ev->cap[d];
        int e = 0;
        for (int a = 0; a < L; a++) {
            if (e < a)
                e = a;
            while (e + 1 <= L - 1 && pl_sched_mem(ev, a, e + 1) <= cap)
                e++;
            emax[a] = e;
            fin[a] = pl_sched_mem(ev, a, L) <= cap;
            last[a] = pl_sched_comp(ev, d, a, L);
        }
    }
}

int pl_sched_eval_layers(const pl_sched_eval_t *ev)
{
    return ev->L;
}

double pl_sched_stage_cost(const pl_sched_eval_t *ev, int d, int first, int count, int next)
{
    assert(d >= 0 && d < ev->n_dev && first >= 0 && count >= 1 && first + count <= ev->L);
    assert(next < ev->n_dev);
    return pl_sched_comp(ev, d, first, first + count) + pl_sched_xfer(ev, d, next);
}

void pl_sched_stage_times(const pl_sched_eval_t *ev, int d, int first, int count, int next,
                          double *t_prefill, double *t_decode)
{
    /* the same roofline as pl_sched_comp, per phase */
    pl_sched_eval_t one = *ev;
    one.w_pre = 1.0;
    one.w_dec = 0.0;
    double tp = pl_sched_comp(&one, d, first, first + count);
    one.w_pre = 0.0;
    one.w_dec = 1.0;
    double td = pl_sched_comp(&one, d, first, first + count);
    if (next >= 0) {
        tp += pl_sched_xpre(ev, d, next);
        td += pl_sched_xdec(ev, d, next);
    }
    *t_prefill = tp;
    *t_decode = td;
}

double pl_sched_stage_mem(const pl_sched_eval_t *ev, int d, int first, int count)
{
    (void)d;
    assert(first >= 0 && count >= 1 && first + count <= ev->L);
    return pl_sched_mem(ev, first, first + count);
}

double pl_sched_device_usable(const pl_sched_eval_t *ev, int d)
{
    return ev->cap[d];
}

pl_sched_link_t pl_sched_link(const pl_sched_eval_t *ev, int d, int n)
{
    size_t i = (size_t)d * ev->n_dev + n;
    return (pl_sched_link_t){ev->gbps[i], ev->lat[i]};
}

double pl_sched_split_bottleneck(const pl_sched_eval_t *ev, const pl_sched_split_t *s)
{
    double worst = 0.0;
    for (int i = 0; i < s->n_stages; i++) {
        int e = i + 1 < s->n_stages ? s->first[i + 1] : ev->L;
        int next = i + 1 < s->n_stages ? s->device[i + 1] : -1;
        double c = pl_sched_stage_cost(ev, s->device[i], s->first[i], e - s->first[i], next);
        if (c > worst)
            worst = c;
    }
    return worst;
}
