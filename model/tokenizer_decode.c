/* The decoder chain of tokenizer.json (ByteLevel; Replace, ByteFallback, Fuse, Strip, Metaspace),
 * folded at load time into each id's bytes, and the streaming decoder that holds split chars. */
#include "model/tokenizer_impl.h"

#include "common/json.h"

#include <stdlib.h>
#include <string.h>

typedef enum { S_OP_REPLACE, S_OP_BYTE_FALLBACK, S_OP_BYTE_LEVEL, S_OP_STRIP } s_op_kind_t;

typedef struct {
    s_op_kind_t kind;
    const char *a, *b; /* borrowed from the JSON while building */
    int n;
} s_op_t;

typedef struct {
    s_op_t op[PL_TOK_MAX_STEPS];
    int n;
    bool fused;
} s_chain_t;

static pl_status_t s_op_add(s_chain_t *c, s_op_t op)
{
    if (c->n == PL_TOK_MAX_STEPS)
        return pl_error(PL_ERR_UNSUPPORTED, "decoder: more than %d steps", PL_TOK_MAX_STEPS);
    c->op[c->n++] = op;
    return PL_OK;
}

static pl_status_t s_chain(pl_tokenizer_t *t, const json_t *j, s_chain_t *c)
{
    const char *type = NULL;
    pl_status_t st;

    if (!json_is_object(j) || pl_json_str_opt(j, "type", 64, &type) || !type)
        return pl_error(PL_ERR_INVALID, "decoder: not an object with a type");
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(j, "decoders"), *e;
        size_t i;
        if (!json_is_array(list))
            return pl_error(PL_ERR_INVALID, "decoder Sequence: decoders is not an array");
        json_array_foreach(list, i, e) {
            if ((st = s_chain(t, e, c)))
                return st;
        }
        return PL_OK;
    }
    if (strcmp(type, "ByteLevel") == 0)
        return s_op_add(c, (s_op_t){S_OP_BYTE_LEVEL, NULL, NULL, 0});
    if (strcmp(type, "ByteFallback") == 0)
        return s_op_add(c, (s_op_t){S_OP_BYTE_FALLBACK, NULL, NULL, 0});
    if (strcmp(type, "Fuse") == 0) {
        c->fused = true;
        return PL_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        const json_t *p = json_object_get(j, "pattern");
        const char *content = NULL, *lit = json_is_object(p)
                                               ? json_string_value(json_object_get(p, "String"))
                                               : NULL;
        if (!lit || !*lit || pl_json_str_opt(j, "content", 4096, &content) || !content)
            return pl_error(PL_ERR_UNSUPPORTED, "decoder Replace: only a non-empty String "
                                                "pattern with a content is supported");
        return s_op_add(c, (s_op_t){S_OP_REPLACE, lit, content, 0});
    }
    if (strcmp(type, "Strip") == 0) {
        const char *content = NULL;
        int64_t start = 0, stop = 0;
        if ((st = pl_json_str_opt(j, "content", 4, &content)) ||
            (st = pl_json_int_opt(j, "start", 0, 64, &start)) ||
            (st = pl_json_int_opt(j, "stop", 0, 64, &stop)))
            return pl_error_prefix(st, "decoder Strip: ");
        if (!content || strlen(content) != 1 || stop != 0)
            return pl_error(PL_ERR_UNSUPPORTED, "decoder Strip: only a one-byte content stripped "
                                                "at the start is supported");
        if (c->fused) { /* after Fuse: the start of the whole text */
            t->strip_char = content[0];
            t->strip_start = (int)start;
            return PL_OK;
        }
        return s_op_add(c, (s_op_t){S_OP_STRIP, content, NULL, (int)start});
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *rep = NULL, *scheme = NULL;
        if ((st = pl_json_str_opt(j, "replacement", 8, &rep)) ||
            (st = pl_json_str_opt(j, "prepend_scheme", 16, &scheme)))
            return pl_error_prefix(st, "decoder Metaspace: ");
        if (!scheme || strcmp(scheme, "never") != 0) {
            t->strip_char = ' ';
            t->strip_start = 1;
        }
        return s_op_add(c, (s_op_t){S_OP_REPLACE, rep ? rep : "\xe2\x96\x81", " ", 0});
    }
    return pl_error(PL_ERR_UNSUPPORTED, "decoder type '%s' is not supported", type);
}

/* "<0xAB>" -> 0xAB, else -1. */
static int s_byte_token(const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *h, *l;
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || !(h = strchr(hex, s[3])) ||
        !(l = strchr(hex, s[4])) || !s[3] || !s[4])
        return -1;
    return (int)((h - hex) * 16 + (l - hex));
}

static pl_status_t s_apply(const pl_tokenizer_t *t, const s_op_t *op, int id, pl_tok_buf_t *in,
                           pl_tok_buf_t *out)
{
    out->len = 0;
    pl_status_t st = pl_tok_buf_add(out, "", 0);
    if (st)
        return st;
    switch (op->kind) {
    case S_OP_REPLACE: {
        size_t pl = strlen(op->a), i = 0;
        while (i < in->len && !st) {
            const char *hit = memmem(in->buf + i, in->len - i, op->a, pl);
            size_t stop = hit ? (size_t)(hit - in->buf) : in->len;
            st = pl_tok_buf_add(out, in->buf + i, stop - i);
            if (!st && hit)
                st = pl_tok_buf_add(out, op->b, strlen(op->b));
            i = hit ? stop + pl : in->len;
        }
        return st;
    }
    case S_OP_BYTE_FALLBACK: {
        int b = s_byte_token(in->buf, in->len);
        uint8_t c = (uint8_t)b;
        return b >= 0 ? pl_tok_buf_add(out, &c, 1) : pl_tok_buf_add(out, in->buf, in->len);
    }
    case S_OP_BYTE_LEVEL:
        /* a byte-level vocabulary entry is already held as its raw bytes */
        if (t->byte_level && (t->flags[id] & PL_TOK_F_VOCAB))
            return pl_tok_buf_add(out, in->buf, in->len);
        return pl_tok_model_bytes(t, in->buf, in->len, out);
    case S_OP_STRIP: {
        size_t k = 0;
        while (k < in->len && (int)k < op->n && in->buf[k] == op->a[0])
            k++;
        return pl_tok_buf_add(out, in->buf + k, in->len - k);
    }
    }
    return PL_OK;
}

