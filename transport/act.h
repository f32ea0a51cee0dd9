/* The data-plane message between stages: a fixed little-endian header with the job's token, one
 * entry per sequence, then the payload (activations as f32, bf16 or f16: the job's wire dtype;
 * token ids for the ring back to stage 0 travel in the entries).
 * Decoding checks the token first, then every count and size against the received length and
 * the job's limits. */
#ifndef PL_TRANSPORT_ACT_H
#define PL_TRANSPORT_ACT_H

#include "common/status.h"
#include "transport/act_token.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_ACT_MAGIC 0x504c4131u /* "PLA1" */

typedef enum {
    PL_ACT_HIDDEN = 1, /* stage i -> i+1: hidden states f32 [n_tokens][dim] */
    PL_ACT_TOKENS = 2, /* last stage -> stage 0: one sampled token per sequence */
    PL_ACT_STOP = 3,   /* stage 0 -> ... -> last: the job is over */
    /* training (pipeline/train_exec.c); kinds keep the tag's bit 2 clear (see below) */
    PL_ACT_GRAD = 8, /* stage i+1 -> i: gradient of the hidden states, shaped as PL_ACT_HIDDEN */
    PL_ACT_SUM = 9,  /* a reduction's values between stages: dim f64, no entries */
} pl_act_kind_t;
#define PL_ACT_SUM_MAX 16 /* values in one PL_ACT_SUM */

/* How hidden states travel: f32 keeps every partition's tokens identical; bf16 and f16 halve the
 * bytes (rounded to nearest even; stages compute in f32 either way). */
typedef enum {
    PL_ACT_F32 = 0,
    PL_ACT_BF16 = 1,
    PL_ACT_F16 = 2,
} pl_act_dtype_t;
#define PL_ACT_DTYPE_COUNT 3
/* "f32", "bf16", "f16"; NULL for an unknown value. */
const char *pl_act_dtype_name(pl_act_dtype_t dtype);
/* PL_OK and *dtype_p for a known name, else PL_ERR_INVALID naming the choices. */
pl_status_t pl_act_dtype_parse(const char *name, pl_act_dtype_t *dtype_p);
/* Bytes of one value: 4 or 2. */
size_t pl_act_dtype_size(pl_act_dtype_t dtype);

/* Per-sequence entry. For PL_ACT_TOKENS, `token` is the sampled id and `flags` has
 * PL_ACT_FINISHED set when the sequence ended (EOS or max tokens). */
#define PL_ACT_FINISHED 1u
typedef struct {
    uint32_t seq;   /* index of the sequence in the job */
    uint32_t pos0;  /* position of its first token in this message */
    uint32_t n_tok; /* tokens of this sequence in the payload */
    uint32_t flags;
    int32_t token;
} pl_act_seq_t;

typedef struct {
    uint32_t kind;
    uint32_t job;
    uint32_t mb;    /* microbatch index */
    uint32_t step;  /* 0: prefill, k: k-th decode step */
    uint32_t n_seq;
    uint32_t n_tokens; /* sum of n_tok */
    uint32_t dim;      /* hidden size for PL_ACT_HIDDEN, else 0 */
    uint32_t dtype;    /* pl_act_dtype_t of the payload for PL_ACT_HIDDEN, else 0 (f32) */
    pl_act_token_t token; /* the job's token (act_token.h), written as is */
} pl_act_hdr_t;

typedef struct {
    uint32_t max_seq;    /* sequences in the job */
    uint32_t max_tokens; /* tokens in one message */
    uint32_t dim;        /* expected hidden size */
    uint32_t max_pos;    /* positions are below this */
    uint32_t dtype;      /* the job's wire dtype: hidden messages must carry it */
    pl_act_token_t token; /* the job's token: messages must carry it */
} pl_act_limits_t;

/* Wire layout: a 48-byte header (magic u32, version u16 = 3, kind u8, dtype u8, job, mb, step,
 * n_seq, n_tokens, dim: u32 each, then the 16 bytes of the job's token), n_seq entries of 20 bytes (seq, pos0, n_tok, flags: u32,
 * token: i32), then for PL_ACT_HIDDEN the payload [n_tokens][dim] in dtype (IEEE binary32,
 * bfloat16 or binary16); all little-endian. PL_ACT_TOKENS has
 * n_tokens == n_seq, every n_tok 1, dim 0 and no payload (the token is in the entry);
 * PL_ACT_STOP has no entries and no payload. PL_ACT_GRAD follows PL_ACT_HIDDEN's rules (dim, the
 * wire dtype); PL_ACT_SUM has no entries, n_tokens 0, dtype 0, 1 <= dim <= PL_ACT_SUM_MAX and a
 * payload of dim IEEE binary64 values, exact to the bit. */
#define PL_ACT_HDR_BYTES 48u
#define PL_ACT_SEQ_BYTES 20u

/* Encoded size of a message (SIZE_MAX when it overflows). */
size_t pl_act_size(const pl_act_hdr_t *hdr);
/* Encode into a new malloc'd buffer. payload holds f32 values [n_tokens][dim] for PL_ACT_HIDDEN
 * and PL_ACT_GRAD, converted to hdr->dtype on the way, dim doubles for PL_ACT_SUM (NULL for the
 * other kinds). The header and entries must
 * follow the rules above (PL_ERR_INVALID). */
