/* Planning a training job (coord_train.h): the idle devices in node-name order, a contiguous
 * split of the layers that evens the predicted F + B + W time per stage while every stage fits
 * its weights, optimizer state, gradients and the stash its schedule keeps, and the schedule
 * with the least predicted step time (scheduler/train_sched.h predicts each). */
#include "backends/cpu/cpu_train_layer.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_train.h"
#include "pipeline/train_weights.h"
#include "scheduler/train_sched.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_AUTO_STAGES 8 /* stages tried when the job leaves the count open */

typedef struct {
    int node, dev;
    double gflops, mem;
} s_cand_t;

/* What one layer costs: parameters, per-microbatch forward FLOPs, stash bytes from F and B. */
typedef struct {
    double params, flops, f_bytes, b_bytes;
    double head_params, head_flops, head_f_bytes, embed_params;
    int n_layers, n_mb;
} s_costs_t;

typedef struct {
    int kind, n_stages;
    int split[PL_COORD_MAX_STAGES];
    double makespan, bubble;
    double mem[PL_COORD_MAX_STAGES], stash[PL_COORD_MAX_STAGES], busy[PL_COORD_MAX_STAGES];
} s_choice_t;

static bool s_allowed(const pl_coord_job_t *j, const char *node)
{
    for (int i = 0; i < j->spec.n_nodes; i++)
        if (!strcmp(j->spec.nodes[i], node))
            return true;
    return j->spec.n_nodes == 0;
}

