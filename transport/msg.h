/* Typed control messages: one C struct per message type, one encode (struct -> JSON body) and one
 * decode (JSON body -> struct, every field checked, errors naming the field) each. The framing
 * ([type][JSON body]) is ctl.h's; the sockets that carry these are sock.h's. */
#ifndef PL_TRANSPORT_MSG_H
#define PL_TRANSPORT_MSG_H

#include "common/job_spec.h"
#include "common/status.h"
#include "transport/ctl.h"
#include "transport/act_token.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_MSG_MAX_DEVICES 8      /* devices one node registers */
#define PL_MSG_MAX_UCX_RES 32     /* UCX transports (resources) one node's health lists */
#define PL_MSG_UCX_RES_LEN 48     /* one's name, "transport/device", with its NUL (PL_UCX_RES_LEN) */
#define PL_MSG_MAX_UNAVAILABLE 8  /* backends a node reports missing */
#define PL_MSG_MAX_STAGES 64      /* stages of a job; progress entries of a heartbeat */
#define PL_MSG_MAX_ADDR (1 << 16) /* a UCX worker address, base64 */
#define PL_MSG_TEXT_MAX 4095      /* error messages */
#define PL_MSG_MIN_CODE (-127)    /* status codes on the wire: [PL_MSG_MIN_CODE, -1] */

/* HELLO: one device of the registering node, with its calibration. */
typedef struct {
    char id[32]; /* "cpu:0" */
    char backend[16];
    char name[128];
    char isa[32];
    int cores;
    uint64_t mem_bytes;
    double gflops, mem_gbps;
    double dec_gflops, pass_gbps; /* perf8h: pl_be_calib_t's kernel rates; 0: not measured */
    double attn_gflops;           /* perf8j: prefill attention's rate; 0: not measured */
    double host_gbps;             /* perf8l: the host's all-core read bandwidth; 0: not measured */
    /* perf8d: the CPUs a CPU device's threads may run on (bit i: CPU i, for i < 63; the
     * daemon's affinity), so that the planner sees daemons pinned to one core; 0: unknown */
    uint64_t cpu_mask;
} pl_msg_device_t;

typedef struct {
    char backend[16];
    char why[256];
} pl_msg_unavailable_t;

#define PL_MSG_MAX_HB_TEXT 4096 /* bytes of streamed text in one heartbeat, all stages */

/* HEARTBEAT: tokens the last stage of a running job has sampled so far and, for a one-prompt
 * text job, the next piece of its streamed text: bytes [text_at, text_at + text_len) of the
 * completion, whole UTF-8 characters, held in the heartbeat's `text` from text_off. */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch; /* the assignment's epoch, so the coordinator can cancel stale stages */
    int64_t generated;
    int64_t text_at; /* byte offset of the piece in the completion; meaningful when text_len */
    uint32_t text_off, text_len;
    double busy_s;     /* seconds in forward calls so far */
    int64_t seqs_done; /* sequences finished (KV slots freed at their end) so far */
} pl_msg_progress_t;

/* One device's health as its backend reads it (NVML, ROCm SMI; the CPU: /proc); a figure the
 * backend does not report is -1. */
typedef struct {
    char id[32];
    int64_t mem_used, mem_total; /* bytes */
    double util_pct, temp_c, power_w;
    int64_t errors; /* ECC errors and Xid events */
} pl_msg_dev_health_t;

/* The node's own health in each heartbeat (msg_node_health.c); unknown figures are -1. */
typedef struct {
    char version[32]; /* pipeld's; "" when the daemon did not say */
    double uptime_s;  /* of the daemon process */
    double load5, load15;
    int64_t mem_total_kb, mem_avail_kb; /* the host's (/proc/meminfo) */
    double cpu_mhz;                     /* mean of the cores' current frequency */
    int n_devices;
    pl_msg_dev_health_t devices[PL_MSG_MAX_DEVICES];
    /* The UCX transports the node's UCX context has ("transport/device", pl_ucx_resources),
     * not only those of its measured links; none when the node did not say. */
    int n_ucx;
    char ucx[PL_MSG_MAX_UCX_RES][PL_MSG_UCX_RES_LEN];
} pl_msg_node_health_t;

