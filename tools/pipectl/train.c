/* `pipectl train TRAIN.yaml`: a training job file submitted as a job (its spec's training part),
 * followed with --wait by its progress line (step/total, loss, tokens/s, ETA); and the training
 * part of `pipectl status` (step, loss, tokens/s, schedule, each stage's measured bubble). */
#include "tools/pipectl/pipectl.h"

#include "common/config_train.h"
#include "common/util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

/* A relative path (a job file named by a relative path) from the current directory: the
 * coordinator takes absolute ones only. Non-zero when it does not fit. */
static int s_absolute(char *p, size_t size)
{
    char cwd[PATH_MAX], joined[PATH_MAX];
    if (!p[0] || p[0] == '/')
        return 0;
    if (!getcwd(cwd, sizeof(cwd)))
        return 1;
    int n = snprintf(joined, sizeof(joined), "%s/%s", cwd, p);
    if (n < 0 || (size_t)n >= size)
        return 1;
    memcpy(p, joined, (size_t)n + 1);
    return 0;
}

/* The SUBMIT of a training job file: the file's value as the spec's training part, its model,
 * stages (--stages overriding) and placement as the spec's own. 1 after a one-line error. */
static int s_train_msg(const char *path, int stages, pl_msg_t *m)
{
    pl_job_train_t *t = calloc(1, sizeof(*t));
    pl_msg_init(m, PL_MSG_SUBMIT);
    if (!t)
        return pl_pipectl_die("%s", "out of memory");
    if (pl_cfg_train_load(path, &t->cfg)) {
        free(t);
        return pl_pipectl_die("%s", pl_error_msg());
    }
    char *paths[] = {t->cfg.model, t->cfg.data_tokens, t->cfg.data_text, t->cfg.checkpoint_dir,
                     t->cfg.resume_from};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (s_absolute(paths[i], sizeof(t->cfg.model))) {
            free(t);
            return pl_pipectl_die("%s: path too long once made absolute", paths[i]);
        }
    if (stages >= 0)
        t->cfg.stages = stages;
    t->kind = -1;
    pl_job_spec_t *s = &m->submit;
    snprintf(s->model, sizeof(s->model), "%s", t->cfg.model);
    s->stages = t->cfg.stages;
    s->n_nodes = t->cfg.n_nodes;
    memcpy(s->nodes, t->cfg.nodes, sizeof(s->nodes));
    s->train = t;
    return 0;
}

/* "step 3/8, loss 2.451200, 1234.5 tok/s, ETA 4 s" from a STATUS reply's training part. */
static void s_line(const json_t *tr, char *b, size_t n)
{
    double tps = S_NUM(tr, "tok_s"), eta = S_NUM(tr, "eta_s");
    size_t k = (size_t)snprintf(b, n, "step %d/%d, loss %.6f, %.1f tok/s", (int)S_NUM(tr, "step"),
                                (int)S_NUM(tr, "steps"), S_NUM(tr, "loss"), tps);
    if (k < n && eta > 0)
        snprintf(b + k, n - k, ", ETA %.0f s", eta);
}

/* A training job's progress line, news once this run has made a step. */
static bool s_follow_line(const json_t *r, char *b, size_t n)
{
    const json_t *tr = json_object_get(r, "train");
    s_line(tr, b, n);
    return json_is_object(tr) && S_NUM(tr, "step") > S_NUM(tr, "first_step");
}

/* A done training job: its training status (-o json), else its steps, final loss, checkpoint. */
static int s_follow_done(pl_pipectl_t *c, int64_t id, const json_t *r)
{
    const json_t *tr = json_object_get(r, "train");
    const char *ckpt = S_STR(tr, "checkpoint");
    if (c->json)
        pl_pipectl_print(c, tr);
    else
        printf("job %lld: %d steps, final loss %.6f%s%s\n", (long long)id, (int)S_NUM(tr, "step"),
               S_NUM(tr, "loss"), *ckpt && strcmp(ckpt, "-") ? ", checkpoint " : "",
               strcmp(ckpt, "-") ? ckpt : "");
    return 0;
}

int pl_pipectl_train(pl_pipectl_t *c, char **args, int n_args)
{
    (void)n_args;
    pl_msg_t *m = malloc(sizeof(*m));
    uint32_t job = 0;
    int rc = !m                                  ? PL_PIPECTL_EXIT_FAILED
             : s_train_msg(args[0], c->stages, m) ? PL_PIPECTL_EXIT_FAILED
                                                  : pl_pipectl_submit_send(c, m, NULL, &job);
    if (m)
        pl_msg_clear(m);
    free(m);
    if (rc)
        return rc;
    static const pl_pipectl_follow_t how = {s_follow_line, NULL, s_follow_done};
    return c->wait ? pl_pipectl_follow_with(c, job, &how) : 0;
}

void pl_pipectl_train_status(const json_t *r)
{
    const json_t *tr = json_object_get(r, "train"), *plan = json_object_get(r, "plan");
    char line[256];
    s_line(tr, line, sizeof(line));
    printf("training: %s\n", line);
    printf("schedule: %s, split %s", S_STR(tr, "schedule"),
           json_is_array(json_object_get(tr, "split")) ? "" : "-");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(tr, "split"), i, v)
    {
        printf("%s%lld", i ? "+" : "", (long long)json_integer_value(v));
    }
    printf(" layers");
    if (json_is_object(plan))
        printf(", predicted %.3g s a step, bubble %.3f", S_NUM(plan, "predicted_step_s"),
               S_NUM(plan, "predicted_bubble"));
    printf("\n");
    if (strcmp(S_STR(tr, "checkpoint"), "-") && *S_STR(tr, "checkpoint"))
        printf("checkpoint: %s (step %d)\n", S_STR(tr, "checkpoint"),
               (int)S_NUM(tr, "checkpoint_step"));
    if (strcmp(S_STR(tr, "resumed"), "-") && *S_STR(tr, "resumed")) /* after a lost node */
        printf("resumed %s\n", S_STR(tr, "resumed"));
    printf("%-5s %-12s %-10s %-9s %-10s %-10s %-10s %s\n", "stage", "node", "layers", "steps",
           "busy", "wait", "bubble", "peak stash");
    json_t *ps = json_object_get(plan, "stages");
    json_array_foreach(json_object_get(tr, "stages"), i, v)
    {
        const json_t *p = json_array_get(ps, i);
        char busy[24], wait[24], stash[24], layers[24];
        snprintf(layers, sizeof(layers), "%d-%d", (int)S_NUM(p, "first_layer"),
                 (int)S_NUM(p, "last_layer"));
        if (S_NUM(tr, "replicas") > 1) /* data parallel: which replica's stage */
            snprintf(layers + strlen(layers), sizeof(layers) - strlen(layers), " r%d",
                     (int)S_NUM(p, "replica"));
        printf("%-5zu %-12.12s %-10s %-9d %-10s %-10s %-10.3f %s\n", i, S_STR(p, "node"), layers,
               (int)S_NUM(v, "step"), pl_pipectl_dur(S_NUM(v, "busy_s"), busy, 24),
               pl_pipectl_dur(S_NUM(v, "wait_s"), wait, 24), S_NUM(v, "bubble"),
               pl_pipectl_bytes(S_NUM(v, "peak_stash_bytes"), stash, sizeof(stash)));
    }
    printf("(bubble: the share of the stage's step time not in F, B or W, measured; the plan's "
           "prediction is above)\n");
}
