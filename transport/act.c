/* Encoding and validation of the stage-to-stage activation message and its UCX tag.
 * Every field is written little-endian byte by byte, so the format is the same on every host. */
#include "transport/act.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The layout is described in act.h. 48 + 20 * n_seq is a multiple of 4, so the payload of a
 * message received into a malloc'd buffer is aligned for float. */
#define PL_ACT_VERSION 3u
#define S_TOKEN_AT 32u
#define PL_ACT_KNOWN_FLAGS PL_ACT_FINISHED
/* Below this many entries the duplicate check compares pairs instead of sorting a copy. */
#define PL_ACT_DUP_QUADRATIC 32u

static void s_put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void s_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint16_t s_get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t s_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Kinds that carry hidden-sized f32 / bf16 / f16 rows. */
static bool s_rows(uint32_t kind)
{
    return kind == PL_ACT_HIDDEN || kind == PL_ACT_GRAD;
}

/* Payload bytes of a header, or false when the size does not fit in size_t. */
static bool s_payload_bytes(const pl_act_hdr_t *hdr, size_t *out)
{
    size_t n = 0;
    if (hdr->kind == PL_ACT_SUM)
        n = (size_t)hdr->dim * 8;
    if (s_rows(hdr->kind) &&
        (__builtin_mul_overflow((size_t)hdr->n_tokens, (size_t)hdr->dim, &n) ||
         __builtin_mul_overflow(n, pl_act_dtype_size((pl_act_dtype_t)hdr->dtype), &n)))
        return false;
    *out = n;
    return true;
}

/* Total encoded size, or false on overflow. */
static bool s_total_bytes(const pl_act_hdr_t *hdr, size_t *out)
{
    size_t entries, payload, total;
    if (__builtin_mul_overflow((size_t)hdr->n_seq, (size_t)PL_ACT_SEQ_BYTES, &entries) ||
        !s_payload_bytes(hdr, &payload) ||
        __builtin_add_overflow((size_t)PL_ACT_HDR_BYTES, entries, &total) ||
        __builtin_add_overflow(total, payload, &total))
        return false;
    *out = total;
    return true;
}

size_t pl_act_size(const pl_act_hdr_t *hdr)
{
    size_t total;
    return s_total_bytes(hdr, &total) ? total : SIZE_MAX;
}

/* Shape rules that depend only on the header: counts per kind and the hidden size. */
static pl_status_t s_check_shape(const pl_act_hdr_t *hdr, pl_status_t err)
{
    if (hdr->dtype >= PL_ACT_DTYPE_COUNT || (!s_rows(hdr->kind) && hdr->dtype != 0))
        return pl_error(err, "activation: dtype %u with kind %u (hidden and gradient messages "
                             "carry f32 0, bf16 1 or f16 2; others 0)",
                        hdr->dtype, hdr->kind);
    switch (hdr->kind) {
    case PL_ACT_HIDDEN:
    case PL_ACT_GRAD:
        if (hdr->n_seq == 0 || hdr->n_tokens == 0 || hdr->dim == 0)
            return pl_error(err, "activation: %s message needs n_seq, n_tokens and dim > 0 "
                                 "(n_seq %u, n_tokens %u, dim %u)",
                            hdr->kind == PL_ACT_GRAD ? "gradient" : "hidden", hdr->n_seq,
                            hdr->n_tokens, hdr->dim);
        return PL_OK;
    case PL_ACT_SUM:
        if (hdr->n_seq != 0 || hdr->n_tokens != 0 || hdr->dim == 0 || hdr->dim > PL_ACT_SUM_MAX)
            return pl_error(err, "activation: sum message (kind %u) carries n_seq %u, n_tokens "
                                 "%u, dim %u (0, 0 and 1..%d values)",
                            hdr->kind, hdr->n_seq, hdr->n_tokens, hdr->dim, PL_ACT_SUM_MAX);
        return PL_OK;
    case PL_ACT_TOKENS:
        if (hdr->n_seq == 0 || hdr->n_tokens != hdr->n_seq || hdr->dim != 0)
            return pl_error(err, "activation: tokens message needs n_tokens == n_seq > 0 and "
                                 "dim 0 (n_seq %u, n_tokens %u, dim %u)",
                            hdr->n_seq, hdr->n_tokens, hdr->dim);
        return PL_OK;
    case PL_ACT_STOP:
        if (hdr->n_seq != 0 || hdr->n_tokens != 0 || hdr->dim != 0)
            return pl_error(err, "activation: stop message carries n_seq %u, n_tokens %u, dim %u "
                                 "(all must be 0)",
                            hdr->n_seq, hdr->n_tokens, hdr->dim);
        return PL_OK;
    }
    return pl_error(err, "activation: unknown kind %u", hdr->kind);
}

