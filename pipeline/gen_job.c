/* A generation job as the runtime runs it: built from the typed spec and the plan's microbatch
 * count, checked against the model; and the prompts JSONL a job file names, read into a spec. */
#include "pipeline/gen.h"

#include "common/util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pl_gen_job_clear(pl_gen_job_t *job)
{
    if (job->prompts)
        for (int i = 0; i < job->n_seqs; i++)
            free(job->prompts[i]);
    free(job->prompts);
    free(job->prompt_len);
    free(job->gen_len);
    free(job->finish0);
    memset(job, 0, sizeof(*job));
}

int pl_gen_job_resumed(const pl_gen_job_t *job, int s)
{
    return job->gen_len ? job->gen_len[s] : 0;
}

int pl_gen_job_prompt_base(const pl_gen_job_t *job, int s)
{
    return job->prompt_len[s] - pl_gen_job_resumed(job, s);
}

bool pl_gen_job_was_done(const pl_gen_job_t *job, int s)
{
    return job->finish0 && job->finish0[s] != PL_FINISH_NONE;
}

pl_status_t pl_gen_job_resume(pl_gen_job_t *job, const pl_msg_result_t *r, int n, int vocab)
{
    if (n != job->n_seqs || n < 1)
        return pl_error(PL_ERR_INVALID, "resume: %d sequences for a job of %d", n, job->n_seqs);
    if (job->gen_len)
        return pl_error(PL_ERR_INVALID, "resume: the job was resumed already");
    /* everything is checked before anything changes */
    for (int s = 0; s < n; s++) {
        int max = job->gen.max_new_tokens;
        if (r[s].seq != s || r[s].n_tokens < 0 || r[s].n_tokens > max ||
            (unsigned)r[s].finish > PL_FINISH_STOP)
            return pl_error(PL_ERR_INVALID, "resume: sequence %d: %d tokens, %d allowed", s,
                            r[s].n_tokens, max);
        if (r[s].finish == PL_FINISH_NONE && r[s].n_tokens == max)
            return pl_error(PL_ERR_INVALID, "resume: sequence %d: all %d tokens but not finished",
                            s, max);
        if (r[s].finish != PL_FINISH_NONE && r[s].n_tokens == 0)
            return pl_error(PL_ERR_INVALID, "resume: sequence %d: finished without a token", s);
        for (int t = 0; t < r[s].n_tokens; t++)
            if (r[s].tokens[t] < 0 || r[s].tokens[t] >= vocab)
                return pl_error(PL_ERR_RANGE, "resume: sequence %d, token %d: id %d outside the "
                                "vocabulary [0, %d)", s, t, r[s].tokens[t], vocab);
    }
    int *gen_len = calloc((size_t)n, sizeof(int)), *finish0 = calloc((size_t)n, sizeof(int));
    int32_t **grown = calloc((size_t)n, sizeof(*grown));
    if (!gen_len || !finish0 || !grown)
        goto nomem;
    for (int s = 0; s < n; s++) {
        grown[s] = malloc((size_t)(job->prompt_len[s] + r[s].n_tokens) * sizeof(int32_t));
        if (!grown[s])
            goto nomem;
        memcpy(grown[s], job->prompts[s], (size_t)job->prompt_len[s] * sizeof(int32_t));
        if (r[s].n_tokens)
            memcpy(grown[s] + job->prompt_len[s], r[s].tokens,
                   (size_t)r[s].n_tokens * sizeof(int32_t));
    }
    for (int s = 0; s < n; s++) {
        free(job->prompts[s]);
        job->prompts[s] = grown[s];
        job->prompt_len[s] += r[s].n_tokens;
        gen_len[s] = r[s].n_tokens;
        finish0[s] = (int)r[s].finish;
    }
    free(grown);
    job->gen_len = gen_len;
    job->finish0 = finish0;
    return PL_OK;
nomem:
    for (int s = 0; grown && s < n; s++)
        free(grown[s]);
    free(grown);
    free(gen_len);
    free(finish0);
    return pl_error(PL_ERR_NOMEM, "resume: out of memory");
}

