/* The messages between a stage and the coordinator: READY, START, DONE (statistics and results),
 * FAIL and CANCEL. */
#include "common/json.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdlib.h>
#include <string.h>

pl_status_t pl_msg_int_ids(const json_t *body, int64_t min_stage, uint32_t *job, int *stage,
                         uint32_t *epoch)
{
    int64_t j, s, e;
    pl_status_t st;
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &j)) ||
        (st = pl_json_int(body, "stage", min_stage, PL_MSG_MAX_STAGES - 1, &s)) ||
        (st = pl_json_int(body, "epoch", 0, UINT32_MAX, &e)))
        return st;
    *job = (uint32_t)j;
    *stage = (int)s;
    *epoch = (uint32_t)e;
    return PL_OK;
}

pl_status_t pl_msg_ready_encode(const pl_msg_ready_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I, s:s?}", "job", (json_int_t)m->job, "stage",
                                     m->stage, "epoch", (json_int_t)m->epoch, "ucx_addr",
                                     m->ucx_addr),
                           "READY", body_p);
}

pl_status_t pl_msg_ready_decode(const json_t *body, pl_msg_ready_t *out)
{
    pl_msg_ready_t m = {0};
    pl_status_t st;
    if ((st = pl_msg_int_ids(body, 0, &m.job, &m.stage, &m.epoch)) ||
        (st = pl_msg_int_strdup_opt(body, "ucx_addr", PL_MSG_MAX_ADDR, &m.ucx_addr)))
        return st;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_start_encode(const pl_msg_start_t *m, json_t **body_p)
{
    char token[PL_ACT_TOKEN_HEX + 1];
    pl_act_token_hex(&m->token, token);
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I, s:s?, s:s?, s:s, s:s?, s:s?}", "job",
                                     (json_int_t)m->job, "stage", m->stage, "epoch",
                                     (json_int_t)m->epoch, "next", m->next, "prev", m->prev,
                                     "token", token, "ring_next", m->ring_next, "ring_prev",
                                     m->ring_prev),
                           "START", body_p);
}

