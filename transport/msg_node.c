/* The messages of a node's life: HELLO (registration with devices and calibration), WELCOME,
 * HEARTBEAT (health and job progress), and ERROR, the failure answer to any request. */
#include "common/json.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pl_status_t pl_msg_heartbeat_encode(const pl_msg_heartbeat_t *m, json_t **body_p)
{
    json_t *stages = json_array();
    for (int i = 0; stages && i < m->n_stages; i++) {
        const pl_msg_progress_t *p = &m->stages[i];
        json_t *e = json_pack("{s:I, s:i, s:I, s:I, s:f, s:I}", "job", (json_int_t)p->job,
                              "stage", p->stage, "epoch", (json_int_t)p->epoch, "generated",
                              (json_int_t)p->generated, "busy_s", p->busy_s, "seqs_done",
                              (json_int_t)p->seqs_done);
        if (e && p->text_len > 0 &&
            (json_object_set_new(e, "text", json_stringn(m->text + p->text_off, p->text_len)) ||
             json_object_set_new(e, "text_at", json_integer((json_int_t)p->text_at)))) {
            json_decref(e);
            e = NULL;
        }
        if (!e || json_array_append_new(stages, e)) {
            json_decref(stages);
            stages = NULL;
        }
    }
    json_t *sys = NULL;
    if (stages && pl_msg_node_health_encode(&m->sys, &sys)) {
        json_decref(stages);
        stages = NULL;
    }
    return pl_msg_int_done(json_pack("{s:s, s:o, s:I, s:f, s:o?}", "node", m->node, "stages",
                                     stages, "rss_kb", (json_int_t)m->rss_kb, "load1", m->load1,
                                     "system", sys),
                           "HEARTBEAT", body_p);
}

/* A stage's text piece, appended to m's text: a non-empty string that fits what is left of the
 * heartbeat's PL_MSG_MAX_HB_TEXT bytes, at an offset that keeps it inside one result's text. */
static pl_status_t s_progress_text(const json_t *e, pl_msg_heartbeat_t *m, pl_msg_progress_t *p)
{
    const json_t *t = json_object_get(e, "text");
    int64_t at;
    pl_status_t st;
    if (!t)
        return json_object_get(e, "text_at")
                   ? pl_error(PL_ERR_INVALID, "field 'text_at' without 'text'")
                   : PL_OK;
    size_t n = json_string_length(t);
    if (!json_is_string(t) || n == 0 || n > PL_MSG_MAX_HB_TEXT - m->text_used)
        return pl_error(PL_ERR_INVALID,
                        "field 'text': expected a non-empty string, at most %u bytes of text "
                        "in one heartbeat",
                        PL_MSG_MAX_HB_TEXT);
    if ((st = pl_json_int(e, "text_at", 0, (int64_t)PL_MSG_MAX_RESULT_TEXT - (int64_t)n, &at)))
        return st;
    memcpy(m->text + m->text_used, json_string_value(t), n);
    p->text_at = at;
    p->text_off = m->text_used;
    p->text_len = (uint32_t)n;
    m->text_used += (uint32_t)n;
    m->text[m->text_used] = '\0';
    return PL_OK;
}

pl_status_t pl_msg_heartbeat_decode(const json_t *body, pl_msg_heartbeat_t *out)
{
    pl_msg_heartbeat_t *m = calloc(1, sizeof(*m));
    json_t *stages;
    pl_status_t st;
    if (!m)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    if ((st = pl_msg_int_name(body, "node", m->node, PL_CFG_NAME_MAX)) ||
        (st = pl_json_array(body, "stages", PL_MSG_MAX_STAGES, &stages)) ||
        (st = pl_json_int(body, "rss_kb", 0, INT64_MAX, &m->rss_kb)) ||
        (st = pl_json_num(body, "load1", 0, 1e9, &m->load1)))
        goto out;
    pl_msg_node_health_init(&m->sys); /* a daemon that says nothing of it: all unknown */
    if (json_object_get(body, "system") &&
        (st = pl_msg_node_health_decode(json_object_get(body, "system"), &m->sys))) {
        pl_error_prefix(st, "system: ");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(stages); i++) {
        const json_t *e = json_array_get(stages, i);
        int64_t job, stage, epoch;
        pl_msg_progress_t *p = &m->stages[m->n_stages++];
        if ((st = pl_json_int(e, "job", 1, UINT32_MAX, &job)) ||
            (st = pl_json_int(e, "stage", 0, PL_MSG_MAX_STAGES - 1, &stage)) ||
            (st = pl_json_int(e, "epoch", 0, UINT32_MAX, &epoch)) ||
            (st = pl_json_int(e, "generated", 0, INT64_MAX, &p->generated)) ||
            (st = pl_json_num_opt(e, "busy_s", 0, 1e10, &p->busy_s)) ||
            (st = pl_json_int_opt(e, "seqs_done", 0, INT64_MAX, &p->seqs_done)) ||
            (st = s_progress_text(e, m, p))) {
            pl_error_prefix(st, "stages[%zu]: ", i);
            goto out;
        }
        p->job = (uint32_t)job;
        p->stage = (int)stage;
        p->epoch = (uint32_t)epoch;
    }
    *out = *m;
out:
    free(m);
    return st;
}

