/* The job spec's one JSON codec (SUBMIT, PLAN, and inside ASSIGN) and the ASSIGN message: what the
 * user asked for, and what the coordinator decided for one stage, as separate values. */
#include "common/json.h"
#include "transport/act.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pl_status_t pl_job_gen_encode(const pl_job_gen_t *g, json_t **obj_p)
{
    char seed[24];
    json_t *stop = json_array();
    for (int i = 0; stop && i < g->n_stop; i++)
        json_array_append_new(stop, json_string(g->stop[i]));
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)g->seed);
    pl_status_t st = pl_msg_int_done(
        json_pack("{s:o, s:i, s:i, s:b, s:{s:f, s:i, s:f, s:s}, s:i, s:s, s:b}", "stop", stop,
                  "max_new_tokens", g->max_new_tokens, "min_new_tokens", g->min_new_tokens,
                  "stop_at_eos", g->stop_at_eos, "sampling", "temperature",
                  (double)g->temperature, "top_k", g->top_k, "top_p", (double)g->top_p, "seed",
                  seed, "prefill_chunk", g->prefill_chunk, "wire_dtype",
                  g->wire_dtype[0] ? g->wire_dtype : "f32", "trace", g->trace),
        "gen", obj_p);
    if (st == PL_OK && g->prefill_sched.n > 0) { /* optional: absent, a stage cuts by the chunk */
        json_t *sched = json_array();
        for (int i = 0; sched && i < g->prefill_sched.n; i++)
            json_array_append_new(sched, json_integer(g->prefill_sched.len[i]));
        bool whole = sched && json_array_size(sched) == (size_t)g->prefill_sched.n;
        if (!whole)
            json_decref(sched);
        if (!whole || json_object_set_new(*obj_p, "prefill_schedule", sched) != 0) {
            json_decref(*obj_p);
            *obj_p = NULL;
            return pl_error(PL_ERR_NOMEM, "gen: out of memory");
        }
    }
    return st;
}

pl_status_t pl_job_spec_encode(const pl_job_spec_t *s, json_t **body_p)
{
    json_t *prompts = json_array(), *nodes = json_array(), *gen;
    pl_status_t st = pl_job_gen_encode(&s->gen, &gen);
    if (st) {
        json_decref(prompts);
        json_decref(nodes);
        return st;
    }
    for (int i = 0; prompts && i < s->n_prompts; i++) {
        json_t *p = json_array();
        for (int t = 0; p && t < s->prompt_len[i]; t++)
            json_array_append_new(p, json_integer(s->prompts[i][t]));
        json_array_append_new(prompts, p);
    }
    for (int i = 0; nodes && i < s->n_nodes; i++)
        json_array_append_new(nodes, json_string(s->nodes[i]));
    json_object_set_new(gen, "prompts", prompts);
    json_object_set_new(gen, "text", json_boolean(s->text));
    json_t *body = json_pack("{s:s, s:o, s:i, s:i, s:s, s:o}", "model", s->model, "gen", gen,
                             "microbatches", s->microbatches, "stages", s->stages, "planner",
                             pl_planner_name(s->planner), "nodes", nodes);
    if (body && s->serve.on)
        json_object_set_new(body, "serve",
                            json_pack("{s:s, s:i, s:i, s:i, s:i}", "name", s->serve.name,
                                      "kv_slots", s->serve.kv_slots, "max_queue",
                                      s->serve.max_queue, "max_tokens", s->serve.max_tokens,
                                      "step_tokens", s->serve.step_tokens));
    if (body && s->deployment[0])
        json_object_set_new(body, "deployment", json_string(s->deployment));
    if (body && s->train && (st = pl_job_train_encode(s->train, body))) { /* msg_train.c */
        json_decref(body);
        return st;
    }
    return pl_msg_int_done(body, "job", body_p);
}

