/* The normalizer and pre-tokenizer chain tokenizer.json declares: Unicode normalization through
 * utf8proc, Prepend / Replace, and Split (the file's regex through PCRE2), ByteLevel, Metaspace. */
#include "model/tokenizer_impl.h"

#include "common/json.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex. */
static const char s_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static pl_status_t s_regex(const char *pattern, const char *where, pcre2_code **re_p)
{
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &erroff,
                                   NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return pl_error(PL_ERR_UNSUPPORTED, "%s: regex does not compile at offset %zu: %s", where,
                        (size_t)erroff, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when absent */
    *re_p = re;
    return PL_OK;
}

static pl_status_t s_dup(const char *s, char **out, size_t *len)
{
    *len = strlen(s);
    if (!(*out = strdup(s)))
        return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
    return PL_OK;
}

/* {"String": s} or {"Regex": r}: exactly one, returned through *literal or *regex. */
static pl_status_t s_pattern(const json_t *j, const char *where, const char **literal,
                             const char **regex)
{
    const json_t *p = json_object_get(j, "pattern");
    *literal = *regex = NULL;
    if (json_is_object(p)) {
        const json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
        if (json_is_string(s) && !r)
            *literal = json_string_value(s);
        else if (json_is_string(r) && !s)
            *regex = json_string_value(r);
    }
    if (!*literal && !*regex)
        return pl_error(PL_ERR_INVALID, "%s.pattern: not {\"String\": ...} or {\"Regex\": ...}",
                        where);
    return PL_OK;
}

static pl_status_t s_norm_one(pl_tokenizer_t *t, const json_t *j)
{
    const char *type = NULL, *content = NULL, *lit, *re;
    pl_tok_norm_t *n;
    pl_status_t st;

    if (!json_is_object(j) || pl_json_str_opt(j, "type", 64, &type) || !type)
        return pl_error(PL_ERR_INVALID, "normalizer: not an object with a type");
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(j, "normalizers"), *e;
        size_t i;
        if (!json_is_array(list))
            return pl_error(PL_ERR_INVALID, "normalizer Sequence: normalizers is not an array");
        json_array_foreach(list, i, e) {
            if ((st = s_norm_one(t, e)))
                return st;
        }
        return PL_OK;
    }
    if (t->n_norm == PL_TOK_MAX_STEPS)
        return pl_error(PL_ERR_UNSUPPORTED, "normalizer: more than %d steps", PL_TOK_MAX_STEPS);
    n = &t->norm[t->n_norm];
    memset(n, 0, sizeof(*n));
    if (strcmp(type, "NFC") == 0)
        n->kind = PL_TOK_NORM_NFC;
    else if (strcmp(type, "NFD") == 0)
        n->kind = PL_TOK_NORM_NFD;
    else if (strcmp(type, "NFKC") == 0)
        n->kind = PL_TOK_NORM_NFKC;
    else if (strcmp(type, "NFKD") == 0)
        n->kind = PL_TOK_NORM_NFKD;
    else if (strcmp(type, "Lowercase") == 0)
        n->kind = PL_TOK_NORM_LOWERCASE;
    else if (strcmp(type, "Prepend") == 0) {
        const char *p = NULL;
        if (pl_json_str_opt(j, "prepend", 4096, &p) || !p)
            return pl_error(PL_ERR_INVALID, "normalizer Prepend: prepend missing");
        n->kind = PL_TOK_NORM_PREPEND;
        if ((st = s_dup(p, &n->a, &n->a_len)))
            return st;
    } else if (strcmp(type, "Replace") == 0) {
        if ((st = s_pattern(j, "normalizer Replace", &lit, &re)))
            return st;
        if (re)
            return pl_error(PL_ERR_UNSUPPORTED, "normalizer Replace: a Regex pattern is not supported");
        if (!*lit || pl_json_str_opt(j, "content", 4096, &content) || !content)
            return pl_error(PL_ERR_INVALID, "normalizer Replace: empty pattern or no content");
        n->kind = PL_TOK_NORM_REPLACE;
        if ((st = s_dup(lit, &n->a, &n->a_len)) || (st = s_dup(content, &n->b, &n->b_len)))
            return st;
    } else {
        return pl_error(PL_ERR_UNSUPPORTED, "normalizer type '%s' is not supported", type);
    }
    t->n_norm++;
    return PL_OK;
}