typedef struct {
    char node[PL_CFG_NAME_MAX + 1];
    int n_stages;
    pl_msg_progress_t stages[PL_MSG_MAX_STAGES];
    int64_t rss_kb;
    double load1;
    pl_msg_node_health_t sys;
    uint32_t text_used;               /* bytes of `text` the stages' pieces take */
    char text[PL_MSG_MAX_HB_TEXT + 1]; /* the pieces, back to back (may hold NUL bytes) */
} pl_msg_heartbeat_t;

typedef struct {
    char node[PL_CFG_NAME_MAX + 1];
    char host[256];
    int pid;
    int n_devices;
    pl_msg_device_t devices[PL_MSG_MAX_DEVICES];
    int n_unavailable;
    pl_msg_unavailable_t unavailable[PL_MSG_MAX_UNAVAILABLE];
    pl_msg_heartbeat_t health;
} pl_msg_hello_t;

typedef struct {
    int heartbeat_ms, dead_after_ms;
    int64_t clock_ns; /* the coordinator's wall clock as it sent this (ns since the epoch), for
                       * the daemons' trace clocks (pipeline/trace.h); 0: not given */
} pl_msg_welcome_t;

/* Every stage message names (job, stage, epoch). The epoch is the coordinator's assignment
 * number, never repeated (it persists across restarts): a message of an earlier assignment of
 * the same job, or of a job the coordinator no longer knows, is refused. 0: not yet stamped (an
 * executor's message inside pipeld, before the daemon adds its assignment's epoch). */

/* ASSIGN: what the coordinator decided for one stage, beside the job as the user asked it. */
typedef struct {
    uint32_t job;
    int stage, n_stages;
    uint32_t epoch;
    char device[32];
    int first, last;  /* layer range */
    int max_ctx;      /* KV positions per sequence */
    int max_tokens;   /* largest token count of one microbatch message */
    int microbatches; /* the plan's microbatch count */
    pl_job_spec_t spec;
    /* A resumed job: per sequence (prompt order, n_resume == the spec's prompts), the tokens
     * generated before this assignment and the finish of those that ended (pipeline/gen.h's
     * pl_gen_job_resume). 0 / NULL: from the start. Owned. */
    int n_resume;
    struct pl_msg_result *resume;
} pl_msg_assign_t;

/* READY: the stage is loaded; its UCX worker address (NULL for a single-stage job). */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    char *ucx_addr; /* owned */
} pl_msg_ready_t;

/* START: where activations go (next) and whose link probe to answer (prev); NULL when alone.
 * token: the assignment's data-plane token, which every activation message of it carries (only
 * the coordinator makes it, fresh for each epoch; never logged). */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    char *next, *prev; /* owned */
    pl_act_token_t token;
    /* A data-parallel training stage: the same stage of the next and the previous replica, its
     * all-reduce ring (owned; NULL otherwise). */
    char *ring_next, *ring_prev;
} pl_msg_start_t;

/* The link a stage measured to the next one. */
typedef struct {
    int to_stage;
    double gbps, latency_s, took_s;
    char transport[64];
} pl_msg_probe_t;

/* A stage's data plane (transport/ucx.h credits): its inbox, the credits the next stage granted,
 * the most sends it had in flight, and the memory bound those make. */
typedef struct {
    int inbox_slots;
    int64_t inbox_bytes, send_credits, max_in_flight, bound_bytes;
    int64_t dropped; /* messages refused on arrival (transport/act_recv.h), all reasons */
    bool progress_thread;
} pl_msg_data_plane_t;

/* A stage's statistics, in DONE (has_sink: the last stage, which samples). */
typedef struct {
    double wall_s, compute_s, wait_s;
    int64_t messages, tokens;
    bool has_sink;
    int64_t generated;
    double prefill_s;
    double prefill_compute_s, decode_compute_s;
    int64_t prefill_calls, decode_calls;
    int64_t freed_seqs; /* KV slots freed because their sequence finished */
    int64_t bytes_sent; /* data-plane bytes this stage sent */
    char wire_dtype[8]; /* how its activations travelled ("f32", "bf16", "f16"); "" unknown */
    char link[64]; /* transport to the next stage; "" when none */
    /* Where the stage's wall time went besides compute_s (wait_s: waiting for its input) */
    bool has_overlap;
    double compute_cpu_s;     /* the forward calls' CPU time: below compute_s when others ran */
    double buf_wait_s;        /* waiting for a free send buffer */
    double credit_wait_s;     /* waiting for the next stage's credit */
    double send_s;            /* the rest of the sends (encoding, posting) */
    double sample_s;          /* the last stage's sampling */
    int64_t credit_waits;     /* sends that found no credit */
    int64_t max_mb_in_flight; /* stage 0: most microbatches sent whose tokens were not back */
    double avg_mb_in_flight;  /* stage 0: their time average */
    bool has_data_plane;
    pl_msg_data_plane_t data_plane;
    bool has_probe;
    pl_msg_probe_t probe;
} pl_msg_stats_t;