/* One prompt: a non-empty array of non-negative int32 token ids. */
static pl_status_t s_prompt(const json_t *arr, int idx, pl_job_spec_t *s)
{
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n == 0)
        return pl_error(PL_ERR_INVALID, "prompt %d: expected a non-empty array of token ids", idx);
    if (!(s->prompts[idx] = malloc(n * sizeof(int32_t))))
        return pl_error(PL_ERR_NOMEM, "prompt %d: out of memory", idx);
    s->prompt_len[idx] = (int)n;
    for (size_t t = 0; t < n; t++) {
        json_t *v = json_array_get(arr, t);
        if (!json_is_integer(v))
            return pl_error(PL_ERR_INVALID, "prompt %d, token %zu: expected an integer", idx, t);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX)
            return pl_error(PL_ERR_RANGE, "prompt %d, token %zu: id %lld outside the vocabulary",
                            idx, t, (long long)id);
        s->prompts[idx][t] = (int32_t)id;
    }
    return PL_OK;
}

static pl_status_t s_sampling(const json_t *sampling, pl_job_gen_t *g)
{
    double temp = g->temperature, top_p = g->top_p;
    int64_t k = g->top_k;
    const char *seed = NULL;
    pl_status_t st;
    if (!sampling || json_is_null(sampling))
        return PL_OK;
    if (!json_is_object(sampling))
        return pl_error(PL_ERR_INVALID, "field 'sampling': expected an object");
    if ((st = pl_json_num_opt(sampling, "temperature", 0, 100, &temp)) ||
        (st = pl_json_int_opt(sampling, "top_k", 0, 1000000, &k)) ||
        (st = pl_json_num_opt(sampling, "top_p", 1e-6, 1, &top_p)) ||
        (st = pl_json_str_opt(sampling, "seed", 20, &seed)))
        return pl_error_prefix(st, "sampling: ");
    if (seed) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(seed, &end, 10);
        if (!*seed || *end || *seed < '0' || *seed > '9' || errno == ERANGE)
            return pl_error(PL_ERR_INVALID, "field 'sampling.seed': not a decimal number");
        g->seed = v;
    }
    g->temperature = (float)temp;
    g->top_k = (int)k;
    g->top_p = (float)top_p;
    return PL_OK;
}

/* The prefill schedule: at most PL_JOB_MAX_CHUNKS integers, each a chunk of 1 to
 * PL_JOB_MAX_PREFILL_CHUNK tokens. */
static pl_status_t s_sched(const json_t *sched, pl_job_gen_t *g)
{
    pl_job_chunks_t c = {0};
    if (!sched || json_is_null(sched))
        return PL_OK;
    if (!json_is_array(sched) || json_array_size(sched) > PL_JOB_MAX_CHUNKS)
        return pl_error(PL_ERR_INVALID,
                        "field 'prefill_schedule': expected an array of at most %d integers",
                        PL_JOB_MAX_CHUNKS);
    for (size_t i = 0; i < json_array_size(sched); i++) {
        json_t *v = json_array_get(sched, i);
        json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
        if (n < 1 || n > PL_JOB_MAX_PREFILL_CHUNK)
            return pl_error(PL_ERR_RANGE,
                            "field 'prefill_schedule': entry %zu is not an integer in [1, %d]", i,
                            PL_JOB_MAX_PREFILL_CHUNK);
        c.len[c.n++] = (int)n;
    }
    g->prefill_sched = c;
    return PL_OK;
}

/* Stop strings: at most PL_JOB_MAX_STOP non-empty strings without NUL bytes. */
static pl_status_t s_stop(const json_t *stop, pl_job_gen_t *g)
{
    if (!stop || json_is_null(stop))
        return PL_OK;
    if (!json_is_array(stop) || json_array_size(stop) > PL_JOB_MAX_STOP)
        return pl_error(PL_ERR_INVALID, "field 'stop': expected an array of at most %d strings",
                        PL_JOB_MAX_STOP);
    for (size_t i = 0; i < json_array_size(stop); i++) {
        json_t *v = json_array_get(stop, i);
        size_t n = json_string_length(v);
        if (!json_is_string(v) || n == 0 || n > PL_JOB_STOP_MAX ||
            strlen(json_string_value(v)) != n)
            return pl_error(PL_ERR_INVALID,
                            "field 'stop': entry %zu is not a string of 1 to %d bytes", i,
                            PL_JOB_STOP_MAX);
        memcpy(g->stop[i], json_string_value(v), n + 1);
    }
    g->n_stop = (int)json_array_size(stop);
    return PL_OK;
}

