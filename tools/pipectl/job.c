/* The job verbs: `submit` (with --wait: follow the job, then its results), `results` and
 * `cancel`. */
#include "tools/pipectl/pipectl.h"

#include "common/config.h"
#include "common/util.h"
#include "pipeline/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

int pl_pipectl_results_of(pl_pipectl_t *c, int64_t id)
{
    json_t *r, *arr = NULL, *e;
    pl_msg_results_reply_t res = {0};
    size_t i;
    int rc;
    if ((rc = pl_pipectl_call_job(c, PL_MSG_RESULTS, id, &r)))
        return rc;
    if (c->json) {
        pl_pipectl_print(c, r);
        json_decref(r);
        return 0;
    }
    pl_status_t st = pl_msg_results_reply_decode(r, &res);
    json_decref(r);
    if (st || (st = pl_msg_results_encode(res.results, res.n_results, &arr))) {
        pl_msg_results_reply_clear(&res);
        return pl_pipectl_die("bad results from the coordinator: %s", pl_error_msg());
    }
    json_array_foreach(arr, i, e)
    {
        const pl_msg_result_t *q = &res.results[i];
        if (q->text) { /* a text job: the completions, each under a line naming it */
            if (res.n_results > 1)
                printf("%s### seq %d (%s)\n", i ? "\n" : "", q->seq,
                       json_string_value(json_object_get(e, "finish")));
            fputs(q->text, stdout);
            if (!*q->text || q->text[strlen(q->text) - 1] != '\n')
                putchar('\n');
            continue;
        }
        char *line = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER); /* JSONL in prompt order */
        puts(line ? line : "{}");
        free(line);
    }
    pl_pipectl_print_throughput(stderr, res.throughput);
    json_decref(arr);
    pl_msg_results_reply_clear(&res);
    return 0;
}

int pl_pipectl_results(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    int64_t id = pl_pipectl_job_arg(args[0]);
    return id < 0 ? PL_PIPECTL_EXIT_USAGE : pl_pipectl_results_of(c, id);
}

/* The SUBMIT / PLAN request of a job file: its typed spec, --stages overriding the file's. */
int pl_pipectl_job_msg(const char *path, int stages, pl_msg_type_t type, pl_msg_t *m)
{
    static pl_cfg_job_t job;
    pl_msg_init(m, type);
    if (pl_cfg_job_load(path, &job) || pl_gen_spec_from_file(&job, &m->submit))
        return pl_pipectl_die("%s", pl_error_msg());
    if (stages >= 0)
        m->submit.stages = stages;
    return 0;
}

int pl_pipectl_submit_send(pl_pipectl_t *c, pl_msg_t *m, const char *what, uint32_t *job_p)
{
    json_t *r;
    pl_msg_job_state_t js;
    int rc = pl_pipectl_call(c, m, &r);
    if (rc)
        return rc;
    if (pl_msg_job_state_decode(r, &js)) {
        json_decref(r);
        return pl_pipectl_die("bad answer to SUBMIT: %s", pl_error_msg());
    }
    if (c->json && !c->wait)
        pl_pipectl_print(c, r);
    else if (what)
        fprintf(c->wait ? stderr : stdout, "%s submitted (job %u)\n", what, js.job);
    else
        fprintf(c->wait ? stderr : stdout, "job %u submitted\n", js.job);
    json_decref(r);
    *job_p = js.job;
    return 0;
}

int pl_pipectl_submit(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    pl_msg_t *m = malloc(sizeof(*m));
    uint32_t job = 0;
    int rc = !m ? PL_PIPECTL_EXIT_FAILED
             : pl_pipectl_job_msg(args[0], c->stages, PL_MSG_SUBMIT, m)
                 ? PL_PIPECTL_EXIT_FAILED
                 : pl_pipectl_submit_send(c, m, NULL, &job);
    if (m)
        pl_msg_clear(m);
    free(m);
    if (rc)
        return rc;
    return c->wait ? pl_pipectl_follow(c, job, true) : 0;
}

int pl_pipectl_cancel(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    json_t *r;
    pl_msg_job_state_t js;
    int64_t id = pl_pipectl_job_arg(args[0]);
    int rc;
    if (id < 0)
        return PL_PIPECTL_EXIT_USAGE;
    if ((rc = pl_pipectl_call_job(c, PL_MSG_KILL, id, &r)))
        return rc;
    if (pl_msg_job_state_decode(r, &js))
        rc = pl_pipectl_die("bad answer to KILL: %s", pl_error_msg());
    else if (c->json)
        pl_pipectl_print(c, r);
    else
        printf("job %u %s\n", js.job, js.state);
    json_decref(r);
    return rc;
}
