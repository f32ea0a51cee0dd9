/* pipectl's pieces shared by the files of its verbs: the connection to the coordinator and its
 * one request/answer call, the parsed options, the verb table and the output helpers. */
#ifndef PL_TOOLS_PIPECTL_H
#define PL_TOOLS_PIPECTL_H

#include "common/job_gen.h"
#include "transport/msg.h"
#include "transport/sock.h"

#include <stdbool.h>
#include <stdio.h>

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

/* The options a verb may take (a verb table entry lists them; main refuses the others). */
enum {
    PL_PIPECTL_OPT_WAIT = 1u << 0,
    PL_PIPECTL_OPT_STAGES = 1u << 1,
    PL_PIPECTL_OPT_CLUSTER = 1u << 2,
    PL_PIPECTL_OPT_GEN = 1u << 3,
    PL_PIPECTL_OPT_WATCH = 1u << 4,
    PL_PIPECTL_OPT_OUTFILE = 1u << 5, /* -o is a file to write (trace), not a format */
    PL_PIPECTL_OPT_SVG = 1u << 6,
};

/* pipectl's exit statuses (documented in `pipectl --help` and the README). */
enum {
    PL_PIPECTL_EXIT_OK = 0,
    PL_PIPECTL_EXIT_FAILED = 1,      /* a failed job, a refused request, a bad answer */
    PL_PIPECTL_EXIT_USAGE = 2,       /* wrong command line or settings file */
    PL_PIPECTL_EXIT_UNREACHABLE = 3, /* no answer from the coordinator */
};

typedef enum {
    PL_PIPECTL_OUT_TABLE,
    PL_PIPECTL_OUT_WIDE,
    PL_PIPECTL_OUT_JSON,
    PL_PIPECTL_OUT_YAML,
} pl_pipectl_out_t;

typedef struct {
    const char *endpoint;
    bool json;            /* -o json or yaml: the reply's values, through pl_pipectl_print */
    pl_pipectl_out_t out; /* -o */
    double timeout_s;
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *sock;
    /* the verb's options */
    bool wait, watch;
    int stages; /* -1: the planner's */
    const char *cluster;
    const char *out_file, *svg; /* trace's -o FILE and --svg FILE */
    pl_pipectl_gen_opts_t gen;
} pl_pipectl_t;

/* One verb: `pipectl NAME ARGS...`. run gets the words after the verb (n_args of them, within
 * [min_args, max_args]) and returns the exit status. */
typedef struct {
    const char *name;
    const char *args;    /* the argument words of its usage line ("JOB.yaml") */
    const char *summary; /* one line */
    const char *example; /* a whole command line */
    int min_args, max_args;
    unsigned opts; /* PL_PIPECTL_OPT_* it takes */
    bool offline;  /* needs no coordinator connection */
    int (*run)(pl_pipectl_t *c, char **args, int n_args);
} pl_pipectl_verb_t;

/* The verb named `name`, or NULL. */
const pl_pipectl_verb_t *pl_pipectl_verb_find(const char *name);
/* pipectl's whole usage (every verb), and one verb's. */
void pl_pipectl_usage(FILE *f);
void pl_pipectl_verb_usage(FILE *f, const pl_pipectl_verb_t *v);

/* One request, one answer: 0 with the REPLY body in *reply_p (new reference), else an exit
 * status after a one-line error on stderr: PL_PIPECTL_EXIT_UNREACHABLE when no answer came,
 * PL_PIPECTL_EXIT_FAILED for an ERROR answer or a bad one. */
int pl_pipectl_call(pl_pipectl_t *c, const pl_msg_t *req, json_t **reply_p);
/* A query about one job (STATUS, RESULTS, KILL), as pl_pipectl_call. */
int pl_pipectl_call_job(pl_pipectl_t *c, pl_msg_type_t type, int64_t id, json_t **reply_p);
/* "pipectl: " and the message on stderr; returns 1. */
int pl_pipectl_die(const char *fmt, const char *a);
/* A job id argument, or -1 after a one-line error. */
int64_t pl_pipectl_job_arg(const char *arg);

/* Output helpers: JSON as -o json prints it; a field as a string ("-" when absent) or a
 * number (0 when absent); a duration as the plan table writes it ("-" when not measured);
 * bytes with a binary unit ("512 B", "1.50 MiB"). The formatters return b. */
