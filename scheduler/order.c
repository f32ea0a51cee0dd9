/* Order and selection: an exact search over device orders and subsets (dynamic programming over
 * subsets, with a bottleneck search) for small clusters, and host/speed heuristics beyond. */
#include "scheduler/plan_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The exact search answers "is there a plan whose every stage costs at most T?" for a given T:
 * state (S, j) = devices S were used (in some order) and device j comes next; R[S][j] is the set
 * of layers j can start at (a bitset). Sets, not just the largest start, because a stage must
 * hold at least one layer and the transfer depends on the successor, so a later start does not
 * always dominate. The bottleneck is then found by bisection on T, with two exact shortcuts:
 * a feasible check returns a plan whose real bottleneck B <= T becomes the new upper bound, and an
 * infeasible check returns the smallest compared value above T (every T' below it takes the same
 * path, so is infeasible too), which is the next candidate. */

#define S_KMAX PL_SCHED_EXACT_MAX

typedef struct {
    const pl_sched_eval_t *ev;
    const int *devs;
    int k, L, W, max_stages;
    bool skip;
    uint32_t full;
    int *masks;  /* 2^k masks by popcount, then value */
    uint64_t *R; /* [mask][j][W] */
    int nc[S_KMAX];
    double cx[S_KMAX][S_KMAX]; /* distinct transfer costs out of j */
    int cls[S_KMAX][S_KMAX];   /* class of the link j -> j2 */
    int *bmax;                 /* [j][class][a]: furthest end under T */
    uint64_t *V;               /* [j][class][W]: starts that fit at least one layer */
    uint64_t *fin;             /* [j][W]: starts from which j can finish the model */
    uint64_t *U;               /* [class][W] scratch */
    uint64_t *tmp;             /* [W] scratch */
    int caplay[S_KMAX];        /* most layers j can hold in one stage under T */
    int *sumcap;               /* [mask]: sum of caplay over the mask */
    double tnext;
} s_ex_t;

static uint64_t *s_row(const s_ex_t *x, uint64_t *base, size_t row)
{
    return base + row * (size_t)x->W;
}

static bool s_bit(const uint64_t *b, int i)
{
    return (b[i >> 6] >> (i & 63)) & 1u;
}

static void s_set_range(uint64_t *b, int lo, int hi)
{
    for (int w = lo >> 6; w <= hi >> 6; w++) {
        int l = w == lo >> 6 ? (lo & 63) : 0, h = w == hi >> 6 ? (hi & 63) : 63;
        uint64_t m = (h == 63 ? ~0ull : ((1ull << (h + 1)) - 1)) & (~0ull << l);
        b[w] |= m;
    }
}

/* First set bit at or after `from`, or -1. */
static int s_next_set(const uint64_t *b, int W, int from)
{
    int w = from >> 6;
    if (w >= W)
        return -1;
    uint64_t cur = b[w] & (~0ull << (from & 63));
    while (!cur) {
        if (++w >= W)
            return -1;
        cur = b[w];
    }
    return w * 64 + __builtin_ctzll(cur);
}

/* First clear bit at or after `from` (W * 64 when none). */
static int s_next_clear(const uint64_t *b, int W, int from)
{
    int w = from >> 6;
    if (w >= W)
        return W * 64;
    uint64_t cur = ~b[w] & (~0ull << (from & 63));
    while (!cur) {
        if (++w >= W)
            return W * 64;
        cur = ~b[w];
    }
    return w * 64 + __builtin_ctzll(cur);
}

