/* A deployment's runtime state in the coordinator, shared by coord_deploy.c (the requests) and
 * coord_deploy_state.c (the deployment as a job: planning shape, publishing, the DEPLOYMENTS
 * answer). Owned by the coordinator's loop thread. */
#ifndef PL_DAEMON_COORD_DEPLOY_INT_H
#define PL_DAEMON_COORD_DEPLOY_INT_H

#include "daemon/coord_int.h"

/* How requests of a deployment ended, for its counters and the metrics' outcome label. */
typedef enum {
    PL_DEP_OUT_STOP,
    PL_DEP_OUT_LENGTH,
    PL_DEP_OUT_CANCELED,
    PL_DEP_OUT_FAILED,
    PL_DEP_OUT_REFUSED_400,
    PL_DEP_OUT_REFUSED_404,
    PL_DEP_OUT_REFUSED_429,
    PL_DEP_OUT_REFUSED_503,
    PL_DEP_OUT_COUNT_
} pl_dep_outcome_t;

extern const char *const pl_dep_outcome_names[PL_DEP_OUT_COUNT_];

/* One request admitted to the deployment's stages. */
typedef struct {
    pl_serve_req_t *req; /* a reference */
    uint32_t id;         /* 1..INT32_MAX, unique among the deployment's live requests */
    uint32_t epoch;      /* the assignment it was added to; 0: not added to the current one */
    pl_job_gen_t gen;    /* as first sent (max_new_tokens capped) */
    int32_t *tok;        /* completion tokens so far (a re-add prefills them) */
    int n_tok, cap_tok;
    double t_add, t_last; /* admitted; the last token */
} pl_dep_live_t;

struct pl_coord_dep {
    uint32_t next_req;
    int n_live, cap_live;
    pl_dep_live_t *live;
    int64_t by_outcome[PL_DEP_OUT_COUNT_];
    int64_t output_tokens;
    double t_ready;        /* the current assignment started running; 0: not running */
    int64_t tokens_ready;  /* output_tokens then */
};

/* planning, loading, ready, resuming (re-planned after a lost node or a restart), failed,
 * undeployed. */
const char *pl_coord_dep_state(const pl_coord_job_t *j);
/* Count one ended request of j (dep may be NULL: a request for no deployment). */
void pl_coord_dep_count(pl_coord_t *c, pl_coord_job_t *j, const char *name, pl_dep_outcome_t o);

#endif
