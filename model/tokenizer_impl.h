/* Internal layout of a loaded tokenizer, shared by model/tokenizer_*.c only: the id tables, the
 * hash maps, and the normalizer / pre-tokenizer / decoder steps the file declared. */
#ifndef PL_MODEL_TOKENIZER_IMPL_H
#define PL_MODEL_TOKENIZER_IMPL_H

#include "model/tokenizer.h"

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- byte strings and hash maps (tokenizer_map.c) ---- */

typedef struct {
    char *buf;
    size_t len, cap;
} pl_tok_buf_t;

pl_status_t pl_tok_buf_add(pl_tok_buf_t *b, const void *data, size_t len);
void pl_tok_buf_free(pl_tok_buf_t *b);

/* bytes -> id; the keys are the pieces of the tokenizer's arena, looked up through a callback-
 * free layout: each slot holds an id whose key is (arena + off[id], len[id]). */
typedef struct {
    int32_t *slots; /* -1 empty */
    uint32_t mask;
} pl_tok_strmap_t;

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key;
    int32_t rank, id;
} pl_tok_merge_t;

typedef struct {
    pl_tok_merge_t *slots; /* key UINT64_MAX empty */
    uint32_t mask;
} pl_tok_mergemap_t;

uint64_t pl_tok_hash(const void *data, size_t len);

/* ---- normalizers, pre-tokenizers, decoders (tokenizer_pretok.c, tokenizer_decode.c) ---- */

typedef enum {
    PL_TOK_NORM_NFC,
    PL_TOK_NORM_NFD,
    PL_TOK_NORM_NFKC,
    PL_TOK_NORM_NFKD,
    PL_TOK_NORM_LOWERCASE,
    PL_TOK_NORM_PREPEND,
    PL_TOK_NORM_REPLACE,
} pl_tok_norm_kind_t;

typedef struct {
    pl_tok_norm_kind_t kind;
    char *a, *b; /* prepend text; replace pattern / content */
    size_t a_len, b_len;
} pl_tok_norm_t;

typedef enum {
    PL_TOK_SPLIT_ISOLATED,
    PL_TOK_SPLIT_REMOVED,
    PL_TOK_SPLIT_MERGED_PREV,
    PL_TOK_SPLIT_MERGED_NEXT,
    PL_TOK_SPLIT_CONTIGUOUS,
} pl_tok_split_t;

typedef enum { PL_TOK_PRE_SPLIT, PL_TOK_PRE_BYTELEVEL, PL_TOK_PRE_METASPACE } pl_tok_pre_kind_t;

typedef enum { PL_TOK_PREPEND_ALWAYS, PL_TOK_PREPEND_FIRST, PL_TOK_PREPEND_NEVER } pl_tok_prepend_t;

typedef struct {
    pl_tok_pre_kind_t kind;
    pcre2_code *re;          /* Split with a Regex pattern, ByteLevel with use_regex */
    char *literal;           /* Split with a String pattern (or Metaspace replacement) */
    size_t literal_len;
    pl_tok_split_t behavior; /* Split */
    bool invert;             /* Split */
    bool add_prefix_space;   /* ByteLevel */
    pl_tok_prepend_t prepend; /* Metaspace */
    bool split;              /* Metaspace */
} pl_tok_pre_t;

#define PL_TOK_MAX_STEPS 16
#define PL_TOK_MAX_AFFIX 4

struct pl_tokenizer {
    char *name;
    int n_ids;           /* vocab size: max id + 1 */
    pl_tok_buf_t arena;  /* model-space piece bytes of every id, then decoded bytes */
    uint32_t *piece_off; /* [n_ids] model-space bytes (vocab key / added content) */
    uint32_t *piece_len; /* UINT32_MAX when the id is unused */
    uint32_t *out_off;   /* [n_ids] bytes the decoder makes of the id */
    uint32_t *out_len;
    uint8_t *flags;      /* [n_ids] PL_TOK_F_* */
    pl_tok_strmap_t vocab;
    pl_tok_mergemap_t merges;

    /* BPE model */
    bool byte_level;    /* vocab keys are GPT-2 byte-mapped; held here as raw bytes */
    bool byte_fallback;
    bool fuse_unk;
    bool ignore_merges;
    int unk_id;            /* -1 */
    int byte_ids[256];     /* <0xXX> ids for byte fallback; -1 */

    /* added tokens, longest-leftmost match through a byte trie */
    struct pl_tok_trie_node *trie;
    size_t trie_n, trie_cap;
    bool added_first[256]; /* bytes an added token can start with */

    int n_norm, n_pre;
    pl_tok_norm_t norm[PL_TOK_MAX_STEPS];
    pl_tok_pre_t pre[PL_TOK_MAX_STEPS];

