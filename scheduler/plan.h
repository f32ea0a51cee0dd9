/* The heterogeneous planner: cost model, optimal contiguous partition, order and device
 * selection, microbatches, and an explained plan. Pure C: no I/O, no threads, deterministic.
 *
 * Cost model (all times in seconds, all sizes in bytes; "b" is the microbatch size in sequences,
 * P the average prompt length, N the new tokens per sequence, R the resident sequences, C the KV
 * positions per sequence slot):
 *
 *   per layer l:  W_l weight bytes, F_l dense FLOPs per token, A_l attention FLOPs per token per
 *                 context position, K_l KV bytes per token.
 *   prefill of one microbatch over layers [a, e):
 *       flops = b*P*sum F + b*P*(P+1)/2 * sum A   (+ b*head_flops on the last stage)
 *       bytes = sum W + 2*b*P*sum K              (+ b*P*embed_bytes_per_token on the first,
 *                                                   + head_weight_bytes on the last stage)
 *   decode step of one microbatch (average context c = P + N/2):
 *       flops = b*sum F + b*c*sum A               (+ b*head_flops on the last stage)
 *       bytes = sum W + b*(c+1)*sum K             (+ embed rows / head weights as above)
 *   roofline of a phase on device d: max(flops / (gflops*1e9), bytes / (mem_gbps*1e9)), where
 *       the caller gives mem_gbps as the device gets it: CPU stages of daemons on one host that
 *       stream at once share the host's bandwidth (host_gbps, pl_sched_host_bw_shares). A device
 *       that measured the rates of its kernels (CPUs) is charged as they run:
 *       - prefill adds, to its flops' time, one pass over the stage's weights per sequence of the
 *         call, b * sum W / (pass_gbps*1e9) (the conversion and packing of each product);
 *       - a decode step, and a prefill call of fewer than PL_SCHED_ROW_TOKENS tokens per sequence
 *         (these run on decode's kernels), take their flops at dec_gflops, and the two terms
 *         hide each other only in part: max + PL_SCHED_ROW_OVERLAP * min (pl_sched_phase).
 *       - prefill's attention flops (b*P*(P+1)/2 * sum A: quadratic in the prompt, each chunk its
 *         1/K share, its queries against the prefix cached before it) go at attn_gflops when
 *         the device measured it, whichever kernels its products run on.
 *       Measured on this Xeon (1 thread, bf16 weights): sgemm 88 GFLOP/s, decode's rows 45, a
 *       sequence's pass 2.6 GB/s of weights (a 64-token prefill spends a third of its time so)
 *   transfer to the next stage's device n: latency(d,n) + act_bytes / (gbps(d,n)*1e9), with
 *       act_bytes = b*P*act_bytes_per_token (prefill) or b*act_bytes_per_token (decode). The last
 *       stage sends only token ids back to stage 0 (the ring); that return is charged to the
 *       decode cycle below, not to a stage.
 *   stage time of a phase = roofline + transfer.
 *   stage cost (what the partition minimises) = w_pre * prefill stage time + w_dec * decode stage
 *       time: the stage's busy time per microbatch over one wave of the job. Objective JOB uses
 *       w_pre = 1, w_dec = N - 1 (every token after the first comes from a decode step); DECODE
 *       uses (0, 1); PREFILL uses (1, 0). The bottleneck is the stage with the largest cost.
 *   memory of a stage = sum W + R*C*sum K + workspace(b) (+ embedding table on the first stage,
 *       + head weights and b logits rows on the last; a tied table is stored once when one stage
 *       holds both), where workspace(b) = b*P_max*(2*act_bytes_per_token + work_bytes_per_token)
 *       + P_max*C*score_bytes_per_pair. It must not exceed mem_bytes - reserve_bytes.
 *
 * Search: for a fixed order, an exact DP over (device, first layer); over orders and subsets, an
 * exact DP over device subsets with a bisection on the bottleneck for up to exact_max_devices
 * (default 12), beyond that the best fixed-order plan among heuristic orders (hosts by total
 * speed, devices by speed). Ties go to the lowest device index; fewer stages win equal ties in
 * the subset search. The JOB cost is a max of sums (one number per stage); since prefill and
 * decode run as separate phases, the real wave time is closer to a sum of per-phase maxima, which
 * the predictions below use.
 *
 * Pipeline (S stages, M microbatches of at most b = ceil(R/M) sequences, each charged as b;
 * t_s stage times of a phase):
 *   decode period      = max(M * max_s t_s, sum_s t_s + ring)   (ring: token ids last -> first)
 *   decode tokens/s    = R / decode period
 *   decode bubble      = 1 - M * max_s t_s / decode period      (idle share of the bottleneck)
 *   prefill in K = ceil(P_max / chunk) messages per microbatch (K = 1: whole prompts), each
 *       1/K of the microbatch's tokens, attention and activations, reading the stage's weights
 *       once and its KV so far (pl_sched_prefill_call): u_s its time on stage s, transfer in;
 *   prefill time       = sum_s u_s + (M * K - 1) * max_s u_s   (K = 1: u_s = t_s)
 *   prefill tokens/s   = R * P / prefill time;  prefill bubble = 1 - M K max_s u_s / prefill time
 *   wave time          = prefill time + (N - 1) * decode period; waves = ceil(n_seqs / R)
 *   job time           = waves * wave time  (speed-ups compare job times)
 * M is at least min(S, R) so the decode pipeline stays full when there are enough sequences;
 * the planner picks the M in [min(S,R), min(R,2S)] with the shortest wave time, and the largest R
 * <= n_seqs whose KV cache fits. Because each microbatch reads a stage's weights again, a full
 * pipeline can lose to one device in memory-bound decode; the planner then returns that device
 * (search "single", only when devices may be left out), so a plan is never predicted slower than
 * the fastest single device. */
