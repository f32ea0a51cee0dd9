/* Planning time of the scheduler for 32/80/128 layers x 4/16/64 devices (fixed order, full plan,
 * order search) and the exact order search at 12 devices, beside a plain O(n L^2) DP. */
#include "common/util.h"
#include "scheduler/catalog.h"
#include "scheduler/plan.h"
#include "tests/sched_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXDEV 64

static const char *s_mix[] = {"H100 SXM", "A100 80GB", "RTX 4090", "MI250X",
                              "L40S",     "RTX 3090",  "MI210",    "EPYC 9654"};

typedef struct {
    pl_sched_model_t model;
    pl_sched_device_t devs[MAXDEV];
    pl_plan_input_t in;
} s_setup_t;

static void s_make(s_setup_t *s, int layers, int n_dev, pl_sched_order_t order)
{
    memset(s, 0, sizeof(*s));
    /* Llama-70B-shaped layers (1.7 GB each in bf16) */
    s->model = (pl_sched_model_t){.n_layers = layers,
                                  .hidden = 8192,
                                  .intermediate = 28672,
                                  .n_heads = 64,
                                  .n_kv_heads = 8,
                                  .head_dim = 128,
                                  .vocab = 128256,
                                  .weight_bytes = 2,
                                  .kv_bytes = 2,
                                  .act_bytes = 4};
    for (int i = 0; i < n_dev; i++) {
        char node[32], host[32];
        snprintf(node, sizeof(node), "node%d", i / 4);
        snprintf(host, sizeof(host), "host%d", i / 4);
        /* a little spread so devices of one model differ as calibrated devices do */
        double eff = 0.55 + 0.3 * pl_rand_uniform(42, (uint64_t)i);
        pl_sched_catalog_device(s_mix[(i * 3 + i / 4) % 8], eff, eff, node, host, &s->devs[i]);
        s->devs[i].index = i % 4;
    }
    s->in.model = &s->model;
    s->in.devices = s->devs;
    s->in.n_devices = n_dev;
    s->in.job = (pl_sched_job_t){
        .n_seqs = 32, .prompt_avg = 512, .prompt_max = 1024, .max_new_tokens = 256};
    s->in.options.field_mask = PL_PLAN_OPT_ORDER;
    s->in.options.order = order;
}

/* Seconds per call: repeat until about 0.2 s has passed (at least twice). */
#define S_TIME(result, call)                                                                       \
    do {                                                                                           \
        int reps_ = 0;                                                                             \
        double t0_ = pl_now(), el_;                                                                \
        do {                                                                                       \
            call;                                                                                  \
            reps_++;                                                                               \
            el_ = pl_now() - t0_;                                                                  \
        } while (el_ < 0.2 || reps_ < 2);                                                          \
        (result) = el_ / reps_;                                                                    \
    } while (0)

/* The textbook O(n L^2) DP over the fixed order (every device used, no memory pruning tricks,
 * tests/sched_ref.h's, as test_sched_plan checks the planner against it): the reference the
 * fixed-order partition is compared with. */
static double s_plain_dp(const pl_sched_eval_t *ev, const int *seq, int m)
{
    double *h = malloc(sizeof(double) * (size_t)(pl_sched_eval_layers(ev) + 1) * 2);
    double best = h ? sched_ref_chain(ev, seq, m, h) : NAN;
    free(h);
    return best;
}

static void s_ms(char *buf, size_t n, double s, pl_status_t st)
{
    if (st != PL_OK && st != PL_ERR_INFEASIBLE)
        snprintf(buf, n, "error");
    else
        snprintf(buf, n, "%9.3f%s", s * 1e3, st == PL_ERR_INFEASIBLE ? "*" : " ");
}