pl_status_t pl_msg_start_decode(const json_t *body, pl_msg_start_t *out)
{
    pl_msg_start_t m = {0};
    char token[PL_ACT_TOKEN_HEX + 1];
    pl_status_t st;
    if ((st = pl_msg_int_ids(body, 0, &m.job, &m.stage, &m.epoch)) ||
        (st = pl_json_str(body, "token", token, sizeof(token) - 1)) ||
        (st = pl_act_token_parse(token, &m.token)) ||
        (st = pl_msg_int_strdup_opt(body, "next", PL_MSG_MAX_ADDR, &m.next)) ||
        (st = pl_msg_int_strdup_opt(body, "prev", PL_MSG_MAX_ADDR, &m.prev)) ||
        (st = pl_msg_int_strdup_opt(body, "ring_next", PL_MSG_MAX_ADDR, &m.ring_next)) ||
        (st = pl_msg_int_strdup_opt(body, "ring_prev", PL_MSG_MAX_ADDR, &m.ring_prev))) {
        free(m.next);
        free(m.prev);
        free(m.ring_next);
        return st;
    }
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_stats_encode(const pl_msg_stats_t *m, json_t **body_p)
{
    json_t *s = json_pack("{s:f, s:f, s:f, s:I, s:I}", "wall_s", m->wall_s, "compute_s",
                          m->compute_s, "wait_s", m->wait_s, "messages", (json_int_t)m->messages,
                          "tokens", (json_int_t)m->tokens);
    if (!s)
        return pl_msg_int_done(NULL, "stats", body_p);
    if (m->has_sink) {
        json_object_set_new(s, "generated", json_integer((json_int_t)m->generated));
        json_object_set_new(s, "prefill_s", json_real(m->prefill_s));
    }
    json_object_set_new(s, "prefill_compute_s", json_real(m->prefill_compute_s));
    json_object_set_new(s, "prefill_calls", json_integer((json_int_t)m->prefill_calls));
    json_object_set_new(s, "decode_compute_s", json_real(m->decode_compute_s));
    json_object_set_new(s, "decode_calls", json_integer((json_int_t)m->decode_calls));
    json_object_set_new(s, "freed_seqs", json_integer((json_int_t)m->freed_seqs));
    json_object_set_new(s, "bytes_sent", json_integer((json_int_t)m->bytes_sent));
    if (m->wire_dtype[0])
        json_object_set_new(s, "wire_dtype", json_string(m->wire_dtype));
    if (m->link[0])
        json_object_set_new(s, "link", json_string(m->link));
    if (m->has_overlap) {
        json_t *oj =
            json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f}", "compute_cpu_s", m->compute_cpu_s,
                      "buf_wait_s", m->buf_wait_s, "credit_wait_s", m->credit_wait_s, "send_s",
                      m->send_s, "sample_s", m->sample_s, "credit_waits",
                      (json_int_t)m->credit_waits, "max_mb_in_flight",
                      (json_int_t)m->max_mb_in_flight, "avg_mb_in_flight", m->avg_mb_in_flight);
        if (!oj) {
            json_decref(s);
            return pl_msg_int_done(NULL, "stats.overlap", body_p);
        }
        json_object_set_new(s, "overlap", oj);
    }
    if (m->has_data_plane) {
        const pl_msg_data_plane_t *d = &m->data_plane;
        json_t *dj = json_pack("{s:i, s:I, s:I, s:I, s:I, s:b, s:I}", "inbox_slots",
                               d->inbox_slots, "inbox_bytes", (json_int_t)d->inbox_bytes,
                               "send_credits", (json_int_t)d->send_credits, "max_in_flight",
                               (json_int_t)d->max_in_flight, "bound_bytes",
                               (json_int_t)d->bound_bytes, "progress_thread",
                               d->progress_thread, "dropped", (json_int_t)d->dropped);
        if (!dj) {
            json_decref(s);
            return pl_msg_int_done(NULL, "stats.data_plane", body_p);
        }
        json_object_set_new(s, "data_plane", dj);
    }
    if (m->has_probe) {
        const pl_msg_probe_t *p = &m->probe;
        json_t *pj =
            json_pack("{s:i, s:f, s:f, s:s, s:f}", "to_stage", p->to_stage, "gbps", p->gbps,
                      "latency_s", p->latency_s, "transport", p->transport, "took_s", p->took_s);
        if (!pj) {
            json_decref(s);
            return pl_msg_int_done(NULL, "stats.probe", body_p);
        }
        json_object_set_new(s, "probe", pj);
    }
    return pl_msg_int_done(s, "stats", body_p);
}

#define S_MAX_S 1e12
#define S_MAX_N ((int64_t)1 << 53)

