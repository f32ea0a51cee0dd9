/* Tests of data-parallel training (pipeline/train_allreduce.c): 2 replicas x 2 stages, each stage
 * a thread with its own UCX worker as a daemon has, every replica on half the step's sequences
 * and the stages' gradients averaged across replicas by the ring all-reduce, equal 1 replica of
 * 2 stages on the whole global batch (train_local). Not to the bit: one replica adds the 4
 * microbatches' gradients in float one after another, two replicas add 2 each and then average
 * the two sums in double, so the bits of a gradient may differ by rounding (relative 1e-6 at
 * most per step here) and the losses agree within 1e-5 relative over K steps. The replicas end
 * with the same weights to the bit (each chunk's sum is made once and passed round), and a
 * replica that goes silent fails the others' step by timeout. The ring's messages carry the
 * assignment's data-plane token: a forged sum (the right tag and length, another token) that
 * lands before each step's real one is dropped and counted, and the run is the unforged one's to
 * the bit. */
#include "pipeline/train_allreduce.h"
#include "pipeline/train_exec.h"
#include "train_util.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define R 2
#define S 2
#define MB_R (MB / R) /* microbatches per replica */

static const int g_split[S] = {1, 2};
static const pl_act_token_t g_token = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

typedef struct {
    int r, s;
    model_t m;
    pthread_barrier_t *bar;
    char *(*addr)[S]; /* [R][S] */
    const pl_train_ops_t *sched;
    int steps;         /* K; fewer for the silent replica */
    int timeout_ms;
    bool forge;           /* an attacker sends a forged sum to this stage before every step */
    uint64_t ar_dropped;  /* what its ring dropped */
    double losses[K];
    pl_status_t rc;
    char err[256];
} arg_t;

/* From a worker of its own (outside the ring, as any process that learnt the address): for each
 * of the K steps, a sum for the first reduce-scatter round of replica 0 (the chunk it adds:
 * chunk 1 of 2, [len / 2, len) of the stage's gradients and loss) with the ring's tag, header
 * and length, and a wrong token, its values 1e3 each (added, they would change every step). */
static pl_status_t s_forge(pl_train_exec_t *x, const char *target, pl_ucx_t **evil_p)
{
    pl_adamw_t *opt = pl_train_exec_opt(x);
    size_t len = 1;
    for (int i = 0; i < pl_adamw_n_tensors(opt); i++) {
        float *g;
        size_t n;
        pl_adamw_grad(opt, i, &g, &n);
        len += n;
    }
    size_t lo = len / R, n = len - lo, bytes = 24 + PL_ACT_TOKEN_BYTES + n * sizeof(double);
    pl_ucx_t *evil = NULL;
    pl_ucx_ep_t *ep = NULL;
    pl_status_t rc;
    if ((rc = pl_ucx_create(&evil)) || (rc = pl_ucx_progress_start(evil)) ||
        (rc = pl_ucx_connect(evil, target, &ep)))
        goto out;
    for (uint32_t k = 0; k < K && rc == PL_OK; k++) {
        uint32_t h[6] = {0x52414c50u, 9, k, 0x8000u, 1, (uint32_t)n};
        uint8_t *buf = malloc(bytes);
        if (!buf) {
            rc = pl_error(PL_ERR_NOMEM, "forge: out of memory");
            break;
        }
        memcpy(buf, h, sizeof(h));
        memset(buf + 24, 0xee, PL_ACT_TOKEN_BYTES); /* not the job's token */
        for (size_t i = 0; i < n; i++)
            memcpy(buf + 24 + PL_ACT_TOKEN_BYTES + i * sizeof(double), &(double){1e3},
                   sizeof(double));
        rc = pl_ucx_send(evil, ep, pl_act_tag(9, PL_ACT_SUM, 0x8000u, k), buf, bytes);
    }
    /* on the target's queue before the barrier: sent out, and a little more (a rendezvous send
     * completes only when the target takes it, so the wait is bounded) */
    for (int i = 0; i < 2000 && rc == PL_OK && pl_ucx_pending(evil) > 0; i++) {
        pl_ucx_progress(evil);
        usleep(1000);
    }
    for (int i = 0; i < 100 && rc == PL_OK; i++) {
        pl_ucx_progress(evil);
        usleep(1000);
    }
out:
    *evil_p = evil;
    return rc;
}