pl_status_t pl_tok_norm_load(pl_tokenizer_t *t, const json_t *j)
{
    return !j || json_is_null(j) ? PL_OK : s_norm_one(t, j);
}

static pl_status_t s_pre_one(pl_tokenizer_t *t, const json_t *j)
{
    const char *type = NULL, *lit, *re, *beh = NULL;
    pl_tok_pre_t *p;
    pl_status_t st;

    if (!json_is_object(j) || pl_json_str_opt(j, "type", 64, &type) || !type)
        return pl_error(PL_ERR_INVALID, "pre_tokenizer: not an object with a type");
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(j, "pretokenizers"), *e;
        size_t i;
        if (!json_is_array(list))
            return pl_error(PL_ERR_INVALID, "pre_tokenizer Sequence: pretokenizers is not an array");
        json_array_foreach(list, i, e) {
            if ((st = s_pre_one(t, e)))
                return st;
        }
        return PL_OK;
    }
    if (t->n_pre == PL_TOK_MAX_STEPS)
        return pl_error(PL_ERR_UNSUPPORTED, "pre_tokenizer: more than %d steps", PL_TOK_MAX_STEPS);
    p = &t->pre[t->n_pre++]; /* counted now so a half-built step is freed with the rest */
    memset(p, 0, sizeof(*p));
    if (strcmp(type, "Split") == 0) {
        static const char *names[] = {"Isolated", "Removed", "MergedWithPrevious",
                                      "MergedWithNext", "Contiguous"};
        p->kind = PL_TOK_PRE_SPLIT;
        if ((st = s_pattern(j, "pre_tokenizer Split", &lit, &re)) ||
            (st = pl_json_bool_opt(j, "invert", &p->invert)) ||
            (st = pl_json_str_opt(j, "behavior", 64, &beh)))
            return pl_error_prefix(st, "pre_tokenizer Split: ");
        p->behavior = (pl_tok_split_t)-1;
        for (int i = 0; beh && i < 5; i++)
            if (strcmp(beh, names[i]) == 0)
                p->behavior = (pl_tok_split_t)i;
        if ((int)p->behavior < 0)
            return pl_error(PL_ERR_UNSUPPORTED, "pre_tokenizer Split: behavior '%s' is not known",
                            beh ? beh : "(missing)");
        if (re)
            return s_regex(re, "pre_tokenizer Split", &p->re);
        if (!*lit)
            return pl_error(PL_ERR_INVALID, "pre_tokenizer Split: empty String pattern");
        return s_dup(lit, &p->literal, &p->literal_len);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        bool use_regex = true;
        p->kind = PL_TOK_PRE_BYTELEVEL;
        if ((st = pl_json_bool_opt(j, "add_prefix_space", &p->add_prefix_space)) ||
            (st = pl_json_bool_opt(j, "use_regex", &use_regex)))
            return pl_error_prefix(st, "pre_tokenizer ByteLevel: ");
        t->byte_level = true;
        return use_regex ? s_regex(s_gpt2_re, "pre_tokenizer ByteLevel", &p->re) : PL_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *rep = NULL, *scheme = NULL;
        bool add_prefix = true;
        p->kind = PL_TOK_PRE_METASPACE;
        p->split = true;
        p->prepend = PL_TOK_PREPEND_ALWAYS;
        if ((st = pl_json_str_opt(j, "replacement", 8, &rep)) ||
            (st = pl_json_str_opt(j, "prepend_scheme", 16, &scheme)) ||
            (st = pl_json_bool_opt(j, "add_prefix_space", &add_prefix)) ||
            (st = pl_json_bool_opt(j, "split", &p->split)))
            return pl_error_prefix(st, "pre_tokenizer Metaspace: ");
        if (!scheme && !add_prefix)
            p->prepend = PL_TOK_PREPEND_NEVER;
        else if (scheme && strcmp(scheme, "first") == 0)
            p->prepend = PL_TOK_PREPEND_FIRST;
        else if (scheme && strcmp(scheme, "never") == 0)
            p->prepend = PL_TOK_PREPEND_NEVER;
        else if (scheme && strcmp(scheme, "always") != 0)
            return pl_error(PL_ERR_UNSUPPORTED, "pre_tokenizer Metaspace: prepend_scheme '%s'",
                            scheme);
        return s_dup(rep ? rep : "\xe2\x96\x81", &p->literal, &p->literal_len);
    }
    t->n_pre--;
    return pl_error(PL_ERR_UNSUPPORTED, "pre_tokenizer type '%s' is not supported", type);
}

