/* What the in-process generation suites share: the model tg_model (5 layers, hidden 96, vocab 300,
 * EOS 2) in a scratch directory made by the suite's init and removed by its fini, a job spec from
 * a job's JSON form through the spec's own codec, and one request run alone as a one-prompt job
 * (the reference the serving suites compare with). */
#ifndef PL_TESTS_GEN_UTIL_H
#define PL_TESTS_GEN_UTIL_H

#include "backends/backend.h"
#include "job_util.h"
#include "pipeline/gen_local.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <jansson.h>

static char tg_dir[256];
static char tg_model[300];

static inline void tg_setup(void)
{
    tc_mkdtemp(tg_dir, sizeof(tg_dir));
    snprintf(tg_model, sizeof(tg_model), "%s/m", tg_dir);
    cr_assert_eq(tc_make_model(tg_dir, "m",
                               "--layers 5 --hidden 96 --intermediate 200 "
                               "--heads 6 --kv-heads 2 --vocab 300 --seed 3 --eos 2"),
                 0);
}

static inline void tg_teardown(void)
{
    tc_sh(NULL, "rm -rf %s", tg_dir);
}

/* The spec of model "/m" and `gen`, the job's settings with "microbatches" beside them (where
 * the coordinator sends it beside "gen"). */
static inline pl_status_t tg_spec(const json_t *gen, pl_job_spec_t *spec)
{
    json_t *g = json_deep_copy(gen), *mb = json_object_get(g, "microbatches");
    json_t *body = json_pack("{s:s, s:O, s:O?}", "model", "/m", "gen", g, "microbatches", mb);
    json_object_del(g, "microbatches");
    pl_status_t st = pl_job_spec_decode(body, spec);
    json_decref(body);
    json_decref(g);
    return st;
}

/* The prompt alone as a one-prompt job of `g` (prompt chunks of `chunk`) through pl_gen_local_run
 * (the job runner: its own feeder and sink) on the CPU, split as counts (NULL: one stage): its
 * result, {"tokens": [...], "finish": ...}. */
static inline json_t *tg_alone(const char *model, const int32_t *prompt, int n,
                               const pl_job_gen_t *g, int chunk, const int *counts, int n_stages)
{
    pl_job_spec_t spec;
    pl_job_spec_init(&spec);
    snprintf(spec.model, sizeof(spec.model), "%s", model);
    spec.n_prompts = 1;
    spec.prompts = calloc(1, sizeof(*spec.prompts));
    spec.prompt_len = calloc(1, sizeof(int));
    spec.prompts[0] = malloc((size_t)n * sizeof(int32_t));
    cr_assert(spec.prompts && spec.prompt_len && spec.prompts[0]);
    memcpy(spec.prompts[0], prompt, (size_t)n * sizeof(int32_t));
    spec.prompt_len[0] = n;
    spec.gen = *g; /* text (a tokenizer load) only where stop strings need it */
    spec.gen.prefill_chunk = chunk;
    spec.microbatches = 1;
    pl_be_device_t *dev;
    json_t *res = NULL;
    pl_gen_local_stats_t stats;
    cr_assert_eq(pl_be_device_open(pl_be_cpu(), 0, 1, &dev), PL_OK);
    cr_assert_eq(pl_gen_local_run(model, &spec, dev, counts, n_stages, &res, &stats), PL_OK, "%s",
                 pl_error_msg());
    pl_be_device_close(&dev);
    pl_job_spec_clear(&spec);
    json_t *one = json_incref(json_array_get(res, 0));
    json_decref(res);
    return one;
}

/* A finish as the results' JSON names it. */
static inline const char *tg_finish_name(pl_finish_t f)
{
    return f == PL_FINISH_EOS      ? "eos"
           : f == PL_FINISH_LENGTH ? "length"
           : f == PL_FINISH_STOP   ? "stop"
                                   : "none";
}

#endif
