/* Integration: training jobs through the daemons. On a local cluster (pipecoord and two pipeld
 * processes) `pipectl train` trains a tiny model on 2 stages, and its loss curve is bit for bit
 * the in-process trainer's (train_local.c, same split and schedule: the kernels are the same and
 * the norm is summed in the same order); its checkpoint then generates through pipeld with the
 * same tokens as pl-generate on it; a resume from the mid-run checkpoint continues the same
 * curve to the same weights; bad training jobs are refused with the field named. */
#include "common/config_train.h"
#include "job_util.h"
#include "pipeline/train_data.h"
#include "pipeline/train_local.h"
#include "pipeline/train_weights.h"
#include "scheduler/train_sched.h"

#include <jansson.h>
#include <math.h>

#define S_STEPS 6

static tc_cluster_t s_c;
static int s_passed;

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

/* dir/NAME.yaml: the tiny model on the corpus, S_STEPS steps on 2 stages, `extra` lines after. */
static void s_train_file(const char *name, const char *extra)
{
    tc_train_file(&s_c, name, 16, 4, S_STEPS, extra);
}

/* `pipectl -o json train NAME.yaml --wait`: the job's training status at its end. */
static json_t *s_train(const char *name, int *rc_p)
{
    char *out;
    *rc_p = tc_sh(&out, "%s/pipectl -c %s --timeout 5 -o json train %s/%s.yaml --wait 2>%s/%s.err",
                  tc_bin(), s_c.ep, s_c.dir, name, s_c.dir, name);
    json_error_t e;
    json_t *v = *rc_p == 0 ? json_loads(out, 0, &e) : NULL;
    free(out);
    return v;
}

/* The in-process trainer on job file NAME.yaml with the split and schedule the cluster ran:
 * the losses of steps [from, steps). Weights from the model, or the file's seed. */
static void s_local_curve(const char *name, const int *split, int S, const char *schedule,
                          double *losses)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s.yaml", s_c.dir, name);
    pl_cfg_train_t *job = calloc(1, sizeof(*job));
    cr_assert_eq(pl_cfg_train_load(path, job), PL_OK, "%s", pl_error_msg());
    pl_model_t *m = NULL;
    cr_assert_eq(pl_model_open(job->model, &m), PL_OK, "%s", pl_error_msg());
    double inv[64];
    pl_train_local_cfg_t cfg;
    cr_assert_eq(pl_train_cfg_from_job(job, pl_model_config(m), inv, &cfg), PL_OK, "%s",
                 pl_error_msg());
    pl_train_master_t *tm = NULL;
    if (!strcmp(job->init, "random"))
        cr_assert_eq(pl_train_master_random(&cfg, job->seed, 0, cfg.n_layers, true, true, &tm),
                     PL_OK);
    else
        cr_assert_eq(pl_train_master_load(m, &cfg, 0, cfg.n_layers, true, true, &tm), PL_OK, "%s",
                     pl_error_msg());
    pl_train_kind_t kind;
    pl_train_ops_t *sched = NULL;
    pl_train_local_t *tl = NULL;
    pl_train_data_t *data = NULL;
    cr_assert_eq(pl_train_kind_parse(schedule, &kind), PL_OK);
    cr_assert_eq(pl_tsched_build(kind, S, cfg.n_mb, NULL, 0, &sched), PL_OK);
    cr_assert_eq(pl_train_local_create(&cfg, pl_train_master_weights(tm), split, S, sched, &tl),
                 PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_train_data_load_ids(job->data_tokens, cfg.vocab, &data), PL_OK);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)cfg.n_mb * (size_t)(cfg.seq_len + 1));
    for (int k = 0; k < job->steps; k++) {
        pl_train_step_t r;
        cr_assert_eq(pl_train_data_step(data, cfg.seq_len, cfg.n_mb, k, tok), PL_OK);
        cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_OK, "%s", pl_error_msg());
        losses[k] = r.loss;
    }
    free(tok);
    pl_train_data_destroy(&data);
    pl_train_local_destroy(&tl);
    pl_train_ops_destroy(&sched);
    pl_train_master_destroy(&tm);
    pl_model_destroy(&m);
    free(job);
}

