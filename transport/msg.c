/* The typed-message dispatch: one table from message type to its codec and what it owns, plus
 * the helpers the codecs share (msg_int.h). */
#include "transport/msg.h"

#include "common/json.h"
#include "transport/msg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pl_status_t pl_msg_int_done(json_t *body, const char *what, json_t **body_p)
{
    if (!body)
        return pl_error(PL_ERR_INVALID,
                        "%s: cannot encode (a value that JSON cannot hold, or "
                        "out of memory)",
                        what);
    *body_p = body;
    return PL_OK;
}

pl_status_t pl_msg_int_strdup_opt(const json_t *obj, const char *key, size_t max_len, char **out)
{
    const char *v = NULL;
    pl_status_t st = pl_json_str_opt(obj, key, max_len, &v);
    if (st)
        return st;
    if (v && (!*v || strlen(v) != json_string_length(json_object_get(obj, key))))
        return pl_error(PL_ERR_INVALID, "field '%s': empty or with an embedded NUL", key);
    *out = NULL;
    if (v && !(*out = strdup(v)))
        return pl_error(PL_ERR_NOMEM, "field '%s': out of memory", key);
    return PL_OK;
}

pl_status_t pl_msg_int_name(const json_t *obj, const char *key, char *out, size_t max_len)
{
    pl_status_t st = pl_json_str(obj, key, out, max_len);
    if (!st && !out[0])
        st = pl_error(PL_ERR_INVALID, "field '%s': empty", key);
    return st;
}

const char *pl_msg_proto_mismatch(const char *peer, int theirs, const char *self, char *out,
                                  size_t len)
{
    if (theirs <= 0)
        snprintf(out, len, "%s speaks a control protocol older than %d (its messages name none), "
                 "%s %d: upgrade %s", peer, PL_PROTO_VERSION, self, PL_PROTO_VERSION, peer);
    else
        snprintf(out, len, "%s speaks control protocol %d, %s %d: upgrade %s", peer, theirs, self,
                 PL_PROTO_VERSION, theirs < PL_PROTO_VERSION ? peer : self);
    return out;
}

/* The sender's protocol off a body: "proto", 1..INT32_MAX; 0 when absent (a sender before 3). */
static pl_status_t s_proto_get(const json_t *body, int *proto_p)
{
    int64_t v = 0;
    pl_status_t st = pl_json_int_opt(body, "proto", 1, INT32_MAX, &v);
    if (!st)
        *proto_p = (int)v;
    return st;
}

/* Every body names the protocol; a REPLY's is the caller's object, so it is named on a copy. */
static pl_status_t s_proto_put(const pl_msg_t *m, json_t **body_p)
{
    json_t *body = *body_p;
    if (m->type == PL_MSG_REPLY) {
        json_t *copy = json_copy(body); /* shallow: the top level only */
        json_decref(body);
        *body_p = body = copy;
    }
    if (!body || json_object_set_new(body, "proto",
                                     json_integer(m->proto ? m->proto : PL_PROTO_VERSION))) {
        json_decref(body);
        *body_p = NULL;
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", pl_msg_name(m->type));
    }
    return PL_OK;
}

void pl_msg_init(pl_msg_t *msg, pl_msg_type_t type)
{
    memset(msg, 0, sizeof(*msg));
    msg->type = type;
    if (type == PL_MSG_SUBMIT || type == PL_MSG_PLAN)
        pl_job_spec_init(&msg->submit);
    else if (type == PL_MSG_ASSIGN)
        pl_job_spec_init(&msg->assign.spec);
    else if (type == PL_MSG_CANCEL)
        msg->cancel.stage = -1;
}

void pl_msg_clear(pl_msg_t *msg)
{
    if (!msg)
        return;
    switch (msg->type) {
    case PL_MSG_SUBMIT:
    case PL_MSG_PLAN:
        pl_job_spec_clear(&msg->submit);
        break;
    case PL_MSG_ASSIGN:
        pl_job_spec_clear(&msg->assign.spec);
        pl_msg_results_free(msg->assign.resume, msg->assign.n_resume);
        break;
    case PL_MSG_PROGRESS:
        pl_msg_gen_progress_clear(&msg->progress);
        break;
    case PL_MSG_READY:
        free(msg->ready.ucx_addr);
        break;
    case PL_MSG_START:
        free(msg->start.next);
        free(msg->start.prev);
        free(msg->start.ring_next);
        free(msg->start.ring_prev);
        break;
    case PL_MSG_DONE:
        pl_msg_results_free(msg->done.results, msg->done.n_results);
        pl_msg_trace_free(&msg->done.trace);
        break;
    case PL_MSG_TRACED:
        pl_msg_trace_free(&msg->traced.trace);
        break;
    case PL_MSG_REPLY:
        json_decref(msg->reply.body);
        break;
    case PL_MSG_SEQ_ADD:
        free(msg->seq_add.prompt);
        break;
    case PL_MSG_SEQ_OUT:
        free(msg->seq_out.text);
        break;
    default:
        break;
    }
    pl_msg_init(msg, msg->type);
}

