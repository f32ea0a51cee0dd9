/* The operation lists of a training pipeline schedule: what the scheduler generates
 * (scheduler/train_sched.h) and each stage's runtime executes (pipeline/train_local.h). */
#ifndef PL_COMMON_TRAIN_OPS_H
#define PL_COMMON_TRAIN_OPS_H

#include "common/status.h"

#define PL_TRAIN_MAX_STAGES 64
#define PL_TRAIN_MAX_MB 4096

typedef enum {
    PL_TRAIN_GPIPE = 0,
    PL_TRAIN_1F1B,
    PL_TRAIN_ZBH1,
    PL_TRAIN_KIND_COUNT
} pl_train_kind_t;

/* "gpipe", "1f1b", "zb-h1". */
const char *pl_train_kind_name(pl_train_kind_t k);
/* The kind a job's `schedule:` names (the names above); PL_ERR_INVALID naming it otherwise. */
pl_status_t pl_train_kind_parse(const char *name, pl_train_kind_t *k_p);

typedef enum {
    PL_TRAIN_OP_F,         /* forward of microbatch mb */
    PL_TRAIN_OP_B,         /* input gradient (GPipe and 1F1B follow it with its W at once) */
    PL_TRAIN_OP_W,         /* weight gradient; frees the microbatch's stash */
    PL_TRAIN_OP_SEND_ACT,  /* activations of mb to stage + 1 */
    PL_TRAIN_OP_RECV_ACT,  /* activations of mb from stage - 1 */
    PL_TRAIN_OP_SEND_GRAD, /* input gradient of mb to stage - 1 */
    PL_TRAIN_OP_RECV_GRAD, /* gradient of mb from stage + 1 */
} pl_train_op_kind_t;

typedef struct {
    pl_train_op_kind_t kind;
    int mb;
} pl_train_op_t;

/* One schedule: for each stage its operations, run in order. */
typedef struct {
    pl_train_kind_t kind;
    int n_stages, n_mb;
    int n_ops[PL_TRAIN_MAX_STAGES];
    pl_train_op_t *ops[PL_TRAIN_MAX_STAGES];
} pl_train_ops_t;

/* Free a schedule's lists and the schedule; sets *ops_p to NULL; safe on NULL. */
void pl_train_ops_destroy(pl_train_ops_t **ops_p);

#endif
