/* pipectl's queries (STATUS, RESULTS, KILL, HEALTH) and the replies a program reads: a job's id
 * and state (SUBMIT, KILL) and a job's results. */
#include "common/json.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdlib.h>
#include <string.h>

pl_status_t pl_msg_job_ref_encode(const pl_msg_job_ref_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:I}", "job", (json_int_t)m->job), "job query", body_p);
}

pl_status_t pl_msg_job_ref_decode(const json_t *body, pl_msg_job_ref_t *out)
{
    int64_t id;
    pl_status_t st = pl_json_int(body, "job", 1, UINT32_MAX, &id);
    if (st)
        return st;
    out->job = (uint32_t)id;
    return PL_OK;
}

pl_status_t pl_msg_health_encode(const pl_msg_health_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:s}", "node", m->node), "HEALTH", body_p);
}

pl_status_t pl_msg_health_decode(const json_t *body, pl_msg_health_t *out)
{
    pl_msg_health_t m;
    pl_status_t st = pl_msg_int_name(body, "node", m.node, PL_CFG_NAME_MAX);
    if (st)
        return st;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_drain_encode(const pl_msg_drain_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:s, s:b}", "node", m->node, "drain", m->drain), "DRAIN",
                           body_p);
}

pl_status_t pl_msg_drain_decode(const json_t *body, pl_msg_drain_t *out)
{
    pl_msg_drain_t m;
    const json_t *d = json_object_get(body, "drain");
    pl_status_t st = pl_msg_int_name(body, "node", m.node, PL_CFG_NAME_MAX);
    if (st)
        return st;
    if (!json_is_boolean(d))
        return pl_error(PL_ERR_INVALID, "field 'drain': expected true or false");
    m.drain = json_is_true(d);
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_job_state_encode(const pl_msg_job_state_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:I, s:s}", "job", (json_int_t)m->job, "state", m->state),
                           "reply", body_p);
}

pl_status_t pl_msg_job_state_decode(const json_t *body, pl_msg_job_state_t *out)
{
    pl_msg_job_state_t m;
    int64_t id;
    pl_status_t st;
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &id)) ||
        (st = pl_msg_int_name(body, "state", m.state, sizeof(m.state) - 1)))
        return st;
    m.job = (uint32_t)id;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_results_reply_encode(const pl_msg_results_reply_t *m, json_t **body_p)
{
    json_t *res;
    pl_status_t st = pl_msg_results_encode(m->results, m->n_results, &res);
    if (st)
        return st;
    return pl_msg_int_done(json_pack("{s:I, s:s, s:o, s:O}", "job", (json_int_t)m->job, "state",
                                     "done", "results", res, "throughput",
                                     m->throughput ? m->throughput : json_null()),
                           "results reply", body_p);
}

pl_status_t pl_msg_results_reply_decode(const json_t *body, pl_msg_results_reply_t *out)
{
    pl_msg_results_reply_t m = {0};
    int64_t id;
    pl_status_t st;
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &id)) ||
        (st = pl_msg_results_decode(json_object_get(body, "results"), &m.results, &m.n_results)))
        return st;
    m.job = (uint32_t)id;
    const json_t *t = json_object_get(body, "throughput");
    m.throughput = json_is_object(t) ? json_incref((json_t *)t) : NULL;
    *out = m;
    return PL_OK;
}

void pl_msg_results_reply_clear(pl_msg_results_reply_t *m)
{
    pl_msg_results_free(m->results, m->n_results);
    json_decref(m->throughput);
    memset(m, 0, sizeof(*m));
}
