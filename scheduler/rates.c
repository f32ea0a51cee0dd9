/* Device rates as the planner takes them: identical devices whose measured rates differ by no
 * more than measurement noise are given one rate, so that noise does not move layers. */
#include "scheduler/inputs.h"

#include <stdlib.h>
#include <string.h>

/* Same kind of device: backend and model name (a CPU's model string, a GPU's product name). */
static bool s_same_kind(const pl_sched_device_t *a, const pl_sched_device_t *b)
{
    return strcmp(a->backend, b->backend) == 0 && strcmp(a->name, b->name) == 0;
}

/* which: 0 GFLOP/s, 1 GB/s, 2 the decode row rate, 3 prefill's weight passes, 4 prefill's
 * attention, 5 the host's all-core read bandwidth */
#define S_RATES 6
static double *s_rate(pl_sched_device_t *d, int which)
{
    double *r[S_RATES] = {&d->gflops,    &d->mem_gbps,    &d->dec_gflops,
                          &d->pass_gbps, &d->attn_gflops, &d->host_gbps};
    return r[which];
}

static double s_key(const pl_sched_device_t *devs, const pl_sched_device_t *calib, int i, int which)
{
    pl_sched_device_t d = calib ? calib[i] : devs[i];
    return *s_rate(&d, which);
}

/* One rate of the devices idx[0..n) (one kind), sorted by its key (the calibration, else the
 * rate): runs whose keys lie within the band of their smallest take the mean of their rates. */
static void s_equalize(pl_sched_device_t *devs, const pl_sched_device_t *calib,
                       const bool *learned, int *idx, int n, int which, double band)
{
    for (int i = 0; which >= 2 && i < n; i++) /* a kernel rate some do not have (0): as it is */
        if (!(*s_rate(&devs[idx[i]], which) > 0) || !(s_key(devs, calib, idx[i], which) > 0))
            return;
    for (int i = 1; i < n; i++) { /* insertion sort by key, ties by index: deterministic */
        int k = idx[i], j = i - 1;
        double v = s_key(devs, calib, k, which);
        while (j >= 0 && s_key(devs, calib, idx[j], which) > v) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = k;
    }
    for (int lo = 0; lo < n;) {
        double v0 = s_key(devs, calib, idx[lo], which), sum = 0.0, sum_l = 0.0;
        int hi = lo, n_l = 0;
        while (hi < n && s_key(devs, calib, idx[hi], which) <= v0 * (1.0 + band)) {
            double r = *s_rate(&devs[idx[hi]], which);
            sum += r;
            if (learned && learned[idx[hi]]) {
                sum_l += r;
                n_l++;
            }
            hi++;
        }
        /* what jobs taught outweighs a calibration: a new device joins its group's lessons */
        double mean = n_l ? sum_l / n_l : sum / (hi - lo);
        for (int i = lo; i < hi; i++)
            *s_rate(&devs[idx[i]], which) = mean;
        lo = hi;
    }
}

void pl_sched_rates_equalize(pl_sched_device_t *devs, const pl_sched_device_t *calib,
                             const bool *learned, int n, const bool *cand, double band)
{
    if (!devs || n < 2 || !(band > 0))
        return;
    bool done[PL_SCHED_MAX_DEVICES] = {false};
    int idx[PL_SCHED_MAX_DEVICES];
    n = n < PL_SCHED_MAX_DEVICES ? n : PL_SCHED_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        if (done[i] || (cand && !cand[i]))
            continue;
        int m = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && (!cand || cand[j]) && s_same_kind(&devs[i], &devs[j])) {
                idx[m++] = j;
                done[j] = true;
            }
        for (int which = 0; which < S_RATES; which++)
            s_equalize(devs, calib, learned, idx, m, which, band);
    }
}

void pl_sched_cpu_shares(const pl_sched_device_t *devs, int n, const uint64_t *cpu_mask,
                         const int *threads, const bool *used, const double *busy, double *share)
{
    for (int i = 0; i < n; i++) {
        share[i] = 1.0;
        if ((used && !used[i]) || !cpu_mask[i] || strcmp(devs[i].backend, "cpu") != 0)
            continue;
        int ci = __builtin_popcountll(cpu_mask[i]);
        double demand = 0.0; /* threads wanting the CPUs of device i, each spread over its set */
        for (int e = 0; e < n; e++) {
            if ((used && !used[e]) || !cpu_mask[e] || strcmp(devs[e].backend, "cpu") != 0 ||
                strcmp(devs[e].host, devs[i].host) != 0)
                continue;
            int ce = __builtin_popcountll(cpu_mask[e]);
            int te = threads[e] < 1 ? 1 : threads[e] > ce ? ce : threads[e];
            double b = busy ? busy[e] : 1.0;
            demand += te * (double)__builtin_popcountll(cpu_mask[e] & cpu_mask[i]) / ce * b;
        }
        if (demand > ci)
            share[i] = ci / demand;
    }
}

/* A device whose host streams from the shared memory: a CPU with a host bandwidth. */
static bool s_streams(const pl_sched_device_t *d, const bool *used, int i)
{
    return (!used || used[i]) && d->host_gbps > 0 && strcmp(d->backend, "cpu") == 0;
}

void pl_sched_host_bw_shares(const pl_sched_device_t *devs, int n, const bool *used,
                             const double *busy, double *share)
{
    for (int i = 0; i < n; i++) {
        share[i] = 1.0;
        if (!s_streams(&devs[i], used, i))
            continue;
        /* the host's bandwidth: the best of its devices' measurements (one taken while another
         * daemon calibrated reads low), against what its streams want on average */
        double host = 0.0, demand = 0.0;
        for (int e = 0; e < n; e++) {
            if (!s_streams(&devs[e], used, e) || strcmp(devs[e].host, devs[i].host) != 0)
                continue;
            host = devs[e].host_gbps > host ? devs[e].host_gbps : host;
            demand += devs[e].mem_gbps * (busy ? busy[e] : 1.0);
        }
        if (demand > host)
            share[i] = host / demand;
    }
}

void pl_sched_plan_busy(const pl_plan_input_t *in, const pl_plan_t *plan, const double *share,
                        double *busy)
{
    const pl_sched_job_t *j = &in->job;
    int c = plan->prefill_chunk;
    double K = c > 0 && j->prompt_max > c ? (j->prompt_max + c - 1) / c : 1;
    double most = 0.0;
    for (int d = 0; d < in->n_devices; d++)
        busy[d] = 0.0;
    for (int i = 0; i < plan->n_stages; i++) {
        const pl_plan_stage_t *s = &plan->stages[i];
        double work = K * (s->t_prefill_call - s->xfer_prefill_call) +
                      (j->max_new_tokens - 1.0) * (s->t_decode - s->xfer_decode);
        busy[s->device] = work * (share ? share[s->device] : 1.0);
        most = busy[s->device] > most ? busy[s->device] : most;
    }
    for (int d = 0; d < in->n_devices; d++)
        busy[d] = most > 0 ? busy[d] / most : 0.0;
}