pl_status_t pl_tok_pre_load(pl_tokenizer_t *t, const json_t *j)
{
    return !j || json_is_null(j) ? PL_OK : s_pre_one(t, j);
}

void pl_tok_steps_free(pl_tokenizer_t *t)
{
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    for (int i = 0; i < t->n_pre; i++) {
        pcre2_code_free(t->pre[i].re);
        free(t->pre[i].literal);
    }
    t->n_norm = t->n_pre = 0;
}

/* ---- applying the chain ---- */

static pl_status_t s_replace(pl_tok_buf_t *out, const char *s, size_t len, const char *pat,
                             size_t pat_len, const char *rep, size_t rep_len)
{
    pl_status_t st = PL_OK;
    size_t i = 0;
    while (i < len && !st) {
        const char *hit = memmem(s + i, len - i, pat, pat_len);
        size_t stop = hit ? (size_t)(hit - s) : len;
        st = pl_tok_buf_add(out, s + i, stop - i);
        if (!st && hit)
            st = pl_tok_buf_add(out, rep, rep_len);
        i = hit ? stop + pat_len : len;
    }
    return st;
}

static pl_status_t s_normalize(const pl_tok_norm_t *n, const char *s, size_t len,
                               pl_tok_buf_t *out)
{
    utf8proc_option_t opt = UTF8PROC_STABLE;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t got;
    pl_status_t st = PL_OK;

    switch (n->kind) {
    case PL_TOK_NORM_PREPEND:
        if (len)
            st = pl_tok_buf_add(out, n->a, n->a_len);
        return st ? st : pl_tok_buf_add(out, s, len);
    case PL_TOK_NORM_REPLACE:
        return s_replace(out, s, len, n->a, n->a_len, n->b, n->b_len);
    case PL_TOK_NORM_LOWERCASE:
        for (size_t i = 0; i < len && !st;) {
            uint32_t cp;
            char u[4];
            i += (size_t)pl_tok_utf8_next(s + i, len - i, &cp);
            st = pl_tok_buf_add(out, u, (size_t)pl_tok_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u));
        }
        return st;
    case PL_TOK_NORM_NFC:
        opt |= UTF8PROC_COMPOSE;
        break;
    case PL_TOK_NORM_NFD:
        opt |= UTF8PROC_DECOMPOSE;
        break;
    case PL_TOK_NORM_NFKC:
        opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
    case PL_TOK_NORM_NFKD:
        opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    if (!len)
        return PL_OK;
    got = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, opt);
    if (got < 0)
        return pl_error(PL_ERR_INVALID, "normalizer: %s", utf8proc_errmsg(got));
    st = pl_tok_buf_add(out, dst, (size_t)got);
    free(dst);
    return st;
}

static pl_status_t s_span_add(pl_tok_pieces_t *p, size_t off, size_t len)
{
    if (!len)
        return PL_OK;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        uint32_t *s = realloc(p->span, cap * 2 * sizeof(*s));
        if (!s)
            return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");
        p->span = s;
        p->cap = cap;
    }
    p->span[2 * p->n] = (uint32_t)off;
    p->span[2 * p->n + 1] = (uint32_t)len;
    p->n++;
    return PL_OK;
}