static void s_tables(s_ex_t *x, double T)
{
    const pl_sched_eval_t *ev = x->ev;
    int L = x->L;
    x->tnext = INFINITY;
    for (int j = 0; j < x->k; j++) {
        int d = x->devs[j], most = 0;
        const int *emax = ev->emax + (size_t)d * L;
        for (int c = 0; c < x->nc[j]; c++) {
            double xv = x->cx[j][c];
            int *bm = x->bmax + ((size_t)j * S_KMAX + c) * L;
            uint64_t *v = s_row(x, x->V, (size_t)j * S_KMAX + c);
            memset(v, 0, (size_t)x->W * sizeof(*v));
            int e = 0;
            for (int a = 0; a < L; a++) {
                if (e < a)
                    e = a;
                while (e + 1 <= emax[a]) {
                    double t = pl_sched_comp(ev, d, a, e + 1) + xv;
                    if (!(t <= T)) {
                        if (t < x->tnext)
                            x->tnext = t;
                        break;
                    }
                    e++;
                }
                bm[a] = e;
                if (e > a)
                    v[a >> 6] |= 1ull << (a & 63);
                if (e - a > most)
                    most = e - a;
            }
        }
        uint64_t *f = s_row(x, x->fin, (size_t)j);
        memset(f, 0, (size_t)x->W * sizeof(*f));
        for (int a = 0; a < L; a++) {
            if (!ev->fin_ok[(size_t)d * L + a])
                continue;
            double t = ev->cost_last[(size_t)d * L + a];
            if (t <= T) {
                f[a >> 6] |= 1ull << (a & 63);
                if (L - a > most)
                    most = L - a;
            } else if (t < x->tnext) {
                x->tnext = t;
            }
        }
        x->caplay[j] = most;
    }
    x->sumcap[0] = 0;
    for (uint32_t m = 1; m <= x->full; m++)
        x->sumcap[m] = x->sumcap[m & (m - 1)] + x->caplay[__builtin_ctz(m)];
}

/* Drop the starts from which the devices outside `mask` (j among them) cannot hold the rest
 * of the model even if each took its most layers; true when something is left. */
static bool s_prune(const s_ex_t *x, uint32_t mask, uint64_t *r)
{
    int th = x->L - (x->sumcap[x->full] - x->sumcap[mask]);
    bool any = false;
    for (int w = 0; w < x->W; w++) {
        if (th > w * 64)
            r[w] &= th >= (w + 1) * 64 ? 0 : ~0ull << (th - w * 64);
        any |= r[w] != 0;
    }
    return any;
}

/* Union over the viable starts a in `from` of [a + 1, bmax(a)]. bmax is nondecreasing, so a run
 * of consecutive viable starts [u, v] reaches exactly [u + 1, bmax(v)]. */
static void s_expand(s_ex_t *x, const uint64_t *from, int j, int c, uint64_t *to)
{
    int W = x->W;
    const uint64_t *v = s_row(x, x->V, (size_t)j * S_KMAX + c);
    const int *bm = x->bmax + ((size_t)j * S_KMAX + c) * x->L;
    bool any = false;
    for (int w = 0; w < W; w++)
        any |= (x->tmp[w] = from[w] & v[w]) != 0;
    memset(to, 0, (size_t)W * sizeof(*to));
    if (!any)
        return;
    for (int u = s_next_set(x->tmp, W, 0); u >= 0;) {
        int end = s_next_clear(x->tmp, W, u); /* run is [u, end - 1] */
        s_set_range(to, u + 1, bm[end - 1]);
        u = s_next_set(x->tmp, W, end);
    }
}

static void s_witness(s_ex_t *x, uint32_t mask, int j, int a, pl_sched_split_t *out)
{
    int dev[S_KMAX], first[S_KMAX], n = 0;
    dev[n] = x->devs[j];
    first[n++] = a;
    while (mask) {
        bool found = false;
        for (int p = 0; p < x->k && !found; p++) {
            if (!(mask & (1u << p)))
                continue;
            uint32_t pm = mask & ~(1u << p);
            const uint64_t *rp = s_row(x, x->R, (size_t)pm * x->k + p);
            int c = x->cls[p][j];
            const uint64_t *vp = s_row(x, x->V, (size_t)p * S_KMAX + c);
            const int *bm = x->bmax + ((size_t)p * S_KMAX + c) * x->L;
            for (int ap = 0; ap < a; ap++) {
                if (s_bit(rp, ap) && s_bit(vp, ap) && bm[ap] >= a) {
                    dev[n] = x->devs[p];
                    first[n++] = ap;
                    mask = pm;
                    j = p;
                    a = ap;
                    found = true;
                    break;
                }
            }
        }
        assert(found);
        if (!found)
            break;
    }
    assert(a == 0);
    out->n_stages = n;
    for (int i = 0; i < n; i++) {
        out->device[i] = dev[n - 1 - i];
        out->first[i] = first[n - 1 - i];
    }
    out->bottleneck = pl_sched_split_bottleneck(x->ev, out);
}

