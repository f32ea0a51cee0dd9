/* Tests of the training job file's schema (common/config_train.c): every key, the defaults, each
 * cross-field refusal with its position and wording, paths resolved against the file, nothing
 * written on error, and the shipped etc/train-tiny.yaml. */
#include "common/config_train.h"
#include "common/status.h"
#include "status_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static pl_status_t s_train(const char *yaml, pl_cfg_train_t *out)
{
    return pl_cfg_train_parse(yaml, strlen(yaml), "t.yaml", "/base", out);
}

#define EXPECT_ERR(call, want_msg) EXPECT_ST(call, PL_ERR_INVALID, want_msg)
#define EXPECT_RANGE(call, want_msg) EXPECT_ST(call, PL_ERR_RANGE, want_msg)

#define HEAD "model: m\ndata: {tokens: d.tok}\nseq_len: 8\nglobal_batch: 4\nsteps: 10\n"

Test(config_train, every_key)
{
    static const char full[] = "model: /models/tiny\n"
                               "init: random\n"
                               "seed: 18446744073709551615\n"
                               "data:\n  text: corpus.txt\n"
                               "seq_len: 64\n"
                               "micro_batch: 1\n"
                               "global_batch: 12\n"
                               "steps: 300\n"
                               "optimizer:\n"
                               "  lr: 3.0e-3\n  min_lr: 1.0e-4\n  warmup_steps: 20\n"
                               "  lr_schedule: constant\n  beta1: 0.8\n  beta2: 0.95\n"
                               "  eps: 1.0e-6\n  weight_decay: 0.1\n  clip_norm: 0.5\n"
                               "schedule: zb-h1\n"
                               "recompute: true\n"
                               "stages: 3\n"
                               "replicas: 2\n"
                               "checkpoint_every: 100\n"
                               "checkpoint_dir: out/ck\n"
                               "resume_from: /ck/step-100\n"
                               "placement:\n  nodes: [node0, node1, node2]\n";
    pl_cfg_train_t t;
    cr_assert_eq(s_train(full, &t), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(t.model, "/models/tiny");
    cr_assert_str_eq(t.init, "random");
    cr_assert_eq(t.seed, UINT64_MAX);
    cr_assert_str_eq(t.data_text, "/base/corpus.txt");
    cr_assert_str_eq(t.data_tokens, "");
    cr_assert_eq(t.seq_len, 64);
    cr_assert_eq(t.micro_batch, 1);
    cr_assert_eq(t.global_batch, 12);
    cr_assert_eq(t.steps, 300);
    cr_assert_float_eq(t.opt.lr, 3e-3f, 1e-9);
    cr_assert_float_eq(t.opt.min_lr, 1e-4f, 1e-9);
    cr_assert_eq(t.opt.warmup_steps, 20);
    cr_assert_str_eq(t.opt.lr_schedule, "constant");
    cr_assert_float_eq(t.opt.beta1, 0.8f, 1e-9);
    cr_assert_float_eq(t.opt.beta2, 0.95f, 1e-9);
    cr_assert_float_eq(t.opt.eps, 1e-6f, 1e-12);
    cr_assert_float_eq(t.opt.weight_decay, 0.1f, 1e-9);
    cr_assert_float_eq(t.opt.clip_norm, 0.5f, 1e-9);
    cr_assert_str_eq(t.schedule, "zb-h1");
    cr_assert(t.recompute);
    cr_assert_eq(t.stages, 3);
    cr_assert_eq(t.replicas, 2);
    cr_assert_eq(t.checkpoint_every, 100);
    cr_assert_str_eq(t.checkpoint_dir, "/base/out/ck");
    cr_assert_str_eq(t.resume_from, "/ck/step-100");
    cr_assert_eq(t.n_nodes, 3);
    cr_assert_str_eq(t.nodes[2], "node2");
}

Test(config_train, defaults)
{
    pl_cfg_train_t t;
    cr_assert_eq(s_train(HEAD, &t), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(t.model, "/base/m");
    cr_assert_str_eq(t.init, "weights");
    cr_assert_eq(t.seed, 0);
    cr_assert_str_eq(t.data_tokens, "/base/d.tok");
    cr_assert_eq(t.micro_batch, 1);
    /* the optimizer's defaults are pipeline/train_adamw.h's pl_adamw_cfg_default */
    cr_assert_float_eq(t.opt.lr, 1e-3f, 1e-12);
    cr_assert_eq(t.opt.min_lr, 0);
    cr_assert_eq(t.opt.warmup_steps, 0);
    cr_assert_str_eq(t.opt.lr_schedule, "cosine");
    cr_assert_float_eq(t.opt.beta1, 0.9f, 1e-9);
    cr_assert_float_eq(t.opt.beta2, 0.999f, 1e-9);
    cr_assert_float_eq(t.opt.eps, 1e-8f, 1e-14);
    cr_assert_float_eq(t.opt.weight_decay, 0.01f, 1e-9);
    cr_assert_eq(t.opt.clip_norm, 0);
    cr_assert_str_eq(t.schedule, "auto");
    cr_assert(!t.recompute);
    cr_assert_eq(t.stages, 0);
    cr_assert_eq(t.replicas, 1);
    cr_assert_eq(t.checkpoint_every, 0);
    cr_assert_str_eq(t.checkpoint_dir, "");
    cr_assert_str_eq(t.resume_from, "");
    cr_assert_eq(t.n_nodes, 0);
}

Test(config_train, refuses_fields_that_do_not_fit_together)
{
    pl_cfg_train_t t;
    EXPECT_ERR(s_train("model: m\ndata: {}\nseq_len: 8\nglobal_batch: 4\nsteps: 10\n", &t),
               "t.yaml:2:7: key 'data': give exactly one of 'tokens' (a file of token ids) and "
               "'text'");
    EXPECT_ERR(s_train("model: m\ndata: {tokens: a, text: b}\nseq_len: 8\nglobal_batch: 4\n"
                       "steps: 10\n",
                       &t),
               "t.yaml:2:7: key 'data': give exactly one of 'tokens' (a file of token ids) and "
               "'text'");
    EXPECT_ERR(s_train(HEAD "micro_batch: 2\n", &t),
               "t.yaml:1:1: 'micro_batch' 2: the CPU trainer runs one sequence per microbatch "
               "(1); raise 'global_batch' for more per step");
    EXPECT_ERR(s_train(HEAD "optimizer: {warmup_steps: 10}\n", &t),
               "t.yaml:1:1: 'optimizer.warmup_steps' 10 must be below 'steps' 10");
    EXPECT_ERR(s_train(HEAD "optimizer: {lr: 0.001, min_lr: 0.01}\n", &t),
               "t.yaml:6:12: key 'optimizer': 'min_lr' 0.01 is above 'lr' 0.001");
    EXPECT_ERR(s_train(HEAD "checkpoint_every: 5\n", &t),
               "t.yaml:1:1: 'checkpoint_every' 5 needs a 'checkpoint_dir'");
    EXPECT_ERR(s_train(HEAD "checkpoint_every: 11\ncheckpoint_dir: c\n", &t),
               "t.yaml:1:1: 'checkpoint_every' 11 is beyond 'steps' 10");
    EXPECT_ERR(s_train(HEAD "stages: 40\nreplicas: 2\n", &t),
               "t.yaml:1:1: 40 stages x 2 replicas is more than 64 pipeline stages");
    EXPECT_ERR(s_train(HEAD "checkpoint_dir: c\nresume_from: c\n", &t),
               "t.yaml:1:1: 'resume_from' and 'checkpoint_dir' are the same directory: a "
               "checkpoint would overwrite the one being resumed");
}

Test(config_train, refuses_bad_values_by_name)
{
    pl_cfg_train_t t;
    EXPECT_ERR(s_train("data: {tokens: d}\nseq_len: 8\nglobal_batch: 4\nsteps: 10\n", &t),
               "t.yaml:1:1: missing required key 'model'");
    EXPECT_ERR(s_train("model: m\ndata: {tokens: d}\nglobal_batch: 4\nsteps: 10\n", &t),
               "t.yaml:1:1: missing required key 'seq_len'");
    EXPECT_ERR(s_train(HEAD "schedule: pipedream\n", &t),
               "t.yaml:6:11: key 'schedule': expected one of auto, gpipe, 1f1b, zb-h1");
    EXPECT_ERR(s_train(HEAD "init: zeros\n", &t),
               "t.yaml:6:7: key 'init': expected one of weights, random");
    EXPECT_RANGE(s_train(HEAD "optimizer: {lr: 0}\n", &t),
                 "t.yaml:6:17: key 'optimizer.lr': value 0 out of range (0, 10]");
    EXPECT_RANGE(s_train(HEAD "optimizer: {beta1: 1}\n", &t),
                 "t.yaml:6:20: key 'optimizer.beta1': value 1 out of range [0, 0.999999]");
    EXPECT_RANGE(s_train(HEAD "replicas: 0\n", &t),
                 "t.yaml:6:11: key 'replicas': value 0 out of range [1, 16]");
    EXPECT_ERR(s_train(HEAD "learning_rate: 1\n", &t),
               "t.yaml:6:1: unknown key 'learning_rate'");
    EXPECT_ERR(s_train(HEAD "data: {tokens: e}\n", &t), "t.yaml:6:1: duplicate key 'data'");
}

Test(config_train, nothing_is_written_on_error)
{
    pl_cfg_train_t t;
    memset(&t, 0x5a, sizeof(t));
    cr_assert_neq(s_train(HEAD "steps: 0\n", &t), PL_OK);
    for (size_t i = 0; i < sizeof(t); i++)
        cr_assert_eq(((unsigned char *)&t)[i], 0x5a, "byte %zu written", i);
}

Test(config_train, shipped_example_loads_with_paths_from_its_directory)
{
    pl_cfg_train_t t;
    cr_assert_eq(pl_cfg_train_load(PL_SOURCE_DIR "/etc/train-tiny.yaml", &t), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_str_eq(t.model, PL_SOURCE_DIR "/etc/models/tiny");
    cr_assert_str_eq(t.data_tokens, PL_SOURCE_DIR "/etc/corpus.tok");
    cr_assert_str_eq(t.checkpoint_dir, PL_SOURCE_DIR "/etc/ckpt/tiny");
    cr_assert_eq(t.global_batch, 8);
    cr_assert_eq(t.stages, 2);
    cr_assert_str_eq(t.schedule, "auto");
    cr_assert_eq(pl_cfg_train_load("/nonexistent/t.yaml", &t), PL_ERR_NOT_FOUND);
    cr_assert_str_eq(pl_error_msg(), "/nonexistent/t.yaml: No such file or directory");
}
