/* Planner exactness: on random instances the partition and the order search find the same
 * bottleneck as brute force, memory caps hold, and infeasible instances are reported. */
#include "common/util.h"
#include "scheduler/plan.h"
#include "tests/sched_ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 8
#define MAXL 96

typedef struct {
    pl_sched_layer_cost_t layers[MAXL];
    pl_sched_costs_t costs;
    pl_sched_device_t devs[MAXD];
    pl_sched_link_t links[MAXD * MAXD];
    pl_plan_input_t in;
    int n, L;
} inst_t;

static uint64_t g_key;
static uint64_t g_ctr;

static double urand(void)
{
    return pl_rand_uniform(g_key, g_ctr++);
}

static int irand(int lo, int hi) /* inclusive */
{
    return lo + (int)(pl_rand_u64(g_key, g_ctr++) % (uint64_t)(hi - lo + 1));
}

static double logu(double lo, double hi)
{
    return lo * pow(hi / lo, urand());
}

/* A random instance: mixed speeds (CPU-like to H100-like), memory caps from generous to too
 * small, some slow measured links, per-layer costs that vary. */
static void make_inst(inst_t *t, uint64_t seed, int n, int L)
{
    memset(t, 0, sizeof(*t));
    g_key = pl_rand_key(seed, 0x5eed, 7);
    g_ctr = 0;
    t->n = n;
    t->L = L;
    double total = 0;
    for (int i = 0; i < L; i++) {
        pl_sched_layer_cost_t *l = &t->layers[i];
        l->weight_bytes = 1e8 * (0.5 + urand());
        l->flops_per_token = 2.0 * l->weight_bytes * (0.5 + urand());
        l->attn_flops_per_pos = 1e4 * urand();
        l->kv_bytes_per_token = 1e4 * (0.5 + urand());
        total += l->weight_bytes;
    }
    pl_sched_costs_t *c = &t->costs;
    c->n_layers = L;
    c->layers = t->layers;
    c->embed_weight_bytes = 2e8 * urand();
    c->embed_bytes_per_token = 8e3;
    c->head_weight_bytes = 2e8 * urand() + 1e6;
    c->head_flops_per_seq = 2.0 * c->head_weight_bytes;
    c->tied_bytes = urand() < 0.3
                        ? (c->embed_weight_bytes < c->head_weight_bytes ? c->embed_weight_bytes
                                                                        : c->head_weight_bytes)
                        : 0.0;
    c->act_bytes_per_token = logu(1e3, 1e6);
    c->work_bytes_per_token = 1e4;
    c->logits_bytes_per_seq = 1e5;
    c->score_bytes_per_pair = 4;
    int hosts = irand(1, 3);
    double cap_scale = logu(0.15, 1.5);
    for (int i = 0; i < n; i++) {
        pl_sched_device_t *d = &t->devs[i];
        snprintf(d->name, sizeof(d->name), "dev%d", i);
        snprintf(d->node, sizeof(d->node), "node%d", i);
        snprintf(d->host, sizeof(d->host), "host%d", irand(0, hosts - 1));
        snprintf(d->backend, sizeof(d->backend), "cpu");
        d->gflops = logu(1e3, 1e6);
        d->mem_gbps = logu(50, 5000);
        double cap = total * cap_scale * (0.1 + urand());
        d->reserve_bytes = (uint64_t)(1e8 * urand());
        d->mem_bytes = (uint64_t)cap + d->reserve_bytes;
    }
    for (int i = 0; i < n * n; i++) {
        double r = urand();
        if (r < 0.4) {
            t->links[i].gbps = 0; /* default for the pair */
        } else {
            t->links[i].gbps = logu(0.05, 50);
            t->links[i].latency_s = logu(1e-6, 1e-2);
        }
    }
    t->in.costs = c;
    t->in.devices = t->devs;
    t->in.n_devices = n;
    t->in.links = t->links;
    t->in.job = (pl_sched_job_t){
        .n_seqs = irand(1, 16), .prompt_avg = irand(1, 64), .max_new_tokens = irand(1, 64)};
    t->in.job.prompt_max = t->in.job.prompt_avg + irand(0, 64);
    t->in.options.field_mask = PL_PLAN_OPT_OBJECTIVE;
    t->in.options.objective = (pl_sched_objective_t)irand(0, 2);
}

