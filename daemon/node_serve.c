/* pipeld's serving messages: the coordinator's SEQ_ADD / SEQ_CANCEL go to the one executor whose
 * (job, stage, epoch) they name, over its PAIR socket as START does; others are dropped. */
#include "daemon/node_serve.h"

#include "common/log.h"

bool pl_node_serve_route(pl_exec_t *const *execs, const uint32_t *epochs, int n, const pl_msg_t *m,
                         pl_metric_t *dropped)
{
    uint32_t job, epoch;
    int stage;
    uint64_t req;
    if (m->type == PL_MSG_SEQ_ADD)
        job = m->seq_add.job, stage = m->seq_add.stage, epoch = m->seq_add.epoch,
        req = m->seq_add.req;
    else
        job = m->seq_cancel.job, stage = m->seq_cancel.stage, epoch = m->seq_cancel.epoch,
        req = m->seq_cancel.req;
    /* an exact match: a request of an earlier epoch must not reach the stage that replaced it */
    for (int i = 0; i < n; i++) {
        if (pl_exec_job(execs[i]) != job || pl_exec_stage(execs[i]) != stage ||
            epochs[i] != epoch || !pl_exec_serves(execs[i]))
            continue;
        pl_status_t st = pl_tx_send(pl_exec_socket(execs[i]), NULL, m);
        if (st == PL_OK)
            return true;
        pl_metrics_add(dropped, "busy", 1);
        pl_log_warn_limited("job %u stage %d: %s of request %llu dropped: %s", job, stage,
                            pl_msg_name(m->type), (unsigned long long)req, pl_error_msg());
        return false;
    }
    pl_metrics_add(dropped, "unknown", 1);
    pl_log_warn_limited("%s of request %llu for job %u stage %d epoch %u, which this node does "
                        "not serve: dropped",
                        pl_msg_name(m->type), (unsigned long long)req, job, stage, epoch);
    return false;
}