#ifndef PL_SCHEDULER_PLAN_H
#define PL_SCHEDULER_PLAN_H

#include "common/job_spec.h"
#include "common/sgemm_rows.h"
#include "common/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PL_SCHED_NAME_MAX 63
#define PL_SCHED_MAX_DEVICES 256
#define PL_SCHED_MAX_LAYERS 4096
#define PL_SCHED_EXACT_MAX 16 /* the largest exact_max_devices accepted */
#define PL_SCHED_WHY_MAX 191  /* the longest reason a device is no candidate */

/* ---- model and per-layer costs ---------------------------------------------------------- */

typedef struct {
    int n_layers, hidden, intermediate, n_heads, n_kv_heads, head_dim, vocab;
    double weight_bytes; /* bytes per weight element (2 for bf16/f16) */
    double kv_bytes;     /* bytes per KV-cache element */
    double act_bytes;    /* bytes per activation element (4: hidden states travel as f32) */
    bool tie_embeddings;
} pl_sched_model_t;

typedef struct {
    double weight_bytes;       /* W_l */
    double flops_per_token;    /* F_l: 2 * matmul parameters */
    double attn_flops_per_pos; /* A_l: QK^T and AV, 4 * n_heads * head_dim */
    double kv_bytes_per_token; /* K_l: 2 * n_kv_heads * head_dim * kv_bytes */
} pl_sched_layer_cost_t;

typedef struct {
    int n_layers;
    const pl_sched_layer_cost_t *layers; /* n_layers entries */
    double embed_weight_bytes;           /* token embedding table (first stage) */
    double embed_bytes_per_token;        /* one embedding row read per token */
    double head_weight_bytes;            /* final norm + LM head (last stage) */
    double head_flops_per_seq;           /* logits of one position: 2 * vocab * hidden */
    double tied_bytes;                   /* bytes shared by embedding and head (0 when untied) */
    double act_bytes_per_token;          /* hidden state crossing a stage boundary */
    double work_bytes_per_token;         /* activation workspace inside a stage */
    double logits_bytes_per_seq;         /* one row of f32 logits */
    double score_bytes_per_pair;         /* attention scores of one head per (query, key) pair */
} pl_sched_costs_t;

/* Per-layer and edge costs of a Llama-family model; *costs_p (one allocation, layers inside) is
 * the caller's to free with pl_sched_costs_destroy. */
