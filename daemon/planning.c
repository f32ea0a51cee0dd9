/* Planner glue: placement modes, the planner's inputs from a model directory and a job's
 * generation settings, device selection for a fixed stage count, and the plan as JSON and text. */
#include "daemon/planning.h"

#include "common/json.h"
#include "common/util.h"
#include "pipeline/gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_HUGE 1e12 /* GFLOP/s or GB/s that makes one roofline term vanish */

/* Bytes per element of config.json's torch_dtype: 4 for float32, else 2 (bf16, f16, absent). */
static double s_dtype_bytes(const char *model_dir)
{
    char path[PATH_MAX], *text = NULL;
    size_t len = 0;
    double bytes = 2.0;
    if (pl_path_join(model_dir, "config.json", path, sizeof(path)) ||
        pl_file_read(path, 1u << 20, &text, &len)) {
        pl_error_clear();
        return bytes;
    }
    json_t *root = json_loadb(text, len, 0, NULL);
    const char *dt = json_string_value(json_object_get(root, "torch_dtype"));
    if (dt && (!strcmp(dt, "float32") || !strcmp(dt, "float")))
        bytes = 4.0;
    json_decref(root);
    free(text);
    return bytes;
}

pl_status_t pl_planning_model(const char *model_dir, const pl_model_config_t *cfg, bool any_cpu,
                              pl_sched_model_t *m)
{
    if (!cfg || cfg->n_layers < 1)
        return pl_error(PL_ERR_INVALID, "model: no layers");
    double wb = any_cpu ? 4.0 : s_dtype_bytes(model_dir);
    *m = (pl_sched_model_t){.n_layers = cfg->n_layers,
                            .hidden = cfg->hidden,
                            .intermediate = cfg->intermediate,
                            .n_heads = cfg->n_heads,
                            .n_kv_heads = cfg->n_kv_heads,
                            .head_dim = cfg->head_dim,
                            .vocab = cfg->vocab,
                            .weight_bytes = wb,
                            .kv_bytes = wb,
                            .act_bytes = 4.0,
                            .tie_embeddings = cfg->tie_embeddings};
    return PL_OK;
}

pl_status_t pl_planning_shape(const pl_job_spec_t *spec, const pl_model_config_t *cfg,
                              pl_sched_job_t *job)
{
    pl_gen_job_t g;
    pl_status_t st;
    if ((st = pl_gen_job_from_spec(spec, spec->microbatches, cfg, &g)))
        return st;
    uint64_t total = 0;
    int pmax = 1;
    for (int i = 0; i < g.n_seqs; i++) {
        total += (uint64_t)g.prompt_len[i];
        pmax = PL_MAX(pmax, g.prompt_len[i]);
    }
    int avg = (int)llround((double)total / g.n_seqs);
    *job = (pl_sched_job_t){.n_seqs = g.n_seqs,
                            .prompt_avg = PL_MIN(PL_MAX(avg, 1), pmax),
                            .prompt_max = pmax,
                            .max_new_tokens = g.gen.max_new_tokens,
                            .microbatches = spec->microbatches,
                            .ctx = pl_gen_job_max_ctx(&g)};
    pl_gen_job_clear(&g);
    return PL_OK;
}

static int s_layers(const pl_plan_input_t *in)
{
    return in->costs ? in->costs->n_layers : in->model ? in->model->n_layers : 0;
}

/* Keep the `want` devices of mask that run the whole model fastest (memory not considered;
 * ties to the lower index). */