pl_status_t pl_job_gen_decode(const json_t *gen, pl_job_gen_t *out)
{
    pl_job_gen_t g = *out;
    int64_t max_new = g.max_new_tokens, min_new = g.min_new_tokens, chunk = g.prefill_chunk;
    const char *wire = NULL;
    pl_act_dtype_t dt;
    pl_status_t st;
    if (!json_is_object(gen))
        return pl_error(PL_ERR_INVALID, "field 'gen': expected an object");
    if ((st = pl_json_int_opt(gen, "max_new_tokens", 1, PL_JOB_MAX_NEW_TOKENS, &max_new)) ||
        (st = pl_json_int_opt(gen, "min_new_tokens", 0, max_new, &min_new)) ||
        (st = pl_json_bool_opt(gen, "stop_at_eos", &g.stop_at_eos)) ||
        (st = pl_json_bool_opt(gen, "trace", &g.trace)) ||
        (st = s_stop(json_object_get(gen, "stop"), &g)) ||
        (st = s_sampling(json_object_get(gen, "sampling"), &g)) ||
        (st = s_sched(json_object_get(gen, "prefill_schedule"), &g)) ||
        (st = pl_json_int_opt(gen, "prefill_chunk", 0, PL_JOB_MAX_PREFILL_CHUNK, &chunk)) ||
        (st = pl_json_str_opt(gen, "wire_dtype", sizeof(g.wire_dtype) - 1, &wire)))
        return st;
    if (wire && (st = pl_act_dtype_parse(wire, &dt)))
        return pl_error_prefix(st, "field 'wire_dtype': ");
    if (wire)
        snprintf(g.wire_dtype, sizeof(g.wire_dtype), "%s", wire);
    g.prefill_chunk = (int)chunk;
    g.max_new_tokens = (int)max_new;
    g.min_new_tokens = (int)min_new;
    *out = g;
    return PL_OK;
}

/* A deployment's serving part (pl_job_serve_t), when the job has one. */
static pl_status_t s_serve(const json_t *serve, pl_job_serve_t *v)
{
    int64_t slots, queue, max_tokens, step;
    pl_status_t st;
    if (!serve || json_is_null(serve))
        return PL_OK;
    if (!json_is_object(serve))
        return pl_error(PL_ERR_INVALID, "field 'serve': expected an object");
    if ((st = pl_json_str(serve, "name", v->name, sizeof(v->name) - 1)) ||
        (st = pl_json_int(serve, "kv_slots", 1, PL_CFG_DEPLOY_MAX_SLOTS, &slots)) ||
        (st = pl_json_int(serve, "max_queue", 0, PL_CFG_DEPLOY_MAX_QUEUE, &queue)) ||
        (st = pl_json_int(serve, "max_tokens", 1, PL_JOB_MAX_NEW_TOKENS, &max_tokens)) ||
        (st = pl_json_int(serve, "step_tokens", 1, PL_JOB_MAX_PREFILL_CHUNK, &step)))
        return pl_error_prefix(st, "serve: ");
    if (!pl_cfg_name_ok(v->name))
        return pl_error(PL_ERR_INVALID, "field 'serve.name': not a name ([A-Za-z0-9_.-]+)");
    v->on = true;
    v->kv_slots = (int)slots;
    v->max_queue = (int)queue;
    v->max_tokens = (int)max_tokens;
    v->step_tokens = (int)step;
    return PL_OK;
}

