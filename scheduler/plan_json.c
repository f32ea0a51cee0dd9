/* The plan as JSON for `pipectl -o json` and the coordinator's job record: every number of the
 * table, units in the key names (_s seconds, bytes unsuffixed). */
#include "scheduler/plan.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    bool ok;
} s_js_t;

static void s_set(s_js_t *js, json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        js->ok = false;
}

static json_t *s_num_or_null(double v)
{
    return v > 0 ? json_real(v) : json_null();
}

static json_t *s_ref(s_js_t *js, const pl_plan_device_ref_t *r)
{
    json_t *o = json_object();
    if (!o) {
        js->ok = false;
        return NULL;
    }
    s_set(js, o, "device", json_integer(r->device));
    s_set(js, o, "device_name", json_string(r->device_name));
    s_set(js, o, "node", json_string(r->node));
    if (r->why[0])
        s_set(js, o, "why", json_string(r->why));
    return o;
}

static json_t *s_stage(s_js_t *js, int i, const pl_plan_stage_t *s)
{
    json_t *o = json_object(), *link = json_object();
    if (!o || !link) {
        json_decref(o);
        json_decref(link);
        js->ok = false;
        return NULL;
    }
    s_set(js, o, "stage", json_integer(i));
    s_set(js, o, "device", json_integer(s->device));
    s_set(js, o, "device_name", json_string(s->device_name));
    s_set(js, o, "node", json_string(s->node));
    s_set(js, o, "host", json_string(s->host));
    s_set(js, o, "backend", json_string(s->backend));
    s_set(js, o, "device_index", json_integer(s->device_index));
    s_set(js, o, "first_layer", json_integer(s->first_layer));
    s_set(js, o, "last_layer", json_integer(s->last_layer));
    s_set(js, o, "n_layers", json_integer(s->n_layers));
    s_set(js, o, "has_embed", json_boolean(s->has_embed));
    s_set(js, o, "has_head", json_boolean(s->has_head));
    s_set(js, o, "cost_s", json_real(s->cost));
    s_set(js, o, "prefill_s", json_real(s->t_prefill));
    s_set(js, o, "decode_s", json_real(s->t_decode));
    s_set(js, o, "prefill_call_s", json_real(s->t_prefill_call));
    s_set(js, o, "decode_read_bytes", json_real(s->decode_read_bytes));
    s_set(js, o, "xfer_prefill_s", json_real(s->xfer_prefill));
    s_set(js, o, "xfer_decode_s", json_real(s->xfer_decode));
    s_set(js, o, "mem_used", json_integer((json_int_t)s->mem_used));
    s_set(js, o, "mem_avail", json_integer((json_int_t)s->mem_avail));
    s_set(js, o, "mem_weights", json_integer((json_int_t)s->mem_weights));
    s_set(js, o, "mem_kv", json_integer((json_int_t)s->mem_kv));
    s_set(js, o, "mem_work", json_integer((json_int_t)s->mem_work));
    s_set(js, o, "next_stage", json_integer(s->next_stage));
    s_set(js, link, "gbps", json_real(s->link.gbps));
    s_set(js, link, "latency_s", json_real(s->link.latency_s));
    s_set(js, link, "same_host", json_boolean(s->link_same_host));
    s_set(js, o, "link", link);
    return o;
}