pl_status_t pl_sched_costs_from_model(const pl_sched_model_t *m, pl_sched_costs_t **costs_p);
/* Free costs made by pl_sched_costs_from_model; nulls the pointer; safe on NULL. */
void pl_sched_costs_destroy(pl_sched_costs_t **costs_p);

/* ---- cluster and job ---------------------------------------------------------------------- */

typedef struct {
    double gbps;      /* GB/s (1e9 bytes/s); <= 0: not measured, the default for the pair applies */
    double latency_s; /* one-way latency */
} pl_sched_link_t;

typedef struct {
    char name[PL_SCHED_NAME_MAX + 1]; /* model of the device, "NVIDIA H100 80GB HBM3" */
    char node[PL_SCHED_NAME_MAX + 1]; /* daemon that owns it */
    char host[PL_SCHED_NAME_MAX + 1]; /* machine; devices on one host use same-host links */
    char backend[16];                 /* "cpu", "cuda", "hip" */
    int index;                        /* index within its node's backend */
    double gflops;                    /* calibrated compute rate (GFLOP/s), > 0 */
    double mem_gbps;                  /* calibrated memory bandwidth (GB/s), > 0 */
    /* decode's per-row compute rate (GFLOP/s): the rate of the kernels a decode step's rows run
     * on; 0: not measured, decode's flops then go at gflops */
    double dec_gflops;
    /* prefill's pass over its stage's stored weights for each sequence of a message (GB/s of
     * stored bytes): the conversion and packing its matrix products do before they compute
     * (CPUs); 0: none */
    double pass_gbps;
    /* prefill's attention rate (GFLOP/s): a chunk's queries against the sequence's cached prefix
     * on the kernel prefill runs (CPUs: pl_cpu_attention); 0: not measured, attention's flops
     * then go at the phase's rate */
    double attn_gflops;
    uint64_t mem_bytes;               /* device memory */
    uint64_t reserve_bytes;           /* kept free (runtime, fragmentation) */
    /* the read bandwidth of the device's whole host with every core streaming (GB/s; CPUs):
     * what the decode weight streams of the stages that run on one host at once share
     * (pl_sched_host_bw_shares); 0: not measured, no such limit */
    double host_gbps;
} pl_sched_device_t;

typedef struct {
    int n_seqs;         /* sequences in the job, >= 1 */
    int prompt_avg;     /* average prompt tokens, >= 1 */
    int prompt_max;     /* longest prompt, >= prompt_avg */
    int max_new_tokens; /* >= 1 */
    int microbatches;   /* requested count; 0: the planner chooses */
    int ctx;            /* KV positions per sequence slot; 0: prompt_max + max_new_tokens */
    int prefill_chunk;  /* prompt tokens per prefill message; 0: the planner chooses */
} pl_sched_job_t;

typedef enum { PL_SCHED_ORDER_SEARCH = 0, PL_SCHED_ORDER_FIXED = 1 } pl_sched_order_t;
typedef enum {
    PL_SCHED_OBJ_JOB = 0,
    PL_SCHED_OBJ_DECODE = 1,
    PL_SCHED_OBJ_PREFILL = 2
} pl_sched_objective_t;

/* Which fields of pl_plan_options_t are set; the others take their defaults. */
enum {
    PL_PLAN_OPT_ORDER = 1u << 0,      /* default PL_SCHED_ORDER_SEARCH */
    PL_PLAN_OPT_ALLOW_SKIP = 1u << 1, /* default true */
    PL_PLAN_OPT_OBJECTIVE = 1u << 2,  /* default PL_SCHED_OBJ_JOB */
    PL_PLAN_OPT_EXACT_MAX = 1u << 3,  /* default 12 */
    PL_PLAN_OPT_MAX_STAGES = 1u << 4, /* default 0: no limit */
    PL_PLAN_OPT_SAME_HOST = 1u << 5,  /* default 10 GB/s, 5 us */
    PL_PLAN_OPT_CROSS_HOST = 1u << 6, /* default 1.25 GB/s, 50 us */
};

