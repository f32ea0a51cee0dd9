/* Tests of the in-process pipelined trainer: K steps on a tiny model give the same losses and
 * weights on 1, 2 and 3 stages under GPipe, 1F1B and ZB-H1 (bit-for-bit: the kernels see the same
 * shapes on every split), the same as a plain single-process loop (train_util.h), whose gradients
 * are those of the model written in double from its definition (finite differences), the
 * measured stash equals the schedule's prediction, and a tiny model learns a repetitive corpus. */
#include "train_util.h"

static const int g_split1[1] = {3}, g_split2[2] = {1, 2}, g_split3[3] = {1, 1, 1};

/* The model in double, independent of the CPU kernels: tensors g_dp[] in model_tensors' order. */
static double *g_dp[64];
static const int32_t *g_tok;

/* The step's mean loss over its MB microbatches: embedding, L layers, final norm, head, xent. */
static double loss_model(void)
{
    double x[T * 16], y[T * 16], l[T * V];
    double loss = 0;
    for (int mb = 0; mb < MB; mb++) {
        const int32_t *tk = g_tok + mb * (T + 1);
        for (int t = 0; t < T; t++)
            memcpy(x + t * 16, g_dp[0] + tk[t] * 16, sizeof(double) * 16);
        for (int k = 0; k < L; k++) {
            r_layer(&g_d, g_dp + 1 + 9 * k, x, T, g_inv_freq, y);
            memcpy(x, y, sizeof(x));
        }
        r_rmsnorm(x, g_dp[1 + 9 * L], T, 16, g_d.eps, y);
        r_matmul(y, T, 16, g_dp[2 + 9 * L], V, l);
        loss += r_xent(l, tk + 1, T, V) / MB;
    }
    return loss;
}

/* One step of the plain loop: its loss, and the derivative along 3 random directions of every
 * tensor (all 30 of them: a wrong backward kernel shows in the tensors before it), against
 * central differences of loss_model. */
Test(train_local, the_plain_loops_gradients_are_the_models, .fini = free_arena)
{
    model_t m;
    model_make(&m, 42);
    cfg_make(0, false);
    float *p[64], *g[64];
    size_t n[64];
    bool decay[64];
    int nt = model_tensors(&m, p, n, decay);
    double worst = 0;
    for (int i = 0; i < nt; i++) {
        g[i] = track(calloc(n[i], sizeof(float)));
        g_dp[i] = track(malloc(n[i] * sizeof(double)));
        for (size_t j = 0; j < n[i]; j++)
            g_dp[i][j] = p[i][j];
    }
    int32_t tok[MB * (T + 1)];
    tokens_make(0, tok);
    g_tok = tok;
    double loss = ref_step_grads(&m, tok, g);
    cr_assert(fabs(loss - loss_model()) <= 1e-6 * loss, "loss %.9g vs %.9g in double", loss,
              loss_model());
    for (int i = 0; i < nt; i++) {
        double *keep = track(malloc(n[i] * sizeof(double))), norm = 0;
        memcpy(keep, g_dp[i], n[i] * sizeof(double));
        for (size_t j = 0; j < n[i]; j++)
            norm += (double)g[i][j] * g[i][j];
        norm = sqrt(norm);
        cr_assert(norm > 1e-6, "tensor %d: its gradient is all zeros", i);
        for (int r = 0; r < 3; r++) {
            double *dir = drand(n[i], 1, 0), gv = 0, lp, lm, h = 1e-5;
            for (size_t j = 0; j < n[i]; j++)
                gv += dir[j] * g[i][j];
            for (size_t j = 0; j < n[i]; j++)
                g_dp[i][j] = keep[j] + h * dir[j];
            lp = loss_model();
            for (size_t j = 0; j < n[i]; j++)
                g_dp[i][j] = keep[j] - h * dir[j];
            lm = loss_model();
            memcpy(g_dp[i], keep, n[i] * sizeof(double));
            double fd = (lp - lm) / (2 * h), err = fabs(fd - gv) / (norm * sqrt((double)n[i]));
            worst = fmax(worst, err);
            /* |g . dir| is about |g| (dir's entries uniform in -1..1, n of them: |dir| ~ sqrt(n/3))
             */
            cr_assert(err <= 1e-5,
                      "tensor %d, direction %d: g . dir %.9g, finite differences %.9g (|g| %g)", i,
                      r, gv, fd, norm);
        }
    }
    cr_log_info("worst |fd - g . dir| / (|g| sqrt(n)): %.3g (limit 1e-5)", worst);
    model_free(&m);
}