pl_status_t pl_tok_decoder_load(pl_tokenizer_t *t, const json_t *j)
{
    s_chain_t c = {0};
    pl_tok_buf_t x = {0}, y = {0};
    bool has_byte_level = false;
    pl_status_t st = PL_OK;

    if (j && !json_is_null(j) && (st = s_chain(t, j, &c)))
        return st;
    for (int i = 0; i < c.n; i++)
        has_byte_level = has_byte_level || c.op[i].kind == S_OP_BYTE_LEVEL;
    if (t->byte_level && !has_byte_level)
        return pl_error(PL_ERR_UNSUPPORTED, "decoder: a ByteLevel pre_tokenizer needs a "
                                            "ByteLevel decoder");
    for (int id = 0; id < t->n_ids && !st; id++) {
        if (t->piece_len[id] == UINT32_MAX)
            continue;
        x.len = 0;
        if ((st = pl_tok_buf_add(&x, t->arena.buf + t->piece_off[id], t->piece_len[id])))
            break;
        for (int i = 0; i < c.n && !st; i++) {
            st = s_apply(t, &c.op[i], id, &x, &y);
            pl_tok_buf_t tmp = x;
            x = y;
            y = tmp;
        }
        if (st)
            break;
        t->out_off[id] = (uint32_t)t->arena.len;
        t->out_len[id] = (uint32_t)x.len;
        st = pl_tok_buf_add(&t->arena, x.buf, x.len);
    }
    pl_tok_buf_free(&x);
    pl_tok_buf_free(&y);
    return st;
}

/* ---- streaming ---- */

struct pl_tok_stream {
    const pl_tokenizer_t *tok;
    unsigned flags;
    char pending[8];
    int n_pending;
    int stripped;
    bool begun;
    pl_tok_buf_t out;
};

pl_status_t pl_tok_stream_new(const pl_tokenizer_t *tok, unsigned flags,
                              pl_tok_stream_t **stream_p)
{
    pl_tok_stream_t *s = calloc(1, sizeof(*s));
    if (!s)
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    s->tok = tok;
    s->flags = flags;
    *stream_p = s;
    return PL_OK;
}

void pl_tok_stream_destroy(pl_tok_stream_t **stream_p)
{
    if (!*stream_p)
        return;
    pl_tok_buf_free(&(*stream_p)->out);
    free(*stream_p);
    *stream_p = NULL;
}

static const char s_fffd[] = "\xef\xbf\xbd";

/* Emit the complete characters of pending + data; keep an incomplete tail. */
static pl_status_t s_feed(pl_tok_stream_t *s, const char *data, size_t len, bool final)
{
    pl_status_t st = PL_OK;
    size_t i = 0;
    while ((i < len || s->n_pending) && !st) {
        /* top pending up to 4 bytes, then decide on its first character */
        while (s->n_pending < 4 && i < len)
            s->pending[s->n_pending++] = data[i++];
        int bad = 1, n = pl_tok_utf8_seq(s->pending, (size_t)s->n_pending, &bad);
        if (n < 0 && !final && i == len)
            return PL_OK; /* wait for the rest of the character */
        if (n > 0)
            st = pl_tok_buf_add(&s->out, s->pending, (size_t)n);
        else {
            if (n < 0)
                bad = s->n_pending; /* ends inside a character at the very end */
            st = pl_tok_buf_add(&s->out, s_fffd, 3);
            n = bad;
        }
        memmove(s->pending, s->pending + n, (size_t)(s->n_pending - n));
        s->n_pending -= n;
    }
    return st;
}

pl_status_t pl_tok_stream_push(pl_tok_stream_t *s, int32_t id, const char **out, size_t *out_len)
{
    const pl_tokenizer_t *t = s->tok;
    const char *b;
    size_t len;
    pl_status_t st;

    if (id < 0 || id >= t->n_ids || t->piece_len[id] == UINT32_MAX)
        return pl_error(PL_ERR_RANGE, "%s: token id %d is not in the vocabulary", t->name, id);
    s->out.len = 0;
    if ((st = pl_tok_buf_add(&s->out, "", 0)))
        return st;
    if (!((s->flags & PL_TOK_SKIP_SPECIAL) && (t->flags[id] & PL_TOK_F_SPECIAL))) {
        b = t->arena.buf + t->out_off[id];
        len = t->out_len[id];
        while (!s->begun && len && s->stripped < t->strip_start && *b == t->strip_char)
            b++, len--, s->stripped++;
        if (len)
            s->begun = true;
        if ((st = s_feed(s, b, len, false)))
            return st;
    }
    *out = s->out.buf;
    *out_len = s->out.len;
    return PL_OK;
}

pl_status_t pl_tok_stream_flush(pl_tok_stream_t *s, const char **out, size_t *out_len)
{
    pl_status_t st;
    s->out.len = 0;
    if ((st = pl_tok_buf_add(&s->out, "", 0)) || (st = s_feed(s, NULL, 0, true)))
        return st;
    *out = s->out.buf;
    *out_len = s->out.len;
    return PL_OK;
}
