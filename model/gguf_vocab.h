/* The tokenizer's data in a GGUF file, for the tokenizer module: the vocabulary with its scores
 * and token types, the BPE merges, special token ids and the chat template, all checked. */
#ifndef PL_MODEL_GGUF_VOCAB_H
#define PL_MODEL_GGUF_VOCAB_H

#include "model/gguf.h"

typedef struct {
    const pl_gguf_t *g;
    const char *model;  /* tokenizer.ggml.model ("llama", "gpt2", ...); borrowed, not NUL-ended */
    size_t model_len;
    const char *pre;    /* tokenizer.ggml.pre, or NULL */
    size_t pre_len;
    uint64_t n_tokens;
    const pl_gguf_kv_t *tokens;  /* strings, n_tokens */
    const pl_gguf_kv_t *scores;  /* f32, n_tokens, or NULL */
    const pl_gguf_kv_t *types;   /* integers, n_tokens, or NULL */
    const pl_gguf_kv_t *merges;  /* strings "a b", or NULL */
    const char *chat_template;   /* tokenizer.chat_template, or NULL */
    size_t chat_template_len;
    int64_t bos, eos, unk, pad;  /* -1 when absent */
    bool add_bos, add_eos;       /* tokenizer.ggml.add_{bos,eos}_token (false when absent) */
} pl_gguf_vocab_t;

/* Read and check the tokenizer keys: tokens present and non-empty, scores and types as many as
 * tokens, types in ggml's range 0..6, merges strings of two non-empty parts, special ids below the
 * token count. PL_ERR_NOT_FOUND when the file has no tokenizer.ggml.tokens. */
pl_status_t pl_gguf_vocab(const pl_gguf_t *g, pl_gguf_vocab_t *v_p);
/* Token i's bytes (borrowed, not NUL-terminated). i < n_tokens. */
void pl_gguf_vocab_token(const pl_gguf_vocab_t *v, uint64_t i, const char **s_p, size_t *len_p);
/* Token i's score (0 without scores) and type (1, "normal", without types). */
float pl_gguf_vocab_score(const pl_gguf_vocab_t *v, uint64_t i);
int pl_gguf_vocab_type(const pl_gguf_vocab_t *v, uint64_t i);
/* Number of merges, and merge i split at its space into its two parts. */
uint64_t pl_gguf_vocab_n_merges(const pl_gguf_vocab_t *v);
void pl_gguf_vocab_merge(const pl_gguf_vocab_t *v, uint64_t i, const char **a_p, size_t *a_len,
                         const char **b_p, size_t *b_len);

#endif