pl_status_t pl_act_encode(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs, const void *payload,
                          void **buf_p, size_t *len_p);
/* pl_act_encode into the caller's buffer of cap bytes (PL_ERR_RANGE when the message does not
 * fit; nothing written on error). payload may already sit in buf at pl_act_payload_offset (the
 * stage computed into the buffer it sends): f32 values stay in place, bf16/f16 are narrowed in
 * place. */
pl_status_t pl_act_encode_into(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                               const void *payload, void *buf, size_t cap, size_t *len_p);
/* Where the payload of a message with n_seq entries starts (a multiple of 4). */
size_t pl_act_payload_offset(uint32_t n_seq);
/* Decode and validate. seqs must have room for limits->max_seq entries; *payload_p points into
 * buf (NULL for kinds without payload; payload_p may be NULL). The payload starts at a multiple
 * of 4 bytes into buf, so it is float-aligned when buf is malloc'd, and is in the wire dtype
 * (pl_act_payload_f32 reads it). Checks: magic, version, then the token (== limits->token,
 * compared in constant time: PL_ERR_PERMISSION, before any other field is looked at), kind, dtype (== limits->dtype for
 * hidden messages, 0 otherwise), the per-kind shape, 1 <= n_seq <= max_seq, n_tokens <=
 * max_tokens, dim == limits->dim, the
 * exact length, and per entry seq < max_seq (no duplicates), n_tok >= 1, sum(n_tok) == n_tokens,
 * pos0 + n_tok <= max_pos, only known flags, token >= 0 in PL_ACT_TOKENS. PL_ERR_PROTOCOL with the
 * field named; *hdr and *payload_p are set only on success (seqs may be partly written). */
pl_status_t pl_act_decode(const void *buf, size_t len, const pl_act_limits_t *limits,
                          pl_act_hdr_t *hdr, pl_act_seq_t *seqs, const void **payload_p);

/* The payload of a decoded hidden message as f32 [n_tokens][dim]: *f32_p is the payload itself
 * when it is f32 on a little-endian host (no copy), else `scratch` (n_tokens * dim floats)
 * filled by converting it. */
void pl_act_payload_f32(const pl_act_hdr_t *hdr, const void *payload, float *scratch,
                        const float **f32_p);
/* The payload of a decoded PL_ACT_SUM: its hdr->dim values into out. */
void pl_act_payload_f64(const pl_act_hdr_t *hdr, const void *payload, double *out);
/* Round n f32 values in place to what they become through the wire dtype and back (what the
 * next stage computes from); nothing for f32. */
void pl_act_round(pl_act_dtype_t dtype, float *x, size_t n);
/* Single-value conversions (IEEE round to nearest even; NaN stays NaN, its payload kept). */
uint16_t pl_act_f32_to_bf16(float f);
uint16_t pl_act_f32_to_f16(float f);
float pl_act_bf16_to_f32(uint16_t h);
float pl_act_f16_to_f32(uint16_t h);

/* Tag layout: [job:20][kind:4][mb:16][step:24]; each value is truncated to its field width. */
uint64_t pl_act_tag(uint32_t job, pl_act_kind_t kind, uint32_t mb, uint32_t step);
#define PL_ACT_TAG_JOB_MASK 0xfffff00000000000ULL
uint64_t pl_act_tag_job(uint32_t job);
/* The tag's kind field beyond the message kinds: 4 carries the credit grants of the data plane
 * (transport/ucx.h), 0xf the link probes. Message kinds (1..3) have the kind's bit 2 clear and
 * those have it set, so (pl_act_tag_job(job), PL_ACT_TAG_DATA_MASK) matches a job's messages
 * and nothing else. */
#define PL_ACT_TAG_KIND_CREDIT 4u
#define PL_ACT_TAG_DATA_MASK (PL_ACT_TAG_JOB_MASK | (4ULL << 40))
uint64_t pl_act_tag_credit(uint32_t job);

/* Link-probe tags (pipeline/link_probe.c) share a job's tag space under a kind of their own,
 * PL_ACT_TAG_PROBE, which no activation message has: the probe's message type sits in the mb
 * field, its sequence number in the step field. Receive a job's probes with
 * (pl_act_probe_tag(job, 0, 0), PL_ACT_TAG_PROBE_MASK). */
#define PL_ACT_TAG_PROBE 0xfu
#define PL_ACT_TAG_PROBE_MASK (PL_ACT_TAG_JOB_MASK | 0x00000f0000000000ULL)
uint64_t pl_act_probe_tag(uint32_t job, uint32_t type, uint32_t seq);
/* Whether tag is a probe tag (of any job); when it is, its type and sequence number (either
 * pointer may be NULL). Total: any 64-bit value off the wire is fine. */
bool pl_act_probe_tag_decode(uint64_t tag, uint32_t *type_p, uint32_t *seq_p);

#endif