/* Split one piece [off, off+len) of in->buf by the step's pattern into out (same buffer). */
static pl_status_t s_split(const pl_tok_pre_t *p, const pl_tok_pieces_t *in, size_t off,
                           size_t len, pcre2_match_data *md, pl_tok_pieces_t *out,
                           uint32_t **seg, size_t *seg_cap)
{
    const char *s = in->buf.buf + off;
    size_t n = 0, pos = 0, last = 0;
    pl_status_t st = PL_OK;

    /* segments as triples (start, end, is_match), covering the piece in order */
#define S_SEG(a, b, m)                                                                             \
    do {                                                                                           \
        if ((b) > (a)) {                                                                           \
            if (n == *seg_cap) {                                                                   \
                size_t c_ = *seg_cap ? *seg_cap * 2 : 64;                                          \
                uint32_t *q_ = realloc(*seg, c_ * 3 * sizeof(*q_));                                \
                if (!q_)                                                                           \
                    return pl_error(PL_ERR_NOMEM, "tokenizer: out of memory");                     \
                *seg = q_, *seg_cap = c_;                                                          \
            }                                                                                      \
            (*seg)[3 * n] = (uint32_t)(a), (*seg)[3 * n + 1] = (uint32_t)(b);                     \
            (*seg)[3 * n + 2] = (uint32_t)((m) != p->invert);                                      \
            n++;                                                                                   \
        }                                                                                          \
    } while (0)

    while (pos <= len) {
        size_t ms, me;
        if (p->re) {
            int rc = pcre2_match(p->re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            PCRE2_SIZE *ov;
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0)
                return pl_error(PL_ERR_INVALID, "pre_tokenizer: regex match failed (%d)", rc);
            ov = pcre2_get_ovector_pointer(md);
            ms = ov[0], me = ov[1];
        } else {
            const char *hit = memmem(s + pos, len - pos, p->literal, p->literal_len);
            if (!hit)
                break;
            ms = (size_t)(hit - s), me = ms + p->literal_len;
        }
        if (me == ms) { /* an empty match splits nothing: step over one character */
            uint32_t cp;
            if (ms >= len)
                break;
            pos = ms + (size_t)pl_tok_utf8_next(s + ms, len - ms, &cp);
            continue;
        }
        S_SEG(last, ms, 0);
        S_SEG(ms, me, 1);
        last = pos = me;
    }
    S_SEG(last, len, 0);
#undef S_SEG

    /* fold the segments as the Rust tokenizers' SplitDelimiterBehavior does */
    uint32_t *g = *seg;
    size_t first_out = out->n;
    bool prev_match = false;
    if (p->behavior == PL_TOK_SPLIT_MERGED_NEXT) {
        for (size_t i = n; i-- > 0;) {
            bool m = g[3 * i + 2];
            if (m && !prev_match && out->n > first_out) {
                uint32_t *l = &out->span[2 * (out->n - 1)];
                l[1] += l[0] - (uint32_t)(off + g[3 * i]);
                l[0] = (uint32_t)(off + g[3 * i]);
            } else if ((st = s_span_add(out, off + g[3 * i], g[3 * i + 1] - g[3 * i]))) {
                return st;
            }
            prev_match = m;
        }
        for (size_t a = first_out, b = out->n; a + 1 < b; a++, b--) {
            uint32_t t0 = out->span[2 * a], t1 = out->span[2 * a + 1];
            out->span[2 * a] = out->span[2 * (b - 1)];
            out->span[2 * a + 1] = out->span[2 * (b - 1) + 1];
            out->span[2 * (b - 1)] = t0, out->span[2 * (b - 1) + 1] = t1;
        }
        return PL_OK;
    }
    for (size_t i = 0; i < n; i++) {
        bool m = g[3 * i + 2], extend = false;
        if (p->behavior == PL_TOK_SPLIT_REMOVED && m) {
            prev_match = m;
            continue;
        }
        if (p->behavior == PL_TOK_SPLIT_MERGED_PREV)
            extend = m && !prev_match;
        else if (p->behavior == PL_TOK_SPLIT_CONTIGUOUS)
            extend = m == prev_match;
        if (extend && out->n > first_out)
            out->span[2 * (out->n - 1) + 1] = (uint32_t)(off + g[3 * i + 1]) - out->span[2 * (out->n - 1)];
        else if ((st = s_span_add(out, off + g[3 * i], g[3 * i + 1] - g[3 * i])))
            return st;
        prev_match = m;
    }
    return PL_OK;
}

static void s_pieces_swap(pl_tok_pieces_t *a, pl_tok_pieces_t *b)
{
    pl_tok_pieces_t t = *a;
    *a = *b;
    *b = t;
}