typedef enum {
    PL_FINISH_NONE = 0,
    PL_FINISH_EOS = 1,
    PL_FINISH_LENGTH = 2,
    PL_FINISH_STOP = 3, /* a stop string: the text ends before it */
} pl_finish_t;

#define PL_MSG_MAX_RESULT_TEXT (16u << 20) /* bytes of one result's text */

/* One finished sequence (or, resuming, one sequence so far). */
typedef struct pl_msg_result {
    int seq;
    int n_tokens;
    int32_t *tokens; /* owned */
    char *text;      /* owned: the decoded completion (UTF-8); NULL when the job has no text */
    pl_finish_t finish;
} pl_msg_result_t;

/* A stage's trace (msg_trace.c): the intervals it spent waiting to receive, computing and
 * sending, per microbatch step, as its fixed-size ring (pipeline/trace.h) kept them. */
#define PL_TRACE_MAX_EVENTS 8192 /* events of one stage's trace: the ring's size */

typedef enum {
    PL_TRACE_RECV = 0,    /* waiting for a data message, until it arrived and was decoded */
    PL_TRACE_COMPUTE = 1, /* one forward call of a microbatch step */
    PL_TRACE_SEND = 2,    /* encoding a data message and handing it to UCX (credit wait too) */
    PL_TRACE_KINDS_
} pl_trace_kind_t;

typedef struct {
    uint8_t kind;   /* pl_trace_kind_t */
    uint8_t act;    /* the data message's kind (transport/act.h: 1 hidden, 2 tokens, 3 stop) */
    uint32_t mb;    /* microbatch */
    uint32_t step;  /* 0: prefill (every chunk of it), n: the n-th decode step */
    int64_t t_ns;   /* start, from the trace's t0_ns */
    int64_t dur_ns; /* length */
} pl_msg_trace_event_t;

typedef struct {
    int64_t t0_ns;    /* the events' zero on the coordinator's wall clock, ns since the epoch */
    int64_t recorded; /* events recorded in all; the oldest recorded - n_events were dropped */
    int n_events;     /* at most PL_TRACE_MAX_EVENTS, in time order (starts never decrease) */
    pl_msg_trace_event_t *events; /* owned */
} pl_msg_trace_t;

typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    pl_msg_stats_t stats;
    int n_results;            /* the last stage: one per sequence in prompt order; others 0 */
    pl_msg_result_t *results; /* owned */
    pl_msg_trace_t *trace;    /* owned; NULL when the job does not trace */
} pl_msg_done_t;

#define PL_MSG_MAX_PROGRESS_TOKENS 65536 /* tokens of one PROGRESS message, all sequences */

/* PROGRESS: tokens the last stage sampled since its previous report, per sequence: tokens
 * [at, at + n_tokens) of the sequence's output; finish: it ended with the last of them. */
typedef struct {
    int seq;
    int at;
    int n_tokens;
    int32_t *tokens; /* owned */
    pl_finish_t finish;
} pl_msg_seq_tokens_t;

typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    int n_seqs;
    pl_msg_seq_tokens_t *seqs; /* owned; each sequence at most once */
} pl_msg_gen_progress_t;

typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    pl_status_t code;
    char error[PL_MSG_TEXT_MAX + 1];
} pl_msg_fail_t;

/* CANCEL: stop (or release) a job's stage; stage -1 is every stage of the job on the node; epoch
 * 0 is every assignment of it. */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
} pl_msg_cancel_t;

