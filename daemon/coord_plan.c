/* The coordinator's side of planning: the live cluster as the planner's input (devices in
 * node-name order with their calibrated or learned rates, links the daemons measured), the plan
 * of a queued job, PLAN requests, and what a finished job teaches about devices and links. */
#include "common/log.h"
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"
#include "pipeline/gen.h"
#include "scheduler/inputs.h"
#include "scheduler/modes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Learned rates move at most this factor away from what the plan used, per job. */
#define S_LEARN_MAX_RATIO 50.0
/* Less measured compute than this on a resource teaches nothing about it. */
#define S_LEARN_MIN_S 0.005
/* Lessons averaged: the first replaces the calibration, then each weighs 1 / min(n, this) (a
 * running mean of the last few jobs, so that one job of an odd shape does not set the rate). */
#define S_LEARN_WINDOW 4
/* A device whose stage ran this many times slower than its claimed rates predicted is flagged
 * and its rates set to the measured ones at once (a node may lie in HELLO; issue 13, item 7). */
#define S_CLAIM_FLAG_RATIO 4.0

typedef struct {
    int n;
    pl_sched_device_t devs[PL_SCHED_MAX_DEVICES];
    int node[PL_SCHED_MAX_DEVICES], dev[PL_SCHED_MAX_DEVICES];
    bool cand[PL_SCHED_MAX_DEVICES];
    int n_alive, n_cand;
    pl_sched_link_t *links; /* n * n */
    double own_gflops[PL_SCHED_MAX_DEVICES], own_gbps[PL_SCHED_MAX_DEVICES]; /* before shares */
    double own_dec[PL_SCHED_MAX_DEVICES], own_pass[PL_SCHED_MAX_DEVICES];
    double own_attn[PL_SCHED_MAX_DEVICES];
    double bw[PL_SCHED_MAX_DEVICES]; /* the share of its host's bandwidth each is charged now */
    pl_sched_device_t scratch[PL_SCHED_MAX_DEVICES]; /* the devices before that share (s_bw) */
    pl_sched_plan_inputs_t pi;                       /* what the job's plan was made from */
} s_live_t;

static bool s_allowed(const pl_coord_job_t *j, const char *node)
{
    if (j->spec.n_nodes == 0)
        return true;
    for (int i = 0; i < j->spec.n_nodes; i++)
        if (strcmp(j->spec.nodes[i], node) == 0)
            return true;
    return false;
}

/* The devices of every registered node (lost ones too: the mask leaves them out, which is the
 * re-planning entry point pl_replan), node-name order so that plans are reproducible.
 * Candidates: alive, allowed for the job, idle when idle_only, with usable figures. */
