/* What a user asked for in a generation job, as one typed value: the model, the prompts, the
 * generation and sampling settings, the planner mode and the placement. pipectl fills it from the
 * job file, transport/ encodes and decodes it (the only JSON form), and every process that needs
 * it decodes it once. The plan (what the coordinator decided) is a separate value. */
#ifndef PL_COMMON_JOB_SPEC_H
#define PL_COMMON_JOB_SPEC_H

#include "common/config.h"
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
} pl_job_spec_t;

/* The defaults above, no prompts. */
void pl_job_spec_init(pl_job_spec_t *spec);
/* Free the prompts and reset to the defaults; safe twice. */
void pl_job_spec_clear(pl_job_spec_t *spec);

#endif