/* ERROR: callers branch on code (a negative pl_status_t), the message is for people. */
typedef struct {
    pl_status_t code;
    char message[PL_MSG_TEXT_MAX + 1];
} pl_msg_error_t;

/* STATUS, RESULTS, KILL: which job. */
typedef struct {
    uint32_t job;
} pl_msg_job_ref_t;

/* TRACE: which job's stage; to a daemon also which assignment (epoch; 0 from pipectl). */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
} pl_msg_trace_ref_t;

/* TRACED: a running stage's trace so far, answering the coordinator's TRACE. */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    pl_msg_trace_t *trace; /* owned */
} pl_msg_traced_t;

/* HEALTH: which node. */
typedef struct {
    char node[PL_CFG_NAME_MAX + 1];
} pl_msg_health_t;

/* DRAIN: keep new stages off a node (drain) or let them on again (!drain). */
typedef struct {
    char node[PL_CFG_NAME_MAX + 1];
    bool drain;
} pl_msg_drain_t;
/* Serving: a request's sequence in a deployment (a job whose stages stay loaded). Every one
 * names the deployment's stage (job, stage, epoch) as stage messages do, and the request. */
#define PL_MSG_MAX_SEQ_PROMPT 32768 /* tokens of a request's prompt */
#define PL_MSG_MAX_SEQ_OUT 256      /* tokens of one SEQ_OUT */
#define PL_MSG_MAX_SEQ_TEXT 16384   /* bytes of text of one SEQ_OUT */

/* SEQ_ADD: the request's prompt and settings, to stage 0 (which batches it) and to the last
 * stage (which samples it). */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    uint64_t req;    /* the coordinator's request id, 1..INT64_MAX (a deployment's: INT32_MAX
                      * at most, so that stage 0 can carry it in a message entry's token) */
    int n_prompt;    /* 1..PL_MSG_MAX_SEQ_PROMPT */
    int32_t *prompt; /* owned */
    /* A request resumed on a new assignment: the last `resumed` prompt tokens are completion
     * tokens generated before (0..n_prompt - 1); sampling goes on at step `resumed`, and
     * gen.max_new_tokens counts what is left. 0: a new request. */
    int resumed;
    /* The sampler's sequence id (pl_gen_sample_next's seq): 0 for a request, as the same prompt
     * alone in a one-prompt job; prompt s of a batch job run on the deployment: s, so that its
     * tokens equal that job's on stages of its own. 0..PL_JOB_MAX_SEQS - 1. */
    uint32_t stream;
    pl_job_gen_t gen;
} pl_msg_seq_add_t;

/* SEQ_CANCEL: the request leaves now (its slots are freed on every stage). */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    uint64_t req;
} pl_msg_seq_cancel_t;

/* SEQ_OUT: what the request gained since the last one: tokens, the text they made stable (no
 * NUL bytes), and, in its last one, how it finished. */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    uint64_t req;
    int n_tokens;
    int32_t tokens[PL_MSG_MAX_SEQ_OUT];
    char *text; /* owned; NULL when none */
    pl_finish_t finish; /* PL_FINISH_NONE: more follows */
} pl_msg_seq_out_t;

/* Training (msg_train.c): a stage's report of one optimizer step, through its node. */
typedef struct {
    uint32_t job;
    int stage;
    uint32_t epoch;
    int step;  /* steps taken so far, this one included: 1..steps */
    double loss, grad_norm, lr; /* the step's mean loss, global norm before clipping, its rate */
    double busy_s, wait_s, wall_s; /* this stage's F/B/W, waiting, and the whole step */
    int64_t peak_stash_bytes;
    int64_t tokens;  /* tokens the step trained on (sequences x seq_len) */
    bool checkpoint; /* this stage wrote its part of the checkpoint of this step */
} pl_msg_train_step_t;

/* REPLY: the answer to a query. Which query it answers is the asker's knowledge, so the body is
 * a JSON object here; pl_msg_reply_* below give the typed replies where a program reads them. */
typedef struct {
    json_t *body; /* owned */
} pl_msg_reply_t;