static void *s_stage(void *p)
{
    arg_t *a = p;
    pl_ucx_t *u = NULL;
    pl_ucx_ep_t *prev = NULL, *next = NULL, *peer = NULL;
    pl_train_exec_t *x = NULL;
    pl_train_ar_t *ar = NULL;
    pl_train_local_cfg_t cfg = cfg_make(0.5f, false);
    cfg.n_mb = MB_R;
    int l0 = a->s == 0 ? 0 : g_split[0], l1 = l0 + g_split[a->s];
    a->rc = pl_ucx_create(&u);
    if (a->rc == PL_OK)
        a->rc = pl_ucx_address(u, &a->addr[a->r][a->s]);
    pthread_barrier_wait(a->bar);
    if (a->rc == PL_OK && a->s > 0)
        a->rc = pl_ucx_connect(u, a->addr[a->r][a->s - 1], &prev);
    if (a->rc == PL_OK && a->s < S - 1)
        a->rc = pl_ucx_connect(u, a->addr[a->r][a->s + 1], &next);
    if (a->rc == PL_OK) /* two replicas: the other one is both ring neighbours */
        a->rc = pl_ucx_connect(u, a->addr[1 - a->r][a->s], &peer);
    if (a->rc == PL_OK)
        a->rc = pl_train_ar_create(u, peer, peer, a->r, R, 9, &g_token, NULL, a->timeout_ms,
                                   NULL, &ar);
    pl_train_link_t link = {.ucx = u, .prev = prev, .next = next, .job = 9, .token = g_token,
                            .timeout_ms = a->timeout_ms, .dp = ar};
    if (a->rc == PL_OK)
        a->rc = pl_train_exec_create(&cfg, &a->m.w, a->s, S, l0, l1, a->sched, &link, &x);
    pl_ucx_t *evil = NULL;
    if (a->forge && a->rc == PL_OK)
        a->rc = s_forge(x, a->addr[a->r][a->s], &evil);
    pthread_barrier_wait(a->bar); /* the forged sums are on their way before any real one */
    for (int k = 0; k < a->steps && a->rc == PL_OK; k++) {
        int32_t tok[MB * (T + 1)];
        tokens_make(k, tok);
        pl_train_exec_step_t out;
        /* replica r trains on the step's windows [r * MB_R, (r + 1) * MB_R) */
        if ((a->rc = pl_train_exec_step(x, tok + a->r * MB_R * (T + 1), &out)) == PL_OK)
            a->losses[k] = out.loss;
    }
    if (a->rc != PL_OK)
        snprintf(a->err, sizeof(a->err), "%s", pl_error_msg());
    pthread_barrier_wait(a->bar);
    a->ar_dropped = ar ? pl_train_ar_dropped(ar) : 0;
    pl_train_exec_destroy(&x);
    pl_train_ar_destroy(&ar);
    pl_ucx_destroy(&evil);
    pthread_barrier_wait(a->bar);
    pl_ucx_destroy(&u);
    return NULL;
}

static void s_run(arg_t *args, int silent_steps, bool forge)
{
    pl_train_ops_t *sched = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, S, MB_R, NULL, 0, &sched), PL_OK);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, R * S);
    char *addr[R][S] = {{0}};
    pthread_t th[R * S];
    for (int i = 0; i < R * S; i++) {
        arg_t *a = &args[i];
        *a = (arg_t){.r = i / S, .s = i % S, .bar = &bar, .addr = addr, .sched = sched,
                     .steps = K, .timeout_ms = silent_steps >= 0 ? 5000 : 60000,
                     .forge = forge && i == 0};
        if (silent_steps >= 0 && a->r == 1)
            a->steps = silent_steps;
        model_make(&a->m, 42);
        pthread_create(&th[i], NULL, s_stage, a);
    }
    for (int i = 0; i < R * S; i++)
        pthread_join(th[i], NULL);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++)
            free(addr[r][s]);
    pthread_barrier_destroy(&bar);
    pl_train_ops_destroy(&sched);
}

/* Largest |a - b| / (|b| + 1e-3) over every weight of the model's stage tensors. */
static double s_max_rel(model_t *a, model_t *b)
{
    float *pa[64], *pb[64];
    size_t na[64], nb[64];
    bool da[64], db[64];
    int n = model_tensors(a, pa, na, da);
    model_tensors(b, pb, nb, db);
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < na[i]; j++) {
            double d = fabs((double)pa[i][j] - pb[i][j]) / (fabs((double)pb[i][j]) + 1e-3);
            worst = d > worst ? d : worst;
        }
    return worst;
}

