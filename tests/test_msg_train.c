/* Training on the wire (transport/msg_train.c): a training job's part of the spec survives SUBMIT
 * and ASSIGN to the bit (every field of the job file, floats included, and the coordinator's
 * schedule and split), it is checked by the job file's own schema, and TRAIN_STEP's fields are
 * checked; refusals name the field and leave the output untouched. */
#include "common/train_ops.h"
#include "msg_util.h"
#include "transport/msg.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A training job with every field away from its default, odd floats and an odd path. */
static pl_job_train_t *s_train(void)
{
    pl_job_train_t *t = calloc(1, sizeof(*t));
    pl_cfg_train_t *c = &t->cfg;
    snprintf(c->model, sizeof(c->model), "/models/tiny \"q\" \\ é");
    snprintf(c->init, sizeof(c->init), "random");
    c->seed = UINT64_MAX;
    snprintf(c->data_text, sizeof(c->data_text), "/data/corpus.txt");
    c->seq_len = 33, c->micro_batch = 1, c->global_batch = 12, c->steps = 77;
    c->opt = (pl_cfg_train_opt_t){.lr = 3.3e-3f, .min_lr = 1.0e-7f, .warmup_steps = 5,
                                  .beta1 = 0.85f, .beta2 = 0.9999f, .eps = 1.1e-8f,
                                  .weight_decay = 0.1f / 3, .clip_norm = 0.7f};
    snprintf(c->opt.lr_schedule, sizeof(c->opt.lr_schedule), "constant");
    snprintf(c->schedule, sizeof(c->schedule), "zb-h1");
    c->recompute = true;
    c->stages = 3, c->replicas = 1, c->checkpoint_every = 7;
    snprintf(c->checkpoint_dir, sizeof(c->checkpoint_dir), "/ck/run 1");
    snprintf(c->resume_from, sizeof(c->resume_from), "/ck/run 0/checkpoint-7");
    c->n_nodes = 2;
    snprintf(c->nodes[0], sizeof(c->nodes[0]), "n0");
    snprintf(c->nodes[1], sizeof(c->nodes[1]), "gpu-1.a");
    t->kind = PL_TRAIN_ZBH1, t->n_split = 3;
    t->split[0] = 2, t->split[1] = 1, t->split[2] = 4;
    return t;
}

Test(msg_train, spec_train_part_round_trips_in_submit_and_assign)
{
    pl_msg_t m, back;
    pl_msg_init(&m, PL_MSG_SUBMIT);
    m.submit.train = s_train();
    snprintf(m.submit.model, sizeof(m.submit.model), "%s", m.submit.train->cfg.model);
    tm_round_trip(&m, &back);
    cr_assert_not_null(back.submit.train);
    cr_assert_eq(back.submit.n_prompts, 0);
    cr_assert_eq(memcmp(&back.submit.train->cfg, &m.submit.train->cfg, sizeof(pl_cfg_train_t)), 0,
                 "the job file's value changed on the wire");
    cr_assert_eq(back.submit.train->kind, PL_TRAIN_ZBH1);
    cr_assert_eq(back.submit.train->n_split, 3);
    cr_assert_eq(back.submit.train->split[2], 4);
    /* ASSIGN carries the same part inside its spec */
    pl_msg_t a, aback;
    pl_msg_init(&a, PL_MSG_ASSIGN);
    a.assign = (pl_msg_assign_t){.job = 4, .stage = 1, .n_stages = 3, .epoch = 9, .first = 2,
                                 .last = 2, .max_ctx = 34, .max_tokens = 33, .microbatches = 12,
                                 .spec = back.submit};
    snprintf(a.assign.device, sizeof(a.assign.device), "cpu:0");
    tm_round_trip(&a, &aback);
    cr_assert_eq(memcmp(&aback.assign.spec.train->cfg, &m.submit.train->cfg,
                        sizeof(pl_cfg_train_t)),
                 0);
    cr_assert_eq(aback.assign.spec.train->split[0], 2);
    pl_msg_clear(&aback);
    pl_msg_clear(&back); /* a.assign.spec was back's, borrowed */
    pl_msg_clear(&m);
    /* a spec without one has none */
    pl_msg_init(&m, PL_MSG_SUBMIT);
    snprintf(m.submit.model, sizeof(m.submit.model), "/m");
    m.submit.n_prompts = 1;
    m.submit.prompts = calloc(1, sizeof(int32_t *));
    m.submit.prompt_len = calloc(1, sizeof(int));
    m.submit.prompts[0] = calloc(1, sizeof(int32_t));
    m.submit.prompt_len[0] = 1;
    tm_round_trip(&m, &back);
    cr_assert_null(back.submit.train);
    pl_msg_clear(&back);
    pl_msg_clear(&m);
}