static pl_sched_eval_t *make_eval(inst_t *t)
{
    pl_sched_eval_t *ev = NULL;
    int R = t->in.job.n_seqs, b = irand(1, R);
    pl_status_t st = pl_sched_eval_new(&t->in, R, b, &ev);
    cr_assert_eq(st, PL_OK, "eval_new: %s", pl_error_msg());
    return ev;
}

/* ---- references ------------------------------------------------------------------------- */

/* sched_ref.h's chain on a stack scratch. */
static double ref_chain(const pl_sched_eval_t *ev, const int *seq, int m)
{
    double h[2 * (MAXL + 1)];
    return sched_ref_chain(ev, seq, m, h);
}

/* Every subsequence (or only the whole sequence) of a fixed order, each through ref_chain. */
static double ref_fixed(const pl_sched_eval_t *ev, const int *order, int n, bool skip,
                        int max_stages)
{
    double best = INFINITY;
    for (unsigned mask = 1; mask < (1u << n); mask++) {
        if (!skip && mask != (1u << n) - 1)
            continue;
        int seq[MAXD], m = 0;
        for (int i = 0; i < n; i++)
            if (mask & (1u << i))
                seq[m++] = order[i];
        if (max_stages && m > max_stages)
            continue;
        double v = ref_chain(ev, seq, m);
        if (v < best)
            best = v;
    }
    return best;
}

/* Truly exhaustive for tiny cases: every composition of the layers over every subsequence. */
static double ref_enum_rec(const pl_sched_eval_t *ev, const int *seq, int m, int i, int a,
                           double worst)
{
    int L = pl_sched_eval_layers(ev);
    if (i == m - 1) {
        if (!sched_ref_fits(ev, seq[i], a, L))
            return INFINITY;
        double c = pl_sched_stage_cost(ev, seq[i], a, L - a, -1);
        return worst > c ? worst : c;
    }
    double best = INFINITY;
    for (int e = a + 1; e <= L - (m - 1 - i); e++) {
        if (!sched_ref_fits(ev, seq[i], a, e))
            break;
        double c = pl_sched_stage_cost(ev, seq[i], a, e - a, seq[i + 1]);
        double v = ref_enum_rec(ev, seq, m, i + 1, e, worst > c ? worst : c);
        if (v < best)
            best = v;
    }
    return best;
}

static double ref_enum(const pl_sched_eval_t *ev, const int *order, int n, bool skip)
{
    double best = INFINITY;
    for (unsigned mask = 1; mask < (1u << n); mask++) {
        if (!skip && mask != (1u << n) - 1)
            continue;
        int seq[MAXD], m = 0;
        for (int i = 0; i < n; i++)
            if (mask & (1u << i))
                seq[m++] = order[i];
        double v = ref_enum_rec(ev, seq, m, 0, 0, 0.0);
        if (v < best)
            best = v;
    }
    return best;
}

/* Every order of every subset, by depth-first search sharing the prefix DP. */
typedef struct {
    const pl_sched_eval_t *ev;
    int n, L, seq[MAXD];
    bool skip, used[MAXD];
    double best;
} ref_orders_t;

static void ref_orders_rec(ref_orders_t *r, int m, const double *h)
{
    int last = r->seq[m - 1];
    if (r->skip || m == r->n) { /* finish with the current last device */
        double v = sched_ref_last(r->ev, h, last);
        if (v < r->best)
            r->best = v;
    }
    for (int nx = 0; nx < r->n; nx++) {
        if (r->used[nx])
            continue;
        double h2[MAXL + 1];
        if (!sched_ref_step(r->ev, h, last, nx, h2))
            continue;
        r->used[nx] = true;
        r->seq[m] = nx;
        ref_orders_rec(r, m + 1, h2);
        r->used[nx] = false;
    }
}

static double ref_orders(const pl_sched_eval_t *ev, int n, bool skip)
{
    ref_orders_t r = {
        .ev = ev, .n = n, .L = pl_sched_eval_layers(ev), .skip = skip, .best = INFINITY};
    double h[MAXL + 1];
    for (int a = 0; a <= r.L; a++)
        h[a] = a == 0 ? 0.0 : INFINITY;
    for (int first = 0; first < n; first++) {
        r.used[first] = true;
        r.seq[0] = first;
        ref_orders_rec(&r, 1, h);
        r.used[first] = false;
    }
    return r.best;
}

