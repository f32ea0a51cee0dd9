/* `pipectl generate`: one prompt on the live cluster, its text printed as the last stage
 * decodes it (STATUS carries the streamed text), then the rest from the final results. */
#include "tools/pipectl/pipectl.h"

#include "common/config.h"
#include "common/util.h"
#include "pipeline/gen.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_POLL_US (50 * 1000)

static volatile sig_atomic_t s_interrupted;

static void s_on_sigint(int sig)
{
    (void)sig;
    s_interrupted = 1;
}

static int s_fail(const char *fmt, const char *a)
{
    fprintf(stderr, "pipectl: generate: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 1;
}

int pl_pipectl_gen_opt(pl_pipectl_gen_opts_t *o, int opt, const char *arg)
{
    char *end;
    o->any = true;
    switch (opt) {
    case PL_PIPECTL_GEN_MAX_TOKENS:
        errno = 0;
        o->max_tokens = strtol(arg, &end, 10);
        if (!*arg || *end || errno)
            return s_fail("--max-tokens: '%s' is not a whole number", arg);
        o->has_max_tokens = true;
        return 0;
    case PL_PIPECTL_GEN_TEMPERATURE:
        errno = 0;
        o->temperature = strtod(arg, &end);
        if (!*arg || *end || errno)
            return s_fail("--temperature: '%s' is not a number", arg);
        o->has_temperature = true;
        return 0;
    case PL_PIPECTL_GEN_CHAT:
        o->chat = true;
        return 0;
    case PL_PIPECTL_GEN_STOP:
        if (o->n_stop == PL_JOB_MAX_STOP) {
            char n[16];
            snprintf(n, sizeof(n), "%d", PL_JOB_MAX_STOP);
            return s_fail("--stop: more than %s stop strings", n);
        }
        o->stop[o->n_stop++] = arg;
        return 0;
    default:
        return s_fail("%s", "unknown option");
    }
}

/* The job's settings through the job file's own schema (YAML reads this JSON as a flow
 * mapping), so the options are checked exactly as a job file's keys are. */
static int s_cfg(const char *model, int stages, const pl_pipectl_gen_opts_t *o, pl_cfg_job_t *cfg)
{
    /* --stages N is N stages: the optimal planner (auto may leave devices out) */
    json_t *j = json_pack("{s:s, s:s, s:s}", "model", model, "prompts", "-", "planner",
                          stages > 0 ? "optimal" : "auto"),
           *stop = json_array();
    int rc = 1;
    for (int i = 0; stop && i < o->n_stop; i++)
        if (json_array_append_new(stop, json_string(o->stop[i]))) {
            rc = s_fail("--stop: '%s' is not valid UTF-8", o->stop[i]);
            goto out;
        }
    if (!j || !stop ||
        (o->has_max_tokens &&
         json_object_set_new(j, "max_new_tokens", json_integer((json_int_t)o->max_tokens))) ||
        (o->has_temperature &&
         json_object_set_new(j, "sampling", json_pack("{s:f}", "temperature", o->temperature))) ||
        (o->n_stop && json_object_set(j, "stop", stop))) {
        rc = s_fail("%s", j ? "out of memory (or a value JSON cannot hold)"
                            : "the model path is not valid UTF-8");
        goto out;
    }
    char *text = json_dumps(j, JSON_PRESERVE_ORDER); /* one line, "key": value */
    if (!text) {
        rc = s_fail("%s", "out of memory");
        goto out;
    }
    if (pl_cfg_job_parse(text, strlen(text), "options", NULL, cfg))
        rc = s_fail("%s", pl_error_msg());
    else
        rc = 0;
    free(text);
out:
    json_decref(stop);
    json_decref(j);
    return rc;
}

/* The prompts JSONL of the one prompt: {"text": ...} or {"messages": [user message]}. */
static char *s_prompt_line(const char *prompt, bool chat)
{
    json_t *v = chat ? json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", prompt)
                     : json_pack("{s:s}", "text", prompt);
    char *line = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    return line;
}

static pl_status_t s_spec(const char *model, const char *prompt, int stages,
                          const pl_pipectl_gen_opts_t *o, pl_msg_t *m)
{
    static pl_cfg_job_t cfg;
    if (!*prompt)
        return s_fail("%s", "the prompt is empty");
    if (s_cfg(model, stages, o, &cfg))
        return 1;
    char *line = s_prompt_line(prompt, o->chat);
    if (!line)
        return s_fail("%s", "the prompt is not valid UTF-8");
    pl_msg_init(m, PL_MSG_SUBMIT);
    int rc = pl_gen_spec_from_prompts(&cfg, line, strlen(line), "prompt", &m->submit) != PL_OK;
    free(line);
    if (rc)
        return s_fail("%s", pl_error_msg());
    if (!m->submit.text) /* cannot happen for a text line; the stream needs text */
        return s_fail("%s", "the job has no text");
    if (stages >= 0)
        m->submit.stages = stages;
    return 0;
}

static int s_job_call(pl_pipectl_t *c, pl_msg_type_t type, uint32_t job, json_t **reply_p)
{
    pl_msg_t q;
    pl_msg_init(&q, type);
    q.job_ref.job = job;
    return pl_pipectl_call(c, &q, reply_p);
}

/* The final text: what was not yet printed of the result's completion. */
static int s_finish(pl_pipectl_t *c, uint32_t job, size_t printed)
{
    json_t *r;
    pl_msg_results_reply_t res = {0};
    if (s_job_call(c, PL_MSG_RESULTS, job, &r))
        return 1;
    pl_status_t st = pl_msg_results_reply_decode(r, &res);
    json_decref(r);
    if (st) {
        pl_msg_results_reply_clear(&res);
        return s_fail("bad results from the coordinator: %s", pl_error_msg());
    }
    int rc = 0;
    const char *text = res.n_results == 1 ? res.results[0].text : NULL;
    size_t len = text ? strlen(text) : 0;
    if (!text)
        rc = s_fail("%s", "the results carry no text");
    else if (len < printed)
        rc = s_fail("%s", "the results' text is shorter than what was streamed");
    else
        fwrite(text + printed, 1, len - printed, stdout);
    if (!rc && isatty(STDOUT_FILENO) && (len == 0 || text[len - 1] != '\n'))
        putchar('\n');
    fflush(stdout);
    const json_t *t = res.throughput;
    if (!rc && json_is_object(t))
        fprintf(stderr, "pipectl: job %u done: %d tokens in %.3f s, %.1f tok/s\n", job,
                (int)json_number_value(json_object_get(t, "generated_tokens")),
                json_number_value(json_object_get(t, "wall_s")),
                json_number_value(json_object_get(t, "tok_s")));
    pl_msg_results_reply_clear(&res);
    return rc;
}

int pl_pipectl_generate(pl_pipectl_t *c, const char *model, const char *prompt, int stages,
                        const pl_pipectl_gen_opts_t *o)
{
    pl_msg_t *m = malloc(sizeof(*m));
    pl_msg_job_state_t js;
    json_t *r;
    if (!m)
        return s_fail("%s", "out of memory");
    int rc = s_spec(model, prompt, stages, o, m) ? 1 : pl_pipectl_call(c, m, &r);
    pl_msg_clear(m);
    free(m);
    if (rc)
        return rc;
    if (pl_msg_job_state_decode(r, &js)) {
        json_decref(r);
        return s_fail("bad answer to SUBMIT: %s", pl_error_msg());
    }
    json_decref(r);
    fprintf(stderr, "pipectl: job %u submitted\n", js.job);
    /* Ctrl-C cancels the job rather than leaving it to run unwatched */
    struct sigaction sa = {.sa_handler = s_on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    size_t printed = 0;
    for (;;) {
        int failed = s_job_call(c, PL_MSG_STATUS, js.job, &r);
        if (s_interrupted) {
            if (!failed)
                json_decref(r);
            fflush(stdout);
            s_interrupted = 0;
            if (!s_job_call(c, PL_MSG_KILL, js.job, &r))
                json_decref(r);
            fprintf(stderr, "%spipectl: job %u canceled (interrupted)\n", printed ? "\n" : "",
                    js.job);
            return 1;
        }
        if (failed)
            return 1;
        const char *state = json_string_value(json_object_get(r, "state"));
        const json_t *text = json_object_get(json_object_get(r, "progress"), "text");
        size_t len = json_string_length(text);
        if (state && !strcmp(state, "running") && len > printed) {
            fwrite(json_string_value(text) + printed, 1, len - printed, stdout);
            fflush(stdout);
            printed = len;
        }
        if (state && !strcmp(state, "done")) {
            json_decref(r);
            return s_finish(c, js.job, printed);
        }
        if (!state || !strcmp(state, "failed") || !strcmp(state, "canceled")) {
            const char *note = json_string_value(json_object_get(r, "note"));
            fflush(stdout);
            fprintf(stderr, "%spipectl: job %u %s%s%s\n", printed ? "\n" : "", js.job,
                    state ? state : "in an unknown state", note && *note ? ": " : "",
                    note ? note : "");
            json_decref(r);
            return 1;
        }
        json_decref(r);
        usleep(S_POLL_US);
    }
}

int pl_pipectl_generate_verb(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    return pl_pipectl_generate(c, args[0], args[1], c->stages, &c->gen);
}