/* Is there a plan with every stage cost <= T? Fills *out (the plan with the fewest stages) when
 * there is; otherwise x->tnext is the smallest compared value above T. */
static bool s_check(s_ex_t *x, double T, pl_sched_split_t *out)
{
    int k = x->k, W = x->W;
    s_tables(x, T);
    memset(x->R, 0, ((size_t)1 << k) * k * W * sizeof(uint64_t));
    for (int j = 0; j < k; j++)
        x->R[(size_t)j * W] = 1;
    int level = 0;
    bool level_alive = true;
    for (size_t i = 0; i < ((size_t)1 << k); i++) {
        uint32_t mask = (uint32_t)x->masks[i];
        int p = __builtin_popcount(mask);
        if (p != level) {
            if (!level_alive)
                break; /* nothing reached this many stages: nothing reaches more */
            level = p;
            level_alive = false;
        }
        if (x->max_stages && p + 1 > x->max_stages)
            break;
        bool extend = !x->max_stages || p + 2 <= x->max_stages;
        for (int j = 0; j < k; j++) {
            if (mask & (1u << j))
                continue;
            uint64_t *r = s_row(x, x->R, (size_t)mask * k + j);
            if (!s_prune(x, mask, r))
                continue;
            level_alive = true;
            uint32_t nm = mask | (1u << j);
            if (x->skip || nm == x->full) {
                const uint64_t *f = s_row(x, x->fin, (size_t)j);
                for (int w = 0; w < W; w++) {
                    uint64_t t = r[w] & f[w];
                    if (t) {
                        s_witness(x, mask, j, w * 64 + __builtin_ctzll(t), out);
                        return true;
                    }
                }
            }
            if (!extend || nm == x->full)
                continue;
            uint32_t done = 0;
            for (int j2 = 0; j2 < k; j2++) {
                if (nm & (1u << j2))
                    continue;
                int c = x->cls[j][j2];
                uint64_t *u = s_row(x, x->U, (size_t)c);
                if (!(done & (1u << c))) {
                    s_expand(x, r, j, c, u);
                    done |= 1u << c;
                }
                uint64_t *to = s_row(x, x->R, (size_t)nm * k + j2);
                for (int w = 0; w < W; w++)
                    to[w] |= u[w];
            }
        }
    }
    return false;
}

static double s_bits_mid(double lo, double hi)
{
    uint64_t a, b;
    memcpy(&a, &lo, sizeof(a));
    memcpy(&b, &hi, sizeof(b));
    uint64_t m = a + (b - a) / 2;
    double r;
    memcpy(&r, &m, sizeof(r));
    return r;
}

static void s_classes(s_ex_t *x)
{
    for (int j = 0; j < x->k; j++) {
        x->nc[j] = 0;
        for (int j2 = 0; j2 < x->k; j2++) {
            if (j2 == j) {
                x->cls[j][j2] = -1;
                continue;
            }
            double v = pl_sched_xfer(x->ev, x->devs[j], x->devs[j2]);
            int c = 0;
            while (c < x->nc[j] && x->cx[j][c] != v)
                c++;
            if (c == x->nc[j])
                x->cx[j][x->nc[j]++] = v;
            x->cls[j][j2] = c;
        }
    }
}