static pl_status_t s_encode(const pl_msg_t *m, json_t **body_p)
{
    switch (m->type) {
    case PL_MSG_HELLO:
        return pl_msg_hello_encode(&m->hello, body_p);
    case PL_MSG_WELCOME:
        return pl_msg_welcome_encode(&m->welcome, body_p);
    case PL_MSG_HEARTBEAT:
        return pl_msg_heartbeat_encode(&m->heartbeat, body_p);
    case PL_MSG_ASSIGN:
        return pl_msg_assign_encode(&m->assign, body_p);
    case PL_MSG_READY:
        return pl_msg_ready_encode(&m->ready, body_p);
    case PL_MSG_START:
        return pl_msg_start_encode(&m->start, body_p);
    case PL_MSG_DONE:
        return pl_msg_done_encode(&m->done, body_p);
    case PL_MSG_FAIL:
        return pl_msg_fail_encode(&m->fail, body_p);
    case PL_MSG_CANCEL:
        return pl_msg_cancel_encode(&m->cancel, body_p);
    case PL_MSG_PROGRESS:
        return pl_msg_gen_progress_encode(&m->progress, body_p);
    case PL_MSG_SUBMIT:
    case PL_MSG_PLAN:
        return pl_job_spec_encode(&m->submit, body_p);
    case PL_MSG_STATUS:
    case PL_MSG_RESULTS:
    case PL_MSG_KILL:
        return pl_msg_job_ref_encode(&m->job_ref, body_p);
    case PL_MSG_HEALTH:
    case PL_MSG_BYE:
        return pl_msg_health_encode(&m->health, body_p);
    case PL_MSG_DRAIN:
        return pl_msg_drain_encode(&m->drain, body_p);
    case PL_MSG_TRACE:
        return pl_msg_trace_ref_encode(&m->trace_ref, body_p);
    case PL_MSG_TRACED:
        return pl_msg_traced_encode(&m->traced, body_p);
    case PL_MSG_REPLY:
        if (!json_is_object(m->reply.body))
            return pl_error(PL_ERR_INVALID, "REPLY: body is not a JSON object");
        *body_p = json_incref(m->reply.body);
        return PL_OK;
    case PL_MSG_ERROR:
        return pl_msg_error_encode(&m->error, body_p);
    case PL_MSG_SEQ_ADD:
        return pl_msg_seq_add_encode(&m->seq_add, body_p);
    case PL_MSG_SEQ_CANCEL:
        return pl_msg_seq_cancel_encode(&m->seq_cancel, body_p);
    case PL_MSG_SEQ_OUT:
        return pl_msg_seq_out_encode(&m->seq_out, body_p);
    case PL_MSG_TRAIN_STEP:
        return pl_msg_train_step_encode(&m->train_step, body_p);
    case PL_MSG_NODES:
    case PL_MSG_JOBS:
    case PL_MSG_DEPLOYMENTS:
    case PL_MSG_SHUTDOWN:
        return pl_msg_int_done(json_object(), pl_msg_name(m->type), body_p);
    default:
        return pl_error(PL_ERR_INVALID, "encode: unknown message type %d", (int)m->type);
    }
}

pl_status_t pl_msg_encode(const pl_msg_t *m, json_t **body_p)
{
    json_t *body;
    pl_status_t st = s_encode(m, &body);
    if (!st && !(st = s_proto_put(m, &body)))
        *body_p = body;
    return st;
}

