/* The last stage's log of sampled tokens per sequence, and which of them were reported: the
 * source of the PROGRESS messages a node sends beside its heartbeats. */
#include "pipeline/gen_log.h"

#include "common/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *tok;
    int n, cap, sent;
    pl_finish_t finish;
    bool broken; /* a token could not be kept: the report of this sequence stops */
} s_seq_t;

struct pl_gen_log {
    pthread_mutex_t mu;
    int n_seqs;
    s_seq_t *seqs;
};

pl_status_t pl_gen_log_create(int n_seqs, pl_gen_log_t **log_p)
{
    pl_gen_log_t *l = calloc(1, sizeof(*l));
    if (!l || n_seqs < 1 || !(l->seqs = calloc((size_t)n_seqs, sizeof(*l->seqs)))) {
        free(l);
        return pl_error(PL_ERR_NOMEM, "progress log: out of memory");
    }
    l->n_seqs = n_seqs;
    pthread_mutex_init(&l->mu, NULL);
    *log_p = l;
    return PL_OK;
}

void pl_gen_log_destroy(pl_gen_log_t **log_p)
{
    pl_gen_log_t *l = *log_p;
    if (!l)
        return;
    for (int s = 0; s < l->n_seqs; s++)
        free(l->seqs[s].tok);
    free(l->seqs);
    pthread_mutex_destroy(&l->mu);
    free(l);
    *log_p = NULL;
}

void pl_gen_log_push(pl_gen_log_t *l, int seq, int32_t token, pl_finish_t finish)
{
    if (!l || seq < 0 || seq >= l->n_seqs)
        return;
    pthread_mutex_lock(&l->mu);
    s_seq_t *q = &l->seqs[seq];
    if (!q->broken && q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 64;
        int32_t *t = realloc(q->tok, (size_t)cap * sizeof(int32_t));
        if (t) {
            q->tok = t;
            q->cap = cap;
        } else {
            q->broken = true;
        }
    }
    if (!q->broken) {
        q->tok[q->n++] = token;
        q->finish = finish;
    }
    pthread_mutex_unlock(&l->mu);
}

pl_status_t pl_gen_log_take(pl_gen_log_t *l, int max_tokens, pl_msg_gen_progress_t *m)
{
    pl_status_t st = PL_OK;
    int n = 0, budget = max_tokens;
    m->n_seqs = 0;
    m->seqs = NULL;
    pthread_mutex_lock(&l->mu);
    for (int s = 0; s < l->n_seqs; s++)
        n += l->seqs[s].n > l->seqs[s].sent;
    if (n && !(m->seqs = calloc((size_t)n, sizeof(*m->seqs)))) {
        st = pl_error(PL_ERR_NOMEM, "progress: out of memory");
        goto out;
    }
    for (int s = 0; s < l->n_seqs && budget > 0; s++) {
        const s_seq_t *q = &l->seqs[s];
        int k = PL_MIN(q->n - q->sent, budget);
        if (k <= 0)
            continue;
        pl_msg_seq_tokens_t *e = &m->seqs[m->n_seqs];
        if (!(e->tokens = malloc((size_t)k * sizeof(int32_t)))) {
            st = pl_error(PL_ERR_NOMEM, "progress: out of memory");
            goto out;
        }
        memcpy(e->tokens, q->tok + q->sent, (size_t)k * sizeof(int32_t));
        e->seq = s;
        e->at = q->sent;
        e->n_tokens = k;
        e->finish = q->sent + k == q->n ? q->finish : PL_FINISH_NONE;
        m->n_seqs++;
        budget -= k;
    }
out:
    pthread_mutex_unlock(&l->mu);
    if (st) {
        pl_msg_gen_progress_clear(m);
        m->n_seqs = 0;
    }
    return st;
}

void pl_gen_log_commit(pl_gen_log_t *l, const pl_msg_gen_progress_t *m)
{
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < m->n_seqs; i++) {
        const pl_msg_seq_tokens_t *e = &m->seqs[i];
        if (e->seq >= 0 && e->seq < l->n_seqs && e->at == l->seqs[e->seq].sent)
            l->seqs[e->seq].sent += e->n_tokens;
    }
    pthread_mutex_unlock(&l->mu);
}

void pl_gen_log_rewind(pl_gen_log_t *l)
{
    pthread_mutex_lock(&l->mu);
    for (int s = 0; s < l->n_seqs; s++)
        l->seqs[s].sent = 0;
    pthread_mutex_unlock(&l->mu);
}