void pl_pipectl_print_json(const json_t *v);
/* v as -o asks: JSON, or YAML (one renderer from the JSON value, out_yaml.c). */
void pl_pipectl_print(const pl_pipectl_t *c, const json_t *v);
void pl_pipectl_print_to(const pl_pipectl_t *c, FILE *f, const json_t *v);
/* A table verb's answer r under -o json|yaml: printed to f and released, true (the verb is done);
 * false, r kept, for the table. */
bool pl_pipectl_print_answer(const pl_pipectl_t *c, FILE *f, json_t *r);
void pl_pipectl_yaml(FILE *f, const json_t *v);

/* Run `render` once into stdout, or with --watch every second, redrawing when its output
 * changes (the screen cleared first on a terminal), until it says *final_p or Ctrl-C.
 * render returns an exit status (non-zero stops). */
typedef int (*pl_pipectl_render_fn)(pl_pipectl_t *c, char **args, int n_args, FILE *out,
                                    bool *final_p);
int pl_pipectl_watch(pl_pipectl_t *c, pl_pipectl_render_fn render, char **args, int n_args);
/* What following shows of a kind of job: `line` writes its progress line from a STATUS reply
 * and says whether it is news (false: nothing to show yet); `draw` redraws it on a terminal
 * (NULL: the line itself); `done` runs once the job is done, its exit status (NULL: 0). */
typedef struct {
    bool (*line)(const json_t *r, char *b, size_t n);
    void (*draw)(const json_t *r, const char *line);
    int (*done)(pl_pipectl_t *c, int64_t id, const json_t *r);
} pl_pipectl_follow_t;
/* Follow job id to its end, its state changes and progress as `how` shows it, redrawn in place
 * on a terminal (stderr), else a plain line per change. 0 when it is done (or done's status), 1
 * when it failed or was canceled, or Ctrl-C stopped following. */
int pl_pipectl_follow_with(pl_pipectl_t *c, int64_t id, const pl_pipectl_follow_t *how);
/* Follow a generation job: a live bar of its progress; then its results when `results`. */
int pl_pipectl_follow(pl_pipectl_t *c, int64_t id, bool results);
const char *pl_pipectl_str(const json_t *o, const char *k);
double pl_pipectl_num(const json_t *o, const char *k);
const char *pl_pipectl_dur(double v, char *b, size_t n);
const char *pl_pipectl_bytes(double v, char *b, size_t n);
/* A plan's planner and table, as STATUS and PLAN replies carry them. */
void pl_pipectl_print_plan(const json_t *plan);
/* A STATUS or RESULTS reply's throughput line. */
void pl_pipectl_print_throughput(FILE *f, const json_t *t);

/* The verbs (tools/pipectl/<file>.c says which holds which). */
int pl_pipectl_submit(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_status(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_results(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_cancel(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_plan(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_catalog(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_nodes(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_health(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_shutdown(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_keygen(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_generate_verb(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_jobs(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_describe(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_logs(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_drain(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_undrain(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_trace_verb(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_train(pl_pipectl_t *c, char **args, int n_args);
/* A training job's STATUS reply (its "train" part) as `status` prints it (train.c). */
void pl_pipectl_train_status(const json_t *r);
int pl_pipectl_serve(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_deployments(pl_pipectl_t *c, char **args, int n_args);
int pl_pipectl_undeploy(pl_pipectl_t *c, char **args, int n_args);
/* describe's halves: one job (status, events) and one node (health). */
int pl_pipectl_describe_job(pl_pipectl_t *c, const char *id);
int pl_pipectl_describe_node(pl_pipectl_t *c, const char *name);
/* The SUBMIT or PLAN request (type) of a job file, `stages` >= 0 overriding the file's; 1 after
 * a one-line error. */
int pl_pipectl_job_msg(const char *path, int stages, pl_msg_type_t type, pl_msg_t *m);
/* Send SUBMIT m (not freed) and read the job's id into *job_p; print the answer as JSON (-o json
 * without --wait) or "WHAT submitted (job N)" ("job N submitted" for WHAT NULL). Returns an exit
 * code (job.c). */
int pl_pipectl_submit_send(pl_pipectl_t *c, pl_msg_t *m, const char *what, uint32_t *job_p);
/* The results of job id as `results` prints them. */
int pl_pipectl_results_of(pl_pipectl_t *c, int64_t id);

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