/* Rebuild every piece of a into b: prefix (when the piece does not start with it) and ' ' ->
 * replacement, as ByteLevel's add_prefix_space and Metaspace do. */
static pl_status_t s_rewrite(const pl_tok_pieces_t *a, const char *prefix, size_t prefix_len,
                             const char *rep, size_t rep_len, bool first_only, bool first,
                             pl_tok_pieces_t *b)
{
    pl_status_t st = PL_OK;
    b->buf.len = 0;
    b->n = 0;
    for (size_t i = 0; i < a->n && !st; i++) {
        const char *s = a->buf.buf + a->span[2 * i];
        size_t len = a->span[2 * i + 1], start = b->buf.len;
        pl_tok_buf_t *o = &b->buf;
        bool has = rep ? (len >= rep_len && memcmp(s, rep, rep_len) == 0) || (len && s[0] == ' ')
                       : len >= prefix_len && memcmp(s, prefix, prefix_len) == 0;
        if (prefix && !has && (!first_only || (first && i == 0)))
            st = pl_tok_buf_add(o, prefix, prefix_len);
        if (!st)
            st = rep ? s_replace(o, s, len, " ", 1, rep, rep_len) : pl_tok_buf_add(o, s, len);
        if (!st)
            st = s_span_add(b, start, b->buf.len - start);
    }
    return st;
}

pl_status_t pl_tok_pretokenize(const pl_tokenizer_t *t, const char *seg, size_t len, bool first,
                               pcre2_match_data *md, pl_tok_pieces_t *out)
{
    pl_tok_pieces_t b = {0};
    uint32_t *segs = NULL;
    size_t seg_cap = 0;
    pl_status_t st;

    out->buf.len = 0;
    out->n = 0;
    if ((st = pl_tok_buf_add(&out->buf, seg, len)))
        goto out;
    for (int i = 0; i < t->n_norm; i++) {
        b.buf.len = 0;
        if ((st = pl_tok_buf_add(&b.buf, "", 0)) ||
            (st = s_normalize(&t->norm[i], out->buf.buf, out->buf.len, &b.buf)))
            goto out;
        pl_tok_buf_t tmp = out->buf;
        out->buf = b.buf;
        b.buf = tmp;
    }
    if ((st = s_span_add(out, 0, out->buf.len)))
        goto out;
    for (int i = 0; i < t->n_pre; i++) {
        const pl_tok_pre_t *p = &t->pre[i];
        pl_tok_pre_t split = *p;
        if (p->kind == PL_TOK_PRE_BYTELEVEL && p->add_prefix_space) {
            if ((st = s_rewrite(out, " ", 1, NULL, 0, false, first, &b)))
                goto out;
            s_pieces_swap(out, &b);
        } else if (p->kind == PL_TOK_PRE_METASPACE) {
            const char *pre = p->prepend == PL_TOK_PREPEND_NEVER ? NULL : p->literal;
            if ((st = s_rewrite(out, pre, p->literal_len, p->literal, p->literal_len,
                                p->prepend == PL_TOK_PREPEND_FIRST, first, &b)))
                goto out;
            s_pieces_swap(out, &b);
            split.re = NULL;
            split.behavior = PL_TOK_SPLIT_MERGED_NEXT;
            split.invert = false;
            if (!p->split)
                continue;
        } else if (p->kind == PL_TOK_PRE_BYTELEVEL) {
            split.behavior = PL_TOK_SPLIT_ISOLATED;
            split.invert = false;
            if (!p->re)
                continue;
        }
        b.n = 0;
        for (size_t k = 0; k < out->n; k++)
            if ((st = s_split(&split, out, out->span[2 * k], out->span[2 * k + 1], md, &b, &segs,
                              &seg_cap)))
                goto out;
        uint32_t *sp = out->span;
        size_t cap = out->cap;
        out->span = b.span, out->cap = b.cap, out->n = b.n;
        b.span = sp, b.cap = cap;
    }
out:
    pl_tok_pieces_free(&b);
    free(segs);
    return st;
}

void pl_tok_pieces_free(pl_tok_pieces_t *p)
{
    pl_tok_buf_free(&p->buf);
    free(p->span);
    memset(p, 0, sizeof(*p));
}
