/* The coordinator's state, shared by its files (registry, jobs, queries). One thread owns it. */
#ifndef PL_DAEMON_COORD_INT_H
#define PL_DAEMON_COORD_INT_H

#include "common/config.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "daemon/coord_store.h"
#include "pipeline/gen.h"
#include "daemon/serve_req.h"
#include "scheduler/terms.h"
#include "transport/sock.h"
#include "transport/zap.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_COORD_MAX_NODES 64
#define PL_COORD_MAX_DEVS 8
#define PL_COORD_MAX_STAGES 64
#define PL_COORD_MAX_STREAM (256u << 10) /* bytes of a running job's streamed text */
#define PL_COORD_MAX_EVENTS 64 /* events kept per job: the first and the latest */
#define PL_COORD_PROMISES_MAX 4 /* writes one client request's answer promises (coord_hold.c) */

/* One thing that happened to a job, for `pipectl logs` (coord_event.c). */
typedef struct {
    double at;      /* Unix seconds */
    char what[16];  /* "submitted", "planned", "loading", "ready", "running", "done", ... */
    char detail[160];
} pl_coord_event_t;

typedef struct {
    char id[32];
    char backend[16];
    char name[128];
    int cores;
    uint64_t cpu_mask; /* a CPU device's CPUs (HELLO); 0: unknown */
    uint64_t mem_bytes;
    double gflops, mem_gbps;         /* the daemon's calibration */
    double eff_gflops, eff_mem_gbps; /* learned from finished stages (n_obs > 0) */
    double dec_gflops, eff_dec_gflops; /* decode's row rate: calibrated, learned (0: none) */
    double pass_gbps, eff_pass_gbps;   /* prefill's weight passes: likewise */
    double attn_gflops, eff_attn_gflops; /* prefill's attention: likewise */
    double host_gbps, eff_host_gbps;     /* its host's all-core read bandwidth: likewise */
    int n_obs;
    bool flagged; /* measured far below its claimed rates (the learned rates replace them) */
} pl_coord_dev_t;

/* A link profile measured by the daemons over the job's UCX path (stage -> next stage). */
typedef struct {
    bool valid;
    double gbps, latency_s, at;
    char transport[40];
} pl_coord_link_t;

typedef struct {
    char name[PL_CFG_NAME_MAX + 1];
    char host[256];
    bool alive;
    double last_seen, registered_at;
    int n_dev;
    pl_coord_dev_t dev[PL_COORD_MAX_DEVS];
    int n_unavailable; /* from the registration, for `pipectl health` */
    pl_msg_unavailable_t unavailable[PL_MSG_MAX_UNAVAILABLE];
    bool have_health;
    pl_msg_heartbeat_t health; /* the last heartbeat */
    uint32_t busy_job;         /* 0: idle */
    int n_stale;               /* stages it reported that no current assignment owns */
    double lost_at;            /* when it was declared lost; forgotten node_expire_ms later */
} pl_coord_node_t;

typedef enum {
    PL_JOB_QUEUED,
    PL_JOB_LOADING,
    PL_JOB_RUNNING,
    PL_JOB_DONE,
    PL_JOB_FAILED,
    PL_JOB_CANCELED
} pl_job_state_t;

typedef struct {
    int node, dev;
    int first, last;
    bool ready, done;
    char *ucx_addr;
    bool have_stats;
    pl_msg_stats_t stats; /* from DONE */
    double used_gflops, used_gbps; /* the device figures the plan used */
    double used_dec_gflops, used_pass_gbps, used_attn_gflops; /* its kernels' rates (0: none) */
    double share; /* of them, the device's share of CPUs it shares with other stages (0: 1) */
    /* of used_gbps, the share of its host's bandwidth the plan charged it (0: 1) beside that of
     * its CPUs, and the host bandwidth it was charged against (0: none) */
    double bw_share, used_host_gbps;
    pl_sched_terms_t terms;        /* its predicted roofline terms per call */
    bool have_terms;
    double busy_s;     /* compute so far, from heartbeats */
    int64_t seqs_done; /* sequences it finished so far, likewise */
} pl_coord_stage_t;