pl_status_t pl_msg_stats_decode(const json_t *body, pl_msg_stats_t *out)
{
    pl_msg_stats_t m = {0};
    const char *link = NULL, *wire = NULL;
    pl_status_t st;
    if (!json_is_object(body))
        return pl_error(PL_ERR_INVALID, "field 'stats': expected an object");
    if ((st = pl_json_num(body, "wall_s", 0, S_MAX_S, &m.wall_s)) ||
        (st = pl_json_num(body, "compute_s", 0, S_MAX_S, &m.compute_s)) ||
        (st = pl_json_num(body, "wait_s", 0, S_MAX_S, &m.wait_s)) ||
        (st = pl_json_int(body, "messages", 0, S_MAX_N, &m.messages)) ||
        (st = pl_json_int(body, "tokens", 0, S_MAX_N, &m.tokens)) ||
        (st = pl_json_num(body, "prefill_compute_s", 0, S_MAX_S, &m.prefill_compute_s)) ||
        (st = pl_json_int(body, "prefill_calls", 0, S_MAX_N, &m.prefill_calls)) ||
        (st = pl_json_num(body, "decode_compute_s", 0, S_MAX_S, &m.decode_compute_s)) ||
        (st = pl_json_int(body, "decode_calls", 0, S_MAX_N, &m.decode_calls)) ||
        (st = pl_json_int(body, "freed_seqs", 0, S_MAX_N, &m.freed_seqs)) ||
        (st = pl_json_int_opt(body, "bytes_sent", 0, S_MAX_N, &m.bytes_sent)) ||
        (st = pl_json_str_opt(body, "wire_dtype", sizeof(m.wire_dtype) - 1, &wire)) ||
        (st = pl_json_str_opt(body, "link", sizeof(m.link) - 1, &link)))
        return pl_error_prefix(st, "stats: ");
    if (wire)
        snprintf(m.wire_dtype, sizeof(m.wire_dtype), "%s", wire);
    const json_t *ov = json_object_get(body, "overlap");
    if (ov && !json_is_null(ov)) {
        if (!json_is_object(ov))
            return pl_error(PL_ERR_INVALID, "stats: field 'overlap': expected an object");
        if ((st = pl_json_num(ov, "compute_cpu_s", 0, S_MAX_S, &m.compute_cpu_s)) ||
            (st = pl_json_num(ov, "buf_wait_s", 0, S_MAX_S, &m.buf_wait_s)) ||
            (st = pl_json_num(ov, "credit_wait_s", 0, S_MAX_S, &m.credit_wait_s)) ||
            (st = pl_json_num(ov, "send_s", 0, S_MAX_S, &m.send_s)) ||
            (st = pl_json_num(ov, "sample_s", 0, S_MAX_S, &m.sample_s)) ||
            (st = pl_json_int(ov, "credit_waits", 0, S_MAX_N, &m.credit_waits)) ||
            (st = pl_json_int(ov, "max_mb_in_flight", 0, S_MAX_N, &m.max_mb_in_flight)) ||
            (st = pl_json_num(ov, "avg_mb_in_flight", 0, S_MAX_N, &m.avg_mb_in_flight)))
            return pl_error_prefix(st, "stats.overlap: ");
        m.has_overlap = true;
    }
    const json_t *dp = json_object_get(body, "data_plane");
    if (dp && !json_is_null(dp)) {
        pl_msg_data_plane_t *d = &m.data_plane;
        int64_t slots = 0;
        if (!json_is_object(dp))
            return pl_error(PL_ERR_INVALID, "stats: field 'data_plane': expected an object");
        if ((st = pl_json_int(dp, "inbox_slots", 0, 1 << 20, &slots)) ||
            (st = pl_json_int(dp, "inbox_bytes", 0, S_MAX_N, &d->inbox_bytes)) ||
            (st = pl_json_int(dp, "send_credits", 0, S_MAX_N, &d->send_credits)) ||
            (st = pl_json_int(dp, "max_in_flight", 0, S_MAX_N, &d->max_in_flight)) ||
            (st = pl_json_int(dp, "bound_bytes", 0, S_MAX_N, &d->bound_bytes)) ||
            (st = pl_json_bool_opt(dp, "progress_thread", &d->progress_thread)) ||
            (st = pl_json_int_opt(dp, "dropped", 0, S_MAX_N, &d->dropped)))
            return pl_error_prefix(st, "stats.data_plane: ");
        d->inbox_slots = (int)slots;
        m.has_data_plane = true;
    }
    m.has_sink = json_object_get(body, "generated") != NULL;
    if (m.has_sink && ((st = pl_json_int(body, "generated", 0, S_MAX_N, &m.generated)) ||
                       (st = pl_json_num(body, "prefill_s", 0, S_MAX_S, &m.prefill_s))))
        return pl_error_prefix(st, "stats: ");
    if (link)
        snprintf(m.link, sizeof(m.link), "%s", link);
    const json_t *p = json_object_get(body, "probe");
    if (p && !json_is_null(p)) {
        int64_t to = 0;
        if (!json_is_object(p))
            return pl_error(PL_ERR_INVALID, "stats: field 'probe': expected an object");
        if ((st = pl_json_int(p, "to_stage", 0, PL_MSG_MAX_STAGES - 1, &to)) ||
            (st = pl_json_num(p, "gbps", 0, 1e9, &m.probe.gbps)) ||
            (st = pl_json_num(p, "latency_s", 0, S_MAX_S, &m.probe.latency_s)) ||
            (st = pl_json_num(p, "took_s", 0, S_MAX_S, &m.probe.took_s)) ||
            (st = pl_json_str(p, "transport", m.probe.transport, sizeof(m.probe.transport) - 1)))
            return pl_error_prefix(st, "stats.probe: ");
        m.probe.to_stage = (int)to;
        m.has_probe = true;
    }
    *out = m;
    return PL_OK;
}

