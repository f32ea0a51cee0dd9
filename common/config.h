/* The three YAML files users write: cluster, node (pipeld) and job. Each is checked against a
 * schema in code: an unknown key, a wrong type, a value out of range or a missing required key
 * is an error "FILE:LINE:COLUMN: key 'NAME': what is wrong", and nothing is half-filled. */
#ifndef PL_COMMON_CONFIG_H
#define PL_COMMON_CONFIG_H

#include "common/job_gen.h"
#include "common/status.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_CFG_MAX_NODES 64
#define PL_CFG_MAX_LABELS 8
#define PL_CFG_NAME_MAX 63
#define PL_CFG_MAX_BYTES (1u << 20)
#define PL_CFG_MAX_NODE_DEVICES 8 /* device entries of one node in a cluster file */
#define PL_CFG_MAX_DEVICE_COUNT 64
#define PL_CFG_MAX_LINKS 64

/* A device of a described ("what-if") cluster, for `pipectl plan --cluster`: either a catalogue
 * kind (scheduler/catalog.h) or explicit figures (gflops, mem_gbps and mem_gb all given). */
typedef struct {
    char kind[PL_CFG_NAME_MAX + 1]; /* catalogue name or alias, "H100 SXM"; "" with figures */
    char name[PL_CFG_NAME_MAX + 1]; /* shown name; "" : the kind */
    char backend[16];               /* cpu, cuda, hip; "": the catalogue's (explicit: cuda) */
    int count;                      /* identical devices, default 1 */
    float gflops;                   /* explicit compute rate, GFLOP/s */
    float mem_gbps;                 /* explicit memory bandwidth, GB/s */
    float mem_gb;                   /* explicit memory, GiB */
    float compute_efficiency;       /* share of the catalogue's peak reached, default 1 */
    float memory_efficiency;        /* likewise for bandwidth, default 1 */
    float reserve_gb;               /* memory kept free, GiB, default 0.5 */
} pl_cfg_device_t;

/* A link between two nodes of a described cluster (both directions). */
typedef struct {
    char from[PL_CFG_NAME_MAX + 1];
    char to[PL_CFG_NAME_MAX + 1];
    float gbps;       /* GB/s */
    float latency_us; /* one-way, microseconds */
} pl_cfg_link_t;

typedef struct {
    char name[PL_CFG_NAME_MAX + 1];
    char address[PL_CFG_NAME_MAX + 1]; /* host or IP the node runs on */
    int threads;                      /* CPU threads for this node's CPU device; 0: all */
    int max_devices;                  /* 0: no limit */
    int n_labels;
    char labels[PL_CFG_MAX_LABELS][PL_CFG_NAME_MAX + 1];
    int n_devices; /* described devices (what-if planning); 0: the daemon reports its own */
    pl_cfg_device_t devices[PL_CFG_MAX_NODE_DEVICES];
} pl_cfg_node_entry_t;

#define PL_CFG_MAX_CLIENTS 64
#define PL_CFG_MAX_MODEL_DIRS 16

/* A client key the coordinator admits (security.clients): its role and one of the two key
 * forms. */
typedef struct {
    char name[PL_CFG_NAME_MAX + 1]; /* node name for role node ("*": any), a label otherwise */
    char role[8];                   /* node, user, admin */
    char public_key[64];            /* Z85, or "" with public_key_file */
    char public_key_file[256];
} pl_cfg_client_t;
#define PL_CFG_MAX_API_KEYS 16
#define PL_CFG_API_KEY_MAX 127

/* An HTTP listener for /metrics, /livez, /readyz (and on the coordinator the OpenAI API): an
 * IP literal and a port; port 0: off. */
#define PL_CFG_HTTP_MAX_CONNS 256
typedef struct {
    char address[64];    /* default 127.0.0.1 */
    int port;            /* required when the section is present */
    int max_connections; /* concurrent connections, each on its own thread; default
                          * PL_CFG_HTTP_MAX_CONNS (above a deployment's default slots + queue,
                          * so that a full deployment answers 429, not a refused connection) */
    int max_body_kb;     /* largest request body; default 1024 */
    /* coordinator.http only: the bearer tokens the OpenAI API takes (none: no check) */
    int n_api_keys;
    char api_keys[PL_CFG_MAX_API_KEYS][PL_CFG_API_KEY_MAX + 1];
    char api_keys_file[PATH_MAX]; /* one token a line, mode 0600; read when the API starts */
} pl_cfg_http_t;

