/* A training job's token stream (train_data.h): the ids file parser, text through the model's
 * tokenizer, and the step's windows. */
#include "pipeline/train_data.h"

#include "common/util.h"
#include "model/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pl_train_data {
    int32_t *ids;
    size_t n;
};

void pl_train_data_destroy(pl_train_data_t **d_p)
{
    if (!d_p || !*d_p)
        return;
    free((*d_p)->ids);
    free(*d_p);
    *d_p = NULL;
}

size_t pl_train_data_len(const pl_train_data_t *d)
{
    return d->n;
}

static bool s_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

pl_status_t pl_train_data_parse_ids(const char *text, size_t len, const char *origin, int vocab,
                                    pl_train_data_t **d_p)
{
    if (vocab < 1)
        return pl_error(PL_ERR_INVALID, "%s: vocabulary of %d", origin, vocab);
    pl_train_data_t *d = calloc(1, sizeof(*d));
    size_t cap = 0, line = 1;
    pl_status_t rc = PL_OK;
    if (!d)
        return pl_error(PL_ERR_NOMEM, "%s", origin);
    for (size_t i = 0; i < len;) {
        if (s_space(text[i])) {
            line += text[i++] == '\n';
            continue;
        }
        size_t e = i;
        while (e < len && !s_space(text[e]))
            e++;
        int w = e - i > 20 ? 20 : (int)(e - i); /* as much of the word as an error shows */
        int64_t v = 0;
        for (size_t j = i; j < e; j++) {
            if (text[j] < '0' || text[j] > '9') {
                rc = pl_error(PL_ERR_INVALID, "%s:%zu: token %zu: expected a decimal id, got "
                                              "'%.*s'",
                              origin, line, d->n, w, text + i);
                goto err;
            }
            if (v < vocab) /* past vocab it is refused below; stop growing */
                v = v * 10 + (text[j] - '0');
        }
        if (v >= vocab) {
            rc = pl_error(PL_ERR_RANGE, "%s:%zu: token %zu: id %.*s is not below the vocabulary "
                                        "size %d",
                          origin, line, d->n, w, text + i, vocab);
            goto err;
        }
        if (d->n == cap) {
            size_t nc = cap ? 2 * cap : 1024;
            int32_t *p = realloc(d->ids, nc * sizeof(*p));
            if (!p) {
                rc = pl_error(PL_ERR_NOMEM, "%s: %zu tokens", origin, d->n);
                goto err;
            }
            d->ids = p, cap = nc;
        }
        d->ids[d->n++] = (int32_t)v;
        i = e;
    }
    if (!d->n) {
        rc = pl_error(PL_ERR_INVALID, "%s: no token ids", origin);
        goto err;
    }
    *d_p = d;
    return PL_OK;
err:
    pl_train_data_destroy(&d);
    return rc;
}

pl_status_t pl_train_data_load_ids(const char *path, int vocab, pl_train_data_t **d_p)
{
    char *buf;
    size_t len;
    pl_status_t rc = pl_file_read(path, PL_TRAIN_DATA_MAX_BYTES, &buf, &len);
    if (rc != PL_OK)
        return rc;
    rc = pl_train_data_parse_ids(buf, len, path, vocab, d_p);
    free(buf);
    return rc;
}

pl_status_t pl_train_data_load_text(const char *path, const char *model_dir, int vocab,
                                    pl_train_data_t **d_p)
{
    char *buf = NULL;
    size_t len;
    pl_tokenizer_t *tok = NULL;
    pl_train_data_t *d = NULL;
    pl_status_t rc = pl_file_read(path, PL_TRAIN_DATA_MAX_BYTES, &buf, &len);
    if (rc != PL_OK)
        return rc;
    if ((rc = pl_tokenizer_load(model_dir, &tok)) != PL_OK) {
        rc = pl_error_prefix(rc, "%s needs the model's tokenizer: ", path);
        goto out;
    }
    if (!(d = calloc(1, sizeof(*d)))) {
        rc = pl_error(PL_ERR_NOMEM, "%s", path);
        goto out;
    }
    if ((rc = pl_tokenizer_encode(tok, buf, len, PL_TOK_ENCODE_DEFAULT, &d->ids, &d->n)) !=
        PL_OK) {
        rc = pl_error_prefix(rc, "%s: ", path);
        goto out;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->ids[i] < 0 || d->ids[i] >= vocab) {
            rc = pl_error(PL_ERR_RANGE, "%s: token %zu: the tokenizer's id %d is not below the "
                                        "model's vocabulary size %d",
                          path, i, d->ids[i], vocab);
            goto out;
        }
    if (!d->n) {
        rc = pl_error(PL_ERR_INVALID, "%s: no text", path);
        goto out;
    }
    *d_p = d, d = NULL;
out:
    pl_train_data_destroy(&d);
    pl_tokenizer_destroy(&tok);
    free(buf);
    return rc;
}

pl_status_t pl_train_data_step(const pl_train_data_t *d, int seq_len, int n_mb, int64_t step,
                               int32_t *tokens)
{
    if (seq_len < 1 || n_mb < 1 || step < 0 || d->n < (size_t)seq_len + 1)
        return pl_error(PL_ERR_RANGE, "training data: %zu tokens, fewer than one window of "
                                      "seq_len %d + 1 (or step %lld, %d microbatches)",
                        d->n, seq_len, (long long)step, n_mb);
    uint64_t span = d->n - (size_t)seq_len; /* start positions 0 .. span - 1 */
    for (int m = 0; m < n_mb; m++) {
        uint64_t g = (uint64_t)step * (uint64_t)n_mb + (uint64_t)m;
        /* (g * seq_len) mod span without overflow */
        uint64_t at = ((g % span) * ((uint64_t)seq_len % span)) % span;
        memcpy(tokens + (size_t)m * (seq_len + 1), d->ids + at,
               sizeof(int32_t) * ((size_t)seq_len + 1));
    }
    return PL_OK;
}