/* The cluster's curve (losses_from .. step) into curve[from - 1 ..]; returns from. */
static int s_curve(const json_t *tr, double *curve)
{
    int from = (int)json_integer_value(json_object_get(tr, "losses_from"));
    json_t *ls = json_object_get(tr, "losses");
    cr_assert(from >= 1 && json_array_size(ls) == (size_t)(S_STEPS - from + 1), "losses %d..",
              from);
    for (size_t i = 0; i < json_array_size(ls); i++)
        curve[from - 1 + (int)i] = json_real_value(json_array_get(ls, i));
    return from;
}

static void s_split(const json_t *tr, int *split, int *S);

Test(train_job, two_replicas_of_two_stages_equal_one_pipeline_with_the_global_batch,
     .fini = s_teardown, .timeout = 300)
{
    tc_train_start(&s_c, 4);
    s_train_file("dp", "replicas: 2\nschedule: 1f1b\ncheckpoint_dir: ckpt\n");
    int rc, split[2], S;
    json_t *tr = s_train("dp", &rc);
    cr_assert_eq(rc, 0, "pipectl train: %s", tc_err(&s_c, "dp"));
    cr_assert_eq(json_integer_value(json_object_get(tr, "replicas")), 2);
    cr_assert_eq(json_array_size(json_object_get(tr, "stages")), 4, "2 x 2 stages");
    s_split(tr, split, &S);
    double got[S_STEPS], ref[S_STEPS];
    s_curve(tr, got);
    s_local_curve("dp", split, S, "1f1b", ref); /* one pipeline, all 4 sequences a step */
    /* not to the bit: the replicas' gradient sums are added in another order (test_train_dp) */
    for (int k = 0; k < S_STEPS; k++)
        cr_assert(fabs(got[k] - ref[k]) <= 1e-5 * fabs(ref[k]),
                  "step %d: %.9g on 2 x 2, %.9g on one pipeline", k + 1, got[k], ref[k]);
    /* one checkpoint, written by replica 0, of 2 stages */
    cr_assert_eq(tc_sh(NULL, "test -f %s/ckpt/checkpoint-%d/model-00002-of-00002.safetensors",
                       s_c.dir, S_STEPS),
                 0);
    json_decref(tr);
    s_passed = 1;
}

static void s_split(const json_t *tr, int *split, int *S)
{
    json_t *sp = json_object_get(tr, "split");
    *S = (int)json_array_size(sp);
    cr_assert_eq(*S, 2, "the job asked for 2 stages");
    for (int i = 0; i < *S; i++)
        split[i] = (int)json_integer_value(json_array_get(sp, (size_t)i));
}

/* The "tokens" array of the first result line in out. */
static void s_tokens_of(const char *out, char *ids, size_t cap)
{
    const char *p = strstr(out, "\"tokens\"");
    cr_assert_not_null(p, "no tokens in: %s", out);
    const char *e = strchr(p, ']');
    cr_assert_not_null(e);
    snprintf(ids, cap, "%.*s", (int)(e - p + 1), p);
}

