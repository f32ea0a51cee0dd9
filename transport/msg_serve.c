/* The serving messages between the coordinator and a deployment's stages: SEQ_ADD (a request
 * joins), SEQ_CANCEL (it leaves early), SEQ_OUT (its new tokens, text and end). Every size is
 * bounded and every field checked on receipt. */
#include "common/json.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdlib.h>
#include <string.h>

static json_t *s_head(uint32_t job, int stage, uint32_t epoch, uint64_t req)
{
    return json_pack("{s:I, s:i, s:I, s:I}", "job", (json_int_t)job, "stage", stage, "epoch",
                     (json_int_t)epoch, "req", (json_int_t)req);
}

static pl_status_t s_head_decode(const json_t *body, uint32_t *job, int *stage, uint32_t *epoch,
                                 uint64_t *req)
{
    int64_t r;
    pl_status_t st;
    if ((st = pl_msg_int_ids(body, 0, job, stage, epoch)) ||
        (st = pl_json_int(body, "req", 1, INT64_MAX, &r)))
        return st;
    *req = (uint64_t)r;
    return PL_OK;
}

/* Token ids: an array of 1..max (min 0 allowed when empty_ok) non-negative int32 ids, into a new
 * array *ids_p (NULL when empty) or into fixed, when given. */
static pl_status_t s_ids_decode(const json_t *body, const char *key, int max, bool empty_ok,
                                int32_t *fixed, int32_t **ids_p, int *n_p)
{
    json_t *arr;
    pl_status_t st = pl_json_array(body, key, (size_t)max, &arr);
    if (st)
        return st;
    size_t n = json_array_size(arr);
    if (n == 0 && !empty_ok)
        return pl_error(PL_ERR_INVALID, "field '%s': no token ids", key);
    int32_t *ids = fixed;
    if (!fixed && n > 0 && !(ids = malloc(n * sizeof(int32_t))))
        return pl_error(PL_ERR_NOMEM, "field '%s': out of memory", key);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id > INT32_MAX) {
            if (!fixed)
                free(ids);
            return pl_error(PL_ERR_INVALID, "field '%s': entry %zu is not a token id", key, i);
        }
        ids[i] = (int32_t)id;
    }
    if (ids_p)
        *ids_p = n > 0 ? ids : NULL;
    *n_p = (int)n;
    return PL_OK;
}

static json_t *s_ids_encode(const int32_t *ids, int n)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_integer(ids[i]));
    return arr;
}

pl_status_t pl_msg_seq_add_encode(const pl_msg_seq_add_t *m, json_t **body_p)
{
    json_t *gen, *body = s_head(m->job, m->stage, m->epoch, m->req);
    pl_status_t st = pl_job_gen_encode(&m->gen, &gen);
    if (st) {
        json_decref(body);
        return st;
    }
    if (body) {
        json_object_set_new(body, "prompt", s_ids_encode(m->prompt, m->n_prompt));
        if (m->resumed > 0)
            json_object_set_new(body, "resumed", json_integer(m->resumed));
        if (m->stream > 0)
            json_object_set_new(body, "stream", json_integer(m->stream));
        json_object_set_new(body, "gen", gen);
    } else {
        json_decref(gen);
    }
    return pl_msg_int_done(body, "SEQ_ADD", body_p);
}

pl_status_t pl_msg_seq_add_decode(const json_t *body, pl_msg_seq_add_t *out)
{
    pl_msg_seq_add_t m = {0};
    pl_status_t st;
    /* the defaults a job file has: what a field left out means */
    m.gen = (pl_job_gen_t){.max_new_tokens = 16, .stop_at_eos = true, .top_p = 1};
    if ((st = s_head_decode(body, &m.job, &m.stage, &m.epoch, &m.req)) ||
        (st = pl_job_gen_decode(json_object_get(body, "gen"), &m.gen)) ||
        (st = s_ids_decode(body, "prompt", PL_MSG_MAX_SEQ_PROMPT, false, NULL, &m.prompt,
                           &m.n_prompt)))
        return st;
    int64_t resumed = 0, stream = 0;
    if ((st = pl_json_int_opt(body, "resumed", 0, m.n_prompt - 1, &resumed)) ||
        (st = pl_json_int_opt(body, "stream", 0, PL_JOB_MAX_SEQS - 1, &stream))) {
        free(m.prompt);
        return st;
    }
    m.resumed = (int)resumed;
    m.stream = (uint32_t)stream;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_seq_cancel_encode(const pl_msg_seq_cancel_t *m, json_t **body_p)
{
    return pl_msg_int_done(s_head(m->job, m->stage, m->epoch, m->req), "SEQ_CANCEL", body_p);
}

pl_status_t pl_msg_seq_cancel_decode(const json_t *body, pl_msg_seq_cancel_t *out)
{
    pl_msg_seq_cancel_t m;
    pl_status_t st = s_head_decode(body, &m.job, &m.stage, &m.epoch, &m.req);
    if (st)
        return st;
    *out = m;
    return PL_OK;
}

pl_status_t pl_msg_seq_out_encode(const pl_msg_seq_out_t *m, json_t **body_p)
{
    json_t *body = s_head(m->job, m->stage, m->epoch, m->req);
    if (body) {
        json_object_set_new(body, "tokens", s_ids_encode(m->tokens, m->n_tokens));
        json_object_set_new(body, "finish", json_string(pl_msg_finish_name(m->finish)));
        if (m->text && m->text[0] && json_object_set_new(body, "text", json_string(m->text))) {
            json_decref(body);
            return pl_error(PL_ERR_INVALID, "SEQ_OUT: text is not UTF-8");
        }
    }
    return pl_msg_int_done(body, "SEQ_OUT", body_p);
}

pl_status_t pl_msg_seq_out_decode(const json_t *body, pl_msg_seq_out_t *out)
{
    pl_msg_seq_out_t *m = calloc(1, sizeof(*m));
    char fin[16];
    pl_status_t st;
    if (!m)
        return pl_error(PL_ERR_NOMEM, "SEQ_OUT: out of memory");
    if ((st = s_head_decode(body, &m->job, &m->stage, &m->epoch, &m->req)) ||
        (st = s_ids_decode(body, "tokens", PL_MSG_MAX_SEQ_OUT, true, m->tokens, NULL,
                           &m->n_tokens)) ||
        (st = pl_msg_int_strdup_opt(body, "text", PL_MSG_MAX_SEQ_TEXT, &m->text)) ||
        (st = pl_json_str(body, "finish", fin, sizeof(fin) - 1)) ||
        (st = pl_msg_finish_parse(fin, &m->finish))) {
        free(m->text);
        free(m);
        return st;
    }
    *out = *m;
    free(m);
    return PL_OK;
}
