/* Tests of the training schedules: each stage's list, run by a checker written here, respects
 * every dependency and matches its sends with receives; the stash never exceeds the predicted
 * peak; predictions against closed forms; ZB-H1's bubble below 1F1B's; memory and the chooser. */
#include "scheduler/train_sched.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#define MAXS 8
#define MAXM 16

typedef struct {
    int f[MAXS][MAXM], b[MAXS][MAXM], w[MAXS][MAXM]; /* global sequence number, 0: not run */
    int peak[MAXS];
} trace_t;

/* Run the lists with blocking receives and unbounded sends; every op must run. */
static void check_lists(const pl_train_ops_t *t, trace_t *tr)
{
    int S = t->n_stages, M = t->n_mb, idx[MAXS] = {0}, seq = 0, stash[MAXS] = {0};
    int sent_act[MAXS][MAXM] = {{0}}, sent_grad[MAXS][MAXM] = {{0}};
    int recv_act[MAXS][MAXM] = {{0}}, recv_grad[MAXS][MAXM] = {{0}};
    memset(tr, 0, sizeof(*tr));
    for (bool progress = true; progress;) {
        progress = false;
        for (int s = 0; s < S; s++) {
            while (idx[s] < t->n_ops[s]) {
                pl_train_op_t op = t->ops[s][idx[s]];
                int m = op.mb;
                cr_assert(m >= 0 && m < M);
                if (op.kind == PL_TRAIN_OP_RECV_ACT) {
                    cr_assert(s > 0, "stage 0 receives no activations");
                    if (!sent_act[s - 1][m])
                        break;
                    recv_act[s][m]++;
                } else if (op.kind == PL_TRAIN_OP_RECV_GRAD) {
                    cr_assert(s < S - 1, "the last stage receives no gradients");
                    if (!sent_grad[s + 1][m])
                        break;
                    recv_grad[s][m]++;
                } else if (op.kind == PL_TRAIN_OP_SEND_ACT) {
                    cr_assert(s < S - 1 && tr->f[s][m], "stage %d sends act %d before its F", s, m);
                    sent_act[s][m]++;
                } else if (op.kind == PL_TRAIN_OP_SEND_GRAD) {
                    cr_assert(s > 0 && tr->b[s][m], "stage %d sends grad %d before its B", s, m);
                    sent_grad[s][m]++;
                } else if (op.kind == PL_TRAIN_OP_F) {
                    cr_assert(!tr->f[s][m], "F %d twice on %d", m, s);
                    cr_assert(s == 0 || recv_act[s][m], "F %d on %d before its input came", m, s);
                    tr->f[s][m] = ++seq;
                    if (++stash[s] > tr->peak[s])
                        tr->peak[s] = stash[s];
                } else if (op.kind == PL_TRAIN_OP_B) {
                    cr_assert(!tr->b[s][m] && tr->f[s][m], "B %d on %d: twice or before F", m, s);
                    cr_assert(s == S - 1 || recv_grad[s][m], "B %d on %d before its grad", m, s);
                    tr->b[s][m] = ++seq;
                } else {
                    cr_assert(!tr->w[s][m] && tr->b[s][m], "W %d on %d: twice or before B", m, s);
                    tr->w[s][m] = ++seq;
                    stash[s]--;
                }
                idx[s]++;
                progress = true;
            }
        }
    }
    for (int s = 0; s < S; s++) {
        cr_assert_eq(idx[s], t->n_ops[s], "%s S=%d M=%d: stage %d deadlocks at op %d",
                     pl_train_kind_name(t->kind), S, M, s, idx[s]);
        for (int m = 0; m < M; m++) {
            cr_assert(tr->f[s][m] && tr->b[s][m] && tr->w[s][m], "stage %d mb %d incomplete", s, m);
            if (s > 0)
                cr_assert_gt(tr->f[s][m], tr->f[s - 1][m]);
            if (s < S - 1) {
                cr_assert_gt(tr->b[s][m], tr->b[s + 1][m]);
                cr_assert_eq(sent_act[s][m], 1);
                cr_assert_eq(recv_grad[s][m], 1);
            }
            if (s > 0) {
                cr_assert_eq(recv_act[s][m], 1);
                cr_assert_eq(sent_grad[s][m], 1);
            }
            cr_assert_gt(tr->b[s][m], tr->f[s][m]);
            cr_assert_gt(tr->w[s][m], tr->b[s][m]);
            /* weight gradients accumulate in microbatch order on every schedule */
            if (m > 0)
                cr_assert_gt(tr->w[s][m], tr->w[s][m - 1]);
        }
    }
}