pl_status_t pl_sched_search_exact(const pl_sched_eval_t *ev, const int *devs, int n,
                                  bool allow_skip, int max_stages, const pl_sched_split_t *seed,
                                  bool fits_only, pl_sched_split_t *out)
{
    assert(n >= 1 && n <= S_KMAX && pl_sched_tables_ok(ev));
    s_ex_t x = {.ev = ev,
                .devs = devs,
                .k = n,
                .L = ev->L,
                .W = (ev->L + 63) / 64,
                .skip = allow_skip,
                .full = (1u << n) - 1};
    x.max_stages = max_stages > 0 && max_stages < n ? max_stages : 0;
    if (!allow_skip && x.max_stages)
        return pl_error(PL_ERR_INFEASIBLE,
                        "%d devices must all be used but at most %d stages are allowed", n,
                        max_stages);
    size_t nm = (size_t)1 << n;
    x.masks = malloc(nm * sizeof(int));
    x.R = malloc(nm * n * x.W * sizeof(uint64_t));
    x.bmax = malloc((size_t)n * S_KMAX * x.L * sizeof(int));
    x.V = malloc((size_t)n * S_KMAX * x.W * sizeof(uint64_t));
    x.fin = malloc((size_t)n * x.W * sizeof(uint64_t));
    x.U = malloc((size_t)S_KMAX * x.W * sizeof(uint64_t));
    x.tmp = malloc((size_t)x.W * sizeof(uint64_t));
    x.sumcap = malloc(nm * sizeof(int));
    pl_status_t st = PL_OK;
    if (!x.masks || !x.R || !x.bmax || !x.V || !x.fin || !x.U || !x.tmp || !x.sumcap) {
        st = pl_error(PL_ERR_NOMEM, "order search: out of memory for %d devices", n);
        goto out;
    }
    size_t m = 0;
    for (int p = 0; p <= n; p++)
        for (size_t s = 0; s < nm; s++)
            if (__builtin_popcount((unsigned)s) == p)
                x.masks[m++] = (int)s;
    s_classes(&x);

    pl_sched_split_t best, cand;
    double hi = INFINITY;
    if (fits_only && seed && seed->n_stages > 0) {
        *out = *seed;
        goto out;
    }
    if (seed && seed->n_stages > 0) {
        best = *seed;
        hi = seed->bottleneck;
    } else {
        if (!s_check(&x, INFINITY, &best)) {
            st = pl_error(PL_ERR_INFEASIBLE, "no order of the %d devices fits the model", n);
            goto out;
        }
        hi = best.bottleneck;
        if (fits_only) {
            *out = best;
            goto out;
        }
    }
    /* probe below hi, further each time the probe is feasible, until one is not */
    bool have_lo = false;
    double lo = 0.0, step = 1.0 / 64;
    for (int iter = 0; iter < 400 && hi > 0; iter++) {
        double t;
        if (!have_lo) {
            t = hi * (1.0 - step);
            step = step * 2 < 0.5 ? step * 2 : 0.5;
        } else {
            t = s_bits_mid(lo, hi);
        }
        if (have_lo && (t <= lo || t >= hi))
            break; /* lo and hi are adjacent doubles: hi is optimal */
        if (s_check(&x, t, &cand)) {
            assert(cand.bottleneck <= t);
            best = cand;
            hi = cand.bottleneck;
            continue;
        }
        have_lo = true;
        lo = t;
        if (!(x.tnext < hi))
            break; /* nothing between lo and hi can be feasible */
        double tn = x.tnext;
        if (s_check(&x, tn, &cand)) {
            /* everything below tn is infeasible, so cand.bottleneck == tn is optimal */
            best = cand;
            hi = cand.bottleneck;
            break;
        }
        lo = tn;
        if (!(x.tnext < hi))
            break;
    }
    *out = best;
out:
    free(x.masks);
    free(x.R);
    free(x.bmax);
    free(x.V);
    free(x.fin);
    free(x.U);
    free(x.tmp);
    free(x.sumcap);
    return st;
}

/* Objective cost of one middle layer on device d: the speed the heuristic sorts by. */
static double s_layer_time(const pl_sched_eval_t *ev, int d)
{
    int a = ev->L >= 3 ? 1 : 0;
    return pl_sched_comp(ev, d, a, a + 1);
}

typedef struct {
    int dev, host_first;
    double t, host_speed;
} s_key_t;

