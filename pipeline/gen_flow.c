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
    /* a resumed job: sequences that had finished are not fed, and a microbatch of only such
     * sequences is over before it starts */
    for (int mb = 0; mb < job->microbatches; mb++) {
        bool live = false;
        for (int s = mb; s < job->n_seqs; s += job->microbatches) {
            f->finished[s] = pl_gen_job_was_done(job, s);
            live = live || !f->finished[s];
        }
        f->active += live;
    }
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
        if (!f->finished[s])
            longest = PL_MAX(longest, job->prompt_len[s]);
    if (longest == 0) /* every sequence of it finished before a resume: nothing to send */
        return 0;
    pl_job_chunks_t cuts = pl_job_chunks_of(&job->gen);
    return pl_job_chunks_count(&cuts, longest);
}

void pl_gen_feed_prefill(pl_gen_feed_t *f, uint32_t job_id, int mb, int chunk, pl_act_hdr_t *hdr,
                         pl_act_seq_t *seqs, int32_t *tokens)
{
    const pl_gen_job_t *job = f->job;
    int chunks = pl_gen_feed_prefill_chunks(f, mb);
    pl_job_chunks_t cuts = pl_job_chunks_of(&job->gen);
    /* chunk `chunk` of the longest prompt is the (chunks - 1 - chunk)-th from every prompt's end */
    int64_t after = pl_job_chunks_tail(&cuts, chunks - 1 - chunk);
    int64_t upto = pl_job_chunks_tail(&cuts, chunks - chunk);
    uint32_t n = 0, t = 0;
    for (int s = mb; s < job->n_seqs; s += job->microbatches) {
        int len = job->prompt_len[s], end = len, start = 0;
        if (f->finished[s])
            continue;
        if (chunks > 1) { /* counted back from the prompt's end */
            end = (int)PL_MAX(0, len - after);
            start = (int)PL_MAX(0, len - upto);
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
    int n_first;       /* sequences that have their first token of this assignment */
    int n_live;        /* sequences not finished when the assignment started */
    pl_gen_log_t *log; /* where each token is also recorded (NULL: nowhere) */
    uint64_t generated;
    double prefill_done_at;
    float *scratch; /* 2 * vocab for the sampler, then one logits row with EOS masked */
};

/* A resumed job's earlier tokens, recorded as if just sampled: the text decoder and the stop
 * strings see them in order (so text and stops are the undisturbed run's), and the next sample
 * of a sequence is its next step. */
static pl_status_t s_replay(pl_gen_sink_t *k)
{
    const pl_gen_job_t *job = k->job;
    for (int s = 0; s < job->n_seqs; s++) {
        int n = pl_gen_job_resumed(job, s), base = pl_gen_job_prompt_base(job, s);
        bool done = pl_gen_job_was_done(job, s);
        memcpy(k->out[s], job->prompts[s] + base, (size_t)n * sizeof(int32_t));
        for (int t = 0; t < n && k->text; t++) {
            bool stopped = false;
            pl_status_t st = pl_gen_text_push(k->text, s, k->out[s][t], done && t == n - 1,
                                              &stopped);
            if (st)
                return st;
        }
        k->n_out[s] = n;
        k->generated += (uint64_t)n;
        if (done) {
            k->finish[s] = job->finish0[s];
            k->n_done++;
        } else {
            k->n_live++;
        }
    }
    if (k->n_live == 0)
        k->prefill_done_at = pl_now();
    return PL_OK;
}

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
    pl_status_t st = s_replay(k);
    if (st) {
        pl_gen_sink_destroy(&k);
        return st;
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

int pl_gen_sample_next(const float *row, int vocab, const pl_job_gen_t *gen,
                       const pl_sample_params_t *sampling, const int *eos, int n_eos,
                       uint64_t stream, int step, float *scratch, pl_finish_t *finish_p)
{
    if (step < gen->min_new_tokens) { /* too early for EOS: it cannot be drawn */
        float *masked = scratch + 2 * (size_t)vocab;
        memcpy(masked, row, (size_t)vocab * sizeof(float));
        for (int e = 0; e < n_eos; e++)
            if (eos[e] >= 0 && eos[e] < vocab)
                masked[eos[e]] = -INFINITY;
        row = masked;
    }
    int tok = pl_sample(row, vocab, sampling, stream, (uint64_t)step, scratch);
    bool is_eos = false;
    for (int e = 0; e < n_eos && gen->stop_at_eos; e++)
        is_eos |= eos[e] == tok;
    *finish_p = is_eos ? PL_FINISH_EOS
                       : step + 1 >= gen->max_new_tokens ? PL_FINISH_LENGTH : PL_FINISH_NONE;
    return tok;
}

/* Whether entry e (of a running sequence) ends inside its prompt: an earlier prefill chunk. */
static bool s_inside(const pl_gen_sink_t *k, const pl_act_seq_t *e)
{
    /* sampled in this assignment: a resumed sequence holds its earlier tokens */
    return pl_gen_in_prompt(k->n_out[e->seq] - pl_gen_job_resumed(k->job, (int)e->seq), e,
                            k->job->prompt_len[e->seq]);
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
    for (uint32_t i = 0; i < hdr->n_seq; i++) { /* all or nothing */
        uint32_t s = seqs[i].seq;
        if (s >= (uint32_t)job->n_seqs || k->finish[s])
            return pl_error(PL_ERR_PROTOCOL, "sequence %u is not running", s);
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].seq == s)
                return pl_error(PL_ERR_PROTOCOL, "sequence %u twice in one message", s);
        uint64_t end = (uint64_t)seqs[i].pos0 + seqs[i].n_tok;
        uint64_t at = (uint64_t)pl_gen_job_prompt_base(job, s) + (uint64_t)k->n_out[s];
        if (!s_inside(k, &seqs[i]) && end != at)
            return pl_error(PL_ERR_PROTOCOL, "sequence %u: message ends at position %llu, the "
                            "sequence stands at %llu", s, (unsigned long long)end,
                            (unsigned long long)at);
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        uint32_t s = seqs[i].seq;
        int step = k->n_out[s];
        if (s_inside(k, &seqs[i]))
            continue; /* an earlier chunk of its prompt: its KV is kept, nothing sampled */
        /* the draw depends on (seed, sequence, step) only: a resumed sequence's step counts
         * from its original start, so it draws what the undisturbed run drew */
        pl_finish_t fin;
        int tok = pl_gen_sample_next(logits + (size_t)i * (size_t)k->vocab, k->vocab, &job->gen,
                                     &job->sampling, job->eos, job->n_eos, s, step, k->scratch,
                                     &fin);
        k->out[s][k->n_out[s]++] = tok;
        k->generated++;
        if (step == pl_gen_job_resumed(job, s) && ++k->n_first == k->n_live)
            k->prefill_done_at = pl_now();
        uint32_t flags = 0;
        bool eos = fin == PL_FINISH_EOS, stopped = false;
        bool length = fin == PL_FINISH_LENGTH;
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
        pl_gen_log_push(k->log, (int)s, tok, (pl_finish_t)k->finish[s]);
        out_seqs[n++] = (pl_act_seq_t){.seq = s, .pos0 = seqs[i].pos0 + seqs[i].n_tok - 1,
                                       .n_tok = 1, .flags = flags, .token = tok};
    }
    *out = (pl_act_hdr_t){.kind = PL_ACT_TOKENS, .job = hdr->job, .mb = hdr->mb,
                          .step = hdr->step, .n_seq = n, .n_tokens = n};
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

void pl_gen_sink_set_log(pl_gen_sink_t *k, pl_gen_log_t *log)
{
    k->log = log;
    for (int s = 0; s < k->job->n_seqs; s++) /* what it holds from before, in order */
        for (int t = 0; t < k->n_out[s]; t++)
            pl_gen_log_push(log, s, k->out[s][t],
                            t == k->n_out[s] - 1 ? (pl_finish_t)k->finish[s] : PL_FINISH_NONE);
}

double pl_gen_sink_prefill_done_at(const pl_gen_sink_t *k)
{
    return k->prefill_done_at;
}