static pl_status_t s_live(pl_coord_t *c, const pl_coord_job_t *j, bool idle_only, s_live_t *lv)
{
    int order[PL_COORD_MAX_NODES];
    memset(lv, 0, sizeof(*lv));
    for (int i = 0; i < c->n_nodes; i++) {
        int k = i;
        while (k > 0 && strcmp(c->nodes[order[k - 1]].name, c->nodes[i].name) > 0) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int oi = 0; oi < c->n_nodes; oi++) {
        const pl_coord_node_t *nd = &c->nodes[order[oi]];
        /* a resuming job takes only nodes heard from since the interruption: the one whose
         * data plane failed may be dead without having been declared so yet */
        bool ok = nd->alive && s_allowed(j, nd->name) && !pl_coord_node_draining(c, nd->name) &&
                  (!j->resuming || nd->last_seen > j->t_lost);
        for (int d = 0; d < nd->n_dev && lv->n < PL_SCHED_MAX_DEVICES; d++) {
            const pl_coord_dev_t *dv = &nd->dev[d];
            pl_sched_device_t *sd = &lv->devs[lv->n];
            const char *colon = strchr(dv->id, ':');
            snprintf(sd->name, sizeof(sd->name), "%.*s", PL_SCHED_NAME_MAX, dv->name);
            snprintf(sd->node, sizeof(sd->node), "%s", nd->name);
            snprintf(sd->host, sizeof(sd->host), "%.*s", PL_SCHED_NAME_MAX, nd->host);
            snprintf(sd->backend, sizeof(sd->backend), "%s", dv->backend);
            sd->index = colon ? atoi(colon + 1) : d;
            sd->gflops = dv->n_obs ? dv->eff_gflops : dv->gflops;
            sd->mem_gbps = dv->n_obs ? dv->eff_mem_gbps : dv->mem_gbps;
            sd->dec_gflops = dv->n_obs ? dv->eff_dec_gflops : dv->dec_gflops;
            sd->pass_gbps = dv->n_obs ? dv->eff_pass_gbps : dv->pass_gbps;
            sd->attn_gflops = dv->n_obs ? dv->eff_attn_gflops : dv->attn_gflops;
            sd->host_gbps = dv->n_obs ? dv->eff_host_gbps : dv->host_gbps;
            sd->mem_bytes = dv->mem_bytes; /* the daemon's reserve is already taken off */
            bool usable = sd->gflops > 0 && sd->mem_gbps > 0;
            if (!usable) /* keeps the input valid; the device is no candidate */
                sd->gflops = sd->mem_gbps = 1.0;
            lv->node[lv->n] = order[oi];
            lv->dev[lv->n] = d;
            /* a node still running stages of an earlier assignment is not idle until they go */
            lv->cand[lv->n] = ok && usable && (!idle_only || (!nd->busy_job && !nd->n_stale));
            lv->n_alive += ok;
            lv->n_cand += lv->cand[lv->n];
            lv->n++;
        }
    }
    if (lv->n == 0)
        return PL_OK;
    /* identical devices (calibrated alike) plan with one rate, the mean of their lessons */
    pl_sched_device_t *calib = malloc(sizeof(*calib) * (size_t)lv->n);
    bool learned[PL_SCHED_MAX_DEVICES];
    if (!calib)
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    for (int i = 0; i < lv->n; i++) {
        const pl_coord_dev_t *dv = &c->nodes[lv->node[i]].dev[lv->dev[i]];
        learned[i] = dv->n_obs > 0;
        calib[i] = lv->devs[i];
        if (!dv->flagged) { /* a flagged claim says nothing: its measured rates stand for it */
            calib[i].gflops = dv->gflops;
            calib[i].mem_gbps = dv->mem_gbps;
            calib[i].dec_gflops = dv->dec_gflops;
            calib[i].pass_gbps = dv->pass_gbps;
            calib[i].attn_gflops = dv->attn_gflops;
            calib[i].host_gbps = dv->host_gbps;
        }
    }
    pl_sched_rates_equalize(lv->devs, calib, learned, lv->n, lv->cand, PL_SCHED_CALIB_BAND);
    free(calib);
    for (int i = 0; i < lv->n; i++) {
        lv->own_gflops[i] = lv->devs[i].gflops;
        lv->own_gbps[i] = lv->devs[i].mem_gbps;
        lv->own_dec[i] = lv->devs[i].dec_gflops;
        lv->own_pass[i] = lv->devs[i].pass_gbps;
        lv->own_attn[i] = lv->devs[i].attn_gflops;
        lv->bw[i] = 1.0;
    }
    lv->links = calloc((size_t)lv->n * (size_t)lv->n, sizeof(*lv->links));
    if (!lv->links)
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    for (int a = 0; a < lv->n; a++)
        for (int b = 0; b < lv->n; b++) {
            const pl_coord_link_t *l = &c->links[lv->node[a]][lv->node[b]];
            if (a != b && l->valid)
                lv->links[(size_t)a * lv->n + b] = (pl_sched_link_t){l->gbps, l->latency_s};
        }
    return PL_OK;
}

/* The share of its CPUs each device gets while the devices of used[] compute, each busy[i] of
 * the time (NULL: always): daemons pinned to shared CPUs split them (pl_sched_cpu_shares). */
static void s_shares(const pl_coord_t *c, const s_live_t *lv, const bool *used,
                     const double *busy, double *share)
{
    uint64_t mask[PL_SCHED_MAX_DEVICES];
    int threads[PL_SCHED_MAX_DEVICES];
    for (int i = 0; i < lv->n; i++) {
        const pl_coord_dev_t *dv = &c->nodes[lv->node[i]].dev[lv->dev[i]];
        mask[i] = dv->cpu_mask;
        threads[i] = dv->cores;
    }
    pl_sched_cpu_shares(lv->devs, lv->n, mask, threads, used, busy, share);
}

/* The share of its own rates each device has in lv->devs now. */
static double s_charged(const s_live_t *lv, int i)
{
    return lv->own_gflops[i] > 0 ? lv->devs[i].gflops / lv->own_gflops[i] : 1.0;
}

/* Each device's busy fraction in `plan` (made from lv->pi) at its own rates. */
static void s_busy(const s_live_t *lv, const pl_plan_t *plan, double *busy)
{
    double share[PL_SCHED_MAX_DEVICES];
    for (int i = 0; i < lv->n; i++)
        share[i] = s_charged(lv, i);
    pl_sched_plan_busy(&lv->pi.in, plan, share, busy);
}

/* The share of its host's read bandwidth each device gets with these shares of its CPUs, while
 * the devices of used[] compute, each busy[i] of the time (NULL: always); pl_sched_host_bw_shares
 * over the devices' read rates at those CPU shares. */