Test(sched_train, lists_respect_dependencies_and_stash_stays_under_prediction)
{
    pl_tsched_times_t uneven[MAXS];
    for (int s = 0; s < MAXS; s++)
        uneven[s] = (pl_tsched_times_t){1.0 + 0.3 * s, 1.1 + 0.2 * (s % 3), 0.7 + 0.1 * s};
    for (int k = 0; k < PL_TRAIN_KIND_COUNT; k++)
        for (int S = 1; S <= 5; S++)
            for (int M = 1; M <= 12; M++)
                for (int u = 0; u < 2; u++) {
                    pl_train_ops_t *t = NULL;
                    const pl_tsched_times_t *tm = u ? uneven : NULL;
                    cr_assert_eq(pl_tsched_build((pl_train_kind_t)k, S, M, tm, 0.05 * u, &t),
                                 PL_OK);
                    trace_t tr;
                    check_lists(t, &tr);
                    pl_tsched_pred_t p;
                    cr_assert_eq(pl_tsched_predict(t, tm, 0.05 * u, &p), PL_OK);
                    for (int s = 0; s < S; s++) {
                        cr_assert_leq(tr.peak[s], p.peak_stash[s]);
                        int want = k == PL_TRAIN_GPIPE  ? M
                                   : k == PL_TRAIN_1F1B ? (S - s < M ? S - s : M)
                                                        : -1;
                        if (want >= 0)
                            cr_assert_eq(p.peak_stash[s], want, "%s S=%d M=%d s=%d",
                                         pl_train_kind_name(t->kind), S, M, s);
                        else
                            cr_assert_leq(p.peak_stash[s], S < M ? S : M, "zb-h1 above 1F1B's");
                    }
                    pl_train_ops_destroy(&t);
                    cr_assert_null(t);
                }
}

Test(sched_train, predictions_match_closed_forms)
{
    /* equal stages, f = b = w = 1, no comm; a B sends its gradient before its W runs. GPipe: the
     * last F ends at M + S - 1, the gradient of the last microbatch reaches stage 0 S - 1 B's
     * later, and stage 0 then runs M (B, W) pairs: 3M + 2(S - 1). 1F1B (S <= M) takes the same:
     * stage 0 idles f + b per hop at the start and nowhere else. ZB-H1 within one op of the
     * zero-bubble paper's 3M + (S - 1)(f + b - w). */
    for (int S = 1; S <= 4; S++)
        for (int M = S; M <= 8; M++)
            for (int k = 0; k < PL_TRAIN_KIND_COUNT; k++) {
                pl_train_ops_t *t = NULL;
                pl_tsched_pred_t p;
                cr_assert_eq(pl_tsched_build((pl_train_kind_t)k, S, M, NULL, 0, &t), PL_OK);
                cr_assert_eq(pl_tsched_predict(t, NULL, 0, &p), PL_OK);
                double want = 3.0 * M + 2.0 * (S - 1);
                if (k == PL_TRAIN_ZBH1)
                    cr_assert(p.makespan >= 3.0 * M + (S - 1) - 1e-9 &&
                                  p.makespan <= 3.0 * M + (S - 1) + 1 + 1e-9,
                              "zb-h1 S=%d M=%d: %g", S, M, p.makespan);
                else
                    cr_assert_float_eq(p.makespan, want, 1e-9, "%s S=%d M=%d: %g",
                                       pl_train_kind_name(t->kind), S, M, p.makespan);
                cr_assert_float_eq(p.bubble, 1.0 - 3.0 * M / p.makespan, 1e-9);
                for (int s = 0; s < S; s++)
                    cr_assert_float_eq(p.busy[s], 3.0 * M, 1e-9);
                pl_train_ops_destroy(&t);
            }
}

Test(sched_train, zbh1_bubble_below_1f1b)
{
    pl_tsched_times_t uneven[4] = {{1, 1, 1}, {1.5, 1.2, 0.8}, {0.8, 1, 1}, {1.2, 1.1, 0.9}};
    for (int S = 2; S <= 4; S++)
        for (int M = S; M <= 12; M++)
            for (int u = 0; u < 2; u++) {
                const pl_tsched_times_t *tm = u ? uneven : NULL;
                pl_train_ops_t *a = NULL, *z = NULL;
                pl_tsched_pred_t pa, pz;
                cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, S, M, tm, 0, &a), PL_OK);
                cr_assert_eq(pl_tsched_build(PL_TRAIN_ZBH1, S, M, tm, 0, &z), PL_OK);
                cr_assert_eq(pl_tsched_predict(a, tm, 0, &pa), PL_OK);
                cr_assert_eq(pl_tsched_predict(z, tm, 0, &pz), PL_OK);
                /* strictly smaller on equal stages; never larger on uneven ones */
                if (u)
                    cr_assert_leq(pz.bubble, pa.bubble, "S=%d M=%d uneven", S, M);
                else
                    cr_assert_lt(pz.bubble, pa.bubble, "S=%d M=%d: zb-h1 %g vs 1f1b %g", S, M,
                                 pz.bubble, pa.bubble);
                cr_assert_leq(pz.makespan, pa.makespan);
                pl_train_ops_destroy(&a);
                pl_train_ops_destroy(&z);
            }
}

