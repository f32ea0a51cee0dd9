/* The model's own tokenizer, read from a Hugging Face tokenizer.json (plus tokenizer_config.json
 * for BOS/EOS, add_bos_token and the chat template): byte-level BPE and SentencePiece-style BPE. */
#ifndef PL_MODEL_TOKENIZER_H
#define PL_MODEL_TOKENIZER_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_TOKENIZER_MAX_FILE_BYTES (256u << 20)
#define PL_TOKENIZER_MAX_VOCAB (1 << 22)
#define PL_TOKENIZER_MAX_EOS 8
#define PL_TOKENIZER_MAX_TEXT_BYTES (64u << 20)

typedef struct pl_tokenizer pl_tokenizer_t;

/* Encode flags. */
enum {
    PL_TOK_ADD_SPECIAL = 1u << 0,   /* add BOS/EOS as the post-processor and config say */
    PL_TOK_PARSE_SPECIAL = 1u << 1, /* text that spells a special token becomes that token */
};
#define PL_TOK_ENCODE_DEFAULT (PL_TOK_ADD_SPECIAL | PL_TOK_PARSE_SPECIAL)

/* Decode flags. */
enum {
    PL_TOK_SKIP_SPECIAL = 1u << 0, /* leave special tokens (BOS, EOS, <|eot_id|>...) out */
};

/* Parse tokenizer.json text (`json`) and optional tokenizer_config.json text (`config`, NULL
 * when absent). `name` (usually the path) prefixes every error message. */
pl_status_t pl_tokenizer_parse(const char *json, size_t json_len, const char *config,
                               size_t config_len, const char *name, pl_tokenizer_t **tok_p);
/* Read dir/tokenizer.json and, when present, dir/tokenizer_config.json. */
pl_status_t pl_tokenizer_load(const char *dir, pl_tokenizer_t **tok_p);
/* Free; sets *tok_p to NULL; safe on NULL. */
void pl_tokenizer_destroy(pl_tokenizer_t **tok_p);

/* One more than the largest token id of the model and its added tokens. */
int pl_tokenizer_vocab_size(const pl_tokenizer_t *tok);
/* BOS id, or -1 when the tokenizer names none. */
int pl_tokenizer_bos(const pl_tokenizer_t *tok);
/* EOS ids (eos_token of the config; at most PL_TOKENIZER_MAX_EOS); returns how many. */
int pl_tokenizer_eos(const pl_tokenizer_t *tok, const int **ids_p);
/* Whether PL_TOK_ADD_SPECIAL puts a BOS first. */
bool pl_tokenizer_adds_bos(const pl_tokenizer_t *tok);
/* The config's chat_template text, bos_token, eos_token (borrowed; NULL when absent). */
const char *pl_tokenizer_chat_template(const pl_tokenizer_t *tok);
const char *pl_tokenizer_bos_text(const pl_tokenizer_t *tok);
const char *pl_tokenizer_eos_text(const pl_tokenizer_t *tok);
/* Id of an exact token string (added token or vocabulary entry as written in the file); -1. */
int pl_tokenizer_token_id(const pl_tokenizer_t *tok, const char *text);
/* Whether id is a special added token. */
bool pl_tokenizer_is_special(const pl_tokenizer_t *tok, int id);

/* Encode UTF-8 text into token ids. Invalid UTF-8 is an error naming the byte offset.
 * Thread-safe on one tokenizer. *ids_p is the caller's to free. */
pl_status_t pl_tokenizer_encode(const pl_tokenizer_t *tok, const char *text, size_t len,
                                unsigned flags, int32_t **ids_p, size_t *n_p);
/* Decode ids into text (NUL-terminated; invalid bytes become U+FFFD). An id outside the
 * vocabulary is an error. *text_p is the caller's to free. */
pl_status_t pl_tokenizer_decode(const pl_tokenizer_t *tok, const int32_t *ids, size_t n,
                                unsigned flags, char **text_p, size_t *len_p);

/* Streaming decode: push ids as they are sampled and get the text that is complete so far.
 * A character split across tokens is held until its last byte arrives; the concatenation of
 * every push and the final flush equals pl_tokenizer_decode of all the ids. */
typedef struct pl_tok_stream pl_tok_stream_t;

pl_status_t pl_tok_stream_new(const pl_tokenizer_t *tok, unsigned flags,
                              pl_tok_stream_t **stream_p);
void pl_tok_stream_destroy(pl_tok_stream_t **stream_p);
/* Append the text that id completes to *out (a growing buffer the stream owns, valid until the
 * next call); *out_len may be 0 while a character is incomplete. */
pl_status_t pl_tok_stream_push(pl_tok_stream_t *s, int32_t id, const char **out,
                               size_t *out_len);
/* End of the sequence: a held incomplete character becomes U+FFFD. */
pl_status_t pl_tok_stream_flush(pl_tok_stream_t *s, const char **out, size_t *out_len);

#endif