#define S_T(TEXT) "{\"model\": \"/m\", \"gen\": {\"prompts\": []}, \"train\": \"" TEXT "\""
#define S_OK_TEXT                                                                                  \
    "{\\\"model\\\": \\\"/m\\\", \\\"data\\\": {\\\"tokens\\\": \\\"/d\\\"}, \\\"seq_len\\\": 8, "    \
    "\\\"global_batch\\\": 2, \\\"steps\\\": 3}"

Test(msg_train, bad_training_parts_are_refused_naming_the_field)
{
    /* the good one first, so that each refusal below is its own field's */
    pl_msg_t ok;
    const char *good = S_T(S_OK_TEXT) "}";
    cr_assert_eq(pl_msg_decode_wire("SUBMIT", 6, good, strlen(good), &ok), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(ok.submit.train->cfg.steps, 3);
    cr_assert_eq(ok.submit.train->kind, -1, "no plan yet");
    pl_msg_clear(&ok);
    tm_refused(PL_MSG_SUBMIT, "{\"model\": \"/m\", \"gen\": {\"prompts\": []}, \"train\": 5}",
               "field 'train'");
    tm_refused(PL_MSG_SUBMIT, S_T("") "}", "field 'train'");
    /* the schema's own errors, with where in the text */
    tm_refused(PL_MSG_SUBMIT,
               S_T("{\\\"model\\\": \\\"/m\\\", \\\"data\\\": {\\\"tokens\\\": \\\"/d\\\"}, "
                   "\\\"seq_len\\\": 0, \\\"global_batch\\\": 2, \\\"steps\\\": 3}") "}",
               "seq_len");
    tm_refused(PL_MSG_SUBMIT,
               S_T("{\\\"model\\\": \\\"/m\\\", \\\"data\\\": {\\\"tokens\\\": \\\"/d\\\"}, "
                   "\\\"seq_len\\\": 8, \\\"global_batch\\\": 2, \\\"steps\\\": 3, "
                   "\\\"bogus\\\": 1}") "}",
               "bogus");
    /* relative paths, another model than the spec's, prompts, a deployment */
    tm_refused(PL_MSG_SUBMIT,
               S_T("{\\\"model\\\": \\\"/m\\\", \\\"data\\\": {\\\"tokens\\\": \\\"d\\\"}, "
                   "\\\"seq_len\\\": 8, \\\"global_batch\\\": 2, \\\"steps\\\": 3}") "}",
               "data.tokens");
    tm_refused(PL_MSG_SUBMIT,
               S_T("{\\\"model\\\": \\\"/other\\\", \\\"data\\\": {\\\"tokens\\\": \\\"/d\\\"}, "
                   "\\\"seq_len\\\": 8, \\\"global_batch\\\": 2, \\\"steps\\\": 3}") "}",
               "not the job's");
    tm_refused(PL_MSG_SUBMIT,
               "{\"model\": \"/m\", \"gen\": {\"prompts\": [[1]]}, \"train\": \"" S_OK_TEXT "\"}",
               "training job takes none");
    tm_refused(PL_MSG_SUBMIT, S_T(S_OK_TEXT) ", \"deployment\": \"d\"}", "field 'train'");
    /* the plan: a schedule by name, layer counts */
    tm_refused(PL_MSG_SUBMIT,
               S_T(S_OK_TEXT) ", \"train_plan\": {\"schedule\": \"2f2b\", "
                              "\"split\": [1]}}",
               "2f2b");
    tm_refused(PL_MSG_SUBMIT,
               S_T(S_OK_TEXT) ", \"train_plan\": {\"schedule\": \"1f1b\", "
                              "\"split\": [1, 0]}}",
               "train_plan.split");
    tm_refused(PL_MSG_SUBMIT,
               S_T(S_OK_TEXT) ", \"train_plan\": {\"schedule\": \"1f1b\", "
                              "\"split\": []}}",
               "train_plan.split");
    tm_refused(PL_MSG_SUBMIT,
               "{\"model\": \"/m\", \"gen\": {\"prompts\": [[1]]}, \"train_plan\": "
               "{\"schedule\": \"1f1b\", \"split\": [1]}}",
               "without 'train'");
}

Test(msg_train, train_step_round_trips_and_is_checked)
{
    pl_msg_t m, back;
    pl_msg_init(&m, PL_MSG_TRAIN_STEP);
    m.train_step = (pl_msg_train_step_t){.job = 3, .stage = 1, .epoch = 7, .step = 12,
                                         .loss = 2.0 / 3, .grad_norm = 1e-9, .lr = 3e-4,
                                         .busy_s = 0.25, .wait_s = 0.125, .wall_s = 0.5,
                                         .peak_stash_bytes = 1 << 20, .tokens = 256,
                                         .checkpoint = true};
    tm_round_trip(&m, &back);
    cr_assert_eq(memcmp(&back.train_step, &m.train_step, sizeof(m.train_step)), 0);
    static const char *bad[][2] = {
        {"{\"job\": 1, \"stage\": 0, \"epoch\": 1, \"step\": 0, \"loss\": 1, \"grad_norm\": 1, "
         "\"lr\": 0, \"busy_s\": 0, \"wait_s\": 0, \"wall_s\": 0, \"peak_stash_bytes\": 0, "
         "\"tokens\": 0}",
         "step"},
        {"{\"job\": 1, \"stage\": 0, \"epoch\": 1, \"step\": 1, \"loss\": -1, \"grad_norm\": 1, "
         "\"lr\": 0, \"busy_s\": 0, \"wait_s\": 0, \"wall_s\": 0, \"peak_stash_bytes\": 0, "
         "\"tokens\": 0}",
         "loss"},
        {"{\"job\": 1, \"stage\": 0, \"epoch\": 1, \"step\": 1, \"loss\": 1, \"grad_norm\": 1, "
         "\"lr\": 0, \"busy_s\": 5, \"wait_s\": 0, \"wall_s\": 1, \"peak_stash_bytes\": 0, "
         "\"tokens\": 0}",
         "wall_s"},
        {"{\"job\": 1, \"stage\": 0, \"epoch\": 1, \"step\": 1, \"loss\": 1, \"grad_norm\": 1, "
         "\"lr\": 0, \"busy_s\": 0, \"wait_s\": 0, \"wall_s\": 0, \"peak_stash_bytes\": -4, "
         "\"tokens\": 0}",
         "peak_stash_bytes"},
        {"{\"job\": 1, \"stage\": 99, \"epoch\": 1, \"step\": 1, \"loss\": 1, \"grad_norm\": 1, "
         "\"lr\": 0, \"busy_s\": 0, \"wait_s\": 0, \"wall_s\": 0, \"peak_stash_bytes\": 0, "
         "\"tokens\": 0}",
         "stage"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        tm_refused(PL_MSG_TRAIN_STEP, bad[i][0], bad[i][1]);
}

Test(msg_train, start_carries_the_all_reduce_ring)
{
    pl_msg_t m, back;
    pl_msg_init(&m, PL_MSG_START);
    m.start = (pl_msg_start_t){.job = 2, .stage = 3, .epoch = 4, .next = strdup("n"),
                               .prev = strdup("p"), .ring_next = strdup("rn"),
                               .ring_prev = strdup("rp")};
    tm_round_trip(&m, &back);
    cr_assert_str_eq(back.start.ring_next, "rn");
    cr_assert_str_eq(back.start.ring_prev, "rp");
    cr_assert_str_eq(back.start.next, "n");
    pl_msg_clear(&back);
    free(m.start.ring_next);
    free(m.start.ring_prev);
    m.start.ring_next = m.start.ring_prev = NULL; /* absent: none */
    tm_round_trip(&m, &back);
    cr_assert_null(back.start.ring_next);
    cr_assert_null(back.start.ring_prev);
    pl_msg_clear(&back);
    pl_msg_clear(&m);
    tm_refused(PL_MSG_START,
               "{\"job\": 1, \"stage\": 0, \"epoch\": 1, \"token\": "
               "\"00000000000000000000000000000000\", \"ring_next\": 5}",
               "ring_next");
}
