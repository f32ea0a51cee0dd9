/* The serving verbs: `serve DEPLOY.yaml` (a deployment: a job whose stages stay loaded for
 * requests; --wait until it is ready), `deployments` (their plans, load and throughput) and
 * `undeploy NAME` (the cancel of its job). */
#include "tools/pipectl/pipectl.h"

#include "common/config.h"
#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

/* The DEPLOYMENTS answer (0), or an exit status. */
static int s_list(pl_pipectl_t *c, json_t **r_p)
{
    pl_msg_t q;
    pl_msg_init(&q, PL_MSG_DEPLOYMENTS);
    return pl_pipectl_call(c, &q, r_p);
}

/* The entry of deployment `name` in a DEPLOYMENTS answer (borrowed), the live one before a
 * failed one of the same name; NULL when none. */
static json_t *s_named(json_t *r, const char *name)
{
    size_t i;
    json_t *d, *failed = NULL;
    json_array_foreach(json_object_get(r, "deployments"), i, d)
    {
        if (strcmp(S_STR(d, "name"), name))
            continue;
        if (strcmp(S_STR(d, "state"), "failed"))
            return d;
        failed = d;
    }
    return failed;
}

/* Stages as "node0[0-1] node1[2-3]": where each stage runs and its layers. */
static void s_plan_text(const json_t *d, char *b, size_t n)
{
    size_t i, k = 0;
    json_t *s;
    b[0] = '\0';
    json_array_foreach(json_object_get(d, "stages"), i, s)
    {
        if (k < n)
            k += (size_t)snprintf(b + k, n - k, "%s%s[%d-%d]", i ? " " : "", S_STR(s, "node"),
                                  (int)S_NUM(s, "first"), (int)S_NUM(s, "last"));
    }
    if (!b[0])
        snprintf(b, n, "-");
}

/* Follow deployment `name` until it is ready (0) or failed / gone (1): a line per change. */
static int s_wait_ready(pl_pipectl_t *c, const char *name, unsigned job)
{
    char last[256] = "";
    for (;;) {
        json_t *r, *d;
        int rc = s_list(c, &r);
        if (rc)
            return rc;
        d = s_named(r, name);
        if (!d || (unsigned)S_NUM(d, "job") != job) {
            json_decref(r);
            fprintf(stderr, "pipectl: deployment %s (job %u) ended before it was ready "
                            "(pipectl logs %u)\n", name, job, job);
            return PL_PIPECTL_EXIT_FAILED;
        }
        const char *state = S_STR(d, "state");
        int ready = 0, n = 0;
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(d, "stages"), i, s)
        {
            ready += json_is_true(json_object_get(s, "ready"));
            n++;
        }
        char line[256];
        snprintf(line, sizeof(line), "deployment %s: %s, %d/%d stage(s) loaded%s%s", name, state,
                 ready, n, *S_STR(d, "note") ? " - " : "", S_STR(d, "note"));
        if (strcmp(line, last)) {
            fprintf(stderr, "%s\n", line);
            snprintf(last, sizeof(last), "%s", line);
        }
        int done = !strcmp(state, "ready") ? 0 : !strcmp(state, "failed") ? 1 : -1;
        if (done == 0 && c->json)
            pl_pipectl_print(c, d);
        else if (done == 0)
            printf("deployment %s ready: %d KV slot(s), context %d\n", name,
                   (int)S_NUM(d, "kv_slots"), (int)S_NUM(d, "context"));
        json_decref(r);
        if (done >= 0)
            return done ? PL_PIPECTL_EXIT_FAILED : PL_PIPECTL_EXIT_OK;
        usleep(250 * 1000);
    }
}

int pl_pipectl_serve(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    static pl_cfg_deploy_t file;
    pl_msg_t *m = malloc(sizeof(*m));
    char what[PL_CFG_NAME_MAX + 16];
    uint32_t job = 0;
    if (!m)
        return pl_pipectl_die("%s", "out of memory");
    pl_msg_init(m, PL_MSG_SUBMIT);
    if (pl_cfg_deploy_load(args[0], &file) || pl_job_spec_from_deploy(&file, &m->submit)) {
        free(m);
        return pl_pipectl_die("%s", pl_error_msg());
    }
    snprintf(what, sizeof(what), "deployment %s", file.name);
    int rc = pl_pipectl_submit_send(c, m, what, &job);
    pl_msg_clear(m);
    free(m);
    if (rc)
        return rc;
    return c->wait ? s_wait_ready(c, file.name, job) : 0;
}

static int s_render(pl_pipectl_t *c, char **args, int n_args, FILE *f, bool *final_p)
{
    (void)args;
    (void)n_args;
    json_t *r, *d;
    size_t i;
    int rc = s_list(c, &r);
    if (rc)
        return rc;
    *final_p = false; /* deployments run until undeployed: --watch ends with Ctrl-C */
    if (pl_pipectl_print_answer(c, f, r))
        return 0;
    bool wide = c->out == PL_PIPECTL_OUT_WIDE;
    fprintf(f, "%-16s %-9s %-9s %7s %6s %6s %9s %9s  %s", "NAME", "STATE", "JOB", "KV", "LIVE",
            "QUEUED", "COMPLETED", "TOK/S", "PLAN");
    fprintf(f, wide ? "  %8s %7s %8s  %s\n" : "\n", "CONTEXT", "LANES", "RESUMES", "MODEL / NOTE");
    json_array_foreach(json_object_get(r, "deployments"), i, d)
    {
        char plan[512], kv[32];
        s_plan_text(d, plan, sizeof(plan));
        snprintf(kv, sizeof(kv), "%d", (int)S_NUM(d, "kv_slots"));
        fprintf(f, "%-16s %-9s %-9d %7s %6d %6d %9lld %9.1f  %s", S_STR(d, "name"),
                S_STR(d, "state"), (int)S_NUM(d, "job"), kv, (int)S_NUM(d, "live"),
                (int)S_NUM(d, "queued"), (long long)S_NUM(d, "completed"), S_NUM(d, "tok_s"),
                plan);
        if (wide)
            fprintf(f, "  %8d %7d %8d  %s%s%s", (int)S_NUM(d, "context"),
                    (int)S_NUM(d, "microbatches"), (int)S_NUM(d, "resumes"), S_STR(d, "model"),
                    *S_STR(d, "note") ? "  " : "", S_STR(d, "note"));
        fputc('\n', f);
    }
    json_decref(r);
    return 0;
}

int pl_pipectl_deployments(pl_pipectl_t *c, char **args, int n_args)
{
    return pl_pipectl_watch(c, s_render, args, n_args);
}

int pl_pipectl_undeploy(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    json_t *r, *k;
    pl_msg_job_state_t js;
    int rc = s_list(c, &r);
    if (rc)
        return rc;
    json_t *d = s_named(r, args[0]);
    if (!d || !strcmp(S_STR(d, "state"), "failed")) {
        json_decref(r);
        fprintf(stderr, "pipectl: no deployment named '%s' is deployed\n", args[0]);
        return PL_PIPECTL_EXIT_FAILED;
    }
    int64_t job = (int64_t)S_NUM(d, "job");
    json_decref(r);
    if ((rc = pl_pipectl_call_job(c, PL_MSG_KILL, job, &k)))
        return rc;
    if (pl_msg_job_state_decode(k, &js))
        rc = pl_pipectl_die("bad answer to KILL: %s", pl_error_msg());
    else if (c->json)
        pl_pipectl_print(c, k);
    else
        printf("deployment %s undeployed (job %u %s)\n", args[0], js.job, js.state);
    json_decref(k);
    return rc;
}
