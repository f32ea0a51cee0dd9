/* A generation job's description: prompts, stop rules, sampling, microbatch plan; parsed from
 * the coordinator's JSON and from prompts JSONL, every value checked. */
#include "pipeline/gen.h"

#include "common/json.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

void pl_gen_job_clear(pl_gen_job_t *job)
{
    if (job->prompts)
        for (int i = 0; i < job->n_seqs; i++)
            free(job->prompts[i]);
    free(job->prompts);
    free(job->prompt_len);
    memset(job, 0, sizeof(*job));
}

static pl_status_t s_prompt(const json_t *arr, int idx, const pl_model_config_t *cfg,
                            pl_gen_job_t *job)
{
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n == 0)
        return pl_error(PL_ERR_INVALID, "prompt %d: expected a non-empty array of token ids", idx);
    if (n > (size_t)cfg->max_pos)
        return pl_error(PL_ERR_RANGE, "prompt %d: %zu tokens, the model allows %d positions", idx,
                        n, cfg->max_pos);
    job->prompts[idx] = malloc(n * sizeof(int32_t));
    if (!job->prompts[idx])
        return pl_error(PL_ERR_NOMEM, "prompt %d: out of memory", idx);
    for (size_t t = 0; t < n; t++) {
        json_t *v = json_array_get(arr, t);
        if (!json_is_integer(v))
            return pl_error(PL_ERR_INVALID, "prompt %d, token %zu: expected an integer", idx, t);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= cfg->vocab)
            return pl_error(PL_ERR_RANGE,
                            "prompt %d, token %zu: id %lld outside the vocabulary [0, %d)", idx, t,
                            (long long)id, cfg->vocab);
        job->prompts[idx][t] = (int32_t)id;
    }
    job->prompt_len[idx] = (int)n;
    return PL_OK;
}

pl_status_t pl_gen_job_from_json(const json_t *obj, const pl_model_config_t *cfg, pl_gen_job_t *job)
{
    pl_gen_job_t j = {0};
    json_t *prompts, *sampling;
    int64_t v = 16, k = 0, mb = 0, chunk = 0;
    double temp = 0, top_p = 1;
    const char *seed_s = NULL, *wire = NULL;
    pl_status_t st;

    if ((st = pl_json_array(obj, "prompts", PL_GEN_MAX_SEQS, &prompts)))
        return st;
    if (json_array_size(prompts) == 0)
        return pl_error(PL_ERR_INVALID, "field 'prompts': no prompts");
    if ((st = pl_json_int_opt(obj, "max_new_tokens", 1, 65536, &v)))
        return st;
    j.max_new_tokens = (int)v;
    j.stop_at_eos = true;
    if ((st = pl_json_bool_opt(obj, "stop_at_eos", &j.stop_at_eos)))
        return st;
    if ((st = pl_json_int_opt(obj, "microbatches", 0, 1024, &mb)) ||
        (st = pl_json_int_opt(obj, "prefill_chunk", 0, 65536, &chunk)) ||
        (st = pl_json_str_opt(obj, "wire_dtype", 8, &wire)))
        return st;
    j.prefill_chunk = (int)chunk;
    if (wire && (st = pl_act_dtype_parse(wire, &j.wire_dtype)))
        return pl_error_prefix(st, "field 'wire_dtype': ");
    sampling = json_object_get(obj, "sampling");
    if (sampling && !json_is_object(sampling))
        return pl_error(PL_ERR_INVALID, "field 'sampling': expected an object");
    if (sampling) {
        if ((st = pl_json_num_opt(sampling, "temperature", 0, 100, &temp)) ||
            (st = pl_json_int_opt(sampling, "top_k", 0, 1000000, &k)) ||
            (st = pl_json_num_opt(sampling, "top_p", 1e-6, 1, &top_p)) ||
            (st = pl_json_str_opt(sampling, "seed", 20, &seed_s)))
            return pl_error_prefix(st, "sampling: ");
        if (seed_s) {
            char *end;
            j.sampling.seed = strtoull(seed_s, &end, 10);
            if (!*seed_s || *end)
                return pl_error(PL_ERR_INVALID, "field 'sampling.seed': not a decimal number");
        }
    }
    j.sampling.temperature = (float)temp;
    j.sampling.top_k = (int)k;
    j.sampling.top_p = (float)top_p;
    j.n_seqs = (int)json_array_size(prompts);
    j.microbatches = mb > 0 ? (int)PL_MIN(mb, j.n_seqs) : 1;
    j.n_eos = cfg->n_eos;
    memcpy(j.eos, cfg->eos_ids, sizeof(j.eos));
    j.prompts = calloc((size_t)j.n_seqs, sizeof(*j.prompts));
    j.prompt_len = calloc((size_t)j.n_seqs, sizeof(*j.prompt_len));
    if (!j.prompts || !j.prompt_len) {
        st = pl_error(PL_ERR_NOMEM, "prompts: out of memory");
        goto err;
    }
    for (int i = 0; i < j.n_seqs; i++)
        if ((st = s_prompt(json_array_get(prompts, (size_t)i), i, cfg, &j)))
            goto err;
    for (int i = 0; i < j.n_seqs; i++)
        if (j.prompt_len[i] + j.max_new_tokens > cfg->max_pos) {
            st = pl_error(PL_ERR_RANGE,
                          "prompt %d: %d tokens + max_new_tokens %d exceed the model's %d "
                          "positions",
                          i, j.prompt_len[i], j.max_new_tokens, cfg->max_pos);
            goto err;
        }
    *job = j;
    return PL_OK;
err:
    pl_gen_job_clear(&j);
    return st;
}

pl_status_t pl_gen_prompts_parse(const char *text, size_t len, const char *origin, json_t **out)
{
    json_t *arr = json_array();
    size_t line_no = 0, i = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        line_no++;
        size_t a = i;
        while (a < end && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r'))
            a++;
        if (a < end) {
            json_error_t jerr;
            json_t *v = json_loadb(text + a, end - a, JSON_DISABLE_EOF_CHECK, &jerr);
            if (!v || !json_is_array(v)) {
                json_decref(v);
                json_decref(arr);
                return pl_error(PL_ERR_INVALID, "%s:%zu: expected a JSON array of token ids%s%s",
                                origin, line_no, v ? "" : ": ", v ? "" : jerr.text);
            }
            if (json_array_size(arr) >= PL_GEN_MAX_SEQS) {
                json_decref(v);
                json_decref(arr);
                return pl_error(PL_ERR_RANGE, "%s: more than %d prompts", origin,
                                PL_GEN_MAX_SEQS);
            }
            json_array_append_new(arr, v);
        }
        i = end + 1;
    }
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return pl_error(PL_ERR_INVALID, "%s: no prompts", origin);
    }
    *out = arr;
    return PL_OK;
}

int pl_gen_job_max_ctx(const pl_gen_job_t *job)
{
    int m = 0;
    for (int i = 0; i < job->n_seqs; i++)
        m = PL_MAX(m, job->prompt_len[i] + job->max_new_tokens);
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
            sum += job->prompt_len[s];
        m = PL_MAX(m, sum);
    }
    return m;
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
}
