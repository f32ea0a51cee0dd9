/* Completions as text at the last stage: one streaming decoder per sequence, and the stop
 * strings searched in what each new token adds (the one home of detokenization in a job). */
#include "pipeline/gen_text.h"

#include "model/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    pl_tok_stream_t *stream;
    char *buf;
    size_t len, cap;
    bool ended;
    /* its stop strings (the job's, or its own request's) */
    int n_stop;
    char stop[PL_JOB_MAX_STOP][PL_JOB_STOP_MAX + 1];
    size_t stop_len[PL_JOB_MAX_STOP];
    size_t hold; /* longest stop string - 1: bytes that may still begin one */
} s_seq_t;

struct pl_gen_text {
    pl_tokenizer_t *tok;
    int n_seqs;
    s_seq_t *seqs;
};

static void s_set_stops(s_seq_t *q, const pl_job_gen_t *gen)
{
    q->n_stop = gen->n_stop;
    q->hold = 0;
    for (int i = 0; i < q->n_stop; i++) {
        snprintf(q->stop[i], sizeof(q->stop[i]), "%s", gen->stop[i]);
        q->stop_len[i] = strlen(q->stop[i]);
        if (q->stop_len[i] - 1 > q->hold)
            q->hold = q->stop_len[i] - 1;
    }
}

pl_status_t pl_gen_text_create(const char *model_dir, int n_seqs, const pl_job_gen_t *gen,
                               pl_gen_text_t **text_p)
{
    pl_gen_text_t *t = calloc(1, sizeof(*t));
    pl_status_t st;
    if (!t)
        return pl_error(PL_ERR_NOMEM, "text: out of memory");
    t->n_seqs = n_seqs;
    if ((st = pl_tokenizer_load(model_dir, &t->tok)))
        goto err;
    if (!(t->seqs = calloc((size_t)n_seqs, sizeof(*t->seqs)))) {
        st = pl_error(PL_ERR_NOMEM, "text: out of memory");
        goto err;
    }
    for (int s = 0; s < n_seqs; s++) {
        if ((st = pl_tok_stream_new(t->tok, PL_TOK_SKIP_SPECIAL, &t->seqs[s].stream)))
            goto err;
        if (!(t->seqs[s].buf = calloc(1, 64))) {
            st = pl_error(PL_ERR_NOMEM, "text: out of memory");
            goto err;
        }
        t->seqs[s].cap = 64;
        s_set_stops(&t->seqs[s], gen);
    }
    *text_p = t;
    return PL_OK;
err:
    pl_gen_text_destroy(&t);
    return st;
}

void pl_gen_text_destroy(pl_gen_text_t **text_p)
{
    pl_gen_text_t *t = *text_p;
    if (!t)
        return;
    for (int s = 0; t->seqs && s < t->n_seqs; s++) {
        pl_tok_stream_destroy(&t->seqs[s].stream);
        free(t->seqs[s].buf);
    }
    free(t->seqs);
    pl_tokenizer_destroy(&t->tok);
    free(t);
    *text_p = NULL;
}

static pl_status_t s_append(s_seq_t *q, const char *p, size_t n)
{
    if (q->len + n + 1 > q->cap) {
        size_t cap = q->cap;
        while (q->len + n + 1 > cap)
            cap *= 2;
        char *b = realloc(q->buf, cap);
        if (!b)
            return pl_error(PL_ERR_NOMEM, "text: out of memory");
        q->buf = b;
        q->cap = cap;
    }
    memcpy(q->buf + q->len, p, n);
    q->len += n;
    q->buf[q->len] = '\0';
    return PL_OK;
}

/* Earliest stop string that ends after byte `from`: text before it stays. */
static bool s_find_stop(const s_seq_t *q, size_t from, size_t *at_p)
{
    bool found = false;
    for (int i = 0; i < q->n_stop; i++) {
        size_t a = from > q->stop_len[i] - 1 ? from - (q->stop_len[i] - 1) : 0;
        const char *hit = memmem(q->buf + a, q->len - a, q->stop[i], q->stop_len[i]);
        if (hit && (!found || (size_t)(hit - q->buf) < *at_p)) {
            *at_p = (size_t)(hit - q->buf);
            found = true;
        }
    }
    return found;
}

pl_status_t pl_gen_text_begin(pl_gen_text_t *t, int seq, const pl_job_gen_t *gen)
{
    s_seq_t *q = &t->seqs[seq];
    pl_tok_stream_t *fresh;
    pl_status_t st = pl_tok_stream_new(t->tok, PL_TOK_SKIP_SPECIAL, &fresh);
    if (st)
        return pl_error_prefix(st, "sequence %d: ", seq);
    pl_tok_stream_destroy(&q->stream);
    q->stream = fresh;
    q->len = 0;
    q->buf[0] = '\0';
    q->ended = false;
    s_set_stops(q, gen);
    return PL_OK;
}

pl_status_t pl_gen_text_push(pl_gen_text_t *t, int seq, int32_t token, bool last, bool *stopped_p)
{
    s_seq_t *q = &t->seqs[seq];
    const char *piece;
    size_t n, from = q->len, at = 0;
    pl_status_t st;
    if (q->ended)
        return pl_error(PL_ERR_PROTOCOL, "text: sequence %d has ended", seq);
    if ((st = pl_tok_stream_push(q->stream, token, &piece, &n)) || (st = s_append(q, piece, n)))
        return pl_error_prefix(st, "sequence %d: ", seq);
    if (last && ((st = pl_tok_stream_flush(q->stream, &piece, &n)) || (st = s_append(q, piece, n))))
        return pl_error_prefix(st, "sequence %d: ", seq);
    bool stopped = q->len > from && s_find_stop(q, from, &at);
    if (stopped) {
        q->len = at;
        q->buf[at] = '\0';
    }
    q->ended = last || stopped;
    *stopped_p = stopped;
    return PL_OK;
}

const char *pl_gen_text_get(const pl_gen_text_t *t, int seq, size_t *len_p)
{
    *len_p = t->seqs[seq].len;
    return t->seqs[seq].buf;
}

size_t pl_gen_text_stable(const pl_gen_text_t *t, int seq)
{
    const s_seq_t *q = &t->seqs[seq];
    if (q->ended || q->len <= q->hold)
        return q->ended ? q->len : 0;
    size_t n = q->len - q->hold;
    while (n > 0 && ((unsigned char)q->buf[n] & 0xC0) == 0x80) /* whole characters only */
        n--;
    return n;
}
