/* PROGRESS: the tokens a job's last stage sampled since its previous report, per sequence, so
 * the coordinator can resume the job from them when a stage is lost. */
#include "common/json.h"
#include "common/util.h"
#include "transport/msg.h"
#include "transport/msg_int.h"

#include <stdlib.h>
#include <string.h>

void pl_msg_gen_progress_clear(pl_msg_gen_progress_t *m)
{
    for (int i = 0; m->seqs && i < m->n_seqs; i++)
        free(m->seqs[i].tokens);
    free(m->seqs);
    m->seqs = NULL;
    m->n_seqs = 0;
}

pl_status_t pl_msg_gen_progress_encode(const pl_msg_gen_progress_t *m, json_t **body_p)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < m->n_seqs; i++) {
        const pl_msg_seq_tokens_t *e = &m->seqs[i];
        json_t *toks = json_array();
        for (int t = 0; toks && t < e->n_tokens; t++)
            if (json_array_append_new(toks, json_integer(e->tokens[t]))) {
                json_decref(toks);
                toks = NULL;
            }
        json_t *o = toks ? json_pack("{s:i, s:i, s:o, s:s}", "seq", e->seq, "at", e->at, "tokens",
                                     toks, "finish", pl_msg_finish_name(e->finish))
                         : NULL;
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (!arr)
        return pl_msg_int_done(NULL, "PROGRESS", body_p);
    return pl_msg_int_done(json_pack("{s:I, s:i, s:I, s:o}", "job", (json_int_t)m->job, "stage",
                                     m->stage, "epoch", (json_int_t)m->epoch, "seqs", arr),
                           "PROGRESS", body_p);
}

/* One entry; *e is set only on success. */
static pl_status_t s_entry(const json_t *o, int64_t *budget, pl_msg_seq_tokens_t *e)
{
    int64_t seq, at;
    json_t *toks;
    char fin[8];
    pl_finish_t finish;
    pl_status_t st;
    if (!json_is_object(o))
        return pl_error(PL_ERR_INVALID, "expected an object");
    if ((st = pl_json_int(o, "seq", 0, PL_JOB_MAX_SEQS - 1, &seq)) ||
        (st = pl_json_int(o, "at", 0, PL_JOB_MAX_NEW_TOKENS - 1, &at)) ||
        (st = pl_json_array(o, "tokens", PL_JOB_MAX_NEW_TOKENS, &toks)) ||
        (st = pl_json_str(o, "finish", fin, sizeof(fin) - 1)) ||
        (st = pl_msg_finish_parse(fin, &finish)))
        return st;
    size_t n = json_array_size(toks);
    if (n == 0 || at + (int64_t)n > PL_JOB_MAX_NEW_TOKENS || (int64_t)n > *budget)
        return pl_error(PL_ERR_INVALID, "field 'tokens': %zu tokens at %lld: 1 to %lld allowed", n,
                        (long long)at,
                        (long long)PL_MIN(*budget, (int64_t)PL_JOB_MAX_NEW_TOKENS - at));
    int32_t *t = malloc(n * sizeof(int32_t));
    if (!t)
        return pl_error(PL_ERR_NOMEM, "PROGRESS: out of memory");
    for (size_t k = 0; k < n; k++) {
        const json_t *v = json_array_get(toks, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            free(t);
            return pl_error(PL_ERR_INVALID, "token %zu: not a token id", k);
        }
        t[k] = (int32_t)json_integer_value(v);
    }
    *budget -= (int64_t)n;
    *e = (pl_msg_seq_tokens_t){.seq = (int)seq,
                               .at = (int)at,
                               .n_tokens = (int)n,
                               .tokens = t,
                               .finish = finish};
    return PL_OK;
}

pl_status_t pl_msg_gen_progress_decode(const json_t *body, pl_msg_gen_progress_t *out)
{
    pl_msg_gen_progress_t m = {0};
    int64_t job, stage, epoch, budget = PL_MSG_MAX_PROGRESS_TOKENS;
    uint8_t seen[PL_JOB_MAX_SEQS / 8] = {0};
    json_t *arr;
    pl_status_t st;
    if ((st = pl_json_int(body, "job", 1, UINT32_MAX, &job)) ||
        (st = pl_json_int(body, "stage", 0, PL_MSG_MAX_STAGES - 1, &stage)) ||
        (st = pl_json_int(body, "epoch", 1, UINT32_MAX, &epoch)) ||
        (st = pl_json_array(body, "seqs", PL_JOB_MAX_SEQS, &arr)))
        return pl_error_prefix(st, "PROGRESS: ");
    size_t n = json_array_size(arr);
    if (n && !(m.seqs = calloc(n, sizeof(*m.seqs))))
        return pl_error(PL_ERR_NOMEM, "PROGRESS: out of memory");
    for (size_t i = 0; i < n; i++) {
        if ((st = s_entry(json_array_get(arr, i), &budget, &m.seqs[i]))) {
            pl_error_prefix(st, "PROGRESS: entry %zu: ", i);
            goto err;
        }
        m.n_seqs++;
        int q = m.seqs[i].seq;
        if (seen[q / 8] & (1u << (q % 8))) {
            st = pl_error(PL_ERR_INVALID, "PROGRESS: entry %zu: sequence %d twice", i, q);
            goto err;
        }
        seen[q / 8] |= (uint8_t)(1u << (q % 8));
    }
    m.job = (uint32_t)job;
    m.stage = (int)stage;
    m.epoch = (uint32_t)epoch;
    *out = m;
    return PL_OK;
err:
    pl_msg_gen_progress_clear(&m);
    return st;
}
