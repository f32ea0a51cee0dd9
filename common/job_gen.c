/* Where a prefill schedule cuts a prompt (job_gen.h): the one rule stage 0's batcher, the
 * in-process feeder and the planner's prediction share. */
#include "common/job_gen.h"

pl_job_chunks_t pl_job_chunks_of(const pl_job_gen_t *g)
{
    if (g->prefill_sched.n > 0)
        return g->prefill_sched;
    pl_job_chunks_t c = {0};
    if (g->prefill_chunk > 0)
        c = (pl_job_chunks_t){.n = 1, .len = {g->prefill_chunk}};
    return c;
}

int pl_job_chunks_next(const pl_job_chunks_t *c, int len, int fed)
{
    int64_t r = (int64_t)len - fed, tail = 0; /* r: tokens left; tail: the cuts after this one */
    for (int i = c->n - 1; i >= 0; i--) {
        if (r <= tail + c->len[i])
            return (int)(r - tail);
        tail += c->len[i];
    }
    if (c->n == 0)
        return (int)r;
    return (int)((r - tail - 1) % c->len[0] + 1); /* before the schedule: its first entry again */
}

int pl_job_chunks_count(const pl_job_chunks_t *c, int len)
{
    int64_t tail = 0;
    int k = 0;
    for (int i = c->n - 1; i >= 0 && tail < len; i--, k++)
        tail += c->len[i];
    if (c->n == 0)
        return 1;
    if (tail < len)
        k += (int)((len - tail + c->len[0] - 1) / c->len[0]);
    return k;
}

int64_t pl_job_chunks_tail(const pl_job_chunks_t *c, int j)
{
    if (j <= 0)
        return 0;
    if (c->n == 0)
        return INT64_MAX / 2;
    int64_t t = 0;
    for (int i = c->n - 1; i >= 0 && j > 0; i--, j--)
        t += c->len[i];
    return t + (int64_t)j * c->len[0];
}

pl_status_t pl_job_chunks_check(const pl_job_chunks_t *c, const char *field)
{
    if (c->n < 0 || c->n > PL_JOB_MAX_CHUNKS)
        return pl_error(PL_ERR_RANGE, "field '%s': %d entries not in [0, %d]", field, c->n,
                        PL_JOB_MAX_CHUNKS);
    for (int i = 0; i < c->n; i++)
        if (c->len[i] < 1 || c->len[i] > PL_JOB_MAX_PREFILL_CHUNK)
            return pl_error(PL_ERR_RANGE, "field '%s': entry %d is %d, not in [1, %d]", field, i,
                            c->len[i], PL_JOB_MAX_PREFILL_CHUNK);
    return PL_OK;
}
