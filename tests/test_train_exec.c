/* Tests of the distributed training stage: 2 and 3 stages, each a thread with its own UCX worker
 * (as a daemon has), under GPipe, 1F1B and ZB-H1 give bit-for-bit the losses and weights of the
 * in-process trainer and the plain loop's losses; the stash each stage measures is the
 * schedule's prediction; bad op lists and a silent peer fail cleanly. */
#include "pipeline/train_exec.h"
#include "train_link_util.h"
#include "train_util.h"

#include <pthread.h>
#include <stdio.h>

typedef struct {
    int S, s, l0, l1;
    const pl_train_ops_t *sched;
    pl_train_local_cfg_t cfg;
    model_t *m;
    pthread_barrier_t *bar;
    char **addr; /* [S], published by each stage */
    double losses[K];
    size_t peak[K];
    double norm[K];
    pl_status_t rc;
    char err[256];
} stage_arg_t;

static void *stage_main(void *p)
{
    stage_arg_t *a = p;
    pl_ucx_t *u = NULL;
    pl_ucx_ep_t *prev = NULL, *next = NULL;
    pl_train_exec_t *x = NULL;
    a->rc = tl_open(a->S, a->s, a->bar, a->addr, &u, &prev, &next);
    pl_train_link_t link = {.ucx = u, .prev = prev, .next = next, .job = 5, .timeout_ms = 60000};
    if (a->rc == PL_OK)
        a->rc = pl_train_exec_create(&a->cfg, &a->m->w, a->s, a->S, a->l0, a->l1, a->sched, &link,
                                     &x);
    for (int k = 0; k < K && a->rc == PL_OK; k++) {
        int32_t tok[MB * (T + 1)];
        tokens_make(k, tok);
        pl_train_exec_step_t r;
        if ((a->rc = pl_train_exec_step(x, tok, &r)) == PL_OK) {
            a->losses[k] = r.loss, a->peak[k] = r.peak_stash_bytes, a->norm[k] = r.grad_norm;
            if (r.busy_s <= 0 || r.wall_s < r.busy_s)
                a->rc = pl_error(PL_ERR_INVALID, "busy %g s of a %g s step", r.busy_s, r.wall_s);
        }
    }
    if (a->rc != PL_OK)
        snprintf(a->err, sizeof(a->err), "%s", pl_error_msg());
    tl_close(a->bar, &x, &u);
    return NULL;
}

/* Run K steps on S threads; each stage's model copy is m[s]. */
static void run_exec(pl_train_kind_t kind, const int *counts, int S, float clip, model_t *m,
                     stage_arg_t *args)
{
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(kind, S, MB, NULL, 0, &sched), PL_OK);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)S);
    char *addr[3] = {0};
    pthread_t th[3];
    for (int s = 0, l = 0; s < S; l += counts[s], s++) {
        model_make(&m[s], 42);
        args[s] = (stage_arg_t){.S = S, .s = s, .l0 = l, .l1 = l + counts[s], .sched = sched,
                                .cfg = cfg_make(clip, false), .m = &m[s], .bar = &bar,
                                .addr = addr};
    }
    for (int s = 0; s < S; s++)
        pthread_create(&th[s], NULL, stage_main, &args[s]);
    for (int s = 0; s < S; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < S; s++) {
        cr_assert_eq(args[s].rc, PL_OK, "%s stage %d: %s", pl_train_kind_name(kind), s,
                     args[s].err);
        free(addr[s]);
    }
    /* the peak stash each stage measured is what the schedule predicts */
    for (int s = 0; s < S; s++) {
        bool last = s == S - 1;
        double head = last ? sizeof(float) * (double)T * (3 * g_d.hidden + V) : 0;
        double f = counts[s] * (double)pl_cpu_tstash_f_bytes(&g_d, T, false) + head;
        double b = counts[s] * (double)pl_cpu_tstash_b_bytes(&g_d, T, false);
        for (int k = 0; k < K; k++)
            cr_assert_eq((double)args[s].peak[k], pl_tsched_stash_bytes(sched, s, f, b),
                         "%s stage %d: measured %zu", pl_train_kind_name(kind), s,
                         args[s].peak[k]);
    }
    pthread_barrier_destroy(&bar);
    pl_train_ops_destroy(&sched);
}

/* Stage s's tensors of a equal b's. */
static bool stage_equal(model_t *a, model_t *b, int l0, int l1, bool first, bool last)
{
    size_t sz[9], H = (size_t)g_d.hidden;
    pl_cpu_tlayer_sizes(&g_d, sz);
    if (first && memcmp(a->embed, b->embed, V * H * sizeof(float)))
        return false;
    for (int l = l0; l < l1; l++)
        for (int i = 0; i < 9; i++)
            if (memcmp(*pl_cpu_tlayer_field(&a->layers[l], i),
                       *pl_cpu_tlayer_field(&b->layers[l], i), sz[i] * sizeof(float)))
                return false;
    return !last || (!memcmp(a->norm, b->norm, H * sizeof(float)) &&
                     !memcmp(a->head, b->head, V * H * sizeof(float)));
}

static const int g_split2[2] = {1, 2}, g_split3[3] = {1, 1, 1};