    /* post-processing: ids before and after the sequence */
    int n_prefix, n_suffix;
    int prefix[PL_TOK_MAX_AFFIX], suffix[PL_TOK_MAX_AFFIX];

    /* decoder: leading characters stripped from the whole output */
    char strip_char;
    int strip_start;

    /* tokenizer_config.json */
    int bos_id;
    int n_eos;
    int eos_ids[PL_TOKENIZER_MAX_EOS];
    char *bos_text, *eos_text, *chat_template;
};

enum {
    PL_TOK_F_ADDED = 1,
    PL_TOK_F_SPECIAL = 2,
    PL_TOK_F_LSTRIP = 4,
    PL_TOK_F_RSTRIP = 8,
    PL_TOK_F_SINGLE_WORD = 16,
    PL_TOK_F_VOCAB = 32,
};

/* tokenizer_map.c */
pl_status_t pl_tok_strmap_init(pl_tok_strmap_t *m, size_t n);
void pl_tok_strmap_free(pl_tok_strmap_t *m);
/* Insert id under its piece; returns the id already there (>= 0) or -1 when inserted. */
int pl_tok_strmap_put(pl_tokenizer_t *t, int32_t id);
int pl_tok_strmap_get(const pl_tokenizer_t *t, const char *s, size_t len);
pl_status_t pl_tok_mergemap_init(pl_tok_mergemap_t *m, size_t n);
void pl_tok_mergemap_free(pl_tok_mergemap_t *m);
/* false when the pair was already there (the first rank wins, as in the file). */
bool pl_tok_mergemap_put(pl_tok_mergemap_t *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const pl_tok_merge_t *pl_tok_mergemap_get(const pl_tok_mergemap_t *m, int32_t a, int32_t b);

/* tokenizer_bytes.c: GPT-2's byte <-> printable code point map, UTF-8 checks */
uint32_t pl_tok_byte_to_cp(uint8_t b);
/* Code point -> byte, or -1 when cp is not one of the 256 mapped ones. */
int pl_tok_cp_to_byte(uint32_t cp);
/* Length of the valid UTF-8 prefix of s (== len when all valid). */
size_t pl_tok_utf8_valid_prefix(const char *s, size_t len);
/* 1..4 for a complete character at s; 0 for invalid bytes (*bad of them make one U+FFFD);
 * -1 for an incomplete tail. */
int pl_tok_utf8_seq(const char *s, size_t len, int *bad);
/* Decode one code point at s (valid UTF-8 assumed); returns its length. */
int pl_tok_utf8_next(const char *s, size_t len, uint32_t *cp);
int pl_tok_utf8_put(uint32_t cp, char out[4]);

/* tokenizer_added.c */
pl_status_t pl_tok_added_load(pl_tokenizer_t *t, const json_t *added);
/* Longest added token starting at text[pos]; returns its id or -1, *len_p its length. */
int pl_tok_added_match(const pl_tokenizer_t *t, const char *text, size_t len, size_t pos,
                       bool parse_special, size_t *len_p);
void pl_tok_added_free(pl_tokenizer_t *t);

/* tokenizer_pretok.c */
pl_status_t pl_tok_norm_load(pl_tokenizer_t *t, const json_t *j);
pl_status_t pl_tok_pre_load(pl_tokenizer_t *t, const json_t *j);
void pl_tok_steps_free(pl_tokenizer_t *t);
/* Normalize `seg` and split it into pieces: spans (off, len) into out->buf. */
typedef struct {
    pl_tok_buf_t buf;
    uint32_t *span; /* pairs */
    size_t n, cap;
} pl_tok_pieces_t;
pl_status_t pl_tok_pretokenize(const pl_tokenizer_t *t, const char *seg, size_t len, bool first,
                               pcre2_match_data *md, pl_tok_pieces_t *out);
void pl_tok_pieces_free(pl_tok_pieces_t *p);

/* tokenizer_bpe.c */
pl_status_t pl_tok_bpe_load(pl_tokenizer_t *t, const json_t *model);
typedef struct pl_tok_bpe_scratch pl_tok_bpe_scratch_t;
/* Append the ids of one pre-tokenized word to *ids. */
pl_status_t pl_tok_bpe_word(const pl_tokenizer_t *t, const char *w, size_t len,
                            pl_tok_bpe_scratch_t **scratch, int32_t **ids, size_t *n,
                            size_t *cap);
void pl_tok_bpe_scratch_free(pl_tok_bpe_scratch_t **scratch);

/* tokenizer_decode.c: read the decoder chain and compute every id's decoded bytes */
pl_status_t pl_tok_decoder_load(pl_tokenizer_t *t, const json_t *j);
/* Model-space bytes of a file string (byte-level un-mapping when every code point maps). */
pl_status_t pl_tok_model_bytes(const pl_tokenizer_t *t, const char *s, size_t len,
                               pl_tok_buf_t *out);

#endif