/* The generation settings and the prompts: none for a deployment, at least one otherwise. */
static pl_status_t s_gen(const json_t *gen, pl_job_spec_t *s)
{
    json_t *prompts;
    pl_status_t st;
    if (!json_is_object(gen))
        return pl_error(PL_ERR_INVALID, "field 'gen': expected an object");
    if ((st = pl_json_array(gen, "prompts", PL_JOB_MAX_SEQS, &prompts)))
        return st;
    if (json_array_size(prompts) == 0 && !s->serve.on && !s->train)
        return pl_error(PL_ERR_INVALID, "field 'prompts': no prompts");
    if (json_array_size(prompts) > 0 && (s->serve.on || s->train))
        return pl_error(PL_ERR_INVALID, "field 'prompts': a %s takes none",
                        s->train ? "training job" : "deployment");
    if ((st = pl_job_gen_decode(gen, &s->gen)) ||
        (st = pl_json_bool_opt(gen, "text", &s->text)))
        return st;
    s->n_prompts = (int)json_array_size(prompts);
    if (s->n_prompts == 0)
        return PL_OK;
    s->prompts = calloc((size_t)s->n_prompts, sizeof(*s->prompts));
    s->prompt_len = calloc((size_t)s->n_prompts, sizeof(*s->prompt_len));
    if (!s->prompts || !s->prompt_len)
        return pl_error(PL_ERR_NOMEM, "prompts: out of memory");
    for (int i = 0; i < s->n_prompts; i++)
        if ((st = s_prompt(json_array_get(prompts, (size_t)i), i, s)))
            return st;
    return PL_OK;
}

static pl_status_t s_nodes(const json_t *nodes, pl_job_spec_t *s)
{
    if (!nodes || json_is_null(nodes))
        return PL_OK;
    if (!json_is_array(nodes) || json_array_size(nodes) > PL_CFG_MAX_NODES)
        return pl_error(PL_ERR_INVALID, "field 'nodes': expected an array of at most %d names",
                        PL_CFG_MAX_NODES);
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *v = json_array_get(nodes, i);
        size_t n = json_string_length(v);
        if (!json_is_string(v) || n == 0 || n > PL_CFG_NAME_MAX ||
            strlen(json_string_value(v)) != n)
            return pl_error(PL_ERR_INVALID, "field 'nodes': entry %zu is not a node name", i);
        memcpy(s->nodes[s->n_nodes++], json_string_value(v), n + 1);
    }
    return PL_OK;
}

pl_status_t pl_job_spec_decode(const json_t *body, pl_job_spec_t *out)
{
    pl_job_spec_t *s = malloc(sizeof(*s));
    int64_t mb = 0, stages = 0;
    const char *planner = NULL, *deployment = NULL;
    pl_status_t st;
    if (!s)
        return pl_error(PL_ERR_NOMEM, "job: out of memory");
    pl_job_spec_init(s);
    if ((st = pl_json_str(body, "model", s->model, sizeof(s->model) - 1)))
        goto err;
    if (s->model[0] != '/') {
        st = pl_error(PL_ERR_INVALID, "field 'model': expected an absolute path");
        goto err;
    }
    if ((st = pl_json_int_opt(body, "microbatches", 0, 1024, &mb)) ||
        (st = pl_json_int_opt(body, "stages", 0, PL_MSG_MAX_STAGES, &stages)) ||
        (st = pl_json_str_opt(body, "planner", 16, &planner)) ||
        (planner && (st = pl_planner_parse(planner, &s->planner))) ||
        (st = s_nodes(json_object_get(body, "nodes"), s)) ||
        (st = s_serve(json_object_get(body, "serve"), &s->serve)) ||
        (st = pl_job_train_decode(body, s)) ||
        (st = pl_json_str_opt(body, "deployment", PL_CFG_NAME_MAX, &deployment)) ||
        (st = s_gen(json_object_get(body, "gen"), s)))
        goto err;
    if (s->train && (s->serve.on || (deployment && deployment[0]))) {
        st = pl_error(PL_ERR_INVALID, "field 'train': a training job is neither a deployment "
                                      "nor runs on one");
        goto err;
    }
    if (deployment && deployment[0]) {
        if (!pl_cfg_name_ok(deployment)) {
            st = pl_error(PL_ERR_INVALID, "field 'deployment': not a name ([A-Za-z0-9_.-]+)");
            goto err;
        }
        if (s->serve.on) {
            st = pl_error(PL_ERR_INVALID, "field 'deployment': a deployment cannot name one");
            goto err;
        }
        snprintf(s->deployment, sizeof(s->deployment), "%s", deployment);
    }
    s->microbatches = (int)mb;
    s->stages = (int)stages;
    *out = *s;
    free(s);
    return PL_OK;
err:
    pl_job_spec_clear(s);
    free(s);
    return st;
}

