/* Jobs for the integration tests: the test model and prompts, pipeline job files, submitting
 * one and its single-process reference, a job's status as JSON, the training suites' model,
 * corpus and job files. */
#ifndef PL_TESTS_JOB_UTIL_H
#define PL_TESTS_JOB_UTIL_H

#include "cluster_util.h"

#include <jansson.h>

/* Make a small random Llama model in dir/name with extra pl-mkmodel arguments. */
static inline int tc_make_model(const char *dir, const char *name, const char *args)
{
    return tc_sh(NULL, "%s/pl-mkmodel --out %s/%s %s >/dev/null", tc_bin(), dir, name, args);
}

/* The integration suites' usual prompts: five of mixed lengths. */
#define TC_PROMPTS                                                                                 \
    "[1, 15, 27, 99]\n"                                                                            \
    "[1, 7]\n"                                                                                     \
    "[1, 100, 101, 102, 103, 104, 105, 106, 107]\n"                                                \
    "[1, 42, 42]\n"                                                                                \
    "[3, 200, 5, 17, 9]\n"

/* TC_PROMPTS into c->dir/prompts.jsonl. */
static inline void tc_write_prompts(const tc_cluster_t *c)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", c->dir);
    tc_write(path, TC_PROMPTS);
}

/* TC_PROMPTS and the integration suites' model c->dir/m: 6 layers, hidden 128, vocab 256, 4096
 * positions, seed 7. */
static inline void tc_prompts_and_model(const tc_cluster_t *c)
{
    tc_write_prompts(c);
    cr_assert_eq(tc_make_model(c->dir, "m",
                               "--layers 6 --hidden 128 --intermediate 344 --heads 4 "
                               "--kv-heads 2 --vocab 256 --seed 7 --max-pos 4096"),
                 0);
}

/* The pipeline job files of these tests: dir/NAME.yaml for model dir/MODEL with extra YAML lines.
 * They are about the pipeline, so every node stays in it (the default plan may pick one device
 * for a model this small). */
static inline void tc_job(const tc_cluster_t *c, const char *name, const char *model,
                          const char *extra)
{
    char path[512], text[2048];
    snprintf(path, sizeof(path), "%s/%s.yaml", c->dir, name);
    snprintf(text, sizeof(text), "model: %s\nprompts: prompts.jsonl\nplanner: optimal\n%s", model,
             extra);
    tc_write(path, text);
}

/* Reference tokens from one process, one stage, all sequences in one microbatch. */
static inline char *tc_reference(const tc_cluster_t *c, const char *job)
{
    char *out;
    int rc = tc_sh(&out, "%s/pl-generate --microbatches 1 %s/%s.yaml 2>/dev/null", tc_bin(),
                   c->dir, job);
    cr_assert_eq(rc, 0, "pl-generate failed");
    cr_assert(strstr(out, "\"tokens\""), "reference has no tokens: %s", out);
    return out;
}

/* JSONL text (pl-generate's results, a line each) as one array; a line that is not JSON fails. */
static inline json_t *tc_jsonl_array(const char *text)
{
    json_t *arr = json_array();
    for (const char *l = text; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        if (n) {
            json_t *v = json_loadb(l, n, 0, NULL);
            cr_assert_not_null(v, "not a result line: %.*s", (int)n, l);
            json_array_append_new(arr, v);
        }
        l = nl ? nl + 1 : NULL;
    }
    return arr;
}

/* Submit dir/JOB.yaml and wait: the results on stdout, pipectl's stderr kept in dir/JOB.err. */
static inline char *tc_submit(const tc_cluster_t *c, const char *job, int *rc_p)
{
    char *out;
    *rc_p = tc_sh(&out, "%s/pipectl -c %s --timeout 5 submit %s/%s.yaml --wait 2>%s/%s.err",
                  tc_bin(), c->ep, c->dir, job, c->dir, job);
    return out;
}

static inline char *tc_err(const tc_cluster_t *c, const char *job)
{
    char *out;
    tc_sh(&out, "cat %s/%s.err", c->dir, job);
    return out;
}

/* Submit dir/JOB.yaml and wait: pipectl succeeds and its results are the single-process
 * reference's (tc_reference). */
static inline void tc_expect_reference(const tc_cluster_t *c, const char *job)
{
    int rc;
    char *ref = tc_reference(c, job), *got = tc_submit(c, job, &rc), *err = tc_err(c, job);
    cr_assert_eq(rc, 0, "%s: %s", job, err);
    cr_assert_str_eq(got, ref, "%s", job);
    free(ref);
    free(got);
    free(err);
}

/* `pipectl -o json status ID` (NULL when there is no answer, as while the coordinator starts). */
static inline json_t *tc_status_json(const tc_cluster_t *c, int id)
{
    char *out;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 2 -o json status %d 2>/dev/null", tc_bin(),
                   c->ep, id);
    json_error_t e;
    json_t *v = rc == 0 ? json_loads(out, 0, &e) : NULL;
    free(out);
    return v;
}

/* A status's "state" ("" when it has none). */
static inline const char *tc_status_state(const json_t *st)
{
    const char *s = json_string_value(json_object_get(st, "state"));
    return s ? s : "";
}

/* The training suites' model and corpus: c->dir/PREFIXtiny, the tiny model (3 layers, hidden 32,
 * vocab 64, seed 3), and c->dir/PREFIXcorpus.tok, a repetitive corpus of token ids. */
static inline void tc_train_data(const tc_cluster_t *c, const char *prefix)
{
    char path[600], text[8192];
    snprintf(path, sizeof(path), "%stiny", prefix);
    cr_assert_eq(tc_make_model(c->dir, path,
                               "--layers 3 --hidden 32 --intermediate 64 "
                               "--heads 4 --kv-heads 2 --vocab 64 --seed 3"),
                 0);
    size_t n = 0;
    for (int i = 0; i < 700; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%d ", (i * 7 + 3) % 61);
    snprintf(path, sizeof(path), "%s/%scorpus.tok", c->dir, prefix);
    tc_write(path, text);
}

/* The training suites' cluster: n daemons of one thread each and tc_train_data in c->dir. */
static inline void tc_train_start(tc_cluster_t *c, int n_nodes)
{
    cr_assert_eq(tc_cluster_start(c, n_nodes, NULL), 0, "nodes did not register");
    tc_train_data(c, "");
}

/* dir/NAME.yaml: a training job of the tiny model on the corpus, 2 stages, `steps` steps of
 * `batch` sequences of seq_len tokens, `extra` lines after. */
static inline void tc_train_file(const tc_cluster_t *c, const char *name, int seq_len, int batch,
                                 int steps, const char *extra)
{
    char path[600], text[2048];
    snprintf(path, sizeof(path), "%s/%s.yaml", c->dir, name);
    snprintf(text, sizeof(text),
             "model: tiny\ndata:\n  tokens: corpus.tok\nseq_len: %d\nglobal_batch: %d\n"
             "steps: %d\noptimizer:\n  lr: 1.0e-2\n  warmup_steps: 1\n  clip_norm: 0.5\n"
             "stages: 2\n%s",
             seq_len, batch, steps, extra);
    tc_write(path, text);
}

#endif
