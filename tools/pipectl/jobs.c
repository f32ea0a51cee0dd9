/* The job list and a job's story: `jobs` (every job the user may see), `describe job ID` (its
 * state, plan, progress per stage and events) and `logs ID` (its events with their times). */
#include "tools/pipectl/pipectl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

static bool s_terminal(const char *state)
{
    return !strcmp(state, "done") || !strcmp(state, "failed") || !strcmp(state, "canceled");
}

static int s_render_jobs(pl_pipectl_t *c, char **args, int n_args, FILE *f, bool *final_p)
{
    (void)args;
    (void)n_args;
    json_t *r, *j;
    pl_msg_t q;
    size_t i;
    int rc;
    pl_msg_init(&q, PL_MSG_JOBS);
    if ((rc = pl_pipectl_call(c, &q, &r)))
        return rc;
    *final_p = true; /* --watch ends once every job has ended */
    json_array_foreach(json_object_get(r, "jobs"), i, j)
    {
        if (!s_terminal(S_STR(j, "state")))
            *final_p = false;
    }
    if (pl_pipectl_print_answer(c, f, r))
        return 0;
    bool wide = c->out == PL_PIPECTL_OUT_WIDE;
    fprintf(f, "%-6s %-9s %5s %13s %7s %9s  %s", "JOB", "STATE", "SEQS", "TOKENS", "STAGES",
            "ELAPSED", "MODEL");
    fprintf(f, wide ? "  %-10s %s\n" : "\n", "OWNER", "NODES / NOTE");
    json_array_foreach(json_object_get(r, "jobs"), i, j)
    {
        char tok[32];
        snprintf(tok, sizeof(tok), "%d/%d", (int)S_NUM(j, "generated"), (int)S_NUM(j, "at_most"));
        fprintf(f, "%-6d %-9s %5d %13s %7d %8.1fs  %s", (int)S_NUM(j, "job"), S_STR(j, "state"),
                (int)S_NUM(j, "sequences"), tok, (int)S_NUM(j, "stages"), S_NUM(j, "elapsed_s"),
                S_STR(j, "model"));
        if (wide) {
            char nodes[256] = "";
            size_t k, m = 0;
            json_t *n;
            json_array_foreach(json_object_get(j, "nodes"), k, n)
            {
                if (m < sizeof(nodes))
                    m += (size_t)snprintf(nodes + m, sizeof(nodes) - m, "%s%s", k ? "," : "",
                                          json_string_value(n));
            }
            const char *owner = S_STR(j, "owner");
            fprintf(f, "  %-10s %s%s%s", *owner ? owner : "-", m ? nodes : "-",
                    *S_STR(j, "note") ? "  " : "", S_STR(j, "note"));
        }
        fputc('\n', f);
    }
    json_decref(r);
    return 0;
}

int pl_pipectl_jobs(pl_pipectl_t *c, char **args, int n_args)
{
    return pl_pipectl_watch(c, s_render_jobs, args, n_args);
}

static void s_events(FILE *f, const json_t *r)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r, "events"), i, e)
    {
        double at = S_NUM(e, "at");
        time_t t = (time_t)at;
        struct tm tm;
        char when[32] = "-";
        if (gmtime_r(&t, &tm))
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(f, "%s.%03dZ  %-10s %s\n", when, (int)((at - (double)t) * 1000), S_STR(e, "what"),
                S_STR(e, "detail"));
    }
}

static int s_status(pl_pipectl_t *c, const char *arg, json_t **r_p)
{
    int64_t id = pl_pipectl_job_arg(arg);
    return id < 0 ? PL_PIPECTL_EXIT_USAGE : pl_pipectl_call_job(c, PL_MSG_STATUS, id, r_p);
}

int pl_pipectl_logs(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    json_t *r;
    int rc = s_status(c, args[0], &r);
    if (rc)
        return rc;
    if (c->json) {
        json_t *o = json_pack("{s:O, s:O}", "job", json_object_get(r, "job"), "events",
                              json_object_get(r, "events"));
        pl_pipectl_print(c, o);
        json_decref(o);
    } else {
        s_events(stdout, r);
    }
    json_decref(r);
    return 0;
}

int pl_pipectl_describe_job(pl_pipectl_t *c, const char *arg)
{
    json_t *r, *s;
    size_t i;
    int rc = s_status(c, arg, &r);
    if (rc)
        return rc;
    if (c->json) {
        pl_pipectl_print(c, r);
        json_decref(r);
        return 0;
    }
    const json_t *pg = json_object_get(r, "progress");
    printf("job:        %d\nstate:      %s\nmodel:      %s\n", (int)S_NUM(r, "job"),
           S_STR(r, "state"), S_STR(r, "model"));
    if (*S_STR(r, "note") && strcmp(S_STR(r, "note"), "-"))
        printf("note:       %s\n", S_STR(r, "note"));
    printf("progress:   %d/%d sequences, %d of at most %d tokens, %.1f tok/s, %.2f s elapsed\n",
           (int)S_NUM(pg, "sequences_done"), (int)S_NUM(pg, "sequences"),
           (int)S_NUM(pg, "generated"), (int)S_NUM(pg, "at_most"), S_NUM(pg, "tok_s"),
           S_NUM(r, "elapsed_s"));
    json_array_foreach(json_object_get(r, "stages"), i, s)
        printf("stage %-4zu  %-12s %-7s busy %5.1f%% (%.2f s)\n", i, S_STR(s, "node"),
               json_is_true(json_object_get(s, "done"))    ? "done"
               : json_is_true(json_object_get(s, "ready")) ? "ready"
                                                           : "loading",
               S_NUM(s, "busy_pct"), S_NUM(s, "busy_s"));
    pl_pipectl_print_plan(json_object_get(r, "plan"));
    pl_pipectl_print_throughput(stdout, json_object_get(r, "throughput"));
    printf("events:\n");
    s_events(stdout, r);
    json_decref(r);
    return 0;
}

int pl_pipectl_describe(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    if (!strcmp(args[0], "job"))
        return pl_pipectl_describe_job(c, args[1]);
    if (!strcmp(args[0], "node"))
        return pl_pipectl_describe_node(c, args[1]);
    fprintf(stderr, "pipectl: describe takes job ID or node NAME, not '%s'\n", args[0]);
    return PL_PIPECTL_EXIT_USAGE;
}
