/* The feeder (stage 0) and the sink (last stage) of a generation: what goes into the pipeline
 * next, and what comes out of it. */
#include "pipeline/gen.h"

#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pl_gen_feed {
    const pl_gen_job_t *job;
    int *pos;        /* next position of each sequence */
    bool *finished;
    int active;      /* microbatches with unfinished sequences */
};

pl_status_t pl_gen_feed_create(const pl_gen_job_t *job, pl_gen_feed_t **feed_p)
{
    pl_gen_feed_t *f = calloc(1, sizeof(*f));
    if (!f)
        return pl_error(PL_ERR_NOMEM, "feed: out of memory");
    f->job = job;
    f->pos = calloc((size_t)job->n_seqs, sizeof(int));
    f->finished = calloc((size_t)job->n_seqs, sizeof(bool));
    if (!f->pos || !f->finished) {
        pl_gen_feed_destroy(&f);
        return pl_error(PL_ERR_NOMEM, "feed: out of memory");
    }
    f->active = job->microbatches;
    *feed_p = f;
    return PL_OK;
}

void pl_gen_feed_destroy(pl_gen_feed_t **feed_p)
{
    if (!*feed_p)
        return;
    free((*feed_p)->pos);
    free((*feed_p)->finished);
    free(*feed_p);
    *feed_p = NULL;
}

int pl_gen_feed_prefill_chunks(const pl_gen_feed_t *f, int mb)
{
    const pl_gen_job_t *job = f->job;
    int longest = 0;
    for (int s = mb; s < job->n_seqs; s += job->microbatches)
        longest = PL_MAX(longest, job->prompt_len[s]);
    if (job->gen.prefill_chunk <= 0 || longest <= job->gen.prefill_chunk)
        return 1;
    return (longest + job->gen.prefill_chunk - 1) / job->gen.prefill_chunk;
}

void pl_gen_feed_prefill(pl_gen_feed_t *f, uint32_t job_id, int mb, int chunk, pl_act_hdr_t *hdr,
                         pl_act_seq_t *seqs, int32_t *tokens)
{
    const pl_gen_job_t *job = f->job;
    int chunks = pl_gen_feed_prefill_chunks(f, mb);
    uint32_t n = 0, t = 0;
    for (int s = mb; s < job->n_seqs; s += job->microbatches) {
        int len = job->prompt_len[s], end = len, start = 0;
        if (chunks > 1) { /* counted back from the prompt's end */
            end = len - (chunks - 1 - chunk) * job->gen.prefill_chunk;
            start = PL_MAX(0, end - job->gen.prefill_chunk);
        }
        if (end <= 0)
            continue;
        seqs[n] = (pl_act_seq_t){.seq = (uint32_t)s, .pos0 = (uint32_t)start,
                                 .n_tok = (uint32_t)(end - start)};
        memcpy(tokens + t, job->prompts[s] + start, (size_t)(end - start) * sizeof(int32_t));
        f->pos[s] = end;
        t += (uint32_t)(end - start);
        n++;
    }
    *hdr = (pl_act_hdr_t){.kind = PL_ACT_HIDDEN, .job = job_id, .mb = (uint32_t)mb, .step = 0,
                          .n_seq = n, .n_tokens = t};
}

pl_status_t pl_gen_feed_decode(pl_gen_feed_t *f, const pl_act_hdr_t *in,
                               const pl_act_seq_t *in_seqs, pl_act_hdr_t *hdr, pl_act_seq_t *seqs,
                               int32_t *tokens)
{
    const pl_gen_job_t *job = f->job;
    uint32_t n = 0;
    if (in->kind != PL_ACT_TOKENS || in->mb >= (uint32_t)job->microbatches)
        return pl_error(PL_ERR_PROTOCOL, "tokens message: bad kind %u or microbatch %u", in->kind,
                        in->mb);
    int max_ctx = pl_gen_job_max_ctx(job);
    for (uint32_t i = 0; i < in->n_seq; i++) { /* all or nothing */
        uint32_t s = in_seqs[i].seq;
        if (s >= (uint32_t)job->n_seqs || s % (uint32_t)job->microbatches != in->mb ||
            f->finished[s] || in_seqs[i].token < 0 ||
            (!(in_seqs[i].flags & PL_ACT_FINISHED) && f->pos[s] >= max_ctx))
            return pl_error(PL_ERR_PROTOCOL, "tokens message: sequence %u is not live in "
                            "microbatch %u", s, in->mb);
    }
    for (uint32_t i = 0; i < in->n_seq; i++) {
        uint32_t s = in_seqs[i].seq;
        if (in_seqs[i].flags & PL_ACT_FINISHED) {
            f->finished[s] = true;
            continue;
        }
        seqs[n] = (pl_act_seq_t){.seq = s, .pos0 = (uint32_t)f->pos[s], .n_tok = 1};
        tokens[n] = in_seqs[i].token;
        f->pos[s]++;
        n++;
    }
    *hdr = (pl_act_hdr_t){.kind = PL_ACT_HIDDEN, .job = in->job, .mb = in->mb,
                          .step = in->step + 1, .n_seq = n, .n_tokens = n};
    if (n == 0)
        f->active--;
    return PL_OK;
}