/* ---- checks on a returned split ---------------------------------------------------------- */

static void check_split(const pl_sched_eval_t *ev, const pl_sched_split_t *s, const int *order,
                        int n, bool skip, int max_stages)
{
    int L = pl_sched_eval_layers(ev);
    cr_assert(s->n_stages >= 1 && s->n_stages <= n);
    if (!skip)
        cr_assert_eq(s->n_stages, n);
    if (max_stages)
        cr_assert(s->n_stages <= max_stages);
    cr_assert_eq(s->first[0], 0);
    double worst = 0;
    int pos = -1;
    for (int i = 0; i < s->n_stages; i++) {
        int e = i + 1 < s->n_stages ? s->first[i + 1] : L;
        cr_assert(e > s->first[i], "stage %d is empty", i);
        if (order) { /* fixed order: devices appear in that order */
            int p = -1;
            for (int k = 0; k < n; k++)
                if (order[k] == s->device[i])
                    p = k;
            cr_assert(p > pos, "stage %d breaks the order", i);
            pos = p;
        }
        for (int k = 0; k < i; k++)
            cr_assert_neq(s->device[k], s->device[i]);
        cr_assert(sched_ref_fits(ev, s->device[i], s->first[i], e), "stage %d exceeds memory", i);
        int nx = i + 1 < s->n_stages ? s->device[i + 1] : -1;
        double c = pl_sched_stage_cost(ev, s->device[i], s->first[i], e - s->first[i], nx);
        if (c > worst)
            worst = c;
    }
    cr_assert_eq(worst, s->bottleneck, "reported %.17g, actual %.17g", s->bottleneck, worst);
}

/* ---- tests --------------------------------------------------------------------------------- */

Test(sched_plan, reference_dp_matches_enumeration)
{
    /* the references validate each other on tiny cases */
    for (uint64_t seed = 0; seed < 300; seed++) {
        inst_t t;
        make_inst(&t, seed, 2 + (int)(seed % 3), 2 + (int)(seed % 9));
        pl_sched_eval_t *ev = make_eval(&t);
        int order[MAXD] = {0, 1, 2, 3, 4, 5, 6, 7};
        for (int skip = 0; skip < 2; skip++) {
            double a = ref_fixed(ev, order, t.n, skip, 0), b = ref_enum(ev, order, t.n, skip);
            cr_assert_eq(a, b, "seed %llu skip %d: dp %.17g enum %.17g", (unsigned long long)seed,
                         skip, a, b);
        }
        pl_sched_eval_destroy(&ev);
    }
}

static void run_fixed(uint64_t seed, int n, int L, int *n_feasible, int *n_infeasible)
{
    inst_t t;
    make_inst(&t, seed, n, L);
    pl_sched_eval_t *ev = make_eval(&t);
    int order[MAXD];
    for (int i = 0; i < n; i++) /* a random order of all devices */
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = irand(0, i), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    for (int skip = 0; skip < 2; skip++) {
        int max_stages = skip && irand(0, 3) == 0 ? irand(1, n) : 0;
        double ref = ref_fixed(ev, order, n, skip, max_stages);
        pl_sched_split_t s;
        pl_status_t st = pl_sched_partition(ev, order, n, skip, max_stages, &s);
        if (ref == INFINITY) {
            cr_assert_eq(st, PL_ERR_INFEASIBLE, "seed %llu: planned an infeasible instance",
                         (unsigned long long)seed);
            ++*n_infeasible;
            continue;
        }
        cr_assert_eq(st, PL_OK, "seed %llu skip %d: %s", (unsigned long long)seed, skip,
                     pl_error_msg());
        check_split(ev, &s, order, n, skip, max_stages);
        cr_assert_eq(s.bottleneck, ref, "seed %llu n %d L %d skip %d: got %.17g, optimum %.17g",
                     (unsigned long long)seed, n, L, skip, s.bottleneck, ref);
        ++*n_feasible;
    }
    pl_sched_eval_destroy(&ev);
}

Test(sched_plan, fixed_order_small_random_instances)
{
    int ok = 0, inf = 0;
    for (uint64_t seed = 1000; seed < 3000; seed++)
        run_fixed(seed, irand(2, 6), irand(8, 24), &ok, &inf);
    cr_assert(ok > 500 && inf > 50, "feasible %d infeasible %d: the generator is off", ok, inf);
}

