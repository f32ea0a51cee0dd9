/* Added and special tokens of tokenizer.json: matched in the raw text before the model sees it
 * (longest match at the leftmost place, through a byte trie), so they are never split. */
#include "model/tokenizer_impl.h"

#include "common/json.h"

#include <stdlib.h>
#include <string.h>

struct pl_tok_trie_node {
    int32_t child, sibling, id;
    uint8_t byte;
};

static pl_status_t s_node_new(pl_tokenizer_t *t, uint8_t byte, int32_t *idx)
{
    if (t->trie_n == t->trie_cap) {
        size_t cap = t->trie_cap ? t->trie_cap * 2 : 256;
        struct pl_tok_trie_node *n = realloc(t->trie, cap * sizeof(*n));
        if (!n)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        t->trie = n;
        t->trie_cap = cap;
    }
    t->trie[t->trie_n] = (struct pl_tok_trie_node){-1, -1, -1, byte};
    *idx = (int32_t)t->trie_n++;
    return PL_OK;
}

static pl_status_t s_trie_add(pl_tokenizer_t *t, const char *s, size_t len, int32_t id)
{
    int32_t cur = 0;
    pl_status_t st;

    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = t->trie[cur].child;
        while (c >= 0 && t->trie[c].byte != b)
            c = t->trie[c].sibling;
        if (c < 0) {
            int32_t n = 0;
            if ((st = s_node_new(t, b, &n)))
                return st;
            t->trie[n].sibling = t->trie[cur].child;
            t->trie[cur].child = n;
            c = n;
        }
        cur = c;
    }
    if (t->trie[cur].id < 0)
        t->trie[cur].id = id; /* the first of two equal contents wins */
    return PL_OK;
}

pl_status_t pl_tok_added_load(pl_tokenizer_t *t, const json_t *added)
{
    size_t i;
    json_t *a;
    int32_t root;
    pl_status_t st;

    if ((st = s_node_new(t, 0, &root)))
        return st;
    if (!added || json_is_null(added))
        return PL_OK;
    if (!json_is_array(added))
        return pl_error(PL_ERR_INVALID, "added_tokens: not an array");
    json_array_foreach(added, i, a) {
        int64_t id;
        const char *content = NULL;
        bool special = false, lstrip = false, rstrip = false, single = false, normalized = false;
        size_t len;

        if (!json_is_object(a))
            return pl_error(PL_ERR_INVALID, "added_tokens[%zu]: not an object", i);
        if ((st = pl_json_int(a, "id", 0, t->n_ids - 1, &id)) ||
            (st = pl_json_str_opt(a, "content", 4096, &content)) ||
            (st = pl_json_bool_opt(a, "special", &special)) ||
            (st = pl_json_bool_opt(a, "lstrip", &lstrip)) ||
            (st = pl_json_bool_opt(a, "rstrip", &rstrip)) ||
            (st = pl_json_bool_opt(a, "single_word", &single)) ||
            (st = pl_json_bool_opt(a, "normalized", &normalized)))
            return pl_error_prefix(st, "added_tokens[%zu]: ", i);
        if (!content || !*content)
            return pl_error(PL_ERR_INVALID, "added_tokens[%zu]: content missing or empty", i);
        len = strlen(content);
        if (pl_tok_utf8_valid_prefix(content, len) != len)
            return pl_error(PL_ERR_INVALID, "added_tokens[%zu]: content is not valid UTF-8", i);
        if (t->piece_len[id] == UINT32_MAX) {
            /* not in the model's vocabulary: the content is the piece */
            t->piece_off[id] = (uint32_t)t->arena.len;
            t->piece_len[id] = (uint32_t)len;
            if ((st = pl_tok_buf_add(&t->arena, content, len + 1)))
                return st;
        }
        t->flags[id] |= PL_TOK_F_ADDED | (special ? PL_TOK_F_SPECIAL : 0) |
                        (lstrip ? PL_TOK_F_LSTRIP : 0) | (rstrip ? PL_TOK_F_RSTRIP : 0) |
                        (single ? PL_TOK_F_SINGLE_WORD : 0);
        if ((st = s_trie_add(t, content, len, (int32_t)id)))
            return st;
        t->added_first[(uint8_t)content[0]] = true;
    }
    return PL_OK;
}

static bool s_word_byte(uint8_t c)
{
    return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

int pl_tok_added_match(const pl_tokenizer_t *t, const char *text, size_t len, size_t pos,
                       bool parse_special, size_t *len_p)
{
    int32_t cur = 0, best = -1;
    size_t best_len = 0;

    if (!t->trie_n || pos >= len || !t->added_first[(uint8_t)text[pos]])
        return -1;
    for (size_t i = pos; i < len; i++) {
        int32_t c = t->trie[cur].child;
        while (c >= 0 && t->trie[c].byte != (uint8_t)text[i])
            c = t->trie[c].sibling;
        if (c < 0)
            break;
        cur = c;
        int32_t id = t->trie[cur].id;
        if (id < 0)
            continue;
        if (!parse_special && (t->flags[id] & PL_TOK_F_SPECIAL))
            continue;
        if ((t->flags[id] & PL_TOK_F_SINGLE_WORD) &&
            ((pos > 0 && s_word_byte((uint8_t)text[pos - 1])) ||
             (i + 1 < len && s_word_byte((uint8_t)text[i + 1]))))
            continue;
        best = id;
        best_len = i + 1 - pos;
    }
    if (best >= 0)
        *len_p = best_len;
    return best;
}

void pl_tok_added_free(pl_tokenizer_t *t)
{
    free(t->trie);
    t->trie = NULL;
    t->trie_n = t->trie_cap = 0;
}