typedef struct {
    uint64_t field_mask;
    pl_sched_order_t order; /* SEARCH: best order and selection; FIXED: the input order */
    bool allow_skip;        /* devices may be left out when they do not help */
    pl_sched_objective_t objective;
    int exact_max_devices; /* exact order search up to this many devices, heuristic beyond */
    int max_stages;        /* 0: no limit */
    pl_sched_link_t same_host, cross_host; /* link defaults when not measured */
} pl_plan_options_t;

typedef struct {
    const pl_sched_model_t *model; /* used when costs is NULL */
    const pl_sched_costs_t *costs; /* explicit per-layer costs, or NULL */
    const pl_sched_device_t *devices;
    int n_devices;
    const pl_sched_link_t *links; /* n_devices^2, [from * n_devices + to]; NULL: defaults */
    pl_sched_job_t job;
    pl_plan_options_t options;
    /* n_devices entries, or NULL: a non-NULL entry says why device i cannot hold this model (a
     * quantized model on a GPU); such a device is no candidate, and an alive one is listed as
     * left out with that reason */
    const char *const *refused;
} pl_plan_input_t;

/* ---- the plan ----------------------------------------------------------------------------- */

typedef struct {
    int device; /* index into pl_plan_input_t.devices */
    char device_name[PL_SCHED_NAME_MAX + 1];
    char node[PL_SCHED_NAME_MAX + 1];
    char host[PL_SCHED_NAME_MAX + 1];
    char backend[16];
    int device_index;
    int first_layer, last_layer, n_layers; /* inclusive range */
    bool has_embed, has_head;
    double cost;                      /* objective stage cost (what the partition minimised) */
    double t_prefill;                 /* prefill stage time per microbatch, transfer included */
    double t_decode;                  /* decode stage time per microbatch, transfer included */
    double xfer_prefill, xfer_decode; /* the transfer part of the two */
    /* one prefill message (a chunk of a microbatch, plan.prefill_chunk; the whole microbatch
     * when prompts go whole): what the prefill prediction pipelines, transfer included */
    double t_prefill_call, xfer_prefill_call;
    /* bytes one decode call reads (weights, its embedding rows or LM head, KV): what a
     * memory-bound step moves, once per microbatch */
    double decode_read_bytes;
    uint64_t mem_used, mem_avail; /* mem_avail = mem_bytes - reserve_bytes */
    uint64_t mem_weights, mem_kv, mem_work;
    int next_stage;       /* stage that receives the output; 0 for the last (token ids) */
    pl_sched_link_t link; /* to the next stage's device (as used, defaults applied) */
    bool link_same_host;
} pl_plan_stage_t;

typedef struct {
    int device; /* index into pl_plan_input_t.devices */
    char device_name[PL_SCHED_NAME_MAX + 1];
    char node[PL_SCHED_NAME_MAX + 1];
    char why[PL_SCHED_WHY_MAX + 1]; /* left out as no candidate: the input's reason; else "" */
} pl_plan_device_ref_t;

typedef struct pl_plan {
    int n_stages;
    pl_plan_stage_t *stages;
    int n_left_out;
    pl_plan_device_ref_t *left_out; /* alive devices the plan does not use (refused ones last) */
    pl_sched_objective_t objective;
    const char *search; /* "exact", "fixed", "heuristic"; "single" when one device beat them */
    int bottleneck_stage;
    double bottleneck; /* the largest stage cost */
    int n_seqs, resident_seqs, waves, microbatches, microbatch_size, ctx, max_tokens;
    int prefill_chunk; /* prompt tokens per prefill message (pl_sched_prefill_chunk); 0: whole */
    /* the uneven chunks that replace it (pl_sched_chunks_plan; n 0: equal chunks), and the equal
     * chunks' prefill time in the same flow shop (0: the job set its chunk, or prompts go whole) */
    pl_job_chunks_t prefill_sched;
    double prefill_time_even;
    double prefill_time, decode_period, ring_s, wave_time, job_time;
    double prefill_tok_s, decode_tok_s, bubble_prefill, bubble_decode;
    double even_job_time;        /* even split over every input device in input order; 0: not fit */
    double single_job_time;      /* fastest single device that fits; 0: none */
    pl_plan_device_ref_t single; /* that device; single.device is -1 when none fits */
    double speedup_even, speedup_single; /* 0 when the baseline does not fit */
} pl_plan_t;

