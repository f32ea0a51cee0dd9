/* Names of the training schedules and the freeing of their operation lists (train_ops.h). */
#include "common/train_ops.h"

#include <stdlib.h>
#include <string.h>

static const char *s_names[PL_TRAIN_KIND_COUNT] = {"gpipe", "1f1b", "zb-h1"};

const char *pl_train_kind_name(pl_train_kind_t k)
{
    return k >= 0 && k < PL_TRAIN_KIND_COUNT ? s_names[k] : "?";
}

pl_status_t pl_train_kind_parse(const char *name, pl_train_kind_t *k_p)
{
    for (int k = 0; k < PL_TRAIN_KIND_COUNT; k++)
        if (name && strcmp(name, s_names[k]) == 0) {
            *k_p = (pl_train_kind_t)k;
            return PL_OK;
        }
    return pl_error(PL_ERR_INVALID, "schedule: '%s' is not one of gpipe, 1f1b, zb-h1",
                    name ? name : "(null)");
}

void pl_train_ops_destroy(pl_train_ops_t **sched_p)
{
    if (!sched_p || !*sched_p)
        return;
    for (int s = 0; s < (*sched_p)->n_stages; s++)
        free((*sched_p)->ops[s]);
    free(*sched_p);
    *sched_p = NULL;
}