static void s_bw(s_live_t *lv, const double *share, const bool *used, const double *busy,
                 double *bw)
{
    memcpy(lv->scratch, lv->devs, sizeof(lv->devs[0]) * (size_t)lv->n);
    for (int i = 0; i < lv->n; i++)
        lv->scratch[i].mem_gbps = lv->own_gbps[i] * share[i];
    pl_sched_host_bw_shares(lv->scratch, lv->n, used, busy, bw);
}

/* Rates as the devices get them with these shares of their own CPUs and (read bandwidth only)
 * of their host's bandwidth; true when a rate changed. */
static bool s_apply(s_live_t *lv, const double *share, const double *bw)
{
    bool changed = false;
    for (int i = 0; i < lv->n; i++) {
        double g = lv->own_gflops[i] * share[i], m = lv->own_gbps[i] * share[i] * bw[i];
        changed |= bw[i] != lv->bw[i];
        lv->bw[i] = bw[i];
        double r = lv->own_dec[i] * share[i], ps = lv->own_pass[i] * share[i];
        double at = lv->own_attn[i] * share[i];
        changed |= g != lv->devs[i].gflops || m != lv->devs[i].mem_gbps ||
                   r != lv->devs[i].dec_gflops || ps != lv->devs[i].pass_gbps ||
                   at != lv->devs[i].attn_gflops;
        lv->devs[i].gflops = g;
        lv->devs[i].mem_gbps = m;
        lv->devs[i].dec_gflops = r;
        lv->devs[i].pass_gbps = ps;
        lv->devs[i].attn_gflops = at;
    }
    return changed;
}

/* Plan job j over lv's candidates with the model's stored tensor bytes as its weights; the
 * model's config in *cfg, what the plan was made from in lv->pi. */
static pl_status_t s_plan_once(const pl_coord_job_t *j, s_live_t *lv, pl_model_config_t *cfg,
                          pl_plan_t **plan_p)
{
    pl_model_t *m = NULL;
    pl_model_bytes_t *b = NULL;
    pl_status_t st;
    if ((st = pl_model_open(j->spec.model, &m)) || (st = pl_model_bytes_new(m, &b))) {
        pl_model_destroy(&m);
        return pl_error_prefix(st, "model %s: ", j->spec.model);
    }
    *cfg = *pl_model_config(m);
    pl_job_spec_t shape; /* a deployment: sized as its KV slots full of whole contexts */
    pl_job_spec_init(&shape);
    if (j->dep && (st = pl_coord_deploy_shape(j, &shape))) {
        pl_model_bytes_destroy(&b);
        pl_model_destroy(&m);
        return st;
    }
    st = pl_sched_plan_spec(j->dep ? &shape : &j->spec, cfg, b, lv->devs, lv->n, lv->links,
                            lv->cand, pl_gen_spec_wire_bytes(&j->spec), &lv->pi, plan_p);
    if (j->dep) {
        shape.prompts = NULL; /* the shape borrowed nothing else of the spec's */
        pl_job_spec_clear(&shape);
    }
    pl_model_bytes_destroy(&b);
    pl_model_destroy(&m);
    return st;
}

/* Plan j again with the rates lv->devs has now, over the candidates in used[] only; *plan_p
 * replaced on success, else kept with what it was made from, the rates in `before` and the
 * bandwidth shares in before_bw. */
static void s_replan(const pl_coord_job_t *j, s_live_t *lv, pl_model_config_t *cfg,
                     const bool *used, const pl_sched_device_t *before, const double *before_bw,
                     pl_plan_t **plan_p)
{
    bool cand[PL_SCHED_MAX_DEVICES];
    memcpy(cand, lv->cand, sizeof(cand[0]) * (size_t)lv->n);
    for (int i = 0; i < lv->n; i++)
        lv->cand[i] = lv->cand[i] && used[i];
    pl_plan_t *again = NULL;
    pl_sched_plan_inputs_t first = lv->pi;
    memset(&lv->pi, 0, sizeof(lv->pi));
    if (s_plan_once(j, lv, cfg, &again) == PL_OK) {
        pl_sched_plan_inputs_clear(&first);
        pl_plan_destroy(plan_p);
        *plan_p = again;
    } else { /* keep the first plan and what it was made from */
        pl_error_clear();
        pl_sched_plan_inputs_clear(&lv->pi);
        lv->pi = first;
        memcpy(lv->devs, before, sizeof(before[0]) * (size_t)lv->n);
        memcpy(lv->bw, before_bw, sizeof(before_bw[0]) * (size_t)lv->n);
    }
    memcpy(lv->cand, cand, sizeof(cand[0]) * (size_t)lv->n);
}

/* s_plan_once with the candidates' CPU shares as if every one computed all the time; then once
 * more, restricted to the devices the plan uses, with the shares their stages' busy fractions
 * in it give (daemons on one core alternate: one waits while the other computes). Shares taken
 * from one split may flatter the next (a stage moved onto the shared core keeps it busier): when
 * the new plan's own busy fractions give a device less than it was charged, a last plan charges
 * each the smaller of the two. The shares of a host's read bandwidth (s_bw) follow the same
 * steps, from the same busy fractions. */
