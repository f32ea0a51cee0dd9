/* A training job's resume from its last whole checkpoint after a lost node or a coordinator
 * restart: the spec then resumes from it, as a job submitted with resume_from does. */
#include "common/util.h"
#include "daemon/coord_int.h"
#include "daemon/coord_train.h"
#include "pipeline/train_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_CURVE (1 << 20) /* coord_train.c's: steps whose loss is kept */

static void s_progress_free(pl_coord_train_t **p_p)
{
    if (*p_p)
        free((*p_p)->losses);
    free(*p_p);
    *p_p = NULL;
}

pl_status_t pl_coord_train_rewind(pl_coord_job_t *j, pl_coord_train_t **from_p, char *what,
                                  size_t len)
{
    pl_job_train_t *t = j->spec.train;
    pl_cfg_train_t *cfg = &t->cfg;
    pl_coord_train_t *from = *from_p, *mine = j->train;
    char dir[PATH_MAX];
    pl_status_t st;
    if (from->ckpt_step >= cfg->steps)
        return pl_error(PL_ERR_INVALID, "its final checkpoint (step %d) is whole already, but "
                        "not every stage reported its end", from->ckpt_step);
    if (from->ckpt_step > 0 &&
        (st = pl_train_run_ckpt_dir(cfg, from->ckpt_step, dir, sizeof(dir))))
        return st;
    pl_job_train_t *was = malloc(sizeof(*was)); /* the spec's training part, back on error */
    if (!was)
        return pl_error(PL_ERR_NOMEM, "coordinator out of memory");
    *was = *t;
    if (from->ckpt_step > 0)
        snprintf(cfg->resume_from, sizeof(cfg->resume_from), "%s", dir);
    j->train = NULL; /* validate makes the progress anew, from the checkpoint's state */
    st = pl_coord_train_validate(j);
    if (st) {
        *t = *was;
        j->train = mine;
    }
    free(was);
    if (st)
        return pl_error_prefix(st, "resuming: ");
    pl_coord_train_t *p = j->train;
    /* the curve before the resume point is the earlier run's (the steps after it run again, to
     * the same bits); the job's first step stays its own */
    for (int k = from->first_step; k < p->run_from && k < S_MAX_CURVE; k++)
        p->losses[k] = from->losses[k];
    p->first_step = PL_MIN(from->first_step, p->run_from);
    p->ckpt_step = from->ckpt_step > 0 ? from->ckpt_step : -1;
    if (from->ckpt_step > 0)
        snprintf(what, len, "checkpoint-%d", from->ckpt_step);
    else
        snprintf(what, len, "step %d", p->run_from);
    s_progress_free(&mine);
    s_progress_free(from_p);
    return PL_OK;
}
