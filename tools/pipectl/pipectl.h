/* pipectl's pieces shared by the files of its commands (tools/pipectl.c holds main and the job
 * and node commands): the connection to the coordinator and its one request/answer call. */
#ifndef PL_TOOLS_PIPECTL_H
#define PL_TOOLS_PIPECTL_H

#include "common/job_gen.h"
#include "transport/msg.h"
#include "transport/sock.h"

#include <stdbool.h>

typedef struct {
    const char *endpoint;
    bool json;
    double timeout_s;
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *sock;
} pl_pipectl_t;

/* One request, one answer: 0 with the REPLY body in *reply_p (new reference), else 1 after a
 * one-line error on stderr (an ERROR answer, no answer, a bad one). */
int pl_pipectl_call(pl_pipectl_t *c, const pl_msg_t *req, json_t **reply_p);

/* `generate`'s options, as main's getopt meets them (values checked by the job file's schema
 * when the job is built). */
typedef struct {
    bool any; /* one was given: only generate takes them */
    bool has_max_tokens, has_temperature, chat;
    long max_tokens;
    double temperature;
    int n_stop;
    const char *stop[PL_JOB_MAX_STOP + 1];
} pl_pipectl_gen_opts_t;

/* The getopt letters of generate's options (long names --max-tokens, --temperature, --chat,
 * --stop), for main's option table. */
#define PL_PIPECTL_GEN_MAX_TOKENS 1001
#define PL_PIPECTL_GEN_TEMPERATURE 1002
#define PL_PIPECTL_GEN_CHAT 1003
#define PL_PIPECTL_GEN_STOP 1004

/* Take option `opt` (one of the above) with its argument; 1 after a one-line error. */
int pl_pipectl_gen_opt(pl_pipectl_gen_opts_t *o, int opt, const char *arg);
/* `pipectl generate MODEL PROMPT`: one prompt (text, or a user message with --chat) as a job,
 * `stages` as --stages gives it (-1: the planner's), its text printed to stdout as it streams
 * and the rest from the results, so that stdout holds exactly the completion (a newline added
 * only on a terminal). 0 when the job is done, 1 when it failed, the input was bad or Ctrl-C
 * canceled it. */
int pl_pipectl_generate(pl_pipectl_t *c, const char *model, const char *prompt, int stages,
                        const pl_pipectl_gen_opts_t *o);

#endif