json_t *pl_plan_to_json(const pl_plan_t *p)
{
    if (!p)
        return NULL;
    s_js_t js = {.ok = true};
    json_t *o = json_object(), *stages = json_array(), *left = json_array();
    json_t *bn = json_object(), *base = json_object();
    if (!o || !stages || !left || !bn || !base) {
        json_decref(o);
        json_decref(stages);
        json_decref(left);
        json_decref(bn);
        json_decref(base);
        return NULL;
    }
    static const char *objectives[] = {"job", "decode", "prefill"};
    s_set(&js, o, "search", json_string(p->search ? p->search : ""));
    s_set(&js, o, "objective",
          json_string(p->objective >= 0 && p->objective <= 2 ? objectives[p->objective] : "?"));
    for (int i = 0; i < p->n_stages; i++) {
        json_t *s = s_stage(&js, i, &p->stages[i]);
        if (!s || json_array_append_new(stages, s) != 0)
            js.ok = false;
    }
    s_set(&js, o, "stages", stages);
    for (int i = 0; i < p->n_left_out; i++) {
        json_t *r = s_ref(&js, &p->left_out[i]);
        if (!r || json_array_append_new(left, r) != 0)
            js.ok = false;
    }
    s_set(&js, o, "left_out", left);
    s_set(&js, bn, "stage", json_integer(p->bottleneck_stage));
    s_set(&js, bn, "cost_s", json_real(p->bottleneck));
    s_set(&js, o, "bottleneck", bn);
    s_set(&js, o, "n_seqs", json_integer(p->n_seqs));
    s_set(&js, o, "resident_seqs", json_integer(p->resident_seqs));
    s_set(&js, o, "waves", json_integer(p->waves));
    s_set(&js, o, "microbatches", json_integer(p->microbatches));
    s_set(&js, o, "microbatch_size", json_integer(p->microbatch_size));
    s_set(&js, o, "prefill_chunk", json_integer(p->prefill_chunk));
    json_t *sched = json_array();
    for (int i = 0; sched && i < p->prefill_sched.n; i++)
        if (json_array_append_new(sched, json_integer(p->prefill_sched.len[i])) != 0)
            js.ok = false;
    s_set(&js, o, "prefill_schedule", sched);
    s_set(&js, o, "prefill_time_even_s", s_num_or_null(p->prefill_time_even));
    s_set(&js, o, "ctx", json_integer(p->ctx));
    s_set(&js, o, "max_tokens", json_integer(p->max_tokens));
    s_set(&js, o, "prefill_time_s", json_real(p->prefill_time));
    s_set(&js, o, "decode_period_s", json_real(p->decode_period));
    s_set(&js, o, "ring_s", json_real(p->ring_s));
    s_set(&js, o, "wave_time_s", json_real(p->wave_time));
    s_set(&js, o, "job_time_s", json_real(p->job_time));
    s_set(&js, o, "prefill_tok_s", json_real(p->prefill_tok_s));
    s_set(&js, o, "decode_tok_s", json_real(p->decode_tok_s));
    s_set(&js, o, "bubble_prefill", json_real(p->bubble_prefill));
    s_set(&js, o, "bubble_decode", json_real(p->bubble_decode));
    s_set(&js, base, "even_job_time_s", s_num_or_null(p->even_job_time));
    s_set(&js, base, "speedup_even", s_num_or_null(p->speedup_even));
    s_set(&js, base, "single_job_time_s", s_num_or_null(p->single_job_time));
    s_set(&js, base, "speedup_single", s_num_or_null(p->speedup_single));
    s_set(&js, base, "single", p->single.device >= 0 ? s_ref(&js, &p->single) : json_null());
    s_set(&js, o, "baselines", base);
    if (!js.ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *pl_plan_to_json_full(const pl_plan_t *plan, const pl_plan_input_t *in, pl_planner_t mode)
{
    json_t *o = pl_plan_to_json(plan);
    char *table = plan ? pl_plan_explain_new(plan) : NULL;
    if (!o || !table || !in) {
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
             json_object_set_new(js, "dec_gflops", json_real(d->dec_gflops)) == 0 &&
             json_object_set_new(js, "pass_gbps", json_real(d->pass_gbps)) == 0 &&
             json_object_set_new(js, "attn_gflops", json_real(d->attn_gflops)) == 0 &&
             json_object_set_new(js, "host_gbps", json_real(d->host_gbps)) == 0 &&
             json_object_set_new(js, "compute_prefill_s",
                                 json_real(s->t_prefill_call - s->xfer_prefill_call)) == 0 &&
             json_object_set_new(js, "compute_decode_s",
                                 json_real(s->t_decode - s->xfer_decode)) == 0;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