Test(train_dp, two_replicas_of_two_stages_equal_one_replica_with_the_global_batch,
     .timeout = 180)
{
    double ref[K];
    model_t mref;
    pl_train_local_cfg_t c = cfg_make(0.5f, false);
    pl_train_ops_t *sched = NULL;
    pl_train_local_t *tl = NULL;
    cr_assert_eq(pl_tsched_build(PL_TRAIN_1F1B, S, MB, NULL, 0, &sched), PL_OK);
    model_make(&mref, 42);
    cr_assert_eq(pl_train_local_create(&c, &mref.w, g_split, S, sched, &tl), PL_OK);
    for (int k = 0; k < K; k++) {
        int32_t tok[MB * (T + 1)];
        tokens_make(k, tok);
        pl_train_step_t r;
        cr_assert_eq(pl_train_local_step(tl, tok, &r), PL_OK, "%s", pl_error_msg());
        ref[k] = r.loss;
    }
    pl_train_local_destroy(&tl);
    pl_train_ops_destroy(&sched);

    arg_t a[R * S];
    s_run(a, -1, false);
    for (int i = 0; i < R * S; i++)
        cr_assert_eq(a[i].rc, PL_OK, "replica %d stage %d: %s", a[i].r, a[i].s, a[i].err);
    for (int i = 1; i < R * S; i++) /* every replica and stage saw the same mean loss */
        cr_assert_eq(memcmp(a[i].losses, a[0].losses, sizeof(a[0].losses)), 0,
                     "replica %d stage %d: another loss curve", a[i].r, a[i].s);
    for (int k = 0; k < K; k++) {
        cr_assert(fabs(a[0].losses[k] - ref[k]) <= 1e-5 * fabs(ref[k]),
                  "step %d: %.9g on 2 x 2, %.9g on 1 x 2", k, a[0].losses[k], ref[k]);
        cr_log_info("step %d: loss %.9f (2 replicas) %.9f (1 replica)", k, a[0].losses[k],
                    ref[k]);
    }
    /* the replicas' weights are one model, to the bit; and that model is the one replica's */
    model_t m0 = a[0].m, m1 = a[S].m; /* stage 0 of each replica holds layer 0 and the embed */
    for (int l = g_split[0]; l < L; l++) {
        m0.layers[l] = a[1].m.layers[l];
        m1.layers[l] = a[S + 1].m.layers[l];
    }
    m0.norm = a[1].m.norm, m0.head = a[1].m.head;
    m1.norm = a[S + 1].m.norm, m1.head = a[S + 1].m.head;
    cr_assert_eq(s_max_rel(&m0, &m1), 0.0, "the replicas' weights differ");
    double rel = s_max_rel(&m0, &mref);
    cr_assert(rel < 1e-4, "weights %.3g relative from one replica's", rel);
    cr_log_info("weights within %.3g (relative) of one replica's", rel);
    for (int i = 0; i < R * S; i++)
        model_free(&a[i].m);
    model_free(&mref);
}

Test(train_dp, a_silent_replica_fails_the_others_step, .timeout = 120)
{
    arg_t a[R * S];
    s_run(a, 1, false); /* replica 1 stops after one step */
    for (int i = 0; i < S; i++) {
        cr_assert_neq(a[i].rc, PL_OK, "replica 0 stage %d went on alone", i);
        cr_assert(a[i].losses[0] > 0, "the first step was taken");
    }
    for (int i = S; i < R * S; i++)
        cr_assert_eq(a[i].rc, PL_OK, "replica 1 stage %d: %s", a[i].s, a[i].err);
    for (int i = 0; i < R * S; i++)
        model_free(&a[i].m);
}

Test(train_dp, bad_rings_are_refused)
{
    pl_ucx_t *u = NULL;
    pl_train_ar_t *ar = NULL;
    cr_assert_eq(pl_ucx_create(&u), PL_OK);
    cr_assert_eq(pl_train_ar_create(u, NULL, NULL, 0, 2, 1, &g_token, NULL, 100, NULL, &ar),
                 PL_ERR_INVALID);
    cr_assert_null(ar);
    pl_ucx_destroy(&u);
}

Test(train_dp, a_forged_sum_is_dropped_and_counted, .timeout = 180)
{
    arg_t clean[R * S], forged[R * S];
    s_run(clean, -1, false);
    s_run(forged, -1, true);
    for (int i = 0; i < R * S; i++) {
        cr_assert_eq(clean[i].rc, PL_OK, "replica %d stage %d: %s", clean[i].r, clean[i].s,
                     clean[i].err);
        cr_assert_eq(forged[i].rc, PL_OK, "forged: replica %d stage %d: %s", forged[i].r,
                     forged[i].s, forged[i].err);
        cr_assert_eq(memcmp(forged[i].losses, clean[i].losses, sizeof(clean[i].losses)), 0,
                     "replica %d stage %d: the forged sums changed the loss curve", forged[i].r,
                     forged[i].s);
        /* each forged sum that landed before its step's real one was taken and dropped (one
         * that came after stays unmatched: a loaded machine may reorder a few) */
        cr_assert(i == 0 ? forged[i].ar_dropped >= 1 && forged[i].ar_dropped <= K
                         : forged[i].ar_dropped == 0,
                  "replica %d stage %d: %llu sums dropped", forged[i].r, forged[i].s,
                  (unsigned long long)forged[i].ar_dropped);
        if (i == 0)
            cr_log_info("%llu of %d forged sums dropped", (unsigned long long)forged[i].ar_dropped,
                        K);
        cr_assert_eq(clean[i].ar_dropped, 0u);
    }
    for (int i = 0; i < R * S; i++) { /* and the weights they ended with, to the bit */
        model_t *a = &forged[i].m, *b = &clean[i].m;
        cr_assert_eq(s_max_rel(a, b), 0.0, "replica %d stage %d: other weights", forged[i].r,
                     forged[i].s);
        model_free(a);
        model_free(b);
    }
}