/* Plan the job: the device order and selection, the contiguous partition with the smallest
 * bottleneck within every device's memory, microbatches, predictions and baselines.
 * PL_ERR_INFEASIBLE (saying how much memory is missing and where) when nothing fits,
 * PL_ERR_INVALID / PL_ERR_RANGE naming the field for bad input. *plan_p set only on success. */
pl_status_t pl_plan(const pl_plan_input_t *in, pl_plan_t **plan_p);
/* Re-plan after a node was lost or joined: as pl_plan over the devices with alive[i] true;
 * device indices in the plan still refer to in->devices. */
pl_status_t pl_replan(const pl_plan_input_t *in, const bool *alive, pl_plan_t **plan_p);
/* The even split over the devices with alive[i] (NULL: all) in input order: equal layer counts
 * on the first min(n, layers) of them, every sequence resident (fewer, as pl_plan keeps, when
 * their KV cache does not fit: resident_seqs says how many), microbatches as requested (else one
 * per stage). The benchmarks' baseline; search "even", baselines as pl_plan's over the same
 * devices. PL_ERR_INFEASIBLE naming the first stage that does not fit one sequence. */
pl_status_t pl_plan_even(const pl_plan_input_t *in, const bool *alive, pl_plan_t **plan_p);
/* Free a plan; nulls the pointer; safe on NULL and twice. */
void pl_plan_destroy(pl_plan_t **plan_p);

/* Write the plan table (stages, bottleneck, throughput, bubble, speed-ups) into buf as a
 * NUL-terminated string; PL_ERR_RANGE when it does not fit (buf then holds a truncated table). */
pl_status_t pl_plan_explain(const pl_plan_t *plan, char *buf, size_t len);
/* The same table as a new string (the caller frees); NULL when out of memory. */
char *pl_plan_explain_new(const pl_plan_t *plan);
/* Print the same table to a stream the caller owns. */
void pl_plan_print(const pl_plan_t *plan, FILE *stream);
/* The plan as a new JSON object (every number of the table); NULL when out of memory. */
json_t *pl_plan_to_json(const pl_plan_t *plan);
/* pl_plan_to_json plus "planner" (the mode's name), "table" (the explained plan) and per stage
 * "device_id" (backend:index), "gflops", "mem_gbps", "dec_gflops", "pass_gbps", "attn_gflops",
 * "host_gbps" (the device figures of `in` it used; mem_gbps after the shares of CPUs and of the
 * host's bandwidth the caller charged) and "compute_prefill_s", "compute_decode_s" (predicted
 * compute per call, without the transfer; a prefill call is one message of the chunked prefill).
 * What the coordinator stores and pipectl shows; NULL when out of memory. */
json_t *pl_plan_to_json_full(const pl_plan_t *plan, const pl_plan_input_t *in, pl_planner_t mode);

/* A duration with a unit that keeps 3-4 significant digits ("12.5 us", "3.20 ms", "1.250 s";
 * "0" for s <= 0), as the plan table writes them; returns buf. */
const char *pl_sched_fmt_time(double s, char *buf, size_t len);

/* ---- building blocks (exposed for tests, benchmarks and what-if tools) ------------------- */

/* Everything the search needs for one (resident sequences, microbatch size): prefix sums of the
 * layer costs, link times, device limits. Opaque; single-threaded. */
typedef struct pl_sched_eval pl_sched_eval_t;

/* Check `in` and build an evaluation context for R resident sequences in microbatches of b. */
pl_status_t pl_sched_eval_new(const pl_plan_input_t *in, int resident, int mb_size,
                              pl_sched_eval_t **ev_p);
/* Free; nulls the pointer; safe on NULL. */
void pl_sched_eval_destroy(pl_sched_eval_t **ev_p);
/* Change R and b (cheap: no reallocation). */
void pl_sched_eval_set_batch(pl_sched_eval_t *ev, int resident, int mb_size);
int pl_sched_eval_layers(const pl_sched_eval_t *ev);