pl_status_t pl_msg_hello_encode(const pl_msg_hello_t *m, json_t **body_p)
{
    json_t *devs = json_array(), *unav = json_array(), *health;
    pl_status_t st;
    for (int i = 0; devs && i < m->n_devices; i++) {
        const pl_msg_device_t *d = &m->devices[i];
        json_t *dj = json_pack("{s:s, s:s, s:s, s:i, s:I, s:s, s:f, s:f, s:f, s:f, s:f, s:I}", "id",
                               d->id, "backend", d->backend, "name", d->name, "cores", d->cores,
                               "mem_bytes", (json_int_t)d->mem_bytes, "isa", d->isa, "gflops",
                               d->gflops, "mem_gbps", d->mem_gbps, "dec_gflops", d->dec_gflops,
                               "pass_gbps", d->pass_gbps, "attn_gflops", d->attn_gflops, "cpu_mask",
                               (json_int_t)(d->cpu_mask & (uint64_t)INT64_MAX));
        if (dj && d->host_gbps > 0) /* not measured: absent, as an older daemon sends it */
            json_object_set_new(dj, "host_gbps", json_real(d->host_gbps));
        json_array_append_new(devs, dj);
    }
    for (int i = 0; unav && i < m->n_unavailable; i++)
        json_array_append_new(unav, json_pack("{s:s, s:s}", "backend", m->unavailable[i].backend,
                                              "why", m->unavailable[i].why));
    if ((st = pl_msg_heartbeat_encode(&m->health, &health))) {
        json_decref(devs);
        json_decref(unav);
        return st;
    }
    /* its "proto", as every message's, is pl_msg_encode's */
    return pl_msg_int_done(json_pack("{s:s, s:s, s:i, s:o, s:o, s:o}", "node", m->node, "host",
                                     m->host, "pid", m->pid, "devices", devs, "unavailable", unav,
                                     "health", health),
                           "HELLO", body_p);
}

/* A calibrated rate of a device (GFLOP/s, GB/s): 0, not measured, or within [S_RATE_MIN, max].
 * One that all but vanishes (1e-300, a denormal) would turn the planner's times into overflows,
 * so it is refused with the field's name. need: the field must be there. */
#define S_RATE_MIN 1e-3

static pl_status_t s_rate(const json_t *d, const char *key, double max, bool need, double *out)
{
    double r = 0;
    pl_status_t st = need ? pl_json_num(d, key, 0, max, &r) : pl_json_num_opt(d, key, 0, max, &r);
    if (!st && r != 0 && !(r >= S_RATE_MIN))
        st = pl_error(PL_ERR_RANGE, "field '%s': %g is neither 0 (not measured) nor in [%g, %g]",
                      key, r, S_RATE_MIN, max);
    if (!st)
        *out = r;
    return st;
}