/* One sequence's tokens so far, from the last stage's PROGRESS: where a resume continues. */
typedef struct {
    int32_t *tok;
    int n, cap;
    int finish; /* pl_finish_t; 0 while it runs */
    int saved;  /* of n, in the state db */
} pl_coord_seq_t;

typedef struct {
    uint32_t id;
    uint32_t epoch; /* of its current assignment; stage messages of any other are refused */
    pl_job_state_t state;
    pl_job_spec_t spec; /* what the user asked, decoded once at SUBMIT */
    char owner[64];     /* the submitting key's name ("" without authentication) */
    /* The spec goes to the state db once (the row's first save); later saves update the state
     * columns only. spec_json: the bytes admission measured, kept for that first save. */
    bool stored;
    char *spec_json;
    bool row_lost;   /* a state write found no row to update: the next save writes it whole */
    uint64_t row_seq; /* its row's last write queued (coord_writer.c); 0: none */
    bool spec_saved; /* the intake stored the spec (specs file): the first save adds the job row */
    bool spec_missing; /* restored without its spec (coord_row.c): failed unless it had ended */
    int n_layers, max_ctx, n_seqs;
    int microbatches, max_tokens;  /* what the plan decided (with n_stages and stages[]) */
    int prefill_chunk;             /* the plan's (the job's when it set one); in ASSIGN's spec */
    pl_job_chunks_t prefill_sched; /* the plan's uneven chunks (n 0: none); in ASSIGN's spec */
    uint64_t prompt_tokens;
    int n_stages;
    pl_coord_stage_t stages[PL_COORD_MAX_STAGES];
    json_t *plan;    /* printable plan */
    int n_results;   /* from the last stage's DONE */
    pl_msg_result_t *results;
    char error[1024];
    double t_submit, t_start, t_run, t_end;
    double t_queued;   /* when it last entered the queue: place_timeout_ms counts from here */
    int64_t generated; /* tokens sampled so far, from the last stage's heartbeats */
    int64_t metered_tokens; /* of those, counted in the metrics */
    bool metered;           /* its latency is in the metrics */
    /* A running one-prompt text job's text so far, from heartbeats (coord_stream.c); freed
     * when the job ends, when the results have it all. */
    char *stream;
    size_t stream_len, stream_cap;
    uint32_t stream_epoch;
    /* Progress and recovery (coord_resume.c). */
    int vocab;
    pl_coord_seq_t *seqs; /* n_seqs */
    bool resuming;        /* interrupted: the next assignment continues from seqs */
    int n_resumes;
    double t_lost;        /* the interruption was seen: candidates must have heartbeated since */
    double t_resumed;     /* its new stages were assigned */
    double t_first_new;   /* the first token past the resume point arrived; 0 before */
    int64_t resumed_from; /* tokens held when it was interrupted */
    char lost_why[192];
    int n_events;          /* of events[] */
    int64_t events_dropped; /* left out between the first and the latest */
    pl_coord_event_t events[PL_COORD_MAX_EVENTS];
    struct pl_coord_train *train; /* a training job's progress (coord_train.h); NULL otherwise */
    /* A deployment (spec.serve.on; coord_deploy*.c): its requests and counters; n_seqs is its
     * KV slots as planned (at most spec.serve.kv_slots). NULL for a batch job. */
    struct pl_coord_dep *dep;
    struct pl_coord_bound *bound; /* a batch job on a deployment (spec.deployment); else NULL */
} pl_coord_job_t;

/* The coordinator's metric families (coord_metrics.c); NULL ones record nothing. */
typedef struct {
    pl_metric_t *jobs, *queue, *nodes, *tokens, *job_s, *started;
    /* serving (coord_deploy_state.c): requests by outcome, queue depth and KV slots used per
     * deployment, time to first token and inter-token latency */
    pl_metric_t *serve_reqs, *serve_queue, *serve_kv, *serve_ttft, *serve_itl;
    double next_sweep;
} pl_coord_metrics_t;

