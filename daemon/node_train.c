/* A training assignment on pipeld (node_train.h): the schedule is built here, where the
 * scheduler may be used, and handed to the executor (pipeline/train_run.c) with the spec. */
#include "daemon/node_train.h"

#include "scheduler/train_sched.h"

pl_status_t pl_node_train_ops(const pl_msg_assign_t *a, pl_train_ops_t **ops_p)
{
    const pl_job_train_t *t = a->spec.train;
    int S = t->n_split, R = t->cfg.replicas;
    if (t->kind < 0 || t->kind >= PL_TRAIN_KIND_COUNT || S < 1 || S * R != a->n_stages)
        return pl_error(PL_ERR_PROTOCOL, "job %u: a training assignment without its schedule, "
                        "or a split of %d stages x %d replicas for %d stages", a->job, S, R,
                        a->n_stages);
    int s = a->stage % S, first = 0; /* replica a->stage / S's stage s */
    for (int i = 0; i < s; i++)
        first += t->split[i];
    if (first != a->first || a->last - a->first + 1 != t->split[s])
        return pl_error(PL_ERR_PROTOCOL, "job %u stage %d: layers %d-%d are not the split's "
                        "(%d from layer %d)", a->job, a->stage, a->first, a->last, t->split[s],
                        first);
    int n_mb = t->cfg.global_batch / t->cfg.micro_batch;
    if (n_mb % R)
        return pl_error(PL_ERR_PROTOCOL, "job %u: %d microbatches over %d replicas", a->job,
                        n_mb, R);
    /* no per-stage times: every stage must build the very same lists */
    return pl_tsched_build((pl_train_kind_t)t->kind, S, n_mb / R, NULL, 0, ops_p);
}
