/* Growable byte buffers and the two open-addressing hash maps of the tokenizer: piece bytes ->
 * id, and (left id, right id) -> merge rank, so BPE never scans the merges list. */
#include "model/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

pl_status_t pl_tok_buf_add(pl_tok_buf_t *b, const void *data, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *nb;
        while (cap < b->len + len + 1)
            cap *= 2;
        nb = realloc(b->buf, cap);
        if (!nb)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        b->buf = nb;
        b->cap = cap;
    }
    if (len)
        memcpy(b->buf + b->len, data, len);
    b->len += len;
    b->buf[b->len] = '\0';
    return PL_OK;
}

void pl_tok_buf_free(pl_tok_buf_t *b)
{
    free(b->buf);
    memset(b, 0, sizeof(*b));
}

/* FNV-1a, then a final avalanche so low bits spread well for the power-of-two tables. */
uint64_t pl_tok_hash(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint32_t s_capacity(size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

pl_status_t pl_tok_strmap_init(pl_tok_strmap_t *m, size_t n)
{
    uint32_t cap = s_capacity(n);
    m->slots = malloc(sizeof(*m->slots) * cap);
    if (!m->slots)
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    memset(m->slots, 0xff, sizeof(*m->slots) * cap);
    m->mask = cap - 1;
    return PL_OK;
}

void pl_tok_strmap_free(pl_tok_strmap_t *m)
{
    free(m->slots);
    m->slots = NULL;
}

int pl_tok_strmap_put(pl_tokenizer_t *t, int32_t id)
{
    const char *s = t->arena.buf + t->piece_off[id];
    size_t len = t->piece_len[id];
    uint32_t i = (uint32_t)pl_tok_hash(s, len) & t->vocab.mask;

    for (;; i = (i + 1) & t->vocab.mask) {
        int32_t o = t->vocab.slots[i];
        if (o < 0) {
            t->vocab.slots[i] = id;
            return -1;
        }
        if (t->piece_len[o] == len && memcmp(t->arena.buf + t->piece_off[o], s, len) == 0)
            return o;
    }
}

int pl_tok_strmap_get(const pl_tokenizer_t *t, const char *s, size_t len)
{
    uint32_t i = (uint32_t)pl_tok_hash(s, len) & t->vocab.mask;

    for (;; i = (i + 1) & t->vocab.mask) {
        int32_t o = t->vocab.slots[i];
        if (o < 0)
            return -1;
        if (t->piece_len[o] == len && memcmp(t->arena.buf + t->piece_off[o], s, len) == 0)
            return o;
    }
}

pl_status_t pl_tok_mergemap_init(pl_tok_mergemap_t *m, size_t n)
{
    uint32_t cap = s_capacity(n);
    m->slots = malloc(sizeof(*m->slots) * cap);
    if (!m->slots)
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    for (uint32_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    return PL_OK;
}

void pl_tok_mergemap_free(pl_tok_mergemap_t *m)
{
    free(m->slots);
    m->slots = NULL;
}

static uint32_t s_pair_slot(uint64_t key, uint32_t mask)
{
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    key ^= key >> 29;
    return (uint32_t)key & mask;
}

bool pl_tok_mergemap_put(pl_tok_mergemap_t *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = s_pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key)
            return false;
        if (m->slots[i].key == UINT64_MAX) {
            m->slots[i] = (pl_tok_merge_t){key, rank, id};
            return true;
        }
    }
}

const pl_tok_merge_t *pl_tok_mergemap_get(const pl_tok_mergemap_t *m, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = s_pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key)
            return &m->slots[i];
        if (m->slots[i].key == UINT64_MAX)
            return NULL;
    }
}