static pl_status_t s_device(const json_t *d, pl_msg_device_t *v)
{
    int64_t cores = 0, mem = 0, mask = 0;
    const char *isa = NULL;
    pl_status_t st;
    /* a daemon that does not measure them: none */
    v->dec_gflops = v->pass_gbps = v->attn_gflops = v->host_gbps = 0;
    if ((st = pl_msg_int_name(d, "id", v->id, sizeof(v->id) - 1)) ||
        (st = pl_msg_int_name(d, "backend", v->backend, sizeof(v->backend) - 1)) ||
        (st = pl_json_str(d, "name", v->name, sizeof(v->name) - 1)) ||
        (st = pl_json_int(d, "cores", 0, 1 << 20, &cores)) ||
        (st = pl_json_int(d, "mem_bytes", 0, INT64_MAX, &mem)) ||
        (st = s_rate(d, "gflops", 1e9, true, &v->gflops)) ||
        (st = s_rate(d, "mem_gbps", 1e7, true, &v->mem_gbps)) ||
        (st = s_rate(d, "dec_gflops", 1e9, false, &v->dec_gflops)) ||
        (st = s_rate(d, "pass_gbps", 1e7, false, &v->pass_gbps)) ||
        (st = s_rate(d, "attn_gflops", 1e9, false, &v->attn_gflops)) ||
        (st = s_rate(d, "host_gbps", 1e7, false, &v->host_gbps)) ||
        (st = pl_json_str_opt(d, "isa", sizeof(v->isa) - 1, &isa)) ||
        (st = pl_json_int_opt(d, "cpu_mask", 0, INT64_MAX, &mask)))
        return st;
    v->cpu_mask = (uint64_t)mask;
    v->cores = (int)cores;
    v->mem_bytes = (uint64_t)mem;
    snprintf(v->isa, sizeof(v->isa), "%s", isa ? isa : "");
    return PL_OK;
}

pl_status_t pl_msg_hello_decode(const json_t *body, pl_msg_hello_t *out)
{
    pl_msg_hello_t m = {0};
    int64_t pid = 0;
    json_t *devs, *unav = NULL;
    pl_status_t st;
    if ((st = pl_msg_int_name(body, "node", m.node, PL_CFG_NAME_MAX)) ||
        (st = pl_json_str(body, "host", m.host, sizeof(m.host) - 1)) ||
        (st = pl_json_int_opt(body, "pid", 0, INT32_MAX, &pid)) ||
        (st = pl_json_array(body, "devices", PL_MSG_MAX_DEVICES, &devs)))
        return st;
    if (json_object_get(body, "unavailable") &&
        (st = pl_json_array(body, "unavailable", PL_MSG_MAX_UNAVAILABLE, &unav)))
        return st;
    for (size_t i = 0; i < json_array_size(devs); i++)
        if ((st = s_device(json_array_get(devs, i), &m.devices[m.n_devices++])))
            return pl_error_prefix(st, "device %zu: ", i);
    for (size_t i = 0; i < json_array_size(unav); i++) {
        const json_t *u = json_array_get(unav, i);
        pl_msg_unavailable_t *v = &m.unavailable[m.n_unavailable++];
        if ((st = pl_msg_int_name(u, "backend", v->backend, sizeof(v->backend) - 1)) ||
            (st = pl_json_str(u, "why", v->why, sizeof(v->why) - 1)))
            return pl_error_prefix(st, "unavailable[%zu]: ", i);
    }
    const json_t *h = json_object_get(body, "health");
    if (!h)
        return pl_error(PL_ERR_INVALID, "missing field 'health'");
    if ((st = pl_msg_heartbeat_decode(h, &m.health)))
        return pl_error_prefix(st, "health: ");
    m.pid = (int)pid;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_welcome_encode(const pl_msg_welcome_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:i, s:i, s:I}", "heartbeat_ms", m->heartbeat_ms,
                                     "dead_after_ms", m->dead_after_ms, "clock_ns",
                                     (json_int_t)m->clock_ns),
                           "WELCOME", body_p);
}

pl_status_t pl_msg_welcome_decode(const json_t *body, pl_msg_welcome_t *out)
{
    int64_t hb, dead, clock = 0;
    pl_status_t st;
    if ((st = pl_json_int(body, "heartbeat_ms", 1, 3600000, &hb)) ||
        (st = pl_json_int(body, "dead_after_ms", 1, 3600000, &dead)) ||
        (st = pl_json_int_opt(body, "clock_ns", 0, INT64_MAX, &clock)))
        return st;
    *out = (pl_msg_welcome_t){.heartbeat_ms = (int)hb, .dead_after_ms = (int)dead,
                              .clock_ns = clock};
    return PL_OK;
}

pl_status_t pl_msg_error_encode(const pl_msg_error_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:i, s:s, s:s}", "code", (int)m->code, "status",
                                     pl_status_str(m->code), "error", m->message),
                           "ERROR", body_p);
}

pl_status_t pl_msg_error_decode(const json_t *body, pl_msg_error_t *out)
{
    pl_msg_error_t m;
    int64_t code;
    pl_status_t st;
    if ((st = pl_json_int(body, "code", PL_MSG_MIN_CODE, -1, &code)) ||
        (st = pl_json_str(body, "error", m.message, sizeof(m.message) - 1)))
        return st;
    m.code = (pl_status_t)code;
    *out = m;
    return PL_OK;
}