Test(sched_train, memory_and_chooser)
{
    pl_train_ops_t *g = NULL, *o = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_GPIPE, 2, 6, NULL, 0, &g), PL_OK);
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, 2, 6, NULL, 0, &o), PL_OK);
    pl_tsched_mem_t m = {.params = 1000, .weight_bytes = 2, .f_bytes = 100, .b_bytes = 40};
    /* bf16 weights + f32 master + f32 grads + two f32 moments = 18 bytes a parameter */
    cr_assert_float_eq(pl_tsched_stage_mem(g, 0, &m), 18000 + 6 * 100 + 40, 1e-9);
    cr_assert_float_eq(pl_tsched_stage_mem(o, 0, &m), 18000 + 2 * 100 + 40, 1e-9);
    cr_assert_float_eq(pl_tsched_stage_mem(o, 1, &m), 18000 + 100 + 40, 1e-9);
    m.weight_bytes = 4; /* f32 weights are the master */
    cr_assert_float_eq(pl_tsched_stage_mem(o, 1, &m), 16000 + 140, 1e-9);
    pl_train_ops_destroy(&g);
    pl_train_ops_destroy(&o);

    pl_tsched_mem_t mem[2] = {m, m};
    double roomy[2] = {1e9, 1e9}, tight[2] = {16000 + 2 * 100 + 40, 16000 + 2 * 100 + 40};
    pl_train_ops_t *t = NULL;
    pl_tsched_pred_t p;
    cr_assert_eq(pl_tsched_choose(2, 6, NULL, 0, mem, roomy, -1, &t, &p), PL_OK);
    cr_assert_eq(t->kind, PL_TRAIN_ZBH1, "least time when everything fits");
    pl_train_ops_destroy(&t);
    cr_assert_eq(pl_tsched_choose(2, 6, NULL, 0, mem, roomy, PL_TRAIN_GPIPE, &t, &p), PL_OK);
    cr_assert_eq(t->kind, PL_TRAIN_GPIPE, "the job's schedule: key wins");
    pl_train_ops_destroy(&t);
    cr_assert_eq(pl_tsched_choose(2, 6, NULL, 0, mem, tight, -1, &t, &p), PL_OK);
    cr_assert_neq(t->kind, PL_TRAIN_GPIPE, "GPipe's stash of 6 does not fit");
    for (int s = 0; s < 2; s++)
        cr_assert_leq(pl_tsched_stage_mem(t, s, &mem[s]), tight[s]);
    pl_train_ops_destroy(&t);
    cr_assert_eq(pl_tsched_choose(2, 6, NULL, 0, mem, tight, PL_TRAIN_GPIPE, &t, &p),
                 PL_ERR_INFEASIBLE);
    cr_assert(strstr(pl_error_msg(), "gpipe"), "%s", pl_error_msg());
    cr_assert_null(t);
}

Test(sched_train, names_and_bad_arguments)
{
    pl_train_kind_t k;
    cr_assert_eq(pl_train_kind_parse("zb-h1", &k), PL_OK);
    cr_assert_eq(k, PL_TRAIN_ZBH1);
    cr_assert_eq(pl_train_kind_parse("1f1b", &k), PL_OK);
    cr_assert_eq(k, PL_TRAIN_1F1B);
    cr_assert_eq(pl_train_kind_parse("interleaved", &k), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "interleaved"));
    pl_train_ops_t *t = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, 0, 4, NULL, 0, &t), PL_ERR_RANGE);
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, 2, 0, NULL, 0, &t), PL_ERR_RANGE);
    pl_tsched_times_t neg[2] = {{1, 1, 1}, {1, -1, 1}};
    cr_assert_eq(pl_tsched_build(PL_TRAIN_ZBH1, 2, 4, neg, 0, &t), PL_ERR_RANGE);
    cr_assert_null(t);
    /* a list that cannot run is refused by the prediction */
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, 2, 2, NULL, 0, &t), PL_OK);
    t->ops[0][0] =
        (pl_train_op_t){PL_TRAIN_OP_RECV_GRAD, 0}; /* stage 0 waits for what needs its F */
    pl_tsched_pred_t p;
    cr_assert_eq(pl_tsched_predict(t, NULL, 0, &p), PL_ERR_INFEASIBLE);
    cr_assert(strstr(pl_error_msg(), "stage 0"), "%s", pl_error_msg());
    pl_train_ops_destroy(&t);
}