typedef struct {
    char endpoint[256];  /* coordinator.endpoint, e.g. tcp://127.0.0.1:5555 (required) */
    char node_endpoint[256]; /* coordinator.node_endpoint; "": derived (pl_cfg_node_endpoint) */
    int heartbeat_ms;    /* coordinator.heartbeat_ms, default 500 */
    int dead_after_ms;   /* coordinator.dead_after_ms, default 3000 */
    char state_db[PATH_MAX]; /* coordinator.state_db: SQLite file; "" = pl_state_dir()/coord.db */
    int max_queued_jobs;     /* coordinator.max_queued_jobs: jobs not yet finished, default 256 */
    int max_job_mb;          /* coordinator.max_job_mb: one job's spec as stored, default 64 */
    int results_kept;        /* coordinator.results_kept: finished jobs kept, default 1024 */
    int place_timeout_ms;    /* coordinator.place_timeout_ms: unplaceable job fails, def. 300000 */
    int load_timeout_ms;     /* coordinator.load_timeout_ms: stages READY by then, def. 300000 */
    int node_expire_ms;      /* coordinator.node_expire_ms: lost nodes forgotten, def. 600000 */
    char public_key[64]; /* security.coordinator_public_key (Z85, 40 chars), "" = none */
    char secret_key[64]; /* security.coordinator_secret_key */
    char secret_key_file[PATH_MAX]; /* security.coordinator_secret_key_file (0600), "" = none */
    int n_clients;                  /* security.clients: the allow-list */
    pl_cfg_client_t clients[PL_CFG_MAX_CLIENTS];
    bool insecure;                  /* security.insecure: no keys on a non-loopback address */
    int n_model_dirs;               /* models.allow; 0: any path */
    char model_dirs[PL_CFG_MAX_MODEL_DIRS][PATH_MAX];
    pl_cfg_http_t http;  /* coordinator.http: the coordinator's HTTP front; off when absent */
    char log_level[16];  /* coordinator.log_level: error, warn, info (default), debug */
    char log_format[16]; /* coordinator.log_format: text (default), json */
    char log_target[16]; /* coordinator.log_target: stderr (default), journald */
    int n_nodes;
    pl_cfg_node_entry_t nodes[PL_CFG_MAX_NODES];
    int n_links; /* described links (what-if planning) */
    pl_cfg_link_t links[PL_CFG_MAX_LINKS];
} pl_cfg_cluster_t;

/* Where nodes talk to the coordinator: its own socket, served before any client's, so that no
 * client flood delays a heartbeat. node_endpoint when set ("" or NULL: none), else derived from
 * the client endpoint: tcp://HOST:PORT -> tcp://HOST:PORT+1, ipc://X -> ipc://X.nodes,
 * inproc://X -> inproc://X.nodes. The coordinator binds it and pipeld connects to it from the
 * same two values, so a node file naming only the coordinator's endpoint works unchanged. */
pl_status_t pl_cfg_node_endpoint(const char *endpoint, const char *node_endpoint, char *out,
                                 size_t len);

typedef struct {
    char name[PL_CFG_NAME_MAX + 1]; /* required */
    char coordinator[256];          /* required endpoint */
    char coordinator_node[256];     /* coordinator_node_endpoint; "": derived from coordinator */
    int n_devices;                  /* backends to use; 0: every one found */
    char devices[4][16];            /* "cpu", "cuda", "hip" */
    int threads;                    /* CPU threads; 0: all cores */
    int memory_reserve_mb;          /* default 512 */
    int memory_limit_mb;            /* at most this much usable per device; 0 (default): no cap */
    int heartbeat_ms;               /* default 500 */
    char log_level[16];             /* default "info" */
    char coordinator_key[64];       /* coordinator_public_key: CURVE (Z85), "" = plaintext */
    char key_file[PATH_MAX];        /* key_file: this node's secret key (0600) for CURVE */
    float slowdown;                 /* testing: run the CPU device this many times slower, >= 1 */
    pl_cfg_http_t http;             /* http: the daemon's HTTP front; off when absent */
    char log_format[16];            /* text (default), json */
    char log_target[16];            /* stderr (default), journald */
} pl_cfg_node_t;

/* pipectl's user settings (~/.config/pipeld/pipectl.yaml), below its flags and environment. */
typedef struct {
    char coordinator[256];    /* endpoint; "" when not set */
    char coordinator_key[64]; /* coordinator_public_key (Z85); "" when not set */
    char key_file[PATH_MAX];  /* key_file: the user's secret key; "" when not set */
    char output[8];           /* table (default), wide, json, yaml */
    float timeout_s;          /* answer timeout, default 10 */
} pl_cfg_pipectl_t;

