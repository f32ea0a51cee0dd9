/* The GGUF v3 writer behind pl-mkmodel: a growable header buffer, tensor offsets aligned as the
 * reader checks them, and the data streamed tensor by tensor. */
#include "model/gguf_write.h"

#include "model/gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t nbytes;
} s_tensor_t;

struct pl_gguf_writer {
    unsigned char *kv, *ti; /* metadata and tensor-info bytes */
    size_t kv_len, kv_cap, ti_len, ti_cap;
    uint64_t n_kv, n_t, data_len;
    s_tensor_t *t;
    size_t cur;      /* the tensor being written */
    uint64_t cur_at; /* bytes of it written so far */
    bool failed;
};

static void s_put(pl_gguf_writer_t *w, bool ti, const void *p, size_t n)
{
    unsigned char **buf = ti ? &w->ti : &w->kv;
    size_t *len = ti ? &w->ti_len : &w->kv_len, *cap = ti ? &w->ti_cap : &w->kv_cap;
    if (w->failed)
        return;
    if (*len + n > *cap) {
        size_t c = (*cap ? *cap * 2 : 4096) + n;
        unsigned char *g = realloc(*buf, c);
        if (!g) {
            w->failed = true;
            return;
        }
        *buf = g;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
}

static void s_le(pl_gguf_writer_t *w, bool ti, uint64_t v, int n)
{
    unsigned char b[8];
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    s_put(w, ti, b, (size_t)n);
}

static void s_string(pl_gguf_writer_t *w, bool ti, const char *s)
{
    s_le(w, ti, strlen(s), 8);
    s_put(w, ti, s, strlen(s));
}

static pl_status_t s_key(pl_gguf_writer_t *w, const char *key, pl_gguf_vtype_t t)
{
    s_string(w, false, key);
    s_le(w, false, (uint64_t)t, 4);
    w->n_kv++;
    return w->failed ? pl_error(PL_ERR_NOMEM, "gguf writer: out of memory") : PL_OK;
}

pl_status_t pl_gguf_writer_new(pl_gguf_writer_t **w_p)
{
    pl_gguf_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return pl_error(PL_ERR_NOMEM, "gguf writer: out of memory");
    *w_p = w;
    return PL_OK;
}

void pl_gguf_writer_destroy(pl_gguf_writer_t **w_p)
{
    pl_gguf_writer_t *w = w_p ? *w_p : NULL;
    if (!w)
        return;
    free(w->kv);
    free(w->ti);
    free(w->t);
    free(w);
    *w_p = NULL;
}

pl_status_t pl_gguf_writer_str(pl_gguf_writer_t *w, const char *key, const char *v)
{
    pl_status_t st = s_key(w, key, PL_GGUF_STR);
    s_string(w, false, v);
    return st ? st : w->failed ? pl_error(PL_ERR_NOMEM, "gguf writer: out of memory") : PL_OK;
}

pl_status_t pl_gguf_writer_u32(pl_gguf_writer_t *w, const char *key, uint32_t v)
{
    pl_status_t st = s_key(w, key, PL_GGUF_U32);
    s_le(w, false, v, 4);
    return st;
}

pl_status_t pl_gguf_writer_f32(pl_gguf_writer_t *w, const char *key, float v)
{
    uint32_t b;
    pl_status_t st = s_key(w, key, PL_GGUF_F32);
    memcpy(&b, &v, 4);
    s_le(w, false, b, 4);
    return st;
}

static pl_status_t s_arr(pl_gguf_writer_t *w, const char *key, pl_gguf_vtype_t elem, size_t n)
{
    pl_status_t st = s_key(w, key, PL_GGUF_ARR);
    s_le(w, false, (uint64_t)elem, 4);
    s_le(w, false, n, 8);
    return st;
}

pl_status_t pl_gguf_writer_arr_str(pl_gguf_writer_t *w, const char *key, const char *const *v,
                                   size_t n)
{
    pl_status_t st = s_arr(w, key, PL_GGUF_STR, n);
    for (size_t i = 0; i < n; i++)
        s_string(w, false, v[i]);
    return st ? st : w->failed ? pl_error(PL_ERR_NOMEM, "gguf writer: out of memory") : PL_OK;
}

pl_status_t pl_gguf_writer_arr_f32(pl_gguf_writer_t *w, const char *key, const float *v,
                                   size_t n)
{
    pl_status_t st = s_arr(w, key, PL_GGUF_F32, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        s_le(w, false, b, 4);
    }
    return st ? st : w->failed ? pl_error(PL_ERR_NOMEM, "gguf writer: out of memory") : PL_OK;
}

pl_status_t pl_gguf_writer_arr_i32(pl_gguf_writer_t *w, const char *key, const int32_t *v,
                                   size_t n)
{
    pl_status_t st = s_arr(w, key, PL_GGUF_I32, n);
    for (size_t i = 0; i < n; i++)
        s_le(w, false, (uint32_t)v[i], 4);
    return st ? st : w->failed ? pl_error(PL_ERR_NOMEM, "gguf writer: out of memory") : PL_OK;
}

static uint64_t s_align(uint64_t v)
{
    return (v + PL_GGUF_DEFAULT_ALIGNMENT - 1) / PL_GGUF_DEFAULT_ALIGNMENT *
           PL_GGUF_DEFAULT_ALIGNMENT;
}

pl_status_t pl_gguf_writer_tensor(pl_gguf_writer_t *w, const char *name, pl_wtype_t dt, int ndim,
                                  const int64_t *ne)
{
    size_t row;
    uint64_t rows = 1;
    s_tensor_t *g;
    pl_status_t st;

    if (ndim < 1 || ndim > 4)
        return pl_error(PL_ERR_INVALID, "gguf writer: tensor '%s': %d dimensions", name, ndim);
    if ((st = pl_wtype_row_bytes(dt, ne[0], &row)))
        return pl_error_prefix(st, "gguf writer: tensor '%s': ", name);
    for (int d = 1; d < ndim; d++)
        rows *= (uint64_t)ne[d];
    if (!(g = realloc(w->t, (w->n_t + 1) * sizeof(*g))))
        return pl_error(PL_ERR_NOMEM, "gguf writer: out of memory");
    w->t = g;
    w->t[w->n_t].nbytes = rows * row;
    s_string(w, true, name);
    s_le(w, true, (uint64_t)ndim, 4);
    for (int d = 0; d < ndim; d++)
        s_le(w, true, (uint64_t)ne[d], 8);
    s_le(w, true, pl_gguf_ggml_type(dt), 4);
    s_le(w, true, w->data_len, 8);
    w->data_len = s_align(w->data_len + rows * row);
    w->n_t++;
    return w->failed ? pl_error(PL_ERR_NOMEM, "gguf writer: out of memory") : PL_OK;
}

static pl_status_t s_write(FILE *f, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, f) != n)
        return pl_error(PL_ERR_IO, "gguf writer: write: %s", strerror(errno));
    return PL_OK;
}