static const char *const s_finish_names[] = {"none", "eos", "length", "stop"};

const char *pl_msg_finish_name(pl_finish_t f)
{
    return (unsigned)f <= PL_FINISH_STOP ? s_finish_names[f] : "none";
}

pl_status_t pl_msg_finish_parse(const char *name, pl_finish_t *f_p)
{
    for (int f = 0; f <= PL_FINISH_STOP; f++)
        if (strcmp(name, s_finish_names[f]) == 0) {
            *f_p = (pl_finish_t)f;
            return PL_OK;
        }
    return pl_error(PL_ERR_INVALID, "field 'finish': '%.16s' is not eos, length, stop or none",
                    name);
}

pl_status_t pl_msg_results_encode(const pl_msg_result_t *r, int n, json_t **arr_p)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        json_t *toks = json_array();
        for (int t = 0; toks && t < r[i].n_tokens; t++)
            json_array_append_new(toks, json_integer(r[i].tokens[t]));
        json_t *e = NULL;
        if ((unsigned)r[i].finish <= PL_FINISH_STOP && toks)
            e = json_pack("{s:i, s:o, s:s}", "seq", r[i].seq, "tokens", toks, "finish",
                          s_finish_names[r[i].finish]);
        else
            json_decref(toks);
        /* json_string checks UTF-8: text that is not is refused here, not sent. */
        if (e && r[i].text && json_object_set_new(e, "text", json_string(r[i].text))) {
            json_decref(e);
            e = NULL;
        }
        if (!e || json_array_append_new(arr, e)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return pl_msg_int_done(arr, "results", arr_p);
}

void pl_msg_results_free(pl_msg_result_t *r, int n)
{
    for (int i = 0; r && i < n; i++) {
        free(r[i].tokens);
        free(r[i].text);
    }
    free(r);
}

pl_status_t pl_msg_results_decode(const json_t *arr, pl_msg_result_t **r_p, int *n_p)
{
    size_t n = json_array_size(arr);
    pl_msg_result_t *r = NULL;
    pl_status_t st = PL_OK;
    if (!json_is_array(arr) || n > PL_JOB_MAX_SEQS)
        return pl_error(PL_ERR_INVALID, "field 'results': expected an array of at most %d",
                        PL_JOB_MAX_SEQS);
    if (n && !(r = calloc(n, sizeof(*r))))
        return pl_error(PL_ERR_NOMEM, "results: out of memory");
    for (size_t i = 0; i < n && !st; i++) {
        const json_t *e = json_array_get(arr, i), *toks;
        char fin[8];
        int64_t seq;
        if ((st = pl_json_int(e, "seq", i, i, &seq)) ||
            (st = pl_json_array(e, "tokens", PL_JOB_MAX_NEW_TOKENS, (json_t **)&toks)) ||
            (st = pl_json_str(e, "finish", fin, sizeof(fin) - 1))) {
            pl_error_prefix(st, "result %zu: ", i);
            break;
        }
        r[i].seq = (int)seq;
        r[i].finish = PL_FINISH_NONE;
        int f = 0;
        while (f < 4 && strcmp(fin, s_finish_names[f]))
            f++;
        if (f == 4) {
            st = pl_error(PL_ERR_INVALID,
                          "result %zu: field 'finish': '%s' is not eos, length, stop "
                          "or none",
                          i, fin);
            break;
        }
        const json_t *text = json_object_get(e, "text");
        if (text && !json_is_null(text)) {
            size_t tl = json_string_length(text);
            if (!json_is_string(text) || tl > PL_MSG_MAX_RESULT_TEXT ||
                strlen(json_string_value(text)) != tl) {
                st = pl_error(PL_ERR_INVALID,
                              "result %zu: field 'text': expected a string of at most %u bytes "
                              "without NUL",
                              i, PL_MSG_MAX_RESULT_TEXT);
                break;
            }
            if (!(r[i].text = strdup(json_string_value(text)))) {
                st = pl_error(PL_ERR_NOMEM, "results: out of memory");
                break;
            }
        }
        r[i].finish = (pl_finish_t)f;
        size_t nt = json_array_size(toks);
        if (nt && !(r[i].tokens = malloc(nt * sizeof(int32_t)))) {
            st = pl_error(PL_ERR_NOMEM, "results: out of memory");
            break;
        }
        r[i].n_tokens = (int)nt;
        for (size_t t = 0; t < nt && !st; t++) {
            const json_t *v = json_array_get(toks, t);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > INT32_MAX)
                st = pl_error(PL_ERR_INVALID, "result %zu, token %zu: not a token id", i, t);
            else
                r[i].tokens[t] = (int32_t)json_integer_value(v);
        }
    }
    if (st) {
        pl_msg_results_free(r, (int)n);
        return st;
    }
    *r_p = r;
    *n_p = (int)n;
    return PL_OK;
}