/* Stage cost of device d running layers [first, first + count) and sending to device next
 * (-1: it is the last stage). The exact value the partition compares. */
double pl_sched_stage_cost(const pl_sched_eval_t *ev, int d, int first, int count, int next);
/* Prefill and decode stage times (roofline + transfer) of the same stage. */
void pl_sched_stage_times(const pl_sched_eval_t *ev, int d, int first, int count, int next,
                          double *t_prefill, double *t_decode);
/* Bytes the stage needs on device d, and what device d can give. */
double pl_sched_stage_mem(const pl_sched_eval_t *ev, int d, int first, int count);
double pl_sched_device_usable(const pl_sched_eval_t *ev, int d);
/* The link from device d to device n with the defaults applied. */
pl_sched_link_t pl_sched_link(const pl_sched_eval_t *ev, int d, int n);

/* Chunked prefill: the prompt tokens of one sequence per prefill message, so that stage s + 1
 * computes chunk k while stage s computes chunk k + 1 (the KV cache grows chunk by chunk; tokens
 * are those of whole prompts). The job's own value when it set one (requested > 0). Else, for S
 * stages, microbatches of b sequences, the longest prompt P_max, the average P_avg and the
 * bottleneck stage's predicted prefill time t_pre per microbatch (P_avg tokens of each of its b
 * sequences):
 *   one stage: 0 (whole prompts; there is nothing to overlap);
 *   c_split  = ceil(P_max / (2 S)): the longest prompt in at least 2 S chunks, so the pipeline
 *              fills within its first half and every stage works on it;
 *   c_time   = floor(PL_SCHED_CHUNK_TARGET_S * P_avg / t_pre): the chunk the bottleneck stage
 *              computes in about that time, short next to a prompt but long next to a
 *              message's latency;
 *   c_min    = max(ceil(PL_SCHED_CHUNK_MIN / b), PL_SCHED_CHUNK_MIN_TOKENS,
 *                  ceil(P_max / max(PL_SCHED_CHUNKS_MAX, 4 S))): a message's products keep at
 *              least PL_SCHED_CHUNK_MIN rows (b sequences' chunks: matrix-shaped, and a stage's
 *              weights are read once per message), so a batch of many sequences may be cut
 *              finer than one long prompt and still fill the pipeline; and a long prompt is cut
 *              into at most max(PL_SCHED_CHUNKS_MAX, 4 S) chunks, because each chunk's attention
 *              is a product of its own rows against the whole cached prefix, which runs far
 *              below its rate for few rows (bench_pipeline's 1,024-token TTFT job on 2 CPU
 *              stages: 5.2 s in chunks of 32, 3.0 s in chunks of 128, 4.4-5.0 s on 1 stage);
 *   c        = max(min(c_split, c_time), c_min); prompts of at most c_min tokens stay whole (0). */
/* Prompt tokens per sequence below which a device with a decode row rate runs prefill on the
 * decode kernels (the CPU backend's choice, common/sgemm_rows.h: shorter ones skip sgemm). */
#define PL_SCHED_ROW_TOKENS PL_SGEMM_MIN_TOKENS
/* The share of the smaller of two terms on decode's kernels that the larger does not hide: their
 * pass over the weights and their rows overlap in part (bf16 rows on this Xeon, 1 thread, 138 MB
 * of weights: 1-16 rows within 10% of max + 0.4 min, where the max alone is up to 20% short
 * and the sum up to 50% over). */
#define PL_SCHED_ROW_OVERLAP 0.4
#define PL_SCHED_CHUNK_TARGET_S 0.004
#define PL_SCHED_CHUNK_MIN 32
#define PL_SCHED_CHUNKS_MAX 8
#define PL_SCHED_CHUNK_MIN_TOKENS 8
int pl_sched_prefill_chunk(int requested, int stages, int mb_size, int prompt_max, int prompt_avg,
                           double t_prefill_max);