typedef struct {
    pl_msg_type_t type;
    /* The sender's control protocol: every body carries it as "proto". Encode writes this, or
     * PL_PROTO_VERSION when it is 0 (so that a test can forge another); decode sets it from the
     * body, 0 when the body has none (a sender of protocol 2 or older; its HELLO said 2). */
    int proto;
    union {
        pl_msg_hello_t hello;
        pl_msg_welcome_t welcome;
        pl_msg_heartbeat_t heartbeat;
        pl_msg_assign_t assign;
        pl_msg_ready_t ready;
        pl_msg_start_t start;
        pl_msg_done_t done;
        pl_msg_fail_t fail;
        pl_msg_cancel_t cancel;
        pl_msg_gen_progress_t progress;
        pl_job_spec_t submit;     /* SUBMIT and PLAN */
        pl_msg_job_ref_t job_ref; /* STATUS, RESULTS, KILL */
        pl_msg_trace_ref_t trace_ref; /* TRACE */
        pl_msg_traced_t traced;
        pl_msg_health_t health;   /* HEALTH; BYE names the stopping node the same way */
        pl_msg_health_t bye;
        pl_msg_drain_t drain;
        pl_msg_reply_t reply;
        pl_msg_error_t error;
        pl_msg_seq_add_t seq_add;
        pl_msg_seq_cancel_t seq_cancel;
        pl_msg_seq_out_t seq_out;
        pl_msg_train_step_t train_step;
        /* NODES, JOBS, DEPLOYMENTS and SHUTDOWN carry nothing */
    };
} pl_msg_t;

/* A message of `type` with every field zero (the spec of SUBMIT / PLAN / ASSIGN at its
 * defaults), ready to fill. */
void pl_msg_init(pl_msg_t *msg, pl_msg_type_t type);
/* Free what the message owns and zero it; safe twice. */
void pl_msg_clear(pl_msg_t *msg);

/* Who speaks the other protocol, in one sentence for logs and answers: "pipeld speaks control
 * protocol 2, this coordinator 3: upgrade pipeld" (theirs 0: "... a control protocol older than
 * 3 (its messages carry none) ..."; theirs newer: "upgrade this coordinator"). peer and self
 * name the programs ("pipeld", "the coordinator at tcp://..."). Returns out. */
const char *pl_msg_proto_mismatch(const char *peer, int theirs, const char *self, char *out,
                                  size_t len);

/* The JSON body of msg (new reference in *body_p). Encoders trust our own values (decoders check
 * what arrives); PL_ERR_INVALID when a body cannot be built (a NaN, no memory). */
pl_status_t pl_msg_encode(const pl_msg_t *msg, json_t **body_p);
/* The typed message of `type` from its JSON body; *msg is set only on success. Errors name the
 * message and the field: "HELLO: field 'devices': ...". */
pl_status_t pl_msg_decode(pl_msg_type_t type, const json_t *body, pl_msg_t *msg);
/* Type part and body part off the wire (pl_ctl_decode, then pl_msg_decode). */
pl_status_t pl_msg_decode_wire(const void *type, size_t type_len, const void *body, size_t body_len,
                               pl_msg_t *msg);

/* The codecs per type (msg_node.c, msg_spec.c, msg_stage.c, msg_query.c). Decoders write *out
 * only on success; encoders return a new object or an error. */
pl_status_t pl_msg_hello_encode(const pl_msg_hello_t *m, json_t **body_p);
pl_status_t pl_msg_hello_decode(const json_t *body, pl_msg_hello_t *out);
pl_status_t pl_msg_welcome_encode(const pl_msg_welcome_t *m, json_t **body_p);
pl_status_t pl_msg_welcome_decode(const json_t *body, pl_msg_welcome_t *out);
pl_status_t pl_msg_heartbeat_encode(const pl_msg_heartbeat_t *m, json_t **body_p);
pl_status_t pl_msg_heartbeat_decode(const json_t *body, pl_msg_heartbeat_t *out);
/* The heartbeat's "system" object: absent fields are unknown (-1), present ones are checked. */
pl_status_t pl_msg_node_health_encode(const pl_msg_node_health_t *m, json_t **body_p);
/* Whether the len bytes at s name a UCX resource as UCX prints it: "transport/device", letters,
 * digits and "_.:-" around one '/', shorter than PL_MSG_UCX_RES_LEN (ucx_info.c lists them). */