pl_status_t pl_msg_assign_encode(const pl_msg_assign_t *m, json_t **body_p)
{
    json_t *spec;
    pl_status_t st = pl_job_spec_encode(&m->spec, &spec);
    if (st)
        return st;
    json_t *body = json_pack("{s:I, s:i, s:I, s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "job",
                             (json_int_t)m->job, "stage", m->stage, "epoch", (json_int_t)m->epoch,
                             "n_stages", m->n_stages, "device", m->device, "first", m->first,
                             "last", m->last, "max_ctx", m->max_ctx, "max_tokens", m->max_tokens,
                             "microbatches", m->microbatches, "spec", spec);
    if (body && m->n_resume) {
        json_t *res;
        if ((st = pl_msg_results_encode(m->resume, m->n_resume, &res))) {
            json_decref(body);
            return st;
        }
        json_object_set_new(body, "resume", res);
    }
    return pl_msg_int_done(body, "ASSIGN", body_p);
}

pl_status_t pl_msg_assign_decode(const json_t *body, pl_msg_assign_t *out)
{
    int64_t job, stage, epoch, n_stages, first, last, max_ctx, max_tokens, mb;
    pl_msg_assign_t *m = calloc(1, sizeof(*m));
    pl_status_t st;
    if (!m)
        return pl_error(PL_ERR_NOMEM, "ASSIGN: out of memory");
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &job)) ||
        (st = pl_json_int(body, "stage", 0, PL_MSG_MAX_STAGES - 1, &stage)) ||
        (st = pl_json_int(body, "epoch", 1, UINT32_MAX, &epoch)) ||
        (st = pl_json_int(body, "n_stages", stage + 1, PL_MSG_MAX_STAGES, &n_stages)) ||
        (st = pl_json_str(body, "device", m->device, sizeof(m->device) - 1)) ||
        (st = pl_json_int(body, "first", 0, 4096, &first)) ||
        (st = pl_json_int(body, "last", first, 4096, &last)) ||
        (st = pl_json_int(body, "max_ctx", 1, 1 << 24, &max_ctx)) ||
        (st = pl_json_int(body, "max_tokens", 1, 1 << 24, &max_tokens)) ||
        (st = pl_json_int(body, "microbatches", 1, 1024, &mb)))
        goto out;
    json_t *spec = json_object_get(body, "spec");
    if (!json_is_object(spec)) {
        st = pl_error(PL_ERR_INVALID, "field 'spec': expected an object");
        goto out;
    }
    if ((st = pl_job_spec_decode(spec, &m->spec))) {
        pl_error_prefix(st, "spec: ");
        goto out;
    }
    const json_t *res = json_object_get(body, "resume");
    if (res && !json_is_null(res)) {
        if ((st = pl_msg_results_decode(res, &m->resume, &m->n_resume)) ||
            (m->n_resume != m->spec.n_prompts &&
             (st = pl_error(PL_ERR_INVALID, "field 'resume': %d sequences for %d prompts",
                            m->n_resume, m->spec.n_prompts)))) {
            pl_error_prefix(st, "ASSIGN: ");
            pl_msg_results_free(m->resume, m->n_resume);
            pl_job_spec_clear(&m->spec);
            goto out;
        }
    }
    m->job = (uint32_t)job;
    m->stage = (int)stage;
    m->epoch = (uint32_t)epoch;
    m->n_stages = (int)n_stages;
    m->first = (int)first;
    m->last = (int)last;
    m->max_ctx = (int)max_ctx;
    m->max_tokens = (int)max_tokens;
    m->microbatches = (int)mb;
    *out = *m;
out:
    free(m);
    return st;
}