Test(sched_plan, fixed_order_large_random_instances)
{
    int ok = 0, inf = 0;
    for (uint64_t seed = 5000; seed < 5400; seed++)
        run_fixed(seed, irand(2, 8), irand(8, 96), &ok, &inf);
    cr_assert(ok > 100, "feasible %d infeasible %d", ok, inf);
}

static void run_search(uint64_t seed, int n, int L, int *n_feasible, int *n_infeasible)
{
    inst_t t;
    make_inst(&t, seed, n, L);
    pl_sched_eval_t *ev = make_eval(&t);
    int devs[MAXD];
    for (int i = 0; i < n; i++)
        devs[i] = i;
    for (int skip = 0; skip < 2; skip++) {
        double ref = ref_orders(ev, n, skip);
        pl_sched_split_t s;
        bool exact = false;
        pl_status_t st = pl_sched_search(ev, devs, n, skip, 0, 12, &s, &exact);
        if (ref == INFINITY) {
            cr_assert_eq(st, PL_ERR_INFEASIBLE, "seed %llu: planned an infeasible instance",
                         (unsigned long long)seed);
            ++*n_infeasible;
            continue;
        }
        cr_assert_eq(st, PL_OK, "seed %llu: %s", (unsigned long long)seed, pl_error_msg());
        cr_assert(exact);
        check_split(ev, &s, NULL, n, skip, 0);
        cr_assert_eq(s.bottleneck, ref, "seed %llu n %d L %d skip %d: got %.17g, optimum %.17g",
                     (unsigned long long)seed, n, L, skip, s.bottleneck, ref);
        ++*n_feasible;
    }
    pl_sched_eval_destroy(&ev);
}

Test(sched_plan, order_search_matches_all_orders_and_subsets)
{
    int ok = 0, inf = 0;
    for (uint64_t seed = 20000; seed < 20600; seed++)
        run_search(seed, irand(2, 5), irand(8, 20), &ok, &inf);
    cr_assert(ok > 300 && inf > 20, "feasible %d infeasible %d", ok, inf);
}

Test(sched_plan, order_search_seven_devices)
{
    int ok = 0, inf = 0;
    for (uint64_t seed = 30000; seed < 30040; seed++)
        run_search(seed, irand(6, 7), irand(8, 14), &ok, &inf);
    cr_assert(ok > 20, "feasible %d infeasible %d", ok, inf);
}

Test(sched_plan, search_max_stages)
{
    for (uint64_t seed = 40000; seed < 40200; seed++) {
        inst_t t;
        make_inst(&t, seed, irand(2, 5), irand(8, 16));
        pl_sched_eval_t *ev = make_eval(&t);
        int devs[MAXD] = {0, 1, 2, 3, 4, 5, 6, 7};
        int ms = irand(1, t.n);
        /* brute force: every order of every subset of at most ms devices */
        double ref = INFINITY;
        int perm[MAXD];
        for (unsigned mask = 1; mask < (1u << t.n); mask++) {
            int m = __builtin_popcount(mask);
            if (m > ms)
                continue;
            int k = 0;
            for (int i = 0; i < t.n; i++)
                if (mask & (1u << i))
                    perm[k++] = i;
            /* iterate permutations (Heap's algorithm, iterative) */
            int cnt[MAXD] = {0};
            double v = ref_chain(ev, perm, m);
            if (v < ref)
                ref = v;
            for (int i = 1; i < m;) {
                if (cnt[i] < i) {
                    int j = i % 2 ? cnt[i] : 0, x = perm[j];
                    perm[j] = perm[i];
                    perm[i] = x;
                    v = ref_chain(ev, perm, m);
                    if (v < ref)
                        ref = v;
                    cnt[i]++;
                    i = 1;
                } else {
                    cnt[i++] = 0;
                }
            }
        }
        pl_sched_split_t s;
        pl_status_t st = pl_sched_search(ev, devs, t.n, true, ms, 12, &s, NULL);
        if (ref == INFINITY) {
            cr_assert_eq(st, PL_ERR_INFEASIBLE);
        } else {
            cr_assert_eq(st, PL_OK, "%s", pl_error_msg());
            check_split(ev, &s, NULL, t.n, true, ms);
            cr_assert_eq(s.bottleneck, ref, "seed %llu: got %.17g, optimum %.17g",
                         (unsigned long long)seed, s.bottleneck, ref);
        }
        pl_sched_eval_destroy(&ev);
    }
}