bool pl_msg_ucx_res_name_ok(const char *s, size_t len);
pl_status_t pl_msg_node_health_decode(const json_t *body, pl_msg_node_health_t *out);
/* Every figure unknown. */
void pl_msg_node_health_init(pl_msg_node_health_t *m);
pl_status_t pl_msg_error_encode(const pl_msg_error_t *m, json_t **body_p);
pl_status_t pl_msg_error_decode(const json_t *body, pl_msg_error_t *out);

/* The job spec's one JSON form: {"model", "gen": {"prompts", "max_new_tokens", ...,
 * "sampling": {...}}, "microbatches"... }. Decode checks every field's type and range (token ids
 * non-negative; the model's own limits are pipeline/gen.h's to check). */
pl_status_t pl_job_spec_encode(const pl_job_spec_t *spec, json_t **body_p);
/* The generation settings' part of it ("gen" without prompts and text), also what a serving
 * request carries; decode starts from *g's values as defaults and sets *g only on success. */
pl_status_t pl_job_gen_encode(const pl_job_gen_t *g, json_t **obj_p);
pl_status_t pl_job_gen_decode(const json_t *gen, pl_job_gen_t *g);
pl_status_t pl_job_spec_decode(const json_t *body, pl_job_spec_t *out);

pl_status_t pl_msg_assign_encode(const pl_msg_assign_t *m, json_t **body_p);
pl_status_t pl_msg_assign_decode(const json_t *body, pl_msg_assign_t *out);
pl_status_t pl_msg_ready_encode(const pl_msg_ready_t *m, json_t **body_p);
pl_status_t pl_msg_ready_decode(const json_t *body, pl_msg_ready_t *out);
pl_status_t pl_msg_start_encode(const pl_msg_start_t *m, json_t **body_p);
pl_status_t pl_msg_start_decode(const json_t *body, pl_msg_start_t *out);
pl_status_t pl_msg_stats_encode(const pl_msg_stats_t *m, json_t **body_p);
pl_status_t pl_msg_stats_decode(const json_t *body, pl_msg_stats_t *out);
/* Results as the array users see: [{"seq", "tokens", "text" (when decoded),
 * "finish": "eos"|"length"|"stop"|"none"}]. */
pl_status_t pl_msg_results_encode(const pl_msg_result_t *r, int n, json_t **arr_p);
pl_status_t pl_msg_results_decode(const json_t *arr, pl_msg_result_t **r_p, int *n_p);
void pl_msg_results_free(pl_msg_result_t *r, int n);
pl_status_t pl_msg_done_encode(const pl_msg_done_t *m, json_t **body_p);
pl_status_t pl_msg_done_decode(const json_t *body, pl_msg_done_t *out);
pl_status_t pl_msg_fail_encode(const pl_msg_fail_t *m, json_t **body_p);
pl_status_t pl_msg_fail_decode(const json_t *body, pl_msg_fail_t *out);
pl_status_t pl_msg_gen_progress_encode(const pl_msg_gen_progress_t *m, json_t **body_p);
pl_status_t pl_msg_gen_progress_decode(const json_t *body, pl_msg_gen_progress_t *out);
void pl_msg_gen_progress_clear(pl_msg_gen_progress_t *m);
pl_status_t pl_msg_cancel_encode(const pl_msg_cancel_t *m, json_t **body_p);
pl_status_t pl_msg_cancel_decode(const json_t *body, pl_msg_cancel_t *out);

/* Traces: {"t0_ns", "recorded", "events": [[kind, act, mb, step, t_ns, dur_ns], ...]}. Decode
 * checks every event's fields, ranges and time order; pl_msg_trace_free is safe on NULL. */