/* Rules for the entries that do not need the job's limits. */
static pl_status_t s_check_entries(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                   pl_status_t err)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < hdr->n_seq; i++) {
        const pl_act_seq_t *s = &seqs[i];
        if (s->n_tok == 0)
            return pl_error(err, "activation: entry %u (seq %u): n_tok is 0", i, s->seq);
        if (hdr->kind == PL_ACT_TOKENS && s->n_tok != 1)
            return pl_error(err, "activation: entry %u (seq %u): n_tok %u in a tokens message "
                                 "(must be 1)",
                            i, s->seq, s->n_tok);
        if (hdr->kind == PL_ACT_TOKENS && s->token < 0)
            return pl_error(err, "activation: entry %u (seq %u): negative token %d", i, s->seq,
                            s->token);
        if (s->flags & ~PL_ACT_KNOWN_FLAGS)
            return pl_error(err, "activation: entry %u (seq %u): unknown flags 0x%x", i, s->seq,
                            s->flags);
        sum += s->n_tok;
    }
    if (sum != hdr->n_tokens)
        return pl_error(err, "activation: entries hold %llu tokens but n_tokens is %u",
                        (unsigned long long)sum, hdr->n_tokens);
    return PL_OK;
}

size_t pl_act_payload_offset(uint32_t n_seq)
{
    return PL_ACT_HDR_BYTES + (size_t)n_seq * PL_ACT_SEQ_BYTES;
}

/* The checks of both encoders: the message's rules, its size and its payload's. */
static pl_status_t s_check_encode(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                                  const void *payload, size_t *total_p, size_t *payload_len_p)
{
    pl_status_t st;
    if ((st = s_check_shape(hdr, PL_ERR_INVALID)) != PL_OK ||
        (st = s_check_entries(hdr, seqs, PL_ERR_INVALID)) != PL_OK)
        return st;
    if (!s_total_bytes(hdr, total_p) || !s_payload_bytes(hdr, payload_len_p))
        return pl_error(PL_ERR_RANGE, "activation: message size overflows");
    if (*payload_len_p > 0 && !payload)
        return pl_error(PL_ERR_INVALID, "activation: %zu payload bytes but no payload",
                        *payload_len_p);
    return PL_OK;
}

static void s_write(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs, const void *payload,
                    size_t payload_len, unsigned char *buf);

pl_status_t pl_act_encode(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs, const void *payload,
                          void **buf_p, size_t *len_p)
{
    size_t total = 0, payload_len = 0;
    unsigned char *buf;
    pl_status_t st;

    if ((st = s_check_encode(hdr, seqs, payload, &total, &payload_len)) != PL_OK)
        return st;
    buf = malloc(total);
    if (!buf)
        return pl_error(PL_ERR_NOMEM, "activation: cannot allocate %zu bytes", total);
    s_write(hdr, seqs, payload, payload_len, buf);
    *buf_p = buf;
    *len_p = total;
    return PL_OK;
}

pl_status_t pl_act_encode_into(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs,
                               const void *payload, void *buf, size_t cap, size_t *len_p)
{
    size_t total = 0, payload_len = 0;
    pl_status_t st;

    if ((st = s_check_encode(hdr, seqs, payload, &total, &payload_len)) != PL_OK)
        return st;
    if (total > cap)
        return pl_error(PL_ERR_RANGE, "activation: a %zu-byte message does not fit in %zu bytes",
                        total, cap);
    s_write(hdr, seqs, payload, payload_len, buf);
    *len_p = total;
    return PL_OK;
}

/* Write a checked message into buf (total bytes). A payload already in place (computed into
 * buf at pl_act_payload_offset) stays there, byte-swapped where the host needs it. */
