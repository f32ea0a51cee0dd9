/* Integration: a training job survives a coordinator killed with SIGKILL and a lost daemon. On
 * local clusters a tiny model trains on 2 stages, checkpointing every few steps; mid-run, after
 * a checkpoint, the coordinator is killed and restarted on the same state db, or one of the job's
 * daemons is killed (of 3: the job is re-planned on the other two). The job resumes from its last
 * whole checkpoint (its events say so, and this run's first step is that checkpoint's), and its
 * loss curve (steps 1..N: the part before the checkpoint comes from the state db) and its final
 * checkpoint's files are those of an undisturbed run of the same job, to the bit. */
#include "job_util.h"

#include <jansson.h>
#include <math.h>

#define S_STEPS 240
#define S_EVERY 8

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

/* dir/NAME.yaml: `steps` steps on 2 stages under `schedule`, a checkpoint every S_EVERY into
 * ckpt_NAME, and the YAML lines `extra`. */
static void s_train_file_as(const char *name, int steps, const char *schedule, const char *extra)
{
    char more[1024];
    snprintf(more, sizeof(more), "schedule: %s\ncheckpoint_every: %d\ncheckpoint_dir: ckpt_%s\n%s",
             schedule, S_EVERY, name, extra);
    tc_train_file(&s_c, name, 32, 16, steps, more);
}

/* S_STEPS steps under 1f1b. */
static void s_train_file(const char *name)
{
    s_train_file_as(name, S_STEPS, "1f1b", "");
}

static int s_submit(const char *name)
{
    char *out;
    int rc = tc_sh(&out, "%s/pipectl -c %s --timeout 5 train %s/%s.yaml 2>&1", tc_bin(), s_c.ep,
                   s_c.dir, name);
    int id = 0;
    cr_assert(rc == 0 && sscanf(out, "job %d submitted", &id) == 1, "train %s: %s", name, out);
    free(out);
    return id;
}

static int s_train_int(const json_t *st, const char *key)
{
    return (int)json_integer_value(json_object_get(json_object_get(st, "train"), key));
}

static bool s_ended(const json_t *st)
{
    return st && (!strcmp(tc_status_state(st), "done") || !strcmp(tc_status_state(st), "failed") ||
                  !strcmp(tc_status_state(st), "canceled"));
}

/* Poll until the job's first whole checkpoint; it must still be running then, well before its
 * end (else the test cannot interrupt it mid-run). */
static void s_wait_checkpoint(int id)
{
    for (int i = 0; i < 1200; i++) {
        json_t *st = tc_status_json(&s_c, id);
        cr_assert(!s_ended(st), "job %d ended before it was interrupted: %s", id,
                  tc_status_state(st));
        int ck = st ? s_train_int(st, "checkpoint_step") : 0,
            step = st ? s_train_int(st, "step") : 0;
        json_decref(st);
        if (ck >= S_EVERY) {
            cr_assert(step < S_STEPS - 2 * S_EVERY, "job %d is at step %d already", id, step);
            return;
        }
        usleep(50 * 1000);
    }
    cr_assert_fail("job %d wrote no checkpoint in 60 s", id);
}

static json_t *s_wait_end(int id, double timeout_s)
{
    double t0 = tc_now();
    for (;;) {
        json_t *st = tc_status_json(&s_c, id);
        if (s_ended(st))
            return st;
        json_decref(st);
        cr_assert(tc_now() - t0 < timeout_s, "job %d did not end in %.0f s", id, timeout_s);
        usleep(100 * 1000);
    }
}

/* The whole curve of a done job (steps 1..S_STEPS) into curve. */
static void s_curve(const json_t *st, double *curve)
{
    cr_assert_str_eq(tc_status_state(st), "done", "%s",
                     json_string_value(json_object_get(st, "note")));
    const json_t *tr = json_object_get(st, "train"), *ls = json_object_get(tr, "losses");
    cr_assert_eq(json_integer_value(json_object_get(tr, "losses_from")), 1);
    cr_assert_eq(json_array_size(ls), (size_t)S_STEPS, "%zu losses", json_array_size(ls));
    for (int k = 0; k < S_STEPS; k++)
        curve[k] = json_real_value(json_array_get(ls, (size_t)k));
}