/* A copy of prompt idx, checked against the model: ids in the vocabulary, length in positions. */
static pl_status_t s_prompt(const pl_job_spec_t *spec, int idx, const pl_model_config_t *cfg,
                            pl_gen_job_t *job)
{
    int n = spec->prompt_len[idx];
    if (n <= 0)
        return pl_error(PL_ERR_INVALID, "prompt %d: expected a non-empty array of token ids", idx);
    if (n > cfg->max_pos)
        return pl_error(PL_ERR_RANGE, "prompt %d: %d tokens, the model allows %d positions", idx,
                        n, cfg->max_pos);
    job->prompts[idx] = malloc((size_t)n * sizeof(int32_t));
    if (!job->prompts[idx])
        return pl_error(PL_ERR_NOMEM, "prompt %d: out of memory", idx);
    for (int t = 0; t < n; t++) {
        int32_t id = spec->prompts[idx][t];
        if (id < 0 || id >= cfg->vocab)
            return pl_error(PL_ERR_RANGE,
                            "prompt %d, token %d: id %lld outside the vocabulary [0, %d)", idx, t,
                            (long long)id, cfg->vocab);
        job->prompts[idx][t] = id;
    }
    job->prompt_len[idx] = n;
    return PL_OK;
}

pl_status_t pl_gen_job_set_gen(pl_gen_job_t *job, const pl_job_gen_t *gen)
{
    pl_act_dtype_t dt = PL_ACT_F32;
    pl_status_t st;
    if (gen->prefill_chunk < 0 || gen->prefill_chunk > PL_JOB_MAX_PREFILL_CHUNK)
        return pl_error(PL_ERR_RANGE, "field 'prefill_chunk': %d not in [0, %d]",
                        gen->prefill_chunk, PL_JOB_MAX_PREFILL_CHUNK);
    if ((st = pl_job_chunks_check(&gen->prefill_sched, "prefill_schedule")))
        return st;
    if (gen->wire_dtype[0] && (st = pl_act_dtype_parse(gen->wire_dtype, &dt)))
        return pl_error_prefix(st, "field 'wire_dtype': ");
    job->gen = *gen;
    job->wire_dtype = dt;
    return PL_OK;
}

pl_status_t pl_gen_job_from_spec(const pl_job_spec_t *spec, int microbatches,
                                 const pl_model_config_t *cfg, pl_gen_job_t *job)
{
    pl_gen_job_t j = {0};
    pl_status_t st;

    if (spec->n_prompts <= 0 || spec->n_prompts > PL_GEN_MAX_SEQS)
        return pl_error(PL_ERR_INVALID, "field 'prompts': %d prompts, 1 to %d allowed",
                        spec->n_prompts, PL_GEN_MAX_SEQS);
    if (spec->gen.max_new_tokens < 1 || spec->gen.max_new_tokens > PL_JOB_MAX_NEW_TOKENS)
        return pl_error(PL_ERR_RANGE, "field 'max_new_tokens': %d not in [1, %d]",
                        spec->gen.max_new_tokens, PL_JOB_MAX_NEW_TOKENS);
    if ((st = pl_gen_job_set_gen(&j, &spec->gen)))
        return st;
    j.sampling = (pl_sample_params_t){.temperature = spec->gen.temperature,
                                      .top_k = spec->gen.top_k,
                                      .top_p = spec->gen.top_p,
                                      .seed = spec->gen.seed};
    j.n_seqs = spec->n_prompts;
    j.microbatches = microbatches > 0 ? PL_MIN(microbatches, j.n_seqs) : 1;
    if (spec->text || spec->gen.n_stop)
        snprintf(j.text_model, sizeof(j.text_model), "%s", spec->model);
    j.n_eos = cfg->n_eos;
    memcpy(j.eos, cfg->eos_ids, sizeof(j.eos));
    j.prompts = calloc((size_t)j.n_seqs, sizeof(*j.prompts));
    j.prompt_len = calloc((size_t)j.n_seqs, sizeof(*j.prompt_len));
    if (!j.prompts || !j.prompt_len) {
        st = pl_error(PL_ERR_NOMEM, "prompts: out of memory");
        goto err;
    }
    for (int i = 0; i < j.n_seqs; i++)
        if ((st = s_prompt(spec, i, cfg, &j)))
            goto err;
    for (int i = 0; i < j.n_seqs; i++)
        if (j.prompt_len[i] + j.gen.max_new_tokens > cfg->max_pos) {
            st = pl_error(PL_ERR_RANGE,
                          "prompt %d: %d tokens + max_new_tokens %d exceed the model's %d "
                          "positions",
                          i, j.prompt_len[i], j.gen.max_new_tokens, cfg->max_pos);
            goto err;
        }
    *job = j;
    return PL_OK;
err:
    pl_gen_job_clear(&j);
    return st;
}