static void s_write(const pl_act_hdr_t *hdr, const pl_act_seq_t *seqs, const void *payload,
                    size_t payload_len, unsigned char *buf)
{
    unsigned char *p;

    s_put_u32(buf + 0, PL_ACT_MAGIC);
    s_put_u16(buf + 4, PL_ACT_VERSION);
    buf[6] = (unsigned char)hdr->kind;
    buf[7] = (unsigned char)hdr->dtype;
    s_put_u32(buf + 8, hdr->job);
    s_put_u32(buf + 12, hdr->mb);
    s_put_u32(buf + 16, hdr->step);
    s_put_u32(buf + 20, hdr->n_seq);
    s_put_u32(buf + 24, hdr->n_tokens);
    s_put_u32(buf + 28, hdr->dim);
    memcpy(buf + S_TOKEN_AT, hdr->token.b, PL_ACT_TOKEN_BYTES);
    p = buf + PL_ACT_HDR_BYTES;
    for (uint32_t i = 0; i < hdr->n_seq; i++, p += PL_ACT_SEQ_BYTES) {
        s_put_u32(p + 0, seqs[i].seq);
        s_put_u32(p + 4, seqs[i].pos0);
        s_put_u32(p + 8, seqs[i].n_tok);
        s_put_u32(p + 12, seqs[i].flags);
        s_put_u32(p + 16, (uint32_t)seqs[i].token);
    }
    if (hdr->kind == PL_ACT_SUM) {
        const double *v = payload;
        for (uint32_t i = 0; i < hdr->dim; i++) {
            uint64_t u;
            memcpy(&u, &v[i], 8);
            s_put_u32(p + 8 * i, (uint32_t)u);
            s_put_u32(p + 8 * i + 4, (uint32_t)(u >> 32));
        }
    } else if (payload_len > 0 && hdr->dtype == PL_ACT_F32) {
        /* f32 payload: byte-swapped only on big-endian hosts. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if ((const void *)p != payload)
            memcpy(p, payload, payload_len);
#else
        const float *src = payload;
        for (size_t i = 0; i < payload_len / 4; i++) {
            uint32_t u;
            memcpy(&u, &src[i], 4);
            s_put_u32(p + 4 * i, u);
        }
#endif
    } else if (payload_len > 0) {
        const float *src = payload;
        uint16_t (*conv)(float) =
            hdr->dtype == PL_ACT_BF16 ? pl_act_f32_to_bf16 : pl_act_f32_to_f16;
        /* In place too: value i is read (4 bytes at 4i) before 2i is written. */
        for (size_t i = 0; i < payload_len / 2; i++)
            s_put_u16(p + 2 * i, conv(src[i]));
    }
}

static int s_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* PL_ERR_PROTOCOL when a sequence index appears twice. */
static pl_status_t s_check_duplicates(const pl_act_seq_t *seqs, uint32_t n)
{
    if (n <= PL_ACT_DUP_QUADRATIC) {
        for (uint32_t i = 1; i < n; i++)
            for (uint32_t j = 0; j < i; j++)
                if (seqs[i].seq == seqs[j].seq)
                    return pl_error(PL_ERR_PROTOCOL, "activation: entries %u and %u both carry "
                                                     "seq %u",
                                    j, i, seqs[i].seq);
        return PL_OK;
    }
    uint32_t *ids = malloc((size_t)n * sizeof(*ids));
    if (!ids)
        return pl_error(PL_ERR_NOMEM, "activation: cannot allocate the duplicate check");
    for (uint32_t i = 0; i < n; i++)
        ids[i] = seqs[i].seq;
    qsort(ids, n, sizeof(*ids), s_cmp_u32);
    for (uint32_t i = 1; i < n; i++) {
        if (ids[i] == ids[i - 1]) {
            uint32_t dup = ids[i];
            free(ids);
            return pl_error(PL_ERR_PROTOCOL, "activation: seq %u appears twice", dup);
        }
    }
    free(ids);
    return PL_OK;
}