static pl_status_t s_zeros(FILE *f, size_t n)
{
    static const unsigned char z[PL_GGUF_DEFAULT_ALIGNMENT];
    return s_write(f, z, n);
}

pl_status_t pl_gguf_writer_header(pl_gguf_writer_t *w, FILE *f)
{
    unsigned char h[24];
    uint64_t len;
    pl_status_t st;

    if (w->failed)
        return pl_error(PL_ERR_NOMEM, "gguf writer: out of memory");
    memcpy(h, PL_GGUF_MAGIC, 4);
    for (int i = 0; i < 4; i++)
        h[4 + i] = (unsigned char)(3u >> (8 * i));
    for (int i = 0; i < 8; i++) {
        h[8 + i] = (unsigned char)(w->n_t >> (8 * i));
        h[16 + i] = (unsigned char)(w->n_kv >> (8 * i));
    }
    len = 24 + w->kv_len + w->ti_len;
    if ((st = s_write(f, h, 24)) || (st = s_write(f, w->kv, w->kv_len)) ||
        (st = s_write(f, w->ti, w->ti_len)))
        return st;
    return s_zeros(f, (size_t)(s_align(len) - len));
}

pl_status_t pl_gguf_writer_data(pl_gguf_writer_t *w, FILE *f, const void *bytes, size_t n)
{
    pl_status_t st;
    if (w->cur >= w->n_t || n > w->t[w->cur].nbytes - w->cur_at)
        return pl_error(PL_ERR_INVALID, "gguf writer: more data than the tensors hold");
    if ((st = s_write(f, bytes, n)))
        return st;
    w->cur_at += n;
    if (w->cur_at == w->t[w->cur].nbytes) {
        uint64_t pad = s_align(w->cur_at) - w->cur_at;
        w->cur++;
        w->cur_at = 0;
        return s_zeros(f, (size_t)pad);
    }
    return PL_OK;
}

bool pl_gguf_writer_done(const pl_gguf_writer_t *w)
{
    return w->cur == w->n_t;
}