static pl_status_t s_plan(const pl_coord_t *c, const pl_coord_job_t *j, s_live_t *lv,
                          pl_model_config_t *cfg, pl_plan_t **plan_p)
{
    double share[PL_SCHED_MAX_DEVICES], busy[PL_SCHED_MAX_DEVICES], bw[PL_SCHED_MAX_DEVICES];
    s_shares(c, lv, lv->cand, NULL, share);
    s_bw(lv, share, lv->cand, NULL, bw);
    s_apply(lv, share, bw);
    pl_plan_t *plan = NULL;
    pl_status_t st = s_plan_once(j, lv, cfg, &plan);
    if (st)
        return st;
    bool used[PL_SCHED_MAX_DEVICES] = {false};
    for (int i = 0; i < plan->n_stages; i++)
        used[plan->stages[i].device] = true;
    pl_sched_device_t before[PL_SCHED_MAX_DEVICES];
    double before_bw[PL_SCHED_MAX_DEVICES];
    for (int round = 0; round < 2; round++) {
        s_busy(lv, plan, busy);
        s_shares(c, lv, used, busy, share);
        bool less = false;
        for (int i = 0; i < lv->n; i++) {
            double was = s_charged(lv, i);
            less |= used[i] && share[i] < was * (1.0 - 1e-9);
            if (round > 0 && share[i] > was)
                share[i] = was;
        }
        s_bw(lv, share, used, busy, bw);
        for (int i = 0; i < lv->n; i++) {
            less |= used[i] && bw[i] < lv->bw[i] * (1.0 - 1e-9);
            if (round > 0 && bw[i] > lv->bw[i])
                bw[i] = lv->bw[i];
        }
        if (round > 0 && !less)
            break;
        memcpy(before, lv->devs, sizeof(before[0]) * (size_t)lv->n);
        memcpy(before_bw, lv->bw, sizeof(before_bw[0]) * (size_t)lv->n);
        if (!s_apply(lv, share, bw))
            break;
        s_replan(j, lv, cfg, used, before, before_bw, &plan);
    }
    *plan_p = plan;
    return PL_OK;
}

/* Say for each stage's link whether the daemons measured it or the planner's default stood in. */
static void s_mark_links(const pl_coord_t *c, const s_live_t *lv, const pl_plan_t *plan, json_t *pj)
{
    json_t *stages = json_object_get(pj, "stages");
    for (int i = 0; i < plan->n_stages; i++) {
        int from = plan->stages[i].device, to = plan->stages[(i + 1) % plan->n_stages].device;
        const pl_coord_link_t *l = &c->links[lv->node[from]][lv->node[to]];
        bool measured = from != to && l->valid;
        json_t *jl = json_object_get(json_array_get(stages, (size_t)i), "link");
        json_object_set_new(jl, "measured", json_boolean(measured));
        if (measured)
            json_object_set_new(jl, "transport", json_string(l->transport));
    }
}

/* Why a resuming job waits: the weights it needs beside the memory of the devices it may use. */
static void s_capacity_note(const pl_coord_t *c, pl_coord_job_t *j, const s_live_t *lv)
{
    char planner[256];
    pl_model_t *m = NULL;
    double need = 0, have = 0;
    snprintf(planner, sizeof(planner), "%s", pl_error_msg());
    if (pl_model_open(j->spec.model, &m) == PL_OK)
        need = (double)pl_model_weight_bytes(m);
    else
        pl_error_clear();
    pl_model_destroy(&m);
    for (int i = 0; i < lv->n; i++)
        if (lv->cand[i])
            have += (double)lv->devs[i].mem_bytes;
    bool gib = need >= 1073741824.0 || have >= 1073741824.0;
    double unit = gib ? 1073741824.0 : 1048576.0;
    char what[128];
    pl_coord_resume_what(j, what, sizeof(what));
    snprintf(j->error, sizeof(j->error),
             "waiting for capacity: need %.2f %s of weights, have %.2f %s on %d device(s) "
             "(%s); %s when a node joins",
             need / unit, gib ? "GiB" : "MiB", have / unit, gib ? "GiB" : "MiB", lv->n_cand,
             planner, what);
    (void)c;
}

/* A resuming job waits a little for every node that seems alive to be heard from since the
 * interruption, so it is planned on all the live ones, not on whichever answered first; a node
 * still silent after two heartbeats is left out (it may be the lost one). */