/* Whether an event of the job has `what` and its detail contains `text`; its wall time. */
static double s_event(const json_t *st, const char *what, const char *text)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(st, "events"), i, e)
    {
        const char *w = json_string_value(json_object_get(e, "what")),
                   *d = json_string_value(json_object_get(e, "detail"));
        if (w && d && !strcmp(w, what) && strstr(d, text))
            return json_real_value(json_object_get(e, "at"));
    }
    return 0;
}

static double s_wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The undisturbed run's curve and checkpoints: the reference. */
static void s_reference(double *ref)
{
    s_train_file("ref");
    int id = s_submit("ref");
    json_t *st = s_wait_end(id, 240);
    s_curve(st, ref);
    json_decref(st);
}

/* The final checkpoint's files (weights, optimizer state, trainer state) equal the reference's
 * byte for byte. */
static void s_same_files(const char *name)
{
    const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "optimizer-00001-of-00002.safetensors",
                           "optimizer-00002-of-00002.safetensors", "trainer_state.json"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        cr_assert_eq(tc_sh(NULL, "cmp -s %s/ckpt_ref/checkpoint-%d/%s %s/ckpt_%s/checkpoint-%d/%s",
                           s_c.dir, S_STEPS, files[i], s_c.dir, name, S_STEPS, files[i]),
                     0, "%s of the final checkpoint differs from the undisturbed run's", files[i]);
}

/* The resumed job: done, from a checkpoint (not from step 0), the same curve to the bit. */
static void s_check_resumed(const json_t *st, const double *ref, const char *name)
{
    double got[S_STEPS];
    s_curve(st, got);
    int from = s_train_int(st, "run_from");
    cr_assert(from >= S_EVERY && from % S_EVERY == 0,
              "the last run began at step %d, not at a checkpoint", from);
    cr_assert(s_event(st, "resumed", "from checkpoint-"), "no 'resumed from checkpoint' event");
    for (int k = 0; k < S_STEPS; k++)
        cr_assert_eq(memcmp(&got[k], &ref[k], sizeof(double)), 0,
                     "step %d: %.17g resumed (from step %d), %.17g undisturbed", k + 1, got[k],
                     from, ref[k]);
    s_same_files(name);
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl -c %s status %d", tc_bin(), s_c.ep,
                       (int)json_integer_value(json_object_get(st, "job"))),
                 0);
    cr_assert(strstr(out, "resumed from checkpoint-") && strstr(out, " after "), "%s", out);
    free(out);
}

Test(train_recover, coordinator_killed_mid_training_resumes_from_the_checkpoint, .fini = s_teardown,
     .timeout = 600)
{
    double ref[S_STEPS];
    tc_train_start(&s_c, 2);
    s_reference(ref);
    s_train_file("run");
    int id = s_submit("run");
    s_wait_checkpoint(id);
    double t_kill = tc_now();
    kill(s_c.coord, SIGKILL); /* no goodbye: what was durable is what comes back */
    waitpid(s_c.coord, NULL, 0);
    tc_start_coord(&s_c, s_c.ep);
    double t_running = 0, t_step = 0;
    int from = -1;
    for (int i = 0; i < 1200 && !t_step; i++) { /* when it runs again, and steps on */
        json_t *st = tc_status_json(&s_c, id);
        if (s_ended(st)) {
            json_decref(st);
            break;
        }
        if (st && !strcmp(tc_status_state(st), "running")) {
            if (!t_running)
                t_running = tc_now();
            from = s_train_int(st, "run_from");
            if (s_train_int(st, "step") > from)
                t_step = tc_now();
        }
        json_decref(st);
        usleep(50 * 1000);
    }
    json_t *st = s_wait_end(id, 300);
    cr_assert(s_event(st, "requeued", "resumes from checkpoint-"), "no requeued event");
    s_check_resumed(st, ref, "run");
    cr_log_info("coordinator restart: running again %.2f s after the kill, first new step "
                "%.2f s after (from step %d)",
                t_running - t_kill, t_step - t_kill, from);
    fprintf(stderr,
            "train_recover: coordinator kill -9 + restart: running again %.2f s, first "
            "new step %.2f s after the kill, resumed from step %d\n",
            t_running - t_kill, t_step - t_kill, from);
    json_decref(st);
    s_passed = 1;
}