pl_status_t pl_msg_done_encode(const pl_msg_done_t *m, json_t **body_p)
{
    json_t *stats, *res = NULL, *tr = NULL;
    pl_status_t st = pl_msg_stats_encode(&m->stats, &stats);
    if (st)
        return st;
    if ((m->n_results && (st = pl_msg_results_encode(m->results, m->n_results, &res))) ||
        (m->trace && (st = pl_msg_trace_encode(m->trace, &tr)))) {
        json_decref(stats);
        json_decref(res);
        return st;
    }
    json_t *body = json_pack("{s:I, s:i, s:I, s:o, s:o?, s:o?}", "job", (json_int_t)m->job,
                             "stage", m->stage, "epoch", (json_int_t)m->epoch, "stats", stats,
                             "results", res, "trace", tr);
    return pl_msg_int_done(body, "DONE", body_p);
}

pl_status_t pl_msg_done_decode(const json_t *body, pl_msg_done_t *out)
{
    pl_msg_done_t m = {0};
    pl_status_t st;
    if ((st = pl_msg_int_ids(body, 0, &m.job, &m.stage, &m.epoch)) ||
        (st = pl_msg_stats_decode(json_object_get(body, "stats"), &m.stats)))
        return st;
    const json_t *res = json_object_get(body, "results"), *tr = json_object_get(body, "trace");
    if (res && !json_is_null(res) && (st = pl_msg_results_decode(res, &m.results, &m.n_results)))
        return st;
    if (tr && !json_is_null(tr) && (st = pl_msg_trace_decode(tr, &m.trace))) {
        pl_msg_results_free(m.results, m.n_results);
        return st;
    }
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_fail_encode(const pl_msg_fail_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I, s:i, s:s, s:s}", "job", (json_int_t)m->job,
                                     "stage", m->stage, "epoch", (json_int_t)m->epoch, "code",
                                     (int)m->code, "status", pl_status_str(m->code), "error",
                                     m->error),
                           "FAIL", body_p);
}

pl_status_t pl_msg_fail_decode(const json_t *body, pl_msg_fail_t *out)
{
    pl_msg_fail_t m = {0};
    int64_t code;
    pl_status_t st;
    if ((st = pl_msg_int_ids(body, 0, &m.job, &m.stage, &m.epoch)) ||
        (st = pl_json_int(body, "code", PL_MSG_MIN_CODE, -1, &code)) ||
        (st = pl_json_str(body, "error", m.error, sizeof(m.error) - 1)))
        return st;
    m.code = (pl_status_t)code;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_cancel_encode(const pl_msg_cancel_t *m, json_t **body_p)
{
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I}", "job", (json_int_t)m->job, "stage",
                                     m->stage, "epoch", (json_int_t)m->epoch),
                           "CANCEL", body_p);
}

pl_status_t pl_msg_cancel_decode(const json_t *body, pl_msg_cancel_t *out)
{
    pl_msg_cancel_t m;
    pl_status_t st = pl_msg_int_ids(body, -1, &m.job, &m.stage, &m.epoch);
    if (st)
        return st;
    *out = m;
    return PL_OK;
}