pl_status_t pl_gen_spec_from_prompts(const pl_cfg_job_t *cfg, const char *prompts, size_t len,
                                     const char *origin, pl_job_spec_t *spec)
{
    pl_job_spec_t *s = malloc(sizeof(*s));
    char path[PATH_MAX + 32];
    pl_tokenizer_t *tok = NULL;
    pl_model_config_t mcfg;
    pl_status_t st;
    if (!s)
        return pl_error(PL_ERR_NOMEM, "job: out of memory");
    pl_job_spec_init(s);
    if (!realpath(cfg->model, s->model)) {
        st = pl_error(PL_ERR_NOT_FOUND, "model directory %s does not exist", cfg->model);
        goto err;
    }
    if ((st = pl_planner_parse(cfg->planner, &s->planner)))
        goto err;
    /* Only text needs the model here: its tokenizer, and its positions for the text's length.
     * Token-id prompts are checked by the coordinator, which alone decides which model files may
     * be read (models.allow), so a job of ids never reads the model on the client. */
    pl_gen_prompts_ctx_t ctx = {.chat_format = cfg->chat_format,
                                .max_new_tokens = cfg->gen.max_new_tokens};
    if (cfg->gen.n_stop || pl_gen_prompts_have_text(prompts, len)) {
        if ((st = pl_model_config_load(s->model, &mcfg)))
            goto err;
        snprintf(path, sizeof(path), "%s/tokenizer.json", s->model);
        if (access(path, F_OK) == 0 && (st = pl_tokenizer_load(s->model, &tok)))
            goto err;
        if (cfg->gen.n_stop && !tok) {
            st = pl_error(PL_ERR_INVALID,
                          "field 'stop': stop strings need the model's tokenizer, and %s has none",
                          path);
            goto err;
        }
        ctx.tok = tok;
        ctx.max_pos = mcfg.max_pos;
    }
    if ((st = pl_gen_prompts_parse(prompts, len, origin, &ctx, s)))
        goto err;
    pl_tokenizer_destroy(&tok);
    s->gen = cfg->gen;
    s->text = s->text || s->gen.n_stop > 0;
    s->microbatches = cfg->microbatches;
    s->stages = cfg->stages;
    s->n_nodes = cfg->n_nodes;
    memcpy(s->nodes, cfg->nodes, sizeof(s->nodes));
    memcpy(s->deployment, cfg->deployment, sizeof(s->deployment));
    *spec = *s;
    free(s);
    return PL_OK;
err:
    pl_tokenizer_destroy(&tok);
    pl_job_spec_clear(s);
    free(s);
    return st;
}

pl_status_t pl_gen_spec_from_file(const pl_cfg_job_t *cfg, pl_job_spec_t *spec)
{
    char *text = NULL;
    size_t len;
    pl_status_t st = pl_file_read(cfg->prompts, 64u << 20, &text, &len);
    if (!st)
        st = pl_gen_spec_from_prompts(cfg, text, len, cfg->prompts, spec);
    free(text);
    return st;
}

int pl_gen_job_max_ctx(const pl_gen_job_t *job)
{
    int m = 0;
    for (int i = 0; i < job->n_seqs; i++)
        m = PL_MAX(m, pl_gen_job_prompt_base(job, i) + job->gen.max_new_tokens);
    return m;
}

int pl_gen_job_mb_size(const pl_gen_job_t *job, int mb)
{
    return (job->n_seqs - mb + job->microbatches - 1) / job->microbatches;
}

int pl_gen_job_max_tokens(const pl_gen_job_t *job)
{
    int m = 0;
    for (int mb = 0; mb < job->microbatches; mb++) {
        int sum = 0;
        for (int s = mb; s < job->n_seqs; s += job->microbatches)
            sum += pl_gen_job_was_done(job, s) ? 0 : job->prompt_len[s];
        m = PL_MAX(m, sum);
    }
    return PL_MAX(m, 1); /* a resumed job whose sequences all finished still has buffers */
}

void pl_gen_batch(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs, int *ints,
                  pl_be_batch_t *batch)
{
    int n = (int)hdr->n_seq;
    int *slot = ints, *pos0 = ints + n, *ntok = ints + 2 * n;
    for (int i = 0; i < n; i++) {
        slot[i] = (int)seqs[i].seq;
        pos0[i] = (int)seqs[i].pos0;
        ntok[i] = (int)seqs[i].n_tok;
    }
    batch->n_seq = n;
    batch->n_tokens = (int)hdr->n_tokens;
    batch->slot = slot;
    batch->pos0 = pos0;
    batch->n_tok = ntok;
    batch->no_logits = false;
    batch->between_layers = NULL;
    batch->between_arg = NULL;
}

double pl_gen_spec_wire_bytes(const pl_job_spec_t *spec)
{
    pl_act_dtype_t dt = PL_ACT_F32;
    if (spec->gen.wire_dtype[0] && pl_act_dtype_parse(spec->gen.wire_dtype, &dt) != PL_OK) {
        pl_error_clear(); /* decoding refused such specs; charge as f32 */
        dt = PL_ACT_F32;
    }
    return (double)pl_act_dtype_size(dt);
}
