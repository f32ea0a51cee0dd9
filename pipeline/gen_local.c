/* In-process generation: stages run back to back in one thread over the same microbatch plan
 * the pipeline uses, so its tokens are the reference for every partition. */
#include "pipeline/gen_local.h"

#include "common/util.h"
#include "pipeline/gen.h"
#include "pipeline/local_chain.h"

#include <stdlib.h>
#include <string.h>

/* Sample a microbatch's logits into the next free slot of the FIFO of sampled microbatches; a
 * sequence that finished gives its KV slot back on every stage. */
static pl_status_t s_enqueue(pl_local_chain_t *c, pl_gen_sink_t *sink, const pl_gen_job_t *job,
                             const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                             const float *logits, pl_act_hdr_t *q_hdr, pl_act_seq_t *q_seqs,
                             int q_head, int *q_count, pl_gen_local_stats_t *stats)
{
    int at = (q_head + *q_count) % job->microbatches;
    pl_act_seq_t *out = q_seqs + (size_t)at * job->n_seqs;
    pl_status_t st = pl_gen_sink_sample(sink, hdr, seqs, logits, &q_hdr[at], out);
    if (st || q_hdr[at].n_seq == 0) /* nothing sampled after an earlier prefill chunk */
        return st;
    for (uint32_t i = 0; i < q_hdr[at].n_seq; i++)
        if (out[i].flags & PL_ACT_FINISHED) {
            pl_local_chain_free_seq(c, (int)out[i].seq);
            stats->freed += (uint64_t)c->n_stages;
        }
    (*q_count)++;
    return PL_OK;
}

pl_status_t pl_gen_local_run(const char *model_dir, const pl_job_spec_t *spec,
                             pl_be_device_t *dev, const int *counts, int n_stages,
                             json_t **results_p, pl_gen_local_stats_t *stats)
{
    return pl_gen_local_resume(model_dir, spec, NULL, 0, dev, counts, n_stages, results_p,
                               stats);
}

pl_status_t pl_gen_local_resume(const char *model_dir, const pl_job_spec_t *spec,
                                const pl_msg_result_t *resume, int n_resume,
                                pl_be_device_t *dev, const int *counts, int n_stages,
                                json_t **results_p, pl_gen_local_stats_t *stats)
{
    pl_model_t *model = NULL;
    pl_gen_job_t job = {0};
    pl_gen_feed_t *feed = NULL;
    pl_gen_sink_t *sink = NULL;
    pl_local_chain_t c = {0};
    pl_act_hdr_t *q_hdr = NULL, hdr;
    pl_act_seq_t *q_seqs = NULL, *seqs = NULL;
    int32_t *tokens = NULL;
    int q_head = 0, q_count = 0;
    double t0 = pl_now();
    pl_status_t st;

    memset(stats, 0, sizeof(*stats));
    if ((st = pl_model_open(model_dir, &model)))
        return st;
    const pl_model_config_t *cfg = pl_model_config(model);
    if ((st = pl_gen_job_from_spec(spec, spec->microbatches, cfg, &job)) ||
        (resume && (st = pl_gen_job_resume(&job, resume, n_resume, cfg->vocab))))
        goto out;
    int max_tokens = pl_gen_job_max_tokens(&job);
    if ((st = pl_local_chain_load(&c, dev, model, counts, n_stages, job.n_seqs,
                                  pl_gen_job_max_ctx(&job), max_tokens, job.wire_dtype)))
        goto out;
    tokens = malloc((size_t)max_tokens * sizeof(int32_t));
    seqs = malloc((size_t)job.n_seqs * sizeof(*seqs));
    q_hdr = calloc((size_t)job.microbatches, sizeof(*q_hdr));
    q_seqs = calloc((size_t)job.microbatches * job.n_seqs, sizeof(*q_seqs));
    if (!tokens || !seqs || !q_hdr || !q_seqs) {
        st = pl_error(PL_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = pl_gen_feed_create(&job, &feed)) ||
        (st = pl_gen_sink_create(&job, cfg->vocab, &sink)))
        goto out;
    stats->load_s = pl_now() - t0;
    t0 = pl_now();
    for (int mb = 0; mb < job.microbatches && !st; mb++) {
        int chunks = pl_gen_feed_prefill_chunks(feed, mb);
        for (int k = 0; k < chunks && !st; k++) {
            float *logits;
            pl_gen_feed_prefill(feed, 0, mb, k, &hdr, seqs, tokens);
            stats->prompt_tokens += hdr.n_tokens;
            if ((st = pl_local_chain_run(&c, &hdr, seqs, tokens, &logits)))
                break;
            st = s_enqueue(&c, sink, &job, &hdr, seqs, logits, q_hdr, q_seqs, q_head, &q_count,
                           stats);
        }
    }
    while (!st && q_count > 0) {
        float *logits;
        pl_act_hdr_t tok = q_hdr[q_head];
        pl_act_seq_t *in = q_seqs + (size_t)q_head * job.n_seqs;
        q_head = (q_head + 1) % job.microbatches;
        q_count--;
        if ((st = pl_gen_feed_decode(feed, &tok, in, &hdr, seqs, tokens)) || hdr.n_seq == 0)
            continue;
        if ((st = pl_local_chain_run(&c, &hdr, seqs, tokens, &logits)))
            break;
        st = s_enqueue(&c, sink, &job, &hdr, seqs, logits, q_hdr, q_seqs, q_head, &q_count,
                       stats);
    }
    if (!st) {
        double pf = pl_gen_sink_prefill_done_at(sink);
        stats->total_s = pl_now() - t0;
        stats->prefill_s = pf > 0 ? pf - t0 : stats->total_s;
        stats->compute_s = c.compute_s;
        stats->generated = pl_gen_sink_generated(sink);
        if (!(*results_p = pl_gen_sink_results(sink)))
            st = pl_error(PL_ERR_NOMEM, "results: out of memory");
    }
out:
    pl_local_chain_unload(&c);
    free(tokens);
    free(seqs);
    free(q_hdr);
    free(q_seqs);
    pl_gen_feed_destroy(&feed);
    pl_gen_sink_destroy(&sink);
    pl_gen_job_clear(&job);
    pl_model_destroy(&model);
    return st;
}

pl_status_t pl_gen_local_run_on(const char *model_dir, const pl_job_spec_t *spec,
                                const char *backend,
                                int threads, const int *counts, int n_stages, json_t **results_p,
                                pl_gen_local_stats_t *stats)
{
    const pl_be_t *be = pl_be_registry_find(backend);
    pl_be_device_t *dev = NULL;
    pl_status_t st;
    if (!be)
        return pl_error_prefix(PL_ERR_NO_DEVICE, "in-process run: ");
    if ((st = pl_be_device_open(be, 0, threads, &dev)))
        return st;
    st = pl_gen_local_run(model_dir, spec, dev, counts, n_stages, results_p, stats);
    pl_be_device_close(&dev);
    return st;
}
