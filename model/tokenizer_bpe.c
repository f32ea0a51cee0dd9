/* The BPE model of tokenizer.json: vocabulary and merges loaded into hash maps, and the merge
 * loop for one word (lowest rank first, leftmost on ties, through a heap), with byte fallback. */
#include "model/tokenizer_impl.h"

#include "common/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id, prev, next;
} s_sym_t;

typedef struct {
    int32_t rank, pos, id;
} s_cand_t;

struct pl_tok_bpe_scratch {
    s_sym_t *sym;
    size_t sym_cap;
    s_cand_t *heap;
    size_t heap_n, heap_cap;
};

/* Model-space bytes of a vocabulary string: byte-level vocabularies are un-mapped to raw bytes
 * (a string with a code point outside the map stays as written). */
pl_status_t pl_tok_model_bytes(const pl_tokenizer_t *t, const char *s, size_t len,
                               pl_tok_buf_t *out)
{
    pl_status_t st0;
    out->len = 0;
    if ((st0 = pl_tok_buf_add(out, "", 0)))
        return st0;
    if (t->byte_level) {
        size_t i = 0;
        while (i < len) {
            uint32_t cp;
            int n = pl_tok_utf8_next(s + i, len - i, &cp);
            int b = pl_tok_cp_to_byte(cp);
            uint8_t c = (uint8_t)b;
            if (b < 0)
                break;
            pl_status_t st = pl_tok_buf_add(out, &c, 1);
            if (st)
                return st;
            i += (size_t)n;
        }
        if (i == len)
            return PL_OK;
        out->len = 0;
    }
    return pl_tok_buf_add(out, s, len);
}

static pl_status_t s_merge_parts(const json_t *m, size_t i, const char **a, size_t *a_len,
                                 const char **b, size_t *b_len)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
            return pl_error(PL_ERR_INVALID, "model.merges[%zu]: not two tokens split by a space", i);
        *a = s, *a_len = (size_t)(sp - s), *b = sp + 1, *b_len = strlen(sp + 1);
        return PL_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *a_len = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *b_len = json_string_length(json_array_get(m, 1));
        return PL_OK;
    }
    return pl_error(PL_ERR_INVALID, "model.merges[%zu]: neither \"a b\" nor [a, b]", i);
}

static pl_status_t s_load_merges(pl_tokenizer_t *t, const json_t *merges)
{
    pl_tok_buf_t k = {0}, whole = {0};
    const json_t *m;
    size_t i;
    pl_status_t st = PL_OK;

    if (!json_is_array(merges))
        return pl_error(PL_ERR_INVALID, "model.merges: missing or not an array");
    if (json_array_size(merges) > (size_t)INT32_MAX / 2)
        return pl_error(PL_ERR_RANGE, "model.merges: too many entries");
    if ((st = pl_tok_mergemap_init(&t->merges, json_array_size(merges))))
        return st;
    json_array_foreach(merges, i, m) {
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        int ia, ib, im;

        if ((st = s_merge_parts(m, i, &a, &al, &b, &bl)))
            goto out;
        whole.len = 0;
        if ((st = pl_tok_buf_add(&whole, a, al)) || (st = pl_tok_buf_add(&whole, b, bl)))
            goto out;
        if ((st = pl_tok_model_bytes(t, a, al, &k)))
            goto out;
        ia = pl_tok_strmap_get(t, k.buf, k.len);
        if ((st = pl_tok_model_bytes(t, b, bl, &k)))
            goto out;
        ib = pl_tok_strmap_get(t, k.buf, k.len);
        if ((st = pl_tok_model_bytes(t, whole.buf, whole.len, &k)))
            goto out;
        im = pl_tok_strmap_get(t, k.buf, k.len);
        if (ia < 0 || ib < 0 || im < 0) {
            st = pl_error(PL_ERR_INVALID, "model.merges[%zu]: '%.*s' is not in the vocabulary", i,
                          (int)(ia < 0 ? al : ib < 0 ? bl : whole.len),
                          ia < 0 ? a : ib < 0 ? b : whole.buf);
            goto out;
        }
        pl_tok_mergemap_put(&t->merges, ia, ib, (int32_t)i, im);
    }
out:
    pl_tok_buf_free(&k);
    pl_tok_buf_free(&whole);
    return st;
}