Test(train_recover, lost_node_mid_training_is_replanned_and_resumes_from_the_checkpoint,
     .fini = s_teardown, .timeout = 600)
{
    double ref[S_STEPS];
    tc_train_start(&s_c, 3);
    s_reference(ref);
    s_train_file("run");
    int id = s_submit("run");
    s_wait_checkpoint(id);
    json_t *st = tc_status_json(&s_c, id); /* the node of stage 1 */
    const char *on = json_string_value(json_object_get(
        json_array_get(json_object_get(json_object_get(st, "plan"), "stages"), 1), "node"));
    char node[32];
    int k = -1;
    cr_assert(on && sscanf(on, "node%d", &k) == 1 && k >= 0 && k < 3, "stage 1 on %s", on);
    snprintf(node, sizeof(node), "%s", on);
    json_decref(st);
    double t_kill = tc_now(), w_kill = s_wall();
    kill(s_c.node[k], SIGKILL);
    waitpid(s_c.node[k], NULL, 0);
    s_c.node[k] = -1;
    double t_step = 0;
    for (int i = 0; i < 1200 && !t_step; i++) { /* when it steps on, after the resume */
        st = tc_status_json(&s_c, id);
        if (s_ended(st)) {
            json_decref(st);
            break;
        }
        if (st && !strcmp(tc_status_state(st), "running") &&
            s_event(st, "resumed", "checkpoint-") &&
            s_train_int(st, "step") > s_train_int(st, "run_from"))
            t_step = tc_now();
        json_decref(st);
        usleep(50 * 1000);
    }
    st = s_wait_end(id, 300);
    double w_lost = s_event(st, "interrupted", "resumes from checkpoint-");
    cr_assert(w_lost > 0, "no interrupted event naming the checkpoint");
    s_check_resumed(st, ref, "run");
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(json_object_get(st, "plan"), "stages"), i, e)
        cr_assert(strcmp(json_string_value(json_object_get(e, "node")), node),
                  "re-planned on the lost node %s", node);
    cr_log_info("lost node %s: detected %.2f s after the kill, first new step %.2f s after", node,
                w_lost - w_kill, t_step - t_kill);
    fprintf(stderr,
            "train_recover: daemon kill -9 (%s, stage 1): detected %.2f s, first new "
            "step %.2f s after the kill, resumed from step %d\n",
            node, w_lost - w_kill, t_step - t_kill, s_train_int(st, "run_from"));
    json_decref(st);
    s_passed = 1;
}

static const char *s_schedule(const json_t *st)
{
    const char *s = json_string_value(json_object_get(json_object_get(st, "train"), "schedule"));
    return s ? s : "";
}

/* A resume keeps the schedule as it keeps the split: a job with `schedule: auto` resuming from
 * a checkpoint that another schedule wrote runs that schedule (the checkpoint's trainer_state
 * names it), where auto on its own picks another, and ends on the very weights, optimizer state
 * and trainer state of the undisturbed run under that schedule. */