int pl_gen_feed_active(const pl_gen_feed_t *f)
{
    return f->active;
}

struct pl_gen_sink {
    const pl_gen_job_t *job;
    int vocab;
    int32_t **out;     /* generated tokens per sequence */
    int *n_out;
    int *finish;       /* 0 running, else the pl_finish_t */
    pl_gen_text_t *text; /* a text job's decoder and stop strings; NULL otherwise */
    int n_done;
    int n_first;       /* sequences that have their first token */
    uint64_t generated;
    double prefill_done_at;
    float *scratch; /* 2 * vocab for the sampler, then one logits row with EOS masked */
};

pl_status_t pl_gen_sink_create(const pl_gen_job_t *job, int vocab, pl_gen_sink_t **sink_p)
{
    pl_gen_sink_t *k = calloc(1, sizeof(*k));
    if (!k)
        return pl_error(PL_ERR_NOMEM, "sink: out of memory");
    k->job = job;
    k->vocab = vocab;
    k->out = calloc((size_t)job->n_seqs, sizeof(*k->out));
    k->n_out = calloc((size_t)job->n_seqs, sizeof(int));
    k->finish = calloc((size_t)job->n_seqs, sizeof(int));
    k->scratch = malloc(3 * (size_t)vocab * sizeof(float));
    if (!k->out || !k->n_out || !k->finish || !k->scratch)
        goto err;
    for (int s = 0; s < job->n_seqs; s++)
        if (!(k->out[s] = malloc((size_t)job->gen.max_new_tokens * sizeof(int32_t))))
            goto err;
    if (job->text_model[0]) {
        pl_status_t st = pl_gen_text_create(job->text_model, job->n_seqs, &job->gen, &k->text);
        if (st) {
            pl_gen_sink_destroy(&k);
            return st;
        }
    }
    *sink_p = k;
    return PL_OK;
err:
    pl_gen_sink_destroy(&k);
    return pl_error(PL_ERR_NOMEM, "sink: out of memory");
}

void pl_gen_sink_destroy(pl_gen_sink_t **sink_p)
{
    pl_gen_sink_t *k = *sink_p;
    if (!k)
        return;
    if (k->out)
        for (int s = 0; s < k->job->n_seqs; s++)
            free(k->out[s]);
    free(k->out);
    free(k->n_out);
    free(k->finish);
    free(k->scratch);
    pl_gen_text_destroy(&k->text);
    free(k);
    *sink_p = NULL;
}

static bool s_is_eos(const pl_gen_job_t *job, int token)
{
    for (int i = 0; i < job->n_eos; i++)
        if (job->eos[i] == token)
            return true;
    return false;
}

/* Whether entry e (of a running sequence) ends inside its prompt: an earlier prefill chunk. */
static bool s_inside(const pl_gen_sink_t *k, const pl_act_seq_t *e)
{
    uint64_t end = (uint64_t)e->pos0 + e->n_tok;
    return k->n_out[e->seq] == 0 && end < (uint64_t)k->job->prompt_len[e->seq];
}

bool pl_gen_sink_wants_logits(const pl_gen_sink_t *k, const pl_act_hdr_t *hdr,
                              const pl_act_seq_t *seqs)
{
    if (hdr->n_seq == 0)
        return true;
    for (uint32_t i = 0; i < hdr->n_seq; i++)
        if (seqs[i].seq >= (uint32_t)k->job->n_seqs || !s_inside(k, &seqs[i]))
            return true; /* sampled (or refused by pl_gen_sink_sample) */
    return false;
}