/* Idle usable devices of alive, allowed, undrained nodes, in node-name order. */
static int s_candidates(const pl_coord_t *c, const pl_coord_job_t *j, s_cand_t *out, int *alive)
{
    int order[PL_COORD_MAX_NODES], n = 0;
    for (int i = 0; i < c->n_nodes; i++) {
        int k = i;
        while (k > 0 && strcmp(c->nodes[order[k - 1]].name, c->nodes[i].name) > 0) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    *alive = 0;
    for (int oi = 0; oi < c->n_nodes; oi++) {
        const pl_coord_node_t *nd = &c->nodes[order[oi]];
        /* a resuming job takes only nodes heard from since the interruption: the lost one may
         * not be declared lost yet */
        if (!nd->name[0] || !nd->alive || !s_allowed(j, nd->name) ||
            pl_coord_node_draining(c, nd->name) || (j->resuming && nd->last_seen <= j->t_lost))
            continue;
        for (int d = 0; d < nd->n_dev && n < PL_COORD_MAX_STAGES; d++) {
            const pl_coord_dev_t *dv = &nd->dev[d];
            double gf = dv->n_obs ? dv->eff_gflops : dv->gflops;
            (*alive)++;
            if (gf <= 0 || nd->busy_job || nd->n_stale)
                continue;
            out[n++] = (s_cand_t){.node = order[oi], .dev = d, .gflops = gf,
                                  .mem = (double)dv->mem_bytes};
        }
    }
    return n;
}

static pl_status_t s_costs(const pl_coord_job_t *j, s_costs_t *k)
{
    const pl_cfg_train_t *job = &j->spec.train->cfg;
    pl_model_config_t mc;
    pl_train_local_cfg_t tc;
    double *inv = NULL;
    pl_status_t st = pl_model_config_load(job->model, &mc);
    if (st == PL_OK && !(inv = calloc((size_t)mc.head_dim / 2 + 1, sizeof(double))))
        st = pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    if (st == PL_OK)
        st = pl_train_cfg_from_job(job, &mc, inv, &tc);
    free(inv);
    if (st)
        return st;
    size_t sz[9];
    double T = tc.seq_len, H = tc.dims.hidden, V = tc.vocab;
    pl_cpu_tlayer_sizes(&tc.dims, sz);
    *k = (s_costs_t){.n_layers = tc.n_layers, .n_mb = tc.n_mb / job->replicas};
    for (int i = 0; i < 9; i++)
        k->params += (double)sz[i];
    /* the projections' 2 FLOPs per weight and token, and causal attention's scores and sums */
    k->flops = 2 * k->params * T + 2.0 * T * T * tc.dims.n_heads * tc.dims.head_dim;
    k->f_bytes = (double)pl_cpu_tstash_f_bytes(&tc.dims, tc.seq_len, tc.recompute);
    k->b_bytes = (double)pl_cpu_tstash_b_bytes(&tc.dims, tc.seq_len, tc.recompute);
    k->embed_params = V * H;
    k->head_params = V * H + H;
    k->head_flops = 2 * V * H * T;
    k->head_f_bytes = sizeof(float) * T * (3 * H + V); /* the head's stash: pl_cpu_thead */
    return PL_OK;
}

/* Stage s of split over layers [l0, l0 + n): its memory terms and one microbatch's times. */
static void s_stage(const s_costs_t *k, int s, int n_stages, int n, double gflops,
                    pl_tsched_mem_t *m, pl_tsched_times_t *t)
{
    bool first = s == 0, last = s == n_stages - 1;
    *m = (pl_tsched_mem_t){.params = n * k->params + (first ? k->embed_params : 0) +
                                     (last ? k->head_params : 0),
                           .weight_bytes = 4,
                           .f_bytes = n * k->f_bytes + (last ? k->head_f_bytes : 0),
                           .b_bytes = n * k->b_bytes};
    double f = (n * k->flops + (last ? k->head_flops : 0)) / (gflops * 1e9);
    *t = (pl_tsched_times_t){.f = f, .b = f, .w = f}; /* each backward half costs a forward */
}

/* The split of n_layers over cands[0..S) under schedule sched that minimises the slowest
 * stage's time with every stage within its device's memory (minimax over contiguous splits);
 * false when none fits. A resume's split is kept as it is (only checked). */
static bool s_split(const s_costs_t *k, const s_cand_t *cands, int S, int R,
                    const pl_train_ops_t *sched, const pl_job_train_t *fixed, int *split)
{
    int L = k->n_layers;
    if (fixed->n_split) {
        for (int s = 0; s < S; s++) {
            pl_tsched_mem_t m;
            pl_tsched_times_t t;
            s_stage(k, s, S, fixed->split[s], cands[s].gflops, &m, &t);
            for (int r = 0; r < R; r++)
                if (pl_tsched_stage_mem(sched, s, &m) > cands[r * S + s].mem)
                    return false;
            split[s] = fixed->split[s];
        }
        return true;
    }
    /* best[s][l]: the least slowest-stage time of stages s.. over layers l.. */
    double *best = malloc(sizeof(double) * (size_t)(S + 1) * (size_t)(L + 1));
    int *cut = malloc(sizeof(int) * (size_t)(S + 1) * (size_t)(L + 1));
    bool ok = false;
    if (!best || !cut)
        goto out;
#define B(s, l) best[(size_t)(s) * (size_t)(L + 1) + (size_t)(l)]
#define C(s, l) cut[(size_t)(s) * (size_t)(L + 1) + (size_t)(l)]
    for (int l = 0; l <= L; l++)
        B(S, l) = l == L ? 0 : DBL_MAX;
    for (int s = S - 1; s >= 0; s--)
        for (int l = 0; l <= L; l++) {
            B(s, l) = DBL_MAX;
            for (int n = 1; l + n <= L - (S - 1 - s); n++) {
                pl_tsched_mem_t m;
                pl_tsched_times_t t;
                double v = 0, mem;
                bool fits = B(s + 1, l + n) != DBL_MAX;
                for (int r = 0; fits && r < R; r++) { /* every replica's stage s: the slowest */
                    s_stage(k, s, S, n, cands[r * S + s].gflops, &m, &t);
                    mem = pl_tsched_stage_mem(sched, s, &m);
                    fits = mem <= cands[r * S + s].mem;
                    v = PL_MAX(v, t.f + t.b + t.w);
                }
                if (!fits)
                    continue;
                v = PL_MAX(v, B(s + 1, l + n));
                if (v < B(s, l)) {
                    B(s, l) = v;
                    C(s, l) = n;
                }
            }
        }
    if (B(0, 0) == DBL_MAX)
        goto out;
    for (int s = 0, l = 0; s < S; l += split[s], s++)
        split[s] = C(s, l);
    ok = true;
#undef B
#undef C
out:
    free(best);
    free(cut);
    return ok;
}

/* Schedule `kind` on the first R x S candidates (replica r's stage s on candidate r * S + s):
 * its split and replica 0's prediction; false when it does not fit. */
static bool s_try(const s_costs_t *k, const s_cand_t *cands, int S, int R, int kind,
                  const pl_job_train_t *t, s_choice_t *out)
{
    pl_train_ops_t *sched = NULL;
    pl_tsched_times_t times[PL_COORD_MAX_STAGES];
    pl_tsched_pred_t pred;
    s_choice_t ch = {.kind = kind, .n_stages = S};
    bool ok = false;
    if (pl_tsched_build((pl_train_kind_t)kind, S, k->n_mb, NULL, 0, &sched)) {
        pl_error_clear();
        return false;
    }
    if (!s_split(k, cands, S, R, sched, t, ch.split))
        goto out;
    for (int s = 0; s < S; s++) {
        pl_tsched_mem_t m;
        s_stage(k, s, S, ch.split[s], cands[s].gflops, &m, &times[s]);
        ch.mem[s] = pl_tsched_stage_mem(sched, s, &m);
        ch.stash[s] = pl_tsched_stash_bytes(sched, s, m.f_bytes, m.b_bytes);
    }
    if (pl_tsched_predict(sched, times, 0, &pred)) {
        pl_error_clear();
        goto out;
    }
    ch.makespan = pred.makespan;
    ch.bubble = pred.bubble;
    for (int s = 0; s < S; s++)
        ch.busy[s] = pred.busy[s];
    *out = ch;
    ok = true;
out:
    pl_train_ops_destroy(&sched);
    return ok;
}

static json_t *s_plan_json(const pl_coord_t *c, const s_cand_t *cands, const s_choice_t *ch,
                           int R, json_t *tried)
{
    json_t *stages = json_array();
    for (int i = 0; i < R * ch->n_stages; i++) {
        int s = i % ch->n_stages, l = 0;
        for (int q = 0; q < s; q++)
            l += ch->split[q];
        const pl_coord_node_t *nd = &c->nodes[cands[i].node];
        json_array_append_new(
            stages, json_pack("{s:i, s:i, s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f}", "stage", i,
                              "replica", i / ch->n_stages, "node", nd->name, "device",
                              nd->dev[cands[i].dev].id, "first_layer", l, "last_layer",
                              l + ch->split[s] - 1, "mem_bytes", ch->mem[s], "budget_bytes",
                              cands[i].mem, "stash_bytes", ch->stash[s], "busy_s", ch->busy[s]));
    }
    return json_pack("{s:s, s:s, s:f, s:f, s:i, s:o, s:o}", "kind", "training", "schedule",
                     pl_train_kind_name((pl_train_kind_t)ch->kind), "predicted_step_s",
                     ch->makespan, "predicted_bubble", ch->bubble, "replicas", R, "stages",
                     stages, "tried", tried);
}

bool pl_coord_train_plan(pl_coord_t *c, pl_coord_job_t *j)
{
    pl_job_train_t *t = j->spec.train;
    s_cand_t cands[PL_COORD_MAX_STAGES];
    s_costs_t k;
    int alive, n = s_candidates(c, j, cands, &alive);
    int want = t->n_split ? t->n_split : t->cfg.stages, R = t->cfg.replicas;
    if (s_costs(j, &k)) {
        pl_coord_job_fail(c, j, "%s", pl_error_msg());
        return false;
    }
    if (n == 0 || n < PL_MAX(want, 1) * R) {
        int len = snprintf(j->error, sizeof(j->error), "waiting for %d idle device(s): %d "
                           "idle, %d alive", PL_MAX(want, 1) * R, n, alive);
        if (j->resuming && t->n_split && j->train->ckpt_step > 0 && len > 0 &&
            (size_t)len < sizeof(j->error))
            snprintf(j->error + len, sizeof(j->error) - (size_t)len, " (resuming from "
                     "checkpoint-%d: its %d stages are kept, as its optimizer state is per "
                     "stage)", j->train->ckpt_step, t->n_split);
        return false;
    }
    pl_train_kind_t forced;
    bool is_forced = strcmp(t->cfg.schedule, "auto") && !pl_train_kind_parse(t->cfg.schedule,
                                                                                 &forced);
    if (!is_forced && t->n_split && t->kind >= 0 && t->kind < PL_TRAIN_KIND_COUNT) {
        forced = (pl_train_kind_t)t->kind; /* a resume: its checkpoint's schedule, as its split */
        is_forced = true;
    }
    int lo = want ? want : 1,
        hi = want ? want : PL_MIN(PL_MIN(n / R, k.n_layers), S_MAX_AUTO_STAGES);
    s_choice_t best = {.makespan = DBL_MAX};
    json_t *tried = json_array();
    for (int S = lo; S <= hi; S++)
        for (int kind = 0; kind < PL_TRAIN_KIND_COUNT; kind++) {
            s_choice_t ch;
            if (is_forced && kind != (int)forced)
                continue;
            bool fits = s_try(&k, cands, S, R, kind, t, &ch);
            json_array_append_new(tried, json_pack("{s:i, s:s, s:b, s:f, s:f}", "stages", S,
                                                   "schedule",
                                                   pl_train_kind_name((pl_train_kind_t)kind),
                                                   "fits", fits, "step_s",
                                                   fits ? ch.makespan : 0.0, "bubble",
                                                   fits ? ch.bubble : 0.0));
            if (fits && ch.makespan < best.makespan) /* ties: fewer stages, the lower kind */
                best = ch;
        }
    if (best.makespan == DBL_MAX) {
        json_decref(tried);
        if (j->resuming) { /* it ran before: what it lost may come back */
            snprintf(j->error, sizeof(j->error), "resuming: waiting for capacity: no split of "
                     "%d layers over %d-%d stage(s) fits the idle devices' memory", k.n_layers,
                     lo, hi);
            return false;
        }
        pl_coord_job_fail(c, j, "no feasible training plan: no split of %d layers over %d-%d "
                          "stage(s) fits the devices' memory with %s", k.n_layers, lo, hi,
                          is_forced ? pl_train_kind_name(forced) : "any schedule");
        return false;
    }
    json_t *pj = s_plan_json(c, cands, &best, R, tried);
    if (!pj) {
        pl_coord_job_fail(c, j, "coordinator out of memory");
        return false;
    }
    json_decref(j->plan);
    j->plan = pj;
    t->kind = best.kind;
    t->n_split = best.n_stages;
    t->n_allow = c->cfg->n_model_dirs; /* where its daemons may write its checkpoints */
    memcpy(t->allow, c->cfg->model_dirs, sizeof(t->allow[0]) * (size_t)t->n_allow);
    j->n_stages = best.n_stages * R; /* replica r's stage s is stage r * S + s */
    for (int s = 0; s < best.n_stages; s++)
        t->split[s] = best.split[s];
    for (int i = 0; i < j->n_stages; i++) {
        int s = i % best.n_stages, l = 0;
        for (int q = 0; q < s; q++)
            l += best.split[q];
        j->stages[i] = (pl_coord_stage_t){.node = cands[i].node, .dev = cands[i].dev,
                                          .first = l, .last = l + best.split[s] - 1,
                                          .used_gflops = cands[i].gflops};
    }
    j->microbatches = k.n_mb;
    j->max_ctx = t->cfg.seq_len + 1;
    j->max_tokens = t->cfg.seq_len;
    if (j->resuming) {
        const pl_coord_train_t *p = j->train;
        char from[64];
        if (p->ckpt_step > 0)
            snprintf(from, sizeof(from), "checkpoint-%d", p->ckpt_step);
        else
            snprintf(from, sizeof(from), "step %d (no whole checkpoint)", p->run_from);
        pl_coord_event(j, "resumed", "from %s after %s; %.2f s after it was interrupted", from,
                       j->lost_why, pl_now() - j->t_lost);
    }
    pl_log_info("job %u: training planned on %d stage(s) x %d replica(s), %s, predicted %.3g s "
                "a step, bubble %.3f", j->id, best.n_stages, R,
                pl_train_kind_name((pl_train_kind_t)best.kind), best.makespan, best.bubble);
    j->error[0] = '\0';
    return true;
}