Test(train_recover, a_resume_keeps_the_schedule_its_checkpoint_was_written_with, .fini = s_teardown,
     .timeout = 600)
{
    const int steps = 2 * S_EVERY;
    tc_train_start(&s_c, 2);
    s_train_file_as("auto", S_EVERY, "auto", ""); /* what auto picks here */
    json_t *st = s_wait_end(s_submit("auto"), 240);
    cr_assert_str_eq(tc_status_state(st), "done", "%s",
                     json_string_value(json_object_get(st, "note")));
    char picked[16], other[16];
    snprintf(picked, sizeof(picked), "%s", s_schedule(st));
    json_decref(st);
    const char *kinds[] = {"gpipe", "1f1b", "zb-h1"};
    snprintf(other, sizeof(other), "%s", strcmp(picked, "gpipe") ? "gpipe" : "1f1b");
    cr_assert(!strcmp(picked, kinds[0]) || !strcmp(picked, kinds[1]) || !strcmp(picked, kinds[2]),
              "auto picked '%s'", picked);
    /* the undisturbed run under the other schedule, checkpoints at S_EVERY and 2 S_EVERY */
    s_train_file_as("ref", steps, other, "");
    st = s_wait_end(s_submit("ref"), 240);
    cr_assert_str_eq(tc_status_state(st), "done", "%s",
                     json_string_value(json_object_get(st, "note")));
    cr_assert_str_eq(s_schedule(st), other);
    json_decref(st);
    char extra[600];
    snprintf(extra, sizeof(extra), "resume_from: ckpt_ref/checkpoint-%d\n", S_EVERY);
    s_train_file_as("res", steps, "auto", extra);
    st = s_wait_end(s_submit("res"), 240);
    cr_assert_str_eq(tc_status_state(st), "done", "%s",
                     json_string_value(json_object_get(st, "note")));
    cr_assert_str_eq(s_schedule(st), other, "the resume ran %s, its checkpoint was written by %s",
                     s_schedule(st), other);
    json_decref(st);
    const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "optimizer-00001-of-00002.safetensors",
                           "optimizer-00002-of-00002.safetensors", "trainer_state.json"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        cr_assert_eq(tc_sh(NULL, "cmp -s %s/ckpt_ref/checkpoint-%d/%s %s/ckpt_res/checkpoint-%d/%s",
                           s_c.dir, steps, files[i], s_c.dir, steps, files[i]),
                     0, "%s differs from the undisturbed %s run's", files[i], other);
    s_passed = 1;
}

/* Checkpoints assume one file system: a resume whose stage finds its part of the checkpoint
 * missing on its node fails, naming the stage's node and the file, and trains nothing (no fresh
 * start from the model). */
Test(train_recover, a_checkpoint_part_missing_on_its_node_fails_naming_node_and_file,
     .fini = s_teardown, .timeout = 600)
{
    tc_train_start(&s_c, 2);
    s_train_file_as("ref", 2 * S_EVERY, "1f1b", "");
    json_t *st = s_wait_end(s_submit("ref"), 240);
    cr_assert_str_eq(tc_status_state(st), "done", "%s",
                     json_string_value(json_object_get(st, "note")));
    json_decref(st);
    cr_assert_eq(tc_sh(NULL, "rm %s/ckpt_ref/checkpoint-%d/optimizer-00002-of-00002.safetensors",
                       s_c.dir, S_EVERY),
                 0);
    char extra[600];
    snprintf(extra, sizeof(extra), "resume_from: ckpt_ref/checkpoint-%d\n", S_EVERY);
    s_train_file_as("res", 2 * S_EVERY, "1f1b", extra);
    st = s_wait_end(s_submit("res"), 240);
    const char *note = json_string_value(json_object_get(st, "note"));
    cr_assert_str_eq(tc_status_state(st), "failed", "%s", note);
    cr_assert(note && strstr(note, "stage 1 (node") &&
                  strstr(note, "optimizer-00002-of-00002.safetensors is not readable on this "
                               "node") &&
                  strstr(note, "share one file system"),
              "%s", note);
    json_decref(st);
    cr_assert_neq(tc_sh(NULL, "ls %s/ckpt_res/checkpoint-* >/dev/null 2>&1", s_c.dir), 0,
                  "the resume trained from somewhere else");
    s_passed = 1;
}
