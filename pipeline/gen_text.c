/* Completions as text at the last stage: one streaming decoder per sequence, and the stop
 * strings searched in what each new token adds (the one home of detokenization in a job). */
#include "pipeline/gen_text.h"

#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    pl_tok_stream_t *stream;
    char *buf;
    size_t len, cap;
    bool ended;
} s_seq_t;

struct pl_gen_text {
    pl_tokenizer_t *tok;
    int n_seqs;
    s_seq_t *seqs;
    int n_stop;
    const char *stop[PL_JOB_MAX_STOP];
    size_t stop_len[PL_JOB_MAX_STOP];
    size_t hold;      /* longest stop string - 1: bytes that may still begin one */
    pl_job_gen_t gen; /* owns the stop strings */
};

pl_status_t pl_gen_text_create(const char *model_dir, int n_seqs, const pl_job_gen_t *gen,
                               pl_gen_text_t **text_p)
{
    pl_gen_text_t *t = calloc(1, sizeof(*t));
    pl_status_t st;
    if (!t)
        return pl_error(PL_ERR_NOMEM, "text: out of memory");
    t->gen = *gen;
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
    }
    t->n_stop = gen->n_stop;
    for (int i = 0; i < t->n_stop; i++) {
        t->stop[i] = t->gen.stop[i];
        t->stop_len[i] = strlen(t->gen.stop[i]);
        if (t->stop_len[i] - 1 > t->hold)
            t->hold = t->stop_len[i] - 1;
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
static bool s_find_stop(const pl_gen_text_t *t, const s_seq_t *q, size_t from, size_t *at_p)
{
    bool found = false;
    for (int i = 0; i < t->n_stop; i++) {
        size_t a = from > t->stop_len[i] - 1 ? from - (t->stop_len[i] - 1) : 0;
        const char *hit = memmem(q->buf + a, q->len - a, t->stop[i], t->stop_len[i]);
        if (hit && (!found || (size_t)(hit - q->buf) < *at_p)) {
            *at_p = (size_t)(hit - q->buf);
            found = true;
        }
    }
    return found;
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
    bool stopped = q->len > from && s_find_stop(t, q, from, &at);
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
    if (q->ended || q->len <= t->hold)
        return q->ended ? q->len : 0;
    size_t n = q->len - t->hold;
    while (n > 0 && ((unsigned char)q->buf[n] & 0xC0) == 0x80) /* whole characters only */
        n--;
    return n;
}