typedef struct {
    const pl_cfg_cluster_t *cfg;
    pl_tx_ctx_t *ctx;
    pl_tx_sock_t *router;      /* clients (pipectl): bound here, then the intake thread's */
    struct pl_coord_intake *intake; /* coord_intake.c: client requests, decoded and checked */
    pl_tx_sock_t *node_router; /* nodes only: drained first, every loop turn */
    char node_ep[256];         /* what node_router binds (pl_cfg_node_endpoint) */
    pl_coord_node_t nodes[PL_COORD_MAX_NODES]; /* a free slot has name "" */
    int n_nodes;                               /* slots in use or freed, high-water */
    pl_coord_link_t links[PL_COORD_MAX_NODES][PL_COORD_MAX_NODES]; /* [from node][to node] */
    pl_coord_job_t **jobs;
    int n_jobs, cap_jobs;
    uint32_t next_job, next_epoch; /* persisted: never repeat */
    pl_coord_store_t *store; /* the writer thread's once it runs (the loop reads its path) */
    struct pl_coord_writer *writer; /* coord_writer.c: the loop's writes off the loop; NULL: none */
    uint64_t committed; /* every write queued up to it is done (committed or failed) */
    /* coord_hold.c: answers and node messages held until the writes before them are committed;
     * the answers to the client request being handled (collecting), and the job it saved */
    struct pl_coord_held *held, *held_tail, *cur, *cur_tail;
    int n_held;
    uint64_t req_seq0;
    /* the writes the request being handled promises, and what its answers become if one fails */
    uint64_t req_promises[PL_COORD_PROMISES_MAX];
    int n_req_promises;
    char req_refusal[256];
    /* coord_drain.c: drained marks queued and not yet known committed, each with the mark the
     * disk keeps if it fails */
    struct pl_coord_drain_pend *drain_pend;
    int n_drain_pend, cap_drain_pend;
    long held_waits; /* times the held answers hit their bound and the loop waited for the disk */
    struct pl_serve_api *serve_api; /* the OpenAI routes on the HTTP front (daemon/serve_api.h) */
    bool shutdown;
    pl_tx_zap_t *zap;  /* NULL when insecure */
    bool insecure;     /* security.insecure: no authentication, every peer may do everything */
    int n_clients;     /* keys on the allow-list */
    /* the refusal counters and the log's once-a-second clock: the intake thread counts too */
    _Atomic long refused_msgs; /* messages refused by role, owner or node name */
    long refused_stage_msgs; /* READY / DONE / FAIL for a stage not assigned to the sender */
    _Atomic long refused_handshakes; /* seen by the routers' monitors (ZAP counts apart) */
    _Atomic double last_refusal_log;
    pl_coord_metrics_t metrics;
    int n_drained; /* nodes kept free of new stages (persisted); by name, so re-registering keeps it */
    char drained[PL_COORD_MAX_NODES][PL_CFG_NAME_MAX + 1];
    struct pl_coord_traces *traces; /* coord_trace.c: finished stages' traces; NULL: none yet */
    pl_serve_hub_t *hub; /* serving requests from the front (borrowed) */
    struct pl_coord_serve *serve; /* coord_deploy_state.c: what was published; NULL: nothing */
} pl_coord_t;

const char *pl_job_state_name(pl_job_state_t s);
/* Answer a request: a typed message; a REPLY with `body` (taken; NULL is out of memory); an
 * ERROR with a status code the asker can branch on. */
