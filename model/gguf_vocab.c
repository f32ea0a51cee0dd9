/* The tokenizer.ggml.* keys of a GGUF file, checked once so the tokenizer module can index them
 * without checks of its own: counts agree, ids are in range, merges split in two. */
#include "model/gguf_vocab.h"

#include <string.h>

#define S_MAX_TOKEN_TYPE 6 /* ggml's LLAMA_TOKEN_TYPE_BYTE */

static pl_status_t s_opt_arr(const pl_gguf_t *g, const char *key, pl_gguf_vtype_t t, uint64_t n,
                             const pl_gguf_kv_t **kv_p)
{
    pl_status_t st = pl_gguf_get_arr(g, key, t, kv_p);
    if (st == PL_ERR_NOT_FOUND) {
        *kv_p = NULL;
        return PL_OK;
    }
    if (st)
        return st;
    if (n != UINT64_MAX && (*kv_p)->n != n)
        return pl_error(PL_ERR_INVALID, "%s: metadata '%s' has %llu entries for %llu tokens",
                        g->label, key, (unsigned long long)(*kv_p)->n, (unsigned long long)n);
    return PL_OK;
}

static pl_status_t s_opt_id(const pl_gguf_t *g, const char *key, uint64_t n, int64_t *id)
{
    pl_status_t st = pl_gguf_get_int(g, key, 0, (int64_t)n - 1, id);
    if (st == PL_ERR_NOT_FOUND) {
        *id = -1;
        return PL_OK;
    }
    return st;
}

static pl_status_t s_opt_str(const pl_gguf_t *g, const char *key, const char **s, size_t *len)
{
    pl_status_t st = pl_gguf_get_str(g, key, s, len);
    if (st == PL_ERR_NOT_FOUND) {
        *s = NULL;
        *len = 0;
        return PL_OK;
    }
    return st;
}

static pl_status_t s_opt_bool(const pl_gguf_t *g, const char *key, bool *b)
{
    pl_status_t st = pl_gguf_get_bool(g, key, b);
    if (st == PL_ERR_NOT_FOUND) {
        *b = false;
        return PL_OK;
    }
    return st;
}

pl_status_t pl_gguf_vocab(const pl_gguf_t *g, pl_gguf_vocab_t *v_p)
{
    pl_gguf_vocab_t v = {.g = g};
    pl_status_t st = pl_gguf_get_arr(g, "tokenizer.ggml.tokens", PL_GGUF_STR, &v.tokens);

    if (st)
        return st;
    v.n_tokens = v.tokens->n;
    if (v.n_tokens == 0 || v.n_tokens > INT32_MAX)
        return pl_error(PL_ERR_INVALID, "%s: tokenizer.ggml.tokens holds %llu tokens", g->label,
                        (unsigned long long)v.n_tokens);
    if ((st = pl_gguf_get_str(g, "tokenizer.ggml.model", &v.model, &v.model_len)) ==
        PL_ERR_NOT_FOUND)
        return pl_error(PL_ERR_INVALID, "%s: metadata 'tokenizer.ggml.model' is missing",
                        g->label);
    if (st || (st = s_opt_str(g, "tokenizer.ggml.pre", &v.pre, &v.pre_len)) ||
        (st = s_opt_str(g, "tokenizer.chat_template", &v.chat_template,
                        &v.chat_template_len)) ||
        (st = s_opt_arr(g, "tokenizer.ggml.scores", PL_GGUF_F32, v.n_tokens, &v.scores)) ||
        (st = s_opt_arr(g, "tokenizer.ggml.token_type", PL_GGUF_I32, v.n_tokens, &v.types)) ||
        (st = s_opt_arr(g, "tokenizer.ggml.merges", PL_GGUF_STR, UINT64_MAX, &v.merges)) ||
        (st = s_opt_id(g, "tokenizer.ggml.bos_token_id", v.n_tokens, &v.bos)) ||
        (st = s_opt_id(g, "tokenizer.ggml.eos_token_id", v.n_tokens, &v.eos)) ||
        (st = s_opt_id(g, "tokenizer.ggml.unknown_token_id", v.n_tokens, &v.unk)) ||
        (st = s_opt_id(g, "tokenizer.ggml.padding_token_id", v.n_tokens, &v.pad)) ||
        (st = s_opt_bool(g, "tokenizer.ggml.add_bos_token", &v.add_bos)) ||
        (st = s_opt_bool(g, "tokenizer.ggml.add_eos_token", &v.add_eos)))
        return st;
    for (uint64_t i = 0; v.types && i < v.n_tokens; i++) {
        int64_t t = pl_gguf_arr_int(g, v.types, i);
        if (t < 0 || t > S_MAX_TOKEN_TYPE)
            return pl_error(PL_ERR_INVALID, "%s: tokenizer.ggml.token_type[%llu] is %lld, not a "
                            "token type (0..%d)", g->label, (unsigned long long)i, (long long)t,
                            S_MAX_TOKEN_TYPE);
    }
    for (uint64_t i = 0; v.merges && i < v.merges->n; i++) {
        const char *s, *sp;
        size_t len;
        pl_gguf_arr_str(g, v.merges, i, &s, &len);
        sp = len ? memchr(s, ' ', len) : NULL;
        if (!sp || sp == s || sp == s + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
            return pl_error(PL_ERR_INVALID, "%s: tokenizer.ggml.merges[%llu] is not two parts "
                            "split by one space", g->label, (unsigned long long)i);
    }
    *v_p = v;
    return PL_OK;
}

void pl_gguf_vocab_token(const pl_gguf_vocab_t *v, uint64_t i, const char **s_p, size_t *len_p)
{
    pl_gguf_arr_str(v->g, v->tokens, i, s_p, len_p);
}

float pl_gguf_vocab_score(const pl_gguf_vocab_t *v, uint64_t i)
{
    return v->scores ? pl_gguf_arr_f32(v->g, v->scores, i) : 0.0f;
}

int pl_gguf_vocab_type(const pl_gguf_vocab_t *v, uint64_t i)
{
    return v->types ? (int)pl_gguf_arr_int(v->g, v->types, i) : 1;
}

uint64_t pl_gguf_vocab_n_merges(const pl_gguf_vocab_t *v)
{
    return v->merges ? v->merges->n : 0;
}

void pl_gguf_vocab_merge(const pl_gguf_vocab_t *v, uint64_t i, const char **a_p, size_t *a_len,
                         const char **b_p, size_t *b_len)
{
    const char *s, *sp;
    size_t len;
    pl_gguf_arr_str(v->g, v->merges, i, &s, &len);
    sp = memchr(s, ' ', len);
    *a_p = s;
    *a_len = (size_t)(sp - s);
    *b_p = sp + 1;
    *b_len = len - *a_len - 1;
}