pl_status_t pl_msg_decode(pl_msg_type_t type, const json_t *body, pl_msg_t *out)
{
    pl_msg_t *m = malloc(sizeof(*m));
    pl_status_t st;
    if (!m)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", pl_msg_name(type));
    pl_msg_init(m, type);
    if (!json_is_object(body)) {
        st = pl_error(PL_ERR_PROTOCOL, "body is not a JSON object");
        goto out;
    }
    if ((st = s_proto_get(body, &m->proto)))
        goto fail;
    switch (type) {
    case PL_MSG_HELLO:
        st = pl_msg_hello_decode(body, &m->hello);
        break;
    case PL_MSG_WELCOME:
        st = pl_msg_welcome_decode(body, &m->welcome);
        break;
    case PL_MSG_HEARTBEAT:
        st = pl_msg_heartbeat_decode(body, &m->heartbeat);
        break;
    case PL_MSG_ASSIGN:
        st = pl_msg_assign_decode(body, &m->assign);
        break;
    case PL_MSG_READY:
        st = pl_msg_ready_decode(body, &m->ready);
        break;
    case PL_MSG_START:
        st = pl_msg_start_decode(body, &m->start);
        break;
    case PL_MSG_DONE:
        st = pl_msg_done_decode(body, &m->done);
        break;
    case PL_MSG_FAIL:
        st = pl_msg_fail_decode(body, &m->fail);
        break;
    case PL_MSG_CANCEL:
        st = pl_msg_cancel_decode(body, &m->cancel);
        break;
    case PL_MSG_PROGRESS:
        st = pl_msg_gen_progress_decode(body, &m->progress);
        break;
    case PL_MSG_SUBMIT:
    case PL_MSG_PLAN:
        st = pl_job_spec_decode(body, &m->submit);
        break;
    case PL_MSG_STATUS:
    case PL_MSG_RESULTS:
    case PL_MSG_KILL:
        st = pl_msg_job_ref_decode(body, &m->job_ref);
        break;
    case PL_MSG_HEALTH:
    case PL_MSG_BYE:
        st = pl_msg_health_decode(body, &m->health);
        break;
    case PL_MSG_DRAIN:
        st = pl_msg_drain_decode(body, &m->drain);
        break;
    case PL_MSG_TRACE:
        st = pl_msg_trace_ref_decode(body, &m->trace_ref);
        break;
    case PL_MSG_TRACED:
        st = pl_msg_traced_decode(body, &m->traced);
        break;
    case PL_MSG_REPLY: /* what it answers, without the protocol it came in */
        m->reply.body = json_copy((json_t *)body);
        st = m->reply.body ? PL_OK : pl_error(PL_ERR_NOMEM, "out of memory");
        if (!st)
            json_object_del(m->reply.body, "proto");
        break;
    case PL_MSG_ERROR:
        st = pl_msg_error_decode(body, &m->error);
        break;
    case PL_MSG_SEQ_ADD:
        st = pl_msg_seq_add_decode(body, &m->seq_add);
        break;
    case PL_MSG_SEQ_CANCEL:
        st = pl_msg_seq_cancel_decode(body, &m->seq_cancel);
        break;
    case PL_MSG_SEQ_OUT:
        st = pl_msg_seq_out_decode(body, &m->seq_out);
        break;
    case PL_MSG_TRAIN_STEP:
        st = pl_msg_train_step_decode(body, &m->train_step);
        break;
    case PL_MSG_NODES:
    case PL_MSG_JOBS:
    case PL_MSG_DEPLOYMENTS:
    case PL_MSG_SHUTDOWN:
        st = PL_OK;
        break;
    default:
        st = pl_error(PL_ERR_PROTOCOL, "unknown message type %d", (int)type);
    }
fail:
    if (st) {
        /* a field error is the peer breaking the protocol; out of memory stays itself */
        pl_error_prefix(st == PL_ERR_NOMEM ? st : PL_ERR_PROTOCOL, "%s: ", pl_msg_name(type));
        if (st != PL_ERR_NOMEM)
            st = PL_ERR_PROTOCOL;
    } else {
        *out = *m;
    }
out:
    free(m);
    return st;
}

pl_status_t pl_msg_decode_wire(const void *type, size_t type_len, const void *body, size_t body_len,
                               pl_msg_t *msg)
{
    pl_ctl_msg_t raw = {0};
    pl_status_t st = pl_ctl_decode(type, type_len, body, body_len, &raw);
    if (st)
        return st;
    st = pl_msg_decode(raw.type, raw.body, msg);
    pl_ctl_msg_clear(&raw);
    return st;
}