static pl_status_t s_check_affix(const json_t *model, const char *key)
{
    const json_t *v = json_object_get(model, key);
    if (!v || json_is_null(v) || (json_is_string(v) && !json_string_length(v)))
        return PL_OK;
    return pl_error(PL_ERR_UNSUPPORTED, "model.%s: only null or \"\" is supported", key);
}

pl_status_t pl_tok_bpe_load(pl_tokenizer_t *t, const json_t *model)
{
    const json_t *vocab = json_object_get(model, "vocab"), *v, *drop;
    const char *key, *unk = NULL;
    pl_tok_buf_t k = {0};
    pl_status_t st;

    if ((st = pl_json_bool_opt(model, "byte_fallback", &t->byte_fallback)) ||
        (st = pl_json_bool_opt(model, "fuse_unk", &t->fuse_unk)) ||
        (st = pl_json_bool_opt(model, "ignore_merges", &t->ignore_merges)) ||
        (st = pl_json_str_opt(model, "unk_token", 4096, &unk)) ||
        (st = s_check_affix(model, "continuing_subword_prefix")) ||
        (st = s_check_affix(model, "end_of_word_suffix")))
        return pl_error_prefix(st, "model: ");
    drop = json_object_get(model, "dropout");
    if (drop && !json_is_null(drop) && !(json_is_number(drop) && json_number_value(drop) == 0))
        return pl_error(PL_ERR_UNSUPPORTED, "model.dropout: BPE dropout is not supported");
    if (!json_is_object(vocab))
        return pl_error(PL_ERR_INVALID, "model.vocab: missing or not an object");
    if ((st = pl_tok_strmap_init(&t->vocab, json_object_size(vocab) + 1024)))
        return st;
    json_object_foreach((json_t *)vocab, key, v) {
        int64_t id;
        if (!json_is_integer(v) || (id = json_integer_value(v)) < 0 || id >= t->n_ids) {
            st = pl_error(PL_ERR_INVALID, "model.vocab['%s']: not an id in [0, %d)", key, t->n_ids);
            goto out;
        }
        if (!*key) {
            st = pl_error(PL_ERR_INVALID, "model.vocab: an empty token (id %lld)", (long long)id);
            goto out;
        }
        if (t->piece_len[id] != UINT32_MAX) {
            st = pl_error(PL_ERR_INVALID, "model.vocab['%s']: id %lld used twice", key,
                          (long long)id);
            goto out;
        }
        if ((st = pl_tok_model_bytes(t, key, strlen(key), &k)))
            goto out;
        t->piece_off[id] = (uint32_t)t->arena.len;
        t->piece_len[id] = (uint32_t)k.len;
        t->flags[id] |= PL_TOK_F_VOCAB;
        if ((st = pl_tok_buf_add(&t->arena, k.buf, k.len + 1)))
            goto out;
        if (pl_tok_strmap_put(t, (int32_t)id) >= 0) {
            st = pl_error(PL_ERR_INVALID, "model.vocab['%s']: the same token twice", key);
            goto out;
        }
    }
    t->unk_id = -1;
    if (unk) {
        if ((st = pl_tok_model_bytes(t, unk, strlen(unk), &k)))
            goto out;
        if ((t->unk_id = pl_tok_strmap_get(t, k.buf, k.len)) < 0) {
            st = pl_error(PL_ERR_INVALID, "model.unk_token '%s' is not in the vocabulary", unk);
            goto out;
        }
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        t->byte_ids[b] = pl_tok_strmap_get(t, name, 6);
    }
    st = s_load_merges(t, json_object_get(model, "merges"));
out:
    pl_tok_buf_free(&k);
    return st;
}