/* a before b: faster host (total speed) first, then the host seen first, then the faster
 * device, then the lower index. */
static bool s_key_before(const s_key_t *a, const s_key_t *b)
{
    if (a->host_speed != b->host_speed)
        return a->host_speed > b->host_speed;
    if (a->host_first != b->host_first)
        return a->host_first < b->host_first;
    if (a->t != b->t)
        return a->t < b->t;
    return a->dev < b->dev;
}

void pl_sched_heuristic_order(const pl_sched_eval_t *ev, const int *devs, int n, int *order_out)
{
    s_key_t keys[PL_SCHED_MAX_DEVICES];
    assert(n >= 0 && n <= PL_SCHED_MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        keys[i].dev = devs[i];
        keys[i].t = s_layer_time(ev, devs[i]);
        keys[i].host_first = i;
        for (int h = 0; h < i; h++) {
            if (strcmp(ev->devs[devs[h]].host, ev->devs[devs[i]].host) == 0) {
                keys[i].host_first = keys[h].host_first;
                break;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        double speed = 0.0;
        for (int h = 0; h < n; h++)
            if (keys[h].host_first == keys[i].host_first)
                speed += keys[h].t > 0 ? 1.0 / keys[h].t : INFINITY;
        keys[i].host_speed = speed;
    }
    for (int i = 1; i < n; i++) { /* insertion sort: stable, n is small */
        s_key_t k = keys[i];
        int j = i - 1;
        while (j >= 0 && s_key_before(&k, &keys[j])) {
            keys[j + 1] = keys[j];
            j--;
        }
        keys[j + 1] = k;
    }
    for (int i = 0; i < n; i++)
        order_out[i] = keys[i].dev;
}

bool pl_sched_exact_ok(const pl_sched_eval_t *ev, int n, int exact_max)
{
    /* the subset DP holds 2^n * n bitsets of L bits: past 128 MiB the heuristic answers */
    if (n > exact_max || n > PL_SCHED_EXACT_MAX)
        return false;
    size_t words = ((size_t)1 << n) * (size_t)n * (size_t)((ev->L + 63) / 64);
    return words <= ((size_t)1 << 24);
}

pl_status_t pl_sched_search(const pl_sched_eval_t *ev, const int *devs, int n, bool allow_skip,
                            int max_stages, int exact_max, pl_sched_split_t *out, bool *exact_p)
{
    pl_status_t st = pl_sched_check_list(ev, devs, n);
    if (st)
        return st;
    if (exact_max < 0 || exact_max > PL_SCHED_EXACT_MAX)
        return pl_error(PL_ERR_RANGE, "exact_max: %d not in [0, %d]", exact_max,
                        PL_SCHED_EXACT_MAX);
    int orders[3][PL_SCHED_MAX_DEVICES];
    pl_sched_heuristic_order(ev, devs, n, orders[0]);
    for (int i = 0; i < n; i++) {
        orders[1][i] = orders[0][n - 1 - i];
        orders[2][i] = devs[i];
    }
    pl_sched_split_t best = {.n_stages = 0}, cand;
    pl_status_t last = PL_ERR_INFEASIBLE;
    for (int o = 0; o < 3; o++) {
        last = pl_sched_partition(ev, orders[o], n, allow_skip, max_stages, &cand);
        if (last == PL_OK && (best.n_stages == 0 || cand.bottleneck < best.bottleneck))
            best = cand;
        else if (last != PL_OK && last != PL_ERR_INFEASIBLE)
            return last;
    }
    bool exact = pl_sched_exact_ok(ev, n, exact_max);
    if (exact) {
        st = pl_sched_search_exact(ev, devs, n, allow_skip, max_stages,
                                   best.n_stages ? &best : NULL, false, &cand);
        if (st)
            return st;
        best = cand;
    } else if (best.n_stages == 0) {
        return pl_error(PL_ERR_INFEASIBLE, "no heuristic order of the %d devices fits the model",
                        n);
    }
    *out = best;
    if (exact_p)
        *exact_p = exact;
    return PL_OK;
}
