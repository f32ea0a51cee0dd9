/* Proportional layer split: each device gets layers in proportion to its rate, capped by its
 * memory, every device at least one layer. The optimal planner (plan.h) supersedes it. */
#include "scheduler/partition.h"

#include <math.h>
#include <stdlib.h>

static uint64_t s_stage_bytes(const pl_part_model_t *m, int i, int n_dev, int count)
{
    uint64_t b = (uint64_t)count * m->layer_bytes;
    if (i == 0)
        b += m->first_extra;
    if (i == n_dev - 1)
        b += m->last_extra;
    return b;
}

static int s_cap(const pl_part_device_t *d, const pl_part_model_t *m, int i, int n_dev)
{
    uint64_t fixed = s_stage_bytes(m, i, n_dev, 0);
    if (d->mem_bytes < fixed)
        return 0;
    if (m->layer_bytes == 0)
        return m->n_layers;
    uint64_t c = (d->mem_bytes - fixed) / m->layer_bytes;
    return c > (uint64_t)m->n_layers ? m->n_layers : (int)c;
}

pl_status_t pl_part_proportional(const pl_part_device_t *devs, int n_dev, const pl_part_model_t *m,
                                 int *first, int *count)
{
    double total = 0;
    int assigned = 0, cap_total = 0;
    int *cap;

    if (n_dev < 1 || m->n_layers < n_dev)
        return pl_error(PL_ERR_INFEASIBLE, "%d layers cannot be split over %d devices",
                        m->n_layers, n_dev);
    cap = calloc((size_t)n_dev, sizeof(*cap));
    if (!cap)
        return pl_error(PL_ERR_NOMEM, "partition: out of memory");
    for (int i = 0; i < n_dev; i++) {
        if (!(devs[i].rate > 0)) {
            free(cap);
            return pl_error(PL_ERR_INVALID, "device %d has no measured rate", i);
        }
        total += devs[i].rate;
        cap[i] = s_cap(&devs[i], m, i, n_dev);
        if (cap[i] < 1) {
            uint64_t need = s_stage_bytes(m, i, n_dev, 1);
            free(cap);
            return pl_error(PL_ERR_INFEASIBLE,
                            "device %d cannot hold even one layer: needs %.1f MiB, has %.1f MiB",
                            i, need / 1048576.0, devs[i].mem_bytes / 1048576.0);
        }
        cap_total += cap[i];
    }
    if (cap_total < m->n_layers) {
        uint64_t need = s_stage_bytes(m, 0, 1, m->n_layers), have = 0;
        for (int i = 0; i < n_dev; i++)
            have += devs[i].mem_bytes;
        free(cap);
        return pl_error(PL_ERR_INFEASIBLE,
                        "model needs %.1f MiB but the %d devices hold %.1f MiB: %.1f MiB missing",
                        need / 1048576.0, n_dev, have / 1048576.0,
                        need > have ? (need - have) / 1048576.0 : 0.0);
    }
    /* Largest-remainder rounding of the ideal shares, then repair caps and minimums. */
    for (int i = 0; i < n_dev; i++) {
        count[i] = (int)floor(m->n_layers * devs[i].rate / total);
        if (count[i] < 1)
            count[i] = 1;
        if (count[i] > cap[i])
            count[i] = cap[i];
        assigned += count[i];
    }
    while (assigned != m->n_layers) {
        int best = -1;
        double best_gap = 0;
        for (int i = 0; i < n_dev; i++) {
            double gap = m->n_layers * devs[i].rate / total - count[i];
            bool ok = assigned < m->n_layers ? count[i] < cap[i] : count[i] > 1;
            if (!ok)
                continue;
            if (assigned > m->n_layers)
                gap = -gap;
            if (best < 0 || gap > best_gap) {
                best = i;
                best_gap = gap;
            }
        }
        if (best < 0)
            break;
        count[best] += assigned < m->n_layers ? 1 : -1;
        assigned += assigned < m->n_layers ? 1 : -1;
    }
    free(cap);
    if (assigned != m->n_layers)
        return pl_error(PL_ERR_INFEASIBLE, "no split of %d layers fits the devices", m->n_layers);
    for (int i = 0, f = 0; i < n_dev; i++) {
        first[i] = f;
        f += count[i];
    }
    return PL_OK;
}