Test(train_job, curve_is_train_local_bitwise_checkpoint_generates_resume_continues,
     .fini = s_teardown, .timeout = 400)
{
    tc_train_start(&s_c, 2);
    s_train_file("t", "schedule: 1f1b\ncheckpoint_every: 3\ncheckpoint_dir: ckpt\n");
    int rc, split[2], S;
    json_t *tr = s_train("t", &rc);
    char *err = tc_err(&s_c, "t");
    cr_assert_eq(rc, 0, "pipectl train: %s", err);
    cr_assert_not_null(tr);
    cr_assert(strstr(err, "step 6/6, loss"), "no progress line: %s", err);
    free(err);
    cr_assert_str_eq(json_string_value(json_object_get(tr, "schedule")), "1f1b");
    s_split(tr, split, &S);
    double got[S_STEPS], ref[S_STEPS];
    cr_assert_eq(s_curve(tr, got), 1);
    s_local_curve("t", split, S, "1f1b", ref);
    for (int k = 0; k < S_STEPS; k++)
        cr_assert_eq(memcmp(&got[k], &ref[k], sizeof(double)), 0,
                     "step %d: %.17g through the daemons, %.17g in process", k + 1, got[k],
                     ref[k]);
    cr_assert(got[S_STEPS - 1] < got[0], "the loss did not fall: %g -> %g", got[0],
              got[S_STEPS - 1]);
    cr_log_info("loss %.6f -> %.6f on %d+%d layers, bitwise train_local's", got[0],
                got[S_STEPS - 1], split[0], split[1]);
    char ck[600];
    snprintf(ck, sizeof(ck), "%s/ckpt/checkpoint-%d", s_c.dir, S_STEPS);
    cr_assert_str_eq(json_string_value(json_object_get(tr, "checkpoint")), ck);
    /* each stage's measured bubble is a share of its step time */
    json_t *st = json_object_get(tr, "stages");
    for (size_t i = 0; i < json_array_size(st); i++) {
        double b = json_real_value(json_object_get(json_array_get(st, i), "bubble"));
        cr_assert(b >= 0 && b < 1, "stage %zu bubble %g", i, b);
    }
    json_decref(tr);

    /* pipectl status of it: step, loss, tokens/s, the schedule and the bubble per stage */
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl -c %s status 1", tc_bin(), s_c.ep), 0);
    cr_assert(strstr(out, "training: step 6/6, loss ") && strstr(out, "tok/s") &&
                  strstr(out, "schedule: 1f1b") && strstr(out, "bubble"),
              "%s", out);
    free(out);

    /* the checkpoint generates through pipeld (a job on its directory, 2 stages) as pl-generate
     * does on it */
    char path[700];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, "[1, 5, 9, 33]\n");
    char model[700];
    snprintf(model, sizeof(model), "%s", ck);
    tc_job(&s_c, "gen", model, "max_new_tokens: 12\nstages: 2\n");
    char *ref_out = tc_reference(&s_c, "gen"), *gen_out = tc_submit(&s_c, "gen", &rc);
    cr_assert_eq(rc, 0, "generation on the checkpoint: %s", tc_err(&s_c, "gen"));
    char a[512], b[512];
    s_tokens_of(ref_out, a, sizeof(a));
    s_tokens_of(gen_out, b, sizeof(b));
    cr_assert_str_eq(b, a, "pipeld and pl-generate differ on the checkpoint");
    free(ref_out);
    free(gen_out);

    /* resumed from the mid-run checkpoint: the same curve from step 4, the same weights */
    s_train_file("r", "schedule: 1f1b\ncheckpoint_dir: ckpt2\nresume_from: ckpt/checkpoint-3\n");
    tr = s_train("r", &rc);
    cr_assert_eq(rc, 0, "resume: %s", tc_err(&s_c, "r"));
    double res[S_STEPS];
    cr_assert_eq(s_curve(tr, res), 4, "the resumed job reports steps 4..6");
    for (int k = 3; k < S_STEPS; k++)
        cr_assert_eq(memcmp(&res[k], &got[k], sizeof(double)), 0,
                     "step %d: %.17g resumed, %.17g uninterrupted", k + 1, res[k], got[k]);
    json_decref(tr);
    for (int s = 1; s <= 2; s++)
        cr_assert_eq(tc_sh(NULL, "cmp -s %s/ckpt/checkpoint-6/model-0000%d-of-00002.safetensors "
                                 "%s/ckpt2/checkpoint-6/model-0000%d-of-00002.safetensors",
                           s_c.dir, s, s_c.dir, s),
                     0, "stage %d's weights differ after the resume", s);
    s_passed = 1;
}