static void check_split(const int *counts, int S)
{
    double ref[K], local[K];
    model_t mref, mlocal;
    run_reference(ref, &mref);
    for (int kd = 0; kd < PL_TRAIN_KIND_COUNT; kd++) {
        pl_train_kind_t kind = (pl_train_kind_t)kd;
        const char *name = pl_train_kind_name(kind);
        run_pipelined(kind, counts, S, 0, false, local, &mlocal, false);
        model_t m[3];
        stage_arg_t args[3];
        run_exec(kind, counts, S, 0, m, args);
        for (int s = 0; s < S; s++) {
            cr_assert_eq(memcmp(args[s].losses, local, sizeof(local)), 0,
                         "%s stage %d of %d: losses differ from train_local", name, s, S);
            cr_assert_eq(memcmp(args[s].norm, args[0].norm, sizeof(args[0].norm)), 0);
            int l0 = args[s].l0, l1 = args[s].l1;
            cr_assert(stage_equal(&m[s], &mlocal, l0, l1, s == 0, s == S - 1),
                      "%s stage %d of %d: weights differ from train_local", name, s, S);
            model_free(&m[s]);
        }
        for (int k = 0; k < K; k++)
            cr_assert(fabs(local[k] - ref[k]) <= 1e-6 * fabs(ref[k]),
                      "%s step %d: %.9g vs the plain loop's %.9g", name, k, local[k], ref[k]);
        cr_log_info("%s on %d stages: loss %.6f -> %.6f, bitwise train_local's", name, S,
                    args[0].losses[0], args[0].losses[K - 1]);
        model_free(&mlocal);
    }
    cr_assert(ref[K - 1] < ref[0]);
    model_free(&mref);
}

Test(train_exec, two_stages_every_schedule_equal_train_local_and_the_plain_loop, .timeout = 300)
{
    check_split(g_split2, 2);
}

Test(train_exec, three_stages_every_schedule_equal_train_local_and_the_plain_loop,
     .timeout = 300)
{
    check_split(g_split3, 3);
}

Test(train_exec, clipping_uses_the_norm_summed_over_stages_bitwise, .timeout = 300)
{
    /* with clipping engaged every update depends on the global norm: the chain's sum in stage
     * order is train_local's, so the runs agree to the bit */
    double local[K];
    model_t mlocal, m[3];
    stage_arg_t args[3];
    run_pipelined(PL_TRAIN_ZBH1, g_split3, 3, 0.05f, false, local, &mlocal, false);
    run_exec(PL_TRAIN_ZBH1, g_split3, 3, 0.05f, m, args);
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(memcmp(args[s].losses, local, sizeof(local)), 0, "stage %d", s);
        cr_assert(stage_equal(&m[s], &mlocal, s, s + 1, s == 0, s == 2), "stage %d weights", s);
        model_free(&m[s]);
    }
    model_free(&mlocal);
}

Test(train_exec, refuses_op_lists_and_links_that_do_not_fit)
{
    pl_train_local_cfg_t c = cfg_make(0, false);
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, 2, MB, NULL, 0, &sched), PL_OK);
    model_t m;
    model_make(&m, 42);
    pl_ucx_t *u = NULL, *v = NULL;
    char *addr = NULL;
    pl_ucx_ep_t *ep = NULL;
    cr_assert_eq(pl_ucx_create(&u), PL_OK);
    cr_assert_eq(pl_ucx_create(&v), PL_OK);
    cr_assert_eq(pl_ucx_address(v, &addr), PL_OK);
    cr_assert_eq(pl_ucx_connect(u, addr, &ep), PL_OK);
    pl_train_exec_t *x = NULL;
    pl_train_link_t none = {.ucx = u, .timeout_ms = 100};
    pl_train_link_t to_next = {.ucx = u, .next = ep, .timeout_ms = 100};
    /* stage 0 of 2 needs its next endpoint; a 3-stage index is out of range */
    cr_assert_eq(pl_train_exec_create(&c, &m.w, 0, 2, 0, 1, sched, &none, &x), PL_ERR_INVALID);
    cr_assert_eq(pl_train_exec_create(&c, &m.w, 2, 2, 0, 1, sched, &to_next, &x),
                 PL_ERR_INVALID);
    cr_assert_eq(pl_train_exec_create(&c, &m.w, 0, 2, 0, L + 1, sched, &to_next, &x),
                 PL_ERR_INVALID);
    /* an op list that receives activations on stage 0 or names a microbatch past n_mb */
    pl_train_op_t saved = sched->ops[0][0];
    sched->ops[0][0] = (pl_train_op_t){PL_TRAIN_OP_RECV_ACT, 0};
    cr_assert_eq(pl_train_exec_create(&c, &m.w, 0, 2, 0, 1, sched, &to_next, &x),
                 PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "op 0"), "%s", pl_error_msg());
    sched->ops[0][0] = (pl_train_op_t){PL_TRAIN_OP_F, MB};
    cr_assert_eq(pl_train_exec_create(&c, &m.w, 0, 2, 0, 1, sched, &to_next, &x),
                 PL_ERR_INVALID);
    sched->ops[0][0] = saved;
    cr_assert_null(x);

    /* stage 0 alone: its peer never answers, so the step times out and changes no weight */
    model_t copy;
    model_make(&copy, 42);
    cr_assert_eq(pl_train_exec_create(&c, &m.w, 0, 2, 0, 1, sched, &to_next, &x), PL_OK, "%s",
                 pl_error_msg());
    int32_t tok[MB * (T + 1)];
    tokens_make(0, tok);
    pl_train_exec_step_t r;
    tok[3] = -1;
    cr_assert_eq(pl_train_exec_step(x, tok, &r), PL_ERR_RANGE);
    tokens_make(0, tok);
    pl_status_t rc = pl_train_exec_step(x, tok, &r);
    cr_assert(rc == PL_ERR_TIMEOUT, "%s: %s", pl_status_str(rc), pl_error_msg());
    cr_assert(model_equal(&m, &copy), "a failed step changes no weight");
    pl_train_exec_destroy(&x);
    pl_train_exec_destroy(&x);
    pl_ucx_destroy(&u);
    pl_ucx_destroy(&v);
    free(addr);
    pl_train_ops_destroy(&sched);
    model_free(&m);
    model_free(&copy);
}