pl_status_t pl_act_decode(const void *buf, size_t len, const pl_act_limits_t *limits,
                          pl_act_hdr_t *hdr, pl_act_seq_t *seqs, const void **payload_p)
{
    const unsigned char *b = buf, *p;
    pl_act_hdr_t h;
    size_t total;
    uint32_t magic, version;
    pl_status_t st;

    if (len < PL_ACT_HDR_BYTES)
        return pl_error(PL_ERR_PROTOCOL, "activation: %zu bytes is shorter than the %u-byte "
                                         "header",
                        len, PL_ACT_HDR_BYTES);
    magic = s_get_u32(b);
    version = s_get_u16(b + 4);
    if (magic != PL_ACT_MAGIC)
        return pl_error(PL_ERR_PROTOCOL, "activation: bad magic 0x%08x", magic);
    if (version != PL_ACT_VERSION)
        return pl_error(PL_ERR_PROTOCOL, "activation: version %u (expected %u)", version,
                        PL_ACT_VERSION);
    memcpy(h.token.b, b + S_TOKEN_AT, PL_ACT_TOKEN_BYTES);
    if (!pl_act_token_equal(&h.token, &limits->token))
        return pl_error(PL_ERR_PERMISSION, "activation: not this job's token (a message from "
                                           "outside the job's stages, or an earlier assignment)");
    h.kind = b[6];
    h.dtype = b[7];
    h.job = s_get_u32(b + 8);
    h.mb = s_get_u32(b + 12);
    h.step = s_get_u32(b + 16);
    h.n_seq = s_get_u32(b + 20);
    h.n_tokens = s_get_u32(b + 24);
    h.dim = s_get_u32(b + 28);

    if ((st = s_check_shape(&h, PL_ERR_PROTOCOL)) != PL_OK)
        return st;
    if (h.n_seq > limits->max_seq)
        return pl_error(PL_ERR_PROTOCOL, "activation: n_seq %u exceeds the job's %u sequences",
                        h.n_seq, limits->max_seq);
    if (h.n_tokens > limits->max_tokens)
        return pl_error(PL_ERR_PROTOCOL, "activation: n_tokens %u exceeds the limit %u",
                        h.n_tokens, limits->max_tokens);
    if (s_rows(h.kind) && h.dim != limits->dim)
        return pl_error(PL_ERR_PROTOCOL, "activation: dim %u (expected %u)", h.dim, limits->dim);
    if (s_rows(h.kind) && h.dtype != limits->dtype)
        return pl_error(PL_ERR_PROTOCOL, "activation: dtype %s (the job's wire dtype is %s)",
                        pl_act_dtype_name((pl_act_dtype_t)h.dtype),
                        pl_act_dtype_name((pl_act_dtype_t)limits->dtype));
    if (!s_total_bytes(&h, &total))
        return pl_error(PL_ERR_PROTOCOL, "activation: message size overflows");
    if (len != total)
        return pl_error(PL_ERR_PROTOCOL, "activation: %zu bytes received, header says %zu", len,
                        total);

    p = b + PL_ACT_HDR_BYTES;
    for (uint32_t i = 0; i < h.n_seq; i++, p += PL_ACT_SEQ_BYTES) {
        pl_act_seq_t *s = &seqs[i];
        s->seq = s_get_u32(p + 0);
        s->pos0 = s_get_u32(p + 4);
        s->n_tok = s_get_u32(p + 8);
        s->flags = s_get_u32(p + 12);
        s->token = (int32_t)s_get_u32(p + 16);
        if (s->seq >= limits->max_seq)
            return pl_error(PL_ERR_PROTOCOL, "activation: entry %u: seq %u is not below %u", i,
                            s->seq, limits->max_seq);
        if ((uint64_t)s->pos0 + s->n_tok > limits->max_pos)
            return pl_error(PL_ERR_PROTOCOL, "activation: entry %u (seq %u): positions %u + %u "
                                             "exceed %u",
                            i, s->seq, s->pos0, s->n_tok, limits->max_pos);
    }
    if ((st = s_check_entries(&h, seqs, PL_ERR_PROTOCOL)) != PL_OK ||
        (st = s_check_duplicates(seqs, h.n_seq)) != PL_OK)
        return st;

    *hdr = h;
    if (payload_p)
        *payload_p = s_rows(h.kind) || h.kind == PL_ACT_SUM ? (const void *)p : NULL;
    return PL_OK;
}

void pl_act_payload_f64(const pl_act_hdr_t *hdr, const void *payload, double *out)
{
    const unsigned char *p = payload;
    for (uint32_t i = 0; i < hdr->dim; i++) {
        uint64_t u = (uint64_t)s_get_u32(p + 8 * i) | (uint64_t)s_get_u32(p + 8 * i + 4) << 32;
        memcpy(&out[i], &u, 8);
    }
}

/* [job:20][kind:4][mb:16][step:24], each value truncated to its field. */
static uint64_t s_tag(uint32_t job, uint32_t kind, uint32_t mb, uint32_t step)
{
    return pl_act_tag_job(job) | (uint64_t)(kind & 0xfu) << 40 | (uint64_t)(mb & 0xffffu) << 24 |
           (uint64_t)(step & 0xffffffu);
}

uint64_t pl_act_tag(uint32_t job, pl_act_kind_t kind, uint32_t mb, uint32_t step)
{
    return s_tag(job, (uint32_t)kind, mb, step);
}

uint64_t pl_act_tag_job(uint32_t job)
{
    return (uint64_t)(job & 0xfffffu) << 44;
}

uint64_t pl_act_tag_credit(uint32_t job)
{
    return pl_act_tag_job(job) | (uint64_t)PL_ACT_TAG_KIND_CREDIT << 40;
}

uint64_t pl_act_probe_tag(uint32_t job, uint32_t type, uint32_t seq)
{
    return s_tag(job, PL_ACT_TAG_PROBE, type, seq);
}

bool pl_act_probe_tag_decode(uint64_t tag, uint32_t *type_p, uint32_t *seq_p)
{
    if (((tag >> 40) & 0xfu) != PL_ACT_TAG_PROBE)
        return false;
    if (type_p)
        *type_p = (uint32_t)((tag >> 24) & 0xffffu);
    if (seq_p)
        *seq_p = (uint32_t)(tag & 0xffffffu);
    return true;
}