static bool s_hearing(const pl_coord_t *c, pl_coord_job_t *j)
{
    int silent = 0;
    if (!j->resuming || pl_now() - j->t_lost > 2.0 * c->cfg->heartbeat_ms / 1000.0)
        return false;
    for (int i = 0; i < c->n_nodes; i++)
        silent += c->nodes[i].alive && s_allowed(j, c->nodes[i].name) &&
                  c->nodes[i].last_seen <= j->t_lost;
    if (silent && j->spec.train) {
        snprintf(j->error, sizeof(j->error), "resuming: waiting to hear from %d node(s) (%s)",
                 silent, j->lost_why);
    } else if (silent) {
        char what[128];
        pl_coord_resume_what(j, what, sizeof(what));
        snprintf(j->error, sizeof(j->error), "%s: waiting to hear from %d node(s) (%s)", what,
                 silent, j->lost_why);
    }
    return silent > 0;
}

bool pl_coord_plan_job(pl_coord_t *c, pl_coord_job_t *j)
{
    if (s_hearing(c, j))
        return false;
    if (j->spec.train)
        return pl_coord_train_plan(c, j); /* coord_train_plan.c */
    s_live_t *lv = calloc(1, sizeof(*lv));
    pl_plan_t *plan = NULL;
    bool ok = false;
    char note[256];
    if (!lv || s_live(c, j, true, lv)) {
        snprintf(j->error, sizeof(j->error), "waiting: coordinator out of memory");
        goto out;
    }
    int want = j->spec.stages ? j->spec.stages : PL_MIN(lv->n_alive, j->n_layers);
    if (want == 0 || lv->n_cand < want) {
        int len =
            snprintf(j->error, sizeof(j->error), "waiting for %d idle device(s): %d idle, %d alive",
                     PL_MAX(want, 1), lv->n_cand, lv->n_alive);
        for (int k = 0; k < j->spec.n_nodes && len > 0 && (size_t)len < sizeof(j->error); k++) {
            int ni = pl_coord_find_node(c, j->spec.nodes[k]);
            if (ni < 0 || !c->nodes[ni].alive)
                len += snprintf(j->error + len, sizeof(j->error) - (size_t)len,
                                "; placement names node '%s', which is %s", j->spec.nodes[k],
                                ni < 0 ? "not registered" : "lost");
        }
        goto out;
    }
    pl_model_config_t cfg;
    if (s_plan(c, j, lv, &cfg, &plan)) {
        if (j->resuming) /* it ran before: what it lost may come back */
            s_capacity_note(c, j, lv);
        else
            pl_coord_job_fail(c, j, "no feasible plan: %s", pl_error_msg());
        goto out;
    }
    if (!j->dep && pl_sched_waves_note(plan, note, sizeof(note))) {
        if (j->resuming) {
            pl_error(PL_ERR_INFEASIBLE, "%s", note);
            s_capacity_note(c, j, lv);
        } else {
            pl_coord_job_fail(c, j, "%s", note);
        }
        goto out;
    }
    if (plan->n_stages > PL_COORD_MAX_STAGES) {
        pl_coord_job_fail(c, j, "the plan has %d stages, more than %d", plan->n_stages,
                          PL_COORD_MAX_STAGES);
        goto out;
    }
    int mb = plan->microbatches;
    pl_gen_job_t g = {0};
    if (j->dep) /* no prompts: its slots and lanes (fewer slots when memory is short) */
        pl_coord_deploy_planned(j, plan->resident_seqs, mb, plan->n_stages);
    else if (pl_gen_job_from_spec(&j->spec, mb, &cfg, &g)) {
        pl_coord_job_fail(c, j, "%s", pl_error_msg());
        goto out;
    }
    /* every stage's buffers fit both the job as it started and as it resumes (only the first
     * and last stages hear where sequences stand; each checks what it knows against this) */
    if (!j->dep) {
        int from_start = pl_gen_job_max_tokens(&g);
        if (pl_coord_resume_apply(j, &g)) { /* its messages carry the resumed tokens too */
            pl_gen_job_clear(&g);
            pl_coord_job_fail(c, j, "resume: %s", pl_error_msg());
            goto out;
        }
        j->microbatches = g.microbatches;
        j->prefill_chunk = plan->prefill_chunk;
        j->prefill_sched = plan->prefill_sched;
        j->max_tokens =
            PL_MAX(PL_MAX(pl_gen_job_max_tokens(&g), from_start), (j->n_seqs + mb - 1) / mb);
        pl_gen_job_clear(&g);
    }
    json_t *pj = pl_plan_to_json_full(plan, &lv->pi.in, j->spec.planner);
    if (!pj) {
        pl_coord_job_fail(c, j, "coordinator out of memory");
        goto out;
    }
    s_mark_links(c, lv, plan, pj);
    json_object_set_new(pj, "max_ctx", json_integer(j->max_ctx));
    if (j->dep)
        json_object_set_new(pj, "kv_slots", json_integer(j->n_seqs));
    json_object_set_new(pj, "max_tokens_per_call", json_integer(j->max_tokens));
    json_decref(j->plan);
    j->plan = pj;
    j->n_stages = plan->n_stages;
    for (int i = 0; i < plan->n_stages; i++) {
        const pl_plan_stage_t *s = &plan->stages[i];
        pl_coord_stage_t *cs = &j->stages[i];
        *cs = (pl_coord_stage_t){.node = lv->node[s->device],
                                 .dev = lv->dev[s->device],
                                 .first = s->first_layer,
                                 .last = s->last_layer,
                                 .used_gflops = lv->devs[s->device].gflops,
                                 .used_gbps = lv->devs[s->device].mem_gbps,
                                 .used_dec_gflops = lv->devs[s->device].dec_gflops,
                                 .used_pass_gbps = lv->devs[s->device].pass_gbps,
                                 .used_attn_gflops = lv->devs[s->device].attn_gflops,
                                 .bw_share = lv->bw[s->device],
                                 .used_host_gbps = lv->devs[s->device].host_gbps,
                                 .share = lv->own_gflops[s->device] > 0
                                              ? lv->devs[s->device].gflops /
                                                    lv->own_gflops[s->device]
                                              : 1.0};
        cs->have_terms = pl_sched_terms(&lv->pi.in, plan, i, &cs->terms) == PL_OK;
    }
    pl_log_info("job %u: planned %d stage(s) (%s, %s search), predicted %.3f s, %.1f decode tok/s",
                j->id, plan->n_stages, pl_planner_name(j->spec.planner), plan->search,
                plan->job_time, plan->decode_tok_s);
    j->error[0] = '\0';
    ok = true;
out:
    pl_plan_destroy(&plan);
    if (lv) {
        free(lv->links);
        pl_sched_plan_inputs_clear(&lv->pi);
    }
    free(lv);
    return ok;
}