static bool s_cand_less(const s_cand_t *x, const s_cand_t *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static pl_status_t s_heap_push(pl_tok_bpe_scratch_t *s, s_cand_t c)
{
    size_t i;
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        s_cand_t *h = realloc(s->heap, cap * sizeof(*h));
        if (!h)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        s->heap = h;
        s->heap_cap = cap;
    }
    i = s->heap_n++;
    while (i > 0 && s_cand_less(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
    return PL_OK;
}

static s_cand_t s_heap_pop(pl_tok_bpe_scratch_t *s)
{
    s_cand_t top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->heap_n)
            break;
        if (c + 1 < s->heap_n && s_cand_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!s_cand_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->heap_n)
        s->heap[i] = last;
    return top;
}

static pl_status_t s_try_pair(const pl_tokenizer_t *t, pl_tok_bpe_scratch_t *s, int32_t pos)
{
    int32_t next = pos >= 0 ? s->sym[pos].next : -1;
    const pl_tok_merge_t *m;
    if (next < 0)
        return PL_OK;
    m = pl_tok_mergemap_get(&t->merges, s->sym[pos].id, s->sym[next].id);
    return m ? s_heap_push(s, (s_cand_t){m->rank, pos, m->id}) : PL_OK;
}

static pl_status_t s_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        int32_t *p = realloc(*ids, c * sizeof(*p));
        if (!p)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return PL_OK;
}

pl_status_t pl_tok_bpe_word(const pl_tokenizer_t *t, const char *w, size_t len,
                            pl_tok_bpe_scratch_t **scratch, int32_t **ids, size_t *n,
                            size_t *cap)
{
    pl_tok_bpe_scratch_t *s = *scratch;
    int32_t ns = 0;
    pl_status_t st;

    if (!len)
        return PL_OK;
    if (t->ignore_merges) {
        int id = pl_tok_strmap_get(t, w, len);
        if (id >= 0)
            return s_ids_push(ids, n, cap, id);
    }
    if (!s) {
        if (!(s = *scratch = calloc(1, sizeof(*s))))
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    }
    if (s->sym_cap < len) {
        s_sym_t *p = realloc(s->sym, len * sizeof(*p));
        if (!p)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        s->sym = p;
        s->sym_cap = len;
    }
    for (size_t i = 0; i < len;) {
        int cl = 1, id;
        if (!t->byte_level) {
            uint32_t cp;
            cl = pl_tok_utf8_next(w + i, len - i, &cp);
        }
        id = pl_tok_strmap_get(t, w + i, (size_t)cl);
        if (id < 0 && t->byte_fallback) {
            bool all = true;
            for (int b = 0; b < cl; b++)
                all = all && t->byte_ids[(uint8_t)w[i + b]] >= 0;
            if (all) {
                for (int b = 0; b < cl; b++)
                    s->sym[ns++].id = t->byte_ids[(uint8_t)w[i + b]];
                i += (size_t)cl;
                continue;
            }
        }
        if (id < 0)
            id = t->unk_id;
        if (id >= 0 && !(id == t->unk_id && t->fuse_unk && ns > 0 && s->sym[ns - 1].id == id))
            s->sym[ns++].id = id;
        i += (size_t)cl;
    }
    for (int32_t i = 0; i < ns; i++) {
        s->sym[i].prev = i - 1;
        s->sym[i].next = i + 1 < ns ? i + 1 : -1;
    }
    s->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if ((st = s_try_pair(t, s, i)))
            return st;
    while (s->heap_n) {
        s_cand_t c = s_heap_pop(s);
        s_sym_t *l = &s->sym[c.pos];
        const pl_tok_merge_t *m;
        int32_t r;
        if (l->id < 0 || (r = l->next) < 0)
            continue;
        m = pl_tok_mergemap_get(&t->merges, l->id, s->sym[r].id);
        if (!m || m->id != c.id)
            continue;
        l->id = m->id;
        l->next = s->sym[r].next;
        if (l->next >= 0)
            s->sym[l->next].prev = c.pos;
        s->sym[r].id = -1;
        if ((st = s_try_pair(t, s, l->prev)) || (st = s_try_pair(t, s, c.pos)))
            return st;
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = s->sym[i].next)
        if ((st = s_ids_push(ids, n, cap, s->sym[i].id)))
            return st;
    return PL_OK;
}

void pl_tok_bpe_scratch_free(pl_tok_bpe_scratch_t **scratch)
{
    if (!*scratch)
        return;
    free((*scratch)->sym);
    free((*scratch)->heap);
    free(*scratch);
    *scratch = NULL;
}
