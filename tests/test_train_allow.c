/* Integration: a training job's checkpoint_dir under models.allow. On a local cluster whose
 * cluster file allows DIR/models only, `pipectl train` with a checkpoint_dir outside it (plainly,
 * through "..", through a link, or through a name not made yet followed by "..") is refused at
 * submit naming the key; one inside runs; and when the directory is swapped for a link out after
 * the submit, the daemons check again before they write: the job fails naming checkpoint_dir and
 * nothing is written outside. */
#include "job_util.h"

#include <jansson.h>

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

/* A coordinator allowing DIR/models, n daemons, the training suites' model and corpus in
 * DIR/models, and DIR/outside beside them. */
static void s_start(int n)
{
    char extra[512];
    tc_cluster_init(&s_c);
    tc_sh(NULL, "mkdir -p %s/models %s/outside && ln -s %s/outside %s/models/link", s_c.dir,
          s_c.dir, s_c.dir, s_c.dir);
    snprintf(extra, sizeof(extra), "models:\n  allow: [%s/models]\n", s_c.dir);
    tc_start_coord_file(&s_c, extra);
    tc_start_nodes(&s_c, n);
    tc_train_data(&s_c, "models/");
}

/* DIR/NAME.yaml: the tiny model on 2 stages, `steps` steps, checkpoints every `every` into ck. */
static void s_train_file(const char *name, int steps, int every, const char *ck)
{
    char path[600], text[2048];
    snprintf(path, sizeof(path), "%s/%s.yaml", s_c.dir, name);
    snprintf(text, sizeof(text),
             "model: models/tiny\ndata:\n  tokens: models/corpus.tok\nseq_len: 32\n"
             "global_batch: 16\nsteps: %d\noptimizer:\n  lr: 1.0e-2\n  warmup_steps: 1\n"
             "stages: 2\nschedule: 1f1b\ncheckpoint_every: %d\ncheckpoint_dir: %s\n",
             steps, every, ck);
    tc_write(path, text);
}

static int s_train(const char *name, char **out)
{
    return tc_sh(out, "%s/pipectl -c %s --timeout 5 train %s/%s.yaml 2>&1", tc_bin(), s_c.ep,
                 s_c.dir, name);
}

static int s_step(const json_t *st)
{
    return (int)json_integer_value(json_object_get(json_object_get(st, "train"), "step"));
}

static json_t *s_wait_end(int id, double timeout_s)
{
    double t0 = tc_now();
    for (;;) {
        json_t *st = tc_status_json(&s_c, id);
        if (st && (!strcmp(tc_status_state(st), "done") || !strcmp(tc_status_state(st), "failed")))
            return st;
        json_decref(st);
        cr_assert(tc_now() - t0 < timeout_s, "job %d did not end in %.0f s", id, timeout_s);
        usleep(50 * 1000);
    }
}

Test(train_allow, a_checkpoint_dir_outside_models_allow_is_refused_at_submit, .fini = s_teardown,
     .timeout = 300)
{
    s_start(2);
    const char *outside[] = {"outside/ck", "models/../outside/ck", "models/link/ck",
                             "models/link"};
    char *out;
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        s_train_file("bad", 4, 2, outside[i]);
        cr_expect_neq(s_train("bad", &out), 0, "checkpoint_dir %s accepted: %s", outside[i], out);
        cr_expect(strstr(out, "checkpoint_dir") && strstr(out, "models.allow"), "%s: %s",
                  outside[i], out);
        free(out);
    }
    char *nodes;
    tc_sh(&nodes, "ls %s/outside | wc -l", s_c.dir);
    cr_assert_eq(atoi(nodes), 0, "something was written outside");
    free(nodes);
    /* inside (not made yet) is taken and written */
    s_train_file("good", 4, 2, "models/ck");
    cr_assert_eq(s_train("good", &out), 0, "%s", out);
    int id = 0;
    cr_assert_eq(sscanf(out, "job %d submitted", &id), 1, "%s", out);
    free(out);
    json_t *st = s_wait_end(id, 120);
    cr_assert_str_eq(tc_status_state(st), "done", "%s",
                     json_string_value(json_object_get(st, "note")));
    json_decref(st);
    char path[512];
    snprintf(path, sizeof(path), "%s/models/ck/checkpoint-4/trainer_state.json", s_c.dir);
    cr_assert_eq(access(path, R_OK), 0, "no checkpoint in the allowed directory");
    s_passed = 1;
}

Test(train_allow, the_daemons_check_again_before_they_write, .fini = s_teardown, .timeout = 300)
{
    s_start(2);
    s_train_file("swap", 400, 300, "models/ck");
    char *out;
    cr_assert_eq(s_train("swap", &out), 0, "%s", out);
    int id = 0;
    cr_assert_eq(sscanf(out, "job %d submitted", &id), 1, "%s", out);
    free(out);
    int step = -1;
    for (int i = 0; i < 2400 && step < 1; i++) { /* running, long before its first checkpoint */
        json_t *st = tc_status_json(&s_c, id);
        if (st && !strcmp(tc_status_state(st), "running"))
            step = s_step(st);
        cr_assert(!st || strcmp(tc_status_state(st), "failed"), "failed before the swap");
        json_decref(st);
        usleep(20 * 1000);
    }
    char ck[512], outside[512];
    snprintf(ck, sizeof(ck), "%s/models/ck", s_c.dir);
    snprintf(outside, sizeof(outside), "%s/outside", s_c.dir);
    cr_assert_eq(symlink(outside, ck), 0, "%s", strerror(errno)); /* after the submit's check */
    json_t *st = tc_status_json(&s_c, id);
    cr_assert(st && s_step(st) < 250, "the job reached step %d before the swap: too fast to tell",
              st ? s_step(st) : -1);
    json_decref(st);
    st = s_wait_end(id, 240);
    const char *note = json_string_value(json_object_get(st, "note"));
    cr_assert_str_eq(tc_status_state(st), "failed", "the checkpoint went through the link: %s",
                     note);
    cr_assert(note && strstr(note, "checkpoint_dir") && strstr(note, "models.allow"), "%s", note);
    json_decref(st);
    tc_sh(&out, "ls %s/outside | wc -l", s_c.dir);
    cr_assert_eq(atoi(out), 0, "the daemons wrote outside the allowed directories");
    free(out);
    s_passed = 1;
}