Test(train_local, same_loss_on_1_2_3_stages_every_schedule_and_the_plain_loop)
{
    double ref[K], base[K];
    model_t mref, mbase;
    run_reference(ref, &mref);
    run_pipelined(PL_TRAIN_1F1B, g_split1, 1, 0, false, base, &mbase, true);
    cr_assert(ref[K - 1] < ref[0], "training lowers the loss: %g -> %g", ref[0], ref[K - 1]);
    for (int k = 0; k < K; k++)
        cr_assert(fabs(base[k] - ref[k]) <= 1e-6 * fabs(ref[k]), "step %d: %.9g vs plain %.9g", k,
                  base[k], ref[k]);
    const int *splits[3] = {g_split1, g_split2, g_split3};
    for (int S = 1; S <= 3; S++)
        for (int kd = 0; kd < PL_TRAIN_KIND_COUNT; kd++) {
            double l[K];
            model_t m;
            run_pipelined((pl_train_kind_t)kd, splits[S - 1], S, 0, false, l, &m, true);
            cr_assert_eq(memcmp(l, base, sizeof(l)), 0, "%s on %d stages: loss differs",
                         pl_train_kind_name((pl_train_kind_t)kd), S);
            cr_assert(model_equal(&m, &mbase), "%s on %d stages: weights differ",
                      pl_train_kind_name((pl_train_kind_t)kd), S);
            model_free(&m);
        }
    model_free(&mref);
    model_free(&mbase);
}

Test(train_local, recompute_is_bitwise_the_same)
{
    double a[K], b[K];
    model_t ma, mb;
    run_pipelined(PL_TRAIN_ZBH1, g_split3, 3, 0, false, a, &ma, true);
    run_pipelined(PL_TRAIN_ZBH1, g_split3, 3, 0, true, b, &mb, true);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
    cr_assert(model_equal(&ma, &mb));
    model_free(&ma);
    model_free(&mb);
}

Test(train_local, clipped_runs_agree_within_tolerance)
{
    /* the global norm is summed over stages in a different association on each split, so the
     * clipping factor may differ in its last bits: 1e-6 relative */
    double a[K], b[K];
    model_t ma, mb;
    run_pipelined(PL_TRAIN_1F1B, g_split1, 1, 0.05f, false, a, &ma, false);
    run_pipelined(PL_TRAIN_ZBH1, g_split2, 2, 0.05f, false, b, &mb, false);
    for (int k = 0; k < K; k++)
        cr_assert(fabs(a[k] - b[k]) <= 1e-6 * fabs(a[k]), "step %d: %.9g vs %.9g", k, a[k], b[k]);
    model_free(&ma);
    model_free(&mb);
}

Test(train_local, rejects_bad_tokens_and_splits_touching_nothing)
{
    pl_train_local_cfg_t c = cfg_make(0, false);
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_GPIPE, 2, MB, NULL, 0, &sched), PL_OK);
    model_t m, copy;
    model_make(&m, 42);
    model_make(&copy, 42);
    pl_train_local_t *tl = NULL;
    int bad_counts[2] = {1, 1};
    cr_assert_eq(pl_train_local_create(&c, &m.w, bad_counts, 2, sched, &tl), PL_ERR_INVALID);
    cr_assert_eq(pl_train_local_create(&c, &m.w, g_split3, 3, sched, &tl), PL_ERR_INVALID);
    cr_assert_null(tl);
    cr_assert_eq(pl_train_local_create(&c, &m.w, g_split2, 2, sched, &tl), PL_OK);
    int32_t tok[MB * (T + 1)];
    tokens_make(0, tok);
    tok[MB * (T + 1) - 1] = V;
    pl_train_step_t r;
    cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "vocab"), "%s", pl_error_msg());
    cr_assert(model_equal(&m, &copy), "a refused step changes no weight");
    tokens_make(0, tok);
    cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_OK);
    cr_assert(!model_equal(&m, &copy));
    pl_train_local_destroy(&tl);
    pl_train_local_destroy(&tl);
    pl_train_ops_destroy(&sched);
    model_free(&m);
    model_free(&copy);
}

Test(train_local, tiny_model_learns_a_repetitive_corpus, .timeout = 300)
{
    /* corpus: the cycle 0 1 2 ... 6 repeated; each sequence starts at its own offset. Chance
     * is ln(12) = 2.48 nats; after 300 steps the loss must be below 0.05. */
    pl_train_local_cfg_t c = cfg_make(1.0f, false);
    c.opt.lr = 0.01f, c.opt.min_lr = 0.0005f, c.opt.warmup_steps = 20, c.opt.total_steps = 300;
    c.opt.weight_decay = 0.01f;
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_ZBH1, 2, MB, NULL, 0, &sched), PL_OK);
    model_t m;
    model_make(&m, 7);
    pl_train_local_t *tl = NULL;
    cr_assert_eq(pl_train_local_create(&c, &m.w, g_split2, 2, sched, &tl), PL_OK);
    pl_train_step_t r = {0};
    double first = 0;
    for (int step = 0; step < 300; step++) {
        int32_t tok[MB * (T + 1)];
        for (int mb = 0; mb < MB; mb++)
            for (int i = 0; i <= T; i++)
                tok[mb * (T + 1) + i] = (int32_t)((step * 3 + mb * 2 + i) % 7);
        cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_OK);
        if (step == 0)
            first = r.loss;
    }
    cr_log_info("repetitive corpus: loss %.4f -> %.4f after 300 steps", first, r.loss);
    cr_assert_gt(first, 1.5);
    cr_assert_lt(r.loss, 0.05, "loss %g after 300 steps", r.loss);
    pl_train_local_destroy(&tl);
    pl_train_ops_destroy(&sched);
    model_free(&m);
}