pl_status_t pl_gen_sink_sample(pl_gen_sink_t *k, const pl_act_hdr_t *hdr,
                               const pl_act_seq_t *seqs, const float *logits, pl_act_hdr_t *out,
                               pl_act_seq_t *out_seqs)
{
    const pl_gen_job_t *job = k->job;
    uint32_t inside = 0; /* entries that end inside their prompt: an earlier prefill chunk */
    for (uint32_t i = 0; i < hdr->n_seq; i++) { /* all or nothing */
        uint32_t s = seqs[i].seq;
        if (s >= (uint32_t)job->n_seqs || k->finish[s])
            return pl_error(PL_ERR_PROTOCOL, "sequence %u is not running", s);
        uint64_t end = (uint64_t)seqs[i].pos0 + seqs[i].n_tok;
        uint64_t at = (uint64_t)job->prompt_len[s] + (uint64_t)k->n_out[s];
        if (s_inside(k, &seqs[i]))
            inside++;
        else if (end != at)
            return pl_error(PL_ERR_PROTOCOL, "sequence %u: message ends at position %llu, the "
                            "sequence stands at %llu", s, (unsigned long long)end,
                            (unsigned long long)at);
    }
    if (inside > 0 && inside < hdr->n_seq)
        return pl_error(PL_ERR_PROTOCOL, "microbatch %u: %u of %u sequences end their prompt "
                        "in this message (all or none must)", hdr->mb, hdr->n_seq - inside,
                        hdr->n_seq);
    if (inside > 0) { /* an earlier prefill chunk: its KV is kept, nothing sampled */
        *out = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .job = hdr->job, .mb = hdr->mb,
                              .step = hdr->step};
        return PL_OK;
    }
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        uint32_t s = seqs[i].seq;
        int step = k->n_out[s];
        const float *row = logits + (size_t)i * (size_t)k->vocab;
        if (step < job->gen.min_new_tokens) { /* too early for EOS: it cannot be drawn */
            float *masked = k->scratch + 2 * (size_t)k->vocab;
            memcpy(masked, row, (size_t)k->vocab * sizeof(float));
            for (int e = 0; e < job->n_eos; e++)
                if (job->eos[e] >= 0 && job->eos[e] < k->vocab)
                    masked[job->eos[e]] = -INFINITY;
            row = masked;
        }
        int tok = pl_sample(row, k->vocab, &job->sampling, s, (uint64_t)step, k->scratch);
        k->out[s][k->n_out[s]++] = tok;
        k->generated++;
        if (step == 0 && ++k->n_first == job->n_seqs)
            k->prefill_done_at = pl_now();
        uint32_t flags = 0;
        bool eos = job->gen.stop_at_eos && s_is_eos(job, tok), stopped = false;
        bool length = k->n_out[s] >= job->gen.max_new_tokens;
        if (k->text) {
            pl_status_t st = pl_gen_text_push(k->text, (int)s, tok, eos || length, &stopped);
            if (st)
                return st;
        }
        if (stopped)
            k->finish[s] = PL_FINISH_STOP;
        else if (eos)
            k->finish[s] = PL_FINISH_EOS;
        else if (length)
            k->finish[s] = PL_FINISH_LENGTH;
        if (k->finish[s]) {
            flags = PL_ACT_FINISHED;
            k->n_done++;
        }
        out_seqs[i] = (pl_act_seq_t){.seq = s, .pos0 = seqs[i].pos0 + seqs[i].n_tok - 1,
                                     .n_tok = 1, .flags = flags, .token = tok};
    }
    *out = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .job = hdr->job, .mb = hdr->mb,
                          .step = hdr->step, .n_seq = hdr->n_seq, .n_tokens = hdr->n_seq};
    return PL_OK;
}

bool pl_gen_sink_done(const pl_gen_sink_t *k)
{
    return k->n_done == k->job->n_seqs;
}

pl_status_t pl_gen_sink_collect(const pl_gen_sink_t *k, pl_msg_result_t **r_p, int *n_p)
{
    pl_msg_result_t *r = calloc((size_t)k->job->n_seqs, sizeof(*r));
    if (!r)
        return pl_error(PL_ERR_NOMEM, "results: out of memory");
    for (int s = 0; s < k->job->n_seqs; s++) {
        r[s].seq = s;
        r[s].n_tokens = k->n_out[s];
        r[s].finish = (pl_finish_t)k->finish[s];
        size_t tl;
        if ((k->text && !(r[s].text = strdup(pl_gen_text_get(k->text, s, &tl)))) ||
            (k->n_out[s] && !(r[s].tokens = malloc((size_t)k->n_out[s] * sizeof(int32_t))))) {
            pl_msg_results_free(r, k->job->n_seqs);
            return pl_error(PL_ERR_NOMEM, "results: out of memory");
        }
        if (k->n_out[s])
            memcpy(r[s].tokens, k->out[s], (size_t)k->n_out[s] * sizeof(int32_t));
    }
    *r_p = r;
    *n_p = k->job->n_seqs;
    return PL_OK;
}

json_t *pl_gen_sink_results(const pl_gen_sink_t *k)
{
    pl_msg_result_t *r;
    json_t *arr = NULL;
    int n;
    if (pl_gen_sink_collect(k, &r, &n))
        return NULL;
    pl_msg_results_encode(r, n, &arr);
    pl_msg_results_free(r, n);
    return arr;
}

uint64_t pl_gen_sink_generated(const pl_gen_sink_t *k)
{
    return k->generated;
}

const pl_gen_text_t *pl_gen_sink_text(const pl_gen_sink_t *k)
{
    return k->text;
}

double pl_gen_sink_prefill_done_at(const pl_gen_sink_t *k)
{
    return k->prefill_done_at;
}
