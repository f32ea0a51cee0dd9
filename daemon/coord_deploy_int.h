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
    uint32_t for_job;     /* a batch job's (coord_deploy_job.c), for_seq its prompt; 0: none */
    int for_seq;
} pl_dep_live_t;

struct pl_coord_dep {
    uint32_t next_req;
    int n_live, cap_live;
    pl_dep_live_t *live;
    int64_t by_outcome[PL_DEP_OUT_COUNT_];
    int64_t output_tokens;
    int64_t created;       /* Unix seconds of its submission (the API's `created`) */
    double t_ready;        /* the current assignment started running; 0: not running */
    int64_t tokens_ready;  /* output_tokens then */
};

/* planning, loading, ready, resuming (re-planned after a lost node or a restart), failed,
 * undeployed. */
const char *pl_coord_dep_state(const pl_coord_job_t *j);
/* A batch job on a deployment (spec.deployment; coord_deploy_job.c): its prompts as requests. */
struct pl_coord_bound {
    pl_serve_req_t **req; /* n_seqs; NULL: not sent yet, or collected */
    pl_finish_t *finish;  /* how each ended, from its last SEQ_OUT; NONE: not known */
    int next;             /* the next prompt to send */
    int n_out;            /* sent, not collected */
    int n_done;
};

/* Requests whose clients left (or whose batch job ended): out of the stages (SEQ_CANCEL) and
 * ended CANCELED. */
void pl_coord_deploy_check_canceled(pl_coord_t *c);
/* Route request r of batch job for_job's prompt for_seq as a client's would be. */
void pl_coord_deploy_route(pl_coord_t *c, pl_serve_req_t *r, uint32_t for_job, int for_seq);
/* The last SEQ_OUT of job's prompt seq said how it finished. */
void pl_coord_bound_finished(pl_coord_t *c, uint32_t job, int seq, pl_finish_t finish);
/* A loop turn of every batch job on a deployment: start, send, collect, end. */
void pl_coord_bound_tick(pl_coord_t *c);
void pl_coord_bound_free(pl_coord_job_t *j);

/* Count one ended request of j (dep may be NULL: a request for no deployment). */
void pl_coord_dep_count(pl_coord_t *c, pl_coord_job_t *j, const char *name, pl_dep_outcome_t o);

#endif