static pl_status_t s_fastest(const pl_plan_input_t *in, bool *mask, int want)
{
    pl_sched_eval_t *ev;
    pl_status_t st = pl_sched_eval_new(in, in->job.n_seqs, 1, &ev);
    if (st)
        return st;
    int L = pl_sched_eval_layers(ev), order[PL_SCHED_MAX_DEVICES], n = 0;
    double cost[PL_SCHED_MAX_DEVICES];
    for (int i = 0; i < in->n_devices; i++) {
        if (!mask[i])
            continue;
        cost[i] = pl_sched_stage_cost(ev, i, 0, L, -1);
        int k = n++;
        while (k > 0 && cost[order[k - 1]] > cost[i]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int k = want; k < n; k++)
        mask[order[k]] = false;
    pl_sched_eval_destroy(&ev);
    return PL_OK;
}

static void s_names(pl_plan_stage_t *s, const pl_sched_device_t *d, int index)
{
    s->device = index;
    snprintf(s->device_name, sizeof(s->device_name), "%s", d->name);
    snprintf(s->node, sizeof(s->node), "%s", d->node);
    snprintf(s->host, sizeof(s->host), "%s", d->host);
    snprintf(s->backend, sizeof(s->backend), "%s", d->backend);
    s->device_index = d->index;
}

/* Predictions of a split (plan.h's pipeline formulas) into p; stages already filled. */
static void s_predict(pl_plan_t *p, const pl_sched_eval_t *ev, const pl_plan_input_t *in)
{
    int S = p->n_stages, M = p->microbatches, R = p->resident_seqs, b = p->microbatch_size;
    double sum_pre = 0, sum_dec = 0, max_pre = 0, max_dec = 0;
    p->bottleneck = -1;
    for (int i = 0; i < S; i++) {
        const pl_plan_stage_t *s = &p->stages[i];
        sum_pre += s->t_prefill;
        sum_dec += s->t_decode;
        max_pre = PL_MAX(max_pre, s->t_prefill);
        max_dec = PL_MAX(max_dec, s->t_decode);
        if (s->cost > p->bottleneck) {
            p->bottleneck = s->cost;
            p->bottleneck_stage = i;
        }
    }
    if (S > 1) {
        pl_sched_link_t l = pl_sched_link(ev, p->stages[S - 1].device, p->stages[0].device);
        p->ring_s = l.latency_s + 4.0 * b / (l.gbps * 1e9);
    }
    double busy = M * max_dec, cycle = sum_dec + p->ring_s;
    p->decode_period = PL_MAX(busy, cycle);
    p->prefill_time = sum_pre + (M - 1) * max_pre;
    p->decode_tok_s = p->decode_period > 0 ? R / p->decode_period : 0;
    p->prefill_tok_s = p->prefill_time > 0 ? (double)R * in->job.prompt_avg / p->prefill_time : 0;
    p->bubble_decode = p->decode_period > 0 ? PL_MAX(0.0, 1.0 - busy / p->decode_period) : 0;
    p->bubble_prefill = p->prefill_time > 0 ? PL_MAX(0.0, 1.0 - M * max_pre / p->prefill_time) : 0;
    p->wave_time = p->prefill_time + (in->job.max_new_tokens - 1) * p->decode_period;
    p->waves = 1;
    p->job_time = p->wave_time;
}

/* The even split over the devices of mask in input order (node-name order in the coordinator),
 * every sequence resident. Baselines come from the planner over the same devices. */
static pl_status_t s_even(const pl_plan_input_t *in, const bool *mask, pl_plan_t **plan_p)
{
    int devs[PL_SCHED_MAX_DEVICES], n = 0, L = s_layers(in);
    for (int i = 0; i < in->n_devices; i++)
        if (mask[i])
            devs[n++] = i;
    n = PL_MIN(n, L);
    int R = in->job.n_seqs;
    int M = PL_MAX(1, PL_MIN(in->job.microbatches > 0 ? in->job.microbatches : n, R));
    int b = (R + M - 1) / M;
    pl_sched_eval_t *ev;
    pl_status_t st = pl_sched_eval_new(in, R, b, &ev);
    if (st)
        return st;
    pl_plan_t *p =
        calloc(1, sizeof(*p) + (size_t)n * sizeof(pl_plan_stage_t) + sizeof(pl_plan_device_ref_t));
    if (!p) {
        pl_sched_eval_destroy(&ev);
        return pl_error(PL_ERR_NOMEM, "plan: out of memory");
    }
    p->stages = (pl_plan_stage_t *)(p + 1);
    p->left_out = (pl_plan_device_ref_t *)(p->stages + n);
    p->n_stages = n;
    for (int i = 0, a = 0; i < n; i++) {
        pl_plan_stage_t *s = &p->stages[i];
        int d = devs[i], cnt = L / n + (i < L % n ? 1 : 0), next = i + 1 < n ? devs[i + 1] : -1;
        const pl_sched_device_t *dv = &in->devices[d];
        double mem = pl_sched_stage_mem(ev, d, a, cnt), cap = pl_sched_device_usable(ev, d);
        if (mem > cap) {
            st = pl_error(PL_ERR_INFEASIBLE,
                          "even split: stage %d (%s on %s, layers %d-%d) needs %.2f GiB but "
                          "%.2f GiB are usable",
                          i, dv->name, dv->node, a, a + cnt - 1, mem / 1073741824.0,
                          cap / 1073741824.0);
            goto out;
        }
        s_names(s, dv, d);
        s->first_layer = a;
        s->last_layer = a + cnt - 1;
        s->n_layers = cnt;
        s->has_embed = a == 0;
        s->has_head = a + cnt == L;
        s->cost = pl_sched_stage_cost(ev, d, a, cnt, next);
        double cp, cd;
        pl_sched_stage_times(ev, d, a, cnt, next, &s->t_prefill, &s->t_decode);
        pl_sched_stage_times(ev, d, a, cnt, -1, &cp, &cd);
        s->xfer_prefill = s->t_prefill - cp;
        s->xfer_decode = s->t_decode - cd;
        s->mem_used = (uint64_t)llround(mem);
        s->mem_avail = (uint64_t)cap;
        s->next_stage = i + 1 < n ? i + 1 : 0;
        int to = next >= 0 ? next : devs[0];
        if (to != d) {
            s->link = pl_sched_link(ev, d, to);
            s->link_same_host = strcmp(dv->host, in->devices[to].host) == 0;
        } else {
            s->link_same_host = true;
        }
        a += cnt;
    }
    p->objective =
        (in->options.field_mask & PL_PLAN_OPT_OBJECTIVE) ? in->options.objective : PL_SCHED_OBJ_JOB;
    p->search = "even";
    p->n_seqs = p->resident_seqs = R;
    p->microbatches = M;
    p->microbatch_size = b;
    p->ctx = in->job.ctx > 0 ? in->job.ctx : in->job.prompt_max + in->job.max_new_tokens;
    p->max_tokens = b * in->job.prompt_max;
    p->single.device = -1;
    s_predict(p, ev, in);
    /* the baselines of the planner over the same devices: even is this plan, single its own */
    pl_plan_t *ref = NULL;
    if (pl_replan(in, mask, &ref) == PL_OK) {
        p->single = ref->single;
        p->single_job_time = ref->single_job_time;
        pl_plan_destroy(&ref);
    }
    pl_error_clear();
    p->even_job_time = p->job_time;
    if (p->job_time > 0) {
        p->speedup_even = 1.0;
        p->speedup_single = p->single_job_time > 0 ? p->single_job_time / p->job_time : 0;
    }
    *plan_p = p;
    p = NULL;
out:
    free(p);
    pl_sched_eval_destroy(&ev);
    return st;
}

static pl_status_t s_plan_once(const pl_plan_input_t *in, const bool *mask, pl_planner_t mode,
                               int stages, pl_plan_t **plan_p)
{
    if (mode == PL_PLANNER_EVEN)
        return s_even(in, mask, plan_p);
    pl_plan_input_t x = *in;
    x.options.field_mask |= PL_PLAN_OPT_ALLOW_SKIP;
    x.options.allow_skip = mode == PL_PLANNER_AUTO;
    if (mode == PL_PLANNER_AUTO && stages > 0) {
        x.options.field_mask |= PL_PLAN_OPT_MAX_STAGES;
        x.options.max_stages = stages;
    }
    return pl_replan(&x, mask, plan_p);
}

pl_status_t pl_planning_run(const pl_plan_input_t *in, const bool *alive, pl_planner_t mode,
                            int stages, pl_plan_t **plan_p)
{
    bool mask[PL_SCHED_MAX_DEVICES];
    int n = 0;
    pl_status_t st;
    if (!in || in->n_devices < 1 || in->n_devices > PL_SCHED_MAX_DEVICES)
        return pl_error(PL_ERR_RANGE, "plan: %d devices not in [1, %d]", in ? in->n_devices : 0,
                        PL_SCHED_MAX_DEVICES);
    for (int i = 0; i < in->n_devices; i++)
        n += (mask[i] = !alive || alive[i]);
    if (n == 0)
        return pl_error(PL_ERR_NO_DEVICE, "no device can take a stage");
    if (stages < 0)
        return pl_error(PL_ERR_RANGE, "stages: %d < 0", stages);
    if (mode != PL_PLANNER_AUTO) {
        if (stages > n)
            return pl_error(PL_ERR_INFEASIBLE,
                            "%d stages asked for, but only %d device%s can "
                            "take one",
                            stages, n, n == 1 ? "" : "s");
        int want = PL_MIN(stages > 0 ? stages : n, s_layers(in));
        if (want < n && (st = s_fastest(in, mask, want)))
            return st;
    }
    pl_plan_input_t x = *in;
    pl_plan_t *p = NULL;
    if ((st = s_plan_once(&x, mask, mode, stages, &p)))
        return st;
    /* at least one microbatch per stage keeps every stage busy (when there are enough) */
    int need = PL_MIN(p->n_stages, p->resident_seqs);
    if (p->microbatches < need) {
        pl_plan_destroy(&p);
        x.job.microbatches = need;
        if ((st = s_plan_once(&x, mask, mode, stages, &p)))
            return st;
    }
    *plan_p = p;
    return PL_OK;
}

bool pl_planning_waves_note(const pl_plan_t *plan, char *buf, size_t len)
{
    if (!plan || plan->resident_seqs >= plan->n_seqs)
        return false;
    snprintf(buf, len,
             "KV cache for %d sequences does not fit; at most %d fit — split the prompts into "
             "several jobs",
             plan->n_seqs, plan->resident_seqs);
    return true;
}

/* Prefill and decode compute of `stage` on a copy of its device with the given rates. */
static pl_status_t s_times(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                           double gflops, double gbps, double *pre, double *dec)
{
    const pl_plan_stage_t *s = &plan->stages[stage];
    pl_sched_device_t d = in->devices[s->device];
    d.gflops = gflops;
    d.mem_gbps = gbps;
    pl_plan_input_t one = *in;
    one.devices = &d;
    one.n_devices = 1;
    one.links = NULL;
    pl_sched_eval_t *ev;
    pl_status_t st = pl_sched_eval_new(&one, plan->resident_seqs, plan->microbatch_size, &ev);
    if (st)
        return st;
    pl_sched_stage_times(ev, 0, s->first_layer, s->n_layers, -1, pre, dec);
    pl_sched_eval_destroy(&ev);
    return PL_OK;
}

pl_status_t pl_planning_terms(const pl_plan_input_t *in, const pl_plan_t *plan, int stage,
                              pl_planning_terms_t *terms)
{
    if (!in || !plan || stage < 0 || stage >= plan->n_stages)
        return pl_error(PL_ERR_INVALID, "plan terms: no stage %d", stage);
    const pl_sched_device_t *d = &in->devices[plan->stages[stage].device];
    pl_planning_terms_t t;
    pl_status_t st;
    if ((st = s_times(in, plan, stage, d->gflops, S_HUGE, &t.pre_flop_s, &t.dec_flop_s)) ||
        (st = s_times(in, plan, stage, S_HUGE, d->mem_gbps, &t.pre_mem_s, &t.dec_mem_s)))
        return st;
    *terms = t;
    return PL_OK;
}

char *pl_planning_table(const pl_plan_t *plan)
{
    for (size_t len = 16384; len <= (1u << 22); len *= 8) {
        char *buf = malloc(len);
        if (!buf)
            return NULL;
        if (pl_plan_explain(plan, buf, len) == PL_OK)
            return buf;
        free(buf);
    }
    return NULL;
}

json_t *pl_planning_json(const pl_plan_t *plan, const pl_plan_input_t *in, pl_planner_t mode)
{
    json_t *o = pl_plan_to_json(plan);
    char *table = pl_planning_table(plan);
    if (!o || !table) {
        json_decref(o);
        free(table);
        return NULL;
    }
    bool ok = json_object_set_new(o, "planner", json_string(pl_planner_name(mode))) == 0 &&
              json_object_set_new(o, "table", json_string(table)) == 0;
    free(table);
    json_t *stages = json_object_get(o, "stages");
    for (int i = 0; ok && i < plan->n_stages; i++) {
        const pl_plan_stage_t *s = &plan->stages[i];
        const pl_sched_device_t *d = &in->devices[s->device];
        char id[48];
        snprintf(id, sizeof(id), "%s:%d", s->backend, s->device_index);
        json_t *js = json_array_get(stages, (size_t)i);
        ok = js && json_object_set_new(js, "device_id", json_string(id)) == 0 &&
             json_object_set_new(js, "gflops", json_real(d->gflops)) == 0 &&
             json_object_set_new(js, "mem_gbps", json_real(d->mem_gbps)) == 0 &&
             json_object_set_new(js, "compute_prefill_s",
                                 json_real(s->t_prefill - s->xfer_prefill)) == 0 &&
             json_object_set_new(js, "compute_decode_s", json_real(s->t_decode - s->xfer_decode)) ==
                 0;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