Test(train_job, random_init_zb_h1_equals_train_local, .fini = s_teardown, .timeout = 300)
{
    tc_train_start(&s_c, 2);
    s_train_file("z", "init: random\nseed: 11\nschedule: zb-h1\n");
    int rc, split[2], S;
    json_t *tr = s_train("z", &rc);
    cr_assert_eq(rc, 0, "pipectl train: %s", tc_err(&s_c, "z"));
    cr_assert_str_eq(json_string_value(json_object_get(tr, "schedule")), "zb-h1");
    s_split(tr, split, &S);
    double got[S_STEPS], ref[S_STEPS];
    s_curve(tr, got);
    s_local_curve("z", split, S, "zb-h1", ref);
    cr_assert_eq(memcmp(got, ref, sizeof(got)), 0, "zb-h1 curve differs from train_local");
    json_decref(tr);
    /* auto: the plan says which schedule it chose and what it predicted for each */
    s_train_file("a", "init: random\nschedule: auto\n");
    tr = s_train("a", &rc);
    cr_assert_eq(rc, 0, "pipectl train (auto): %s", tc_err(&s_c, "a"));
    json_decref(tr);
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl -c %s -o json status 2", tc_bin(), s_c.ep), 0);
    json_error_t e;
    json_t *r = json_loads(out, 0, &e), *plan = json_object_get(r, "plan");
    cr_assert_str_eq(json_string_value(json_object_get(plan, "kind")), "training");
    cr_assert_eq(json_array_size(json_object_get(plan, "tried")), 3, "%s", out);
    const char *chose = json_string_value(json_object_get(plan, "schedule"));
    double least = 1e30;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(plan, "tried"), i, t)
    {
        double v = json_real_value(json_object_get(t, "step_s"));
        least = v < least ? v : least;
    }
    json_array_foreach(json_object_get(plan, "tried"), i, t)
    {
        if (!strcmp(json_string_value(json_object_get(t, "schedule")), chose))
            cr_assert_eq(json_real_value(json_object_get(t, "step_s")), least,
                         "auto chose %s, not the least predicted step time", chose);
    }
    json_decref(r);
    free(out);
    s_passed = 1;
}

Test(train_job, bad_training_jobs_are_refused_naming_why, .fini = s_teardown, .timeout = 200)
{
    tc_train_start(&s_c, 2);
    const struct {
        const char *extra, *why;
    } bad[] = {
        {"replicas: 3\n", "do not split evenly"},
        {"resume_from: nowhere\n", "nowhere"},
        {"checkpoint_every: 2\n", "checkpoint_dir"},
        {"init: bogus\n", "init"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[16];
        snprintf(name, sizeof(name), "bad%zu", i);
        s_train_file(name, bad[i].extra);
        int rc;
        json_t *tr = s_train(name, &rc);
        char *err = tc_err(&s_c, name);
        cr_assert_eq(rc, 1, "%s: exit %d", bad[i].extra, rc);
        cr_assert(strstr(err, bad[i].why), "%s: '%s' not in: %s", bad[i].extra, bad[i].why,
                  err);
        free(err);
        json_decref(tr);
    }
    /* the data file went missing */
    tc_sh(NULL, "mv %s/corpus.tok %s/corpus.gone", s_c.dir, s_c.dir);
    s_train_file("nodata", "");
    int rc;
    json_decref(s_train("nodata", &rc));
    char *err = tc_err(&s_c, "nodata");
    cr_assert(rc == 1 && strstr(err, "corpus.tok") && strstr(err, "not readable"), "%s", err);
    free(err);
    /* and the cluster still trains */
    tc_sh(NULL, "mv %s/corpus.gone %s/corpus.tok", s_c.dir, s_c.dir);
    s_train_file("ok", "");
    json_decref(s_train("ok", &rc));
    cr_assert_eq(rc, 0, "%s", tc_err(&s_c, "ok"));
    s_passed = 1;
}
