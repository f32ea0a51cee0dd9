/* What a user asked for in a generation job, as one typed value: the model, the prompts, the
 * generation and sampling settings, the planner mode and the placement. pipectl fills it from the
 * job file, transport/ encodes and decodes it (the only JSON form), and every process that needs
 * it decodes it once. The plan (what the coordinator decided) is a separate value. */
#ifndef PL_COMMON_JOB_SPEC_H
#define PL_COMMON_JOB_SPEC_H

#include "common/config.h"
#include "common/config_train.h"
#include "common/job_gen.h"
#include "common/status.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_JOB_MAX_SEQS 4096

typedef enum {
    PL_PLANNER_OPTIMAL = 0, /* the optimal uneven split over every candidate (or `stages`) device */
    PL_PLANNER_AUTO = 1,    /* the same, but devices may be left out when that is faster */
    PL_PLANNER_EVEN = 2,    /* equal layer counts in node-name order: the baseline for benchmarks */
} pl_planner_t;

/* "optimal", "auto" or "even"; PL_ERR_INVALID naming the value otherwise. */
pl_status_t pl_planner_parse(const char *name, pl_planner_t *mode_p);
const char *pl_planner_name(pl_planner_t mode);

/* A training job (pipectl train TRAIN.yaml; common/config_train.c): the job file as asked, and
 * what the coordinator decided for it (in ASSIGN; kind -1 and n_split 0 before). Such a spec
 * has no prompts; its model, stages and nodes are the file's. */
typedef struct pl_job_train {
    pl_cfg_train_t cfg;
    int kind;                       /* pl_train_kind_t of the schedule to run; -1: not decided */
    int n_split;                    /* stages of the split, 0: not decided */
    int split[PL_CFG_MAX_NODES];    /* layers per stage, in stage order */
    /* The directories the job may write its checkpoints in (the coordinator's models.allow; 0:
     * any), which a daemon checks again before it writes (common/path_allow.h). */
    int n_allow;
    char allow[PL_CFG_MAX_MODEL_DIRS][PATH_MAX];
} pl_job_train_t;

/* A deployment (pipectl serve DEPLOY.yaml; common/config_deploy.c): a job whose stages stay
 * loaded and take requests (transport/msg.h's SEQ_ADD / SEQ_CANCEL / SEQ_OUT) until the job is
 * canceled (pipectl undeploy). Such a spec has no prompts. */
typedef struct {
    bool on;
    char name[PL_CFG_NAME_MAX + 1]; /* what requests name (the OpenAI "model" field) */
    int kv_slots;    /* sequences each stage holds at once; the plan may lower it (memory) */
    int max_queue;   /* requests waiting for a slot at most; beyond: 429 */
    int max_tokens;  /* cap of a request's max_new_tokens */
    int step_tokens; /* tokens of one microbatch at most (prompt chunks + decode tokens) */
} pl_job_serve_t;

typedef struct {
    char model[PATH_MAX]; /* model directory, absolute */
    /* Prompts as token ids: n_prompts arrays; owned by the spec (pl_job_spec_clear). */
    int n_prompts;
    int32_t **prompts;
    int *prompt_len;
    /* The last stage decodes the completions with the model's tokenizer (model/tokenizer.json)
     * and results carry text: set when a prompt was text or messages, or the job has stop
     * strings. Prompts are token ids either way: text is tokenized once, where the spec is built. */
    bool text;
    pl_job_gen_t gen; /* generation and sampling settings */
    /* Planning and placement. */
    int microbatches;     /* 0: the planner's choice */
    int stages;           /* 0: as the planner mode decides */
    pl_planner_t planner; /* default PL_PLANNER_AUTO */
    int n_nodes;          /* allowed node names; 0: any */
    char nodes[PL_CFG_MAX_NODES][PL_CFG_NAME_MAX + 1];
    /* serve.on: this job is a deployment (no prompts, n_prompts 0). */
    pl_job_serve_t serve;
    /* Non-empty: a batch job whose prompts run as requests on the named deployment (a job
     * file's `deployment:` key) instead of on stages of its own; model and planning come from
     * the deployment. */
    char deployment[PL_CFG_NAME_MAX + 1];
    /* Non-NULL: a training job (owned; no prompts). */
    pl_job_train_t *train;
} pl_job_spec_t;

/* The defaults above, no prompts. */
void pl_job_spec_init(pl_job_spec_t *spec);
/* The spec of a deployment file (pipectl serve): its planning, its wire dtype and serve.* from
 * the file, the model directory made absolute (it must exist); no prompts. *spec is set only on
 * success; errors name the field. */
pl_status_t pl_job_spec_from_deploy(const pl_cfg_deploy_t *d, pl_job_spec_t *spec);
/* Free the prompts and reset to the defaults; safe twice. */
void pl_job_spec_clear(pl_job_spec_t *spec);

#endif
