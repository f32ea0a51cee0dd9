/* Encode (added tokens first, then normalize, pre-tokenize and BPE each stretch between them),
 * whole-sequence decode through the streaming decoder, and the tokenizer's accessors. */
#include "model/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *ids;
    size_t n, cap;
    pl_tok_pieces_t pieces;
    pl_tok_bpe_scratch_t *bpe;
    pcre2_match_data *md;
} s_enc_t;

static pl_status_t s_push(s_enc_t *e, int32_t id)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 256;
        int32_t *p = realloc(e->ids, cap * sizeof(*p));
        if (!p)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        e->ids = p;
        e->cap = cap;
    }
    e->ids[e->n++] = id;
    return PL_OK;
}

static pl_status_t s_segment(const pl_tokenizer_t *t, s_enc_t *e, const char *s, size_t len,
                             bool first)
{
    pl_status_t st;
    if (!len)
        return PL_OK;
    if ((st = pl_tok_pretokenize(t, s, len, first, e->md, &e->pieces)))
        return st;
    for (size_t i = 0; i < e->pieces.n; i++)
        if ((st = pl_tok_bpe_word(t, e->pieces.buf.buf + e->pieces.span[2 * i],
                                  e->pieces.span[2 * i + 1], &e->bpe, &e->ids, &e->n, &e->cap)))
            return st;
    return PL_OK;
}

static bool s_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

pl_status_t pl_tokenizer_encode(const pl_tokenizer_t *t, const char *text, size_t len,
                                unsigned flags, int32_t **ids_p, size_t *n_p)
{
    s_enc_t e = {0};
    size_t valid = pl_tok_utf8_valid_prefix(text, len), seg = 0;
    pl_status_t st = PL_OK;

    if (valid != len)
        return pl_error(PL_ERR_INVALID, "%s: text is not valid UTF-8 at byte %zu", t->name, valid);
    if (len > PL_TOKENIZER_MAX_TEXT_BYTES) /* normalized pieces are indexed with 32 bits */
        return pl_error(PL_ERR_RANGE, "%s: text of %zu bytes is more than the limit of %u",
                        t->name, len, PL_TOKENIZER_MAX_TEXT_BYTES);
    if (!(e.md = pcre2_match_data_create(1, NULL)))
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; (flags & PL_TOK_ADD_SPECIAL) && i < t->n_prefix && !st; i++)
        st = s_push(&e, t->prefix[i]);
    for (size_t pos = 0; pos < len && !st;) {
        size_t mlen = 0, end;
        int id = pl_tok_added_match(t, text, len, pos, flags & PL_TOK_PARSE_SPECIAL, &mlen);
        if (id < 0) {
            pos++;
            continue;
        }
        end = pos;
        if (t->flags[id] & PL_TOK_F_LSTRIP)
            while (end > seg && s_space(text[end - 1]))
                end--;
        if ((st = s_segment(t, &e, text + seg, end - seg, seg == 0)) || (st = s_push(&e, id)))
            break;
        pos += mlen;
        if (t->flags[id] & PL_TOK_F_RSTRIP)
            while (pos < len && s_space(text[pos]))
                pos++;
        seg = pos;
    }
    if (!st)
        st = s_segment(t, &e, text + seg, len - seg, seg == 0);
    for (int i = 0; (flags & PL_TOK_ADD_SPECIAL) && i < t->n_suffix && !st; i++)
        st = s_push(&e, t->suffix[i]);
    pcre2_match_data_free(e.md);
    pl_tok_pieces_free(&e.pieces);
    pl_tok_bpe_scratch_free(&e.bpe);
    if (st) {
        free(e.ids);
        return pl_error_prefix(st, "%s: ", t->name);
    }
    if (!e.ids && !(e.ids = malloc(sizeof(int32_t)))) /* an empty result is still freeable */
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    *ids_p = e.ids;
    *n_p = e.n;
    return PL_OK;
}

pl_status_t pl_tokenizer_decode(const pl_tokenizer_t *t, const int32_t *ids, size_t n,
                                unsigned flags, char **text_p, size_t *len_p)
{
    pl_tok_stream_t *s = NULL;
    pl_tok_buf_t out = {0};
    const char *piece;
    size_t plen;
    pl_status_t st;

    if ((st = pl_tok_stream_new(t, flags, &s)) || (st = pl_tok_buf_add(&out, "", 0)))
        goto out;
    for (size_t i = 0; i < n; i++)
        if ((st = pl_tok_stream_push(s, ids[i], &piece, &plen)) ||
            (st = pl_tok_buf_add(&out, piece, plen)))
            goto out;
    if ((st = pl_tok_stream_flush(s, &piece, &plen)) || (st = pl_tok_buf_add(&out, piece, plen)))
        goto out;
    *text_p = out.buf;
    *len_p = out.len;
    out.buf = NULL;
out:
    pl_tok_buf_free(&out);
    pl_tok_stream_destroy(&s);
    return st;
}

int pl_tokenizer_vocab_size(const pl_tokenizer_t *t)
{
    return t->n_ids;
}

int pl_tokenizer_bos(const pl_tokenizer_t *t)
{
    return t->bos_id;
}

int pl_tokenizer_eos(const pl_tokenizer_t *t, const int **ids_p)
{
    *ids_p = t->eos_ids;
    return t->n_eos;
}

bool pl_tokenizer_adds_bos(const pl_tokenizer_t *t)
{
    return t->n_prefix > 0 && t->prefix[0] == t->bos_id;
}

const char *pl_tokenizer_chat_template(const pl_tokenizer_t *t)
{
    return t->chat_template;
}

const char *pl_tokenizer_bos_text(const pl_tokenizer_t *t)
{
    return t->bos_text;
}

const char *pl_tokenizer_eos_text(const pl_tokenizer_t *t)
{
    return t->eos_text;
}

int pl_tokenizer_token_id(const pl_tokenizer_t *t, const char *text)
{
    size_t len = strlen(text), mlen = 0;
    pl_tok_buf_t k = {0};
    int id = pl_tok_added_match(t, text, len, 0, true, &mlen);

    if (id >= 0 && mlen == len)
        return id;
    if (pl_tok_model_bytes(t, text, len, &k))
        return -1;
    id = pl_tok_strmap_get(t, k.buf, k.len);
    pl_tok_buf_free(&k);
    return id;
}

bool pl_tokenizer_is_special(const pl_tokenizer_t *t, int id)
{
    return id >= 0 && id < t->n_ids && (t->flags[id] & PL_TOK_F_SPECIAL);
}