int main(void)
{
    const int layers[] = {32, 80, 128}, devices[] = {4, 16, 64};
    printf("scheduler planning time in ms (* = reported infeasible)\n");
    printf("%-7s %-8s %-12s %-12s %-12s %-12s %-12s %-9s %s\n", "layers", "devices", "plain DP",
           "partition", "plan fixed", "search", "plan search", "stages", "how");
    for (size_t li = 0; li < 3; li++) {
        for (size_t di = 0; di < 3; di++) {
            s_setup_t s;
            s_make(&s, layers[li], devices[di], PL_SCHED_ORDER_FIXED);
            pl_sched_eval_t *ev = NULL;
            if (pl_sched_eval_new(&s.in, 32, 8, &ev) != PL_OK) {
                printf("eval: %s\n", pl_error_msg());
                return 1;
            }
            int order[MAXDEV];
            for (int i = 0; i < devices[di]; i++)
                order[i] = i;
            pl_sched_split_t sp;
            pl_status_t st_part = PL_OK, st_search = PL_OK, st_pf = PL_OK, st_ps = PL_OK;
            double t_plain, t_part, t_search, t_pf, t_ps;
            volatile double sink = 0;
            S_TIME(t_plain, sink += s_plain_dp(ev, order, devices[di]));
            S_TIME(t_part, st_part = pl_sched_partition(ev, order, devices[di], true, 0, &sp));
            bool exact = false;
            S_TIME(t_search,
                   st_search = pl_sched_search(ev, order, devices[di], true, 0, 12, &sp, &exact));
            pl_plan_t *p = NULL;
            S_TIME(t_pf, st_pf = pl_plan(&s.in, &p); pl_plan_destroy(&p));
            s.in.options.order = PL_SCHED_ORDER_SEARCH;
            S_TIME(t_ps, st_ps = pl_plan(&s.in, &p); if (st_ps == PL_OK) sink += p->n_stages;
                   pl_plan_destroy(&p));
            st_ps = pl_plan(&s.in, &p);
            char c1[24], c2[24], c3[24], c4[24], c5[24];
            s_ms(c1, sizeof(c1), t_plain, PL_OK);
            s_ms(c2, sizeof(c2), t_part, st_part);
            s_ms(c3, sizeof(c3), t_pf, st_pf);
            s_ms(c4, sizeof(c4), t_search, st_search);
            s_ms(c5, sizeof(c5), t_ps, st_ps);
            printf("%-7d %-8d %-12s %-12s %-12s %-12s %-12s %-9d %s\n", layers[li], devices[di], c1,
                   c2, c3, c4, c5, st_ps == PL_OK ? p->n_stages : 0,
                   st_ps == PL_OK ? p->search : "-");
            pl_plan_destroy(&p);
            pl_sched_eval_destroy(&ev);
        }
    }
    printf("\nexact order and selection search (DP over subsets), 12 devices on 3 hosts\n");
    printf("%-7s %-12s %-12s %-9s %s\n", "layers", "search", "plan", "stages", "bottleneck");
    for (size_t li = 0; li < 3; li++) {
        s_setup_t s;
        s_make(&s, layers[li], 12, PL_SCHED_ORDER_SEARCH);
        pl_sched_eval_t *ev = NULL;
        if (pl_sched_eval_new(&s.in, 32, 8, &ev) != PL_OK)
            return 1;
        int devs[12];
        for (int i = 0; i < 12; i++)
            devs[i] = i;
        pl_sched_split_t sp;
        pl_status_t st = PL_OK, st_p = PL_OK;
        double t_s, t_p;
        S_TIME(t_s, st = pl_sched_search(ev, devs, 12, true, 0, 12, &sp, NULL));
        pl_plan_t *p = NULL;
        S_TIME(t_p, st_p = pl_plan(&s.in, &p); pl_plan_destroy(&p));
        char c1[24], c2[24];
        s_ms(c1, sizeof(c1), t_s, st);
        s_ms(c2, sizeof(c2), t_p, st_p);
        printf("%-7d %-12s %-12s %-9d %.4g s\n", layers[li], c1, c2, st == PL_OK ? sp.n_stages : 0,
               st == PL_OK ? sp.bottleneck : 0.0);
        pl_sched_eval_destroy(&ev);
    }
    printf("\ntargets: partition (fixed order) at 128 layers x 16 devices under 1 ms; exact "
           "search at 12 devices under 100 ms\n");
    return 0;
}