pl_status_t pl_cfg_pipectl_load(const char *path, pl_cfg_pipectl_t *out);
pl_status_t pl_cfg_pipectl_parse(const char *text, size_t len, const char *origin,
                                 pl_cfg_pipectl_t *out);
/* pipectl's output formats, NULL-ended (the -o words). */
extern const char *const pl_cfg_output_names[];

typedef struct {
    char model[PATH_MAX];   /* resolved against the job file's directory */
    char prompts[PATH_MAX]; /* JSONL: [ids], {"text"} or {"messages"} per line, resolved likewise */
    pl_job_gen_t gen;       /* max_new_tokens, min_new_tokens, stop_at_eos, stop, sampling.*,
                             * prefill_chunk, wire_dtype */
    char chat_format[16];   /* "" (default): the model's chat template decides; else a family */
    int microbatches;       /* default 0: as many as stages */
    int stages;             /* default 0: every live node */
    char planner[16];       /* "auto" (default: may leave devices out), "optimal", "even" */
    int n_nodes;            /* placement.nodes: allowed node names; 0: any */
    char nodes[PL_CFG_MAX_NODES][PL_CFG_NAME_MAX + 1];
    /* deployment: "" (default) runs on stages of its own; else the prompts run as requests on
     * that deployment (its model must be this one; planning comes from the deployment) */
    char deployment[PL_CFG_NAME_MAX + 1];
} pl_cfg_job_t;

/* A deployment file (pipectl serve): a model kept loaded on planned stages for requests. */
#define PL_CFG_DEPLOY_MAX_SLOTS 4096
#define PL_CFG_DEPLOY_MAX_QUEUE 65536
typedef struct {
    char name[PL_CFG_NAME_MAX + 1]; /* required; what requests name (the OpenAI "model") */
    char model[PATH_MAX];           /* required; resolved against the file's directory */
    int stages;                     /* as a job's: default 0, every live node */
    char planner[16];               /* as a job's: "auto" (default), "optimal", "even" */
    int n_nodes;                    /* placement.nodes, as a job's */
    char nodes[PL_CFG_MAX_NODES][PL_CFG_NAME_MAX + 1];
    int microbatches;               /* in flight; default 0: as many as stages */
    int kv_slots;    /* sequences each stage holds (fewer if memory is short); default 16 */
    int max_queue;   /* requests waiting for a slot at most, beyond: 429; default 64 */
    int max_tokens;  /* cap of a request's max_tokens; default 512 */
    int step_tokens; /* tokens of one microbatch at most (prefill chunks + decode); default 256 */
    char wire_dtype[8]; /* as a job's: "f32" (default), "bf16", "f16" */
} pl_cfg_deploy_t;

/* Load from a path (errors carry path:line:col) or from text (errors carry `origin`). */
pl_status_t pl_cfg_cluster_load(const char *path, pl_cfg_cluster_t *out);
pl_status_t pl_cfg_cluster_parse(const char *text, size_t len, const char *origin,
                                 pl_cfg_cluster_t *out);
pl_status_t pl_cfg_node_load(const char *path, pl_cfg_node_t *out);
pl_status_t pl_cfg_node_parse(const char *text, size_t len, const char *origin,
                              pl_cfg_node_t *out);
/* Relative model / prompts paths are resolved against `base_dir` (the job file's directory). */
pl_status_t pl_cfg_job_load(const char *path, pl_cfg_job_t *out);
pl_status_t pl_cfg_job_parse(const char *text, size_t len, const char *origin,
                             const char *base_dir, pl_cfg_job_t *out);

/* Relative model paths are resolved against `base_dir` (the file's directory). */
pl_status_t pl_cfg_deploy_load(const char *path, pl_cfg_deploy_t *out);
pl_status_t pl_cfg_deploy_parse(const char *text, size_t len, const char *origin,
                                const char *base_dir, pl_cfg_deploy_t *out);

/* An HTTP listener from a command line flag, "ADDRESS:PORT" ("[V6]:PORT" for IPv6), checked as
 * the files' http sections are; errors name `origin` (the flag). Sets out's address and port
 * only (the file's other http keys stay). */
pl_status_t pl_cfg_http_parse(const char *text, const char *origin, pl_cfg_http_t *out);

/* A node, deployment or other name as the files take it: [A-Za-z0-9_.-]+ (not empty). */
bool pl_cfg_name_ok(const char *name);

/* The embedded default cluster: a coordinator on loopback and local nodes. */
extern const char pl_cfg_default_cluster_yaml[];

#endif