void pl_coord_on_plan(pl_coord_t *c, const pl_tx_peer_t *from, pl_coord_job_t **job_p)
{
    pl_coord_job_t *j = *job_p;
    s_live_t *lv = NULL;
    pl_plan_t *plan = NULL;
    char note[256] = "";
    pl_status_t st;
    *job_p = NULL;
    lv = calloc(1, sizeof(*lv));
    if (!lv || s_live(c, j, false, lv)) {
        pl_coord_reply_error(c, from, PL_ERR_NOMEM, "coordinator out of memory");
        goto out;
    }
    if (lv->n_cand == 0) {
        pl_coord_reply_error(c, from, PL_ERR_NO_DEVICE,
                             "cannot plan: no alive node%s has a usable device",
                             j->spec.n_nodes ? " allowed by the job" : "");
        goto out;
    }
    pl_model_config_t cfg;
    if ((st = s_plan(c, j, lv, &cfg, &plan))) {
        pl_coord_reply_error(c, from, st, "no feasible plan: %s", pl_error_msg());
        goto out;
    }
    pl_sched_waves_note(plan, note, sizeof(note));
    json_t *pj = pl_plan_to_json_full(plan, &lv->pi.in, j->spec.planner), *busy = json_array();
    for (int i = 0; i < plan->n_stages; i++) {
        const pl_coord_node_t *nd = &c->nodes[lv->node[plan->stages[i].device]];
        if (nd->busy_job)
            json_array_append_new(
                busy, json_pack("{s:s, s:i}", "node", nd->name, "job", (int)nd->busy_job));
    }
    if (!pj) {
        json_decref(busy);
        pl_coord_reply_error(c, from, PL_ERR_NOMEM, "coordinator out of memory");
        goto out;
    }
    s_mark_links(c, lv, plan, pj);
    pl_coord_reply(c, from, json_pack("{s:o, s:s, s:o}", "plan", pj, "note", note, "busy", busy));
out:
    pl_plan_destroy(&plan);
    if (lv) {
        free(lv->links);
        pl_sched_plan_inputs_clear(&lv->pi);
    }
    free(lv);
    pl_coord_job_free(j);
}

void pl_coord_forget_node(pl_coord_t *c, int node)
{
    for (int i = 0; i < PL_COORD_MAX_NODES; i++) {
        c->links[node][i].valid = false;
        c->links[i][node].valid = false;
    }
}

/* The link stage s measured to the next stage (the probe in its DONE statistics). */
static void s_learn_link(pl_coord_t *c, const pl_coord_job_t *j, int s)
{
    const pl_msg_probe_t *p = &j->stages[s].stats.probe;
    if (!j->stages[s].stats.has_probe || !(p->gbps >= 1e-6 && p->gbps <= 1e6) ||
        !(p->latency_s <= 10))
        return;
    int a = j->stages[s].node, b = j->stages[(s + 1) % j->n_stages].node;
    pl_coord_link_t *l = &c->links[a][b];
    *l = (pl_coord_link_t){.valid = true, .gbps = p->gbps, .latency_s = p->latency_s,
                           .at = pl_now()};
    snprintf(l->transport, sizeof(l->transport), "%s", p->transport);
    pl_log_debug("link %s -> %s: %.2f GB/s, %.1f us (%s)", c->nodes[a].name, c->nodes[b].name,
                 p->gbps, p->latency_s * 1e6, l->transport);
}