pl_status_t pl_msg_trace_encode(const pl_msg_trace_t *t, json_t **body_p);
pl_status_t pl_msg_trace_decode(const json_t *body, pl_msg_trace_t **t_p);
void pl_msg_trace_free(pl_msg_trace_t **t_p);
pl_status_t pl_msg_trace_ref_encode(const pl_msg_trace_ref_t *m, json_t **body_p);
pl_status_t pl_msg_trace_ref_decode(const json_t *body, pl_msg_trace_ref_t *out);
pl_status_t pl_msg_traced_encode(const pl_msg_traced_t *m, json_t **body_p);
pl_status_t pl_msg_traced_decode(const json_t *body, pl_msg_traced_t *out);
/* msg_serve.c */
pl_status_t pl_msg_seq_add_encode(const pl_msg_seq_add_t *m, json_t **body_p);
pl_status_t pl_msg_seq_add_decode(const json_t *body, pl_msg_seq_add_t *out);
pl_status_t pl_msg_seq_cancel_encode(const pl_msg_seq_cancel_t *m, json_t **body_p);
pl_status_t pl_msg_seq_cancel_decode(const json_t *body, pl_msg_seq_cancel_t *out);
pl_status_t pl_msg_seq_out_encode(const pl_msg_seq_out_t *m, json_t **body_p);
pl_status_t pl_msg_seq_out_decode(const json_t *body, pl_msg_seq_out_t *out);
/* "none", "eos", "length", "stop": a finish on the wire, and back (PL_ERR_INVALID otherwise). */
const char *pl_msg_finish_name(pl_finish_t f);
pl_status_t pl_msg_finish_parse(const char *name, pl_finish_t *f_p);

/* msg_train.c: a training job's part of the spec ("train": the job file as
 * pl_cfg_train_format writes it, read back through the file's own schema; "train_plan": the
 * coordinator's schedule and split), and TRAIN_STEP. The spec decoder calls
 * pl_job_train_decode; it sets spec->train only on success (NULL when the body has none). */
pl_status_t pl_job_train_encode(const pl_job_train_t *t, json_t *spec_body);
pl_status_t pl_job_train_decode(const json_t *spec_body, pl_job_spec_t *spec);
pl_status_t pl_msg_train_step_encode(const pl_msg_train_step_t *m, json_t **body_p);
pl_status_t pl_msg_train_step_decode(const json_t *body, pl_msg_train_step_t *out);

pl_status_t pl_msg_job_ref_encode(const pl_msg_job_ref_t *m, json_t **body_p);
pl_status_t pl_msg_job_ref_decode(const json_t *body, pl_msg_job_ref_t *out);
pl_status_t pl_msg_health_encode(const pl_msg_health_t *m, json_t **body_p);
pl_status_t pl_msg_health_decode(const json_t *body, pl_msg_health_t *out);
pl_status_t pl_msg_drain_encode(const pl_msg_drain_t *m, json_t **body_p);
pl_status_t pl_msg_drain_decode(const json_t *body, pl_msg_drain_t *out);

/* Typed replies. SUBMIT and KILL are answered {"job", "state"}; RESULTS {"job", "state",
 * "results", "throughput"}. STATUS, NODES, HEALTH and PLAN replies are tables for people and
 * `-o json`, kept as JSON objects (the coordinator builds them, pipectl shows them). */
typedef struct {
    uint32_t job;
    char state[16];
} pl_msg_job_state_t;

typedef struct {
    uint32_t job;
    int n_results;
    pl_msg_result_t *results; /* owned; free with pl_msg_results_free */
    json_t *throughput;       /* owned; shown as it is */
} pl_msg_results_reply_t;

pl_status_t pl_msg_job_state_encode(const pl_msg_job_state_t *m, json_t **body_p);
pl_status_t pl_msg_job_state_decode(const json_t *body, pl_msg_job_state_t *out);
pl_status_t pl_msg_results_reply_encode(const pl_msg_results_reply_t *m, json_t **body_p);
pl_status_t pl_msg_results_reply_decode(const json_t *body, pl_msg_results_reply_t *out);
void pl_msg_results_reply_clear(pl_msg_results_reply_t *m);

/* The answer to TRACE: where the stage ran and, once it finished, its trace. */
typedef struct {
    uint32_t job;
    int stage, n_stages;
    char state[16]; /* the job's */
    char node[PL_CFG_NAME_MAX + 1];
    char device[32];
    int first, last;       /* layer range */
    pl_msg_trace_t *trace; /* owned; NULL: none (the stage has not finished, or no tracing) */
} pl_msg_trace_reply_t;

pl_status_t pl_msg_trace_reply_encode(const pl_msg_trace_reply_t *m, json_t **body_p);
pl_status_t pl_msg_trace_reply_decode(const json_t *body, pl_msg_trace_reply_t *out);
void pl_msg_trace_reply_clear(pl_msg_trace_reply_t *m);

#endif