void pl_coord_reply_msg(pl_coord_t *c, const pl_tx_peer_t *to, const pl_msg_t *m);
void pl_coord_reply(pl_coord_t *c, const pl_tx_peer_t *to, json_t *body);
void pl_coord_reply_error(pl_coord_t *c, const pl_tx_peer_t *to, pl_status_t code,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void pl_coord_send_node(pl_coord_t *c, int node, const pl_msg_t *m);
/* Handshakes a router refused (NULL mechanism, wrong server key): counted, logged once a
 * second; on the thread that owns the router. */
void pl_coord_check_handshakes(pl_coord_t *c, pl_tx_sock_t *router);
int pl_coord_find_node(const pl_coord_t *c, const char *name);
pl_coord_job_t *pl_coord_find_job(pl_coord_t *c, int64_t id);

/* coord_stream.c */
/* Bytes [at, at + len) of job j's completion, from a heartbeat of assignment `epoch`: what
 * extends the stream is appended; gaps, duplicates, other epochs and text past
 * PL_COORD_MAX_STREAM are left out. */
void pl_coord_stream_piece(pl_coord_job_t *j, uint32_t epoch, int64_t at, const char *text,
                           size_t len);
void pl_coord_stream_clear(pl_coord_job_t *j);

/* coord_job.c */
/* A job from a SUBMIT or PLAN's spec (taken: *spec is left cleared), validated against the
 * model; the caller frees it with pl_coord_job_free. */
pl_status_t pl_coord_job_new(pl_job_spec_t *spec, pl_coord_job_t **job_p);
/* A SUBMIT's job off the loop (the intake thread): validated (pl_coord_job_new) and its spec
 * encoded once into spec_json, within coordinator.max_job_mb; the refusal says which bound. */
pl_status_t pl_coord_submit_prepare(const pl_cfg_cluster_t *cfg, pl_job_spec_t *spec,
                                    pl_coord_job_t **job_p);
void pl_coord_job_fail(pl_coord_t *c, pl_coord_job_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A job with no stages of its own (a batch job on a deployment) has its results: DONE. */
void pl_coord_job_done(pl_coord_t *c, pl_coord_job_t *j);
/* A prepared SUBMIT (taken): admitted against the queue and the deployments, saved, answered. */
void pl_coord_on_submit(pl_coord_t *c, const pl_tx_peer_t *from, pl_coord_job_t **job_p);
/* Jobs not yet finished (what coordinator.max_queued_jobs bounds). */
int pl_coord_unfinished(const pl_coord_t *c);
/* READY, DONE, FAIL */
void pl_coord_on_stage_msg(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m);
void pl_coord_on_kill(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);
void pl_coord_schedule(pl_coord_t *c);
void pl_coord_node_lost(pl_coord_t *c, int node, const char *why);
void pl_coord_job_free(pl_coord_job_t *j);
/* Job j's new row was refused (its client heard "job rejected"): forgotten as a SUBMIT refused
 * at once is (not listed, never written again, its held ASSIGNs never sent, its spec dropped);
 * only where no scan of c->jobs is under way (the loop's top, a request's end). */
void pl_coord_job_forget(pl_coord_t *c, pl_coord_job_t *j);

/* coord_resume.c */
/* The job's per-sequence progress, empty (after validation set n_seqs). */
pl_status_t pl_coord_job_seqs_new(pl_coord_job_t *j);
void pl_coord_job_seqs_free(pl_coord_job_t *j);
/* PROGRESS from a job's last stage: accepted only from the assigned node, stage and epoch of a
 * running job; every piece checked; what extends a sequence is kept and persisted. */
void pl_coord_on_progress(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m);
/* A loading or running job lost a stage (`why`): its other stages are canceled and it is queued
 * again to resume from its progress on what remains (failed after too many interruptions). */
void pl_coord_job_interrupt(pl_coord_t *c, pl_coord_job_t *j, const char *why);
/* Where each sequence stands, as ASSIGN's resume carries it; *n_p 0 when nothing is held. */
pl_status_t pl_coord_resume_list(const pl_coord_job_t *j, pl_msg_result_t **r_p, int *n_p);
/* A report or the results show `tokens` generated: the first past the resume point is timed. */
void pl_coord_resume_seen(pl_coord_job_t *j, int64_t tokens);
/* Whether a stage's ASSIGN (resume: its n_resume sequences' tokens so far) fits the control
 * plane's body bound once encoded: PL_OK, or PL_ERR_RANGE saying how large it is, with how
 * many sequences and tokens, and that the job cannot start or resume. A resume is not split
 * over several messages: the job is failed with that error before any stage is assigned. */
pl_status_t pl_coord_assign_fits(const pl_msg_t *assign);
/* The same applied to a runtime job (the plan's message sizes count the resumed tokens). */
pl_status_t pl_coord_resume_apply(const pl_coord_job_t *j, pl_gen_job_t *g);
/* Stored progress back into the restored jobs (after pl_coord_restore queued them). */
pl_status_t pl_coord_progress_restore(pl_coord_t *c);
/* The job's last recovery for STATUS; NULL when it never resumed. */
json_t *pl_coord_resume_json(const pl_coord_job_t *j);

/* coord_plan.c */
/* Plan a queued job on the idle devices and fill its stages; false with a note in j->error
 * when it must wait, false with the job failed when no plan fits. */
bool pl_coord_plan_job(pl_coord_t *c, pl_coord_job_t *j);
/* PLAN: the plan a job (validated by the intake: taken) would get on the alive devices now,
 * without submitting it. */
void pl_coord_on_plan(pl_coord_t *c, const pl_tx_peer_t *from, pl_coord_job_t **job_p);
/* A finished job's lessons: link profiles its stages measured, effective device rates. */
void pl_coord_learn(pl_coord_t *c, const pl_coord_job_t *j);
/* A node (re-)registered: forget what was measured about its links. */
void pl_coord_forget_node(pl_coord_t *c, int node);

/* coord_auth.c */
/* Set up authentication on c->router and c->node_router before they bind: the cluster file's
 * keys and allow-list; without keys on local endpoints (or any endpoint of the embedded
 * cluster), the user's state directory (made at first start); without keys elsewhere an error
 * unless security.insecure. Only node keys are admitted on the node socket (zap.h). */
pl_status_t pl_coord_auth_start(pl_coord_t *c, bool embedded);
/* May this peer send this type, on the socket it came on? Node messages come on the node
 * socket only and everything else on the client socket only (also when insecure), and each
 * role sends only its own. False: refused, counted, logged (rate-limited) and answered. */
bool pl_coord_auth_check(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_type_t type);
/* May this peer see or cancel job j? False: counted and logged; the caller answers. */
bool pl_coord_auth_may_see(pl_coord_t *c, const pl_tx_peer_t *from, const pl_coord_job_t *j);
/* A stage message for a stage the sender was not assigned: counted and logged. */
void pl_coord_auth_stage_refused(pl_coord_t *c, const pl_tx_peer_t *from, const char *what);
/* A job's model directory (and every file in it) must resolve under models.allow. */
pl_status_t pl_coord_auth_model(const pl_coord_t *c, const char *model);
/* A submitted job's paths under models.allow (common/path_allow.h): its model, a training job's
 * resume_from (read) and checkpoint_dir (written; it need not exist yet). */
pl_status_t pl_coord_auth_job(const pl_coord_t *c, const pl_job_spec_t *spec);

/* coord_metrics.c */
/* Register the coordinator's metric families in r. */
pl_status_t pl_coord_metrics_init(pl_coord_t *c, pl_metrics_t *r);
/* Refresh them from the coordinator's state (cheap when called often: it sweeps 4 times a s). */
void pl_coord_metrics_update(pl_coord_t *c);
/* coord_state.c */
/* Save j's row and the counters (a no-op without a store); logs and returns the error. */
pl_status_t pl_coord_persist(pl_coord_t *c, pl_coord_job_t *j);
/* The other writes of the loop, queued to the writer (or done at once before it starts, at
 * restore): a job's row and progress deleted, progress appended, a node drained or not. An error
 * only when it could not be queued, or (synchronous) written. *seq_p (may be NULL): the write's
 * sequence number, what an answer promises (0: written at once). */
pl_status_t pl_coord_save_delete(pl_coord_t *c, int64_t id, uint64_t *seq_p);
pl_status_t pl_coord_save_progress(pl_coord_t *c, const pl_coord_chunk_t *ch, int n);
pl_status_t pl_coord_save_progress_delete(pl_coord_t *c, int64_t job);
pl_status_t pl_coord_save_drain(pl_coord_t *c, const char *node, bool drained, uint64_t *seq_p);
/* The writer said batches are done: failures handled (the answers that promised a failed write
 * become their refusal, coord_hold.c; a new job's row that could not be written fails the job,
 * a drained mark that could not be written is undone; others are logged as a synchronous
 * failure was), then the answers they held released. */
void pl_coord_saved(pl_coord_t *c);

/* coord_hold.c */
/* Held entries at most; one more makes the loop wait for the disk (counted, warned). It bounds
 * the clients whose requests wait only for commits too (the intake's table, coord_intake.c). */
#define PL_COORD_HELD_MAX 8192
/* A client request's handling starts / ends (its END marker then follows its answers, held
 * while the writes the request queued are not committed, and behind its client's held ones). */
void pl_coord_hold_begin(pl_coord_t *c);
void pl_coord_hold_end(pl_coord_t *c, const pl_tx_peer_t *from);
/* An answer to the client request being handled: taken (true), to be sent at its end. */
bool pl_coord_hold_answer(pl_coord_t *c, const pl_tx_peer_t *to, const pl_msg_t *m);
/* An ASSIGN or START to a node while writes queued before it are not committed, or any message
 * behind one held for the same node: held (true), so that a stage never hears of an epoch or a
 * state the disk does not hold yet, and each node hears its messages in order. */
bool pl_coord_hold_node(pl_coord_t *c, int node, const pl_msg_t *m);
/* What c->committed now covers, sent in order. */
void pl_coord_hold_release(pl_coord_t *c);
/* The answers to the client request being handled promise write `seq` (0: none, written at
 * once): they wait for it, and if it fails they become one ERROR "<fmt...>: <what failed>" in
 * their place (the first promise's text; at most PL_COORD_PROMISES_MAX per request). */
void pl_coord_hold_promise(pl_coord_t *c, uint64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Write seq failed (what: "job 5's row not saved: why"): the answers that promised it become
 * their refusal, a drop that waited for it is not done, an ASSIGN that waited for it (the row
 * with its epoch) is never sent. The epoch of such an ASSIGN, else 0. */
uint32_t pl_coord_hold_failed(pl_coord_t *c, uint64_t seq, pl_status_t code, const char *what);
/* Job's held ASSIGNs are never sent (its new row was refused: the job is gone). */
void pl_coord_hold_forget_job(pl_coord_t *c, uint32_t job);
/* Write seq is redone as to_seq (a row that went missing, written whole): its promises (an
 * answer's, an ASSIGN's) follow. */
void pl_coord_hold_moved(pl_coord_t *c, uint64_t seq, uint64_t to_seq);
/* Job id's spec dropped from the specs file once write seq (its row's deletion) is committed,
 * never if that fails (0: now), so that a crash in between leaves an orphan spec, which the
 * next start prunes, and never a row without its spec. */
void pl_coord_hold_drop_spec(pl_coord_t *c, uint32_t job, uint64_t seq);
void pl_coord_hold_free(pl_coord_t *c);
/* Load the counters and jobs; unfinished jobs are queued again to run from the start. */
pl_status_t pl_coord_restore(pl_coord_t *c);
/* Append j to the job table (taken on success). */
pl_status_t pl_coord_add_job(pl_coord_t *c, pl_coord_job_t *j);
bool pl_coord_job_terminal(const pl_coord_job_t *j);

/* coord_row.c */
/* A job from a stored row, every field checked (errors name the field); nothing kept on error. */
pl_status_t pl_coord_job_from_row(const pl_coord_row_t *r, pl_coord_job_t **job_p);

/* coord_event.c */
/* Record an event of job j now (the oldest after the first are dropped when full). */
void pl_coord_event(pl_coord_job_t *j, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* j's events as a JSON array [{"at", "what", "detail"}] (new reference; NULL: no memory), and
 * back from a stored one, every field checked; j's events are replaced only on success. */
json_t *pl_coord_events_json(const pl_coord_job_t *j);
pl_status_t pl_coord_events_from_json(const json_t *arr, pl_coord_job_t *j);

/* coord_drain.c */
/* DRAIN: mark a node drained or not (persisted) and answer with its state; the answer promises
 * the write, and the mark is undone if it fails (pl_coord_drain_failed). */
void pl_coord_on_drain(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_drain_t *m);
/* Drained mark write seq failed: the node's mark back to what the disk keeps. */
void pl_coord_drain_failed(pl_coord_t *c, uint64_t seq);
/* Marks up to c->committed are on disk: forgotten. */
void pl_coord_drain_saved(pl_coord_t *c);
void pl_coord_drain_free(pl_coord_t *c);
bool pl_coord_node_draining(const pl_coord_t *c, const char *name);
/* The drained nodes from the store, at start. */
pl_status_t pl_coord_drain_restore(pl_coord_t *c);
/* coord_trace.c */
/* Keep stage `stage` of j's trace from its DONE (taken: *tr_p NULL; NULL is nothing to keep):
 * in memory only, the oldest jobs' traces dropped beyond the budget. */
void pl_coord_trace_keep(pl_coord_t *c, const pl_coord_job_t *j, int stage, pl_msg_trace_t **tr_p);
/* Drop a job's traces: it left the history (results_kept), so they go with it. */
void pl_coord_trace_forget(pl_coord_t *c, uint32_t job);
void pl_coord_trace_free_all(pl_coord_t *c);
/* TRACE: one stage's trace of a job, with where it ran; for a running stage, the last trace so
 * far it sent, and the stage is asked for a newer one. */
void pl_coord_on_trace(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);
/* TRACED: a running stage's trace so far, kept until a newer one or its DONE. */
void pl_coord_on_traced(pl_coord_t *c, const pl_tx_peer_t *from, pl_msg_t *m);
/* coord_deploy_state.c: deployments as jobs */
/* A deployment's job at SUBMIT (or restored): its context (the model's positions, at most
 * PL_COORD_DEPLOY_PROMPT_MAX + serve.max_tokens), KV slots as n_seqs, its request table. */
#define PL_COORD_DEPLOY_PROMPT_MAX 4096
pl_status_t pl_coord_deploy_validate(pl_coord_job_t *j, const pl_model_config_t *cfg);
/* The job shape the planner sizes a deployment by: serve.kv_slots sequences of max_ctx
 * positions (prompts of max_ctx - max_tokens, max_tokens new). Free with pl_job_spec_clear. */
pl_status_t pl_coord_deploy_shape(const pl_coord_job_t *j, pl_job_spec_t *shape);
/* What the plan decided for a deployment: KV slots (the resident sequences that fit every
 * stage's memory), lanes (at least one per stage), tokens per microbatch (serve.step_tokens). */
void pl_coord_deploy_planned(pl_coord_job_t *j, int resident, int microbatches, int n_stages);
/* A deployment's requests in flight, and in *tokens_p the completion tokens they hold: what its
 * resume re-adds (SEQ_ADD `resumed`), the tokens prefilled again. */
int pl_coord_deploy_in_flight(const pl_coord_job_t *j, int64_t *tokens_p);
/* coord_resume.c: what j's resume does, as a phrase for its messages: "resumes from N generated
 * tokens"; a deployment's "resumes with its K request(s) in flight re-added (N tokens so far)". */
void pl_coord_resume_what(const pl_coord_job_t *j, char *buf, size_t len);
/* Another deployment of this name that has not ended (NULL: none). */
pl_coord_job_t *pl_coord_deploy_find(pl_coord_t *c, const char *name);
void pl_coord_deploy_free(pl_coord_job_t *j);
void pl_coord_deploy_free_all(pl_coord_t *c);
/* Publish the deployments on the hub (what the front may name) when they changed. */
void pl_coord_deploy_publish(pl_coord_t *c);
/* Every loop turn: requests of a re-assigned deployment re-added, those of an ended one ended,
 * the metrics and the published list brought up to date. */
void pl_coord_deploy_tick(pl_coord_t *c);
/* DEPLOYMENTS: the deployments the asker may see, with plan, load and throughput. */
void pl_coord_on_deployments(pl_coord_t *c, const pl_tx_peer_t *from);
pl_status_t pl_coord_deploy_metrics_init(pl_coord_t *c, pl_metrics_t *r);

/* coord_deploy.c: requests */
/* The hub woke the loop: take every request handed over and route it (404, 503, 400, 429 or
 * SEQ_ADD to the stages); requests whose clients left are canceled. */
void pl_coord_deploy_on_hub(pl_coord_t *c);
/* SEQ_OUT from a deployment's last stage: accepted only from its node at its epoch. */
void pl_coord_deploy_on_seq_out(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);
/* Send (again) the live requests of a running deployment not yet added at its epoch. */
void pl_coord_deploy_readd(pl_coord_t *c, pl_coord_job_t *j);
/* End every live request of j (a deployment that ended) with `end`. */
void pl_coord_deploy_end_all(pl_coord_t *c, pl_coord_job_t *j, const pl_serve_end_t *end);

/* coord_query.c */
void pl_coord_on_jobs(pl_coord_t *c, const pl_tx_peer_t *from);
void pl_coord_on_status(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);
void pl_coord_on_results(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);
void pl_coord_on_nodes(pl_coord_t *c, const pl_tx_peer_t *from);
void pl_coord_on_health(pl_coord_t *c, const pl_tx_peer_t *from, const pl_msg_t *m);

#endif
