/* Tests of resuming training from a checkpoint: 6 steps on 2 stages uninterrupted against 3
 * steps, a checkpoint (HF weights, optimizer-0000k-of-0000n.safetensors, trainer_state.json),
 * a fresh trainer built from the checkpoint's files alone, and 3 more steps: the losses and the
 * final weights are the same to the bit. Bad optimizer files are refused with the model's state
 * untouched. */
#include "pipeline/train_ckpt.h"
#include "pipeline/train_ckpt_opt.h"
#include "pipeline/train_weights.h"
#include "train_util.h"

#include <stdio.h>
#include <unistd.h>

#define N_STEPS 6
static const int g_counts[2] = {1, 2};

static pl_train_local_cfg_t s_cfg(void)
{
    pl_train_local_cfg_t c = cfg_make(0.5f, false); /* clipping engaged: the norm matters too */
    c.opt.total_steps = N_STEPS;
    return c;
}

static void s_steps(pl_train_local_t *tl, int from, int to, double *losses)
{
    for (int k = from; k < to; k++) {
        int32_t tok[MB * (T + 1)];
        tokens_make(k, tok);
        pl_train_step_t r;
        cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_OK, "%s", pl_error_msg());
        losses[k] = r.loss;
    }
}

static void s_sh(const char *fmt, const char *arg)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), fmt, arg);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(train_resume, resumed_run_equals_the_uninterrupted_one_bitwise, .timeout = 120)
{
    pl_train_local_cfg_t c = s_cfg();
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, 2, MB, NULL, 0, &sched), PL_OK);
    double whole[N_STEPS], resumed[N_STEPS];
    model_t mw, mh;
    pl_train_local_t *tl = NULL;
    model_make(&mw, 42);
    cr_assert_eq(pl_train_local_create(&c, &mw.w, g_counts, 2, sched, &tl), PL_OK);
    s_steps(tl, 0, N_STEPS, whole);
    pl_train_local_destroy(&tl);

    /* the first half, then its checkpoint */
    char src[] = "/tmp/pl_tres_src_XXXXXX", dir[] = "/tmp/pl_tres_ck_XXXXXX";
    model_dir_make(src); /* its config.json has the test model's shape */
    cr_assert_not_null(mkdtemp(dir));
    model_make(&mh, 42);
    cr_assert_eq(pl_train_local_create(&c, &mh.w, g_counts, 2, sched, &tl), PL_OK);
    s_steps(tl, 0, N_STEPS / 2, resumed);
    for (int s = 0, l = 0; s < 2; l += g_counts[s], s++) {
        cr_assert_eq(pl_train_ckpt_stage_write(dir, &c, &mh.w, s, 2, l, l + g_counts[s]), PL_OK,
                     "%s", pl_error_msg());
        cr_assert_eq(pl_train_ckpt_opt_write(dir, &c, pl_train_local_opt(tl, s), s, 2, l,
                                             l + g_counts[s]),
                     PL_OK, "%s", pl_error_msg());
    }
    cr_assert_eq(pl_train_ckpt_index_write(dir, &c, g_counts, 2, src), PL_OK, "%s",
                 pl_error_msg());
    pl_train_state_t st = {.step = N_STEPS / 2, .n_stages = 2, .data_step = N_STEPS / 2,
                           .lr = pl_adamw_lr(&c.opt, N_STEPS / 2)};
    cr_assert_eq(pl_train_ckpt_state_write(dir, &st), PL_OK, "%s", pl_error_msg());
    pl_train_local_destroy(&tl);
    model_free(&mh);

    /* a fresh trainer from the directory's files alone */
    pl_train_state_t back;
    cr_assert_eq(pl_train_ckpt_state_read(dir, &back), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(back.step, N_STEPS / 2);
    cr_assert_eq(back.n_stages, 2);
    cr_assert_eq(back.data_step, N_STEPS / 2);
    cr_assert_eq(back.lr, st.lr);
    pl_model_t *pm = NULL;
    cr_assert_eq(pl_model_open(dir, &pm), PL_OK, "%s", pl_error_msg());
    pl_train_master_t *m0 = NULL, *m1 = NULL;
    cr_assert_eq(pl_train_master_load(pm, &c, 0, 1, true, false, &m0), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_train_master_load(pm, &c, 1, L, false, true, &m1), PL_OK, "%s",
                 pl_error_msg());
    pl_model_destroy(&pm);
    pl_train_weights_t *w0 = pl_train_master_weights(m0), *w1 = pl_train_master_weights(m1);
    pl_cpu_tlayer_t layers[L] = {w0->layers[0], w1->layers[1], w1->layers[2]};
    pl_train_weights_t w = {w0->embed, layers, w1->final_norm, w1->head};
    cr_assert_eq(pl_train_local_create(&c, &w, g_counts, 2, sched, &tl), PL_OK);
    for (int s = 0, l = 0; s < 2; l += g_counts[s], s++)
        cr_assert_eq(pl_train_ckpt_opt_read(dir, &c, pl_train_local_opt(tl, s), s, 2, l,
                                            l + g_counts[s]),
                     PL_OK, "%s", pl_error_msg());
    s_steps(tl, (int)back.data_step, N_STEPS, resumed);
    cr_assert_eq(memcmp(resumed, whole, sizeof(whole)), 0, "the loss curves differ");
    cr_assert(whole[N_STEPS - 1] < whole[0]);
    /* and the weights the two runs end with */
    float *pw[64];
    size_t nw[64];
    bool dw[64];
    int nt = model_tensors(&mw, pw, nw, dw);
    model_t mr = {.embed = w.embed, .norm = w.final_norm, .head = w.head};
    memcpy(mr.layers, layers, sizeof(layers));
    float *pr[64];
    size_t nr[64];
    bool dr[64];
    model_tensors(&mr, pr, nr, dr);
    for (int i = 0; i < nt; i++)
        cr_assert_eq(memcmp(pw[i], pr[i], nw[i] * sizeof(float)), 0, "tensor %d differs", i);
    for (int k = 0; k < N_STEPS; k++)
        cr_log_info("step %d: loss %.9f (whole) %.9f (resumed)", k, whole[k], resumed[k]);

    /* refusals: another split, a missing moment file; the optimizer is left as it was */
    pl_adamw_t *o1 = pl_train_local_opt(tl, 1);
    int steps_before = pl_adamw_steps(o1);
    cr_assert_eq(pl_train_ckpt_opt_read(dir, &c, o1, 1, 3, 1, L), PL_ERR_INVALID);
    s_sh("rm %s/optimizer-00002-of-00002.safetensors", dir);
    cr_assert_eq(pl_train_ckpt_opt_read(dir, &c, o1, 1, 2, 1, L), PL_ERR_NOT_FOUND, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_adamw_steps(o1), steps_before);
    /* a state file with a bad field names it */
    s_sh("printf '{\"step\": -1, \"n_stages\": 2, \"data_step\": 3, \"lr\": 0.1}' > "
         "%s/trainer_state.json", dir);
    cr_assert_eq(pl_train_ckpt_state_read(dir, &back), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "field 'step'"), "%s", pl_error_msg());
    pl_train_local_destroy(&tl);
    pl_train_master_destroy(&m0);
    pl_train_master_destroy(&m1);
    model_free(&mw);
    pl_train_ops_destroy(&sched);
    s_sh("rm -rf %s", src);
    s_sh("rm -rf %s", dir);
}