/* Effective rates from a stage's measured compute: each phase charges the resource that bound
 * its prediction; a resource's new rate is the used one times predicted / measured time. A
 * phase on decode's kernels (terms.*_rows) charges their row rate and the bandwidth together, its
 * two overlapping terms, never prefill's GFLOP/s: the phases run different kernels (decode's
 * rows charged at prefill's rate once left the weight pass next to nothing and the bandwidth
 * learning nothing). Prefill's weight passes move with its GFLOP/s, as one measured time cannot
 * tell them apart; its attention keeps a lesson of its own, moved by what the prefill phase's
 * compute taught (its GFLOP/s, or decode's row rate when the phase ran on decode's kernels) to
 * the power of attention's share of the phase's predicted compute: a 64-token prompt's lesson
 * (attention ~1% of it) leaves the rate as it was, a long prompt's moves it in part. A stage the
 * plan charged less than its read rate because its host's streams shared the host's bandwidth
 * (bw_share < 1: that total bound it, not the device) teaches the host's bandwidth instead, and
 * its own read rate stays what it was (the share taken out): the lesson moved into the device's
 * rate would be cut away again by the same share at the next plan, and stay unlearned. */
static void s_learn_rates(pl_coord_t *c, const pl_coord_job_t *j, int s)
{
    const pl_coord_stage_t *cs = &j->stages[s];
    const pl_msg_stats_t *st = &cs->stats;
    double pre_s = st->prefill_compute_s, dec_s = st->decode_compute_s;
    int64_t pre_n = st->prefill_calls, dec_n = st->decode_calls;
    if (!cs->have_terms || pre_s > 1e9 || dec_s > 1e9 || pre_n > INT32_MAX || dec_n > INT32_MAX)
        return;
    const pl_sched_terms_t *t = &cs->terms;
    /* [0] compute (and prefill's passes), [1] memory, [2] decode's rows */
    double pred[3] = {0, 0, 0}, meas[3] = {0, 0, 0};
    const double ph[2][3] = {{t->pre_flop_s, t->pre_mem_s, (double)pre_n},
                             {t->dec_flop_s, t->dec_mem_s, (double)dec_n}};
    const bool on_rows[2] = {t->pre_rows, t->dec_rows};
    const double ph_s[2] = {pl_sched_terms_prefill(t), pl_sched_terms_decode(t)};
    /* the share of its compute time the stage had its CPU (others ran the rest) */
    double cpu = st->has_overlap && st->compute_s > 0 && st->compute_cpu_s > 0
                     ? PL_MIN(1.0, st->compute_cpu_s / st->compute_s)
                     : 1.0;
    const double took[2] = {pre_s, dec_s};
    for (int p = 0; p < 2; p++) {
        if (ph[p][2] < 1)
            continue;
        if (on_rows[p]) { /* rows and bandwidth at once */
            for (int r = 1; r < 3; r++) {
                pred[r] += ph_s[p] * ph[p][2];
                meas[r] += took[p];
            }
            continue;
        }
        int r = ph[p][0] < ph[p][1] ? 1 : 0;
        pred[r] += ph_s[p] * ph[p][2];
        meas[r] += took[p];
    }
    pl_coord_dev_t *d = &c->nodes[cs->node].dev[cs->dev];
    /* the host's share taken out of the read rate: the device's at its share of CPUs */
    double bw = cs->bw_share > 0 && cs->bw_share < 1 ? cs->bw_share : 1.0;
    double rate[3] = {cs->used_gflops, cs->used_gbps / bw, cs->used_dec_gflops};
    double host = cs->used_host_gbps; /* what the host's bandwidth was taken as */
    /* per rate: the correction the job taught (k) and what its share was taken out by (own),
     * so that rate = used * k / own; attention's lesson below takes the share out whole and
     * only a part of the correction */
    double kk[3] = {1.0, 1.0, 1.0}, own[3] = {1.0, 1.0, 1.0};
    bool flag = false;
    for (int r = 0; r < 3; r++) {
        if (meas[r] < S_LEARN_MIN_S || pred[r] <= 0)
            continue;
        double k = PL_MIN(PL_MAX(pred[r] / meas[r], 1.0 / S_LEARN_MAX_RATIO), S_LEARN_MAX_RATIO);
        bool liar = pred[r] / meas[r] < 1.0 / S_CLAIM_FLAG_RATIO;
        if (liar) { /* the measured rate, unclamped */
            k = pred[r] / meas[r];
            flag = true;
            if (r == 1)
                rate[1] = cs->used_gbps;
        }
        /* the plan charged the device its share of CPUs shared with other stages: the lesson is
         * about the device itself, and never more than it computed while it ran (CPU time) */
        double share = cs->share > 0 ? cs->share : 1.0;
        kk[r] = k;
        own[r] = liar ? 1.0 : PL_MAX(share, cpu);
        if (r == 1 && bw < 1 && !liar) { /* the host's total bound it: the lesson is the host's */
            host *= k;
            k = 1.0;
        }
        rate[r] = rate[r] * k / own[r];
    }
    if (cs->share > 0 && cpu > cs->share * 1.25) /* the share charged was not what it had */
        pl_log_info("%s %s: job %u charged it %.2f of its CPUs, it computed %.2f of the time: "
                    "the daemons sharing them did not all compute at once",
                    c->nodes[cs->node].name, d->id, j->id, cs->share, cpu);
    if (cs->share > 0 && cs->share < 1) /* a resource not measured keeps the device's own rate */
        for (int r = 0; r < 3; r++)
            if (meas[r] < S_LEARN_MIN_S || pred[r] <= 0) {
                rate[r] /= cs->share;
                own[r] = cs->share;
            }
    if (flag) {
        pl_log_warn("%s %s: claims %.3g GFLOP/s, %.3g GB/s but its stage of job %u measured "
                    "%.3g GFLOP/s, %.3g GB/s: flagged, planning with the measured rates",
                    c->nodes[cs->node].name, d->id, d->gflops, d->mem_gbps, j->id, rate[0],
                    rate[1]);
        d->flagged = true;
        d->n_obs = 0; /* the claim is worth nothing: the measurement replaces it */
    }
    /* the first lesson replaces the calibration; later ones join a running mean of the last
     * few (one job of an odd shape or on a busy machine does not set the rate; an average keeps
     * two identical devices that ran different jobs close) */
    double w = d->n_obs ? 1.0 / PL_MIN(d->n_obs + 1, S_LEARN_WINDOW) : 1.0;
    d->eff_gflops = d->n_obs ? d->eff_gflops + w * (rate[0] - d->eff_gflops) : rate[0];
    d->eff_mem_gbps = d->n_obs ? d->eff_mem_gbps + w * (rate[1] - d->eff_mem_gbps) : rate[1];
    d->eff_dec_gflops = d->n_obs ? d->eff_dec_gflops + w * (rate[2] - d->eff_dec_gflops) : rate[2];
    d->eff_host_gbps = d->n_obs ? d->eff_host_gbps + w * (host - d->eff_host_gbps) : host;
    /* the passes move with the GFLOP/s (see above) */
    double pass = cs->used_gflops > 0 ? cs->used_pass_gbps * rate[0] / cs->used_gflops : 0.0;
    d->eff_pass_gbps = d->n_obs ? d->eff_pass_gbps + w * (pass - d->eff_pass_gbps) : pass;
    /* the prefill phase's kernel: its correction to the power of attention's share of the
     * phase, and the share of CPUs taken out whole (the rate used was the device's times its
     * share: a part of it left in would shrink the rate at every job on a shared core) */
    int pk = t->pre_rows ? 2 : 0;
    double a_share = t->pre_flop_s > 0 ? PL_MIN(1.0, t->pre_attn_s / t->pre_flop_s) : 0.0;
    double attn = (t->pre_rows ? cs->used_dec_gflops : cs->used_gflops) > 0
                      ? cs->used_attn_gflops / own[pk] * pow(kk[pk], a_share)
                      : 0.0;
    d->eff_attn_gflops = d->n_obs ? d->eff_attn_gflops + w * (attn - d->eff_attn_gflops) : attn;
    d->n_obs++;
    pl_log_info("%s %s: effective %.2f GFLOP/s, %.2f GB/s, decode rows %.2f GFLOP/s, passes "
                "%.2f GB/s, attention %.2f GFLOP/s, host %.2f GB/s after job %u (calibrated "
                "%.2f, %.2f, %.2f, %.2f, %.2f, %.2f)",
                c->nodes[cs->node].name, d->id, d->eff_gflops, d->eff_mem_gbps, d->eff_dec_gflops,
                d->eff_pass_gbps, d->eff_attn_gflops, d->eff_host_gbps, j->id, d->gflops,
                d->mem_gbps, d->dec_gflops, d->pass_gbps, d->attn_gflops, d->host_gbps);
}

void pl_coord_learn(pl_coord_t *c, const pl_coord_job_t *j)
{
    for (int s = 0; s < j->n_stages; s++) {
        if (!j->stages[s].have_stats || !c->nodes[j->stages[s].node].alive)
            continue;
        if (j->n_stages > 1)
            s_learn_link(c, j, s);
        s_learn_rates(c, j, s);
    }
}