typedef struct {
    int n_stages;
    int device[PL_SCHED_MAX_DEVICES]; /* input index of each stage's device, in pipeline order */
    int first[PL_SCHED_MAX_DEVICES];  /* first layer of each stage; counts follow from the next */
    double bottleneck;                /* largest stage cost */
} pl_sched_split_t;

/* Uneven prefill chunks (TeraPipe, Li et al. 2021: token-level pipelining, slice boundaries by
 * a dynamic program, because a slice's cost grows with its position). With equal chunks the last
 * one, whose queries attend to the longest prefix, is the dearest, and it is also the pipeline's
 * drain: a 1,024-token prompt on 2 CPU stages spent about one chunk's time (0.25 s of 2.0 s) so.
 * On S identical stages a schedule of pieces t_k takes about sum_k t_k + (S - 1) max_k t_k, so
 * for a given count the best pieces cost alike: larger where the prefix is short.
 *   piece time on a stage: pl_sched_prefill_call's terms for one piece of the longest prompt,
 *       its attention that of its own queries against the prefix before it, its KV read that
 *       prefix's, one weight pass per sequence, the LM head on the last piece only;
 *   prefill time: the M microbatches' pieces in order through the stages (a flow shop: a stage
 *       starts a piece once it finished the one before and the stage before sent it);
 *   the schedule: K pieces (the equal chunks' count), each in [lo, hi] tokens (the first no
 *       larger than the equal chunk, pl_sched_prefill_sched says why), boundaries on a
 *       grid of PL_SCHED_GRID_TOKENS counted back from the prompt's end (wider for prompts of
 *       more than PL_SCHED_GRID_MAX steps): the one whose slowest piece on its slowest stage is
 *       the shortest (a DP over boundaries), then single boundaries moved a grid step while the
 *       flow shop's time falls (the stages differ: embedding, head, layers); fewer grid points
 *       for many stages, and none of this past 4e6 pieces times stages (M K S), where the equal
 *       chunks' closed form above stays the prediction. */
#define PL_SCHED_GRID_TOKENS 16
#define PL_SCHED_GRID_MAX 128
/* Predicted prefill time of split s, M microbatches, prompts cut by schedule c (job_gen.h's
 * rule, over the longest prompt); *busy_max_p (may be NULL): the busiest stage's compute.
 * NAN when out of memory. */
double pl_sched_chunks_time(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M,
                            const pl_job_chunks_t *c, double *busy_max_p);
/* The schedule of K pieces above into *out and its predicted time, the first piece at most
 * first_hi tokens; INFINITY (out->n 0) when no K pieces in [lo, hi] cover the longest prompt, K
 * is outside [2, PL_JOB_MAX_CHUNKS] or memory runs out. */
double pl_sched_chunks_plan(const pl_sched_eval_t *ev, const pl_sched_split_t *s, int M, int K,
                            int lo, int hi, int first_hi, pl_job_chunks_t *out);

/* The exact optimal contiguous partition of all layers over devices order[0..n) taken in that
 * order (every used device holds at least one layer; with allow_skip some may be left out), at
 * most max_stages stages (0: no limit), minimising the largest stage cost within memory.
 * PL_ERR_INFEASIBLE when no split fits. */
pl_status_t pl_sched_partition(const pl_sched_eval_t *ev, const int *order, int n, bool allow_skip,
                               int max_stages, pl_sched_split_t *out);
/* Order and selection over devs[0..n): exact over all orders (and subsets with allow_skip) when
 * n <= exact_max (and the subset tables stay under 128 MiB), else the best of the heuristic orders
 * (grouped by host, hosts and devices by speed). *exact_p tells which was done (may be NULL). */
pl_status_t pl_sched_search(const pl_sched_eval_t *ev, const int *devs, int n, bool allow_skip,
                            int max_stages, int exact_max, pl_sched_split_t *out, bool *exact_p);
/* The heuristic order of devs[0..n) for large clusters (hosts by total speed, then devices by
 * speed, ties by index) written to order_out[0..n). */
void pl_sched_heuristic_order(const pl_sched_eval_t *ev, const int *devs, int n, int *order_out);

#endif