Test(sched_plan, heuristic_beyond_exact_limit_is_valid)
{
    /* exact_max below n: the heuristic plan is valid and no better than the optimum */
    for (uint64_t seed = 50000; seed < 50100; seed++) {
        inst_t t;
        make_inst(&t, seed, irand(3, 6), irand(8, 16));
        pl_sched_eval_t *ev = make_eval(&t);
        int devs[MAXD] = {0, 1, 2, 3, 4, 5, 6, 7};
        double ref = ref_orders(ev, t.n, true);
        pl_sched_split_t s;
        bool exact = true;
        pl_status_t st = pl_sched_search(ev, devs, t.n, true, 0, 2, &s, &exact);
        if (st == PL_OK) {
            cr_assert(!exact);
            check_split(ev, &s, NULL, t.n, true, 0);
            cr_assert(s.bottleneck >= ref);
        } else {
            cr_assert_eq(st, PL_ERR_INFEASIBLE);
        }
        pl_sched_eval_destroy(&ev);
    }
}

Test(sched_plan, plan_memory_caps_hold_and_infeasible_is_reported)
{
    int ok = 0, inf = 0;
    for (uint64_t seed = 60000; seed < 60300; seed++) {
        inst_t t;
        bool search = seed % 2;
        make_inst(&t, seed, search ? irand(2, 6) : irand(2, 8),
                  search ? irand(8, 32) : irand(8, 64));
        t.in.options.field_mask |= PL_PLAN_OPT_ORDER;
        t.in.options.order = search ? PL_SCHED_ORDER_SEARCH : PL_SCHED_ORDER_FIXED;
        pl_plan_t *p = NULL;
        pl_status_t st = pl_plan(&t.in, &p);
        /* reference feasibility: with one resident sequence, does any order fit? */
        pl_sched_eval_t *ev = NULL;
        cr_assert_eq(pl_sched_eval_new(&t.in, 1, 1, &ev), PL_OK);
        int order[MAXD] = {0, 1, 2, 3, 4, 5, 6, 7};
        double ref = t.in.options.order == PL_SCHED_ORDER_FIXED ? ref_fixed(ev, order, t.n, 1, 0)
                                                                : ref_orders(ev, t.n, true);
        pl_sched_eval_destroy(&ev);
        if (ref == INFINITY) {
            cr_assert_eq(st, PL_ERR_INFEASIBLE, "seed %llu", (unsigned long long)seed);
            cr_assert(strstr(pl_error_msg(), "GiB"), "message: %s", pl_error_msg());
            cr_assert_null(p);
            inf++;
            continue;
        }
        cr_assert_eq(st, PL_OK, "seed %llu: %s", (unsigned long long)seed, pl_error_msg());
        int next = 0;
        for (int i = 0; i < p->n_stages; i++) {
            const pl_plan_stage_t *s = &p->stages[i];
            cr_assert_eq(s->first_layer, next);
            cr_assert_eq(s->n_layers, s->last_layer - s->first_layer + 1);
            cr_assert(s->mem_used <= s->mem_avail, "seed %llu stage %d: %llu > %llu",
                      (unsigned long long)seed, i, (unsigned long long)s->mem_used,
                      (unsigned long long)s->mem_avail);
            next = s->last_layer + 1;
        }
        cr_assert_eq(next, t.L);
        cr_assert(p->resident_seqs >= 1 && p->resident_seqs <= t.in.job.n_seqs);
        cr_assert(p->microbatches >= 1 && p->microbatches <= p->resident_seqs);
        int need = p->n_stages < p->resident_seqs ? p->n_stages : p->resident_seqs;
        cr_assert(p->microbatches >= need, "%d microbatches for %d stages", p->microbatches,
                  p->n_stages);
        cr_assert(p->microbatch_size * p->microbatches >= p->resident_seqs);
        pl_plan_destroy(&p);
        ok++;
    }
    cr_assert(ok > 50 && inf > 10, "feasible %d infeasible %d", ok, inf);
}
